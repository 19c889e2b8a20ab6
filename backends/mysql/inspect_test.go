package mysqloutbox_test

import (
	"context"
	"database/sql"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
	mysqloutbox "github.com/outboxrelay/outbox/backends/mysql"
)

// rawEntry is a row the operator tests write with plain SQL, so that they
// can set every column (state, attempts, history, a corrupt headers
// column) without a relay.
type rawEntry struct {
	id, topic, key string
	// part is the partition; -1 means PartitionOf(key, partitions).
	part     int
	headers  []byte
	parked   bool
	attempts int
	lastErr  string
	// history is the JSON of the history column ("" for NULL).
	history  string
	deferred bool
	// dueIn is next_at relative to the server's clock.
	dueIn time.Duration
}

// raw is a pending, never-attempted, due entry of key with headers {"h":
// "v"} in the partition of its key.
func raw(id, key string) rawEntry {
	return rawEntry{id: id, topic: "orders", key: key, part: -1, headers: encodedHeaders(map[string]string{"h": "v"})}
}

// encodedHeaders is the headers column of h (the binary encoding of
// internal/headercodec: uvarint lengths, sorted names).
func encodedHeaders(h map[string]string) []byte {
	var out []byte
	for _, k := range slices.Sorted(maps.Keys(h)) {
		out = append(out, byte(len(k)))
		out = append(out, k...)
		out = append(out, byte(len(h[k])))
		out = append(out, h[k]...)
	}
	return out
}

// insertRaw writes rows in order (AUTO_INCREMENT seqs ascending) and
// returns their seqs.
func insertRaw(t testing.TB, db *sql.DB, partitions int, rows ...rawEntry) []int64 {
	t.Helper()
	var seqs []int64
	for _, r := range rows {
		part := r.part
		if part < 0 {
			part = outbox.PartitionOf(r.key, partitions)
		}
		state := "pending"
		if r.parked {
			state = "parked"
		}
		var history any
		if r.history != "" {
			history = r.history
		}
		res, err := db.Exec("INSERT INTO `outbox` (id, `partition`, topic, `key`, payload, headers, created_at, next_at, attempts, state, last_error, history, deferred) "+
			"VALUES (?, ?, ?, ?, ?, ?, UTC_TIMESTAMP(6), TIMESTAMPADD(MICROSECOND, ?, UTC_TIMESTAMP(6)), ?, ?, ?, ?, ?)",
			r.id, part, r.topic, append([]byte{}, r.key...), []byte("payload of "+r.id), r.headers, r.dueIn.Microseconds(),
			r.attempts, state, r.lastErr, history, r.deferred)
		if err != nil {
			t.Fatalf("inserting %s: %v", r.id, err)
		}
		seq, err := res.LastInsertId()
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, seq)
	}
	return seqs
}

// seqOf reads the seq of the entry with the given ID.
func seqOf(t testing.TB, db *sql.DB, id string) int64 {
	t.Helper()
	var seq int64
	if err := db.QueryRow("SELECT seq FROM `outbox` WHERE id = ?", id).Scan(&seq); err != nil {
		t.Fatalf("reading the seq of %s: %v", id, err)
	}
	return seq
}

// serverNow reads the server's clock (UTC).
func serverNow(t testing.TB, db *sql.DB) time.Time {
	t.Helper()
	var us int64
	if err := db.QueryRow("SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))").Scan(&us); err != nil {
		t.Fatal(err)
	}
	return time.UnixMicro(us).UTC()
}

// setLease makes owner hold partition's lease at version for ttl by the
// server's clock, as AcquireLease would, and returns the lease.
func setLease(t testing.TB, db *sql.DB, partition int, owner string, version int64, ttl time.Duration) outbox.Lease {
	t.Helper()
	if _, err := db.Exec("UPDATE `outbox_lease` SET owner = ?, version = ?, expires_at = TIMESTAMPADD(MICROSECOND, ?, UTC_TIMESTAMP(6)) WHERE `partition` = ?",
		owner, version, ttl.Microseconds(), partition); err != nil {
		t.Fatal(err)
	}
	return outbox.Lease{Partition: partition, Owner: owner, Version: version, Expires: time.Now().Add(ttl)}
}

