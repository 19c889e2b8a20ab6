package conformance

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/outboxrelay/outbox"
)

// corruptCases pin what a backend does with a stored entry it cannot
// decode (or that names no topic): it parks the entry with a reason and
// keeps serving the partition, the same key included; a
// [outbox.BatchFetcher] reports each such park once; an [outbox.Inspector]
// refuses to requeue it. They need the harness to implement [Corrupter]
// and are skipped, saying so, when it does not; each case runs once for
// every corruption the harness names.
func corruptCases[Tx any]() []testCase[Tx] {
	return []testCase[Tx]{
		{group: "Corrupt", name: "ParkedWithReasonAndPartitionFlows", run: corruptParked[Tx]},
		{group: "Corrupt", name: "ReportedOnceByFetchBatch", run: corruptReported[Tx]},
		{group: "Corrupt", name: "ReportedByFetchNext", run: corruptReportedAhead[Tx]},
		{group: "Corrupt", name: "RunLongerThanABatchDoesNotStall", run: corruptRun[Tx]},
		{group: "Corrupt", name: "RequeueRefused", run: corruptRequeue[Tx]},
	}
}

func (s *env[Tx]) corrupter(t *testing.T) Corrupter {
	t.Helper()
	c, ok := s.h.(Corrupter)
	if !ok {
		t.Skipf("the harness (%T) does not implement conformance.Corrupter, so the suite cannot damage a stored entry", s.h)
	}
	if len(c.Corruptions()) == 0 {
		t.Fatal("Corrupter.Corruptions() names none; name at least one")
	}
	return c
}

// corrupt damages the stored entry id in the named way or fails the case.
func (s *env[Tx]) corrupt(t *testing.T, c Corrupter, id, how string) {
	t.Helper()
	if err := c.Corrupt(s.ctx, id, how); err != nil {
		t.Fatalf("Corrupter.Corrupt(%q, %q): %v", id, how, err)
	}
}

// fetchReported fetches through FetchBatch when the backend implements
// outbox.BatchFetcher (returning the parks it reports), else through
// FindPendingBatch.
func (s *env[Tx]) fetchReported(t *testing.T, l outbox.Lease, limit int) ([]outbox.Entry, []outbox.CorruptEntry) {
	t.Helper()
	bf, ok := s.b.(outbox.BatchFetcher)
	if !ok {
		return s.fetch(t, l, limit), nil
	}
	b, err := bf.FetchBatch(s.ctx, l, limit)
	if err != nil {
		t.Fatalf("FetchBatch(%s, limit %d): %v (a stored entry that does not decode must be parked, not fail the fetch)", fmtLease(l), limit, err)
	}
	if len(b.Entries)+len(b.Parked) > limit {
		t.Fatalf("FetchBatch(%s, limit %d) returned %d entries and %d parks: more than the limit", fmtLease(l), limit, len(b.Entries), len(b.Parked))
	}
	for _, e := range b.Entries {
		if e.Partition != l.Partition {
			t.Fatalf("FetchBatch(%s) returned entry %s of partition %d", fmtLease(l), e.ID, e.Partition)
		}
	}
	return b.Entries, b.Parked
}

// corruptFixture appends, for each corruption i the harness names, the
// entries c<i>-g1, c<i>-bad, c<i>-g2, c<i>-g3 of key c<i> and an unkeyed
// c<i>-u, interleaved, then damages every c<i>-bad in its way. It returns
// the bad IDs (by corruption) and the good IDs of each key in order.
func (s *env[Tx]) corruptFixture(t *testing.T, c Corrupter) (bad map[string]string, goodByKey map[string][]string) {
	t.Helper()
	bad, goodByKey = map[string]string{}, map[string][]string{}
	var entries []outbox.Entry
	for step := range 4 {
		for i := range c.Corruptions() {
			key := fmt.Sprintf("c%d", i)
			id := []string{"-g1", "-bad", "-g2", "-g3"}[step]
			entries = append(entries, entry(key+id, key))
			if step == 1 {
				entries = append(entries, entry(key+"-u", ""))
			} else {
				goodByKey[key] = append(goodByKey[key], key+id)
			}
		}
	}
	s.appendCommit(t, entries...)
	for i, how := range c.Corruptions() {
		id := fmt.Sprintf("c%d-bad", i)
		bad[id] = how
		s.corrupt(t, c, id, how)
	}
	return bad, goodByKey
}

