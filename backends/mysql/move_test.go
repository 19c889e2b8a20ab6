package mysqloutbox_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outboxrelay/outbox"
	mysqloutbox "github.com/outboxrelay/outbox/backends/mysql"
	"github.com/outboxrelay/outbox/internal/testenv"
)

// exportedEntry is an entry as another outbox's ExportBatch reports it.
func exportedEntry(id, key string, due time.Time) outbox.EntryInfo {
	return outbox.EntryInfo{Entry: outbox.Entry{ID: id, Topic: "orders", Key: key, Payload: []byte(id),
		Headers: map[string]string{"h": id}, CreatedAt: time.Now().Add(-time.Hour)}, DueAt: due}
}

func TestImportTakesSeqsBelowEveryAppendedEntry(t *testing.T) {
	t.Parallel()
	db, name := newDB(t)
	ctx := context.Background()
	opts := mysqloutbox.Options{Partitions: 2}
	if err := mysqloutbox.Migrate(ctx, db, opts); err != nil {
		t.Fatal(err)
	}
	// clientFoundRows makes the server count a duplicate that changed
	// nothing as affected: Import must still count only what it added.
	cfg, err := mysql.ParseDSN(testenv.MySQLDSN(name))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ClientFoundRows = true
	found, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { found.Close() })
	b, err := mysqloutbox.New(ctx, found, mysqloutbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	seqs := insertRaw(t, db, 2, raw("app1", "k"), raw("app2", "k"))
	due := time.Now().Add(-time.Minute)
	n, err := b.Import(ctx, []outbox.EntryInfo{exportedEntry("imp1", "k", due), exportedEntry("app1", "k", due), exportedEntry("imp2", "k", due), exportedEntry("imp1", "k", due)})
	if err != nil || n != 2 {
		t.Fatalf("Import(imp1, app1, imp2, imp1) = %d, %v; want 2 (app1 is stored, imp1 repeats)", n, err)
	}
	n, err = b.Import(ctx, []outbox.EntryInfo{exportedEntry("imp3", "k", due), exportedEntry("imp2", "k", due)})
	if err != nil || n != 1 {
		t.Fatalf("Import(imp3, imp2) = %d, %v; want 1", n, err)
	}
	s1, s2, s3 := seqOf(t, db, "imp1"), seqOf(t, db, "imp2"), seqOf(t, db, "imp3")
	if !(s1 < s2 && s2 < s3 && s3 < 0 && 0 < seqs[0]) {
		t.Errorf("seqs: imp1 %d, imp2 %d, imp3 %d, app1 %d; want the imported ones negative, in the order imported, below every appended one", s1, s2, s3, seqs[0])
	}
	info, err := b.Lookup(ctx, "imp1")
	if err != nil {
		t.Fatal(err)
	}
	if info.Partition != outbox.PartitionOf("k", 2) || string(info.Payload) != "imp1" || info.Headers["h"] != "imp1" || info.DueAt.Sub(due).Abs() > time.Millisecond {
		t.Errorf("Lookup(imp1) = %+v; want it as imported, due at its DueAt (a minute ago, before the server's now, not held)", info)
	}
}

func TestImportLowersDueTimesToTheHold(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 1})
	ctx := context.Background()
	if err := b.Hold(ctx, "moving"); err != nil {
		t.Fatal(err)
	}
	hs, err := b.HoldState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	now := serverNow(t, db)
	late := exportedEntry("late", "k", now.Add(time.Hour))
	late.Attempts, late.LastError = 2, "timeout"
	late.History = []outbox.Attempt{{At: now.Add(-time.Minute), Error: "timeout", Owner: "src"}}
	ahead := exportedEntry("ahead", "k", now.Add(30*time.Second)) // a source clock running ahead
	sched := exportedEntry("sched", "k", now.Add(30*time.Second))
	sched.NotBefore = sched.DueAt
	parked := exportedEntry("parked", "k", time.Time{})
	parked.Parked, parked.Topic, parked.Attempts = true, "", 9
	created := exportedEntry("no-created", "k", time.Time{})
	created.CreatedAt = time.Time{}
	if n, err := b.Import(ctx, []outbox.EntryInfo{exportedEntry("due", "k", now.Add(-time.Hour)), late, ahead, sched, parked, created}); err != nil || n != 6 {
		t.Fatalf("Import = %d, %v; want 6", n, err)
	}
	for id, want := range map[string]time.Time{
		"due": now.Add(-time.Hour), "late": late.DueAt, "ahead": hs.Since, "sched": sched.DueAt, "no-created": hs.Since,
	} {
		info, err := b.Lookup(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if info.DueAt.Sub(want).Abs() > time.Microsecond {
			t.Errorf("DueAt of %s = %s; want %s", id, info.DueAt, want)
		}
	}
	info, err := b.Lookup(ctx, "late")
	if err != nil {
		t.Fatal(err)
	}
	if info.Attempts != 2 || len(info.History) != 1 || !info.History[0].At.Equal(late.History[0].At.Truncate(time.Microsecond)) || info.History[0].Owner != "src" {
		t.Errorf("Lookup(late) = %+v; want Attempts and History as imported", info)
	}
	info, err = b.Lookup(ctx, "no-created")
	if err != nil || info.CreatedAt.Before(now) {
		t.Errorf("CreatedAt of an entry imported without one = %s, %v; want the server's now (after %s)", info.CreatedAt, err, now)
	}
	info, err = b.Lookup(ctx, "parked")
	if err != nil || !info.Parked || info.Topic != "" || info.Attempts != 9 {
		t.Errorf("Lookup(parked) = %+v, %v; want it parked, without a topic, Attempts 9", info, err)
	}
}

