package pgoutbox_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
)

// TestSameKeyAppendOrder appends one key from two transactions: A appends
// first and commits last, and a relay fetches (and marks sent) at each
// step. Without KeyLocks the relay sees B once B commits, while A is still
// open, so it delivers B then A (commit-order visibility). With KeyLocks
// B's append waits on A's key lock until A commits, so delivery follows
// append order. The order comes from the lock, not from timing: the test
// waits until B is blocked on the lock before it goes on.
func TestSameKeyAppendOrder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		keyLocks bool
		want     []string
	}{
		{"WithoutKeyLocksDeliversInCommitOrder", false, []string{"B", "A"}},
		{"KeyLocksDeliverInAppendOrder", true, []string{"A", "B"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, p := newBackend(t, extended, pgoutbox.Options{KeyLocks: tc.keyLocks})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			l, err := b.AcquireLease(ctx, 0, "o", time.Minute)
			require.NoError(t, err)
			var delivered []string
			deliver := func() {
				t.Helper()
				got, err := b.FindPendingBatch(ctx, l, 10)
				require.NoError(t, err)
				var ids []string
				for _, e := range got {
					ids = append(ids, e.ID)
				}
				if len(ids) > 0 {
					require.NoError(t, b.MarkSent(ctx, l, ids))
				}
				delivered = append(delivered, ids...)
			}

			txA, err := p.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = txA.Rollback(ctx) }()
			require.NoError(t, b.AppendInTx(ctx, txA, outbox.Entry{ID: "A", Topic: "t", Key: "order-1"}))

			txB, err := p.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = txB.Rollback(ctx) }()
			pidB := txB.Conn().PgConn().PID()
			bDone := make(chan error, 1)
			go func() {
				err := b.AppendInTx(ctx, txB, outbox.Entry{ID: "B", Topic: "t", Key: "order-1"})
				if err == nil {
					err = txB.Commit(ctx)
				}
				bDone <- err
			}()

			if tc.keyLocks {
				waitForLockWait(ctx, t, p, pidB)
			} else {
				require.NoError(t, <-bDone, "B appends and commits while A is open")
			}
			deliver() // the relay polls while A is open
			require.NoError(t, txA.Commit(ctx))
			if tc.keyLocks {
				require.NoError(t, <-bDone, "B appends and commits once A committed")
			}
			deliver()
			deliver()
			require.Equal(t, tc.want, delivered)
		})
	}
}

// waitForLockWait returns once the backend pid waits on a lock.
func waitForLockWait(ctx context.Context, t *testing.T, p *pgxpool.Pool, pid uint32) {
	t.Helper()
	for {
		var waiting bool
		err := p.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = $1 AND locktype = 'advisory' AND NOT granted)`, int32(pid)).Scan(&waiting)
		require.NoError(t, err, "waiting for B to block on A's key lock")
		if waiting {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("B never waited on A's key lock")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestKeyLocksSQLTx: AppendInSQLTx takes the same key lock, so it waits
// while a pgx transaction that appended the key is open.
func TestKeyLocksSQLTx(t *testing.T) {
	t.Parallel()
	b, p := newBackend(t, extended, pgoutbox.Options{KeyLocks: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	txA, err := p.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = txA.Rollback(ctx) }()
	require.NoError(t, b.AppendInTx(ctx, txA, outbox.Entry{ID: "A", Topic: "t", Key: "k"}))

	db := stdlib.OpenDBFromPool(p)
	defer db.Close()
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	var pid int32
	require.NoError(t, conn.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid))
	txB, err := conn.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = txB.Rollback() }()
	bDone := make(chan error, 1)
	go func() {
		err := b.AppendInSQLTx(ctx, txB, outbox.Entry{ID: "B", Topic: "t", Key: "k"}, outbox.Entry{ID: "C", Topic: "t", Key: "other"})
		if err == nil {
			err = txB.Commit()
		}
		bDone <- err
	}()
	waitForLockWait(ctx, t, p, uint32(pid))
	require.NoError(t, txA.Commit(ctx))
	require.NoError(t, <-bDone)
}

// BenchmarkAppendKeyLocks measures what Options.KeyLocks costs the append
// rate: 8 concurrent callers, 1 entry per transaction, distinct keys (no
// lock waits: the cost is the extra statement). b.N is the number of
// transactions. Run it alone (the machine is shared):
//
//	go test -run '^$' -bench AppendKeyLocks -benchtime 5000x ./backends/postgres/
func BenchmarkAppendKeyLocks(b *testing.B) {
	for _, locks := range []bool{false, true} {
		b.Run(fmt.Sprintf("KeyLocks=%v", locks), func(b *testing.B) {
			be, p := newBackend(b, extended, pgoutbox.Options{KeyLocks: locks})
			payload := benchPayload()
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			for range appendCallers {
				wg.Go(func() {
					ctx := context.Background()
					for n := next.Add(1); n <= int64(b.N); n = next.Add(1) {
						id := fmt.Sprint("e-", n)
						err := pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
							return be.AppendInTx(ctx, tx, outbox.Entry{ID: id, Topic: "bench", Key: id, Payload: payload})
						})
						if err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "entries/s")
		})
	}
}
