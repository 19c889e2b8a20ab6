package conformance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backoff"
)

// retentionCases pin the optional interfaces of retention and store
// health: [outbox.ArchiveJanitor] (with Config.Archive), [outbox.ParkedPurger]
// and [outbox.HealthChecker], and the relay's retention rounds over a
// ParkedPurger. Each is skipped, saying so, when the backend does not
// implement its interface.
func retentionCases[Tx any]() []testCase[Tx] {
	return []testCase[Tx]{
		{group: "ArchiveJanitor", name: "PurgeRemovesArchivedBeforeHorizon", archive: true, run: archivePurgeHorizon[Tx]},
		{group: "ArchiveJanitor", name: "PurgeBoundedWithMore", archive: true, run: archivePurgeBounded[Tx]},
		{group: "ArchiveJanitor", name: "PurgeOldestFirst", archive: true, run: archivePurgeOldestFirst[Tx]},
		{group: "ArchiveJanitor", name: "MaintainIdempotent", archive: true, run: archiveMaintain[Tx]},
		{group: "ParkedPurger", name: "RemovesOnlyParked", partitions: 2, run: parkedPurgeOnlyParked[Tx]},
		{group: "ParkedPurger", name: "HorizonRespected", run: parkedPurgeHorizon[Tx]},
		{group: "ParkedPurger", name: "LimitMoreAndOldestFirst", run: parkedPurgeLimit[Tx]},
		{group: "ParkedPurger", name: "RequeuedNotRemoved", run: parkedPurgeRequeued[Tx]},
		{group: "HealthChecker", name: "Reports", run: healthReports[Tx]},
		{group: "Retention", name: "ParkedRemovedOnceByHolderOfPartition0", partitions: 2, run: retentionRelayParked[Tx]},
	}
}

// horizon is how far before or after the suite's clock a purge's horizon
// is set when every entry must, or none may, be older: far beyond any
// clock skew between the suite and the server.
const horizon = time.Hour

// allSent is a PurgeArchiveBatch horizon after every entry a case sent:
// up to an hour ahead of the suite's clock, but within today's UTC day, so
// that an archive partitioned by day still holds today's partition across
// the horizon and removes its rows in batches of limit (a partition wholly
// before the horizon may be dropped at once, beyond limit).
func allSent() time.Time {
	now := time.Now().UTC()
	midnight := now.Truncate(24 * time.Hour).Add(24 * time.Hour)
	return now.Add(max(min(horizon, midnight.Sub(now)-time.Second), 2*clockSkew))
}

// PartitionedArchive is an optional interface of a [Harness] whose backend
// keeps its archive partitioned by time and keeps the rows of a partition
// that also holds entries newer than a purge's horizon until the whole
// partition is older than the horizon (pgoutbox with ArchivePartitioned,
// whose partitions are UTC days). The "ArchiveJanitor" cases then check
// that a purge with a horizon inside today removes nothing and keeps the
// archive as it is, instead of expecting today's rows removed in batches;
// dropping whole partitions is for the backend's own tests, which can
// make a day old.
type PartitionedArchive interface {
	// ArchiveKeepsPartitions reports whether the harness's backend keeps
	// a partition's rows until the whole partition is past the horizon.
	ArchiveKeepsPartitions() bool
}

// keepsPartitions reports whether the harness says its archive keeps
// today's partition whole ([PartitionedArchive]).
func (s *env[Tx]) keepsPartitions() bool {
	p, ok := s.h.(PartitionedArchive)
	return ok && p.ArchiveKeepsPartitions()
}

// keptWhole checks, for a harness whose archive keeps today's partition
// whole, that a purge with a horizon inside today removed nothing, and
// ends the case there.
func (s *env[Tx]) keptWhole(t *testing.T, j outbox.ArchiveJanitor, what string) {
	t.Helper()
	if n, more := s.purgeArchive(t, j, allSent(), 100); n != 0 || more {
		t.Fatalf("PurgeArchiveBatch(within today, limit 100) = (%d, more %v) on an archive that keeps today's partition whole (conformance.PartitionedArchive); want (0, false)", n, more)
	}
	s.archived(t, j, what)
	t.Log("the harness's archive keeps today's partition whole (conformance.PartitionedArchive): removal in batches is not checked here")
}

