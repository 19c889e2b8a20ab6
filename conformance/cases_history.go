package conformance

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
)

// historyCases pin the attempt history MarkFailed keeps ([outbox.Attempt],
// [outbox.EntryInfo.History]). They read it through [outbox.Looker] and
// are skipped, saying so, when the backend does not implement it.
func historyCases[Tx any]() []testCase[Tx] {
	return []testCase[Tx]{
		{group: "History", name: "KeepsEveryAttemptInOrder", run: historyInOrder[Tx]},
		{group: "History", name: "KeepsOnlyTheLastTen", run: historyCapped[Tx]},
		{group: "History", name: "RequeueKeepsHistory", run: historyRequeue[Tx]},
	}
}

// deferredCases pin [outbox.Failure.Deferred]: the relay's deferral of an
// entry it did not hand to the sink (its topic's breaker is open). They
// read the entries through [outbox.Looker] where they need to, and are
// skipped, saying so, when the backend does not implement it.
func deferredCases[Tx any]() []testCase[Tx] {
	return []testCase[Tx]{
		{group: "Deferred", name: "NotAnAttempt", run: deferredNotAttempt[Tx]},
		{group: "Deferred", name: "HoldsBackItsKeyOnly", run: deferredHoldsBack[Tx]},
		{group: "Deferred", name: "LaterFailureCountsAnAttempt", run: deferredThenFailed[Tx]},
		{group: "Deferred", name: "SentOrParkedReleasesTheKey", run: deferredReleased[Tx]},
		{group: "Deferred", name: "ParkWithDeferredRejected", run: deferredParkRejected[Tx]},
	}
}

// window is when a call ran by the suite's clock: the store's time of what
// it did lies in it, give or take clockSkew.
type window struct{ from, to time.Time }

// failAs fetches id in partition 0 under a lease of owner, records f for
// it (f.ID is set to id) and releases the lease. It returns when
// MarkFailed ran.
func (s *env[Tx]) failAs(t *testing.T, owner, id string, f outbox.Failure) window {
	t.Helper()
	l := s.acquire(t, 0, owner, longTTL)
	batch := s.fetchUntil(t, l, 100, func(b []outbox.Entry) bool { return slices.Contains(ids(b), id) }, id+" to be fetched")
	var others []string
	for _, e := range batch {
		if e.ID != id {
			others = append(others, e.ID)
		}
	}
	if len(others) > 0 {
		s.release(t, l, others...)
	}
	f.ID = id
	w := window{from: time.Now()}
	s.markFailed(t, l, f)
	w.to = time.Now()
	s.releaseLease(t, l)
	return w
}

// expectHistory fails the case unless h lists the attempts want (Error and
// Owner), in order, each At within its window and not before the At of
// the attempt before it.
func expectHistory(t *testing.T, what string, h []outbox.Attempt, want []outbox.Attempt, windows []window) {
	t.Helper()
	if len(h) != len(want) {
		t.Fatalf("%s: History has %d attempts %s; want %d: %s", what, len(h), fmtHistory(h), len(want), fmtHistory(want))
	}
	for i := range want {
		if h[i].Error != want[i].Error || h[i].Owner != want[i].Owner {
			t.Fatalf("%s: History is %s; want %s (oldest first)", what, fmtHistory(h), fmtHistory(want))
		}
		if windows != nil {
			expectBetween(t, fmt.Sprintf("%s: the At of attempt %d (%q, the store's time of its MarkFailed)", what, i+1, h[i].Error), h[i].At, windows[i].from, windows[i].to)
		}
		if i > 0 && h[i].At.Before(h[i-1].At) {
			t.Fatalf("%s: attempt %d is at %s, before attempt %d at %s: History is oldest first", what, i+1, fmtTime(h[i].At), i, fmtTime(h[i-1].At))
		}
	}
}

func fmtHistory(h []outbox.Attempt) string {
	out := make([]string, len(h))
	for i, a := range h {
		out[i] = fmt.Sprintf("{%s %q by %q}", fmtTime(a.At), a.Error, a.Owner)
	}
	return fmt.Sprint(out)
}

