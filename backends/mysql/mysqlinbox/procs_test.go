package mysqlinbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/outboxrelay/outbox/backends/mysql/mysqlinbox"
	"github.com/outboxrelay/outbox/inbox"
)

// TestFinishWritesAsTheTwoCalls: Finish stores what SetKeySeqs and
// SaveOffsets store (a key's lock row filled in, a partition given twice
// at its last Next, either side empty), with the procedure of migration
// 002 and, with it dropped, through the two statements.
func TestFinishWritesAsTheTwoCalls(t *testing.T) {
	t.Parallel()
	for _, dropped := range []bool{false, true} {
		name := "Procedure"
		if dropped {
			name = "ProcedureDropped"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, db := newStore(t, mysqlinbox.Options{})
			if dropped {
				if _, err := db.Exec("DROP PROCEDURE `inbox_finish`"); err != nil {
					t.Fatal(err)
				}
			}
			inTx(t, s, func(ctx context.Context, tx *sql.Tx) error {
				if _, err := s.KeySeqs(ctx, tx, []string{"new"}); err != nil { // a lock row
					return err
				}
				if err := s.SetKeySeqs(ctx, tx, map[string]int64{"set": 4}); err != nil {
					return err
				}
				err := s.Finish(ctx, tx, map[string]int64{"new": 1, "set": 5, "\xff": 2},
					[]inbox.Offset{{Group: "g", Topic: "t", Partition: 2, Next: 5}, {Group: "g", Topic: "t", Partition: 2, Next: 6}, {Group: "g", Topic: "t", Partition: 0, Next: 1}})
				if err != nil {
					return err
				}
				if err := s.Finish(ctx, tx, map[string]int64{"only-seqs": 3}, nil); err != nil {
					return err
				}
				return s.Finish(ctx, tx, nil, []inbox.Offset{{Group: "g", Topic: "u", Partition: 1, Next: 9}})
			})
			var seqs map[string]int64
			inTx(t, s, func(ctx context.Context, tx *sql.Tx) error {
				var err error
				seqs, err = s.KeySeqs(ctx, tx, []string{"new", "set", "\xff", "only-seqs"})
				return err
			})
			if want := map[string]int64{"new": 1, "set": 5, "\xff": 2, "only-seqs": 3}; !maps.Equal(seqs, want) {
				t.Fatalf("KeySeqs after Finish = %v, want %v", seqs, want)
			}
			if got, err := s.Offsets(t.Context(), "g", "t"); err != nil || !maps.Equal(got, map[int32]int64{0: 1, 2: 6}) {
				t.Fatalf("Offsets(g, t) after Finish = %v, %v", got, err)
			}
			if got, err := s.Offsets(t.Context(), "g", "u"); err != nil || !maps.Equal(got, map[int32]int64{1: 9}) {
				t.Fatalf("Offsets(g, u) after Finish = %v, %v", got, err)
			}
			// A rolled-back Finish writes nothing.
			errAbort := fmt.Errorf("abort")
			_ = s.InTx(t.Context(), func(ctx context.Context, tx *sql.Tx) error {
				if err := s.Finish(ctx, tx, map[string]int64{"set": 99}, []inbox.Offset{{Group: "g", Topic: "t", Partition: 0, Next: 99}}); err != nil {
					return err
				}
				return errAbort
			})
			if got, err := s.Offsets(t.Context(), "g", "t"); err != nil || got[0] != 1 {
				t.Fatalf("Offsets after a rolled-back Finish = %v, %v", got, err)
			}
		})
	}
}

