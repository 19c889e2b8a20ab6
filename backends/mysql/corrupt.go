package mysqloutbox

import (
	"fmt"
	"strings"

	"github.com/outboxrelay/outbox/internal/headercodec"
)

// This file decides what a row changed by hand means, column by column
// (docs/mysql.md, "Corrupt rows"). Only three columns can hold a value
// that stops an entry from being published: headers (bytes the decoder
// does not accept), topic (empty: it names no topic) and partition
// (outside 0..Partitions()-1 no relay fetches it). A fetch parks a row of
// the first two kinds (it never reads a row of the third), Requeue refuses
// all three, and Parked and Lookup name them in LastError.

// pkg names this package in the texts of the header codec.
const pkg = "mysqloutbox"

// fixAdvice ends every reason: what the operator does about it.
const fixAdvice = "inspect it (outbox show ID), fix the column in the table and requeue it, or cancel it"

// emptyTopicReason is the reason an entry whose topic column is empty is
// parked with and refused requeueing for.
const emptyTopicReason = "mysqloutbox: empty topic column: the entry names no topic, so it cannot be published; " + fixAdvice

// partitionReason is the reason an entry whose partition column is outside
// 0..partitions-1 is refused requeueing for (and shown with by Lookup).
func partitionReason(partition int64, partitions int) string {
	return fmt.Sprintf("mysqloutbox: partition column is %d, outside 0..%d: no relay fetches the entry, so it cannot be published; "+
		"inspect it (outbox show ID), set the column to the partition of its key (or any partition in range) and requeue it if parked, or cancel it",
		partition, partitions-1)
}

// rowCheck is what can be decoded of a stored row, and what cannot.
type rowCheck struct {
	// headers are the decoded headers (nil when they do not decode).
	headers map[string]string
	// reason names every column that keeps the entry from being
	// published, and the fix; "" when there is none.
	reason string
}

// checkRow decodes the headers of a row and checks the columns that can
// keep it from being published. partitions is the outbox's partition
// count; 0 skips the partition check (a fetch reads only rows of the
// partition it was asked for).
func checkRow(topic string, rawHeaders []byte, partition int64, partitions int) rowCheck {
	var c rowCheck
	var reasons []string
	if partitions > 0 && (partition < 0 || partition >= int64(partitions)) {
		reasons = append(reasons, partitionReason(partition, partitions))
	}
	if topic == "" {
		reasons = append(reasons, emptyTopicReason)
	}
	h, err := headercodec.Decode(pkg, rawHeaders)
	if err != nil {
		reasons = append(reasons, headercodec.Reason(pkg, err, fixAdvice))
	}
	c.headers = h
	c.reason = strings.Join(reasons, "; also ")
	return c
}

// withReason is the LastError that Parked and Lookup show for a row
// checkRow found a reason for: the reason, followed by the stored last
// error when that is something else (a row changed after it was parked for
// another reason, or requeued and not yet fetched again).
func withReason(stored, reason string) string {
	if reason == "" {
		return stored
	}
	if stored == "" || stored == reason {
		return reason
	}
	return reason + " (stored last error: " + stored + ")"
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
