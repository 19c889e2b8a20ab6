package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
)

// listerCases pin [outbox.Lister]: the entries by state and the blocked
// keys. They are skipped, saying so, when the backend does not implement
// it.
func listerCases[Tx any]() []testCase[Tx] {
	return []testCase[Tx]{
		{group: "Lister", name: "EntriesByState", run: listEntriesByState[Tx]},
		{group: "Lister", name: "EntriesFilters", run: listEntriesFilters[Tx]},
		{group: "Lister", name: "EntriesPaging", run: listEntriesPaging[Tx]},
		{group: "Lister", name: "EntriesRejectBadArguments", run: listEntriesBadArguments[Tx]},
		{group: "Lister", name: "BlockedKeysHeadsAndWaiting", partitions: 2, run: listBlockedHeads[Tx]},
		{group: "Lister", name: "BlockedKeysLongestBlockedFirst", run: listBlockedOrder[Tx]},
		{group: "Lister", name: "BlockedKeysPagingAndFilter", run: listBlockedPaging[Tx]},
		{group: "Lister", name: "BlockedKeysAgreeWithPartitionStats", partitions: 3, run: listBlockedStats[Tx]},
		{group: "Lister", name: "BlockedKeysRejectBadArguments", run: listBlockedBadArguments[Tx]},
	}
}

func (s *env[Tx]) lister(t *testing.T) outbox.Lister {
	t.Helper()
	ls, ok := s.b.(outbox.Lister)
	if !ok {
		t.Skipf("the backend (%T) does not implement outbox.Lister", s.b)
	}
	return ls
}

// entries calls Entries or fails the case, and checks that the page is
// no longer than limit.
func (s *env[Tx]) entries(t *testing.T, ls outbox.Lister, state outbox.EntryState, f outbox.ListFilter, after string, limit int) []outbox.EntryInfo {
	t.Helper()
	got, err := ls.Entries(s.ctx, state, f, after, limit)
	if err != nil {
		t.Fatalf("Entries(%s, %s, after %q, limit %d): %v", state, fmtFilter(f), after, limit, err)
	}
	if len(got) > limit {
		t.Fatalf("Entries(%s, %s, after %q, limit %d) returned %d entries %v: more than the limit", state, fmtFilter(f), after, limit, len(got), infoIDs(got))
	}
	return got
}

// blockedKeys calls BlockedKeys or fails the case.
func (s *env[Tx]) blockedKeys(t *testing.T, ls outbox.Lister, f outbox.ListFilter, after outbox.BlockedKey, limit int) []outbox.BlockedKey {
	t.Helper()
	got, err := ls.BlockedKeys(s.ctx, f, after, limit)
	if err != nil {
		t.Fatalf("BlockedKeys(%s, after %s, limit %d): %v", fmtFilter(f), fmtBlocked(after), limit, err)
	}
	if len(got) > limit {
		t.Fatalf("BlockedKeys(%s, limit %d) returned %d keys: more than the limit", fmtFilter(f), limit, len(got))
	}
	return got
}

// allBlocked pages through BlockedKeys with limit.
func (s *env[Tx]) allBlocked(t *testing.T, ls outbox.Lister, f outbox.ListFilter, limit int) []outbox.BlockedKey {
	t.Helper()
	var all []outbox.BlockedKey
	after := outbox.BlockedKey{}
	for range 1000 {
		page := s.blockedKeys(t, ls, f, after, limit)
		all = append(all, page...)
		if len(page) < limit {
			return all
		}
		after = page[len(page)-1]
	}
	t.Fatalf("BlockedKeys(%s, limit %d) still returned full pages after 1000 pages: does it start after the key given as after?", fmtFilter(f), limit)
	return nil
}

func headIDs(keys []outbox.BlockedKey) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k.Head.ID
	}
	return out
}

func fmtFilter(f outbox.ListFilter) string {
	var parts []string
	if f.Topic != "" {
		parts = append(parts, fmt.Sprintf("Topic %q", f.Topic))
	}
	if f.Key != "" {
		parts = append(parts, fmt.Sprintf("Key %q", f.Key))
	}
	if f.Error != "" {
		parts = append(parts, fmt.Sprintf("Error %q", f.Error))
	}
	if !f.Since.IsZero() {
		parts = append(parts, "Since "+fmtTime(f.Since))
	}
	if !f.Until.IsZero() {
		parts = append(parts, "Until "+fmtTime(f.Until))
	}
	return "filter{" + strings.Join(parts, ", ") + "}"
}