func TestImportRefusesTheWholeCall(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 1})
	ctx := context.Background()
	bad := exportedEntry("bad\xff", "k", time.Time{})
	if n, err := b.Import(ctx, []outbox.EntryInfo{exportedEntry("good", "k", time.Time{}), bad}); n != 0 || !errors.Is(err, outbox.ErrInvalidEntry) {
		t.Errorf("Import with an ID of invalid UTF-8 = %d, %v; want 0, ErrInvalidEntry", n, err)
	}
	var rows int
	if err := db.QueryRow("SELECT COUNT(*) FROM `outbox`").Scan(&rows); err != nil || rows != 0 {
		t.Errorf("the table holds %d rows (%v); want none", rows, err)
	}
	var next int64
	if err := db.QueryRow("SELECT next_seq FROM `outbox_import`").Scan(&next); err != nil || next != -9223372036854775807 {
		t.Errorf("the import counter is %d (%v); want it untouched", next, err)
	}
}

func TestExportIsFencedAndInSeqOrder(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 2})
	ctx := context.Background()
	var keys []string
	for i := 0; len(keys) < 3; i++ {
		if k := string(rune('a' + i)); outbox.PartitionOf(k, 2) == 0 {
			keys = append(keys, k)
		}
	}
	other := "z"
	for outbox.PartitionOf(other, 2) != 1 {
		other += "z"
	}
	parked := raw("parked", keys[1])
	parked.parked, parked.attempts, parked.lastErr = true, 1, "poison"
	corrupt := raw("corrupt", keys[2])
	corrupt.headers = []byte{0x09}
	insertRaw(t, db, 2, raw("e1", keys[0]), raw("x1", other), parked, corrupt, raw("e2", keys[0]))
	if _, err := b.Import(ctx, []outbox.EntryInfo{exportedEntry("imp", keys[0], time.Time{})}); err != nil {
		t.Fatal(err)
	}
	l := setLease(t, db, 0, "mover", 3, time.Minute)
	got, err := b.ExportBatch(ctx, l, 10)
	if err != nil {
		t.Fatal(err)
	}
	if ids := entryIDs(got); !slices.Equal(ids, []string{"imp", "e1", "parked", "corrupt", "e2"}) {
		t.Fatalf("ExportBatch = %v; want imp (imported), e1, parked, corrupt, e2 (seq order, partition 0 only)", ids)
	}
	if c := got[3]; !c.Parked || c.Headers != nil || !c.DueAt.IsZero() {
		t.Errorf("the corrupt row was exported as %+v; want it parked, without headers, with the reason", c)
	}
	if p := got[2]; !p.Parked || p.LastError != "poison" || p.Attempts != 1 {
		t.Errorf("the parked row was exported as %+v", p)
	}
	if err := b.RemoveExported(ctx, l, []string{"imp", "e1", "x1", "never"}); err != nil {
		t.Fatal(err)
	}
	got, err = b.ExportBatch(ctx, l, 2)
	if err != nil || !slices.Equal(entryIDs(got), []string{"parked", "corrupt"}) {
		t.Errorf("ExportBatch(limit 2) after RemoveExported = %v, %v; want parked, corrupt", entryIDs(got), err)
	}
	if _, err := b.Lookup(ctx, "x1"); err != nil {
		t.Errorf("x1 (partition 1) after RemoveExported of partition 0: %v; want it kept", err)
	}
	empty := setLease(t, db, 1, "mover", 1, time.Minute)
	if err := b.RemoveExported(ctx, empty, []string{"x1"}); err != nil {
		t.Fatal(err)
	}
	if got, err := b.ExportBatch(ctx, empty, 10); err != nil || len(got) != 0 {
		t.Errorf("ExportBatch of an empty partition = %v, %v; want nothing, nil", entryIDs(got), err)
	}
	setLease(t, db, 1, "thief", 2, time.Minute)
	if _, err := b.ExportBatch(ctx, empty, 10); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Errorf("ExportBatch of an empty partition with a lease taken over: %v; want ErrLeaseLost", err)
	}
	expired := setLease(t, db, 0, "mover", 3, -time.Millisecond)
	if _, err := b.ExportBatch(ctx, expired, 10); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Errorf("ExportBatch with an expired lease: %v; want ErrLeaseLost", err)
	}
	if err := b.RemoveExported(ctx, expired, []string{"e2"}); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Errorf("RemoveExported with an expired lease: %v; want ErrLeaseLost", err)
	}
	if _, err := b.Lookup(ctx, "e2"); err != nil {
		t.Errorf("e2 after the refused RemoveExported: %v; want it kept", err)
	}
}

