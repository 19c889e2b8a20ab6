package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
)

// pauserCases pin [outbox.Pauser]: delivery stopped and restarted by
// topic or by partition. They are skipped, saying so, when the backend
// does not implement it.
func pauserCases[Tx any]() []testCase[Tx] {
	return []testCase[Tx]{
		{group: "Pauser", name: "PausedTopicNotFetched", run: pauseTopicNotFetched[Tx]},
		{group: "Pauser", name: "ResumeDeliversInKeyOrder", run: pauseResumeOrder[Tx]},
		{group: "Pauser", name: "EveryFetchSkipsPaused", partitions: 2, run: pauseEveryFetch[Tx]},
		{group: "Pauser", name: "PausedPartitionFetchesNothing", partitions: 2, run: pausePartition[Tx]},
		{group: "Pauser", name: "IdempotentAndSinceKept", partitions: 4, run: pauseIdempotent[Tx]},
		{group: "Pauser", name: "RejectsBadArguments", partitions: 2, run: pauseBadArguments[Tx]},
	}
}

func (s *env[Tx]) pauser(t *testing.T) outbox.Pauser {
	t.Helper()
	p, ok := s.b.(outbox.Pauser)
	if !ok {
		t.Skipf("the backend (%T) does not implement outbox.Pauser", s.b)
	}
	return p
}

// paused calls Paused or fails the case.
func (s *env[Tx]) paused(t *testing.T, p outbox.Pauser) outbox.Paused {
	t.Helper()
	got, err := p.Paused(s.ctx)
	if err != nil {
		t.Fatalf("Paused: %v", err)
	}
	return got
}

// on returns an entry of topic tp.
func on(tp, id, key string) outbox.Entry {
	e := entry(id, key)
	e.Topic = tp
	return e
}

// pausedFixture appends, around a pause of pausedTopic, entries of it and
// entries of topic that share their keys, and returns the IDs in append
// order. p1 (key k) and p3 (key m) are of the paused topic, holding back
// c1 and c3 (appended after each, same key, other topic); p2 has no key;
// c2 (key j) is free. p3 and c3 are appended while the topic is paused.
func (s *env[Tx]) pausedFixture(t *testing.T, p outbox.Pauser) {
	t.Helper()
	s.appendCommit(t, on(pausedTopic, "p1", "k"), on(topic, "c1", "k"), on(topic, "c2", "j"), on(pausedTopic, "p2", ""))
	if err := p.PauseTopic(s.ctx, pausedTopic); err != nil {
		t.Fatalf("PauseTopic(%q): %v", pausedTopic, err)
	}
	s.appendCommit(t, on(pausedTopic, "p3", "m"), on(topic, "c3", "m"))
}

func pauseTopicNotFetched[Tx any](t *testing.T, s *env[Tx]) {
	p := s.pauser(t)
	s.pausedFixture(t, p)
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	for i := range 3 {
		batch := s.fetch(t, l, 100)
		expectIDs(t, fmt.Sprintf("fetch %d while %q is paused (p1, p2, p3 are of it; c1 and c3 are held back behind p1 and p3, of their keys)", i+1, pausedTopic), batch, "c2")
		s.release(t, l, "c2")
	}
	s.markSent(t, l, "c2")
	expectIDs(t, "fetch after c2 was sent, while the topic is paused", s.fetch(t, l, 100))
	if lk, ok := s.b.(outbox.Looker); ok {
		for _, id := range []string{"p1", "p2", "p3", "c1", "c3"} {
			if info := s.lookup(t, lk, id); info.Attempts != 0 || info.LastError != "" || info.Parked || len(info.History) != 0 {
				t.Errorf("Lookup(%s) while its topic or key is paused returned %s; want it pending and unchanged: a pause counts no attempt", id, fmtInfo(info))
			}
		}
	}
}

func pauseResumeOrder[Tx any](t *testing.T, s *env[Tx]) {
	p := s.pauser(t)
	s.pausedFixture(t, p)
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "fetch while paused", s.fetch(t, l, 100), "c2")
	s.release(t, l, "c2")
	if err := p.ResumeTopic(s.ctx, pausedTopic); err != nil {
		t.Fatalf("ResumeTopic(%q): %v", pausedTopic, err)
	}
	if got := s.paused(t, p); !got.Empty() {
		t.Fatalf("Paused after ResumeTopic reports %+v; want nothing paused", got)
	}
	expectIDs(t, "fetch after the resume (every entry, each key in append order)", s.fetch(t, l, 100), "p1", "c1", "c2", "p2", "p3", "c3")
}

