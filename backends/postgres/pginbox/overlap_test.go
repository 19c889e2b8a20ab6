package pginbox_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox/backends/postgres/pginbox"
	"github.com/outboxrelay/outbox/inbox"
	"github.com/outboxrelay/outbox/internal/testenv"
)

// TestOverlappingBatchesApplyOnce: four consumers handle the same 240
// keyed, numbered messages with offsets, at the same time, in batches of
// 8 (as four consumers do when a broker redelivers everything to each),
// through the Inbox on a Store, at READ COMMITTED and at REPEATABLE READ
// (where conflicts are serialization failures the Inbox retries). Every
// message's effect is written once, each key ends at its highest number,
// and the stored offset is the last one. A batch that still fails (a
// conflict past MaxAttempts) is handed again, as a broker redelivers an
// unacknowledged message.
func TestOverlappingBatchesApplyOnce(t *testing.T) {
	t.Parallel()
	for _, level := range []string{"read committed", "repeatable read"} {
		t.Run(level, func(t *testing.T) {
			t.Parallel()
			cfg, err := pgxpool.ParseConfig(testenv.PostgresURL())
			require.NoError(t, err)
			cfg.MaxConns = 6
			cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = level
			p, err := pgxpool.NewWithConfig(context.Background(), cfg)
			if err != nil {
				testenv.Unavailable(t, "PostgreSQL", "OUTBOX_POSTGRES_URL", err)
			}
			t.Cleanup(p.Close)
			opts := migrated(t)
			overlappingBatches(t, p, opts)
		})
	}
}

func overlappingBatches(t *testing.T, p *pgxpool.Pool, opts pginbox.Options) {
	ctx := watchdog(t)
	effects := pgx.Identifier{opts.Schema, "effects"}.Sanitize()
	_, err := p.Exec(ctx, "CREATE TABLE "+effects+" (id text NOT NULL, key text NOT NULL, seq bigint NOT NULL)")
	require.NoError(t, err)
	store, err := pginbox.New(p, opts)
	require.NoError(t, err)
	ib, err := inbox.New(store, inbox.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)

	const keys, perKey, batch = 12, 20, 8
	var msgs []inbox.Message
	for seq := 1; seq <= perKey; seq++ {
		for k := range keys {
			msgs = append(msgs, inbox.Message{
				ID: fmt.Sprintf("k%d-%d", k, seq), Key: fmt.Sprintf("k%d", k), Seq: int64(seq),
				Offset: &inbox.Offset{Group: "g", Topic: "t", Partition: 0, Next: int64(len(msgs) + 1)},
			})
		}
	}
	write := func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
		_, err := tx.Exec(ctx, "INSERT INTO "+effects+" (id, key, seq) VALUES ($1, $2, $3)", m.ID, m.Key, m.Seq)
		return err
	}
	var wg sync.WaitGroup
	redelivered := make([]int, 4)
	for c := range 4 {
		wg.Go(func() {
			for i := 0; i < len(msgs); i += batch {
				part := msgs[i:min(i+batch, len(msgs))]
				for {
					_, err := ib.HandleBatch(ctx, part, write)
					if err == nil {
						break
					}
					if ctx.Err() != nil || !store.Retryable(err) {
						t.Errorf("consumer %d, batch at %d: %v", c, i, err)
						return
					}
					redelivered[c]++
				}
			}
		})
	}
	wg.Wait()

	var total, distinct int
	require.NoError(t, p.QueryRow(ctx, "SELECT count(*), count(DISTINCT id) FROM "+effects).Scan(&total, &distinct))
	require.Equal(t, len(msgs), distinct, "every message applied")
	require.Equal(t, len(msgs), total, "no message applied twice")
	var keysAtTop int
	require.NoError(t, p.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{opts.Schema, "inbox_keyseq"}.Sanitize()+" WHERE seq = $1", perKey).Scan(&keysAtTop))
	require.Equal(t, keys, keysAtTop, "every key at its highest number")
	next, err := store.Offsets(ctx, "g", "t")
	require.NoError(t, err)
	require.Equal(t, map[int32]int64{0: int64(len(msgs))}, next)
	t.Logf("batches handed again after MaxAttempts conflicts, per consumer: %v", redelivered)
}
