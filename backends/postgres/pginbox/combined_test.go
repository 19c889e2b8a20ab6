package pginbox_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox/backends/postgres/pginbox"
	"github.com/outboxrelay/outbox/inbox"
)

// combined is the pair of optional methods both stores have
// (RecordWithKeySeqs, Finish: the Inbox's KeyRecorder and Finisher).
type combined[Tx any] interface {
	inbox.Store[Tx]
	RecordWithKeySeqs(ctx context.Context, tx Tx, ids, keys []string) ([]bool, map[string]int64, error)
	Finish(ctx context.Context, tx Tx, seqs map[string]int64, offsets []inbox.Offset) error
}

var (
	_ combined[pgx.Tx]  = (*pginbox.Store)(nil)
	_ combined[*sql.Tx] = (*pginbox.SQLStore)(nil)
)

// TestRecordWithKeySeqs: the same answers as Record then KeySeqs, in one
// statement, and the same guard of a new key.
func TestRecordWithKeySeqs(t *testing.T) {
	bothStores(t,
		func(t *testing.T, s inbox.Store[pgx.Tx], o pginbox.Options) {
			recordWithKeySeqs(t, s.(combined[pgx.Tx]), o)
		},
		func(t *testing.T, s inbox.Store[*sql.Tx], o pginbox.Options) {
			recordWithKeySeqs(t, s.(combined[*sql.Tx]), o)
		})
}

func recordWithKeySeqs[Tx any](t *testing.T, s combined[Tx], opts pginbox.Options) {
	record(t, s, "a")
	inTx(t, s, func(ctx context.Context, tx Tx) error { return s.SetKeySeqs(ctx, tx, map[string]int64{"k": 3}) })
	inTx(t, s, func(ctx context.Context, tx Tx) error {
		fresh, seqs, err := s.RecordWithKeySeqs(ctx, tx, []string{"b", "a", "b"}, []string{"k", "j", "k"})
		require.NoError(t, err)
		require.Equal(t, []bool{true, false, false}, fresh)
		require.Equal(t, map[string]int64{"k": 3}, seqs)
		fresh, seqs, err = s.RecordWithKeySeqs(ctx, tx, []string{"b"}, nil)
		require.NoError(t, err)
		require.Equal(t, []bool{false}, fresh, "recorded by an earlier call of the transaction")
		require.Empty(t, seqs)
		require.NotNil(t, seqs)
		fresh, seqs, err = s.RecordWithKeySeqs(ctx, tx, nil, []string{"k"})
		require.NoError(t, err)
		require.Nil(t, fresh)
		require.Equal(t, map[string]int64{"k": 3}, seqs)
		_, _, err = s.RecordWithKeySeqs(ctx, tx, []string{""}, []string{"k"})
		require.ErrorIs(t, err, inbox.ErrInvalidMessage)
		return nil
	})

	held := make(chan struct{})
	release := make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- s.InTx(watchdog(t), func(ctx context.Context, tx Tx) error {
			if _, _, err := s.RecordWithKeySeqs(ctx, tx, []string{"x"}, []string{"new"}); err != nil {
				return err
			}
			close(held)
			if err := wait(ctx, release); err != nil {
				return err
			}
			return s.Finish(ctx, tx, map[string]int64{"new": 1}, nil)
		})
	}()
	<-held
	second := make(chan map[string]int64, 1)
	go func() {
		var got map[string]int64
		inTx(t, s, func(ctx context.Context, tx Tx) error {
			var err error
			_, got, err = s.RecordWithKeySeqs(ctx, tx, []string{"y"}, []string{"new"})
			return err
		})
		second <- got
	}()
	waitForLockWait(t, opts, func() bool { return len(second) > 0 })
	close(release)
	require.NoError(t, <-first)
	require.Equal(t, map[string]int64{"new": 1}, <-second, "the second transaction sees the first's number")
}

// TestFinish: the same effects as SetKeySeqs then SaveOffsets, either
// empty, and nothing when rolled back.
func TestFinish(t *testing.T) {
	bothStores(t,
		func(t *testing.T, s inbox.Store[pgx.Tx], o pginbox.Options) { finish(t, s.(combined[pgx.Tx])) },
		func(t *testing.T, s inbox.Store[*sql.Tx], o pginbox.Options) { finish(t, s.(combined[*sql.Tx])) })
}

func finish[Tx any](t *testing.T, s combined[Tx]) {
	ctx := watchdog(t)
	keySeqs := func() map[string]int64 {
		var got map[string]int64
		inTx(t, s, func(ctx context.Context, tx Tx) error {
			var err error
			got, err = s.KeySeqs(ctx, tx, []string{"k", "j"})
			return err
		})
		return got
	}
	offsets := func() map[int32]int64 {
		got, err := s.Offsets(ctx, "g", "t")
		require.NoError(t, err)
		return got
	}
	inTx(t, s, func(ctx context.Context, tx Tx) error {
		require.NoError(t, s.Finish(ctx, tx, nil, nil), "both empty")
		return s.Finish(ctx, tx, map[string]int64{"k": 1, "j": 4}, []inbox.Offset{{Group: "g", Topic: "t", Partition: 0, Next: 5}, {Group: "g", Topic: "t", Partition: 0, Next: 6}})
	})
	require.Equal(t, map[string]int64{"k": 1, "j": 4}, keySeqs())
	require.Equal(t, map[int32]int64{0: 6}, offsets())
	inTx(t, s, func(ctx context.Context, tx Tx) error { return s.Finish(ctx, tx, map[string]int64{"k": 2}, nil) })
	inTx(t, s, func(ctx context.Context, tx Tx) error {
		return s.Finish(ctx, tx, nil, []inbox.Offset{{Group: "g", Topic: "t", Partition: 1, Next: 9}})
	})
	require.Equal(t, map[string]int64{"k": 2, "j": 4}, keySeqs())
	require.Equal(t, map[int32]int64{0: 6, 1: 9}, offsets())
	err := s.InTx(ctx, func(ctx context.Context, tx Tx) error {
		require.NoError(t, s.Finish(ctx, tx, map[string]int64{"k": 100}, []inbox.Offset{{Group: "g", Topic: "t", Partition: 0, Next: 100}}))
		return errors.New("roll back")
	})
	require.Error(t, err)
	require.Equal(t, map[string]int64{"k": 2, "j": 4}, keySeqs())
	require.Equal(t, map[int32]int64{0: 6, 1: 9}, offsets())
}

// TestContextEndsBeforeCommit: a transaction whose context ends after fn
// returned nil, before the commit, is rolled back, and InTx returns the
// context's error.
func TestContextEndsBeforeCommit(t *testing.T) {
	bothStores(t, contextEndsBeforeCommit[pgx.Tx], contextEndsBeforeCommit[*sql.Tx])
}

func contextEndsBeforeCommit[Tx any](t *testing.T, s inbox.Store[Tx], _ pginbox.Options) {
	ctx, cancel := context.WithCancel(watchdog(t))
	err := s.InTx(ctx, func(ctx context.Context, tx Tx) error {
		if _, err := s.Record(ctx, tx, []string{"c"}); err != nil {
			return err
		}
		cancel()
		return nil
	})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, []bool{true}, record(t, s, "c"), "the transaction was rolled back")
}
