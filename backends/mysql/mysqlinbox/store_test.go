package mysqlinbox_test

import (
	"context"
	"database/sql"
	"errors"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outboxrelay/outbox/backends/mysql/mysqlinbox"
	"github.com/outboxrelay/outbox/inbox"
)

// inTx runs fn in a transaction of s and fails t on an error.
func inTx(t *testing.T, s *mysqlinbox.Store, fn func(ctx context.Context, tx *sql.Tx) error) {
	t.Helper()
	if err := s.InTx(t.Context(), fn); err != nil {
		t.Fatal(err)
	}
}

func recordIDs(t *testing.T, s *mysqlinbox.Store, ids ...string) []bool {
	t.Helper()
	var fresh []bool
	inTx(t, s, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		fresh, err = s.Record(ctx, tx, ids)
		return err
	})
	return fresh
}

func repeatBool(n int, v bool) []bool {
	out := make([]bool, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// TestIDsComparedByteForByte: IDs that a collation would fold together
// (case, trailing spaces, Unicode normal forms) or that are not UTF-8 are
// distinct IDs; the longest is 255 bytes, and longer or empty IDs are
// rejected without writing anything.
func TestIDsComparedByteForByte(t *testing.T) {
	t.Parallel()
	s, db := newStore(t, mysqlinbox.Options{})
	ids := []string{"a", "A", "a ", "a\t", "a\x00", "\xff\xfe", "\u00e9", "e\u0301", strings.Repeat("x", 255), strings.Repeat("x", 254) + " "}
	if got := recordIDs(t, s, ids...); !slices.Equal(got, repeatBool(len(ids), true)) {
		t.Fatalf("first Record = %v, want every ID new", got)
	}
	if got := recordIDs(t, s, ids...); !slices.Equal(got, repeatBool(len(ids), false)) {
		t.Fatalf("second Record = %v, want every ID recorded", got)
	}
	rows, err := db.Query("SELECT id FROM `inbox`")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var stored []string
	for rows.Next() {
		var id []byte
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		stored = append(stored, string(id))
	}
	slices.Sort(stored)
	want := slices.Clone(ids)
	slices.Sort(want)
	if !slices.Equal(stored, want) {
		t.Fatalf("stored IDs %q, want exactly %q", stored, want)
	}
	for _, bad := range [][]string{{""}, {"ok", strings.Repeat("y", 256)}} {
		err := s.InTx(t.Context(), func(ctx context.Context, tx *sql.Tx) error {
			_, err := s.Record(ctx, tx, bad)
			return err
		})
		if !errors.Is(err, inbox.ErrInvalidMessage) || !strings.Contains(err.Error(), "mysqlinbox: Record") {
			t.Fatalf("Record of an ID of %d bytes = %v, want mysqlinbox's ErrInvalidMessage", len(bad[len(bad)-1]), err)
		}
	}
	if got := recordIDs(t, s, "ok"); !slices.Equal(got, []bool{true}) {
		t.Fatalf("Record(ok) after a rejected call = %v, want [true]: the rejected call wrote nothing", got)
	}
}

// TestRecordManyIDs: a call of more IDs than one statement carries, with
// repeats inside it and some recorded before, answers each in order.
func TestRecordManyIDs(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t, mysqlinbox.Options{})
	old := make([]string, 0, 700)
	for i := range 700 {
		old = append(old, "id"+strings.Repeat("0", i%3)+string(rune('a'+i%26))+strconv.Itoa(i))
	}
	recordIDs(t, s, old...)
	var ids []string
	var want []bool
	for i := range 2500 {
		id := "id" + strings.Repeat("0", i%3) + string(rune('a'+i%26)) + strconv.Itoa(i)
		ids = append(ids, id)
		want = append(want, i >= 700)
		if i%500 == 0 { // a repeat: not new at its second place
			ids = append(ids, id)
			want = append(want, false)
		}
	}
	if got := recordIDs(t, s, ids...); !slices.Equal(got, want) {
		t.Fatalf("Record of %d IDs answered wrongly (first difference at %d)", len(ids), firstDiff(got, want))
	}
}

func firstDiff(a, b []bool) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestKeySeqsValues: keys are bytes up to 4096 long, numbers up to the
// largest int64; a key read but never set (its row only a lock) reads as
// absent after the commit, and a rollback leaves no row.
func TestKeySeqsValues(t *testing.T) {
	t.Parallel()
	s, db := newStore(t, mysqlinbox.Options{})
	long, bin := strings.Repeat("k", 4096), "\xff\x00k"
	set := map[string]int64{long: math.MaxInt64, bin: 1, "K": 2, "k ": 3}
	inTx(t, s, func(ctx context.Context, tx *sql.Tx) error { return s.SetKeySeqs(ctx, tx, set) })
	var got map[string]int64
	inTx(t, s, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		got, err = s.KeySeqs(ctx, tx, []string{long, bin, "K", "k ", "k", "only-read", long})
		return err
	})
	if !maps.Equal(got, set) {
		t.Fatalf("KeySeqs = %v, want %v", got, set)
	}
	inTx(t, s, func(ctx context.Context, tx *sql.Tx) error {
		got, err := s.KeySeqs(ctx, tx, []string{"only-read", "k"})
		if err == nil && len(got) != 0 {
			t.Errorf("KeySeqs of keys only read before = %v, want none", got)
		}
		return err
	})
	errAbort := errors.New("abort")
	if err := s.InTx(t.Context(), func(ctx context.Context, tx *sql.Tx) error {
		if _, err := s.KeySeqs(ctx, tx, []string{"rolled-back"}); err != nil {
			return err
		}
		return errAbort
	}); !errors.Is(err, errAbort) {
		t.Fatal(err)
	}
	var rows, unset int
	if err := db.QueryRow("SELECT count(*), count(*) - count(seq) FROM `inbox_keyseq`").Scan(&rows, &unset); err != nil || rows != 6 || unset != 2 {
		t.Fatalf("keyseq rows: %d (%d without a number), %v; want 6 (2: k and only-read, none for the rolled-back key)", rows, unset, err)
	}
	for _, call := range []func(ctx context.Context, tx *sql.Tx) error{
		func(ctx context.Context, tx *sql.Tx) error {
			_, err := s.KeySeqs(ctx, tx, []string{long + "x"})
			return err
		},
		func(ctx context.Context, tx *sql.Tx) error {
			return s.SetKeySeqs(ctx, tx, map[string]int64{long + "x": 1})
		},
	} {
		if err := s.InTx(t.Context(), call); !errors.Is(err, inbox.ErrInvalidMessage) {
			t.Fatalf("a key of 4097 bytes: %v, want ErrInvalidMessage", err)
		}
	}
}