// pauseEveryFetch checks what PausedTopicNotFetched and
// PausedPartitionFetchesNothing check of FindPendingBatch with FetchBatch
// and FetchNext, where the backend implements them.
func pauseEveryFetch[Tx any](t *testing.T, s *env[Tx]) {
	p := s.pauser(t)
	bf, isBF := s.b.(outbox.BatchFetcher)
	pf, isPF := s.b.(outbox.Prefetcher)
	if !isBF && !isPF {
		t.Skipf("the backend (%T) implements neither outbox.BatchFetcher nor outbox.Prefetcher", s.b)
	}
	k, j := keyIn(0, s.parts, "k"), keyIn(0, s.parts, "j")
	s.appendCommit(t, on(pausedTopic, "p1", k), on(topic, "c1", k), on(topic, "c2", j), on(topic, "e1", keyIn(1, s.parts, "e")))
	if err := p.PauseTopic(s.ctx, pausedTopic); err != nil {
		t.Fatalf("PauseTopic(%q): %v", pausedTopic, err)
	}
	if err := p.PausePartition(s.ctx, 1); err != nil {
		t.Fatalf("PausePartition(1): %v", err)
	}
	l0 := s.acquire(t, 0, s.owner("relay"), longTTL)
	l1 := s.acquire(t, 1, s.owner("relay"), longTTL)
	if isBF {
		for _, c := range []struct {
			l    outbox.Lease
			want []string
		}{{l0, []string{"c2"}}, {l1, nil}} {
			b, err := bf.FetchBatch(s.ctx, c.l, 100)
			if err != nil {
				t.Fatalf("FetchBatch(%s): %v", fmtLease(c.l), err)
			}
			expectIDs(t, fmt.Sprintf("FetchBatch(%s) while topic %q and partition 1 are paused", fmtLease(c.l), pausedTopic), b.Entries, c.want...)
			if len(b.Entries) > 0 {
				s.release(t, c.l, ids(b.Entries)...)
			}
		}
	}
	if isPF {
		inFlight := s.fetch(t, l0, 1)
		expectIDs(t, "FindPendingBatch(limit 1) while paused", inFlight, "c2")
		expectIDs(t, "FetchNext behind c2 while topic "+pausedTopic+" is paused (p1 paused, c1 held back by it)", s.fetchNext(t, pf, l0, 100, inFlight))
		expectIDs(t, "FetchNext of the paused partition 1", s.fetchNext(t, pf, l1, 100, nil))
		s.release(t, l0, "c2")
	}
}

func pausePartition[Tx any](t *testing.T, s *env[Tx]) {
	p := s.pauser(t)
	keys := keysByPartition(s.parts)
	s.appendCommit(t, entry("e0", keys[0]), entry("e1", keys[1]))
	if err := p.PausePartition(s.ctx, 1); err != nil {
		t.Fatalf("PausePartition(1): %v", err)
	}
	l0 := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "fetch of partition 0 while partition 1 is paused", s.fetch(t, l0, 10), "e0")
	l1 := s.acquire(t, 1, s.owner("relay"), longTTL)
	expectIDs(t, "fetch of the paused partition 1", s.fetch(t, l1, 10))
	stale := outbox.Lease{Partition: 1, Owner: "never-held", Version: l1.Version + 1000, Expires: l1.Expires}
	if batch, err := s.b.FindPendingBatch(s.ctx, stale, 10); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("FindPendingBatch(%s) on the paused partition with a lease never granted: got %v, %v; want an error wrapping ErrLeaseLost (a paused partition still checks the lease)", fmtLease(stale), ids(batch), err)
	}
	if err := p.ResumePartition(s.ctx, 1); err != nil {
		t.Fatalf("ResumePartition(1): %v", err)
	}
	expectIDs(t, "fetch of partition 1 after its resume", s.fetch(t, l1, 10), "e1")
}

