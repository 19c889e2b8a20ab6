package mysqloutbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/go-sql-driver/mysql"

	"github.com/outboxrelay/outbox"
	mysqloutbox "github.com/outboxrelay/outbox/backends/mysql"
	"github.com/outboxrelay/outbox/internal/testenv"
)

// TestFencedWritesLockTheLeaseRow proves the fence of MarkSent and
// MarkFailed: their multi-table statement reads the lease row with a
// shared lock, in READ COMMITTED as in REPEATABLE READ, so a takeover
// (an UPDATE of the lease row) cannot interleave. A transaction holding
// the row's exclusive lock makes them wait; when it commits a takeover,
// they change nothing and report the lease lost.
func TestFencedWritesLockTheLeaseRow(t *testing.T) {
	t.Parallel()
	for _, iso := range []string{"READ-COMMITTED", "REPEATABLE-READ"} {
		t.Run(iso, func(t *testing.T) {
			t.Parallel()
			_, name := newDB(t)
			cfg, err := mysql.ParseDSN(testenv.MySQLDSN(name))
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Params == nil {
				cfg.Params = map[string]string{}
			}
			cfg.Params["tx_isolation"] = "'" + iso + "'"
			db, err := sql.Open("mysql", cfg.FormatDSN())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			ctx := context.Background()
			if err := mysqloutbox.Migrate(ctx, db, mysqloutbox.Options{Partitions: 1}); err != nil {
				t.Fatal(err)
			}
			var got string
			if err := db.QueryRow("SELECT @@tx_isolation").Scan(&got); err != nil || got != iso {
				t.Fatalf("session isolation %q (%v), want %s", got, err, iso)
			}
			b, err := mysqloutbox.New(ctx, db, mysqloutbox.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			insertRows(t, db, row{id: "s", due: -time.Second}, row{id: "f", due: -time.Second})
			l := takeLease(t, db, 0, "me")
			calls := map[string]func() error{
				"MarkSent":   func() error { return b.MarkSent(ctx, l, []string{"s"}) },
				"MarkFailed": func() error { return b.MarkFailed(ctx, l, []outbox.Failure{{ID: "f", Error: "e", Delay: time.Minute}}) },
			}
			for _, name := range []string{"MarkSent", "MarkFailed"} {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := tx.Exec("UPDATE `outbox_lease` SET owner = 'thief', version = version + 1 WHERE `partition` = 0"); err != nil {
					t.Fatal(err)
				}
				done := make(chan error, 1)
				go func() { done <- calls[name]() }()
				select {
				case err := <-done:
					t.Fatalf("%s returned (%v) while the lease row was locked by a takeover: it did not read the row with a lock", name, err)
				case <-time.After(500 * time.Millisecond):
				}
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
				select {
				case err := <-done:
					if !errors.Is(err, outbox.ErrLeaseLost) {
						t.Fatalf("%s after the takeover committed: %v, want ErrLeaseLost", name, err)
					}
				case <-time.After(30 * time.Second):
					t.Fatalf("%s still waits after the takeover committed", name)
				}
				l = takeLease(t, db, 0, "me")
			}
			var n, attempts int
			if err := db.QueryRow("SELECT COUNT(*), COALESCE(SUM(attempts), 0) FROM `outbox`").Scan(&n, &attempts); err != nil || n != 2 || attempts != 0 {
				t.Fatalf("after the fenced-out writes: %d entries with %d attempts (%v), want 2 with 0", n, attempts, err)
			}
		})
	}
}

type storedRow struct {
	state, lastError string
	attempts         int
	deferred         bool
	dueInMicros      int64
	history          []outbox.Attempt
}

func readRow(t testing.TB, db *sql.DB, id string) storedRow {
	t.Helper()
	var r storedRow
	var hist sql.NullString
	err := db.QueryRow("SELECT state, last_error, attempts, deferred, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), next_at), history FROM `outbox` WHERE id = ?", id).
		Scan(&r.state, &r.lastError, &r.attempts, &r.deferred, &r.dueInMicros, &hist)
	if err != nil {
		t.Fatalf("reading %s: %v", id, err)
	}
	if hist.Valid {
		var raw []struct{ At, Error, Owner string }
		if err := json.Unmarshal([]byte(hist.String), &raw); err != nil {
			t.Fatalf("history of %s: %v: %s", id, err, hist.String)
		}
		for _, a := range raw {
			at, err := time.Parse(time.RFC3339Nano, a.At)
			if err != nil {
				t.Fatalf("history of %s: at %q: %v", id, a.At, err)
			}
			r.history = append(r.history, outbox.Attempt{At: at, Error: a.Error, Owner: a.Owner})
		}
	}
	return r
}

func TestMarkFailed(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 1})
	ctx := context.Background()
	insertRows(t, db, row{id: "r", key: "k"}, row{id: "p"}, row{id: "d", key: "d"}, row{id: "d2", key: "d"}, row{id: "neg"})
	l := takeLease(t, db, 0, "relay-1")

	long := strings.Repeat("é", 3000) // 6000 bytes: cut at 4096 on a character boundary
	if err := b.MarkFailed(ctx, l, []outbox.Failure{
		{ID: "r", Error: long, Delay: time.Hour},
		{ID: "p", Error: "bad\x00\xff", Park: true},
		{ID: "d", Error: "not stored", Delay: time.Minute, Deferred: true},
		{ID: "neg", Error: "back", Delay: -time.Hour},
		{ID: "unknown", Error: "ignored"},
	}); err != nil {
		t.Fatal(err)
	}
	checkRetried(t, readRow(t, db, "r"), long)
	if p := readRow(t, db, "p"); p.state != "parked" || p.attempts != 1 || p.lastError != "bad\uFFFD\uFFFD" {
		t.Fatalf("p: %+v", p)
	}
	if d := readRow(t, db, "d"); !deferredOnly(d) {
		t.Fatalf("deferred d: %+v", d)
	}
	if neg := readRow(t, db, "neg"); neg.dueInMicros > -int64(59*time.Minute/time.Microsecond) {
		t.Fatalf("a negative delay: due in %dµs, want an hour ago", neg.dueInMicros)
	}
}

