package redisoutbox

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
)

// TestLimits: with Options.Limits an entry whose topic the rule refuses is
// rejected before anything is queued, in AppendInTx and Append.
func TestLimits(t *testing.T) {
	t.Parallel()
	c := standaloneClient(t)
	errRule := errors.New("topics start with 'app.'; rename it")
	b := newBackend(t, c, Options{Limits: outbox.Limits{Topic: func(s string) error {
		if len(s) < 4 || s[:4] != "app." {
			return errRule
		}
		return nil
	}}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		err := b.AppendInTx(ctx, pipe, outbox.Entry{ID: "x", Topic: "other"})
		require.ErrorIs(t, err, outbox.ErrInvalidEntry)
		require.ErrorIs(t, err, errRule)
		require.ErrorContains(t, err, `Topic "other" is refused by Limits.Topic`)
		require.Zero(t, pipe.Len(), "nothing queued")
		return nil
	})
	require.NoError(t, err)
	require.ErrorIs(t, b.Append(ctx, outbox.Entry{ID: "y", Topic: "other"}), outbox.ErrInvalidEntry)
	require.NoError(t, b.Append(ctx, outbox.Entry{ID: "z", Topic: "app.orders"}))
	for id, found := range map[string]bool{"x": false, "y": false, "z": true} {
		_, err := b.Lookup(ctx, id)
		if found {
			require.NoError(t, err)
		} else {
			require.ErrorIs(t, err, outbox.ErrNotFound, id)
		}
	}
}