func TestRequeueTakesANewSeqAfterTheAppendedEntriesOfItsKey(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 1})
	ctx := context.Background()
	history := `[{"at": "2026-01-02T03:04:05.123456Z", "error": "broker down", "owner": "relay-1"}]`
	p1 := rawEntry{id: "p1", topic: "orders", key: "k", part: 0, parked: true, attempts: 3, lastErr: "poison", history: history, deferred: true,
		headers: encodedHeaders(map[string]string{"h": "v"})}
	p2 := p1
	p2.id, p2.history = "p2", ""
	seqs := insertRaw(t, db, 1, p1, p2, raw("a1", "k"), raw("a2", "k"))

	start := serverNow(t, db)
	n, err := b.Requeue(ctx, "p2", "p1", "a1", "unknown")
	if err != nil || n != 2 {
		t.Fatalf("Requeue(p2, p1, a1, unknown) = %d, %v; want 2, nil (a1 is pending, unknown is unknown)", n, err)
	}
	end := serverNow(t, db)
	s1, s2 := seqOf(t, db, "p1"), seqOf(t, db, "p2")
	if s1 <= seqs[3] || s2 <= s1 {
		t.Errorf("after Requeue the seqs are p1 %d, p2 %d, and a2 %d; want p1 and p2 after every appended entry (a new AUTO_INCREMENT value), in their old order", s1, s2, seqs[3])
	}
	info, err := b.Lookup(ctx, "p1")
	if err != nil {
		t.Fatal(err)
	}
	if info.Parked || info.Attempts != 0 || info.Deferred || info.LastError != "poison" || info.Topic != "orders" || info.Key != "k" ||
		string(info.Payload) != "payload of p1" || info.Headers["h"] != "v" {
		t.Errorf("Lookup(p1) after Requeue = %+v; want pending, Attempts 0, not deferred, LastError and the stored fields kept", info)
	}
	if info.DueAt.Before(start) || info.DueAt.After(end) {
		t.Errorf("DueAt of p1 after Requeue is %s; want the server's clock at the Requeue, in [%s, %s]", info.DueAt, start, end)
	}
	want := []outbox.Attempt{{At: time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC), Error: "broker down", Owner: "relay-1"}}
	if !slices.Equal(info.History, want) {
		t.Errorf("History of p1 after Requeue = %+v; want it kept, %+v", info.History, want)
	}
	var rows int
	if err := db.QueryRow("SELECT COUNT(*) FROM `outbox`").Scan(&rows); err != nil || rows != 4 {
		t.Errorf("the table holds %d rows (%v) after Requeue; want 4: the old rows are gone, no placeholder is left", rows, err)
	}
	if n, err := b.Requeue(ctx, "p1"); n != 0 || err != nil {
		t.Errorf("Requeue(p1) again = %d, %v; want 0, nil (it is pending)", n, err)
	}
}

func TestRequeueRefusesEntriesThatCannotBePublished(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 2})
	ctx := context.Background()
	noTopic := rawEntry{id: "no-topic", key: "k", part: -1, parked: true, attempts: 1, lastErr: "x"}
	badHeaders := rawEntry{id: "bad-headers", topic: "t", key: "k", part: -1, parked: true, headers: []byte{0x7f, 'a'}, attempts: 1}
	outOfRange := rawEntry{id: "out-of-range", topic: "t", key: "k", part: 7, parked: true, attempts: 1}
	good := rawEntry{id: "good", topic: "t", key: "k", part: -1, parked: true, attempts: 1}
	insertRaw(t, db, 2, noTopic, badHeaders, outOfRange, good)

	n, err := b.Requeue(ctx, "out-of-range", "good", "no-topic", "bad-headers", "no-topic")
	var refused *outbox.RequeueRefusedError
	if n != 1 || !errors.As(err, &refused) || !errors.Is(err, outbox.ErrNotRequeueable) {
		t.Fatalf("Requeue = %d, %v; want 1 and a *RequeueRefusedError", n, err)
	}
	var got []string
	for _, r := range refused.Refused {
		got = append(got, r.ID)
	}
	if !slices.Equal(got, []string{"out-of-range", "no-topic", "bad-headers"}) {
		t.Errorf("Refused = %v; want out-of-range, no-topic, bad-headers (each once, in the order given)", got)
	}
	for _, r := range refused.Refused {
		if !strings.Contains(r.Reason, "column") || !strings.Contains(r.Reason, "cancel") {
			t.Errorf("the reason of %s, %q, does not name the column and the fix", r.ID, r.Reason)
		}
	}
	for _, id := range got {
		if info, err := b.Lookup(ctx, id); err != nil || !info.Parked {
			t.Errorf("Lookup(%s) after the refused Requeue = %+v, %v; want it still parked", id, info, err)
		}
	}
}

