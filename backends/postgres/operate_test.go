package pgoutbox_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
)

// Tests of the operator interfaces (operate.go, migration 007) on the
// real PostgreSQL, beyond the conformance cases: what the SQL computes
// (histories, deferrals, pauses, listings) and how it is stored.

// fail marks the entries failed under l with the given failures.
func fail(t *testing.T, b *pgoutbox.Backend, l outbox.Lease, fs ...outbox.Failure) {
	t.Helper()
	require.NoError(t, b.MarkFailed(t.Context(), l, fs))
}

// lookup returns the entry id as Lookup reports it.
func lookup(t *testing.T, b *pgoutbox.Backend, id string) outbox.EntryInfo {
	t.Helper()
	info, err := b.Lookup(t.Context(), id)
	require.NoError(t, err)
	return info
}

func TestAttemptHistory(t *testing.T) {
	t.Parallel()
	b, p := newBackend(t, extended, pgoutbox.Options{})
	ctx := t.Context()
	appendEntries(t, b, p, outbox.Entry{ID: "h", Topic: "t", Key: "k"})
	l, err := b.AcquireLease(ctx, 0, "relay-1", time.Minute)
	require.NoError(t, err)
	require.Nil(t, lookup(t, b, "h").History, "a never attempted entry has no history")

	before := dbNow(t, p)
	for i := 1; i <= outbox.MaxAttemptHistory+2; i++ {
		fail(t, b, l, outbox.Failure{ID: "h", Error: fmt.Sprintf("broker error %d", i), Delay: -time.Second})
	}
	info := lookup(t, b, "h")
	require.Len(t, info.History, outbox.MaxAttemptHistory, "the last MaxAttemptHistory attempts are kept")
	for i, a := range info.History {
		require.Equal(t, fmt.Sprintf("broker error %d", i+3), a.Error, "attempt %d", i)
		require.Equal(t, "relay-1", a.Owner)
		require.False(t, a.At.Before(before.Truncate(time.Microsecond)), "attempt %d at %v, before the first failure (%v)", i, a.At, before)
		if i > 0 {
			require.False(t, a.At.Before(info.History[i-1].At), "attempts are oldest first")
		}
	}
	require.Equal(t, outbox.MaxAttemptHistory+2, info.Attempts)
	require.Equal(t, "broker error 12", info.LastError)
	require.False(t, info.Deferred)

	// A deferral is not an attempt: attempts, last error and history stay;
	// the due time moves and the entry reports Deferred.
	fail(t, b, l, outbox.Failure{ID: "h", Error: "not published: the breaker is open", Delay: time.Hour, Deferred: true})
	d := lookup(t, b, "h")
	require.Equal(t, info.History, d.History)
	require.Equal(t, info.Attempts, d.Attempts)
	require.Equal(t, info.LastError, d.LastError)
	require.True(t, d.Deferred)
	require.True(t, d.DueAt.After(dbNow(t, p).Add(50*time.Minute)), "deferred until %v", d.DueAt)

	// Park and Deferred together are refused before anything is written.
	err = b.MarkFailed(ctx, l, []outbox.Failure{{ID: "h", Error: "x", Delay: -time.Second}, {ID: "h", Park: true, Deferred: true}})
	require.ErrorIs(t, err, outbox.ErrInvalidArgument)
	require.Contains(t, err.Error(), "Park and Deferred")
	require.Equal(t, d, lookup(t, b, "h"))

	// A stale lease writes no history.
	_, err = b.RenewLease(ctx, l, time.Millisecond)
	require.NoError(t, err)
	time.Sleep(5 * time.Millisecond)
	l2, err := b.AcquireLease(ctx, 0, "relay-2", time.Minute)
	require.NoError(t, err)
	require.ErrorIs(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "h", Error: "stale"}}), outbox.ErrLeaseLost)
	require.Equal(t, d.History, lookup(t, b, "h").History)

	// Parking adds the attempt; Requeue keeps the history and clears the
	// deferral.
	fail(t, b, l2, outbox.Failure{ID: "h", Error: "permanent", Park: true})
	parked := lookup(t, b, "h")
	require.True(t, parked.Parked)
	require.False(t, parked.Deferred)
	require.Len(t, parked.History, outbox.MaxAttemptHistory)
	require.Equal(t, outbox.Attempt{At: parked.History[9].At, Error: "permanent", Owner: "relay-2"}, parked.History[9])
	n, err := b.Requeue(ctx, "h")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	rq := lookup(t, b, "h")
	require.Equal(t, parked.History, rq.History)
	require.Equal(t, 0, rq.Attempts)
	require.False(t, rq.Deferred)
}

