package pginbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox/backends/postgres/pginbox"
	"github.com/outboxrelay/outbox/inbox"
)

// Each behaviour below runs against both stores: a subtest "pgx" with
// *Store and one "database_sql" with *SQLStore, each on its own schema.

func bothStores(t *testing.T, pgxCase func(t *testing.T, s inbox.Store[pgx.Tx], opts pginbox.Options), sqlCase func(t *testing.T, s inbox.Store[*sql.Tx], opts pginbox.Options)) {
	t.Parallel()
	t.Run("pgx", func(t *testing.T) {
		t.Parallel()
		s, opts := newStore(t)
		pgxCase(t, s, opts)
	})
	t.Run("database_sql", func(t *testing.T) {
		t.Parallel()
		s, opts := newSQLStore(t)
		sqlCase(t, s, opts)
	})
}

// watchdog is the context of a test that waits on another transaction: it
// ends the test with a failure instead of a hang when a wait never ends.
func watchdog(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// inTx runs fn in a transaction of s and fails the test on error.
func inTx[Tx any](t *testing.T, s inbox.Store[Tx], fn func(ctx context.Context, tx Tx) error) {
	t.Helper()
	if err := s.InTx(watchdog(t), fn); err != nil {
		t.Fatalf("InTx: %v", err)
	}
}

func record[Tx any](t *testing.T, s inbox.Store[Tx], ids ...string) []bool {
	t.Helper()
	var got []bool
	inTx(t, s, func(ctx context.Context, tx Tx) error {
		var err error
		got, err = s.Record(ctx, tx, ids)
		return err
	})
	return got
}

func TestRecordDuplicatesInOneCall(t *testing.T) {
	bothStores(t, recordDuplicatesInOneCall[pgx.Tx], recordDuplicatesInOneCall[*sql.Tx])
}

func recordDuplicatesInOneCall[Tx any](t *testing.T, s inbox.Store[Tx], _ pginbox.Options) {
	// Quotes, backslashes, braces and commas survive the array literals
	// of the database/sql store.
	odd := `a"b\c{d},e`
	require.Equal(t, []bool{true, true, false, true, false}, record(t, s, "b", "a", "b", odd, "a"), "first occurrence only is new")
	require.Equal(t, []bool{false, true, false, false}, record(t, s, "a", "c", odd, "b"))
}

func TestRecordRejectsWhatTextCannotHold(t *testing.T) {
	bothStores(t, recordRejects[pgx.Tx], recordRejects[*sql.Tx])
}

func recordRejects[Tx any](t *testing.T, s inbox.Store[Tx], _ pginbox.Options) {
	for _, ids := range [][]string{{"a", ""}, {"nul\x00"}, {"\xff"}} {
		err := s.InTx(watchdog(t), func(ctx context.Context, tx Tx) error {
			_, err := s.Record(ctx, tx, ids)
			return err
		})
		require.ErrorIs(t, err, inbox.ErrInvalidMessage, "Record(%q)", ids)
		require.True(t, strings.HasPrefix(err.Error(), "pginbox: "), "error %q names the package", err)
	}
	inTx(t, s, func(ctx context.Context, tx Tx) error {
		got, err := s.Record(ctx, tx, nil)
		require.NoError(t, err)
		require.Nil(t, got, "no ids: nil answers")
		return nil
	})
	require.Equal(t, []bool{true}, record(t, s, "a"), "the rejected calls recorded nothing")
}

// TestConcurrentRecordWaits: a Record of an ID another transaction has
// recorded but not committed waits for it, then reports false if it
// committed and true if it rolled back.
func TestConcurrentRecordWaits(t *testing.T) {
	bothStores(t, concurrentRecordWaits[pgx.Tx], concurrentRecordWaits[*sql.Tx])
}

func concurrentRecordWaits[Tx any](t *testing.T, s inbox.Store[Tx], opts pginbox.Options) {
	for _, commit := range []bool{true, false} {
		id := fmt.Sprintf("id-%v", commit)
		held := make(chan struct{})
		release := make(chan struct{})
		first := make(chan error, 1)
		go func() {
			first <- s.InTx(watchdog(t), func(ctx context.Context, tx Tx) error {
				if _, err := s.Record(ctx, tx, []string{id}); err != nil {
					return err
				}
				close(held)
				if err := wait(ctx, release); err != nil {
					return err
				}
				if !commit {
					return errors.New("roll back")
				}
				return nil
			})
		}()
		<-held
		second := make(chan []bool, 1)
		go func() { second <- record(t, s, id) }()
		waitForLockWait(t, opts, func() bool { return len(second) > 0 })
		close(release)
		err := <-first
		require.Equal(t, commit, err == nil, "first transaction: %v", err)
		require.Equal(t, []bool{!commit}, <-second, "second Record after the first transaction (committed %v)", commit)
	}
}

// wait waits for ch to close, or for ctx.
func wait(ctx context.Context, ch <-chan struct{}) error {
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitForLockWait waits until a backend working on opts' tables waits for
// a lock: the proof that a second transaction is blocked, not slow. It
// fails the test when returned reports that the second transaction's
// call came back without waiting.
func waitForLockWait(t *testing.T, opts pginbox.Options, returned func() bool) {
	t.Helper()
	ctx := watchdog(t)
	for {
		if returned() {
			t.Fatal("the second transaction did not wait for the first")
		}
		var n int
		err := pool(t).QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%'`, pgx.Identifier{opts.Schema}.Sanitize()).Scan(&n)
		require.NoError(t, err, "no backend waited for a lock before the watchdog")
		if n > 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestKeySeqsGuardsNewKeys: KeySeqs of a key that has no row yet still
// makes a second transaction's KeySeqs of it wait, and the second sees
// what the first set. (A plain SELECT ... FOR UPDATE locks no row for a
// new key: both would take it as new.)
func TestKeySeqsGuardsNewKeys(t *testing.T) {
	bothStores(t, keySeqsGuardsNewKeys[pgx.Tx], keySeqsGuardsNewKeys[*sql.Tx])
}

func keySeqsGuardsNewKeys[Tx any](t *testing.T, s inbox.Store[Tx], opts pginbox.Options) {
	held := make(chan struct{})
	release := make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- s.InTx(watchdog(t), func(ctx context.Context, tx Tx) error {
			got, err := s.KeySeqs(ctx, tx, []string{"k", "j"})
			if err != nil {
				return err
			}
			if len(got) != 0 {
				return fmt.Errorf("KeySeqs of new keys = %v, want none", got)
			}
			close(held)
			if err := wait(ctx, release); err != nil {
				return err
			}
			return s.SetKeySeqs(ctx, tx, map[string]int64{"k": 1})
		})
	}()
	<-held
	second := make(chan map[string]int64, 1)
	go func() {
		var got map[string]int64
		inTx(t, s, func(ctx context.Context, tx Tx) error {
			var err error
			got, err = s.KeySeqs(ctx, tx, []string{"k"})
			return err
		})
		second <- got
	}()
	waitForLockWait(t, opts, func() bool { return len(second) > 0 })
	close(release)
	require.NoError(t, <-first)
	require.Equal(t, map[string]int64{"k": 1}, <-second, "the second transaction sees the first's number")
	// "j" was locked and never set: still absent.
	inTx(t, s, func(ctx context.Context, tx Tx) error {
		got, err := s.KeySeqs(ctx, tx, []string{"j", "k", "k", "never"})
		require.NoError(t, err)
		require.Equal(t, map[string]int64{"k": 1}, got)
		return s.SetKeySeqs(ctx, tx, map[string]int64{"k": 5, "j": 2})
	})
	inTx(t, s, func(ctx context.Context, tx Tx) error {
		got, err := s.KeySeqs(ctx, tx, []string{"j", "k"})
		require.NoError(t, err)
		require.Equal(t, map[string]int64{"k": 5, "j": 2}, got)
		require.NoError(t, s.SetKeySeqs(ctx, tx, nil), "empty seqs does nothing")
		got, err = s.KeySeqs(ctx, tx, nil)
		require.NoError(t, err)
		require.NotNil(t, got, "no keys: an empty map")
		return nil
	})
}

func TestOffsets(t *testing.T) {
	bothStores(t, offsets[pgx.Tx], offsets[*sql.Tx])
}

func offsets[Tx any](t *testing.T, s inbox.Store[Tx], _ pginbox.Options) {
	ctx := watchdog(t)
	inTx(t, s, func(ctx context.Context, tx Tx) error {
		require.NoError(t, s.SaveOffsets(ctx, tx, nil), "empty offsets does nothing")
		return s.SaveOffsets(ctx, tx, []inbox.Offset{
			{Group: "g", Topic: "orders", Partition: 1, Next: 10},
			{Group: "g", Topic: "orders", Partition: 0, Next: 7},
			{Group: "g", Topic: "orders", Partition: 1, Next: 12}, // the last one of a partition wins
			{Group: "other", Topic: "orders", Partition: 0, Next: 99},
			{Group: "g", Topic: "payments", Partition: 0, Next: 3},
		})
	})
	got, err := s.Offsets(ctx, "g", "orders")
	require.NoError(t, err)
	require.Equal(t, map[int32]int64{0: 7, 1: 12}, got)
	inTx(t, s, func(ctx context.Context, tx Tx) error {
		return s.SaveOffsets(ctx, tx, []inbox.Offset{{Group: "g", Topic: "orders", Partition: 0, Next: 8}})
	})
	got, err = s.Offsets(ctx, "g", "orders")
	require.NoError(t, err)
	require.Equal(t, map[int32]int64{0: 8, 1: 12}, got)
	got, err = s.Offsets(ctx, "g", "nothing")
	require.NoError(t, err)
	require.Empty(t, got)
	require.NotNil(t, got)
	// A rolled-back save stores nothing.
	err = s.InTx(ctx, func(ctx context.Context, tx Tx) error {
		require.NoError(t, s.SaveOffsets(ctx, tx, []inbox.Offset{{Group: "g", Topic: "orders", Partition: 0, Next: 100}}))
		return errors.New("roll back")
	})
	require.Error(t, err)
	got, err = s.Offsets(ctx, "g", "orders")
	require.NoError(t, err)
	require.Equal(t, map[int32]int64{0: 8, 1: 12}, got)
}

// TestPurge: oldest first, at most limit of each kind, only before the
// horizon, never offsets, and never a row another transaction holds.
func TestPurge(t *testing.T) {
	bothStores(t, purge[pgx.Tx], purge[*sql.Tx])
}

func purge[Tx any](t *testing.T, s inbox.Store[Tx], opts pginbox.Options) {
	ctx := watchdog(t)
	p := pool(t)
	_, _, err := s.Purge(ctx, time.Now(), 0)
	require.ErrorIs(t, err, inbox.ErrInvalidArgument)
	record(t, s, "d", "c", "b", "a", "new")
	inTx(t, s, func(ctx context.Context, tx Tx) error {
		if err := s.SetKeySeqs(ctx, tx, map[string]int64{"k1": 1, "k2": 2, "k3": 3, "knew": 4}); err != nil {
			return err
		}
		return s.SaveOffsets(ctx, tx, []inbox.Offset{{Group: "g", Topic: "t", Partition: 0, Next: 1}})
	})
	// Age the rows by hand: a (oldest), b, c, d, and the keys k1, k2, k3.
	base := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, id := range []string{"a", "b", "c", "d"} {
		_, err := p.Exec(ctx, "UPDATE "+pgx.Identifier{opts.Schema, "inbox"}.Sanitize()+" SET applied_at = $1 WHERE id = $2", base.Add(time.Duration(i)*time.Hour), id)
		require.NoError(t, err)
	}
	for i, k := range []string{"k1", "k2", "k3"} {
		_, err := p.Exec(ctx, "UPDATE "+pgx.Identifier{opts.Schema, "inbox_keyseq"}.Sanitize()+" SET updated_at = $1 WHERE key = $2", base.Add(time.Duration(i)*time.Hour), k)
		require.NoError(t, err)
	}
	horizon := base.Add(24 * time.Hour)
	ids, keys, err := s.Purge(ctx, horizon, 2)
	require.NoError(t, err)
	require.Equal(t, [2]int{2, 2}, [2]int{ids, keys})
	require.Equal(t, []bool{true, true, false, false, false}, record(t, s, "a", "b", "c", "d", "new"), "a and b (the oldest) went, c, d and new stay")
	inTx(t, s, func(ctx context.Context, tx Tx) error {
		got, err := s.KeySeqs(ctx, tx, []string{"k1", "k2", "k3", "knew"})
		require.Equal(t, map[string]int64{"k3": 3, "knew": 4}, got)
		return err
	})

	// c is held by another transaction: Purge skips it without waiting.
	tx, err := p.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(ctx, "SELECT 1 FROM "+pgx.Identifier{opts.Schema, "inbox"}.Sanitize()+" WHERE id = 'c' FOR UPDATE")
	require.NoError(t, err)
	ids, keys, err = s.Purge(ctx, horizon, 10)
	require.NoError(t, err)
	require.Equal(t, [2]int{1, 1}, [2]int{ids, keys}, "d only (c is locked), and k3")
	require.NoError(t, tx.Rollback(ctx))
	ids, keys, err = s.Purge(ctx, horizon, 10)
	require.NoError(t, err)
	require.Equal(t, [2]int{1, 0}, [2]int{ids, keys}, "c, no longer locked")
	got, err := s.Offsets(ctx, "g", "t")
	require.NoError(t, err)
	require.Equal(t, map[int32]int64{0: 1}, got, "offsets are never purged")
	ids, keys, err = s.Purge(ctx, horizon, 10)
	require.NoError(t, err)
	require.Equal(t, [2]int{0, 0}, [2]int{ids, keys})
}

// TestInTxPanicRollsBack: a panic in fn rolls back and is re-raised.
func TestInTxPanicRollsBack(t *testing.T) {
	bothStores(t, inTxPanic[pgx.Tx], inTxPanic[*sql.Tx])
}

func inTxPanic[Tx any](t *testing.T, s inbox.Store[Tx], _ pginbox.Options) {
	func() {
		defer func() { require.Equal(t, "boom", recover(), "the panic is re-raised") }()
		_ = s.InTx(watchdog(t), func(ctx context.Context, tx Tx) error {
			if _, err := s.Record(ctx, tx, []string{"p"}); err != nil {
				return err
			}
			panic("boom")
		})
	}()
	require.Equal(t, []bool{true}, record(t, s, "p"), "the panicking transaction recorded nothing")
	errFn := errors.New("fn failed")
	err := s.InTx(watchdog(t), func(context.Context, Tx) error { return errFn })
	require.Same(t, errFn, err, "fn's error comes back unwrapped")
}

// TestRetryable provokes each conflict for real and checks Retryable's
// answer: a serialization failure (REPEATABLE READ, an ID another
// transaction committed after the snapshot), a deadlock, a lock timeout;
// and not a context error, a missing table or nil.
func TestRetryable(t *testing.T) {
	bothStores(t, retryable[pgx.Tx], retryable[*sql.Tx])
}

// execer is what both transaction types offer for a raw statement.
func exec[Tx any](ctx context.Context, tx Tx, q string) error {
	switch tx := any(tx).(type) {
	case pgx.Tx:
		_, err := tx.Exec(ctx, q)
		return err
	case *sql.Tx:
		_, err := tx.ExecContext(ctx, q)
		return err
	}
	panic("unknown transaction type")
}

func retryable[Tx any](t *testing.T, s inbox.Store[Tx], _ pginbox.Options) {
	ctx := watchdog(t)
	require.False(t, s.Retryable(nil))
	require.False(t, s.Retryable(context.Canceled))
	require.False(t, s.Retryable(fmt.Errorf("wrapped: %w", context.DeadlineExceeded)))

	// 40001: the first Record's snapshot predates the other commit.
	err := s.InTx(ctx, func(ctx context.Context, tx Tx) error {
		if err := exec(ctx, tx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"); err != nil {
			return err
		}
		if _, err := s.Record(ctx, tx, []string{"before"}); err != nil { // takes the snapshot
			return err
		}
		record(t, s, "serial")
		_, err := s.Record(ctx, tx, []string{"serial"})
		return err
	})
	require.Error(t, err)
	require.True(t, s.Retryable(err), "serialization failure: %v", err)

	// 55P03: a lock wait beyond lock_timeout.
	held := make(chan struct{})
	release := make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- s.InTx(ctx, func(ctx context.Context, tx Tx) error {
			if _, err := s.KeySeqs(ctx, tx, []string{"locked"}); err != nil {
				return err
			}
			close(held)
			return wait(ctx, release)
		})
	}()
	<-held
	err = s.InTx(ctx, func(ctx context.Context, tx Tx) error {
		if err := exec(ctx, tx, "SET LOCAL lock_timeout = '10ms'"); err != nil {
			return err
		}
		_, err := s.KeySeqs(ctx, tx, []string{"locked"})
		return err
	})
	close(release)
	require.NoError(t, <-first)
	require.Error(t, err)
	require.True(t, s.Retryable(err), "lock timeout: %v", err)

	// 40P01: two transactions lock two keys in opposite orders.
	deadlock := make(chan error, 2)
	both := make(chan struct{}, 2)
	for _, order := range [][]string{{"x", "y"}, {"y", "x"}} {
		go func() {
			deadlock <- s.InTx(ctx, func(ctx context.Context, tx Tx) error {
				if _, err := s.KeySeqs(ctx, tx, order[:1]); err != nil {
					return err
				}
				both <- struct{}{}
				for len(both) < 2 && ctx.Err() == nil { // both hold their first key
					time.Sleep(time.Millisecond)
				}
				_, err := s.KeySeqs(ctx, tx, order[1:])
				return err
			})
		}()
	}
	errs := []error{<-deadlock, <-deadlock}
	failed := slices.IndexFunc(errs, func(err error) bool { return err != nil })
	require.NotEqual(t, -1, failed, "one of the two transactions ends with a deadlock")
	require.True(t, s.Retryable(errs[failed]), "deadlock: %v", errs[failed])
}

// TestMissingTables: a store on a schema without the inbox says how to
// create it; a cancelled context comes back unwrapped.
func TestMissingTables(t *testing.T) {
	t.Parallel()
	opts := pginbox.Options{Schema: freshSchema(t)}
	s, err := pginbox.New(pool(t), opts)
	require.NoError(t, err)
	_, err = s.Offsets(watchdog(t), "g", "t")
	require.ErrorContains(t, err, "pginbox: Offsets")
	require.ErrorContains(t, err, "pginbox.Migrate or 'outbox migrate up --inbox'")
	require.False(t, s.Retryable(err))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = s.Offsets(ctx, "g", "t")
	require.Equal(t, context.Canceled, err)
	require.Equal(t, context.Canceled, s.InTx(ctx, func(context.Context, pgx.Tx) error { return nil }))

	_, err = pginbox.New(nil, pginbox.Options{})
	require.ErrorContains(t, err, "pool is nil")
	_, err = pginbox.NewSQL(nil, pginbox.Options{})
	require.ErrorContains(t, err, "db is nil")
	_, err = pginbox.New(pool(t), pginbox.Options{Table: strings.Repeat("t", 42)})
	require.ErrorContains(t, err, "pginbox: Options.Table")
	_, err = pginbox.NewSQL(sqlDB(t), pginbox.Options{Schema: "a\x00b"})
	require.ErrorContains(t, err, "pginbox: Options.Schema")
}

// TestBrokenConnectionAtCommitIsNotRetryable: the transaction's backend
// is terminated before the commit; the commit fails with an error
// Retryable refuses (the outcome of a commit on a broken connection is
// unknown; here it did not happen, and the ID is still new).
func TestBrokenConnectionAtCommitIsNotRetryable(t *testing.T) {
	bothStores(t, brokenCommit[pgx.Tx], brokenCommit[*sql.Tx])
}

func brokenCommit[Tx any](t *testing.T, s inbox.Store[Tx], _ pginbox.Options) {
	ctx := watchdog(t)
	err := s.InTx(ctx, func(ctx context.Context, tx Tx) error {
		if _, err := s.Record(ctx, tx, []string{"lost"}); err != nil {
			return err
		}
		var pid int
		var scanErr error
		switch tx := any(tx).(type) {
		case pgx.Tx:
			scanErr = tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid)
		case *sql.Tx:
			scanErr = tx.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid)
		}
		if scanErr != nil {
			return scanErr
		}
		_, err := pool(t).Exec(ctx, "SELECT pg_terminate_backend($1)", pid)
		return err
	})
	require.Error(t, err)
	require.False(t, s.Retryable(err), "a broken connection at commit: %v", err)
	require.Equal(t, []bool{true}, record(t, s, "lost"))
}
