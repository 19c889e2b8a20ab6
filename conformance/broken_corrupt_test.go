package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/outboxrelay/outbox"
)

// corruptVariants break the simulated decoder of fetchBatch (and
// Requeue's refusal of the damaged entries it parks).
var corruptVariants = []variant{
	{"corrupt-stalls", "FetchBatch (and FindPendingBatch) fails with the decoding error of a damaged entry at every call, so its partition stalls", []string{"Corrupt/ParkedWithReasonAndPartitionFlows", "Corrupt/RunLongerThanABatchDoesNotStall", "Corrupt/ReportedOnceByFetchBatch", "Corrupt/ReportedByFetchNext", "Corrupt/RequeueRefused"}},
	{"corrupt-parked-quietly", "FetchBatch parks a damaged entry but does not report it, so the relay neither logs nor counts the park", []string{"Corrupt/ReportedOnceByFetchBatch", "Corrupt/ReportedByFetchNext"}},
	{"corrupt-requeue-allowed", "Requeue moves a damaged entry back to pending, where it can never be published", []string{"Corrupt/RequeueRefused"}},
	{"fetch-batch-over-limit", "FetchBatch fills its entries up to limit besides the parks, so entries and parks together exceed limit", []string{"Corrupt/ParkedWithReasonAndPartitionFlows"}},
}

// fetchBatch simulates a backend that decodes what it stores: the entries
// the brokenHarness damaged (as its Corrupter) do not decode, so they are
// parked, with a reason, and reported, as the Postgres and Redis backends
// do. The corrupt-* variants break that.
func (w *broken) fetchBatch(ctx context.Context, lease outbox.Lease, limit int) (outbox.Batch, error) {
	batch, err := w.fetchRaw(ctx, lease, limit)
	if err != nil {
		return outbox.Batch{}, err
	}
	w.mu.Lock()
	damaged := maps.Clone(w.corrupt)
	w.mu.Unlock()
	var out outbox.Batch
	var parks []outbox.Failure
	for _, e := range batch {
		how, ok := damaged[e.ID]
		if !ok {
			out.Entries = append(out.Entries, e)
			continue
		}
		reason := fmt.Sprintf("simulated decoder: entry %s: its %s does not decode", e.ID, how)
		if w.variant == "corrupt-stalls" {
			return outbox.Batch{}, errors.New(reason)
		}
		parks = append(parks, outbox.Failure{ID: e.ID, Park: true, Error: reason})
		if w.variant != "corrupt-parked-quietly" {
			out.Parked = append(out.Parked, outbox.CorruptEntry{ID: e.ID, Topic: e.Topic, Key: e.Key, Reason: reason})
		}
	}
	if len(parks) > 0 {
		if err := w.Backend.MarkFailed(w.ctx(ctx), w.real(lease), parks); err != nil {
			return outbox.Batch{}, err
		}
		if w.variant == "fetch-batch-over-limit" && len(out.Entries) < limit {
			// Top the entries up to limit, not counting the parks.
			more, err := w.fetchRaw(ctx, lease, limit-len(out.Entries))
			if err != nil {
				return outbox.Batch{}, err
			}
			for _, e := range more {
				if _, bad := damaged[e.ID]; !bad {
					out.Entries = append(out.Entries, e)
				}
			}
		}
	}
	return out, nil
}

// Corrupt marks the stored entry id as damaged in the named way (the
// brokenHarness's Corrupter).
func (w *broken) Corrupt(id, how string) {
	w.mu.Lock()
	w.corrupt[id] = how
	w.mu.Unlock()
}

// Corruptions and Corrupt make brokenHarness a conformance.Corrupter over
// the simulated decoder of broken.FetchBatch: the memory backend stores
// typed values, so nothing in it can be damaged by hand, and TestMemory
// runs without a Corrupter (the suite skips the Corrupt cases there). The
// Corrupt cases run on it (TestSimulatedCorruption, and the corrupt-*
// variants) prove the cases, not the memory backend.
func (h brokenHarness) Corruptions() []string { return []string{"payload encoding", "headers field"} }

func (h brokenHarness) Corrupt(ctx context.Context, id, how string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	h.w.Corrupt(id, how)
	return nil
}