// TestDeferredHoldsBackItsKey: a deferred entry holds back the later
// entries of its key (and no other key) until it is sent; an entry
// deferred before its first attempt is listed as scheduled.
func TestDeferredHoldsBackItsKey(t *testing.T) {
	t.Parallel()
	b, p := newBackend(t, extended, pgoutbox.Options{})
	ctx := t.Context()
	appendEntries(t, b, p, outbox.Entry{ID: "a1", Topic: "t", Key: "a"}, outbox.Entry{ID: "a2", Topic: "t", Key: "a"},
		outbox.Entry{ID: "b1", Topic: "t", Key: "b"})
	l := acquire(t, b, 0)
	fail(t, b, l, outbox.Failure{ID: "a1", Delay: -time.Second, Deferred: true})
	require.Equal(t, []string{"a1", "b1"}, fetchIDs(t, b, l), "a2 waits behind the deferred a1")
	fail(t, b, l, outbox.Failure{ID: "a1", Delay: time.Hour, Deferred: true})
	require.Equal(t, []string{"b1"}, fetchIDs(t, b, l))
	sched, err := b.Entries(ctx, outbox.StateScheduled, outbox.ListFilter{}, "", 10)
	require.NoError(t, err)
	require.Equal(t, []string{"a1"}, infoIDs(sched), "deferred before any attempt: scheduled")
	require.Zero(t, sched[0].Attempts)
	require.NoError(t, b.MarkSent(ctx, l, []string{"a1", "b1"}))
	require.Equal(t, []string{"a2"}, fetchIDs(t, b, l))
}

func infoIDs(is []outbox.EntryInfo) []string {
	out := make([]string, len(is))
	for i, e := range is {
		out[i] = e.ID
	}
	return out
}