func fmtBlocked(k outbox.BlockedKey) string {
	if k.Head.ID == "" && k.Since.IsZero() {
		return "{}"
	}
	return fmt.Sprintf("{head %q, key %q, waiting %d, since %s}", k.Head.ID, k.Head.Key, k.Waiting, fmtTime(k.Since))
}

// expectInfoIDs fails the case unless got lists exactly want, in order.
func expectInfoIDs(t *testing.T, what string, got []outbox.EntryInfo, want ...string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	if g := infoIDs(got); !slices.Equal(g, want) {
		t.Fatalf("%s: got %v, want %v", what, g, want)
	}
}

func listEntriesByState[Tx any](t *testing.T, s *env[Tx]) {
	ls := s.lister(t)
	sched := entry("scheduled", "s")
	sched.NotBefore = time.Now().Add(time.Hour)
	s.appendCommit(t,
		entry("retrying", "r"), entry("held", "r"), entry("due", "d"), entry("claimed", "c"), sched,
		entry("deferred", "f"), entry("failed-due", "x"), entry("retry-deferred", "y"), entry("parked", "p"), entry("sent", "z"),
	)
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "first fetch", s.fetch(t, l, 100),
		"retrying", "held", "due", "claimed", "deferred", "failed-due", "retry-deferred", "parked", "sent")
	s.markFailed(t, l,
		outbox.Failure{ID: "retrying", Error: "boom", Delay: time.Hour},
		outbox.Failure{ID: "deferred", Error: "breaker open", Delay: time.Hour, Deferred: true},
		outbox.Failure{ID: "failed-due", Error: "boom"},
		outbox.Failure{ID: "retry-deferred", Error: "boom"},
		outbox.Failure{ID: "parked", Error: "poison", Park: true},
	)
	s.markSent(t, l, "sent")
	s.release(t, l, "held", "due", "failed-due", "retry-deferred")
	// retry-deferred: attempted, then deferred before its next attempt.
	batch := s.fetchUntil(t, l, 100, func(b []outbox.Entry) bool { return slices.Contains(ids(b), "retry-deferred") }, "retry-deferred, failed with Delay 0, to be due")
	s.markFailed(t, l, outbox.Failure{ID: "retry-deferred", Error: "breaker open", Delay: time.Hour, Deferred: true})
	var others []string
	for _, e := range batch {
		if e.ID != "retry-deferred" {
			others = append(others, e.ID)
		}
	}
	s.release(t, l, others...)
	// "claimed" stays claimed by l.
	for _, c := range []struct {
		state outbox.EntryState
		want  []string
	}{
		{outbox.StateDue, []string{"claimed", "due", "failed-due", "held"}},
		{outbox.StateScheduled, []string{"deferred", "scheduled"}},
		{outbox.StateRetrying, []string{"retry-deferred", "retrying"}},
		{outbox.StateParked, []string{"parked"}},
	} {
		got := s.entries(t, ls, c.state, outbox.ListFilter{}, "", 100)
		expectInfoIDs(t, fmt.Sprintf("Entries(%s) (due: claimed, held back, failed with Delay 0 or never attempted, and due; scheduled: due later, never attempted, deferred or not; retrying: attempted, due later, deferred or not)", c.state), got, c.want...)
		for _, info := range got {
			if info.Parked != (c.state == outbox.StateParked) {
				t.Errorf("Entries(%s) returned %s: Parked must be %v", c.state, fmtInfo(info), c.state == outbox.StateParked)
			}
		}
	}
	// Each entry as Lookup reports it.
	got := s.entries(t, ls, outbox.StateRetrying, outbox.ListFilter{}, "", 100)
	for _, info := range got {
		if info.Attempts != 1 || info.LastError != "boom" || len(info.History) != 1 || info.History[0].Error != "boom" {
			t.Errorf("Entries(retrying) returned %s with History %s; want Attempts 1, LastError \"boom\" and the one attempt in History", fmtInfo(info), fmtHistory(info.History))
		}
		if info.Deferred != (info.ID == "retry-deferred") {
			t.Errorf("Entries(retrying) returned %s with Deferred %v; want Deferred only for retry-deferred", info.ID, info.Deferred)
		}
	}
	if d := sameEntry(entry("retrying", "r"), got[1].Entry); d != "" {
		t.Errorf("Entries(retrying) returned retrying: %s", d)
	}
}