func TestIDsAreComparedByteForByte(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 1})
	ctx := context.Background()
	// A PAD SPACE collation would make "x" and "x " one ID (the second
	// append skipped as a duplicate) and sort "x" after "x\t".
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := b.AppendInTx(ctx, tx, outbox.Entry{ID: "x", Topic: "t"}, outbox.Entry{ID: "x ", Topic: "t"}, outbox.Entry{ID: "x\t", Topic: "t"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	got, err := b.Entries(ctx, outbox.StateDue, outbox.ListFilter{}, "", 10)
	if err != nil || !slices.Equal(entryIDs(got), []string{"x", "x\t", "x "}) {
		t.Fatalf("Entries after appending x, \"x \" and \"x\\t\" = %q, %v; want all three, in byte order", entryIDs(got), err)
	}
	if page, err := b.Entries(ctx, outbox.StateDue, outbox.ListFilter{}, "x", 10); err != nil || !slices.Equal(entryIDs(page), []string{"x\t", "x "}) {
		t.Errorf("Entries after x = %q, %v; want the other two", entryIDs(page), err)
	}
	if err := b.Cancel(ctx, "x "); err != nil {
		t.Errorf("Cancel(\"x \"): %v", err)
	}
	if _, err := b.Lookup(ctx, "x "); !errors.Is(err, outbox.ErrNotFound) {
		t.Errorf("Lookup(\"x \") after its Cancel: %v; want ErrNotFound", err)
	}
	if info, err := b.Lookup(ctx, "x"); err != nil || info.ID != "x" {
		t.Errorf("Lookup(x) after cancelling \"x \" = %q, %v; want x, kept", info.ID, err)
	}
	if err := b.Cancel(ctx, "\xff"); !errors.Is(err, outbox.ErrNotFound) {
		t.Errorf("Cancel of invalid UTF-8: %v; want ErrNotFound", err)
	}
	if err := b.Cancel(ctx, "x"); err != nil {
		t.Errorf("Cancel(x): %v", err)
	}
	if err := b.Cancel(ctx, "x"); !errors.Is(err, outbox.ErrNotFound) {
		t.Errorf("Cancel(x) twice: %v; want ErrNotFound", err)
	}
}

func TestStatsAndPartitionStatsAddUp(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 3})
	ctx := context.Background()
	keys := map[int]string{}
	for i := 0; len(keys) < 3; i++ {
		k := "key-" + string(rune('a'+i))
		if _, ok := keys[outbox.PartitionOf(k, 3)]; !ok {
			keys[outbox.PartitionOf(k, 3)] = k
		}
	}
	later := raw("later", keys[1])
	later.dueIn = time.Hour
	parked := raw("parked", keys[2])
	parked.parked = true
	old := raw("old", keys[1])
	old.dueIn = -time.Minute
	retry := raw("retry", keys[1])
	retry.attempts, retry.history = 1, `[{"at": "2026-01-02T03:04:05Z", "error": "e", "owner": "o"}]`
	insertRaw(t, db, 3, raw("due0", keys[0]), retry, later, parked, old, raw("waits", keys[1]))
	l := setLease(t, db, 1, "relay", 7, time.Minute)
	setLease(t, db, 2, "gone", 3, -time.Second)

	st, err := b.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Pending != 5 || st.Due != 4 || st.Parked != 1 || st.OldestDue.IsZero() {
		t.Errorf("Stats = %+v; want Pending 5, Due 4, Parked 1, an OldestDue", st)
	}
	ps, err := b.PartitionStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 3 {
		t.Fatalf("PartitionStats returned %d partitions; want 3", len(ps))
	}
	var sum outbox.Stats
	for i, p := range ps {
		if p.Partition != i {
			t.Errorf("PartitionStats[%d].Partition = %d", i, p.Partition)
		}
		sum.Pending, sum.Due, sum.Parked = sum.Pending+p.Pending, sum.Due+p.Due, sum.Parked+p.Parked
	}
	if sum.Pending != st.Pending || sum.Due != st.Due || sum.Parked != st.Parked {
		t.Errorf("the partitions add up to %+v; Stats says %+v", sum, st)
	}
	checkPartitionOne(t, ps, st, l)
}