func (s *env[Tx]) archiveJanitor(t *testing.T) outbox.ArchiveJanitor {
	t.Helper()
	j, ok := s.b.(outbox.ArchiveJanitor)
	if !ok {
		t.Skipf("the backend (%T) does not implement outbox.ArchiveJanitor", s.b)
	}
	return j
}

func (s *env[Tx]) parkedPurger(t *testing.T) outbox.ParkedPurger {
	t.Helper()
	p, ok := s.b.(outbox.ParkedPurger)
	if !ok {
		t.Skipf("the backend (%T) does not implement outbox.ParkedPurger", s.b)
	}
	return p
}

// sendAll appends entries, fetches them all on partition 0 and marks them
// sent, which archives them with Config.Archive.
func (s *env[Tx]) sendAll(t *testing.T, entries ...outbox.Entry) {
	t.Helper()
	s.appendCommit(t, entries...)
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	batch := s.fetch(t, l, len(entries)+10)
	expectIDs(t, "fetch of the entries to send", batch, ids(entries)...)
	s.markSent(t, l, ids(batch)...)
	s.releaseLease(t, l)
}

// oldest calls OldestArchived or fails the case.
func (s *env[Tx]) oldest(t *testing.T, j outbox.ArchiveJanitor) (time.Time, bool) {
	t.Helper()
	at, ok, err := j.OldestArchived(s.ctx)
	if err != nil {
		t.Fatalf("OldestArchived: %v", err)
	}
	return at, ok
}

// archived requires the archive to hold something after MarkSent: else
// the harness ignored Config.Archive.
func (s *env[Tx]) archived(t *testing.T, j outbox.ArchiveJanitor, what string) time.Time {
	t.Helper()
	at, ok := s.oldest(t, j)
	if !ok {
		t.Fatalf("OldestArchived reports an empty archive after %s: either MarkSent does not archive, or the harness ignored Config.Archive (build the backend with its archive option when Config.Archive is set)", what)
	}
	return at
}

// purgeArchive calls PurgeArchiveBatch or fails the case.
func (s *env[Tx]) purgeArchive(t *testing.T, j outbox.ArchiveJanitor, before time.Time, limit int) (int64, bool) {
	t.Helper()
	n, more, err := j.PurgeArchiveBatch(s.ctx, before, limit)
	if err != nil {
		t.Fatalf("PurgeArchiveBatch(%v, %d): %v", before, limit, err)
	}
	if n < 0 || n > int64(limit) {
		t.Fatalf("PurgeArchiveBatch(%v, limit %d) removed %d rows: not within [0, limit] (for a plain archive)", before, limit, n)
	}
	return n, more
}

