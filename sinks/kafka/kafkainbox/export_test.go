package kafkainbox

// RebalanceWaiting reports whether kgo signalled that a rebalance waits
// for the poll being handled.
func (c *Consumer[Tx]) RebalanceWaiting() bool { return c.hurry.Load() }