func historyInOrder[Tx any](t *testing.T, s *env[Tx]) {
	lk := s.looker(t)
	s.appendCommit(t, entry("e1", "k"), entry("e2", "j"))
	if h := s.lookup(t, lk, "e1").History; len(h) != 0 {
		t.Fatalf("Lookup(e1) of an entry never attempted reports History %s; want none", fmtHistory(h))
	}
	var want []outbox.Attempt
	var windows []window
	for i := range 4 {
		owner := s.owner(fmt.Sprintf("relay-%c", 'a'+i))
		f := outbox.Failure{Error: fmt.Sprintf("attempt %d: broker said %c", i+1, 'w'+i)}
		windows = append(windows, s.failAs(t, owner, "e1", f))
		want = append(want, outbox.Attempt{Error: f.Error, Owner: owner})
		// Let the store's clock move on between attempts (a store that
		// keeps milliseconds then orders them by time too).
		s.sleep(t, 5*time.Millisecond)
	}
	info := s.lookup(t, lk, "e1")
	expectHistory(t, "Lookup(e1) after 4 failures", info.History, want, windows)
	if info.Attempts != 4 || info.LastError != want[3].Error {
		t.Errorf("Lookup(e1) after 4 failures returned %s; want Attempts 4 and the last failure's error as LastError", fmtInfo(info))
	}
	if h := s.lookup(t, lk, "e2").History; len(h) != 0 {
		t.Errorf("Lookup(e2), never attempted (another entry failed), reports History %s; want none", fmtHistory(h))
	}
	// A parking failure is an attempt too.
	owner := s.owner("parker")
	windows = append(windows, s.failAs(t, owner, "e1", outbox.Failure{Error: "poison", Park: true}))
	want = append(want, outbox.Attempt{Error: "poison", Owner: owner})
	info = s.lookup(t, lk, "e1")
	if !info.Parked {
		t.Fatalf("Lookup(e1) after a failure with Park returned %s; want it parked", fmtInfo(info))
	}
	expectHistory(t, "Lookup(e1) parked after 4 failures and a park", info.History, want, windows)
}

func historyCapped[Tx any](t *testing.T, s *env[Tx]) {
	lk := s.looker(t)
	s.appendCommit(t, entry("e1", "k"))
	owner := s.owner("relay")
	var want []outbox.Attempt
	var windows []window
	n := outbox.MaxAttemptHistory + 3
	for i := range n {
		f := outbox.Failure{Error: fmt.Sprintf("failure %02d", i+1)}
		windows = append(windows, s.failAs(t, owner, "e1", f))
		want = append(want, outbox.Attempt{Error: f.Error, Owner: owner})
	}
	info := s.lookup(t, lk, "e1")
	if info.Attempts != n || info.LastError != want[n-1].Error {
		t.Errorf("Lookup(e1) after %d failures returned %s; want Attempts %d and LastError %q", n, fmtInfo(info), n, want[n-1].Error)
	}
	expectHistory(t, fmt.Sprintf("Lookup(e1) after %d failures (the last %d are kept)", n, outbox.MaxAttemptHistory),
		info.History, want[n-outbox.MaxAttemptHistory:], windows[n-outbox.MaxAttemptHistory:])
}

func historyRequeue[Tx any](t *testing.T, s *env[Tx]) {
	lk := s.looker(t)
	in := s.inspector(t)
	s.appendCommit(t, entry("e1", "k"))
	owner := s.owner("relay")
	windows := []window{
		s.failAs(t, owner, "e1", outbox.Failure{Error: "first"}),
		s.failAs(t, owner, "e1", outbox.Failure{Error: "second", Park: true}),
	}
	want := []outbox.Attempt{{Error: "first", Owner: owner}, {Error: "second", Owner: owner}}
	if n, err := in.Requeue(s.ctx, "e1"); err != nil || n != 1 {
		t.Fatalf("Requeue(e1) of a parked entry: %d, %v; want 1, nil", n, err)
	}
	info := s.lookup(t, lk, "e1")
	if info.Parked || info.Attempts != 0 || info.LastError != "second" {
		t.Fatalf("Lookup(e1) after Requeue returned %s; want it pending, Attempts 0, LastError kept", fmtInfo(info))
	}
	expectHistory(t, "Lookup(e1) after Requeue (the history is kept)", info.History, want, windows)
	windows = append(windows, s.failAs(t, owner, "e1", outbox.Failure{Error: "third"}))
	want = append(want, outbox.Attempt{Error: "third", Owner: owner})
	info = s.lookup(t, lk, "e1")
	expectHistory(t, "Lookup(e1) failed again after Requeue", info.History, want, windows)
	if info.Attempts != 1 {
		t.Errorf("Lookup(e1) failed once after Requeue returned %s; want Attempts 1 (Requeue resets the count, not the history)", fmtInfo(info))
	}
}