func archivePurgeHorizon[Tx any](t *testing.T, s *env[Tx]) {
	j := s.archiveJanitor(t)
	if n, more := s.purgeArchive(t, j, allSent(), 100); n != 0 || more {
		t.Fatalf("PurgeArchiveBatch on an empty archive = (%d, more %v), want (0, false)", n, more)
	}
	if _, ok := s.oldest(t, j); ok {
		t.Fatal("OldestArchived reports an entry in an empty archive")
	}
	start := time.Now()
	s.sendAll(t, keyed("a", "k", 3)...)
	s.appendCommit(t, entry("pending", "k"))
	at := s.archived(t, j, "MarkSent of a1..a3")
	if at.Before(start.Add(-clockSkew)) || at.After(time.Now().Add(clockSkew)) {
		t.Errorf("OldestArchived = %v, not when the entries were sent (between %v and %v)", at, start, time.Now())
	}
	if n, more := s.purgeArchive(t, j, time.Now().Add(-horizon), 100); n != 0 || more {
		t.Fatalf("PurgeArchiveBatch(an hour ago) removed %d (more %v): no entry was sent before then", n, more)
	}
	s.archived(t, j, "a purge that had nothing to remove")
	if s.keepsPartitions() {
		s.keptWhole(t, j, "a purge within today's partition")
		return
	}
	n, more := s.purgeArchive(t, j, allSent(), 100)
	if n != 3 || more {
		t.Fatalf("PurgeArchiveBatch(an hour ahead, limit 100) = (%d, more %v), want (3, false): every archived entry was sent before then", n, more)
	}
	if at, ok := s.oldest(t, j); ok {
		t.Fatalf("OldestArchived = %v after every archived entry was removed; want an empty archive", at)
	}
	expectIDs(t, "the pending entry after the archive was purged", s.peek(t, 0), "pending")
}

func archivePurgeBounded[Tx any](t *testing.T, s *env[Tx]) {
	j := s.archiveJanitor(t)
	s.sendAll(t, keyed("a", "k", 5)...)
	s.archived(t, j, "MarkSent of a1..a5")
	if s.keepsPartitions() {
		s.keptWhole(t, j, "a purge within today's partition")
		return
	}
	before := allSent()
	var total int64
	for call := 1; ; call++ {
		n, more := s.purgeArchive(t, j, before, 2)
		total += n
		if total < 5 && !more {
			t.Fatalf("PurgeArchiveBatch call %d (limit 2) removed %d, %d in all of 5, and reported no more", call, n, total)
		}
		if !more {
			break
		}
		if call > 5 {
			t.Fatalf("PurgeArchiveBatch (limit 2) still reports more after %d calls that removed %d of 5", call, total)
		}
	}
	if total != 5 {
		t.Fatalf("PurgeArchiveBatch calls removed %d entries in all; want the 5 archived", total)
	}
	if n, more := s.purgeArchive(t, j, before, 2); n != 0 || more {
		t.Fatalf("PurgeArchiveBatch on the emptied archive = (%d, more %v), want (0, false)", n, more)
	}
}

func archivePurgeOldestFirst[Tx any](t *testing.T, s *env[Tx]) {
	j := s.archiveJanitor(t)
	s.sendAll(t, entry("old", "k"))
	s.sleep(t, scheduleAhead)
	mid := time.Now()
	s.sleep(t, scheduleAhead)
	s.sendAll(t, entry("new", "k"))
	first := s.archived(t, j, "MarkSent of two entries")
	if s.keepsPartitions() {
		s.keptWhole(t, j, "a purge within today's partition")
		return
	}
	if n, _ := s.purgeArchive(t, j, allSent(), 1); n != 1 {
		t.Fatalf("PurgeArchiveBatch(limit 1) removed %d; want 1", n)
	}
	at := s.archived(t, j, "removing one of two archived entries")
	if !at.After(first) || at.Before(mid.Add(-clockSkew)) {
		t.Fatalf("after PurgeArchiveBatch(limit 1) the oldest archived entry was sent at %v (the first at %v, the second after %v): the purge must remove the oldest first", at, first, mid)
	}
	if n, more := s.purgeArchive(t, j, mid, 10); n != 0 || more {
		t.Fatalf("PurgeArchiveBatch(between the two sends) = (%d, more %v) with only the newer entry left; want (0, false)", n, more)
	}
}

