package mysqlinbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxrelay/outbox/backends/mysql/mysqlinbox"
	"github.com/outboxrelay/outbox/inbox"
)

// statusQ is what reads a session's statement counters; run through a
// *sql.Tx or a *sql.DB of one connection.
type statusQ interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// sessionCounters reads the session's statement counters; the SHOW
// itself counts one Question.
func sessionCounters(t *testing.T, q statusQ) (questions, prepares int) {
	t.Helper()
	rows, err := q.QueryContext(context.Background(), "SHOW SESSION STATUS WHERE Variable_name IN ('Questions', 'Com_stmt_prepare')")
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
		switch k {
		case "Questions":
			questions = v
		case "Com_stmt_prepare":
			prepares = v
		}
	}
	return questions, prepares
}

// TestRoundTrips counts the statements each method sends on a connection
// that ran it before: each is one round trip, prepared once, and the
// package documentation's table holds.
func TestRoundTrips(t *testing.T) {
	t.Parallel()
	type call func(ctx context.Context, s *mysqlinbox.Store, tx *sql.Tx, round int) error
	record := func(ids func(round int) []string) call {
		return func(ctx context.Context, s *mysqlinbox.Store, tx *sql.Tx, round int) error {
			_, err := s.Record(ctx, tx, ids(round))
			return err
		}
	}
	hundred := func(round int) []string {
		ids := make([]string, 100)
		for i := range ids {
			ids[i] = fmt.Sprintf("h%d-%d", round, i)
		}
		return ids
	}
	for _, c := range []struct {
		name string
		run  call
		want int
	}{
		{"RecordNew", record(func(r int) []string { return []string{fmt.Sprint("n", r)} }), 1},
		{"RecordDuplicate", record(func(int) []string { return []string{"n0"} }), 1},
		{"RecordHundredNew", record(hundred), 1},
		{"RecordMixed", record(func(r int) []string { return []string{"n0", fmt.Sprint("m", r)} }), 2},
		{"KeySeqsKnown", func(ctx context.Context, s *mysqlinbox.Store, tx *sql.Tx, _ int) error {
			_, err := s.KeySeqs(ctx, tx, []string{"known", "known2"})
			return err
		}, 1},
		{"KeySeqsNew", func(ctx context.Context, s *mysqlinbox.Store, tx *sql.Tx, r int) error {
			_, err := s.KeySeqs(ctx, tx, []string{fmt.Sprint("new", r)})
			return err
		}, 2},
		{"SetKeySeqs", func(ctx context.Context, s *mysqlinbox.Store, tx *sql.Tx, r int) error {
			return s.SetKeySeqs(ctx, tx, map[string]int64{"known": int64(r + 1), fmt.Sprint("set", r): 1})
		}, 1},
		{"SaveOffsets", func(ctx context.Context, s *mysqlinbox.Store, tx *sql.Tx, r int) error {
			return s.SaveOffsets(ctx, tx, []inbox.Offset{{Group: "g", Topic: "t", Partition: 0, Next: int64(r)}, {Group: "g", Topic: "t", Partition: 1, Next: 9}})
		}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s, db := newStore(t, mysqlinbox.Options{})
			db.SetMaxOpenConns(1) // every transaction on the same, warmed connection
			ctx := context.Background()
			err := s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
				if _, err := s.Record(ctx, tx, []string{"n0"}); err != nil {
					return err
				}
				return s.SetKeySeqs(ctx, tx, map[string]int64{"known": 1, "known2": 1})
			})
			if err != nil {
				t.Fatal(err)
			}
			for round := range 3 {
				err := s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
					q0, p0 := sessionCounters(t, tx)
					if err := c.run(ctx, s, tx, round); err != nil {
						return err
					}
					q1, p1 := sessionCounters(t, tx)
					if round > 0 && (q1-q0-1 != c.want || p1 != p0) {
						t.Errorf("round %d: %d statements and %d prepares; want %d and none", round, q1-q0-1, p1-p0, c.want)
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestRoundTripsOutsideTransactions counts the statements of the calls
// that run on the pool, and of a whole Handle: START TRANSACTION, the
// store's statements, COMMIT.
func TestRoundTripsOutsideTransactions(t *testing.T) {
	t.Parallel()
	s, db := newStore(t, mysqlinbox.Options{})
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	cc := &combinedCounter{Store: s}
	ib, err := inbox.New[*sql.Tx](cc, inbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	nothing := func(context.Context, *sql.Tx, inbox.Message) error { return nil }
	warm := false // after the first round, nothing is prepared again
	count := func(f func() error) int {
		t.Helper()
		q0, p0 := sessionCounters(t, db)
		if err := f(); err != nil {
			t.Fatal(err)
		}
		q1, p1 := sessionCounters(t, db)
		if warm && p1 != p0 {
			t.Errorf("%d prepares; want none", p1-p0)
		}
		return q1 - q0 - 1
	}
	for round := range 3 {
		plain := count(func() error {
			_, err := ib.Handle(ctx, inbox.Message{ID: fmt.Sprint("p", round)}, nothing)
			return err
		})
		full := count(func() error {
			_, err := ib.Handle(ctx, inbox.Message{ID: fmt.Sprint("f", round), Key: "k", Seq: int64(round + 1),
				Offset: &inbox.Offset{Group: "g", Topic: "t", Next: int64(round + 1)}}, nothing)
			return err
		})
		dup := count(func() error {
			_, err := ib.Handle(ctx, inbox.Message{ID: "p0"}, nothing)
			return err
		})
		offsets := count(func() error {
			_, err := s.Offsets(ctx, "g", "t")
			return err
		})
		purgeNothing := count(func() error {
			_, _, err := s.Purge(ctx, time.Now().Add(-time.Hour), 10)
			return err
		})
		if round == 0 {
			warm = true
			continue // the first round prepares the statements on the connection
		}
		// Handle of a message without a key or offset: START, Record, COMMIT.
		// With a known key, a sequence number and an offset: START, Record,
		// KeySeqs, SetKeySeqs, SaveOffsets, COMMIT; or, with an Inbox that
		// uses the optional RecordWithKeySeqs and Finish (inbox.KeyRecorder,
		// inbox.Finisher), START, two CALLs, COMMIT. A duplicate: START,
		// Record, COMMIT. Purge with nothing to remove: SET TRANSACTION,
		// START, two reads, COMMIT.
		wantFull := 6
		if cc.calls.Load() > 0 {
			wantFull = 4
		}
		for _, c := range []struct {
			name      string
			got, want int
		}{{"Handle", plain, 3}, {"HandleWithKeyAndOffset", full, wantFull}, {"HandleDuplicate", dup, 3}, {"Offsets", offsets, 1}, {"PurgeNothing", purgeNothing, 5}} {
			if c.got != c.want {
				t.Errorf("round %d: %s sent %d statements; want %d", round, c.name, c.got, c.want)
			}
		}
	}
	var ids, keys int
	purge := count(func() error {
		var err error
		ids, keys, err = s.Purge(ctx, time.Now().Add(time.Hour), 1000)
		return err
	})
	if ids != 6 || keys != 1 || purge != 7 {
		t.Fatalf("Purge of everything: %d IDs, %d keys in %d statements; want 6, 1, 7", ids, keys, purge)
	}
}

// combinedCounter counts the calls of the Store's combined methods,
// which an Inbox uses when it knows them.
type combinedCounter struct {
	*mysqlinbox.Store
	calls atomic.Int64
}

func (c *combinedCounter) RecordWithKeySeqs(ctx context.Context, tx *sql.Tx, ids, keys []string) ([]bool, map[string]int64, error) {
	c.calls.Add(1)
	return c.Store.RecordWithKeySeqs(ctx, tx, ids, keys)
}

func (c *combinedCounter) Finish(ctx context.Context, tx *sql.Tx, seqs map[string]int64, offsets []inbox.Offset) error {
	c.calls.Add(1)
	return c.Store.Finish(ctx, tx, seqs, offsets)
}