func deferredNotAttempt[Tx any](t *testing.T, s *env[Tx]) {
	lk := s.looker(t)
	s.appendCommit(t, entry("a1", "a"), entry("b1", "b"))
	owner := s.owner("relay")
	w := s.failAs(t, owner, "a1", outbox.Failure{Error: "broker down"})
	l := s.acquire(t, 0, owner, longTTL)
	// Entries come by due time, ties by append order (the SPI's Order):
	// a1's retry with Delay 0 is due at the store's now, which a store
	// with millisecond timestamps can give as b1's own due time (b1
	// appended in the same millisecond); a1 then comes first.
	want := []string{"b1", "a1"}
	if !s.lookup(t, lk, "a1").DueAt.After(s.lookup(t, lk, "b1").DueAt) {
		want = []string{"a1", "b1"}
	}
	expectIDs(t, "fetch after a1 failed with Delay 0", s.fetch(t, l, 10), want...)
	start := time.Now()
	s.markFailed(t, l,
		outbox.Failure{ID: "a1", Error: "breaker open", Delay: time.Hour, Deferred: true},
		outbox.Failure{ID: "b1", Error: "breaker open", Delay: time.Hour, Deferred: true},
	)
	end := time.Now()
	a1 := s.lookup(t, lk, "a1")
	if a1.Attempts != 1 || a1.LastError != "broker down" || a1.Parked || !a1.Deferred {
		t.Errorf("Lookup(a1) after one failure and a deferral returned %s, Deferred %v; want Attempts 1, LastError %q (a deferral is not an attempt and stores no error), Deferred true",
			fmtInfo(a1), a1.Deferred, "broker down")
	}
	expectHistory(t, "Lookup(a1) after one failure and a deferral", a1.History, []outbox.Attempt{{Error: "broker down", Owner: owner}}, []window{w})
	expectBetween(t, "DueAt of a1 deferred with Delay 1h (the store's now plus Delay)", a1.DueAt, start.Add(time.Hour), end.Add(time.Hour))
	b1 := s.lookup(t, lk, "b1")
	if b1.Attempts != 0 || b1.LastError != "" || len(b1.History) != 0 || !b1.Deferred {
		t.Errorf("Lookup(b1) deferred before any attempt returned %s, History %s, Deferred %v; want Attempts 0, no LastError, no History, Deferred true",
			fmtInfo(b1), fmtHistory(b1.History), b1.Deferred)
	}
	expectBetween(t, "DueAt of b1 deferred with Delay 1h", b1.DueAt, start.Add(time.Hour), end.Add(time.Hour))
	expectIDs(t, "fetch after both were deferred an hour", s.fetch(t, l, 10))
}

func deferredHoldsBack[Tx any](t *testing.T, s *env[Tx]) {
	s.appendCommit(t, entry("a1", "a"), entry("a2", "a"), entry("b1", "b"), entry("u1", ""))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "first fetch", s.fetch(t, l, 10), "a1", "a2", "b1", "u1")
	// a1 was never attempted: its deferral alone holds back a2.
	s.markFailed(t, l, outbox.Failure{ID: "a1", Error: "breaker open", Delay: time.Hour, Deferred: true})
	s.release(t, l, "a2", "b1", "u1")
	expectIDs(t, "fetch after a1, never attempted, was deferred an hour (a2 is held back by it; other keys and unkeyed entries are not)", s.fetch(t, l, 10), "b1", "u1")
	s.release(t, l, "b1", "u1")
	s.appendCommit(t, entry("a3", "a"), entry("b2", "b"))
	expectIDs(t, "fetch after a3 and b2 were appended", s.fetch(t, l, 10), "b1", "u1", "b2")
}