func archiveMaintain[Tx any](t *testing.T, s *env[Tx]) {
	j := s.archiveJanitor(t)
	for i := range 2 {
		if err := j.MaintainArchive(s.ctx, time.Now()); err != nil {
			t.Fatalf("MaintainArchive call %d: %v", i+1, err)
		}
	}
	s.sendAll(t, keyed("a", "k", 2)...)
	s.archived(t, j, "MaintainArchive and MarkSent")
	if err := j.MaintainArchive(s.ctx, time.Now()); err != nil {
		t.Fatalf("MaintainArchive with archived entries: %v", err)
	}
	if s.keepsPartitions() {
		s.keptWhole(t, j, "a purge within today's partition")
		return
	}
	if n, _ := s.purgeArchive(t, j, allSent(), 10); n != 2 {
		t.Fatalf("PurgeArchiveBatch after MaintainArchive removed %d; want the 2 archived", n)
	}
}

// park appends entries and parks them all (partition by partition)
// through MarkFailed.
func (s *env[Tx]) park(t *testing.T, entries ...outbox.Entry) {
	t.Helper()
	s.appendCommit(t, entries...)
	for p := range s.parts {
		var want []string
		for _, e := range entries {
			if outbox.PartitionOf(e.Key, s.parts) == p {
				want = append(want, e.ID)
			}
		}
		if len(want) == 0 {
			continue
		}
		l := s.acquire(t, p, s.owner("relay"), longTTL)
		batch := s.fetch(t, l, len(want)+10)
		expectIDs(t, fmt.Sprintf("fetch of partition %d to park its entries", p), batch, want...)
		fs := make([]outbox.Failure, len(batch))
		for i, e := range batch {
			fs[i] = outbox.Failure{ID: e.ID, Error: "poison", Park: true}
		}
		s.markFailed(t, l, fs...)
		s.releaseLease(t, l)
	}
}

// purgeParked calls PurgeParked or fails the case.
func (s *env[Tx]) purgeParked(t *testing.T, p outbox.ParkedPurger, before time.Time, limit int) ([]string, bool) {
	t.Helper()
	got, more, err := p.PurgeParked(s.ctx, before, limit)
	if err != nil {
		t.Fatalf("PurgeParked(%v, %d): %v", before, limit, err)
	}
	if len(got) > limit {
		t.Fatalf("PurgeParked(limit %d) removed %d entries %v: more than the limit", limit, len(got), got)
	}
	return got, more
}

// sameSet fails the case unless got and want hold the same IDs.
func sameSet(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	g, w := slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))
	if !slices.Equal(g, w) {
		t.Fatalf("%s: got %v, want %v", what, g, w)
	}
}

func parkedPurgeOnlyParked[Tx any](t *testing.T, s *env[Tx]) {
	p := s.parkedPurger(t)
	keys := keysByPartition(s.parts)
	s.park(t, entry("p0", keys[0]), entry("p1", keys[1]), entry("px", ""))
	s.appendCommit(t, entry("q0", keys[0]+"-other"), entry("q1", keys[1]+"-other"))
	l := s.acquire(t, 0, s.owner("claimer"), longTTL)
	claimed := s.fetch(t, l, 10) // claimed entries are pending too
	got, more := s.purgeParked(t, p, time.Now().Add(horizon), 100)
	sameSet(t, "PurgeParked(an hour ahead) with parked p0, p1, px and pending q0, q1", got, "p0", "p1", "px")
	if more {
		t.Errorf("PurgeParked removed every parked entry but reports more")
	}
	if got, more := s.purgeParked(t, p, time.Now().Add(horizon), 100); len(got) != 0 || more {
		t.Fatalf("a second PurgeParked = (%v, more %v); the parked entries were removed by the first, want nothing", got, more)
	}
	if len(claimed) > 0 {
		s.release(t, l, ids(claimed)...)
	}
	s.releaseLease(t, l)
	var pending []string
	for part := range s.parts {
		pending = append(pending, ids(s.peek(t, part))...)
	}
	sameSet(t, "pending entries after PurgeParked", pending, "q0", "q1")
	if in, ok := s.b.(outbox.Inspector); ok {
		parked, err := in.Parked(s.ctx, "", 100)
		if err != nil {
			t.Fatalf("Parked: %v", err)
		}
		expectIDs(t, "Parked after PurgeParked removed every parked entry", parked)
	}
}

