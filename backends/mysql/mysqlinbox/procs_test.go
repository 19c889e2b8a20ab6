package mysqlinbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox/backends/mysql/mysqlinbox"
	"github.com/outboxrelay/outbox/inbox"
)

// TestRecordWithKeySeqsAnswersAsTheTwoCalls: the procedure's answers are
// those of Record then KeySeqs: new, recorded and repeated IDs, keys with
// a number, keys read before but never set, new keys, and its writes (the
// records, the lock rows) are the same; Finish stores what SetKeySeqs and
// SaveOffsets store. With the procedures dropped, both fall back to the
// statements and answer the same.
func TestRecordWithKeySeqsAnswersAsTheTwoCalls(t *testing.T) {
	t.Parallel()
	for _, dropped := range []bool{false, true} {
		name := "Procedures"
		if dropped {
			name = "ProceduresDropped"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, db := newStore(t, mysqlinbox.Options{})
			if dropped {
				for _, p := range []string{"`inbox_record_keys`", "`inbox_finish`"} {
					if _, err := db.Exec("DROP PROCEDURE " + p); err != nil {
						t.Fatal(err)
					}
				}
			}
			inTx(t, s, func(ctx context.Context, tx *sql.Tx) error {
				if _, err := s.Record(ctx, tx, []string{"old"}); err != nil {
					return err
				}
				if _, err := s.KeySeqs(ctx, tx, []string{"read-only"}); err != nil {
					return err
				}
				return s.SetKeySeqs(ctx, tx, map[string]int64{"set": 4, "K": 9})
			})
			ids := []string{"new", "old", "new", "x", "X"}
			keys := []string{"set", "read-only", "brand-new", "K", "set"}
			inTx(t, s, func(ctx context.Context, tx *sql.Tx) error {
				fresh, seqs, err := s.RecordWithKeySeqs(ctx, tx, ids, keys)
				if err != nil {
					return err
				}
				if want := []bool{true, false, false, true, true}; !slices.Equal(fresh, want) {
					t.Errorf("RecordWithKeySeqs IDs = %v, want %v", fresh, want)
				}
				if want := map[string]int64{"set": 4, "K": 9}; !maps.Equal(seqs, want) {
					t.Errorf("RecordWithKeySeqs keys = %v, want %v", seqs, want)
				}
				// A second call in the same transaction: nothing is new.
				fresh, _, err = s.RecordWithKeySeqs(ctx, tx, []string{"x", "y"}, []string{"K"})
				if err == nil && !slices.Equal(fresh, []bool{false, true}) {
					t.Errorf("second RecordWithKeySeqs IDs = %v, want [false true]", fresh)
				}
				if err != nil {
					return err
				}
				return s.Finish(ctx, tx, map[string]int64{"brand-new": 1, "K": 10},
					[]inbox.Offset{{Group: "g", Topic: "t", Partition: 2, Next: 5}, {Group: "g", Topic: "t", Partition: 2, Next: 6}})
			})
			var seqs map[string]int64
			inTx(t, s, func(ctx context.Context, tx *sql.Tx) error {
				var err error
				seqs, err = s.KeySeqs(ctx, tx, []string{"set", "read-only", "brand-new", "K"})
				return err
			})
			if want := map[string]int64{"set": 4, "brand-new": 1, "K": 10}; !maps.Equal(seqs, want) {
				t.Fatalf("KeySeqs after Finish = %v, want %v", seqs, want)
			}
			if got, err := s.Offsets(t.Context(), "g", "t"); err != nil || !maps.Equal(got, map[int32]int64{2: 6}) {
				t.Fatalf("Offsets after Finish = %v, %v", got, err)
			}
			var records, unset int
			if err := db.QueryRow("SELECT (SELECT count(*) FROM `inbox`), (SELECT count(*) FROM `inbox_keyseq` WHERE seq IS NULL)").Scan(&records, &unset); err != nil || records != 5 || unset != 1 {
				t.Fatalf("%d records, %d keys without a number, %v; want old, new, x, X, y and read-only", records, unset, err)
			}
		})
	}
}

// TestProceduresRoundTrips: with the procedures, RecordWithKeySeqs and
// Finish are one statement each, so a Handle of a message with a key, a
// sequence number and an offset is four (START, the CALL, the CALL,
// COMMIT) where the separate methods take six.
func TestProceduresRoundTrips(t *testing.T) {
	t.Parallel()
	s, db := newStore(t, mysqlinbox.Options{})
	db.SetMaxOpenConns(1)
	inTx(t, s, func(ctx context.Context, tx *sql.Tx) error {
		return s.SetKeySeqs(ctx, tx, map[string]int64{"k": 1})
	})
	for round := range 3 {
		inTx(t, s, func(ctx context.Context, tx *sql.Tx) error {
			q0, p0 := sessionCounters(t, tx)
			fresh, seqs, err := s.RecordWithKeySeqs(ctx, tx, []string{fmt.Sprint("id", round), "id0"}, []string{"k", fmt.Sprint("new", round)})
			if err != nil {
				return err
			}
			q1, _ := sessionCounters(t, tx)
			if err := s.Finish(ctx, tx, map[string]int64{"k": int64(round + 2)}, []inbox.Offset{{Group: "g", Topic: "t", Next: int64(round)}}); err != nil {
				return err
			}
			q2, p2 := sessionCounters(t, tx)
			if round > 0 && (q1-q0-1 != 1 || q2-q1-1 != 1 || p2 != p0) {
				t.Errorf("round %d: RecordWithKeySeqs sent %d statements, Finish %d, %d prepares; want 1, 1, none", round, q1-q0-1, q2-q1-1, p2-p0)
			}
			if want := []bool{round > 0, round == 0}; round > 0 && !slices.Equal(fresh, want) || seqs["k"] != int64(round+1) {
				t.Errorf("round %d: answers %v, %v", round, fresh, seqs)
			}
			return nil
		})
	}
}