// TestNewKeyGuarded: a transaction that read a key without a number
// holds it: a concurrent reader of the same key waits for it and then
// reads the number it set, at READ COMMITTED (where a locking read of a
// missing row locks nothing, so the store inserts a lock row) and at
// REPEATABLE READ.
func TestNewKeyGuarded(t *testing.T) {
	t.Parallel()
	for _, lv := range []sql.IsolationLevel{sql.LevelReadCommitted, sql.LevelRepeatableRead} {
		t.Run(strings.ReplaceAll(lv.String(), " ", ""), func(t *testing.T) {
			t.Parallel()
			s, db := newStore(t, mysqlinbox.Options{})
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			first, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: lv})
			if err != nil {
				t.Fatal(err)
			}
			defer first.Rollback() //nolint:errcheck
			if got, err := s.KeySeqs(ctx, first, []string{"k"}); err != nil || len(got) != 0 {
				t.Fatalf("first KeySeqs(k) = %v, %v; want none", got, err)
			}
			second, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: lv})
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
				var err error
				seqs, err = s.KeySeqs(ctx, second, []string{"k"})
				got <- recordResult{err: err}
			}()
			waitForLockWait(t, db, conn, got)
			if err := s.SetKeySeqs(ctx, first, map[string]int64{"k": 1}); err != nil {
				t.Fatal(err)
			}
			if err := first.Commit(); err != nil {
				t.Fatal(err)
			}
			if r := <-got; r.err != nil || seqs["k"] != 1 {
				t.Fatalf("second KeySeqs(k) = %v, %v; want k: 1, set by the first transaction it waited for", seqs, r.err)
			}
		})
	}
}

