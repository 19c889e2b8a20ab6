package pgoutbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
)

// TestLimits: with Options.Limits an entry over the payload limit is
// rejected in the caller's transaction, which can still commit its own
// writes; nothing of the call is appended.
func TestLimits(t *testing.T) {
	t.Parallel()
	b, p := newBackend(t, extended, pgoutbox.Options{Limits: outbox.Limits{MaxPayload: 3}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		err := b.AppendInTx(ctx, tx, outbox.Entry{ID: "ok", Topic: "t", Payload: []byte("abc")}, outbox.Entry{ID: "big", Topic: "t", Payload: []byte("abcd")})
		require.ErrorIs(t, err, outbox.ErrInvalidEntry)
		require.ErrorContains(t, err, `entry 1 (id "big")`)
		require.ErrorContains(t, err, "Limits.MaxPayload of 3")
		return nil
	})
	require.NoError(t, err)
	for _, id := range []string{"ok", "big"} {
		_, err := b.Lookup(ctx, id)
		require.ErrorIs(t, err, outbox.ErrNotFound, id)
	}
	require.NoError(t, pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		return b.AppendInTx(ctx, tx, outbox.Entry{ID: "ok", Topic: "t", Payload: []byte("abc")})
	}))
	_, err = b.Lookup(ctx, "ok")
	require.NoError(t, err)
}