func parkedPurgeHorizon[Tx any](t *testing.T, s *env[Tx]) {
	p := s.parkedPurger(t)
	s.park(t, entry("p1", "k"), entry("p2", "j"))
	if got, more := s.purgeParked(t, p, time.Now().Add(-horizon), 100); len(got) != 0 || more {
		t.Fatalf("PurgeParked(an hour ago) = (%v, more %v); both entries were parked just now, want nothing removed", got, more)
	}
	got, _ := s.purgeParked(t, p, time.Now().Add(horizon), 100)
	sameSet(t, "PurgeParked(an hour ahead) after one that was to remove nothing", got, "p1", "p2")
}

func parkedPurgeLimit[Tx any](t *testing.T, s *env[Tx]) {
	p := s.parkedPurger(t)
	for i := 1; i <= 3; i++ {
		s.park(t, entry(fmt.Sprintf("p%d", i), fmt.Sprintf("k%d", i)))
		s.sleep(t, 2*pollEvery)
	}
	before := time.Now().Add(horizon)
	got, more := s.purgeParked(t, p, before, 2)
	sameSet(t, "PurgeParked(limit 2) of p1, p2, p3 parked in that order", got, "p1", "p2")
	if !more {
		t.Errorf("PurgeParked(limit 2) left p3 parked but reports no more")
	}
	got, _ = s.purgeParked(t, p, before, 2)
	sameSet(t, "the second PurgeParked(limit 2)", got, "p3")
	if got, more := s.purgeParked(t, p, before, 2); len(got) != 0 || more {
		t.Fatalf("PurgeParked with nothing parked = (%v, more %v), want nothing and no more", got, more)
	}
}

func parkedPurgeRequeued[Tx any](t *testing.T, s *env[Tx]) {
	p := s.parkedPurger(t)
	in := s.inspector(t)
	s.park(t, entry("p1", "k"), entry("p2", "j"))
	s.sleep(t, scheduleAhead)
	mid := time.Now()
	s.sleep(t, scheduleAhead)
	if n, err := in.Requeue(s.ctx, "p1"); err != nil || n != 1 {
		t.Fatalf("Requeue(p1) = %d, %v; want 1, nil", n, err)
	}
	got, _ := s.purgeParked(t, p, time.Now().Add(horizon), 100)
	sameSet(t, "PurgeParked with p1 requeued and p2 parked", got, "p2")
	// Parked again, p1's park time is the new one: a horizon between the
	// two parks leaves it.
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	batch := s.fetch(t, l, 10)
	expectIDs(t, "fetch after requeue", batch, "p1")
	s.markFailed(t, l, outbox.Failure{ID: "p1", Error: "poison again", Park: true})
	s.releaseLease(t, l)
	if got, more := s.purgeParked(t, p, mid, 100); len(got) != 0 || more {
		t.Fatalf("PurgeParked(between p1's first park and its park after the requeue) = (%v, more %v): its park time must start over, want nothing removed", got, more)
	}
	got, _ = s.purgeParked(t, p, time.Now().Add(horizon), 100)
	sameSet(t, "PurgeParked(an hour ahead) after p1 was parked again", got, "p1")
}

func healthReports[Tx any](t *testing.T, s *env[Tx]) {
	hc, ok := s.b.(outbox.HealthChecker)
	if !ok {
		t.Skipf("the backend (%T) does not implement outbox.HealthChecker", s.b)
	}
	for i := range 2 {
		h, err := hc.Health(s.ctx)
		if err != nil {
			t.Fatalf("Health call %d: %v", i+1, err)
		}
		for _, tb := range h.Tables {
			if tb.Name == "" || tb.Bytes < 0 || tb.LiveRows < -1 || tb.DeadRows < -1 || tb.Vacuums < -1 {
				t.Errorf("Health call %d: table %+v: a table needs a name, and no figure may be below -1 (Bytes not below 0)", i+1, tb)
			}
		}
		if m := h.Memory; m != nil && (m.UsedBytes < 0 || m.RSSBytes < 0 || m.Fragmentation < 0) {
			t.Errorf("Health call %d: memory %+v has a negative figure", i+1, *m)
		}
		for _, w := range h.Warnings {
			if w.Code == "" || w.Message == "" {
				t.Errorf("Health call %d: warning %+v: every warning needs a Code and a Message", i+1, w)
			}
		}
		if i == 0 {
			s.sendAll(t, keyed("a", "k", 3)...)
		}
	}
}

