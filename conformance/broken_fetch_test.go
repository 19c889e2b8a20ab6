package conformance_test

import (
	"context"
	"slices"
	"time"

	"github.com/outboxrelay/outbox"
)

// fetchVariants break the fetches: FindPendingBatch (fetchRaw, which
// every fetch shares), FetchBatch and FetchNext.
var fetchVariants = []variant{
	{"fifo-reversed", "FindPendingBatch returns each batch in reverse order", []string{"Fetch/FIFOWithinPartition", "Fetch/FIFOOneLargeTxSmallBatches", "Fetch/OrderedByRetryTime", "Claims/ComeBackInOrderAfterLeaseExpiry", "HoldBack/ManyHeldBackKeepOrder", "Relay/PerKeyOrderWithInjectedFailures"}},
	{"batch-limit-ignored", "FindPendingBatch fetches twice the limit", []string{"Fetch/BatchLimitHonoured"}},
	{"fetch-repeats-entry", "FindPendingBatch repeats the last entry of a batch that holds an attempted entry and has room (as the Redis claim did when it paged by an offset while moving held-back entries)", []string{"Fetch/EachEntryOnceAroundADueRetry", "Outcome/SentNeverFetchedAgain"}},
	{"fetch-shares-payload", "FindPendingBatch returns the Payload slice and Headers map of the first fetch of an ID on every later fetch of it", []string{"Fetch/BatchIsTheCallers"}},
	{"fetch-limit-unchecked", "FindPendingBatch with limit <= 0 returns no entries and nil instead of ErrInvalidArgument", []string{"Arguments/FindPendingBatchRejectsNonPositiveLimit"}},
	{"fetch-other-partitions", "FindPendingBatch also claims the due entries of the other partitions that nobody holds", []string{"Fetch/OtherPartitionsInvisible"}},
	{"entries-report-partition-zero", "fetched entries report Partition 0, whatever partition they are in", []string{"Append/PartitionIsPartitionOfKey"}},
	{"fetch-batch-reversed", "FetchBatch returns each batch in reverse order (FindPendingBatch is right)", []string{"BatchFetcher/SameBatchAsFindPendingBatch"}},
	{"prefetch-returns-in-flight", "FetchNext releases the entries in flight and returns them again, first", []string{"Prefetcher/LeavesInFlightOut"}},
	{"fetch-batch-unfenced", "FetchBatch with a stale lease uses the partition's newest lease instead (FindPendingBatch is fenced)", []string{"BatchFetcher/FencedLikeFindPendingBatch"}},
}

// FindPendingBatch is FetchBatch without the report of parks.
func (w *broken) FindPendingBatch(ctx context.Context, lease outbox.Lease, limit int) ([]outbox.Entry, error) {
	b, err := w.fetchBatch(ctx, lease, limit)
	return b.Entries, err
}

// FetchBatch is fetchBatch, which FindPendingBatch shares, broken by the
// fetch-batch-* variants that make the two differ.
func (w *broken) FetchBatch(ctx context.Context, lease outbox.Lease, limit int) (outbox.Batch, error) {
	switch w.variant {
	case "fetch-batch-unfenced":
		lease = w.current(lease)
	case "fetch-batch-ignores-pause":
		return w.fetchIgnoringPause(ctx, lease, limit)
	}
	b, err := w.fetchBatch(ctx, lease, limit)
	if err == nil && w.variant == "fetch-batch-reversed" {
		slices.Reverse(b.Entries)
	}
	return b, err
}

// FetchNext is FetchBatch, as the memory backend's FetchNext is
// FindPendingBatch (claimed entries are never returned again), so every
// variant breaks the relay's fetches ahead as it breaks its other fetches.
// The prefetch-returns-in-flight variant breaks what FetchNext adds.
func (w *broken) FetchNext(ctx context.Context, lease outbox.Lease, limit int, inFlight []outbox.Entry) (outbox.Batch, error) {
	switch w.variant {
	case "prefetch-returns-in-flight":
		if err := w.Backend.Release(ctx, lease, inFlightIDs(inFlight)); err != nil {
			return outbox.Batch{}, err
		}
	}
	return w.FetchBatch(ctx, lease, limit)
}

func inFlightIDs(entries []outbox.Entry) []string {
	ids := make([]string, len(entries))
	for i, e := range entries {
		ids[i] = e.ID
	}
	return ids
}