func listEntriesFilters[Tx any](t *testing.T, s *env[Tx]) {
	ls := s.lister(t)
	on := func(id, tp, key string) outbox.Entry {
		e := entry(id, key)
		e.Topic = tp
		return e
	}
	s.appendCommit(t, on("a1", "orders", "k"), on("a2", "orders", "k2"), on("a3", "mail", "k"), on("a4", "mail", ""))
	// The store's clock moves on before the second group is appended.
	s.sleep(t, 30*time.Millisecond)
	s.appendCommit(t, on("b1", "orders", "k"), on("b2", "mail", "K"), on("b3", "orders", "j"), on("b4", "mail", "k"))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "first fetch", s.fetch(t, l, 100), "a1", "a2", "a3", "a4", "b1", "b2", "b3", "b4")
	s.markFailed(t, l,
		outbox.Failure{ID: "a1", Error: "Broker DOWN: 50% of partitions_offline", Delay: time.Hour},
		outbox.Failure{ID: "a2", Error: "broker down (ÜMLAUT)", Delay: time.Hour},
		outbox.Failure{ID: "a3", Error: "timeout after 5.0s", Delay: time.Hour},
		outbox.Failure{ID: "a4", Error: "Ümlaut: topic unknown", Delay: time.Hour},
		outbox.Failure{ID: "b1", Error: "x509: bad certificate", Delay: time.Hour},
		outbox.Failure{ID: "b2", Error: "timeout after 500s", Delay: time.Hour},
		outbox.Failure{ID: "b3", Error: "BROKER down", Delay: time.Hour},
		outbox.Failure{ID: "b4", Error: "x", Delay: time.Hour},
	)
	lk := s.looker(t)
	since := s.lookup(t, lk, "b1").CreatedAt
	if last := s.lookup(t, lk, "a4").CreatedAt; !last.Before(since) {
		t.Fatalf("a4 was created at %s, b1 (committed 30ms later) at %s: the store's CreatedAt must grow with its clock", fmtTime(last), fmtTime(since))
	}
	for _, c := range []struct {
		f    outbox.ListFilter
		want []string
	}{
		{outbox.ListFilter{}, []string{"a1", "a2", "a3", "a4", "b1", "b2", "b3", "b4"}},
		{outbox.ListFilter{Topic: "orders"}, []string{"a1", "a2", "b1", "b3"}},
		{outbox.ListFilter{Topic: "order"}, nil},
		{outbox.ListFilter{Key: "k"}, []string{"a1", "a3", "b1", "b4"}},
		{outbox.ListFilter{Key: "K"}, []string{"b2"}},
		{outbox.ListFilter{Topic: "mail", Key: "k"}, []string{"a3", "b4"}},
		{outbox.ListFilter{Error: "broker down"}, []string{"a1", "a2", "b3"}},
		{outbox.ListFilter{Error: "ÜMLAUT"}, []string{"a2", "a4"}},
		{outbox.ListFilter{Error: "ümlaut"}, nil},
		{outbox.ListFilter{Error: "%"}, []string{"a1"}},
		{outbox.ListFilter{Error: "_"}, []string{"a1"}},
		{outbox.ListFilter{Error: "5.0s"}, []string{"a3"}},
		{outbox.ListFilter{Error: "5*s"}, nil},
		{outbox.ListFilter{Since: since}, []string{"b1", "b2", "b3", "b4"}},
		{outbox.ListFilter{Until: since}, []string{"a1", "a2", "a3", "a4"}},
		{outbox.ListFilter{Since: since, Until: since.Add(time.Hour), Topic: "mail", Error: "TIMEOUT"}, []string{"b2"}},
	} {
		got := s.entries(t, ls, outbox.StateRetrying, c.f, "", 100)
		expectInfoIDs(t, fmt.Sprintf("Entries(retrying, %s) (Topic and Key exact; Error a substring, ASCII letters folded, other bytes and %%, _, ., * as they are; CreatedAt at or after Since, before Until)", fmtFilter(c.f)), got, c.want...)
	}
}

