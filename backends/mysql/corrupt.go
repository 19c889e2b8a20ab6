package mysqloutbox

import (
	"github.com/outboxrelay/outbox/internal/sqlrow"
)

// This file decides what a row changed by hand means, column by column
// (docs/mysql.md, "Corrupt rows"). Only three columns can hold a value
// that stops an entry from being published: headers (bytes the decoder
// does not accept), topic (empty: it names no topic) and partition
// (outside 0..Partitions()-1 no relay fetches it). A fetch parks a row of
// the first two kinds (it never reads a row of the third), Requeue refuses
// all three, and Parked and Lookup name them in LastError.

// emptyTopicReason is the reason an entry whose topic column is empty is
// parked with and refused requeueing for.
var emptyTopicReason = sqlrow.EmptyTopicReason(pkgName)

// rowCheck is what can be decoded of a stored row, and what cannot (see
// [sqlrow.Check]).
type rowCheck struct {
	headers map[string]string
	reason  string
}

// checkRow is [sqlrow.CheckRow] for this package.
func checkRow(topic string, rawHeaders []byte, partition int64, partitions int) rowCheck {
	c := sqlrow.CheckRow(pkgName, topic, rawHeaders, partition, partitions)
	return rowCheck{headers: c.Headers, reason: c.Reason}
}

// attemptsOf reads the attempts column. A negative count (only a hand-made
// UPDATE writes one) reads as 0: the column is a counter this package
// owns, used for the retry policy and the per-key hold-back (whose
// generated holds column treats attempts <= 0 as never attempted); parking
// a publishable entry for it would stop a message over bookkeeping.
// MarkFailed counts on from 0 likewise.
func attemptsOf(n int64) int {
	return int(max(n, 0))
}