// checkRetried checks r after a failure with a long error and a Delay of
// an hour.
func checkRetried(t *testing.T, r storedRow, long string) {
	t.Helper()
	if r.attempts != 1 || r.state != "pending" || len(r.lastError) != 4096 || !utf8.ValidString(r.lastError) || !strings.HasPrefix(long, r.lastError) {
		t.Fatalf("r: %+v (last error %d bytes)", r, len(r.lastError))
	}
	if r.dueInMicros < int64(59*time.Minute/time.Microsecond) || r.dueInMicros > int64(time.Hour/time.Microsecond) {
		t.Fatalf("r is due in %dµs, want about an hour by the server's clock", r.dueInMicros)
	}
	if len(r.history) != 1 || r.history[0].Owner != "relay-1" || r.history[0].Error != r.lastError || time.Since(r.history[0].At).Abs() > time.Minute {
		t.Fatalf("r history: %+v", r.history)
	}
}

// deferredOnly reports whether r was deferred and never attempted.
func deferredOnly(r storedRow) bool {
	return r.attempts == 0 && r.lastError == "" && r.deferred && r.history == nil && r.dueInMicros > 0
}

func TestMarkFailedDeferralAndRejections(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 1})
	ctx := context.Background()
	insertRows(t, db, row{id: "neg", due: -time.Hour}, row{id: "d", key: "d"}, row{id: "d2", key: "d"}, row{id: "p"})
	l := takeLease(t, db, 0, "relay-1")
	if err := b.MarkFailed(ctx, l, []outbox.Failure{
		{ID: "d", Error: "not stored", Delay: time.Minute, Deferred: true},
		{ID: "neg", Error: "back", Delay: -time.Hour},
		{ID: "p", Error: "bad", Park: true},
	}); err != nil {
		t.Fatal(err)
	}
	// d2 is held back by the deferred d; an attempt of d clears deferred.
	exec(t, db, "UPDATE `outbox` SET next_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE id IN ('d', 'd2')")
	got, err := b.FindPendingBatch(ctx, l, 10)
	if err != nil {
		t.Fatal(err)
	}
	wantIDs(t, "d2 held back by deferred d", got, "neg", "d")
	if err := b.MarkFailed(ctx, l, []outbox.Failure{{ID: "d", Error: "tried"}}); err != nil {
		t.Fatal(err)
	}
	if d := readRow(t, db, "d"); d.deferred || d.attempts != 1 || d.lastError != "tried" {
		t.Fatalf("d attempted after a deferral: %+v", d)
	}
	// Both Park and Deferred: rejected before anything is written.
	err = b.MarkFailed(ctx, l, []outbox.Failure{{ID: "neg", Error: "x"}, {ID: "d", Park: true, Deferred: true}})
	if !errors.Is(err, outbox.ErrInvalidArgument) {
		t.Fatalf("Park and Deferred: %v, want ErrInvalidArgument", err)
	}
	if neg := readRow(t, db, "neg"); neg.attempts != 1 {
		t.Fatalf("a rejected call changed neg: %+v", neg)
	}
	// A parked entry is never changed, and an empty call does nothing.
	if err := b.MarkFailed(ctx, l, []outbox.Failure{{ID: "p", Error: "again", Delay: time.Second}}); err != nil {
		t.Fatal(err)
	}
	if p := readRow(t, db, "p"); p.state != "parked" || p.attempts != 1 {
		t.Fatalf("p after a failure of a parked entry: %+v", p)
	}
	if err := b.MarkFailed(ctx, l, nil); err != nil {
		t.Fatal(err)
	}
}