func listEntriesPaging[Tx any](t *testing.T, s *env[Tx]) {
	ls := s.lister(t)
	appended := []string{"e5", "e2", "e7", "e1", "e6", "e3", "e4"}
	var batch []outbox.Entry
	for _, id := range appended {
		batch = append(batch, entry(id, "k-"+id))
	}
	s.appendCommit(t, batch...)
	want := slices.Sorted(slices.Values(appended))
	for _, limit := range []int{1, 2, 3, 7, 100} {
		var all []string
		after := ""
		for range len(want) + 2 {
			page := s.entries(t, ls, outbox.StateDue, outbox.ListFilter{}, after, limit)
			all = append(all, infoIDs(page)...)
			if len(page) < limit {
				break
			}
			after = page[len(page)-1].ID
		}
		if !slices.Equal(all, want) {
			t.Fatalf("paging Entries(due) with limit %d, each page after the last ID of the one before, listed %v; want %v (each entry once, by ID)", limit, all, want)
		}
	}
	expectInfoIDs(t, "Entries(due) after \"e35\", an ID between e3 and e4 that is not stored", s.entries(t, ls, outbox.StateDue, outbox.ListFilter{}, "e35", 2), "e4", "e5")
	expectInfoIDs(t, "Entries(due) after \"e7\", the last ID", s.entries(t, ls, outbox.StateDue, outbox.ListFilter{}, "e7", 2))
	expectInfoIDs(t, "Entries(due, Key \"k-e3\") after \"e2\"", s.entries(t, ls, outbox.StateDue, outbox.ListFilter{Key: "k-e3"}, "e2", 2), "e3")
}

func listEntriesBadArguments[Tx any](t *testing.T, s *env[Tx]) {
	ls := s.lister(t)
	s.appendCommit(t, entry("e1", "k"))
	for _, c := range []struct {
		state outbox.EntryState
		limit int
	}{{"stuck", 10}, {"", 10}, {"DUE", 10}, {outbox.StateDue, 0}, {outbox.StateDue, -1}, {outbox.StateParked, 0}} {
		if got, err := ls.Entries(s.ctx, c.state, outbox.ListFilter{}, "", c.limit); !errors.Is(err, outbox.ErrInvalidArgument) {
			t.Errorf("Entries(%q, limit %d): got %v, %v; want an error wrapping ErrInvalidArgument", c.state, c.limit, infoIDs(got), err)
		}
	}
	cctx, cancel := context.WithCancel(s.ctx)
	cancel()
	if _, err := ls.Entries(cctx, outbox.StateDue, outbox.ListFilter{}, "", 10); !errors.Is(err, context.Canceled) {
		t.Errorf("Entries with a cancelled context: got %v; want an error wrapping context.Canceled", err)
	}
	if err := s.b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := ls.Entries(s.ctx, outbox.StateDue, outbox.ListFilter{}, "", 10); !errors.Is(err, outbox.ErrClosed) {
		t.Errorf("Entries after Close: got %v; want an error wrapping ErrClosed", err)
	}
}

// pausedTopic is the topic the cases pause.
const pausedTopic = "conformance-paused"