func TestPause(t *testing.T) {
	t.Parallel()
	b, p := newBackend(t, extended, pgoutbox.Options{Partitions: 2})
	ctx := t.Context()
	k0, k1 := keyOf(t, 0, 2), keyOf(t, 1, 2)
	// Of key k0: x1 (topic x) before p1 (paused) before x2 (topic x, held
	// back by p1); y1 of another key and topic; n1 of no key and the
	// paused topic.
	appendEntries(t, b, p,
		outbox.Entry{ID: "x1", Topic: "x", Key: k0}, outbox.Entry{ID: "p1", Topic: "paused", Key: k0},
		outbox.Entry{ID: "x2", Topic: "x", Key: k0}, outbox.Entry{ID: "y1", Topic: "y", Key: "other-" + k0},
		outbox.Entry{ID: "n1", Topic: "paused"}, outbox.Entry{ID: "q1", Topic: "x", Key: k1})
	l0, l1 := acquire(t, b, 0), acquire(t, b, 1)
	yKey := "other-" + k0
	all0 := fetchIDs(t, b, l0)

	require.NoError(t, b.PauseTopic(ctx, "paused"))
	require.NoError(t, b.PausePartition(ctx, 1))
	first, err := b.Paused(ctx)
	require.NoError(t, err)
	time.Sleep(2 * time.Millisecond)
	require.NoError(t, b.PauseTopic(ctx, "paused"), "pausing again is a no-op")
	require.NoError(t, b.PauseTopic(ctx, "another"))
	require.NoError(t, b.PausePartition(ctx, 1))
	paused, err := b.Paused(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"another", "paused"}, []string{paused.Topics[0].Topic, paused.Topics[1].Topic})
	require.Equal(t, first.Topics[0].Since, paused.Topics[1].Since, "pausing a paused topic keeps its since")
	require.Equal(t, first.Partitions, paused.Partitions, "pausing a paused partition keeps its since")
	require.Equal(t, 1, paused.Partitions[0].Partition)

	want := []string{"x1"}
	if outbox.PartitionOf(yKey, 2) == 0 {
		want = append(want, "y1")
	}
	got := fetchIDs(t, b, l0)
	slices.Sort(got)
	slices.Sort(want)
	require.Equal(t, want, got, "before the pause the partition had %v", all0)
	require.Empty(t, fetchIDs(t, b, l1), "a paused partition returns nothing")
	// The lease is still checked.
	_, err = b.FindPendingBatch(ctx, outbox.Lease{Partition: 1, Owner: "nobody", Version: l1.Version}, 10)
	require.ErrorIs(t, err, outbox.ErrLeaseLost)

	// Blocked keys: k0, headed by x1? No: x1 is the head and is not
	// blocking; p1 is not the head. Send x1: then p1 heads k0.
	keys, err := b.BlockedKeys(ctx, outbox.ListFilter{}, outbox.BlockedKey{}, 10)
	require.NoError(t, err)
	require.Empty(t, keys, "k0's head x1 is deliverable")
	require.NoError(t, b.MarkSent(ctx, l0, []string{"x1"}))
	keys, err = b.BlockedKeys(ctx, outbox.ListFilter{}, outbox.BlockedKey{}, 10)
	require.NoError(t, err)
	require.Len(t, keys, 1)
	require.Equal(t, "p1", keys[0].Head.ID)
	require.Equal(t, int64(1), keys[0].Waiting)
	require.Equal(t, keys[0].Head.CreatedAt, keys[0].Since, "paused before any attempt: since its creation")
	stats, err := b.PartitionStats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), stats[0].BlockedKeys)

	for _, bad := range []func() error{
		func() error { return b.PauseTopic(ctx, "") },
		func() error { return b.ResumeTopic(ctx, "") },
		func() error { return b.PauseTopic(ctx, "a\x00b") },
		func() error { return b.PausePartition(ctx, 2) },
		func() error { return b.ResumePartition(ctx, -1) },
	} {
		require.ErrorIs(t, bad(), outbox.ErrInvalidArgument)
	}

	require.NoError(t, b.ResumeTopic(ctx, "paused"))
	require.NoError(t, b.ResumeTopic(ctx, "never paused"))
	require.NoError(t, b.ResumePartition(ctx, 1))
	got = append(fetchIDs(t, b, l0), fetchIDs(t, b, l1)...)
	require.Subset(t, got, []string{"p1", "x2", "n1", "q1"}, "after the resume every entry is delivered")
	paused, err = b.Paused(ctx)
	require.NoError(t, err)
	require.Equal(t, []outbox.PausedTopic{{Topic: "another", Since: paused.Topics[0].Since}}, paused.Topics)
	require.Empty(t, paused.Partitions)

	require.NoError(t, b.Close())
	require.ErrorIs(t, b.PauseTopic(ctx, "x"), outbox.ErrClosed)
	_, err = b.Paused(ctx)
	require.ErrorIs(t, err, outbox.ErrClosed)
}

