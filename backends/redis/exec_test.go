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

func TestCheckExec(t *testing.T) {
	t.Parallel()
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			c := tg.client(t)
			b := newBackend(t, c, Options{Partitions: 4})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			biz := b.HashTag("k1") + ":" + b.opts.Prefix[5:] + ":order"
			t.Cleanup(func() { _ = c.Del(context.Background(), biz).Err() })

			t.Run("BusinessWrongTypeStillAppends", func(t *testing.T) {
				require.NoError(t, c.LPush(ctx, biz, "x").Err(), "make the business key a list")
				err := CheckExec(c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
					pipe.HSet(ctx, biz, "state", "paid") // WRONGTYPE at EXEC
					return b.AppendInTx(ctx, pipe, outbox.Entry{ID: "e1", Topic: "orders", Key: "k1"})
				}))
				var ee *ExecError
				require.ErrorAs(t, err, &ee)
				require.Equal(t, 0, ee.Index)
				require.Equal(t, "hset", ee.Name)
				require.ErrorContains(t, ee.Err, "WRONGTYPE")
				require.Equal(t, []string{"e1"}, ee.Appended)
				require.ErrorContains(t, err, "WERE appended")
				require.ErrorContains(t, err, "Backend.Cancel")

				info, err := b.Lookup(ctx, "e1")
				require.NoError(t, err, "the entry of the failed EXEC is in the outbox")
				require.Equal(t, "orders", info.Entry.Topic)
				require.NoError(t, b.Cancel(ctx, "e1"), "the fix the error names")
			})

			t.Run("QueueTimeErrorAppendsNothing", func(t *testing.T) {
				err := CheckExec(c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
					pipe.Do(ctx, "hset", biz) // wrong arity: refused when queued, EXECABORT
					return b.AppendInTx(ctx, pipe, outbox.Entry{ID: "e2", Topic: "orders", Key: "k1"})
				}))
				require.Error(t, err)
				var ee *ExecError
				require.False(t, errors.As(err, &ee), "nothing ran: %v", err)
				require.ErrorContains(t, err, "nothing of it was applied")
				_, err = b.Lookup(ctx, "e2")
				require.ErrorIs(t, err, outbox.ErrNotFound)
			})

			t.Run("SuccessAndMissingKeyReadIsNil", func(t *testing.T) {
				require.NoError(t, CheckExec(c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
					pipe.Get(ctx, b.HashTag("k1")+":missing") // redis.Nil is no failure
					return b.AppendInTx(ctx, pipe, outbox.Entry{ID: "e3", Topic: "orders", Key: "k1"})
				})))
				_, err := b.Lookup(ctx, "e3")
				require.NoError(t, err)
			})
		})
	}
}