func listBlockedHeads[Tx any](t *testing.T, s *env[Tx]) {
	ls := s.lister(t)
	keys := keysByPartition(s.parts)
	k0, k1 := keys[0], keys[1]
	withKey := func(id, key string) outbox.Entry { return entry(id, key) }
	sched := withKey("sched1", k1+"-s")
	sched.NotBefore = time.Now().Add(time.Hour)
	paused := withKey("paused1", k1+"-p")
	paused.Topic = pausedTopic
	s.appendCommit(t,
		withKey("att1", k0), withKey("att2", k0), withKey("att3", k0),
		withKey("def1", k1), withKey("def2", k1),
		paused, withKey("paused2", k1+"-p"),
		withKey("free1", k0+"-f"), withKey("free2", k0+"-f"),
		sched, withKey("sched2", k1+"-s"),
		withKey("unkeyed", ""), withKey("sent1", k0+"-z"), withKey("sent2", k0+"-z"),
	)
	pauser, canPause := s.b.(outbox.Pauser)
	if canPause {
		if err := pauser.PauseTopic(s.ctx, pausedTopic); err != nil {
			t.Fatalf("PauseTopic(%q): %v", pausedTopic, err)
		}
	} else {
		t.Logf("the backend (%T) does not implement outbox.Pauser: a paused topic's head not checked", s.b)
	}
	wins := make([]window, s.parts)
	for p := range s.parts {
		l := s.acquire(t, p, s.owner("relay"), longTTL)
		batch := s.fetch(t, l, 100)
		var fs []outbox.Failure
		var rest []string
		for _, e := range batch {
			switch e.ID {
			case "att1", "unkeyed":
				fs = append(fs, outbox.Failure{ID: e.ID, Error: "boom " + e.ID, Delay: time.Hour})
			case "def1":
				fs = append(fs, outbox.Failure{ID: e.ID, Error: "breaker open", Delay: time.Hour, Deferred: true})
			case "sent1":
				s.markFailed(t, l, outbox.Failure{ID: e.ID, Error: "once", Delay: time.Hour})
				s.markSent(t, l, e.ID)
			default:
				rest = append(rest, e.ID)
			}
		}
		wins[p].from = time.Now()
		s.markFailed(t, l, fs...)
		wins[p].to = time.Now()
		if len(rest) > 0 {
			s.release(t, l, rest...)
		}
		s.releaseLease(t, l)
	}
	got := s.blockedKeys(t, ls, outbox.ListFilter{}, outbox.BlockedKey{}, 100)
	byHead := map[string]outbox.BlockedKey{}
	for _, k := range got {
		byHead[k.Head.ID] = k
	}
	want := map[string]struct {
		key       string
		partition int
		waiting   int64
		attempts  int
		lastError string
		deferred  bool
	}{
		"att1": {k0, 0, 2, 1, "boom att1", false},
		"def1": {k1, 1, 1, 0, "", true},
	}
	if canPause {
		want["paused1"] = struct {
			key       string
			partition int
			waiting   int64
			attempts  int
			lastError string
			deferred  bool
		}{k1 + "-p", outbox.PartitionOf(k1+"-p", s.parts), 1, 0, "", false}
	}
	var wantHeads []string
	for id := range want {
		wantHeads = append(wantHeads, id)
	}
	slices.Sort(wantHeads)
	if gotHeads := slices.Sorted(slices.Values(headIDs(got))); !slices.Equal(gotHeads, wantHeads) {
		t.Fatalf("BlockedKeys listed the heads %v; want %v: an attempted head (att1), a deferred one (def1) and one of a paused topic (paused1), not a key whose head was never attempted (free1, sched1, sent2 once sent1 was sent), nor an unkeyed entry", headIDs(got), wantHeads)
	}
	for id, w := range want {
		k := byHead[id]
		h := k.Head
		if h.Key != w.key || h.Partition != w.partition || k.Waiting != w.waiting || h.Attempts != w.attempts || h.LastError != w.lastError || h.Deferred != w.deferred || h.Parked {
			t.Errorf("BlockedKeys listed %s with head %s, Deferred %v; want key %q, partition %d, Waiting %d, Attempts %d, LastError %q, Deferred %v",
				fmtBlocked(k), fmtInfo(h), h.Deferred, w.key, w.partition, w.waiting, w.attempts, w.lastError, w.deferred)
		}
		if d := sameEntry(entry(id, w.key), h.Entry); d != "" && id != "paused1" {
			t.Errorf("BlockedKeys head %s: %s", id, d)
		}
		if id != "paused1" {
			expectBetween(t, fmt.Sprintf("DueAt of the head %s (failed or deferred with Delay 1h)", id), h.DueAt, wins[w.partition].from.Add(time.Hour), wins[w.partition].to.Add(time.Hour))
		}
		if (h.Attempts > 0) != (len(h.History) > 0) {
			t.Errorf("BlockedKeys head %s has Attempts %d and History %s: the head is reported as Lookup reports it", id, h.Attempts, fmtHistory(h.History))
		}
	}
}

