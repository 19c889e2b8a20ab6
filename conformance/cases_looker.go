package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
)

// lookerCases pin [outbox.Looker]: one entry by ID, whatever its state.
// They are skipped, saying so, when the backend does not implement it.
func lookerCases[Tx any]() []testCase[Tx] {
	return []testCase[Tx]{
		{group: "Looker", name: "PendingEntryReturnedWhole", partitions: 4, run: lookupPending[Tx]},
		{group: "Looker", name: "ScheduledEntryDueAtNotBefore", run: lookupScheduled[Tx]},
		{group: "Looker", name: "FailedEntryHasAttemptsErrorAndRetryTime", run: lookupFailed[Tx]},
		{group: "Looker", name: "ParkedEntryIsParkedWithoutDueTime", run: lookupParked[Tx]},
		{group: "Looker", name: "ClaimedAndHeldBackEntriesAreFound", run: lookupClaimed[Tx]},
		{group: "Looker", name: "SentCancelledOrUnknownIsNotFound", run: lookupNotFound[Tx]},
		{group: "Looker", name: "ResultIsTheCallers", run: lookupNoAlias[Tx]},
		{group: "Looker", name: "FailsAfterClose", run: lookupClosed[Tx]},
		{group: "Looker", name: "CancelledContextReturnsItsError", run: lookupCancelled[Tx]},
	}
}

func (s *env[Tx]) looker(t *testing.T) outbox.Looker {
	t.Helper()
	lk, ok := s.b.(outbox.Looker)
	if !ok {
		t.Skipf("the backend (%T) does not implement outbox.Looker", s.b)
	}
	return lk
}

// lookup calls Lookup or fails the case, and checks that the entry it
// returns has the ID asked for.
func (s *env[Tx]) lookup(t *testing.T, lk outbox.Looker, id string) outbox.EntryInfo {
	t.Helper()
	info, err := lk.Lookup(s.ctx, id)
	if err != nil {
		t.Fatalf("Lookup(%q): %v", id, err)
	}
	if info.ID != id {
		t.Fatalf("Lookup(%q) returned %s", id, fmtInfo(info))
	}
	return info
}

func fmtInfo(info outbox.EntryInfo) string {
	lastError := info.LastError
	if len(lastError) > 40 {
		lastError = fmt.Sprintf("%.40s… (%d bytes)", lastError, len(lastError))
	}
	return fmt.Sprintf("entry{ID %q, partition %d, attempts %d, last error %q, created %s, parked %v, due %s}",
		info.ID, info.Partition, info.Attempts, lastError, fmtTime(info.CreatedAt), info.Parked, fmtTime(info.DueAt))
}

// expectBetween fails the case unless at lies within [from-clockSkew,
// to+clockSkew] (and so is not zero).
func expectBetween(t *testing.T, what string, at, from, to time.Time) {
	t.Helper()
	from, to = from.Add(-clockSkew), to.Add(clockSkew)
	if at.Before(from) || at.After(to) {
		t.Fatalf("%s is %s; want a time between %s and %s", what, fmtTime(at), fmtTime(from), fmtTime(to))
	}
}

func lookupPending[Tx any](t *testing.T, s *env[Tx]) {
	lk := s.looker(t)
	key := keysByPartition(s.parts)[2]
	e := entry("e1", key)
	e.Payload = append([]byte{0, 0xff, 'x', 0}, "ünïcode payload"...)
	e.Headers["second"] = "ünïcode header"
	start := time.Now()
	s.appendCommit(t, e, entry("e2", key))
	end := time.Now()
	info := s.lookup(t, lk, "e1")
	if d := sameEntry(e, info.Entry); d != "" {
		t.Errorf("Lookup(e1) of a pending entry: %s", d)
	}
	if info.Partition != 2 {
		t.Errorf("Lookup(e1) returned %s: want partition 2 (PartitionOf(%q, %d))", fmtInfo(info), key, s.parts)
	}
	if info.Attempts != 0 || info.LastError != "" || info.Parked {
		t.Errorf("Lookup(e1) of an entry never attempted returned %s: want Attempts 0, no LastError, not parked", fmtInfo(info))
	}
	expectBetween(t, "CreatedAt of e1 (appended "+start.Format(time.StampMilli)+")", info.CreatedAt, start, end)
	expectBetween(t, "DueAt of e1 (appended without NotBefore, so due at its append time)", info.DueAt, start, end)
}