// drainCorrupt fetches (limit at a time) and marks sent until want entries
// were delivered, failing the case when a bad entry is returned or when
// maxFetches fetches are not enough. It returns the delivered entries in
// order and the parks reported.
func (s *env[Tx]) drainCorrupt(t *testing.T, l outbox.Lease, limit, want, maxFetches int, bad map[string]string) ([]outbox.Entry, []outbox.CorruptEntry) {
	t.Helper()
	var got []outbox.Entry
	var reported []outbox.CorruptEntry
	for fetches := 0; len(got) < want; fetches++ {
		if fetches == maxFetches {
			t.Fatalf("after %d fetches of %d, %d of the %d good entries were delivered (%v); a stored entry that does not decode stalls the partition",
				maxFetches, limit, len(got), want, ids(got))
		}
		batch, parked := s.fetchReported(t, l, limit)
		reported = append(reported, parked...)
		for _, e := range batch {
			if how, ok := bad[e.ID]; ok {
				t.Fatalf("the fetch returned %s, whose stored data was damaged (%s); it must be parked, not handed to the relay (entry: topic %q, key %q)", e.ID, how, e.Topic, e.Key)
			}
		}
		if len(batch) > 0 {
			s.markSent(t, l, ids(batch)...)
		}
		got = append(got, batch...)
	}
	return got, reported
}

func corruptParked[Tx any](t *testing.T, s *env[Tx]) {
	c := s.corrupter(t)
	bad, goodByKey := s.corruptFixture(t, c)
	want := 4 * len(c.Corruptions()) // three good keyed and one unkeyed each
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	got, _ := s.drainCorrupt(t, l, 3, want, 4*want, bad)
	for key, order := range goodByKey {
		var seen []string
		for _, e := range got {
			if e.Key == key {
				seen = append(seen, e.ID)
			}
		}
		if !slices.Equal(seen, order) {
			t.Fatalf("key %s delivered %v, want %v: the entries around a damaged one must keep their order", key, seen, order)
		}
	}
	if ins, ok := s.b.(outbox.Inspector); ok {
		parked := s.allParked(t, ins)
		for id, how := range bad {
			e, ok := parked[id]
			switch {
			case !ok:
				t.Fatalf("%s (%s) is not among the parked entries %v", id, how, keysOf(parked))
			case e.LastError == "":
				t.Fatalf("%s (%s) was parked without a reason (LastError is empty)", id, how)
			case e.Attempts != 1:
				t.Fatalf("%s (%s) was parked with Attempts %d; parking it counts one attempt, as MarkFailed does", id, how, e.Attempts)
			}
		}
	}
	if lk, ok := s.b.(outbox.Looker); ok {
		for id, how := range bad {
			info, err := lk.Lookup(s.ctx, id)
			if err != nil {
				t.Fatalf("Lookup(%q) of an entry parked because it was damaged (%s): %v", id, how, err)
			}
			if !info.Parked || info.LastError == "" {
				t.Fatalf("Lookup(%q) (%s) = %s; want it parked with its reason", id, how, fmtInfo(info))
			}
		}
	}
}