func listBlockedOrder[Tx any](t *testing.T, s *env[Tx]) {
	ls := s.lister(t)
	lk := s.looker(t)
	// z1 is appended first and deferred last: its key is blocked since
	// its append. x1 fails before y1, and again after it: its key is
	// blocked since its first failure.
	s.appendCommit(t, entry("z1", "z"), entry("z2", "z"))
	s.sleep(t, 30*time.Millisecond)
	s.appendCommit(t, entry("y1", "y"), entry("y2", "y"), entry("x1", "x"), entry("x2", "x"))
	s.sleep(t, 30*time.Millisecond)
	owner := s.owner("relay")
	s.failAs(t, owner, "x1", outbox.Failure{Error: "x first"})
	s.sleep(t, 30*time.Millisecond)
	s.failAs(t, owner, "y1", outbox.Failure{Error: "y first", Delay: time.Hour})
	s.sleep(t, 30*time.Millisecond)
	s.failAs(t, owner, "x1", outbox.Failure{Error: "x second", Delay: time.Hour})
	l := s.acquire(t, 0, owner, longTTL)
	expectIDs(t, "fetch after x1 and y1 failed (x2 and y2 are held back)", s.fetch(t, l, 100), "z1", "z2")
	s.markFailed(t, l, outbox.Failure{ID: "z1", Error: "breaker open", Delay: time.Hour, Deferred: true})
	s.release(t, l, "z2")
	got := s.blockedKeys(t, ls, outbox.ListFilter{}, outbox.BlockedKey{}, 100)
	if !slices.Equal(headIDs(got), []string{"z1", "x1", "y1"}) {
		t.Fatalf("BlockedKeys listed %v; want [z1 x1 y1]: the longest blocked first (z1 deferred, blocked since its append; x1 since its first failure, before y1's)", fmtBlockedList(got))
	}
	for _, k := range got {
		info := s.lookup(t, lk, k.Head.ID)
		want, what := info.CreatedAt, "its CreatedAt (deferred before any attempt)"
		if len(info.History) > 0 {
			want, what = info.History[0].At, "the At of its oldest attempt"
		}
		if !k.Since.Equal(want) {
			t.Errorf("BlockedKeys reports the key of %s blocked since %s; want %s, %s", k.Head.ID, fmtTime(k.Since), fmtTime(want), what)
		}
	}
}

// keyIn returns a key that starts with name and is in partition of
// partitions.
func keyIn(partition, partitions int, name string) string {
	for i := 0; ; i++ {
		if k := fmt.Sprintf("%s-%d", name, i); outbox.PartitionOf(k, partitions) == partition {
			return k
		}
	}
}

func fmtBlockedList(keys []outbox.BlockedKey) string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = fmtBlocked(k)
	}
	return "[" + strings.Join(out, " ") + "]"
}

func listBlockedPaging[Tx any](t *testing.T, s *env[Tx]) {
	ls := s.lister(t)
	var batch []outbox.Entry
	for i := range 5 {
		e := entry(fmt.Sprintf("h%d", i), fmt.Sprintf("k%d", i))
		if i == 3 {
			e.Topic = "other"
		}
		batch = append(batch, e, entry(fmt.Sprintf("w%d", i), fmt.Sprintf("k%d", i)))
	}
	s.appendCommit(t, batch...)
	owner := s.owner("relay")
	// Failed out of ID order, so the order of the keys (by Since) is not
	// the order of their heads' IDs.
	for _, i := range []int{2, 0, 4, 1, 3} {
		s.failAs(t, owner, fmt.Sprintf("h%d", i), outbox.Failure{Error: fmt.Sprintf("error of head %d", i), Delay: time.Hour})
		s.sleep(t, 5*time.Millisecond)
	}
	all := s.blockedKeys(t, ls, outbox.ListFilter{}, outbox.BlockedKey{}, 100)
	if !slices.Equal(headIDs(all), []string{"h2", "h0", "h4", "h1", "h3"}) {
		t.Fatalf("BlockedKeys listed %s; want the heads [h2 h0 h4 h1 h3], in the order they failed", fmtBlockedList(all))
	}
	for _, limit := range []int{1, 2, 3} {
		if paged := s.allBlocked(t, ls, outbox.ListFilter{}, limit); !slices.Equal(headIDs(paged), headIDs(all)) {
			t.Fatalf("paging BlockedKeys with limit %d, each page after the last key of the one before, listed %v; want %v (one page of 100)", limit, headIDs(paged), headIDs(all))
		}
	}
	for _, c := range []struct {
		f    outbox.ListFilter
		want []string
	}{
		{outbox.ListFilter{Key: "k2"}, []string{"h2"}},
		{outbox.ListFilter{Topic: "other"}, []string{"h3"}},
		{outbox.ListFilter{Error: "HEAD 4"}, []string{"h4"}},
		{outbox.ListFilter{Topic: topic}, []string{"h2", "h0", "h4", "h1"}},
		{outbox.ListFilter{Topic: "other", Key: "k2"}, nil},
	} {
		got := s.blockedKeys(t, ls, c.f, outbox.BlockedKey{}, 100)
		if g := headIDs(got); !slices.Equal(g, c.want) {
			t.Errorf("BlockedKeys(%s) listed %s; want the heads %v (the filter applies to the head)", fmtFilter(c.f), fmtBlockedList(got), c.want)
		}
	}
}