func lookupScheduled[Tx any](t *testing.T, s *env[Tx]) {
	lk := s.looker(t)
	e := entry("e1", "k")
	e.NotBefore = time.Now().Add(time.Hour)
	s.appendCommit(t, e)
	info := s.lookup(t, lk, "e1")
	if info.Parked || info.Attempts != 0 {
		t.Errorf("Lookup(e1) of a scheduled entry returned %s: want not parked, Attempts 0", fmtInfo(info))
	}
	expectBetween(t, fmt.Sprintf("DueAt of e1 scheduled with NotBefore %s", fmtTime(e.NotBefore)), info.DueAt, e.NotBefore, e.NotBefore)
}

func lookupFailed[Tx any](t *testing.T, s *env[Tx]) {
	lk := s.looker(t)
	// e2, retried with a negative Delay, has no key: the case is about what
	// Lookup reports, not about the order of a key's retries.
	s.appendCommit(t, entry("e1", "k1"), entry("e2", ""))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "first fetch", s.fetch(t, l, 10), "e1", "e2")
	long := strings.Repeat("ошибка-error ", 400) // 7,600 bytes, multi-byte runes
	start := time.Now()
	s.markFailed(t, l,
		outbox.Failure{ID: "e1", Error: long, Delay: time.Hour},
		outbox.Failure{ID: "e2", Error: long, Delay: -time.Hour},
	)
	end := time.Now()
	for _, c := range []struct {
		id    string
		delay time.Duration
	}{{"e1", time.Hour}, {"e2", -time.Hour}} {
		info := s.lookup(t, lk, c.id)
		if info.Attempts != 1 || info.Parked {
			t.Errorf("Lookup(%s) after one MarkFailed returned %s: want Attempts 1, not parked", c.id, fmtInfo(info))
		}
		if got := info.LastError; len(got) < 1024 || !strings.HasPrefix(long, got) {
			t.Errorf("Lookup(%s) after MarkFailed with a %d-byte error returned a LastError of %d bytes (a prefix of the error: %v); want the error, truncated by the store at no less than 1024 bytes",
				c.id, len(long), len(got), strings.HasPrefix(long, got))
		}
		expectBetween(t, fmt.Sprintf("DueAt of %s after MarkFailed with Delay %v (the store's now plus Delay)", c.id, c.delay), info.DueAt, start.Add(c.delay), end.Add(c.delay))
	}
	// The last error in full as stored: what a fetch returns.
	info := s.lookup(t, lk, "e2")
	got := s.fetch(t, l, 10)
	expectIDs(t, "fetch after MarkFailed (e2 retries an hour ago, e1 in an hour)", got, "e2")
	if info.LastError != got[0].LastError {
		t.Errorf("Lookup(e2) returned a LastError of %d bytes, FindPendingBatch one of %d bytes: Lookup returns the last error in full, as stored", len(info.LastError), len(got[0].LastError))
	}
}

func lookupParked[Tx any](t *testing.T, s *env[Tx]) {
	lk := s.looker(t)
	e := entry("e1", "k")
	s.appendCommit(t, e)
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "first fetch", s.fetch(t, l, 10), "e1")
	s.markFailed(t, l, outbox.Failure{ID: "e1", Error: "poison", Park: true})
	info := s.lookup(t, lk, "e1")
	if !info.Parked || !info.DueAt.IsZero() || info.Attempts != 1 || info.LastError != "poison" {
		t.Errorf("Lookup(e1) of a parked entry returned %s: want Parked true, a zero DueAt, Attempts 1, LastError \"poison\"", fmtInfo(info))
	}
	if d := sameEntry(e, info.Entry); d != "" {
		t.Errorf("Lookup(e1) of a parked entry: %s", d)
	}
}