// TestLocksOnlyItsOwnRows: a transaction holding an ID and a key does
// not hold up another transaction's other IDs and keys, nor Purge.
func TestLocksOnlyItsOwnRows(t *testing.T) {
	t.Parallel()
	s, db := newStore(t, mysqlinbox.Options{})
	inTx(t, s, func(ctx context.Context, tx *sql.Tx) error {
		return s.SetKeySeqs(ctx, tx, map[string]int64{"a": 1, "b": 1, "c": 1})
	})
	recordIDs(t, s, "x", "y")
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	holder, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback() //nolint:errcheck
	if _, err := s.KeySeqs(ctx, holder, []string{"b"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Record(ctx, holder, []string{"x", "m"}); err != nil {
		t.Fatal(err)
	}
	// innodb_lock_wait_timeout of 1 s: a wait fails fast instead of
	// passing late.
	other, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback() //nolint:errcheck
	if _, err := other.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = 1"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.KeySeqs(ctx, other, []string{"a", "c", "d"}); err != nil || len(got) != 2 {
		t.Fatalf("KeySeqs of other keys while b is held = %v, %v", got, err)
	}
	if got, err := s.Record(ctx, other, []string{"y", "l", "n"}); err != nil || !slices.Equal(got, []bool{false, true, true}) {
		t.Fatalf("Record of other IDs while x and m are held = %v, %v", got, err)
	}
	if _, err := other.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = DEFAULT"); err != nil {
		t.Fatal(err)
	}
	if err := other.Commit(); err != nil {
		t.Fatal(err)
	}
	ids, keys, err := s.Purge(ctx, time.Now().Add(time.Hour), 100)
	if err != nil || ids != 3 || keys != 3 {
		t.Fatalf("Purge while x, m and b are held = %d IDs, %d keys, %v; want y, l, n and a, c, d", ids, keys, err)
	}
}

