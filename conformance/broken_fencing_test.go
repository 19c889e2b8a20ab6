package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outboxrelay/outbox"
)

// fencingVariants break the fence of the lease-fenced methods
// (FindPendingBatch, MarkSent, MarkFailed, Release, RenewLease,
// ReleaseLease) through the helpers below.
var fencingVariants = []variant{
	{"stale-fetch-allowed", "FindPendingBatch with a stale lease uses the partition's newest lease instead", []string{"Fencing/StaleFindPendingBatch", "Fencing/SameOwnerReacquiredAfterExpiry"}},
	{"mark-sent-unfenced", "MarkSent with a stale lease uses the partition's newest lease instead", []string{"Fencing/StaleMarkSent", "Fencing/SameOwnerReacquiredAfterExpiry"}},
	{"mark-failed-unfenced", "MarkFailed with a stale lease uses the partition's newest lease instead", []string{"Fencing/StaleMarkFailed", "Fencing/SameOwnerReacquiredAfterExpiry"}},
	{"expired-lease-reacquired", "a fenced call with an expired lease nobody took over re-acquires the partition and goes ahead", []string{"Fencing/ExpiredFindPendingBatch", "Fencing/ExpiredMarkSent", "Fencing/ExpiredMarkFailed", "Fencing/ExpiredRelease", "Fencing/ReleasedLeaseIsFenced"}},
	{"mark-sent-any-partition", "MarkSent deletes the IDs it is given in whatever partition they are, checking only the lease it was given", []string{"Fencing/EntryOfAnotherPartitionUntouched"}},
	{"mark-failed-any-partition", "MarkFailed records failures of the IDs it is given in whatever partition they are, checking only the lease it was given", []string{"Fencing/EntryOfAnotherPartitionUntouched"}},
	{"release-into-lease-partition", "Release of an ID of another partition queues it in the lease's partition (as a script that adds the ID to the due set of the partition it was given would)", []string{"Fencing/EntryOfAnotherPartitionUntouched"}},
	{"fenced-calls-by-owner", "FindPendingBatch, MarkSent, MarkFailed and Release fence by owner only: a lease of the partition's current owner is taken for its current lease, whatever its version", []string{"Fencing/SameOwnerReacquiredAfterExpiry", "Fencing/ForgedLeaseIsFenced"}},
	{"renew-release-by-owner", "RenewLease and ReleaseLease compare the owner only: a lease of the partition's current owner is taken for its current lease, whatever its version", []string{"Fencing/SameOwnerReacquiredAfterExpiry", "Fencing/ForgedLeaseIsFenced", "Lease/ReleaseByOtherOwnerOrVersionIsNoop"}},
	{"release-unfenced", "Release with a stale lease uses the partition's newest lease instead", []string{"Fencing/StaleRelease", "Fencing/SameOwnerReacquiredAfterExpiry"}},
	{"empty-inputs-check-lease", "MarkSent, MarkFailed and Release check the lease even when they have nothing to do", []string{"Arguments/EmptyInputsAreNoops"}},
}

// current returns the newest lease of l's partition, or l.
func (w *broken) current(l outbox.Lease) outbox.Lease {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n, ok := w.newest[l.Partition]; ok {
		return n
	}
	return l
}

// byOwner is the fenced-calls-by-owner and renew-release-by-owner
// variants' fence: a lease of the partition's current owner is taken for
// its current lease.
func (w *broken) byOwner(l outbox.Lease, variant string) outbox.Lease {
	if w.variant != variant {
		return l
	}
	if n := w.current(l); n.Owner == l.Owner {
		return n
	}
	return l
}

// otherPartition reports the stored entry id when it is pending or parked
// in a partition other than partition.
func (w *broken) otherPartition(ctx context.Context, id string, partition int) (outbox.EntryInfo, bool) {
	info, err := w.Backend.Lookup(ctx, id)
	return info, err == nil && info.Partition != partition
}

// revive is the expired-lease-reacquired variant: when a fenced call
// failed with ErrLeaseLost and nobody else holds the partition, it
// re-acquires the partition for the lease's owner and returns the new
// lease to retry with.
func (w *broken) revive(ctx context.Context, lease outbox.Lease, err error) (outbox.Lease, bool) {
	if w.variant != "expired-lease-reacquired" || !errors.Is(err, outbox.ErrLeaseLost) {
		return lease, false
	}
	l, aerr := w.Backend.AcquireLease(ctx, lease.Partition, lease.Owner, time.Minute)
	return l, aerr == nil
}

// checkLease is the empty-inputs-check-lease variant's fence: lease must be
// the partition's newest, live lease.
func (w *broken) checkLease(_ context.Context, lease outbox.Lease) error {
	n := w.current(lease)
	if n.Owner != lease.Owner || n.Version != lease.Version || !time.Now().Before(n.Expires) {
		return fmt.Errorf("broken: lease %s v%d is not held: %w", lease.Owner, lease.Version, outbox.ErrLeaseLost)
	}
	return nil
}

// withStrays is the release-into-lease-partition variant's fetch: the
// entries of other partitions released into partition come first.
func (w *broken) withStrays(partition int, batch []outbox.Entry) []outbox.Entry {
	w.mu.Lock()
	defer w.mu.Unlock()
	if st := w.strays[partition]; len(st) > 0 {
		batch = append(st, batch...)
		delete(w.strays, partition)
	}
	return batch
}

// sentInOtherPartitions is the mark-sent-any-partition variant's MarkSent:
// the IDs of entries in a partition other than partition are marked sent
// there, with that partition's newest lease.
func (w *broken) sentInOtherPartitions(ctx context.Context, partition int, ids []string) error {
	for _, id := range ids {
		if info, ok := w.otherPartition(ctx, id, partition); ok {
			if err := w.Backend.MarkSent(ctx, w.current(outbox.Lease{Partition: info.Partition}), []string{id}); err != nil {
				return err
			}
		}
	}
	return nil
}

// failInOtherPartitions is the mark-failed-any-partition variant's
// MarkFailed: the failures of entries in a partition other than partition
// are recorded there, with that partition's newest lease.
func (w *broken) failInOtherPartitions(ctx context.Context, partition int, failures []outbox.Failure) error {
	for _, f := range failures {
		if info, ok := w.otherPartition(ctx, f.ID, partition); ok {
			if err := w.Backend.MarkFailed(ctx, w.current(outbox.Lease{Partition: info.Partition}), []outbox.Failure{f}); err != nil {
				return err
			}
		}
	}
	return nil
}

// queueStrays is the release-into-lease-partition variant's Release: the
// pending entries among ids of a partition other than partition are queued
// to be fetched from partition.
func (w *broken) queueStrays(ctx context.Context, partition int, ids []string) {
	for _, id := range ids {
		if info, ok := w.otherPartition(ctx, id, partition); ok && !info.Parked {
			w.mu.Lock()
			w.strays[partition] = append(w.strays[partition], info.Entry)
			w.mu.Unlock()
		}
	}
}