func TestMarkFailedKeepsTheLastAttempts(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 1})
	ctx := context.Background()
	insertRows(t, db, row{id: "x"})
	l := takeLease(t, db, 0, "me")
	for i := range outbox.MaxAttemptHistory + 3 {
		if err := b.MarkFailed(ctx, l, []outbox.Failure{{ID: "x", Error: fmt.Sprintf("e%d", i)}}); err != nil {
			t.Fatal(err)
		}
	}
	r := readRow(t, db, "x")
	if r.attempts != outbox.MaxAttemptHistory+3 || len(r.history) != outbox.MaxAttemptHistory {
		t.Fatalf("attempts %d, history %d, want %d and %d", r.attempts, len(r.history), outbox.MaxAttemptHistory+3, outbox.MaxAttemptHistory)
	}
	for i, a := range r.history {
		if want := fmt.Sprintf("e%d", i+3); a.Error != want {
			t.Fatalf("history[%d] = %q, want %q (oldest first)", i, a.Error, want)
		}
		if i > 0 && a.At.Before(r.history[i-1].At) {
			t.Fatalf("history out of order: %+v", r.history)
		}
	}
}

func TestMarkSentSplitsLongLists(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 1})
	ctx := context.Background()
	exec(t, db, "SET SESSION max_recursive_iterations = 100000")
	exec(t, db, "INSERT INTO `outbox` (id, `partition`, topic, payload, created_at, next_at, last_error) "+
		"WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < 2500) "+
		"SELECT CONCAT('id', n), 0, 't', 'x', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), '' FROM s")
	l := takeLease(t, db, 0, "me")
	all := make([]string, 0, 2600)
	for i := 1; i <= 2500; i++ {
		all = append(all, fmt.Sprintf("id%d", i))
	}
	fails := make([]outbox.Failure, len(all))
	for i, id := range all {
		fails[i] = outbox.Failure{ID: id, Error: strings.Repeat("x", 4096), Delay: -time.Second}
	}
	if err := b.MarkFailed(ctx, l, fails); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM `outbox` WHERE attempts = 1").Scan(&n); err != nil || n != 2500 {
		t.Fatalf("%d of 2500 failures recorded (%v)", n, err)
	}
	all = append(all, "unknown", "id1") // unknown and repeated IDs are ignored
	if err := b.MarkSent(ctx, l, all); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow("SELECT COUNT(*) FROM `outbox`").Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d entries left after MarkSent of all (%v)", n, err)
	}
	if err := b.MarkSent(ctx, l, all[:10]); err != nil {
		t.Fatalf("MarkSent again (idempotent): %v", err)
	}
}