func listBlockedStats[Tx any](t *testing.T, s *env[Tx]) {
	ls := s.lister(t)
	pi, ok := s.b.(outbox.PartitionInspector)
	if !ok {
		t.Skipf("the backend (%T) does not implement outbox.PartitionInspector", s.b)
	}
	ka0, kb0 := keyIn(0, s.parts, "a"), keyIn(0, s.parts, "b")
	ka2, kb2 := keyIn(2, s.parts, "a"), keyIn(2, s.parts, "b")
	sched := entry("p1-sched", keyIn(1, s.parts, "s"))
	sched.NotBefore = time.Now().Add(time.Hour)
	s.appendCommit(t, entry("p0-a1", ka0), entry("p2-a1", ka2))
	s.sleep(t, 30*time.Millisecond)
	s.appendCommit(t, entry("p0-a2", ka0), entry("p2-b1", kb2), sched)
	s.sleep(t, 30*time.Millisecond)
	s.appendCommit(t, entry("p0-b1", kb0), entry("p0-b2", kb0), entry("p2-b2", kb2))
	for _, c := range []struct {
		partition int
		fail      []string
	}{{0, []string{"p0-a1", "p0-b1"}}, {2, []string{"p2-b1"}}} {
		l := s.acquire(t, c.partition, s.owner("relay"), longTTL)
		batch := s.fetch(t, l, 100)
		var fs []outbox.Failure
		var rest []string
		for _, e := range batch {
			if slices.Contains(c.fail, e.ID) {
				fs = append(fs, outbox.Failure{ID: e.ID, Error: "boom", Delay: time.Hour})
			} else {
				rest = append(rest, e.ID)
			}
		}
		s.markFailed(t, l, fs...)
		s.release(t, l, rest...)
		s.releaseLease(t, l)
	}
	stats, err := pi.PartitionStats(s.ctx)
	if err != nil {
		t.Fatalf("PartitionStats: %v", err)
	}
	if len(stats) != s.parts {
		t.Fatalf("PartitionStats returned %d partitions; want %d", len(stats), s.parts)
	}
	blocked := make([]int64, s.parts)
	for _, k := range s.allBlocked(t, ls, outbox.ListFilter{}, 100) {
		blocked[k.Head.Partition]++
	}
	if !slices.Equal(blocked, []int64{2, 0, 1}) {
		t.Fatalf("BlockedKeys lists %v keys by partition; want [2 0 1]", blocked)
	}
	// Oldest due: p0-a2 (held back behind p0-a1, but due), none in
	// partition 1 (only scheduled), p2-a1 (never attempted).
	for p, want := range []string{"p0-a2", "", "p2-a1"} {
		if stats[p].BlockedKeys != blocked[p] || stats[p].OldestDueID != want {
			t.Errorf("PartitionStats of partition %d: BlockedKeys %d, OldestDueID %q; want %d (as BlockedKeys lists) and %q (the oldest due entry, the one OldestDue is the due time of)",
				p, stats[p].BlockedKeys, stats[p].OldestDueID, blocked[p], want)
		}
	}
}

func listBlockedBadArguments[Tx any](t *testing.T, s *env[Tx]) {
	ls := s.lister(t)
	s.appendCommit(t, entry("e1", "k"))
	for _, limit := range []int{0, -1} {
		if got, err := ls.BlockedKeys(s.ctx, outbox.ListFilter{}, outbox.BlockedKey{}, limit); !errors.Is(err, outbox.ErrInvalidArgument) {
			t.Errorf("BlockedKeys(limit %d): got %s, %v; want an error wrapping ErrInvalidArgument", limit, fmtBlockedList(got), err)
		}
	}
	cctx, cancel := context.WithCancel(s.ctx)
	cancel()
	if _, err := ls.BlockedKeys(cctx, outbox.ListFilter{}, outbox.BlockedKey{}, 10); !errors.Is(err, context.Canceled) {
		t.Errorf("BlockedKeys with a cancelled context: got %v; want an error wrapping context.Canceled", err)
	}
	if err := s.b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := ls.BlockedKeys(s.ctx, outbox.ListFilter{}, outbox.BlockedKey{}, 10); !errors.Is(err, outbox.ErrClosed) {
		t.Errorf("BlockedKeys after Close: got %v; want an error wrapping ErrClosed", err)
	}
}