// TestProceduresGuardNewKeys: RecordWithKeySeqs holds a new key as KeySeqs
// does: a concurrent call of the same key waits, then reads the number
// the first set with Finish (READ COMMITTED, where only the lock row
// guards a new key).
func TestProceduresGuardNewKeys(t *testing.T) {
	t.Parallel()
	s, db := newStore(t, mysqlinbox.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	rc := &sql.TxOptions{Isolation: sql.LevelReadCommitted}
	first, err := db.BeginTx(ctx, rc)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Rollback() //nolint:errcheck
	if _, seqs, err := s.RecordWithKeySeqs(ctx, first, []string{"a"}, []string{"k"}); err != nil || len(seqs) != 0 {
		t.Fatalf("first RecordWithKeySeqs = %v, %v", seqs, err)
	}
	second, err := db.BeginTx(ctx, rc)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Rollback() //nolint:errcheck
	var conn int64
	if err := second.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&conn); err != nil {
		t.Fatal(err)
	}
	got := make(chan recordResult, 1)
	var seqs map[string]int64
	go func() {
		var fresh []bool
		var err error
		fresh, seqs, err = s.RecordWithKeySeqs(ctx, second, []string{"b"}, []string{"k"})
		got <- recordResult{fresh, err}
	}()
	waitForLockWait(t, db, conn, got)
	if err := s.Finish(ctx, first, map[string]int64{"k": 1}, []inbox.Offset{{Group: "g", Topic: "t", Next: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := first.Commit(); err != nil {
		t.Fatal(err)
	}
	if r := <-got; r.err != nil || !slices.Equal(r.fresh, []bool{true}) || seqs["k"] != 1 {
		t.Fatalf("second RecordWithKeySeqs = %v, %v, %v; want [true], k: 1", r.fresh, seqs, r.err)
	}
}

// TestProceduresValidate: the combined calls reject what the separate
// ones reject, without writing.
func TestProceduresValidate(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t, mysqlinbox.Options{})
	for _, call := range []func(ctx context.Context, tx *sql.Tx) error{
		func(ctx context.Context, tx *sql.Tx) error {
			_, _, err := s.RecordWithKeySeqs(ctx, tx, []string{"a", ""}, []string{"k"})
			return err
		},
		func(ctx context.Context, tx *sql.Tx) error {
			_, _, err := s.RecordWithKeySeqs(ctx, tx, []string{"a"}, []string{strings.Repeat("k", 4097)})
			return err
		},
	} {
		if err := s.InTx(t.Context(), call); err == nil || !strings.Contains(err.Error(), "mysqlinbox: RecordWithKeySeqs") {
			t.Fatalf("RecordWithKeySeqs of a bad ID or key = %v", err)
		}
	}
	err := s.InTx(t.Context(), func(ctx context.Context, tx *sql.Tx) error {
		return s.Finish(ctx, tx, map[string]int64{"k": 1}, []inbox.Offset{{Group: strings.Repeat("g", 256), Topic: "t"}})
	})
	if err == nil || !strings.Contains(err.Error(), "mysqlinbox: Finish") {
		t.Fatalf("Finish of a bad group = %v", err)
	}
	if got := recordIDs(t, s, "a"); !slices.Equal(got, []bool{true}) {
		t.Fatalf("Record(a) after the rejected calls = %v", got)
	}
}

// TestProceduresComeBack: a Store that found the procedures missing sends
// the separate statements, and calls the procedures again once they are
// back and the retry interval has passed.
func TestProceduresComeBack(t *testing.T) {
	t.Parallel()
	s, db := newStore(t, mysqlinbox.Options{})
	db.SetMaxOpenConns(1)
	creates := map[string]string{}
	for _, p := range []string{"inbox_record_keys", "inbox_finish"} {
		var name, mode, text string
		var rest [3]sql.NullString
		if err := db.QueryRow("SHOW CREATE PROCEDURE `"+p+"`").Scan(&name, &mode, &text, &rest[0], &rest[1], &rest[2]); err != nil {
			t.Fatal(err)
		}
		creates[p] = text
		if _, err := db.Exec("DROP PROCEDURE `" + p + "`"); err != nil {
			t.Fatal(err)
		}
	}
	statements := func(round int) int {
		t.Helper()
		var n int
		inTx(t, s, func(ctx context.Context, tx *sql.Tx) error {
			q0, _ := sessionCounters(t, tx)
			if _, _, err := s.RecordWithKeySeqs(ctx, tx, []string{fmt.Sprint("id", round)}, []string{"k"}); err != nil {
				return err
			}
			q1, _ := sessionCounters(t, tx)
			n = q1 - q0 - 1
			return nil
		})
		return n
	}
	statements(0) // finds the procedures missing
	if n := statements(1); n != 2 {
		t.Fatalf("RecordWithKeySeqs without the procedures sent %d statements; want 2 (Record, KeySeqs), without trying the CALL", n)
	}
	for _, text := range creates {
		if _, err := db.Exec(text); err != nil {
			t.Fatal(err)
		}
	}
	if n := statements(2); n != 2 {
		t.Fatalf("RecordWithKeySeqs within the retry interval sent %d statements; want 2", n)
	}
	mysqlinbox.SetRetryAfter(s, 0)
	statements(3)
	if n := statements(4); n != 1 {
		t.Fatalf("RecordWithKeySeqs with the procedures back sent %d statements; want 1 (the CALL)", n)
	}
}