func TestMarkSentArchiveAndPurge(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 1, Archive: true})
	ctx := context.Background()
	insertRows(t, db, row{id: "a"}, row{id: "b"}, row{id: "c"})
	l := takeLease(t, db, 0, "me")
	if err := b.MarkFailed(ctx, l, []outbox.Failure{{ID: "a", Error: "first"}}); err != nil {
		t.Fatal(err)
	}
	if err := b.MarkSent(ctx, l, []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	var n, attempts int
	if err := db.QueryRow("SELECT COUNT(*), SUM(attempts) FROM `outbox_archive` WHERE id IN ('a', 'b') AND sent_at <= UTC_TIMESTAMP(6) AND payload = CONCAT('p-', id)").Scan(&n, &attempts); err != nil || n != 2 || attempts != 1 {
		t.Fatalf("archive: %d rows, %d attempts (%v), want 2 and 1", n, attempts, err)
	}
	// Appended again and sent again: the archive keeps the latest delivery.
	insertRows(t, db, row{id: "a"})
	if err := b.MarkSent(ctx, l, []string{"a"}); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow("SELECT COUNT(*), SUM(attempts) FROM `outbox_archive` WHERE id = 'a'").Scan(&n, &attempts); err != nil || n != 1 || attempts != 0 {
		t.Fatalf("archive of a sent twice: %d rows, %d attempts (%v), want 1 and 0", n, attempts, err)
	}
	stale := l
	stale.Version--
	if err := b.MarkSent(ctx, stale, []string{"c"}); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("archive with a stale lease: %v, want ErrLeaseLost", err)
	}
	if err := db.QueryRow("SELECT COUNT(*) FROM `outbox_archive` WHERE id = 'c'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("a stale MarkSent archived c (%d, %v)", n, err)
	}

	exec(t, db, "UPDATE `outbox_archive` SET sent_at = UTC_TIMESTAMP(6) - INTERVAL 2 DAY WHERE id = 'b'")
	exec(t, db, "SET SESSION max_recursive_iterations = 100000")
	exec(t, db, "INSERT INTO `outbox_archive` (seq, id, `partition`, topic, `key`, created_at, attempts, last_error, sent_at) "+
		"WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < 25) "+
		"SELECT n, CONCAT('old', n), 0, 't', '', UTC_TIMESTAMP(6), 0, '', UTC_TIMESTAMP(6) - INTERVAL 3 DAY + INTERVAL n SECOND FROM s")
	purged, err := b.PurgeArchive(ctx, time.Now().Add(-24*time.Hour), 10)
	if err != nil || purged != 26 {
		t.Fatalf("PurgeArchive: %d, %v; want 26", purged, err)
	}
	if err := db.QueryRow("SELECT COUNT(*) FROM `outbox_archive`").Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d rows left in the archive (%v), want a", n, err)
	}
	if _, err := b.PurgeArchive(ctx, time.Now(), 0); !errors.Is(err, outbox.ErrInvalidArgument) {
		t.Fatalf("batch size 0: %v", err)
	}
}

func TestClosedAndEmpty(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 1})
	ctx := context.Background()
	l := takeLease(t, db, 0, "me")
	stale := l
	stale.Version--
	for name, err := range map[string]error{
		"MarkSent":   b.MarkSent(ctx, stale, nil),
		"MarkFailed": b.MarkFailed(ctx, stale, nil),
		"Release":    b.Release(ctx, stale, []string{}),
	} {
		if err != nil {
			t.Fatalf("%s with no IDs and a stale lease: %v, want nil (nothing to do)", name, err)
		}
	}
	if err := b.Release(ctx, stale, []string{"x"}); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("Release with a stale lease: %v", err)
	}
	if err := b.Release(ctx, l, []string{"x"}); err != nil {
		t.Fatalf("Release: %v", err)
	}
	b.Close()
	_, err1 := b.FindPendingBatch(ctx, l, 1)
	_, err2 := b.PurgeArchive(ctx, time.Now(), 1)
	for i, err := range []error{err1, b.MarkSent(ctx, l, nil), b.MarkFailed(ctx, l, nil), b.Release(ctx, l, nil), err2} {
		if !errors.Is(err, outbox.ErrClosed) {
			t.Fatalf("call %d after Close: %v, want ErrClosed", i, err)
		}
	}
}

