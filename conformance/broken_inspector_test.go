package conformance_test

import (
	"context"
	"slices"
	"time"

	"github.com/outboxrelay/outbox"
)

// inspectorVariants break Stats, Parked and Requeue (the stats-cancel-*
// ones through Cancel).
var inspectorVariants = []variant{
	{"stats-cancel-parked-uncounted", "Stats.Parked keeps counting parked entries after they are cancelled (a counter that Cancel does not update)", []string{"Inspector/StatsRightAfterEveryChange"}},
	{"stats-cancel-pending-uncounted", "Stats.Pending and Due keep counting pending entries after they are cancelled", []string{"Inspector/StatsRightAfterEveryChange", "Canceler/CancelsPendingAndScheduled", "Canceler/CancelAfterReleaseOrLeaseEnd"}},
	{"stats-requeue-still-parked", "Stats.Parked keeps counting requeued entries", []string{"Inspector/StatsRightAfterEveryChange"}},
	{"stats-due-ignores-retry-time", "Stats.Due counts an entry retrying in the future as due (by its append time)", []string{"Inspector/StatsRightAfterEveryChange"}},
	{"requeue-takes-retrying", "Requeue also requeues pending entries that failed and wait for their retry (attempts reset, due now), counting them", []string{"Inspector/RequeueIgnoresRetryingEntry"}},
	{"stats-oldest-due-is-now", "Stats reports the time of the call as OldestDue whenever an entry is due, so the lag always reads zero", []string{"Inspector/StatsRightAfterEveryChange"}},
	{"parked-by-append-order", "Parked lists parked entries in the order they were parked, not by ID", []string{"Inspector/ParkedListsByIDInPages"}},
	{"requeue-keeps-attempts", "Requeue moves parked entries back to pending but keeps their Attempts", []string{"Inspector/RequeueResetsAttemptsDueNow"}},
	{"stats-claimed-not-pending", "Stats.Pending leaves out the entries claimed right now", []string{"Inspector/StatsCounts", "Inspector/StatsRightAfterEveryChange"}},
	{"requeue-keeps-order", "a requeued entry keeps its place from its first append, ahead of the entries appended after it", []string{"Inspector/RequeuedEntryOrderedAsIfAppendedNow"}},
}

func (w *broken) Stats(ctx context.Context) (outbox.Stats, error) {
	st, err := w.Backend.Stats(w.ctx(ctx))
	if err != nil {
		return st, err
	}
	w.mu.Lock()
	g := w.ghosts
	var retrying []string
	for id := range w.retrying {
		retrying = append(retrying, id)
	}
	w.mu.Unlock()
	st.Pending += g.Pending
	st.Due += g.Due
	st.Parked += g.Parked
	if g.Due > 0 && st.OldestDue.IsZero() {
		st.OldestDue = time.Now()
	}
	if w.variant == "stats-claimed-not-pending" {
		w.mu.Lock()
		for _, l := range w.claimedBy {
			if n := w.newest[l.Partition]; n.Version == l.Version && time.Now().Before(n.Expires) && !w.freed[outbox.Lease{Partition: n.Partition, Owner: n.Owner, Version: n.Version}] {
				st.Pending--
			}
		}
		w.mu.Unlock()
	}
	if w.variant == "stats-oldest-due-is-now" && st.Due > 0 {
		st.OldestDue = time.Now()
	}
	for _, id := range retrying {
		if info, err := w.Backend.Lookup(ctx, id); err == nil && !info.Parked && info.DueAt.After(time.Now()) {
			st.Due++
			if st.OldestDue.IsZero() {
				st.OldestDue = info.CreatedAt
			}
		}
	}
	return st, nil
}

func (w *broken) Parked(ctx context.Context, after string, limit int) ([]outbox.Entry, error) {
	if got, ok, err := w.breakParked(w.ctx(ctx), after, limit); ok {
		return got, err
	}
	got, err := w.Backend.Parked(w.ctx(ctx), after, limit)
	if err == nil && w.variant == "parked-by-append-order" {
		slices.Reverse(got)
	}
	return got, err
}

// Requeue refuses the damaged entries (see FetchBatch), unless the
// variant is corrupt-requeue-allowed.
func (w *broken) Requeue(ctx context.Context, ids ...string) (int, error) {
	if w.emptyOK(len(ids)) {
		return 0, nil
	}
	var refused []outbox.Refusal
	if w.variant != "corrupt-requeue-allowed" {
		w.mu.Lock()
		keep := ids[:0:0]
		for _, id := range ids {
			if how, ok := w.corrupt[id]; ok {
				refused = append(refused, outbox.Refusal{ID: id, Reason: "simulated decoder: its " + how + " does not decode"})
				continue
			}
			keep = append(keep, id)
		}
		w.mu.Unlock()
		ids = keep
	}
	if w.variant == "requeue-keeps-attempts" {
		for _, id := range ids {
			if info, err := w.Backend.Lookup(ctx, id); err == nil && info.Parked {
				w.mu.Lock()
				w.overlay[id] = outbox.Entry{Attempts: info.Attempts, LastError: info.LastError}
				w.mu.Unlock()
			}
		}
	}
	if w.variant == "requeue-takes-retrying" {
		for _, id := range ids {
			if info, err := w.Backend.Lookup(ctx, id); err == nil && !info.Parked && info.Attempts > 0 {
				_ = w.Backend.MarkFailed(ctx, w.current(outbox.Lease{Partition: info.Partition}), []outbox.Failure{{ID: id, Error: info.LastError, Park: true}})
			}
		}
	}
	n, err := w.Backend.Requeue(w.ctx(ctx), ids...)
	if err == nil && len(refused) > 0 {
		err = &outbox.RequeueRefusedError{Refused: refused}
	}
	if w.variant == "requeue-keeps-order" && err == nil {
		w.mu.Lock()
		for _, id := range ids {
			w.requeued[id] = true
		}
		w.mu.Unlock()
	}
	if w.variant == "stats-requeue-still-parked" {
		w.mu.Lock()
		w.ghosts.Parked += int64(n)
		w.mu.Unlock()
	}
	return n, err
}

// recordClaims is the stats-claimed-not-pending variant's record of the
// entries of batch, claimed by lease.
func (w *broken) recordClaims(lease outbox.Lease, batch []outbox.Entry) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range batch {
		w.claimedBy[e.ID] = lease
	}
}

// requeuedFirst is the requeue-keeps-order variant's fetch: the requeued
// entries of batch come first (keeping their places from their first
// append).
func (w *broken) requeuedFirst(batch []outbox.Entry) {
	w.mu.Lock()
	defer w.mu.Unlock()
	slices.SortStableFunc(batch, func(a, b outbox.Entry) int {
		ra, rb := w.requeued[a.ID], w.requeued[b.ID]
		switch {
		case ra && !rb:
			return -1
		case rb && !ra:
			return 1
		}
		return 0
	})
}

// recordRetrying is the stats-due-ignores-retry-time variant's record of
// the IDs failed with a retry in the future.
func (w *broken) recordRetrying(failures []outbox.Failure) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, f := range failures {
		if !f.Park && f.Delay > 0 {
			w.retrying[f.ID] = true
		}
	}
}