func corruptReported[Tx any](t *testing.T, s *env[Tx]) {
	c := s.corrupter(t)
	if _, ok := s.b.(outbox.BatchFetcher); !ok {
		t.Skipf("the backend (%T) does not implement outbox.BatchFetcher", s.b)
	}
	bad, _ := s.corruptFixture(t, c)
	want := 4 * len(c.Corruptions())
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	_, reported := s.drainCorrupt(t, l, 3, want, 4*want, bad)
	// Fetch on until the partition is empty: nothing is reported twice.
	for range 3 {
		batch, parked := s.fetchReported(t, l, 3)
		if len(batch) > 0 {
			t.Fatalf("entries %v came back after every good entry was marked sent", ids(batch))
		}
		reported = append(reported, parked...)
	}
	count := map[string]int{}
	for _, p := range reported {
		count[p.ID]++
		if _, ok := bad[p.ID]; !ok {
			t.Fatalf("FetchBatch reported a park of %q (reason %q), which was not damaged", p.ID, p.Reason)
		}
		if p.Reason == "" {
			t.Fatalf("FetchBatch reported the park of %q without a reason", p.ID)
		}
	}
	for id, how := range bad {
		if count[id] != 1 {
			t.Fatalf("FetchBatch reported the park of %s (%s) %d times, want once", id, how, count[id])
		}
	}
	if ins, ok := s.b.(outbox.Inspector); ok {
		parked := s.allParked(t, ins)
		for _, p := range reported {
			if e := parked[p.ID]; e.LastError != p.Reason {
				t.Fatalf("%s was reported parked with reason %q, but its LastError is %q; they must be the same", p.ID, p.Reason, e.LastError)
			}
		}
	}
}

// corruptReportedAhead: FetchNext (outbox.Prefetcher), with the first
// entry in flight, parks and reports the damaged entries as FetchBatch
// does, each once with its reason as its LastError, and returns every
// other entry but the one in flight.
func corruptReportedAhead[Tx any](t *testing.T, s *env[Tx]) {
	c := s.corrupter(t)
	p := s.prefetcher(t)
	bad, _ := s.corruptFixture(t, c)
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	inFlight := s.fetch(t, l, 1)
	if len(inFlight) != 1 || inFlight[0].ID != "c0-g1" {
		t.Fatalf("first batch %v, want c0-g1", ids(inFlight))
	}
	b, err := p.FetchNext(s.ctx, l, 100, inFlight)
	if err != nil {
		t.Fatalf("FetchNext(%s, 100, in flight c0-g1): %v (a stored entry that does not decode must be parked, not fail the fetch)", fmtLease(l), err)
	}
	for _, e := range b.Entries {
		if _, ok := bad[e.ID]; ok || e.ID == "c0-g1" {
			t.Fatalf("FetchNext returned %s, which is damaged or in flight", e.ID)
		}
	}
	if want := 4*len(c.Corruptions()) - 1; len(b.Entries) != want {
		t.Fatalf("FetchNext returned %d entries (%v), want the %d undamaged ones behind c0-g1", len(b.Entries), ids(b.Entries), want)
	}
	count := map[string]int{}
	for _, cp := range b.Parked {
		count[cp.ID]++
		if _, ok := bad[cp.ID]; !ok || cp.Reason == "" {
			t.Fatalf("FetchNext reported a park of %q (reason %q); only damaged entries are parked, each with a reason", cp.ID, cp.Reason)
		}
	}
	for id, how := range bad {
		if count[id] != 1 {
			t.Fatalf("FetchNext reported the park of %s (%s) %d times, want once", id, how, count[id])
		}
	}
	if ins, ok := s.b.(outbox.Inspector); ok {
		parked := s.allParked(t, ins)
		for _, cp := range b.Parked {
			if e := parked[cp.ID]; e.LastError != cp.Reason {
				t.Fatalf("%s was reported parked with reason %q, but its LastError is %q; they must be the same", cp.ID, cp.Reason, e.LastError)
			}
		}
	}
}

func corruptRun[Tx any](t *testing.T, s *env[Tx]) {
	c := s.corrupter(t)
	how := c.Corruptions()[0]
	// Seven damaged entries of key k in a row, then a good one, fetched two
	// at a time.
	var entries []outbox.Entry
	bad := map[string]string{}
	for i := range 7 {
		id := fmt.Sprintf("bad%d", i)
		bad[id] = how
		entries = append(entries, entry(id, "k"))
	}
	entries = append(entries, entry("good", "k"))
	s.appendCommit(t, entries...)
	for id := range bad {
		s.corrupt(t, c, id, how)
	}
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	got, _ := s.drainCorrupt(t, l, 2, 1, 8, bad)
	if got[0].ID != "good" {
		t.Fatalf("delivered %v, want good", ids(got))
	}
}

