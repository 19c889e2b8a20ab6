package conformance_test

import (
	"context"
	"slices"

	"github.com/outboxrelay/outbox"
)

// partitionInspectorVariants break PartitionStats.
var partitionInspectorVariants = []variant{
	{"partition-stats-all-in-zero", "PartitionStats attributes the counts of every partition to partition 0 (the others report none)", []string{"PartitionInspector/CountsWhereTheEntriesAre", "PartitionInspector/OldestDuePerPartition"}},
	{"partition-stats-parked-uncounted", "PartitionStats reports Parked 0 for every partition", []string{"PartitionInspector/CountsWhereTheEntriesAre", "PartitionInspector/CountsAddUpToStats"}},
	{"partition-stats-skips-idle", "PartitionStats leaves out the partitions without entries or lease (as a GROUP BY over the entries would)", []string{"PartitionInspector/OnePerPartitionInOrder"}},
	{"partition-stats-expired-lease-shown", "PartitionStats shows the last lease granted on a partition until it is released, expired or not", []string{"PartitionInspector/ReleasedOrExpiredLeaseHasNoOwner"}},
	{"partition-stats-lease-unversioned", "PartitionStats shows the lease's Owner and Expires but Version 0", []string{"PartitionInspector/HeldLeaseShowsOwnerVersionAndExpiry"}},
}

func (w *broken) PartitionStats(ctx context.Context) ([]outbox.PartitionStats, error) {
	got, err := w.Backend.PartitionStats(w.ctx(ctx))
	if err != nil {
		return got, err
	}
	switch w.variant {
	case "partition-stats-all-in-zero":
		for i := 1; i < len(got); i++ {
			got[0].Pending += got[i].Pending
			got[0].Due += got[i].Due
			got[0].Parked += got[i].Parked
			if o := got[i].OldestDue; !o.IsZero() && (got[0].OldestDue.IsZero() || o.Before(got[0].OldestDue)) {
				got[0].OldestDue = o
			}
			got[i].Stats = outbox.Stats{}
		}
	case "partition-stats-parked-uncounted":
		for i := range got {
			got[i].Parked = 0
		}
	case "partition-stats-skips-idle":
		got = slices.DeleteFunc(got, func(ps outbox.PartitionStats) bool {
			return ps.Stats == (outbox.Stats{}) && ps.Lease.Owner == ""
		})
	case "partition-stats-expired-lease-shown":
		w.mu.Lock()
		for i := range got {
			if l, ok := w.shown[i]; ok && got[i].Lease.Owner == "" {
				got[i].Lease = l
			}
		}
		w.mu.Unlock()
	case "partition-stats-lease-unversioned":
		for i := range got {
			got[i].Lease.Version = 0
		}
	default:
		got = w.breakPartitionStats(ctx, got)
	}
	return got, nil
}