func TestEntriesByState(t *testing.T) {
	t.Parallel()
	b, p := newBackend(t, extended, pgoutbox.Options{})
	ctx := t.Context()
	start := dbNow(t, p)
	appendEntries(t, b, p,
		outbox.Entry{ID: "due-1", Topic: "orders", Key: "k1"},
		outbox.Entry{ID: "due-2", Topic: "users", Key: "k2"},
		outbox.Entry{ID: "sched", Topic: "orders", Key: "k3", NotBefore: time.Now().Add(time.Hour)},
		outbox.Entry{ID: "retry", Topic: "orders", Key: "k4"},
		outbox.Entry{ID: "park", Topic: "users", Key: "k5"},
		outbox.Entry{ID: "pct", Topic: "orders", Key: "k6"},
		outbox.Entry{ID: "umlaut", Topic: "orders", Key: "k7"})
	l := acquire(t, b, 0)
	fail(t, b, l,
		outbox.Failure{ID: "retry", Error: "Broker DOWN: 503", Delay: time.Hour},
		outbox.Failure{ID: "park", Error: "topic unknown", Park: true},
		outbox.Failure{ID: "pct", Error: "100% full_disk", Delay: -time.Second},
		outbox.Failure{ID: "umlaut", Error: "Ärger", Delay: -time.Second})

	list := func(state outbox.EntryState, f outbox.ListFilter, after string, limit int) []string {
		t.Helper()
		es, err := b.Entries(ctx, state, f, after, limit)
		require.NoError(t, err)
		return infoIDs(es)
	}
	require.Equal(t, []string{"due-1", "due-2", "pct", "umlaut"}, list(outbox.StateDue, outbox.ListFilter{}, "", 10))
	require.Equal(t, []string{"sched"}, list(outbox.StateScheduled, outbox.ListFilter{}, "", 10))
	require.Equal(t, []string{"retry"}, list(outbox.StateRetrying, outbox.ListFilter{}, "", 10))
	require.Equal(t, []string{"park"}, list(outbox.StateParked, outbox.ListFilter{}, "", 10))
	// Paging.
	require.Equal(t, []string{"due-1", "due-2"}, list(outbox.StateDue, outbox.ListFilter{}, "", 2))
	require.Equal(t, []string{"pct", "umlaut"}, list(outbox.StateDue, outbox.ListFilter{}, "due-2", 2))
	// Filters.
	require.Equal(t, []string{"due-1", "pct", "umlaut"}, list(outbox.StateDue, outbox.ListFilter{Topic: "orders"}, "", 10))
	require.Equal(t, []string{"due-2"}, list(outbox.StateDue, outbox.ListFilter{Key: "k2"}, "", 10))
	require.Equal(t, []string{"retry"}, list(outbox.StateRetrying, outbox.ListFilter{Error: "broker down"}, "", 10))
	require.Equal(t, []string{"pct"}, list(outbox.StateDue, outbox.ListFilter{Error: "0% FULL_"}, "", 10), "% and _ are literal")
	require.Empty(t, list(outbox.StateDue, outbox.ListFilter{Error: "1_0"}, "", 10), "_ matches only itself")
	require.Equal(t, []string{"pct"}, list(outbox.StateDue, outbox.ListFilter{Error: "%"}, "", 10), "% matches only itself")
	require.Equal(t, []string{"umlaut"}, list(outbox.StateDue, outbox.ListFilter{Error: "ÄRGER"}, "", 10))
	require.Empty(t, list(outbox.StateDue, outbox.ListFilter{Error: "ärger"}, "", 10), "only ASCII letters fold")
	require.Empty(t, list(outbox.StateDue, outbox.ListFilter{Since: time.Now().Add(time.Hour)}, "", 10))
	require.Len(t, list(outbox.StateDue, outbox.ListFilter{Since: start.Add(-time.Second), Until: time.Now().Add(time.Hour)}, "", 10), 4)
	require.Empty(t, list(outbox.StateDue, outbox.ListFilter{Until: start.Add(-time.Second)}, "", 10))
	require.Empty(t, list(outbox.StateDue, outbox.ListFilter{Topic: "no\x00such"}, "", 10))

	// Each entry as Lookup reports it.
	es, err := b.Entries(ctx, outbox.StateRetrying, outbox.ListFilter{}, "", 1)
	require.NoError(t, err)
	require.Equal(t, lookup(t, b, "retry"), es[0])
	require.Len(t, es[0].History, 1)

	for _, bad := range []struct {
		state outbox.EntryState
		after string
		limit int
	}{{"pending", "", 1}, {outbox.StateDue, "", 0}, {outbox.StateDue, "\xff", 1}} {
		_, err := b.Entries(ctx, bad.state, outbox.ListFilter{}, bad.after, bad.limit)
		require.ErrorIs(t, err, outbox.ErrInvalidArgument, "%+v", bad)
	}
	_, err = b.BlockedKeys(ctx, outbox.ListFilter{}, outbox.BlockedKey{}, 0)
	require.ErrorIs(t, err, outbox.ErrInvalidArgument)
}