// TestRemoveExportedWaitsForATakeover: RemoveExported reads the lease
// row with a shared lock, so a takeover in flight (which updates the row)
// either finishes first, and the removal is refused, or waits for it.
func TestRemoveExportedIsRefusedAfterATakeoverCommits(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 1})
	ctx := context.Background()
	insertRaw(t, db, 1, raw("e1", "k"))
	l := setLease(t, db, 0, "mover", 1, time.Minute)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("UPDATE `outbox_lease` SET owner = 'thief', version = 2 WHERE `partition` = 0"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- b.RemoveExported(ctx, l, []string{"e1"}) }()
	select {
	case err := <-done:
		t.Fatalf("RemoveExported returned %v while a takeover held the lease row; want it to wait", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, outbox.ErrLeaseLost) {
			t.Errorf("RemoveExported after the takeover committed: %v; want ErrLeaseLost", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("RemoveExported did not return after the takeover committed")
	}
	if _, err := b.Lookup(ctx, "e1"); err != nil {
		t.Errorf("e1 after the refused RemoveExported: %v; want it kept", err)
	}
}

func TestHoldKeepsItsFirstSince(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 1})
	ctx := context.Background()
	if hs, err := b.HoldState(ctx); err != nil || hs.Held {
		t.Fatalf("HoldState of a new outbox = %+v, %v", hs, err)
	}
	start := serverNow(t, db)
	if err := b.Hold(ctx, "first"); err != nil {
		t.Fatal(err)
	}
	first, err := b.HoldState(ctx)
	if err != nil || !first.Held || first.Reason != "first" || first.Since.Before(start) {
		t.Fatalf("HoldState = %+v, %v; want held, first, since the server's clock at Hold", first, err)
	}
	time.Sleep(5 * time.Millisecond)
	if err := b.Hold(ctx, "second \xff"); err != nil {
		t.Fatal(err)
	}
	second, err := b.HoldState(ctx)
	if err != nil || second.Reason != "second \uFFFD" || !second.Since.Equal(first.Since) {
		t.Errorf("HoldState after a second Hold = %+v, %v; want the new reason (invalid UTF-8 replaced), the first since", second, err)
	}
	for range 2 {
		if err := b.Unhold(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if hs, err := b.HoldState(ctx); err != nil || hs != (outbox.HoldState{}) {
		t.Errorf("HoldState after Unhold = %+v, %v; want the zero HoldState", hs, err)
	}
}

func TestSealWaitsForAnOpenAppendingTransaction(t *testing.T) {
	t.Parallel()
	for _, level := range []sql.IsolationLevel{sql.LevelReadCommitted, sql.LevelRepeatableRead} {
		t.Run(level.String(), func(t *testing.T) {
			t.Parallel()
			b, db := newBackend(t, mysqloutbox.Options{Partitions: 1})
			ctx := context.Background()
			tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: level})
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback() // on a failure, before the database is dropped
			if err := b.AppendInTx(ctx, tx, outbox.Entry{ID: "in-flight", Topic: "t"}); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- b.Seal(ctx) }()
			select {
			case err := <-done:
				t.Fatalf("Seal returned %v while an appending transaction was open; want it to wait", err)
			case <-time.After(300 * time.Millisecond):
			}
			if sealed, err := b.Sealed(ctx); err != nil || sealed {
				t.Errorf("Sealed while Seal waits = %v, %v; want false (Sealed takes no lock)", sealed, err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatalf("committing the append that began before Seal: %v", err)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("Seal did not return after the appending transaction committed")
			}
			tx2, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: level})
			if err != nil {
				t.Fatal(err)
			}
			defer tx2.Rollback()
			if err := b.AppendInTx(ctx, tx2, outbox.Entry{ID: "after", Topic: "t"}); !errors.Is(err, outbox.ErrSealed) {
				t.Errorf("an append after Seal: %v; want ErrSealed", err)
			}
			// Its shared lock on the meta row lasts until the transaction
			// ends: Unseal would wait for it.
			if err := tx2.Rollback(); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Lookup(ctx, "in-flight"); err != nil {
				t.Errorf("the entry appended before Seal: %v", err)
			}
			if sealed, err := b.Sealed(ctx); err != nil || !sealed {
				t.Errorf("Sealed = %v, %v; want true", sealed, err)
			}
			for range 2 {
				if err := b.Unseal(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if sealed, err := b.Sealed(ctx); err != nil || sealed {
				t.Errorf("Sealed after Unseal = %v, %v; want false", sealed, err)
			}
		})
	}
}