// checkPartitionOne checks the partitions of TestStatsAndPartitionStatsAddUp.
func checkPartitionOne(t *testing.T, ps []outbox.PartitionStats, st outbox.Stats, l outbox.Lease) {
	t.Helper()
	p1 := ps[1]
	if p1.Pending != 4 || p1.Due != 3 || p1.OldestDueID != "old" || !p1.OldestDue.Equal(st.OldestDue) || p1.BlockedKeys != 1 {
		t.Errorf("partition 1 = %+v; want Pending 4, Due 3, OldestDueID old (due a minute ago), OldestDue = Stats.OldestDue, BlockedKeys 1 (retry blocks its key)", p1)
	}
	if p1.Lease.Owner != "relay" || p1.Lease.Version != 7 || p1.Lease.Partition != 1 || p1.Lease.Expires.Sub(l.Expires).Abs() > 5*time.Second {
		t.Errorf("partition 1's lease = %+v; want relay, version 7, expiring in a minute", p1.Lease)
	}
	if ps[2].Lease != (outbox.Lease{}) || ps[0].Lease != (outbox.Lease{}) {
		t.Errorf("the leases of partitions 0 (free) and 2 (expired) = %+v, %+v; want zero", ps[0].Lease, ps[2].Lease)
	}
	if ps[2].Parked != 1 || ps[2].Due != 0 || ps[2].OldestDueID != "" {
		t.Errorf("partition 2 = %+v; want Parked 1, nothing due", ps[2])
	}
}

func TestLookupDecodesTheRow(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 2})
	ctx := context.Background()
	e := raw("e1", "k")
	e.attempts, e.lastErr, e.deferred, e.dueIn = 2, "timeout", true, time.Hour
	e.history = `[{"at": "2026-01-02T03:04:05.5Z", "error": "one", "owner": "a"}, {"at": "not a time", "error": "two", "owner": "b"}, 5]`
	bad := raw("bad", "k")
	bad.headers = []byte{0x05, 'a'}
	insertRaw(t, db, 2, e, bad)
	now := serverNow(t, db)
	info, err := b.Lookup(ctx, "e1")
	if err != nil {
		t.Fatal(err)
	}
	if info.Attempts != 2 || info.LastError != "timeout" || !info.Deferred || info.Parked || info.Partition != outbox.PartitionOf("k", 2) {
		t.Errorf("Lookup(e1) = %+v", info)
	}
	if d := info.DueAt.Sub(now.Add(time.Hour)); d.Abs() > 5*time.Second {
		t.Errorf("DueAt = %s; want about an hour after the server's now %s", info.DueAt, now)
	}
	want := []outbox.Attempt{{At: time.Date(2026, 1, 2, 3, 4, 5, 5e8, time.UTC), Error: "one", Owner: "a"}, {Error: "two", Owner: "b"}}
	if !slices.Equal(info.History, want) {
		t.Errorf("History = %+v; want %+v (an element that is not an object is left out, a time that does not parse is zero)", info.History, want)
	}
	info, err = b.Lookup(ctx, "bad")
	if err != nil {
		t.Fatal(err)
	}
	if info.Headers != nil || !strings.Contains(info.LastError, "corrupt headers column") {
		t.Errorf("Lookup(bad) = Headers %v, LastError %q; want nil headers and a reason naming the column", info.Headers, info.LastError)
	}
}