func TestBlockedKeys(t *testing.T) {
	t.Parallel()
	const parts = 2
	b, p := newBackend(t, extended, pgoutbox.Options{Partitions: parts})
	ctx := t.Context()
	keys := keysOf(t, 0, parts, 3)
	k1 := keyOf(t, 1, parts)
	var es []outbox.Entry
	for i, k := range append(keys, k1) {
		for j := range 3 {
			es = append(es, outbox.Entry{ID: fmt.Sprintf("%c%d", 'a'+i, j), Topic: "t", Key: k})
		}
	}
	appendEntries(t, b, p, es...)
	l0, l1 := acquire(t, b, 0), acquire(t, b, 1)
	// Key d (partition 1) fails first, then a; b is deferred; c's head is
	// fine but c1 behind it failed (not blocked: its head is not).
	fail(t, b, l1, outbox.Failure{ID: "d0", Error: "d broke", Delay: time.Hour})
	time.Sleep(2 * time.Millisecond)
	fail(t, b, l0, outbox.Failure{ID: "a0", Error: "a broke", Delay: time.Hour})
	fail(t, b, l0, outbox.Failure{ID: "a0", Error: "a broke again", Delay: time.Hour})
	fail(t, b, l0, outbox.Failure{ID: "b0", Delay: time.Hour, Deferred: true})
	fail(t, b, l0, outbox.Failure{ID: "c1", Error: "c broke", Delay: time.Hour})

	got, err := b.BlockedKeys(ctx, outbox.ListFilter{}, outbox.BlockedKey{}, 10)
	require.NoError(t, err)
	var heads []string
	for _, k := range got {
		heads = append(heads, k.Head.ID)
	}
	// b0 was deferred before any attempt: since its creation, which is
	// before every attempt.
	require.Equal(t, []string{"b0", "d0", "a0"}, heads)
	require.Equal(t, int64(2), got[2].Waiting)
	require.Equal(t, got[2].Head.History[0].At, got[2].Since, "since the oldest attempt")
	require.Equal(t, "a broke again", got[2].Head.LastError)
	require.True(t, got[0].Head.Deferred)
	require.Equal(t, lookup(t, b, "a0"), got[2].Head)

	// Paging by (Since, head ID).
	page1, err := b.BlockedKeys(ctx, outbox.ListFilter{}, outbox.BlockedKey{}, 2)
	require.NoError(t, err)
	page2, err := b.BlockedKeys(ctx, outbox.ListFilter{}, page1[1], 2)
	require.NoError(t, err)
	require.Equal(t, got, append(page1, page2...))
	// The filter applies to the head.
	f, err := b.BlockedKeys(ctx, outbox.ListFilter{Error: "AGAIN"}, outbox.BlockedKey{}, 10)
	require.NoError(t, err)
	require.Len(t, f, 1)
	require.Equal(t, "a0", f[0].Head.ID)

	stats, err := b.PartitionStats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(2), stats[0].BlockedKeys)
	require.Equal(t, int64(1), stats[1].BlockedKeys)
	require.Equal(t, "a1", stats[0].OldestDueID, "the oldest due entry of partition 0 (held back, but due)")
	require.Equal(t, "d1", stats[1].OldestDueID)

	require.NoError(t, b.Close())
	_, err = b.BlockedKeys(ctx, outbox.ListFilter{}, outbox.BlockedKey{}, 1)
	require.ErrorIs(t, err, outbox.ErrClosed)
	_, err = b.Entries(ctx, outbox.StateDue, outbox.ListFilter{}, "", 1)
	require.ErrorIs(t, err, outbox.ErrClosed)
}

func TestMembersHostVersion(t *testing.T) {
	t.Parallel()
	b, _ := newBackend(t, extended, pgoutbox.Options{Partitions: 2})
	ctx := t.Context()
	started := time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC)
	long := strings.Repeat("h", 250) + "ééé" // 256 bytes: cut inside an é
	_, err := b.Heartbeat(ctx, outbox.Member{Owner: "b-relay", Partitions: []int{1}, Host: long, Version: "v1.2\x00", Started: started}, time.Minute)
	require.NoError(t, err)
	before := time.Now()
	recs, err := b.Heartbeat(ctx, outbox.Member{Owner: "a-relay", Partitions: []int{0}}, time.Minute)
	require.NoError(t, err)
	_, err = b.Heartbeat(ctx, outbox.Member{Owner: "gone"}, time.Millisecond)
	require.NoError(t, err)
	time.Sleep(5 * time.Millisecond)

	ms, err := b.Members(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"a-relay", "b-relay"}, []string{ms[0].Owner, ms[1].Owner}, "live records only, by owner")
	require.Len(t, ms, 2)
	require.Equal(t, strings.Repeat("h", 250)+"éé", ms[1].Host, "cut to 255 bytes at a character boundary")
	require.Equal(t, "v1.2\uFFFD", ms[1].Version)
	require.True(t, started.Equal(ms[1].Started))
	require.True(t, ms[0].Started.IsZero())
	require.Equal(t, []int{1}, ms[1].Partitions)
	require.False(t, ms[0].Renewed.IsZero())
	require.WithinDuration(t, before, ms[0].Renewed, time.Minute)
	require.Equal(t, recs[0].Renewed, ms[0].Renewed, "Heartbeat and Members report the same renewal")
	require.True(t, ms[0].Expires.After(ms[0].Renewed))

	require.NoError(t, b.Close())
	_, err = b.Members(ctx)
	require.ErrorIs(t, err, outbox.ErrClosed)
}