// TestFinishRoundTrips: with the procedure, Finish is one statement where
// SetKeySeqs and SaveOffsets are two; either side alone is one.
func TestFinishRoundTrips(t *testing.T) {
	t.Parallel()
	s, db := newStore(t, mysqlinbox.Options{})
	db.SetMaxOpenConns(1)
	for round := range 3 {
		inTx(t, s, func(ctx context.Context, tx *sql.Tx) error {
			count := func(seqs map[string]int64, offs []inbox.Offset) int {
				q0, _ := sessionCounters(t, tx)
				if err := s.Finish(ctx, tx, seqs, offs); err != nil {
					t.Fatal(err)
				}
				q1, _ := sessionCounters(t, tx)
				return q1 - q0 - 1
			}
			_, p0 := sessionCounters(t, tx)
			both := count(map[string]int64{"k": int64(round + 1), fmt.Sprint("n", round): 1}, []inbox.Offset{{Group: "g", Topic: "t", Next: int64(round)}})
			seqsOnly := count(map[string]int64{"k": int64(round + 2)}, nil)
			offsOnly := count(nil, []inbox.Offset{{Group: "g", Topic: "t", Next: int64(round + 1)}})
			_, p1 := sessionCounters(t, tx)
			if round > 0 && (both != 1 || seqsOnly != 1 || offsOnly != 1 || p1 != p0) {
				t.Errorf("round %d: Finish sent %d, %d, %d statements and %d prepares; want 1, 1, 1 and none", round, both, seqsOnly, offsOnly, p1-p0)
			}
			return nil
		})
	}
}

// TestFinishValidates: Finish rejects what SetKeySeqs and SaveOffsets
// reject, without writing.
func TestFinishValidates(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t, mysqlinbox.Options{})
	for _, call := range []func(ctx context.Context, tx *sql.Tx) error{
		func(ctx context.Context, tx *sql.Tx) error {
			return s.Finish(ctx, tx, map[string]int64{"k": 1}, []inbox.Offset{{Group: strings.Repeat("g", 256), Topic: "t"}})
		},
		func(ctx context.Context, tx *sql.Tx) error {
			return s.Finish(ctx, tx, map[string]int64{strings.Repeat("k", 4097): 1}, []inbox.Offset{{Group: "g", Topic: "t"}})
		},
	} {
		if err := s.InTx(t.Context(), call); err == nil || !strings.Contains(err.Error(), "mysqlinbox: Finish") {
			t.Fatalf("Finish of a bad group or key = %v", err)
		}
	}
	if got, err := s.Offsets(t.Context(), "g", "t"); err != nil || len(got) != 0 {
		t.Fatalf("Offsets after the rejected calls = %v, %v", got, err)
	}
}

// TestProcedureComesBack: a Store that found the procedure missing sends
// the two statements, and calls the procedure again once it is back and
// the retry interval has passed.
func TestProcedureComesBack(t *testing.T) {
	t.Parallel()
	s, db := newStore(t, mysqlinbox.Options{})
	db.SetMaxOpenConns(1)
	var name, mode, create string
	var rest [3]sql.NullString
	if err := db.QueryRow("SHOW CREATE PROCEDURE `inbox_finish`").Scan(&name, &mode, &create, &rest[0], &rest[1], &rest[2]); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("DROP PROCEDURE `inbox_finish`"); err != nil {
		t.Fatal(err)
	}
	statements := func(round int) int {
		t.Helper()
		var n int
		inTx(t, s, func(ctx context.Context, tx *sql.Tx) error {
			q0, _ := sessionCounters(t, tx)
			if err := s.Finish(ctx, tx, map[string]int64{"k": int64(round + 1)}, []inbox.Offset{{Group: "g", Topic: "t", Next: int64(round)}}); err != nil {
				return err
			}
			q1, _ := sessionCounters(t, tx)
			n = q1 - q0 - 1
			return nil
		})
		return n
	}
	statements(0) // finds the procedure missing (the failed CALL changes nothing)
	if n := statements(1); n != 2 {
		t.Fatalf("Finish without the procedure sent %d statements; want 2 (SetKeySeqs, SaveOffsets), without trying the CALL", n)
	}
	if _, err := db.Exec(create); err != nil {
		t.Fatal(err)
	}
	if n := statements(2); n != 2 {
		t.Fatalf("Finish within the retry interval sent %d statements; want 2", n)
	}
	mysqlinbox.SetRetryAfter(s, 0)
	statements(3)
	if n := statements(4); n != 1 {
		t.Fatalf("Finish with the procedure back sent %d statements; want 1 (the CALL)", n)
	}
}