func TestOperatorCallsAfterClose(t *testing.T) {
	t.Parallel()
	b, _ := newBackend(t, mysqloutbox.Options{})
	b.Close()
	ctx := context.Background()
	l := outbox.Lease{Owner: "o", Version: 1}
	calls := map[string]error{}
	calls["Cancel"] = b.Cancel(ctx, "x")
	_, calls["Stats"] = b.Stats(ctx)
	_, calls["Parked"] = b.Parked(ctx, "", 1)
	_, calls["Requeue"] = b.Requeue(ctx, "x")
	_, calls["PartitionStats"] = b.PartitionStats(ctx)
	_, calls["Lookup"] = b.Lookup(ctx, "x")
	_, calls["Entries"] = b.Entries(ctx, outbox.StateDue, outbox.ListFilter{}, "", 1)
	_, calls["BlockedKeys"] = b.BlockedKeys(ctx, outbox.ListFilter{}, outbox.BlockedKey{}, 1)
	calls["PauseTopic"] = b.PauseTopic(ctx, "t")
	calls["ResumeTopic"] = b.ResumeTopic(ctx, "t")
	calls["PausePartition"] = b.PausePartition(ctx, 0)
	calls["ResumePartition"] = b.ResumePartition(ctx, 0)
	_, calls["Paused"] = b.Paused(ctx)
	_, calls["ExportBatch"] = b.ExportBatch(ctx, l, 1)
	calls["RemoveExported"] = b.RemoveExported(ctx, l, []string{"x"})
	_, calls["Import"] = b.Import(ctx, []outbox.EntryInfo{{Entry: outbox.Entry{ID: "x", Topic: "t"}}})
	calls["Hold"] = b.Hold(ctx, "r")
	calls["Unhold"] = b.Unhold(ctx)
	_, calls["HoldState"] = b.HoldState(ctx)
	calls["Seal"] = b.Seal(ctx)
	calls["Unseal"] = b.Unseal(ctx)
	_, calls["Sealed"] = b.Sealed(ctx)
	for name, err := range calls {
		if !errors.Is(err, outbox.ErrClosed) {
			t.Errorf("%s after Close: %v; want ErrClosed", name, err)
		}
	}
}

func TestOperatorCallsPassContextErrorsThrough(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 1})
	insertRaw(t, db, 1, raw("e1", "k"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := map[string]error{}
	_, calls["Stats"] = b.Stats(ctx)
	_, calls["Lookup"] = b.Lookup(ctx, "e1")
	_, calls["Requeue"] = b.Requeue(ctx, "e1")
	_, calls["PartitionStats"] = b.PartitionStats(ctx)
	_, calls["Import"] = b.Import(ctx, []outbox.EntryInfo{{Entry: outbox.Entry{ID: "x", Topic: "t"}}})
	calls["Seal"] = b.Seal(ctx)
	for name, err := range calls {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled context: %v; want an error wrapping context.Canceled", name, err)
		}
	}
}

// TestPartitionStatsListsEveryPartition: more partitions than MySQL's
// default cte_max_recursion_depth (1000), one lease row deleted by hand,
// one entry in a partition out of range: every partition is listed once,
// in order, and the stray row is in none.
func TestPartitionStatsListsEveryPartition(t *testing.T) {
	t.Parallel()
	const n = 1200
	b, db := newBackend(t, mysqloutbox.Options{Partitions: n})
	if _, err := db.Exec("DELETE FROM `outbox_lease` WHERE `partition` = 1100"); err != nil {
		t.Fatal(err)
	}
	stray := raw("stray", "k")
	stray.part = n + 5
	insertRaw(t, db, n, raw("e1", "k"), stray)
	ps, err := b.PartitionStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != n {
		t.Fatalf("PartitionStats listed %d partitions; want %d", len(ps), n)
	}
	var pending int64
	for i, p := range ps {
		if p.Partition != i {
			t.Fatalf("PartitionStats[%d] is partition %d", i, p.Partition)
		}
		pending += p.Pending
	}
	if pending != 1 || ps[outbox.PartitionOf("k", n)].Pending != 1 || ps[outbox.PartitionOf("k", n)].OldestDueID != "e1" {
		t.Errorf("the partitions count %d pending entries; want 1, e1 in partition %d", pending, outbox.PartitionOf("k", n))
	}
}