// TestMoveCarriesHistory: ExportBatch reports the history and deferral,
// and Import stores them, so a moved entry keeps them and a deferred one
// keeps holding back its key.
func TestMoveCarriesHistory(t *testing.T) {
	t.Parallel()
	src, sp := newBackend(t, extended, pgoutbox.Options{})
	dst, _ := newBackend(t, extended, pgoutbox.Options{})
	ctx := t.Context()
	appendEntries(t, src, sp, outbox.Entry{ID: "f", Topic: "t", Key: "k"}, outbox.Entry{ID: "d", Topic: "t", Key: "j"},
		outbox.Entry{ID: "j2", Topic: "t", Key: "j"})
	l := acquire(t, src, 0)
	fail(t, src, l, outbox.Failure{ID: "f", Error: "one", Delay: -time.Second}, outbox.Failure{ID: "d", Delay: -time.Second, Deferred: true})
	fail(t, src, l, outbox.Failure{ID: "f", Error: "two", Delay: -time.Second})
	exp, err := src.ExportBatch(ctx, l, 10)
	require.NoError(t, err)
	require.Len(t, exp, 3)
	require.Equal(t, []string{"one", "two"}, []string{exp[0].History[0].Error, exp[0].History[1].Error})
	require.True(t, exp[1].Deferred)
	n, err := dst.Import(ctx, exp)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	for _, id := range []string{"f", "d"} {
		s, d := lookup(t, src, id), lookup(t, dst, id)
		require.Equal(t, s.History, d.History, id)
		require.Equal(t, s.Deferred, d.Deferred, id)
	}
	require.ElementsMatch(t, []string{"f", "d"}, fetchIDs(t, dst, acquire(t, dst, 0)), "j2 waits behind the deferred d")
}