// TestSealStoppedByItsContextDoesNotSeal: a Seal whose context ends while
// it waits for an appending transaction is stopped on the server, so the
// outbox is not sealed when that transaction later commits.
func TestSealStoppedByItsContextDoesNotSeal(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 1})
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := b.AppendInTx(ctx, tx, outbox.Entry{ID: "in-flight", Topic: "t"}); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := b.Seal(sctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Seal with a context that ends while it waits: %v; want an error wrapping context.DeadlineExceeded", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // a statement left waiting would have run by now
	if sealed, err := b.Sealed(ctx); err != nil || sealed {
		t.Errorf("Sealed after the stopped Seal and the commit = %v, %v; want false", sealed, err)
	}
	tx, err = db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := b.AppendInTx(ctx, tx, outbox.Entry{ID: "after", Topic: "t"}); err != nil {
		t.Errorf("an append after the stopped Seal: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := b.Seal(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestLargeCallsAreSplit: Import, RemoveExported and Requeue split large
// calls into statements of at most 1000 rows or IDs (and Import's INSERTs
// into at most 4 MiB), and keep the order and counts across the splits.
func TestLargeCallsAreSplit(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 1})
	ctx := context.Background()
	const n = 2500
	var batch []outbox.EntryInfo
	var ids []string
	for i := range n {
		id := fmt.Sprintf("e%05d", i)
		e := exportedEntry(id, "k", time.Time{})
		e.Parked, e.Attempts, e.LastError = true, 1, "poison"
		batch = append(batch, e)
		ids = append(ids, id)
	}
	big := bytes.Repeat([]byte{0xab}, 3<<20)
	for i := range 4 {
		batch[i].Payload = big // 12 MiB in the first rows: several INSERTs
	}
	if got, err := b.Import(ctx, batch); err != nil || got != n {
		t.Fatalf("Import of %d entries = %d, %v", n, got, err)
	}
	var ordered int
	if err := db.QueryRow("SELECT COUNT(*) FROM (SELECT id, seq, LAG(id) OVER (ORDER BY seq) AS prev FROM `outbox`) AS x WHERE prev IS NULL OR prev < id").Scan(&ordered); err != nil || ordered != n {
		t.Errorf("%d of %d imported rows follow the previous ID in seq order (%v); want all: seqs in slice order", ordered, n, err)
	}
	info, err := b.Lookup(ctx, "e00003")
	if err != nil || !bytes.Equal(info.Payload, big) {
		t.Errorf("Lookup(e00003): %d payload bytes, %v; want the 3 MiB imported", len(info.Payload), err)
	}
	if got, err := b.Requeue(ctx, ids...); err != nil || got != n {
		t.Fatalf("Requeue of %d parked entries = %d, %v", n, got, err)
	}
	if err := db.QueryRow("SELECT COUNT(*) FROM (SELECT id, seq, LAG(id) OVER (ORDER BY seq) AS prev FROM `outbox` WHERE state = 'pending') AS x WHERE prev IS NULL OR prev < id").Scan(&ordered); err != nil || ordered != n {
		t.Errorf("%d of %d requeued rows follow the previous ID in seq order (%v); want all", ordered, n, err)
	}
	l := setLease(t, db, 0, "mover", 1, time.Minute)
	if err := b.RemoveExported(ctx, l, ids[:n-1]); err != nil {
		t.Fatal(err)
	}
	got, err := b.ExportBatch(ctx, l, 10)
	if err != nil || !slices.Equal(entryIDs(got), ids[n-1:]) {
		t.Errorf("ExportBatch after removing all but the last = %v, %v; want %v", entryIDs(got), err, ids[n-1:])
	}
}
