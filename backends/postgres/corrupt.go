package pgoutbox

import (
	"github.com/outboxrelay/outbox/internal/sqlrow"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// This file decides what a row changed by hand means, column by column
// (docs/postgres.md, "Corrupt rows"). Only three columns can hold a value
// that stops an entry from being published: headers (bytes the decoder
// does not accept), topic (empty, it names no topic) and partition (outside
// 0..Partitions()-1 no relay fetches it). FindPendingBatch parks a row of
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
func checkRow(topic string, rawHeaders []byte, partition int32, partitions int) rowCheck {
	c := sqlrow.CheckRow(pkgName, topic, rawHeaders, int64(partition), partitions)
	return rowCheck{headers: c.Headers, reason: c.Reason}
}

// attemptsOf reads the attempts column. A negative count (only a hand-made
// UPDATE writes one) reads as 0: the column is a counter this package
// owns, used for the retry policy and the per-key hold-back, which already
// treats attempts <= 0 as never attempted; a negative count carries no
// more than that, and parking a publishable entry for it would stop a
// message over bookkeeping. MarkFailed counts on from 0 likewise.
func attemptsOf(n int32) int {
	return int(max(n, 0))
}

// timeOf reads a timestamptz column. 'infinity' and '-infinity' (which
// only a hand-made UPDATE writes) read as the zero time, as NULL does:
// they name no instant, and a caller would otherwise see the year 1 or a
// scan error.
func timeOf(t pgtype.Timestamptz) time.Time {
	if !t.Valid || t.InfinityModifier != pgtype.Finite {
		return time.Time{}
	}
	return t.Time
}