func lookupClaimed[Tx any](t *testing.T, s *env[Tx]) {
	lk := s.looker(t)
	start := time.Now()
	s.appendCommit(t, entry("e1", "k"), entry("e2", "k"), entry("f1", "j"))
	end := time.Now()
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "first fetch", s.fetch(t, l, 10), "e1", "e2", "f1")
	// f1 stays claimed; e2 goes back to pending behind e1, which fails.
	s.markFailed(t, l, outbox.Failure{ID: "e1", Error: "boom", Delay: time.Hour})
	s.release(t, l, "e2")
	for _, c := range []struct{ id, key, state string }{
		{"f1", "j", "claimed by a live lease"},
		{"e2", "k", "held back behind e1, which is failing"},
	} {
		info, err := lk.Lookup(s.ctx, c.id)
		if err != nil {
			t.Errorf("Lookup(%s) of an entry %s: %v; want the entry (claimed and held-back entries are pending)", c.id, c.state, err)
			continue
		}
		if info.ID != c.id || info.Parked || info.Attempts != 0 {
			t.Errorf("Lookup(%s) of an entry %s returned %s: want it pending, Attempts 0", c.id, c.state, fmtInfo(info))
		}
		if d := sameEntry(entry(c.id, c.key), info.Entry); d != "" {
			t.Errorf("Lookup(%s) of an entry %s: %s", c.id, c.state, d)
		}
		due := info.DueAt
		if due.Before(start.Add(-clockSkew)) || due.After(end.Add(clockSkew)) {
			t.Errorf("Lookup(%s) of an entry %s returned DueAt %s; want its append time (between %s and %s): neither a claim nor being held back changes when an entry is due",
				c.id, c.state, fmtTime(due), fmtTime(start.Add(-clockSkew)), fmtTime(end.Add(clockSkew)))
		}
	}
}

func lookupNotFound[Tx any](t *testing.T, s *env[Tx]) {
	lk := s.looker(t)
	s.appendCommit(t, entry("sent", "k"), entry("cancelled", "j"))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "first fetch", s.fetch(t, l, 1), "sent")
	s.markSent(t, l, "sent")
	check := func(what, id string) {
		t.Helper()
		if info, err := lk.Lookup(s.ctx, id); !errors.Is(err, outbox.ErrNotFound) {
			t.Errorf("Lookup(%q) of %s: got %s, %v; want an error wrapping ErrNotFound", id, what, fmtInfo(info), err)
		}
	}
	check("an entry marked sent", "sent")
	check("an ID never appended", "never-appended")
	if c, ok := s.b.(outbox.Canceler); ok {
		if err := c.Cancel(s.ctx, "cancelled"); err != nil {
			t.Fatalf("Cancel(cancelled): %v", err)
		}
		check("a cancelled entry", "cancelled")
	} else {
		t.Logf("the backend (%T) does not implement outbox.Canceler: Lookup of a cancelled entry not checked", s.b)
	}
}

func lookupNoAlias[Tx any](t *testing.T, s *env[Tx]) {
	lk := s.looker(t)
	e := entry("e1", "k")
	s.appendCommit(t, e)
	first := s.lookup(t, lk, "e1")
	if d := sameEntry(e, first.Entry); d != "" {
		t.Fatalf("Lookup(e1): %s", d)
	}
	// The caller changes what it got.
	for i := range first.Payload {
		first.Payload[i] ^= 0xff
	}
	for k := range first.Headers {
		first.Headers[k] = "changed by the caller"
	}
	first.Headers["added-by-the-caller"] = "x"
	second := s.lookup(t, lk, "e1")
	if d := sameEntry(e, second.Entry); d != "" {
		t.Errorf("a second Lookup(e1) after the caller changed the payload and headers the first one returned: %s; the returned entry is the caller's", d)
	}
	if d := sameEntry(e, s.peek(t, 0)[0]); d != "" {
		t.Errorf("fetch after the caller changed the payload and headers Lookup returned: %s; the returned entry is the caller's", d)
	}
}

func lookupClosed[Tx any](t *testing.T, s *env[Tx]) {
	lk := s.looker(t)
	s.appendCommit(t, entry("e1", "k"))
	s.lookup(t, lk, "e1")
	if err := s.b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for _, id := range []string{"e1", "never-appended"} {
		if info, err := lk.Lookup(s.ctx, id); !errors.Is(err, outbox.ErrClosed) {
			t.Errorf("Lookup(%q) after Close: got %s, %v; want an error wrapping ErrClosed", id, fmtInfo(info), err)
		}
	}
}

func lookupCancelled[Tx any](t *testing.T, s *env[Tx]) {
	lk := s.looker(t)
	s.appendCommit(t, entry("e1", "k"))
	cctx, cancel := context.WithCancel(s.ctx)
	cancel()
	if info, err := lk.Lookup(cctx, "e1"); !errors.Is(err, context.Canceled) {
		t.Errorf("Lookup(e1) with a cancelled context: got %s, %v; want an error wrapping context.Canceled", fmtInfo(info), err)
	}
	dctx, dcancel := context.WithDeadline(s.ctx, time.Now().Add(-time.Second))
	defer dcancel()
	if info, err := lk.Lookup(dctx, "e1"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Lookup(e1) with an expired deadline: got %s, %v; want an error wrapping context.DeadlineExceeded", fmtInfo(info), err)
	}
	s.lookup(t, lk, "e1")
}