// fetchRaw is the memory backend's FindPendingBatch, broken as the
// variant says.
func (w *broken) fetchRaw(ctx context.Context, lease outbox.Lease, limit int) ([]outbox.Entry, error) {
	ctx = w.ctx(ctx)
	lease = w.real(lease)
	if w.beforeFetchOperate(ctx, lease) {
		return nil, nil
	}
	switch w.variant {
	case "stale-fetch-allowed":
		lease = w.current(lease)
	case "batch-limit-ignored":
		if limit > 0 {
			limit *= 2
		}
	}
	lease = w.byOwner(lease, "fenced-calls-by-owner")
	if w.variant == "fetch-limit-unchecked" && limit <= 0 {
		return nil, nil
	}
	batch, err := w.Backend.FindPendingBatch(ctx, lease, limit)
	if err == nil && w.variant == "fetch-other-partitions" {
		batch = append(batch, w.fetchOtherPartitions(ctx, lease.Partition, limit)...)
	}
	if l, ok := w.revive(ctx, lease, err); ok {
		batch, err = w.Backend.FindPendingBatch(ctx, l, limit)
	}
	if err != nil {
		return batch, err
	}
	return w.afterFetch(ctx, lease, limit, batch)
}

// afterFetch breaks (or records) the batch fetchRaw fetched under lease
// with limit, as the variant says.
func (w *broken) afterFetch(ctx context.Context, lease outbox.Lease, limit int, batch []outbox.Entry) ([]outbox.Entry, error) {
	switch w.variant {
	case "claims-stay-with-ended-lease":
		batch = w.leaveEndedClaims(lease, batch)
	case "stats-claimed-not-pending":
		w.recordClaims(lease, batch)
	case "input-retained":
		w.handInputs(batch)
	case "park-keeps-holding-back":
		return w.holdBackByKey(ctx, lease, batch, w.parkedKey, false)
	case "requeue-keeps-order":
		w.requeuedFirst(batch)
	case "entries-report-partition-zero":
		for i := range batch {
			batch[i].Partition = 0
		}
	case "fetch-shares-payload":
		w.handFirstFetch(batch)
	case "hold-back-whole-key", "empty-key-held-back":
		return w.holdBackByKey(ctx, lease, batch, w.failingID, w.variant == "empty-key-held-back")
	case "release-into-lease-partition":
		batch = w.withStrays(lease.Partition, batch)
	case "hold-back-first-failure-only", "requeue-keeps-attempts":
		w.overlayAttempts(batch)
	case "cancel-misses-returned":
		w.recordFetchedBy(lease, batch)
	case "lookup-finds-sent", "lookup-misses-claimed":
		w.recordFetched(batch)
	case "fifo-reversed":
		slices.Reverse(batch)
	case "fetch-repeats-entry":
		if n := len(batch); n > 0 && n < limit && slices.ContainsFunc(batch, func(e outbox.Entry) bool { return e.Attempts > 0 }) {
			batch = append(batch, batch[n-1].Clone())
		}
	case "hold-back-ignored":
		return w.holdBackKept(ctx, lease, batch)
	default:
		return w.afterFetchOperate(ctx, lease, batch)
	}
	return batch, nil
}

// fetchOtherPartitions is the fetch-other-partitions variant: it claims
// the due entries of every partition but partition that nobody holds.
func (w *broken) fetchOtherPartitions(ctx context.Context, partition, limit int) []outbox.Entry {
	var batch []outbox.Entry
	for p := range w.Partitions() {
		if p == partition {
			continue
		}
		if l, aerr := w.Backend.AcquireLease(ctx, p, "broken-fetch-other-partitions", time.Minute); aerr == nil {
			more, _ := w.Backend.FindPendingBatch(ctx, l, limit)
			batch = append(batch, more...)
			_ = w.Backend.ReleaseLease(ctx, l)
		}
	}
	return batch
}

// handFirstFetch is the fetch-shares-payload variant: every fetch of an ID
// returns the Payload slice and Headers map of its first fetch.
func (w *broken) handFirstFetch(batch []outbox.Entry) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, e := range batch {
		if first, ok := w.handed[e.ID]; ok {
			batch[i].Payload, batch[i].Headers = first.Payload, first.Headers
		} else {
			w.handed[e.ID] = e
		}
	}
}