// TestRetryableConflicts: a real deadlock and a real lock wait timeout are
// retryable and say what to do; nil, context errors and a missing table
// are not.
func TestRetryableConflicts(t *testing.T) {
	t.Parallel()
	s, db := newStore(t, mysqlinbox.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	begin := func() *sql.Tx {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback() })
		return tx
	}

	// Lock wait timeout: one second.
	t1, t2 := begin(), begin()
	if _, err := s.Record(ctx, t1, []string{"w"}); err != nil {
		t.Fatal(err)
	}
	if _, err := t2.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = 1"); err != nil {
		t.Fatal(err)
	}
	_, err := s.Record(ctx, t2, []string{"w"})
	if !s.Retryable(err) || !strings.Contains(err.Error(), "innodb_lock_wait_timeout") || !strings.HasPrefix(err.Error(), "mysqlinbox: Record") {
		t.Fatalf("Record waiting past innodb_lock_wait_timeout = %v; want a Retryable error that says so", err)
	}
	if _, err := t2.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = DEFAULT"); err != nil {
		t.Fatal(err)
	}
	_ = t1.Rollback()
	_ = t2.Rollback()

	// Deadlock: each holds one key the other reads. (The keys have rows:
	// at REPEATABLE READ, the locking read of a missing key takes a gap
	// lock, and a second such key in the same gap would wait for the
	// first transaction's insert instead.)
	inTx(t, s, func(ctx context.Context, tx *sql.Tx) error {
		return s.SetKeySeqs(ctx, tx, map[string]int64{"p": 1, "q": 1})
	})
	t3, t4 := begin(), begin()
	if _, err := s.KeySeqs(ctx, t3, []string{"p"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.KeySeqs(ctx, t4, []string{"q"}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	wg.Go(func() { _, errs[0] = s.KeySeqs(ctx, t3, []string{"q"}) })
	wg.Go(func() { _, errs[1] = s.KeySeqs(ctx, t4, []string{"p"}) })
	wg.Wait()
	deadlocked := 0
	for _, err := range errs {
		if err != nil {
			if !s.Retryable(err) || !strings.Contains(err.Error(), "deadlock") {
				t.Fatalf("KeySeqs in a deadlock = %v; want a Retryable error that says so", err)
			}
			deadlocked++
		}
	}
	if deadlocked != 1 {
		t.Fatalf("%d of the two transactions failed (%v); want the deadlock victim only", deadlocked, errs)
	}

	for _, err := range []error{nil, context.Canceled, context.DeadlineExceeded, errors.New("other")} {
		if s.Retryable(err) {
			t.Errorf("Retryable(%v) = true", err)
		}
	}
	bare, _ := newDB(t)
	missing, err := mysqlinbox.New(bare, mysqlinbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = missing.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := missing.Record(ctx, tx, []string{"a"})
		return err
	})
	if err == nil || missing.Retryable(err) || !strings.Contains(err.Error(), "mysqlinbox.Migrate") {
		t.Fatalf("Record without the tables = %v; want an error saying to run Migrate, not retryable", err)
	}
	if _, err := missing.Offsets(ctx, "g", "t"); err == nil || !strings.Contains(err.Error(), "mysqlinbox.Migrate") {
		t.Fatalf("Offsets without the tables = %v", err)
	}
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	if err := s.InTx(cctx, func(context.Context, *sql.Tx) error { return nil }); err != context.Canceled {
		t.Fatalf("InTx with a canceled context = %v, want context.Canceled unwrapped", err)
	}
}

// TestOtherPoolsAndDSNs: a transaction of another *sql.DB (the Store's
// prepared statements cannot serve it) with interpolateParams and
// clientFoundRows set gets the same answers, and a closed Store still
// works, unprepared.
func TestOtherPoolsAndDSNs(t *testing.T) {
	t.Parallel()
	s, db := newStore(t, mysqlinbox.Options{})
	var name string
	if err := db.QueryRow("SELECT DATABASE()").Scan(&name); err != nil {
		t.Fatal(err)
	}
	recordIDs(t, s, "a") // prepares the Store's statements on db
	other := openDB(t, name, func(c *mysql.Config) { c.InterpolateParams, c.ClientFoundRows = true, true })
	ctx := t.Context()
	check := func(label string, s *mysqlinbox.Store, tx *sql.Tx, ids []string, want []bool) {
		t.Helper()
		if got, err := s.Record(ctx, tx, ids); err != nil || !slices.Equal(got, want) {
			t.Fatalf("%s: Record(%q) = %v, %v; want %v", label, ids, got, err, want)
		}
	}
	tx, err := other.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	check("other pool", s, tx, []string{"a", "b"}, []bool{false, true})
	check("other pool", s, tx, []string{"a"}, []bool{false})
	check("other pool", s, tx, []string{"c"}, []bool{true})
	if err := s.SetKeySeqs(ctx, tx, map[string]int64{"k": 5}); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveOffsets(ctx, tx, []inbox.Offset{{Group: "g", Topic: "t", Partition: 3, Next: 7}}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.KeySeqs(ctx, tx, []string{"k", "new"}); err != nil || !maps.Equal(got, map[string]int64{"k": 5}) {
		t.Fatalf("KeySeqs on another pool = %v, %v", got, err)
	}
	if fresh, seqs, err := s.RecordWithKeySeqs(ctx, tx, []string{"c", "e"}, []string{"k"}); err != nil || !slices.Equal(fresh, []bool{false, true}) || seqs["k"] != 5 {
		t.Fatalf("RecordWithKeySeqs on another pool = %v, %v, %v", fresh, seqs, err)
	}
	if err := s.Finish(ctx, tx, map[string]int64{"k": 6}, []inbox.Offset{{Group: "g", Topic: "t", Partition: 3, Next: 7}}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	// The same through a pool without interpolateParams: the driver
	// prepares each statement, the CALL too, and reads its result sets.
	plain := openDB(t, name)
	tx, err = plain.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if fresh, seqs, err := s.RecordWithKeySeqs(ctx, tx, []string{"e", "f"}, []string{"k"}); err != nil || !slices.Equal(fresh, []bool{false, true}) || seqs["k"] != 6 {
		t.Fatalf("RecordWithKeySeqs on a plain pool = %v, %v, %v", fresh, seqs, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	if got := recordIDs(t, s, "a", "d", "f"); !slices.Equal(got, []bool{false, true, false}) {
		t.Fatalf("Record after Close = %v", got)
	}
	if got, err := s.Offsets(ctx, "g", "t"); err != nil || !maps.Equal(got, map[int32]int64{3: 7}) {
		t.Fatalf("Offsets after Close = %v, %v", got, err)
	}
}

// TestOffsetsAndPurgeEdges: the last Next of a partition given twice is
// stored; group and topic are bytes up to 255 long; Purge with a zero
// horizon removes nothing and with one past DATETIME's range everything.
func TestOffsetsAndPurgeEdges(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t, mysqlinbox.Options{})
	ctx := t.Context()
	g, topic := strings.Repeat("g", 255), "T\xff"
	inTx(t, s, func(ctx context.Context, tx *sql.Tx) error {
		return s.SaveOffsets(ctx, tx, []inbox.Offset{
			{Group: g, Topic: topic, Partition: 0, Next: 5}, {Group: g, Topic: topic, Partition: 0, Next: 3},
			{Group: g, Topic: topic, Partition: math.MaxInt32, Next: math.MaxInt64}, {Group: g, Topic: "t", Partition: 1, Next: 1},
		})
	})
	if got, err := s.Offsets(ctx, g, topic); err != nil || !maps.Equal(got, map[int32]int64{0: 3, math.MaxInt32: math.MaxInt64}) {
		t.Fatalf("Offsets = %v, %v", got, err)
	}
	if got, err := s.Offsets(ctx, g, "T"); err != nil || len(got) != 0 {
		t.Fatalf("Offsets of another topic = %v, %v", got, err)
	}
	err := s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		return s.SaveOffsets(ctx, tx, []inbox.Offset{{Group: g + "g", Topic: "t"}})
	})
	if !errors.Is(err, inbox.ErrInvalidArgument) {
		t.Fatalf("SaveOffsets of a 256-byte group = %v, want ErrInvalidArgument", err)
	}
	recordIDs(t, s, "a", "b")
	if ids, keys, err := s.Purge(ctx, time.Time{}, 10); ids != 0 || keys != 0 || err != nil {
		t.Fatalf("Purge(zero time) = %d, %d, %v", ids, keys, err)
	}
	if ids, keys, err := s.Purge(ctx, time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), 10); ids != 2 || keys != 0 || err != nil {
		t.Fatalf("Purge(year 10000) = %d, %d, %v; want 2, 0", ids, keys, err)
	}
	if _, _, err := s.Purge(ctx, time.Now(), 0); !errors.Is(err, inbox.ErrInvalidArgument) {
		t.Fatalf("Purge(limit 0) = %v", err)
	}
}

// TestNilArguments: New and the methods reject a nil db or tx.
func TestNilArguments(t *testing.T) {
	t.Parallel()
	if _, err := mysqlinbox.New(nil, mysqlinbox.Options{}); !errors.Is(err, inbox.ErrInvalidArgument) {
		t.Fatalf("New(nil) = %v", err)
	}
	if _, err := mysqlinbox.New(&sql.DB{}, mysqlinbox.Options{Table: "a`b"}); !errors.Is(err, inbox.ErrInvalidArgument) {
		t.Fatalf("New(bad table) = %v", err)
	}
	s, err := mysqlinbox.New(&sql.DB{}, mysqlinbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := s.Record(ctx, nil, []string{"a"}); !errors.Is(err, inbox.ErrInvalidArgument) {
		t.Errorf("Record(nil tx) = %v", err)
	}
	if _, err := s.KeySeqs(ctx, nil, []string{"a"}); !errors.Is(err, inbox.ErrInvalidArgument) {
		t.Errorf("KeySeqs(nil tx) = %v", err)
	}
	if err := s.SetKeySeqs(ctx, nil, map[string]int64{"a": 1}); !errors.Is(err, inbox.ErrInvalidArgument) {
		t.Errorf("SetKeySeqs(nil tx) = %v", err)
	}
	if err := s.SaveOffsets(ctx, nil, []inbox.Offset{{Topic: "t"}}); !errors.Is(err, inbox.ErrInvalidArgument) {
		t.Errorf("SaveOffsets(nil tx) = %v", err)
	}
	// Empty inputs need no transaction.
	if got, err := s.Record(ctx, nil, nil); got != nil || err != nil {
		t.Errorf("Record(no IDs) = %v, %v", got, err)
	}
	if got, err := s.KeySeqs(ctx, nil, nil); got == nil || len(got) != 0 || err != nil {
		t.Errorf("KeySeqs(no keys) = %v, %v; want an empty map", got, err)
	}
	if err := s.SetKeySeqs(ctx, nil, nil); err != nil {
		t.Errorf("SetKeySeqs(none) = %v", err)
	}
	if err := s.SaveOffsets(ctx, nil, nil); err != nil {
		t.Errorf("SaveOffsets(none) = %v", err)
	}
}

// TestIsolationOption: InTx begins its transactions at Options.Isolation
// (seen by what a second read sees of a row committed after the first),
// and an unsupported level is rejected.
func TestIsolationOption(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		level     sql.IsolationLevel
		seesLater bool
	}{{sql.LevelDefault, false}, {sql.LevelRepeatableRead, false}, {sql.LevelReadCommitted, true}} {
		t.Run(strings.ReplaceAll(c.level.String(), " ", ""), func(t *testing.T) {
			t.Parallel()
			s, db := newStore(t, mysqlinbox.Options{Isolation: c.level})
			inTx(t, s, func(ctx context.Context, tx *sql.Tx) error {
				var n int
				if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM `inbox`").Scan(&n); err != nil {
					return err
				}
				if _, err := db.ExecContext(ctx, "INSERT INTO `inbox` (id) VALUES ('later')"); err != nil {
					return err
				}
				if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM `inbox`").Scan(&n); err != nil {
					return err
				}
				if (n == 1) != c.seesLater {
					t.Errorf("at %v, a second read saw %d rows committed after the first; want seen = %v", c.level, n, c.seesLater)
				}
				return nil
			})
		})
	}
	if _, err := mysqlinbox.New(&sql.DB{}, mysqlinbox.Options{Isolation: sql.LevelSnapshot}); !errors.Is(err, inbox.ErrInvalidArgument) {
		t.Fatalf("New with LevelSnapshot = %v, want ErrInvalidArgument", err)
	}
}
