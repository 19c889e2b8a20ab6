package memory_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
)

// TestLimits: Options.Limits rejects an oversized payload in AppendInTx,
// and the transaction appends nothing of the call.
func TestLimits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := memory.New(memory.Options{Limits: outbox.Limits{MaxPayload: 2}})
	defer b.Close()
	tx := b.Begin()
	err := b.AppendInTx(ctx, tx, outbox.Entry{ID: "a", Topic: "t", Payload: []byte("ab")}, outbox.Entry{ID: "b", Topic: "t", Payload: []byte("abc")})
	require.ErrorIs(t, err, outbox.ErrInvalidEntry)
	require.ErrorContains(t, err, `entry 1 (id "b"): Payload is 3 bytes, over Limits.MaxPayload of 2`)
	require.NoError(t, tx.Commit())
	st, err := b.Stats(ctx)
	require.NoError(t, err)
	require.Zero(t, st.Pending)
}