// retentionRelayParked runs two relays over the backend, one serving each
// of its two partitions, with ParkedRetention and a short
// RetentionInterval; the sink refuses every entry for good, so each is
// parked and then removed. Every parked entry must be removed exactly
// once, by the relay that serves partition 0 only.
func retentionRelayParked[Tx any](t *testing.T, s *env[Tx]) {
	s.parkedPurger(t)
	const n = 8
	var entries []outbox.Entry
	for i := range n {
		entries = append(entries, entry(fmt.Sprintf("e%d", i), fmt.Sprintf("k%d", i)))
	}
	var attempts atomic.Int64
	sink := outbox.SinkFunc(func(context.Context, outbox.Entry) error {
		attempts.Add(1)
		return backoff.Permanent(errors.New("refused for good by the suite's sink"))
	})
	relays := make([]*outbox.Relay, 2)
	for p := range relays {
		o := relayOptions(s.owner(fmt.Sprintf("janitor%d", p)))
		o.Partitions = []int{p}
		o.ParkedRetention = time.Millisecond
		o.RetentionInterval = 30 * time.Millisecond
		o.RetentionPause = time.Millisecond
		o.RetentionBatch = 3
		o.HealthInterval = -1
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		r, err := outbox.NewRelay(s.b, sink, o)
		if err != nil {
			t.Fatalf("NewRelay with ParkedRetention over a ParkedPurger: %v", err)
		}
		if err := r.Start(s.ctx); err != nil {
			t.Fatalf("Start: %v", err)
		}
		t.Cleanup(func() { _ = r.Stop(context.Background()) })
		relays[p] = r
	}
	s.appendCommit(t, entries...)
	removed := func() int64 { return relays[0].Stats().ParkedRemoved + relays[1].Stats().ParkedRemoved }
	deadline := time.Now().Add(relayWait)
	for removed() < n || relays[0].Stats().Parked+relays[1].Stats().Parked < n {
		if time.Now().After(deadline) {
			t.Fatalf("after %v the relays parked %d and removed %d of %d entries (stats %+v and %+v)", relayWait, relays[0].Stats().Parked+relays[1].Stats().Parked, removed(), n, relays[0].Stats(), relays[1].Stats())
		}
		s.sleep(t, pollEvery)
	}
	// A few more rounds: a backend that hands an entry out twice shows it.
	s.sleep(t, 10*30*time.Millisecond)
	for _, r := range relays {
		if err := r.Stop(s.ctx); err != nil {
			t.Fatalf("Stop: %v", err)
		}
	}
	st0, st1 := relays[0].Stats(), relays[1].Stats()
	if st1.ParkedRemoved != 0 || st1.RetentionRounds != 0 {
		t.Errorf("the relay serving partition 1 only ran %d retention rounds and removed %d parked entries; only the holder of partition 0 may", st1.RetentionRounds, st1.ParkedRemoved)
	}
	if st0.ParkedRemoved != n {
		t.Errorf("the relay holding partition 0 removed %d parked entries; want each of the %d parked entries removed exactly once", st0.ParkedRemoved, n)
	}
	if got, _ := s.purgeParked(t, s.parkedPurger(t), time.Now().Add(horizon), 100); len(got) != 0 {
		t.Errorf("entries %v were still parked after the relay's retention rounds removed every entry", got)
	}
}