// TestOperatorsOnNonCCollation: on a database whose collation is not
// byte order (ICU en-US, where "a" < "B" < "c" and "Ä" sorts next to
// "A"), Parked, Entries, Members and Paused still page and sort by byte
// order. Without COLLATE "C" in their queries, Parked would list "a"
// before "B" and skip entries across pages.
func TestOperatorsOnNonCCollation(t *testing.T) {
	t.Parallel()
	admin := pool(t, extended)
	ctx := t.Context()
	var icu bool
	require.NoError(t, admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_collation WHERE collname = 'en-US-x-icu')").Scan(&icu))
	if !icu {
		t.Fatal("this PostgreSQL has no ICU collation en-US-x-icu: build it with ICU (as the Debian and official images are)")
	}
	db := strings.ToLower(strings.ReplaceAll(freshSchema(t, admin), "pgoutbox_test_", "pgoutbox_icu_"))
	_, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize()+" LOCALE_PROVIDER icu ICU_LOCALE 'en-US' TEMPLATE template0")
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = admin.Exec(t.Context(), "DROP DATABASE IF EXISTS "+pgx.Identifier{db}.Sanitize()+" WITH (FORCE)")
	})
	cfg := admin.Config().Copy()
	cfg.ConnConfig.Database = db
	cfg.MaxConns = 4
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer p.Close()
	var before bool
	require.NoError(t, p.QueryRow(ctx, "SELECT 'a' < 'B'").Scan(&before))
	require.True(t, before, "the test database does not sort by a locale")

	opts := pgoutbox.Options{Schema: "icu", Partitions: 1}
	require.NoError(t, pgoutbox.Migrate(ctx, p, opts))
	b, err := pgoutbox.New(ctx, p, opts)
	require.NoError(t, err)
	defer b.Close()
	ids := []string{"c", "a", "Ä", "B", "ab", "A"}
	var es []outbox.Entry
	for _, id := range ids {
		es = append(es, outbox.Entry{ID: id, Topic: id, Key: id})
	}
	appendEntries(t, b, p, es...)
	want := slices.Clone(ids)
	slices.Sort(want) // byte order: A B a ab c Ä
	got := pageAll(t, func(after string) ([]string, error) {
		es, err := b.Entries(ctx, outbox.StateDue, outbox.ListFilter{}, after, 2)
		return infoIDs(es), err
	})
	require.Equal(t, want, got, "Entries(due) pages by byte order")

	l := acquire(t, b, 0)
	var fs []outbox.Failure
	for _, id := range ids {
		fs = append(fs, outbox.Failure{ID: id, Error: "x", Park: true})
	}
	fail(t, b, l, fs...)
	got = pageAll(t, func(after string) ([]string, error) {
		es, err := b.Parked(ctx, after, 2)
		return entryIDs(es), err
	})
	require.Equal(t, want, got, "Parked pages by byte order")
	got = pageAll(t, func(after string) ([]string, error) {
		es, err := b.Entries(ctx, outbox.StateParked, outbox.ListFilter{}, after, 2)
		return infoIDs(es), err
	})
	require.Equal(t, want, got, "Entries(parked) pages by byte order")

	for _, id := range ids {
		require.NoError(t, b.PauseTopic(ctx, id))
		_, err := b.Heartbeat(ctx, outbox.Member{Owner: id}, time.Minute)
		require.NoError(t, err)
	}
	paused, err := b.Paused(ctx)
	require.NoError(t, err)
	var topics []string
	for _, pt := range paused.Topics {
		topics = append(topics, pt.Topic)
	}
	require.Equal(t, want, topics, "Paused sorts topics by byte order")
	ms, err := b.Members(ctx)
	require.NoError(t, err)
	var owners []string
	for _, m := range ms {
		owners = append(owners, m.Owner)
	}
	require.Equal(t, want, owners, "Members sorts owners by byte order")
}

// pageAll pages through a listing two at a time.
func pageAll(t *testing.T, page func(after string) ([]string, error)) []string {
	t.Helper()
	var out []string
	after := ""
	for range 100 {
		ids, err := page(after)
		require.NoError(t, err)
		if len(ids) == 0 {
			return out
		}
		out = append(out, ids...)
		after = ids[len(ids)-1]
	}
	t.Fatal("paging does not end")
	return nil
}

