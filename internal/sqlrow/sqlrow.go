// Package sqlrow decides, for the SQL backends (pgoutbox, mysqloutbox),
// what a stored row changed by hand means: which columns keep the entry
// from being published, and the reason it is parked with, refused
// requeueing for and shown with. Only three columns can hold such a value:
// headers (bytes [headercodec.Decode] does not accept), topic (empty, it
// names no topic) and partition (outside 0..partitions-1 no relay fetches
// it).
package sqlrow

import (
	"fmt"
	"strings"

	"github.com/outboxrelay/outbox/internal/headercodec"
)

// FixAdvice ends every reason: what the operator does about it.
const FixAdvice = "inspect it (outbox show ID), fix the column in the table and requeue it, or cancel it"

// EmptyTopicReason is the reason an entry whose topic column is empty is
// parked with and refused requeueing for; pkg names the backend.
func EmptyTopicReason(pkg string) string {
	return pkg + ": empty topic column: the entry names no topic, so it cannot be published; " + FixAdvice
}

// PartitionReason is the reason an entry whose partition column is outside
// 0..partitions-1 is refused requeueing for (and shown with by Lookup).
func PartitionReason(pkg string, partition int64, partitions int) string {
	return fmt.Sprintf("%s: partition column is %d, outside 0..%d: no relay fetches the entry, so it cannot be published; "+
		"inspect it (outbox show ID), set the column to the partition of its key (or any partition in range) and requeue it if parked, or cancel it",
		pkg, partition, partitions-1)
}

// Check is what can be decoded of a stored row, and what cannot.
type Check struct {
	// Headers are the decoded headers (nil when they do not decode).
	Headers map[string]string
	// Reason names every column that keeps the entry from being
	// published, and the fix; "" when there is none.
	Reason string
}

// CheckRow decodes the headers of a row and checks the columns that can
// keep it from being published. partitions is the outbox's partition
// count; 0 skips the partition check (a fetch reads only rows of the
// partition it was asked for).
func CheckRow(pkg, topic string, rawHeaders []byte, partition int64, partitions int) Check {
	var reasons []string
	if partitions > 0 && (partition < 0 || partition >= int64(partitions)) {
		reasons = append(reasons, PartitionReason(pkg, partition, partitions))
	}
	if topic == "" {
		reasons = append(reasons, EmptyTopicReason(pkg))
	}
	h, err := headercodec.Decode(pkg, rawHeaders)
	if err != nil {
		reasons = append(reasons, headercodec.Reason(pkg, err, FixAdvice))
	}
	return Check{Headers: h, Reason: strings.Join(reasons, "; also ")}
}

// WithReason is the LastError that Parked and Lookup show for a row
// CheckRow found a reason for: the reason, followed by the stored last
// error when that is something else (a row changed after it was parked for
// another reason, or requeued and not yet fetched again).
func WithReason(stored, reason string) string {
	if reason == "" {
		return stored
	}
	if stored == "" || stored == reason {
		return reason
	}
	return reason + " (stored last error: " + stored + ")"
}
