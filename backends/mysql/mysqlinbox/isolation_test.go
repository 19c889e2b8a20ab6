package mysqlinbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/outboxrelay/outbox/backends/mysql/mysqlinbox"
)

// waitForLockWait waits until the session id waits for a lock: it has
// been running one statement for a second or more (PROCESSLIST, command
// Query, or Execute for a prepared statement, which the driver uses for
// statements with arguments), which in these tests only a statement
// blocked on the other transaction's lock does. PROCESSLIST is read live;
// INNODB_TRX is not read: it is refreshed only when nobody read it for
// 100 ms, so tests polling it keep it stale for each other and for
// Health's reads (the check failed so under load, with prepared statements
// missed by a Query-only test). It fails t if the statement returns first
// (got), or after 30 s.
func waitForLockWait(t *testing.T, db *sql.DB, id int64, got <-chan recordResult) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		if err := db.QueryRow(`SELECT COUNT(*) FROM information_schema.PROCESSLIST
WHERE ID = ? AND COMMAND IN ('Query', 'Execute') AND TIME >= 1`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		select {
		case r := <-got:
			t.Fatalf("the statement returned (%v, %v) without waiting for the other transaction's lock", r.fresh, r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %d never waited for a lock", id)
		}
		time.Sleep(150 * time.Millisecond)
	}
}

type recordResult struct {
	fresh []bool
	err   error
}

// TestRecordWaitsForTheHolder: a transaction recording an ID that
// another, open transaction recorded waits for it, then reports the ID as
// not new if the holder committed and new if it rolled back, in
// REPEATABLE READ with a snapshot taken before the holder committed (a
// plain read would not see the holder's row) and in READ COMMITTED; for
// one ID (the affected-rows answer) and in a batch where the others are
// new (the token read).
func TestRecordWaitsForTheHolder(t *testing.T) {
	t.Parallel()
	levels := []struct {
		name  string
		level sql.IsolationLevel
	}{{"RepeatableRead", sql.LevelRepeatableRead}, {"ReadCommitted", sql.LevelReadCommitted}}
	batches := []struct {
		name string
		ids  []string
	}{{"OneID", []string{"x"}}, {"Batch", []string{"y", "x", "w"}}}
	for _, lv := range levels {
		for _, b := range batches {
			for _, commit := range []bool{true, false} {
				name := fmt.Sprintf("%s/%s/HolderRollsBack", lv.name, b.name)
				if commit {
					name = fmt.Sprintf("%s/%s/HolderCommits", lv.name, b.name)
				}
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					recordWhileHeld(t, lv.level, b.ids, commit)
				})
			}
		}
	}
}

func recordWhileHeld(t *testing.T, level sql.IsolationLevel, ids []string, commit bool) {
	s, db := newStore(t, mysqlinbox.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	holder, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback() //nolint:errcheck
	if got, err := s.Record(ctx, holder, []string{"x"}); err != nil || !slices.Equal(got, []bool{true}) {
		t.Fatalf("holder Record(x) = %v, %v", got, err)
	}
	waiter, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: level})
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Rollback() //nolint:errcheck
	var conn int64
	var n int
	// The waiter's snapshot (REPEATABLE READ) starts here, before the
	// holder commits: its plain reads never see the holder's row.
	if err := waiter.QueryRowContext(ctx, "SELECT CONNECTION_ID(), (SELECT count(*) FROM `inbox`)").Scan(&conn, &n); err != nil || n != 0 {
		t.Fatalf("waiter's first read: %d rows, %v", n, err)
	}
	got := make(chan recordResult, 1)
	go func() {
		fresh, err := s.Record(ctx, waiter, ids)
		got <- recordResult{fresh, err}
	}()
	waitForLockWait(t, db, conn, got)
	if commit {
		err = holder.Commit()
	} else {
		err = holder.Rollback()
	}
	if err != nil {
		t.Fatal(err)
	}
	r := <-got
	want := make([]bool, len(ids))
	for i, id := range ids {
		want[i] = id != "x" || !commit
	}
	if r.err != nil || !slices.Equal(r.fresh, want) {
		t.Fatalf("waiter Record(%q) = %v, %v; want %v", ids, r.fresh, r.err, want)
	}
	// Why Record cannot check with a plain read: under REPEATABLE READ the
	// waiter's snapshot still shows no committed x, though Record just
	// reported it recorded; under READ COMMITTED it is seen.
	var seen int
	if err := waiter.QueryRowContext(ctx, "SELECT count(*) FROM `inbox` WHERE id = 'x'").Scan(&seen); err != nil {
		t.Fatal(err)
	}
	if wantSeen := map[bool]int{true: 0, false: 1}[level == sql.LevelRepeatableRead]; commit && seen != wantSeen {
		t.Fatalf("the waiter's plain read of the holder's x: %d rows; want %d at %v", seen, wantSeen, level)
	}
	if err := waiter.Commit(); err != nil {
		t.Fatal(err)
	}
	// Exactly one transaction holds x as new: whichever committed it.
	var rows int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM `inbox` WHERE id = 'x'").Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("rows of x: %d, %v; want 1", rows, err)
	}
}