// TestMigration007WithData brings an outbox with pending, failing and
// parked entries from 006 to 007 and back: the entries keep their data,
// start with no history and no deferral, and the indexes are those of
// each version.
func TestMigration007WithData(t *testing.T) {
	t.Parallel()
	p := pool(t, extended)
	ctx := t.Context()
	opts := pgoutbox.Options{Schema: freshSchema(t, p), Partitions: 1}
	require.NoError(t, pgoutbox.MigrateTo(ctx, p, opts, 6))
	table := pgx.Identifier{opts.Schema, "outbox"}.Sanitize()
	_, err := p.Exec(ctx, `INSERT INTO `+table+` (id, partition, topic, key, created_at, next_at, attempts, state, last_error) VALUES
		('due', 0, 't', 'k', now(), now(), 0, 'pending', ''),
		('failing', 0, 't', 'f', now(), now() + interval '1 hour', 2, 'pending', 'boom'),
		('after', 0, 't', 'f', now(), now(), 0, 'pending', ''),
		('parked', 0, 't', 'p', now(), now(), 3, 'parked', 'dead')`)
	require.NoError(t, err)
	indexDef := func(name string) string {
		var def string
		require.NoError(t, p.QueryRow(ctx, "SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND indexname = $2", opts.Schema, name).Scan(&def))
		return def
	}
	holdback6, parked6 := indexDef("outbox_holdback_idx"), indexDef("outbox_parked_idx")

	for round := range 2 {
		require.NoError(t, pgoutbox.Migrate(ctx, p, opts), "round %d", round)
		require.Contains(t, indexDef("outbox_holdback_idx"), "(attempts > 0) OR deferred")
		require.Contains(t, indexDef("outbox_parked_idx"), `id COLLATE "C"`)
		b, err := pgoutbox.New(ctx, p, opts)
		require.NoError(t, err)
		f := lookup(t, b, "failing")
		require.Equal(t, 2, f.Attempts)
		require.Equal(t, "boom", f.LastError)
		require.Nil(t, f.History)
		require.False(t, f.Deferred)
		require.Equal(t, []string{"due"}, fetchIDs(t, b, acquire(t, b, 0)), "'after' waits behind 'failing'")
		parked, err := b.Parked(ctx, "", 10)
		require.NoError(t, err)
		require.Equal(t, []string{"parked"}, entryIDs(parked))
		require.NoError(t, b.PauseTopic(ctx, "t"))
		require.NoError(t, b.Close())

		require.NoError(t, pgoutbox.MigrateTo(ctx, p, opts, 6), "round %d", round)
		require.Equal(t, holdback6, indexDef("outbox_holdback_idx"))
		require.Equal(t, parked6, indexDef("outbox_parked_idx"))
		var n int
		require.NoError(t, p.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n))
		require.Equal(t, 4, n, "migrating down keeps the entries")
		var cols int
		require.NoError(t, p.QueryRow(ctx, `SELECT count(*) FROM information_schema.columns
			WHERE table_schema = $1 AND table_name IN ('outbox', 'outbox_archive', 'outbox_member')
			  AND column_name IN ('history', 'deferred', 'host', 'version', 'started', 'renewed_at')`, opts.Schema).Scan(&cols))
		require.Zero(t, cols, "migrating down drops 007's columns")
		_, err = pgoutbox.New(ctx, p, opts)
		require.Error(t, err)
	}
}

// TestHistoryArchivedAndHandMade: an archived entry keeps its history,
// and a history changed by hand so that it does not decode reads as none
// (an element that does not decode is left out), without failing Lookup,
// BlockedKeys or PartitionStats.
func TestHistoryArchivedAndHandMade(t *testing.T) {
	t.Parallel()
	b, p := newBackend(t, extended, pgoutbox.Options{Archive: true})
	ctx := t.Context()
	appendEntries(t, b, p, outbox.Entry{ID: "s", Topic: "t", Key: "k"}, outbox.Entry{ID: "h", Topic: "t", Key: "j"},
		outbox.Entry{ID: "h2", Topic: "t", Key: "j"})
	l := acquire(t, b, 0)
	fail(t, b, l, outbox.Failure{ID: "s", Error: "first", Delay: -time.Second}, outbox.Failure{ID: "h", Error: "x", Delay: time.Hour})
	require.NoError(t, b.MarkSent(ctx, l, []string{"s"}))
	var archived string
	require.NoError(t, p.QueryRow(ctx, "SELECT history->0->>'error' FROM "+pgx.Identifier{b.Options().Schema, "outbox_archive"}.Sanitize()+" WHERE id = 's'").Scan(&archived))
	require.Equal(t, "first", archived)

	table := pgx.Identifier{b.Options().Schema, "outbox"}.Sanitize()
	for _, bad := range []string{`{"not": "an array"}`, `[{"at": "yesterday", "error": 5}]`, `"text"`} {
		_, err := p.Exec(ctx, "UPDATE "+table+" SET history = $1::jsonb WHERE id = 'h'", bad)
		require.NoError(t, err)
		info := lookup(t, b, "h")
		require.Nil(t, info.History, bad)
		keys, err := b.BlockedKeys(ctx, outbox.ListFilter{}, outbox.BlockedKey{}, 10)
		require.NoError(t, err, bad)
		require.Len(t, keys, 1, bad)
		require.Equal(t, info.CreatedAt, keys[0].Since, "a history that does not decode: since the creation (%s)", bad)
		_, err = b.PartitionStats(ctx)
		require.NoError(t, err, bad)
		// MarkFailed appends to it as to an array, and the attempts that
		// decode are reported.
		fail(t, b, l, outbox.Failure{ID: "h", Error: "after " + bad, Delay: time.Hour})
		h := lookup(t, b, "h").History
		require.NotEmpty(t, h, bad)
		require.Equal(t, "after "+bad, h[len(h)-1].Error)
	}
}