func pauseIdempotent[Tx any](t *testing.T, s *env[Tx]) {
	p := s.pauser(t)
	if got := s.paused(t, p); !got.Empty() {
		t.Fatalf("Paused of a new outbox reports %+v; want nothing paused", got)
	}
	topics := []string{"b-topic", "B-topic", "a-topic", "Ä-topic", "_topic"}
	parts := []int{3, 0, 2}
	start := time.Now()
	for _, tp := range topics {
		if err := p.PauseTopic(s.ctx, tp); err != nil {
			t.Fatalf("PauseTopic(%q): %v", tp, err)
		}
	}
	for _, part := range parts {
		if err := p.PausePartition(s.ctx, part); err != nil {
			t.Fatalf("PausePartition(%d): %v", part, err)
		}
	}
	end := time.Now()
	first := s.paused(t, p)
	var gotTopics []string
	for _, pt := range first.Topics {
		gotTopics = append(gotTopics, pt.Topic)
		expectBetween(t, fmt.Sprintf("Since of the paused topic %q", pt.Topic), pt.Since, start, end)
	}
	if want := slices.Sorted(slices.Values(topics)); !slices.Equal(gotTopics, want) {
		t.Fatalf("Paused reports the topics %q; want %q (by byte order)", gotTopics, want)
	}
	var gotParts []int
	for _, pp := range first.Partitions {
		gotParts = append(gotParts, pp.Partition)
		expectBetween(t, fmt.Sprintf("Since of the paused partition %d", pp.Partition), pp.Since, start, end)
	}
	if want := slices.Sorted(slices.Values(parts)); !slices.Equal(gotParts, want) {
		t.Fatalf("Paused reports the partitions %v; want %v (ascending)", gotParts, want)
	}
	// The store's clock moves on; pausing again keeps Since.
	s.sleep(t, 30*time.Millisecond)
	for _, tp := range topics {
		if err := p.PauseTopic(s.ctx, tp); err != nil {
			t.Fatalf("PauseTopic(%q) of a paused topic: %v", tp, err)
		}
	}
	for _, part := range parts {
		if err := p.PausePartition(s.ctx, part); err != nil {
			t.Fatalf("PausePartition(%d) of a paused partition: %v", part, err)
		}
	}
	again := s.paused(t, p)
	if !slices.EqualFunc(again.Topics, first.Topics, func(x, y outbox.PausedTopic) bool { return x.Topic == y.Topic && x.Since.Equal(y.Since) }) ||
		!slices.EqualFunc(again.Partitions, first.Partitions, func(x, y outbox.PausedPartition) bool { return x.Partition == y.Partition && x.Since.Equal(y.Since) }) {
		t.Fatalf("Paused after pausing everything again reports %+v; want %+v: pausing a paused topic or partition keeps its Since", again, first)
	}
	for range 2 {
		for _, tp := range append(topics, "never-paused") {
			if err := p.ResumeTopic(s.ctx, tp); err != nil {
				t.Fatalf("ResumeTopic(%q): %v; resuming a topic that is not paused is a no-op", tp, err)
			}
		}
		for part := range s.parts {
			if err := p.ResumePartition(s.ctx, part); err != nil {
				t.Fatalf("ResumePartition(%d): %v; resuming a partition that is not paused is a no-op", part, err)
			}
		}
	}
	if got := s.paused(t, p); !got.Empty() {
		t.Fatalf("Paused after resuming everything reports %+v; want nothing paused", got)
	}
}

func pauseBadArguments[Tx any](t *testing.T, s *env[Tx]) {
	p := s.pauser(t)
	calls := []struct {
		what string
		call func(ctx context.Context) error
	}{
		{`PauseTopic("")`, func(ctx context.Context) error { return p.PauseTopic(ctx, "") }},
		{`ResumeTopic("")`, func(ctx context.Context) error { return p.ResumeTopic(ctx, "") }},
		{"PausePartition(-1)", func(ctx context.Context) error { return p.PausePartition(ctx, -1) }},
		{"PausePartition(Partitions())", func(ctx context.Context) error { return p.PausePartition(ctx, s.parts) }},
		{"ResumePartition(-1)", func(ctx context.Context) error { return p.ResumePartition(ctx, -1) }},
		{"ResumePartition(Partitions())", func(ctx context.Context) error { return p.ResumePartition(ctx, s.parts) }},
	}
	for _, c := range calls {
		if err := c.call(s.ctx); !errors.Is(err, outbox.ErrInvalidArgument) {
			t.Errorf("%s: got %v; want an error wrapping ErrInvalidArgument", c.what, err)
		}
	}
	if got := s.paused(t, p); !got.Empty() {
		t.Errorf("Paused after refused calls reports %+v; want nothing paused", got)
	}
	cctx, cancel := context.WithCancel(s.ctx)
	cancel()
	if err := p.PauseTopic(cctx, topic); !errors.Is(err, context.Canceled) {
		t.Errorf("PauseTopic with a cancelled context: got %v; want an error wrapping context.Canceled", err)
	}
	if err := s.b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	valid := []struct {
		what string
		call func(ctx context.Context) error
	}{
		{"PauseTopic", func(ctx context.Context) error { return p.PauseTopic(ctx, topic) }},
		{"ResumeTopic", func(ctx context.Context) error { return p.ResumeTopic(ctx, topic) }},
		{"PausePartition", func(ctx context.Context) error { return p.PausePartition(ctx, 0) }},
		{"ResumePartition", func(ctx context.Context) error { return p.ResumePartition(ctx, 0) }},
		{"Paused", func(ctx context.Context) error { _, err := p.Paused(ctx); return err }},
	}
	for _, c := range valid {
		if err := c.call(s.ctx); !errors.Is(err, outbox.ErrClosed) {
			t.Errorf("%s after Close: got %v; want an error wrapping ErrClosed", c.what, err)
		}
	}
}