// TestOutcomePlans: the fenced writes look each ID up in outbox_id_uq,
// even in a partition of a few rows, where the optimizer would rather
// scan the partition through outbox_due_idx (and, under REPEATABLE READ,
// next-key lock all of it against concurrent appends).
func TestOutcomePlans(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 4})
	insertRows(t, db, row{id: "a", partition: 2}, row{id: "b", partition: 2}, row{id: "c", partition: 2})
	l := takeLease(t, db, 2, "me")
	for _, c := range []struct {
		name string
		args []any
	}{
		{"mark_sent", []any{`["a","b"]`, 2, l.Owner, l.Version}},
		{"mark_failed", []any{`[["a","e",1,0,0]]`, l.Owner, l.Owner, 2, l.Owner, l.Version}},
		{"park_corrupt", []any{`[["a","e"]]`, 2, l.Owner, l.Version}},
		{"archive_sent", []any{`["a","b"]`, 2}},
	} {
		var plan string
		if err := db.QueryRow("EXPLAIN FORMAT=JSON "+mysqloutbox.RelayQuery(b, c.name), c.args...).Scan(&plan); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var doc any
		if err := json.Unmarshal([]byte(plan), &doc); err != nil {
			t.Fatal(err)
		}
		walkTables(doc, func(tbl map[string]any) {
			if tbl["table_name"] == "o" && (tbl["key"] != "outbox_id_uq" || tbl["access_type"] != "eq_ref") {
				t.Errorf("%s reads the outbox by %v %v, want eq_ref on outbox_id_uq:\n%s", c.name, tbl["access_type"], tbl["key"], plan)
			}
		})
	}
}

// TestRelayRoundTrips counts the statements the relay's calls send on a
// warmed connection: one each, nothing prepared again, and a second one
// only when a write changed fewer rows than it was given.
func TestRelayRoundTrips(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 1})
	db.SetMaxOpenConns(1) // every call on the same connection
	ctx := context.Background()
	l := takeLease(t, db, 0, "me")
	archived, err := mysqloutbox.New(ctx, db, mysqloutbox.Options{Archive: true})
	if err != nil {
		t.Fatal(err)
	}
	defer archived.Close()
	counters := func() (questions, prepares int) {
		t.Helper()
		rows, err := db.Query("SHOW SESSION STATUS WHERE Variable_name IN ('Questions', 'Com_stmt_prepare')")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var k string
			var v int
			if err := rows.Scan(&k, &v); err != nil {
				t.Fatal(err)
			}
			if k == "Questions" {
				questions = v
			} else {
				prepares = v
			}
		}
		return questions, prepares
	}
	for round := range 3 {
		insertRows(t, db, row{id: fmt.Sprintf("a%d", round)}, row{id: fmt.Sprintf("b%d", round)}, row{id: fmt.Sprintf("c%d", round)})
		a, bb, c := fmt.Sprintf("a%d", round), fmt.Sprintf("b%d", round), fmt.Sprintf("c%d", round)
		for _, call := range []struct {
			name string
			want int
			run  func() error
		}{
			{"FetchBatch", 1, func() error { _, err := b.FetchBatch(ctx, l, 10); return err }},
			{"MarkFailed", 1, func() error { return b.MarkFailed(ctx, l, []outbox.Failure{{ID: a, Error: "e", Delay: -time.Second}}) }},
			{"MarkSent", 1, func() error { return b.MarkSent(ctx, l, []string{a, bb}) }},
			{"MarkSentUnknownID", 2, func() error { return b.MarkSent(ctx, l, []string{c, "unknown"}) }},
			{"Release", 1, func() error { return b.Release(ctx, l, []string{c}) }},
			// START TRANSACTION, the lease row locked, the copy, the
			// delete, COMMIT.
			{"MarkSentArchived", 5, func() error { return archived.MarkSent(ctx, l, []string{c}) }},
		} {
			q0, p0 := counters()
			if err := call.run(); err != nil {
				t.Fatalf("%s: %v", call.name, err)
			}
			q1, p1 := counters()
			if round > 0 && (q1-q0-1 != call.want || p1 != p0) {
				t.Errorf("round %d: %s sent %d statements and %d prepares; want %d and none", round, call.name, q1-q0-1, p1-p0, call.want)
			}
		}
	}
}

