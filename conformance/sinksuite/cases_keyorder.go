package sinksuite

import (
	"context"
	"fmt"
	"testing"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backoff"
)

func keyOrderCases() []testCase {
	return []testCase{
		{"KeyOrder", "InterleavedKeys", keyOrderInterleaved},
		{"KeyOrder", "ConcurrentCalls", keyOrderConcurrent},
		{"KeyOrder", "FailureMidKey", keyOrderFailureMidKey},
	}
}

// requireKeyOrder skips the case unless the sink reports KeepsKeyOrder.
func requireKeyOrder(t *testing.T, s *env) {
	t.Helper()
	ko, ok := s.sink.(outbox.KeyOrderer)
	if !ok {
		t.Skip("the sink does not implement outbox.KeyOrderer: the relay gives it one entry per key per call")
	}
	if !ko.KeepsKeyOrder() {
		t.Skip("the sink reports KeepsKeyOrder false: the relay gives it one entry per key per call")
	}
}

// keyOrderInterleaved: 12 keys of 25 entries each, interleaved in one
// call, come out in order per key.
func keyOrderInterleaved(t *testing.T, s *env) {
	requireKeyOrder(t, s)
	var keys [][]outbox.Entry
	for k := range 12 {
		keys = append(keys, s.keyed(fmt.Sprintf("%s-k%d", s.prefix, k), 25))
	}
	entries := interleave(keys)
	s.publishOK(t, entries)
	msgs := s.expectReadable(t, entries, nil)
	expectKeyOrder(t, msgs, entries)
}

// keyOrderConcurrent: 4 concurrent calls of 6 keys each (disjoint, as
// the relay's partitions), 3 calls in a row per key, keep each key's
// order across and within the calls.
func keyOrderConcurrent(t *testing.T, s *env) {
	requireKeyOrder(t, s)
	const keysPer, perKey = 6, 8
	all := s.concurrently(t, 4, 3, func(w, c int) []outbox.Entry {
		var keys [][]outbox.Entry
		for k := range keysPer {
			key := fmt.Sprintf("%s-w%d-k%d", s.prefix, w, k)
			es := make([]outbox.Entry, perKey)
			for i := range es {
				es[i] = s.entry(key, c*perKey+i+1)
			}
			keys = append(keys, es)
		}
		return interleave(keys)
	})
	// Calls of one worker ran in sequence, so a key's entries of all its
	// calls are in order: all holds them in the order they were published.
	msgs := s.expectReadable(t, all, nil)
	expectKeyOrder(t, msgs, all)
}

// perEntryFaults returns the harness's PerEntry faults, skipping t when
// there is none.
func perEntryFaults(t *testing.T, s *env) []Fault {
	t.Helper()
	var out []Fault
	for _, f := range s.h.Faults() {
		if f.PerEntry && f.Apply != nil {
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		t.Skip("the harness offers no PerEntry fault (Harness.Faults)")
	}
	return out
}

// keyOrderFailureMidKey runs once per PerEntry fault: a key's fifth of
// ten entries is broken, interleaved with two clean keys in one call.
// After a retryable failure, none of the key's later entries may be
// reported published or written; after a permanent one they may, in
// order. The other keys publish in order; after the heal the failed
// entries publish again (after a retryable failure: in order behind the
// key's earlier ones).
func keyOrderFailureMidKey(t *testing.T, s *env) {
	requireKeyOrder(t, s)
	faults := perEntryFaults(t, s)
	for i, f := range faults {
		t.Run(f.Name, func(t *testing.T) {
			t.Parallel()
			sub := newEnv(t, s.newHarness)
			requireKeyOrder(t, sub)
			failMidKey(t, sub, perEntryFaults(t, sub)[i])
		})
	}
}

func failMidKey(t *testing.T, s *env, f Fault) {
	const n, broken = 10, 4
	hot := s.keyed(s.prefix+"-hot", n)
	clean1 := s.keyed(s.prefix+"-clean1", n)
	clean2 := s.keyed(s.prefix+"-clean2", n)
	orig := cloneAll(hot)
	heal := s.apply(t, f, &hot[broken])
	entries := interleave([][]outbox.Entry{clean1, hot, clean2})
	ctx, cancel := context.WithTimeout(s.ctx, faultPublishTimeout)
	errs := s.publish(t, ctx, entries)
	cancel()
	errOf := map[string]error{}
	for i, e := range entries {
		errOf[e.ID] = errs[i]
	}
	expectClass(t, f, "the broken entry "+hot[broken].ID, errOf[hot[broken].ID])
	retryable := errOf[hot[broken].ID] != nil && backoff.ClassOf(errOf[hot[broken].ID]) != backoff.ClassPermanent
	var later []string
	if retryable {
		for _, e := range hot[broken+1:] {
			later = append(later, e.ID)
			if errOf[e.ID] == nil {
				t.Errorf("entry %s was reported published after %s of its key failed with a retryable error (%v); a KeyOrderer must fail it or not write it", e.ID, hot[broken].ID, errOf[hot[broken].ID])
			}
		}
	}
	for _, e := range append(clean1, clean2...) {
		if err := errOf[e.ID]; err != nil && backoff.ClassOf(err) == backoff.ClassPermanent {
			t.Errorf("entry %s of another key failed permanently because of fault %q on %s: %v", e.ID, f.Name, hot[broken].ID, err)
		}
	}
	s.expectReadable(t, entries, errs)
	// Wait a little more for late writes of the key's later entries.
	ok := len(okEntries(entries, errs))
	msgs := s.read(t, ok+1, absentWait)
	expectKeyOrder(t, msgs, entries)
	expectAbsent(t, msgs, later, "an earlier entry of its key failed with a retryable error in the same call")

	heal()
	// Publish again, in order, every entry of the key from the first
	// that failed (the relay's retry), from the original copies.
	first := n
	for i, e := range hot {
		if errOf[e.ID] != nil {
			first = i
			break
		}
	}
	again := orig[first:]
	s.publishOK(t, again)
	msgs = s.expectReadable(t, again, nil)
	if retryable {
		// The key's later entries waited for the failed one, so the
		// whole key is in order now. (After a permanent failure they did
		// not wait: the relay parks the failed entry and goes on.)
		expectKeyOrder(t, msgs, orig)
	}
}