func corruptRequeue[Tx any](t *testing.T, s *env[Tx]) {
	c := s.corrupter(t)
	ins := s.inspector(t)
	s.corruptFixture(t, c)
	s.appendCommit(t, entry("poison", "p"))
	want := 4*len(c.Corruptions()) + 1
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	var got []outbox.Entry
	poisoned := false
	for fetches := 0; len(got) < want-1 || !poisoned; fetches++ {
		if fetches == 4*want {
			t.Fatalf("after %d fetches, delivered %v and parked poison: %v; want every good entry delivered and poison parked", fetches, ids(got), poisoned)
		}
		batch, _ := s.fetchReported(t, l, 3)
		var sent []string
		for _, e := range batch {
			if e.ID == "poison" {
				s.markFailed(t, l, outbox.Failure{ID: e.ID, Park: true, Error: "rejected for good"})
				poisoned = true
				continue
			}
			sent = append(sent, e.ID)
			got = append(got, e)
		}
		if len(sent) > 0 {
			s.markSent(t, l, sent...)
		}
	}
	s.releaseLease(t, l)

	// The damaged entries first and last, the healthy parked one between.
	var badIDs []string
	for i := range c.Corruptions() {
		badIDs = append(badIDs, fmt.Sprintf("c%d-bad", i))
	}
	args := append(slices.Clone(badIDs[:1]), "poison")
	args = append(args, badIDs[1:]...)
	n, err := ins.Requeue(s.ctx, args...)
	var refused *outbox.RequeueRefusedError
	switch {
	case err == nil:
		t.Fatalf("Requeue(%v) = %d, nil; want the damaged entries refused with an error wrapping outbox.ErrNotRequeueable", args, n)
	case !errors.Is(err, outbox.ErrNotRequeueable) || !errors.As(err, &refused):
		t.Fatalf("Requeue(%v): %v; want a *outbox.RequeueRefusedError (wrapping outbox.ErrNotRequeueable)", args, err)
	case n != 1:
		t.Fatalf("Requeue(%v) requeued %d; want 1 (the healthy parked entry), with the damaged ones refused", args, n)
	}
	var refusedIDs []string
	for _, r := range refused.Refused {
		refusedIDs = append(refusedIDs, r.ID)
		if strings.TrimSpace(r.Reason) == "" {
			t.Fatalf("Requeue refused %s without a reason", r.ID)
		}
	}
	if !slices.Equal(refusedIDs, badIDs) {
		t.Fatalf("Requeue refused %v; want %v (the damaged entries, in the order given)", refusedIDs, badIDs)
	}
	parked := s.allParked(t, ins)
	for _, id := range badIDs {
		if _, ok := parked[id]; !ok {
			t.Fatalf("%s is no longer parked after Requeue refused it", id)
		}
	}
	l = s.acquire(t, 0, s.owner("relay"), longTTL)
	batch := s.fetchUntil(t, l, 10, func(b []outbox.Entry) bool { return len(b) > 0 }, "the requeued entry")
	if got := ids(batch); !slices.Equal(got, []string{"poison"}) {
		t.Fatalf("after Requeue the partition holds %v; want just the requeued entry", got)
	}
}

// allParked lists every parked entry by ID.
func (s *env[Tx]) allParked(t *testing.T, ins outbox.Inspector) map[string]outbox.Entry {
	t.Helper()
	out := map[string]outbox.Entry{}
	after := ""
	for {
		page, err := ins.Parked(s.ctx, after, 100)
		if err != nil {
			t.Fatalf("Parked(%q, 100): %v", after, err)
		}
		for _, e := range page {
			out[e.ID] = e
		}
		if len(page) < 100 {
			return out
		}
		after = page[len(page)-1].ID
	}
}

func keysOf(m map[string]outbox.Entry) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
