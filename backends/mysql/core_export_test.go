package mysqloutbox

// TrackedTxs reports how many transactions b holds partitions for, until
// Commit takes them or the transactions are garbage collected.
func TrackedTxs(b *Backend) int { return b.core.txs.len() }
