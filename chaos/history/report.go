package history

import (
	"fmt"
	"strings"
	"time"
)

// Report is the verdict of [History.Check].
type Report struct {
	// Appended counts entries whose commit was confirmed; Unknown those
	// whose outcome stayed unknown, and UnknownDelivered those of them
	// that were delivered.
	Appended, Unknown, UnknownDelivered int
	// Delivered counts records at distinct offsets; Rereads counts records
	// the consumer read again at an offset it had already recorded.
	Delivered, Rereads int

	// Lost holds the committed entries never delivered, in append order.
	Lost []Entry
	// LostBeforeFaults counts lost entries committed before the first
	// fault, or recorded without a commit time (the others are counted by
	// the fault before their commit, FaultReport.Lost).
	LostBeforeFaults int
	// Duplicates counts deliveries of an ID beyond its first.
	Duplicates int
	// DuplicatesBeforeFaults counts duplicates delivered before the first
	// fault (or all of them when no fault was recorded).
	DuplicatesBeforeFaults int
	// OrderViolations holds, in partition and offset order, the first
	// deliveries that broke their key's commit order.
	OrderViolations []OrderViolation
	// Unexpected holds the first delivery of each ID never appended.
	Unexpected []Delivery

	// Faults holds one report per fault, in time order.
	Faults []FaultReport
	// Recovery quantiles over Faults (nearest rank); zero without faults.
	RecoveryP50, RecoveryP90, RecoveryMax time.Duration
}

// FaultReport is what is attributed to one fault.
type FaultReport struct {
	Fault
	// Duplicates delivered at or after this fault and before the next.
	Duplicates int
	// Lost counts lost entries committed at or after this fault and
	// before the next (by Entry.At).
	Lost int
	// Recovery is the largest delivery gap of a partition after the fault
	// (see the package doc).
	Recovery time.Duration
	// Partitions holds each partition's own largest gap in the fault's
	// window, by the partition's name ("outbox partition 3", or the broker's
	// "topic/partition"): the time until it delivered again. Only
	// partitions that delivered before the fault are in it.
	Partitions map[string]time.Duration
}

// OrderViolation is a first delivery that broke its key's commit order.
type OrderViolation struct {
	Key string
	// ID and Seq are the entry delivered out of order.
	ID  string
	Seq int64
	// After and AfterID are the highest Seq of the key delivered before.
	After   int64
	AfterID string
	// Delivery is where the entry was delivered.
	Delivery Delivery
	Reason   string
}

func (v OrderViolation) String() string {
	return fmt.Sprintf("key %q: %s (id %s at %s/%d@%d, after id %s)",
		v.Key, v.Reason, v.ID, v.Delivery.Topic, v.Delivery.Partition, v.Delivery.Offset, v.AfterID)
}

// OK reports whether nothing was lost, nothing was delivered out of
// order and nothing was delivered that was never appended. Duplicates are
// allowed (delivery is at least once); bound them with
// [Report.MaxDuplicatesPerFault].
func (r Report) OK() bool {
	return len(r.Lost) == 0 && len(r.OrderViolations) == 0 && len(r.Unexpected) == 0
}

// MaxDuplicatesPerFault is the largest number of duplicates attributed to
// one fault, counting those before the first fault as one more "fault".
func (r Report) MaxDuplicatesPerFault() int {
	m := r.DuplicatesBeforeFaults
	for _, f := range r.Faults {
		m = max(m, f.Duplicates)
	}
	return m
}

// TableHeader is the header of the Markdown table whose rows
// [Report.TableRow] writes.
const TableHeader = "| scenario | entries | faults | lost | duplicates (total / max per fault) | order violations | unexpected | recovery p50 / p90 / max |\n" +
	"|---|---:|---:|---:|---:|---:|---:|---|"

// TableRow is one row of a Markdown table under [TableHeader].
func (r Report) TableRow(scenario string) string {
	return fmt.Sprintf("| %s | %d | %d | %d | %d / %d | %d | %d | %s / %s / %s |",
		scenario, r.Appended+r.UnknownDelivered, len(r.Faults), len(r.Lost),
		r.Duplicates, r.MaxDuplicatesPerFault(), len(r.OrderViolations), len(r.Unexpected),
		dur(r.RecoveryP50), dur(r.RecoveryP90), dur(r.RecoveryMax))
}

func dur(d time.Duration) string { return d.Round(time.Millisecond).String() }

// String is a one-line summary followed, when the report is not OK, by up
// to five examples of each defect.
func (r Report) String() string {
	var b strings.Builder
	verdict := "OK"
	if !r.OK() {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, "%s: appended %d (+%d unknown, %d of them delivered), delivered %d, lost %d, duplicates %d (max %d per fault), order violations %d, unexpected %d, faults %d, recovery p50 %s p90 %s max %s",
		verdict, r.Appended, r.Unknown, r.UnknownDelivered, r.Delivered, len(r.Lost),
		r.Duplicates, r.MaxDuplicatesPerFault(), len(r.OrderViolations), len(r.Unexpected),
		len(r.Faults), dur(r.RecoveryP50), dur(r.RecoveryP90), dur(r.RecoveryMax))
	const n = 5
	for i, e := range r.Lost[:min(n, len(r.Lost))] {
		fmt.Fprintf(&b, "\n  lost: id %s key %q seq %d", e.ID, e.Key, e.Seq)
		if e.Partition != nil {
			fmt.Fprintf(&b, " partition %d", *e.Partition)
		}
		if i == n-1 && len(r.Lost) > n {
			fmt.Fprintf(&b, " (and %d more)", len(r.Lost)-n)
		}
	}
	for i, v := range r.OrderViolations[:min(n, len(r.OrderViolations))] {
		fmt.Fprintf(&b, "\n  order: %s", v)
		if i == n-1 && len(r.OrderViolations) > n {
			fmt.Fprintf(&b, " (and %d more)", len(r.OrderViolations)-n)
		}
	}
	for i, d := range r.Unexpected[:min(n, len(r.Unexpected))] {
		fmt.Fprintf(&b, "\n  unexpected: id %s at %s/%d@%d", d.ID, d.Topic, d.Partition, d.Offset)
		if i == n-1 && len(r.Unexpected) > n {
			fmt.Fprintf(&b, " (and %d more)", len(r.Unexpected)-n)
		}
	}
	return b.String()
}
