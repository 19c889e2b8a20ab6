package redisinbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
	redisoutbox "github.com/outboxrelay/outbox/backends/redis"
	"github.com/outboxrelay/outbox/backends/redis/redisinbox"
	"github.com/outboxrelay/outbox/inbox"
)

// TestHandlerAppendsToTheOutbox: on a single node, a handler can append
// outbox entries in the same EXEC as its effects and the inbox's record
// (consume, transform, produce): a duplicate appends nothing, and a
// rolled-back transaction neither.
func TestHandlerAppendsToTheOutbox(t *testing.T) {
	t.Parallel()
	c := standaloneClient(t, nil)
	ctx := testCtx(t)
	s := newStore(t, c)
	obPrefix := uniquePrefix()
	ob, err := redisoutbox.New(ctx, c, redisoutbox.Options{Prefix: obPrefix, Partitions: 1})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = ob.Close()
		deletePrefix(c, obPrefix[:len(obPrefix)-1]) // "t:{x" matches "t:{x:0}:entries" and "t:{x}:meta"
	})
	ib, err := inbox.New(s, inbox.Options{})
	require.NoError(t, err)
	h := func(ctx context.Context, tx *redisinbox.Tx, m inbox.Message) error {
		tx.Pipe().Incr(ctx, s.Key("orders"))
		if err := ob.AppendInTx(ctx, tx.Pipe(), outbox.Entry{ID: "out-" + m.ID, Topic: "shipments", Key: m.ID}); err != nil {
			return err
		}
		if m.ID == "fails" {
			return errAbort
		}
		return nil
	}
	for _, id := range []string{"a", "b", "a", "fails"} {
		_, err := ib.Handle(ctx, inbox.Message{ID: id}, h)
		if id == "fails" {
			require.ErrorIs(t, err, errAbort)
			continue
		}
		require.NoError(t, err)
	}
	l, err := ob.AcquireLease(ctx, 0, "test", time.Minute)
	require.NoError(t, err)
	batch, err := ob.FindPendingBatch(ctx, l, 10)
	require.NoError(t, err)
	var got []string
	for _, e := range batch {
		got = append(got, e.ID)
	}
	assert.Equal(t, []string{"out-a", "out-b"}, got, "one entry per applied message, none for the duplicate or the rolled-back one")
	n, err := c.Get(ctx, s.Key("orders")).Int()
	require.NoError(t, err)
	assert.Equal(t, 2, n)
}