// TestJSONArgumentsKeepEveryCharacter: IDs and errors pass through the
// JSON arrays the statements take (JSON_TABLE) unchanged: quotes,
// backslashes, control characters, HTML characters, 4-byte UTF-8.
func TestJSONArgumentsKeepEveryCharacter(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 1})
	ctx := context.Background()
	odd := "id \"q\" \\b\\ <&> \u2028 \t😀 é"
	insertRows(t, db, row{id: odd}, row{id: "plain"})
	l := takeLease(t, db, 0, "me")
	msg := "err \"q\" \\ \n\r\t <&> \u2028 😀 \x01"
	if err := b.MarkFailed(ctx, l, []outbox.Failure{{ID: odd, Error: msg}}); err != nil {
		t.Fatal(err)
	}
	r := readRow(t, db, odd)
	if r.attempts != 1 || r.lastError != msg || len(r.history) != 1 || r.history[0].Error != msg {
		t.Fatalf("stored %+v, want last error %q", r, msg)
	}
	// An ID longer than any entry's, whose first 255 characters are an
	// entry's ID, names no entry.
	long := "plain" + strings.Repeat("x", 250)
	insertRows(t, db, row{id: long})
	if err := b.MarkFailed(ctx, l, []outbox.Failure{{ID: long + "y", Error: "no"}}); err != nil {
		t.Fatal(err)
	}
	if err := b.MarkSent(ctx, l, []string{long + "y"}); err != nil {
		t.Fatal(err)
	}
	if r := readRow(t, db, long); r.attempts != 0 {
		t.Fatalf("a longer ID changed %s: %+v", long, r)
	}
	if err := b.MarkSent(ctx, l, []string{odd}); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM `outbox` WHERE id = ?", odd).Scan(&n); err != nil || n != 0 {
		t.Fatalf("the odd ID is still there (%d, %v)", n, err)
	}
}

// TestIDsCompareByBytes: the IDs the statements take are compared with the
// VARBINARY id column byte for byte: "x" never names "x " (a PAD SPACE
// collation would), nor "X".
func TestIDsCompareByBytes(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 1})
	ctx := context.Background()
	insertRows(t, db, row{id: "x "}, row{id: "X"}, row{id: "x"})
	l := takeLease(t, db, 0, "me")
	if err := b.MarkFailed(ctx, l, []outbox.Failure{{ID: "x", Error: "e"}}); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]int{"x": 1, "x ": 0, "X": 0} {
		if r := readRow(t, db, id); r.attempts != want {
			t.Fatalf("after MarkFailed of \"x\", %q has %d attempts, want %d", id, r.attempts, want)
		}
	}
	if err := b.MarkSent(ctx, l, []string{"x"}); err != nil {
		t.Fatal(err)
	}
	var left []string
	rows, err := db.Query("SELECT id FROM `outbox` ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		left = append(left, id)
	}
	if strings.Join(left, "|") != "X|x " {
		t.Fatalf("after MarkSent of \"x\": %q left, want \"X\" and \"x \"", left)
	}
	got, err := b.FetchNext(ctx, l, 10, []outbox.Entry{{ID: "X"}})
	if err != nil {
		t.Fatal(err)
	}
	wantIDs(t, "FetchNext with \"X\" in flight", got.Entries, "x ")
}