func deferredThenFailed[Tx any](t *testing.T, s *env[Tx]) {
	lk := s.looker(t)
	s.appendCommit(t, entry("a1", "a"))
	owner := s.owner("relay")
	s.failAs(t, owner, "a1", outbox.Failure{Error: "breaker open", Deferred: true})
	w1 := s.failAs(t, owner, "a1", outbox.Failure{Error: "broker said no"})
	info := s.lookup(t, lk, "a1")
	if info.Attempts != 1 || info.LastError != "broker said no" {
		t.Fatalf("Lookup(a1) after a deferral and a failure returned %s; want Attempts 1 and the failure's error", fmtInfo(info))
	}
	if info.Deferred {
		t.Errorf("Lookup(a1) after a deferral and then a failed attempt reports Deferred; want it cleared by the attempt (EntryInfo.Deferred)")
	}
	s.failAs(t, owner, "a1", outbox.Failure{Error: "breaker open", Deferred: true})
	w2 := s.failAs(t, owner, "a1", outbox.Failure{Error: "broker said no again"})
	info = s.lookup(t, lk, "a1")
	if info.Attempts != 2 || info.LastError != "broker said no again" {
		t.Errorf("Lookup(a1) after two deferrals and two failures returned %s; want Attempts 2 and the last failure's error", fmtInfo(info))
	}
	expectHistory(t, "Lookup(a1) after two deferrals and two failures", info.History,
		[]outbox.Attempt{{Error: "broker said no", Owner: owner}, {Error: "broker said no again", Owner: owner}}, []window{w1, w2})
}

func deferredReleased[Tx any](t *testing.T, s *env[Tx]) {
	s.appendCommit(t, entry("a1", "a"), entry("a2", "a"), entry("b1", "b"), entry("b2", "b"))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "first fetch", s.fetch(t, l, 10), "a1", "a2", "b1", "b2")
	s.markFailed(t, l,
		outbox.Failure{ID: "a1", Error: "breaker open", Deferred: true},
		outbox.Failure{ID: "b1", Error: "breaker open", Deferred: true},
	)
	s.release(t, l, "a2", "b2")
	batch := s.fetch(t, l, 10)
	if got := slices.Sorted(slices.Values(ids(batch))); !slices.Equal(got, []string{"a1", "b1"}) {
		t.Fatalf("fetch after a1 and b1 were deferred with Delay 0: got %v; want a1 and b1 (due again) without a2 and b2 (held back by them)", ids(batch))
	}
	s.markSent(t, l, "a1")
	s.markFailed(t, l, outbox.Failure{ID: "b1", Error: "poison", Park: true})
	expectIDs(t, "fetch after the deferred a1 was sent and b1 parked", s.fetch(t, l, 10), "a2", "b2")
}

func deferredParkRejected[Tx any](t *testing.T, s *env[Tx]) {
	s.appendCommit(t, entry("x1", "x"), entry("y1", "y"))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "first fetch", s.fetch(t, l, 10), "x1", "y1")
	err := s.b.MarkFailed(s.ctx, l, []outbox.Failure{
		{ID: "x1", Error: "boom", Delay: time.Hour},
		{ID: "y1", Error: "breaker open", Park: true, Deferred: true},
	})
	if !errors.Is(err, outbox.ErrInvalidArgument) {
		t.Fatalf("MarkFailed with a failure that sets both Park and Deferred: got %v; want an error wrapping ErrInvalidArgument", err)
	}
	if lk, ok := s.b.(outbox.Looker); ok {
		for _, id := range []string{"x1", "y1"} {
			if info := s.lookup(t, lk, id); info.Attempts != 0 || info.LastError != "" || info.Parked || info.Deferred {
				t.Errorf("Lookup(%s) after the refused MarkFailed returned %s, Deferred %v; want it unchanged: nothing of a refused call is written", id, fmtInfo(info), info.Deferred)
			}
		}
	}
	s.release(t, l, "x1", "y1")
	expectIDs(t, "fetch after the refused MarkFailed (nothing written, so both are due, unattempted)", s.fetch(t, l, 10), "x1", "y1")
}
