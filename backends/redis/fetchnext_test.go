package redisoutbox

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
)

// FetchNext passes over the entries in flight: a never-attempted one holds
// nothing back, whether the partition's key-order set is empty (the claim's
// fast path) or in use by another key's failing entry (every keyed entry
// then takes the general path, where blocker finds no member of the key in
// flight); an attempted one stops its key. The batch in flight and the one
// fetched ahead are then marked sent by their members, the one in flight
// first (the last-fetch cache keeps both fetches).
func TestFetchNextPassesOverEntriesInFlight(t *testing.T) {
	t.Parallel()
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			c := tg.client(t)
			for _, marked := range []bool{false, true} {
				name := "KeyOrderSetEmpty"
				if marked {
					name = "KeyOrderSetInUse"
				}
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					ctx := testCtx(t)
					b := newBackend(t, c, Options{})
					l, err := b.AcquireLease(ctx, 0, "me", time.Minute)
					require.NoError(t, err)
					if marked {
						require.NoError(t, b.Append(ctx, outbox.Entry{ID: "x1", Topic: "t", Key: "x"}))
						got, err := b.FetchBatch(ctx, l, 1)
						require.NoError(t, err)
						require.Equal(t, []string{"x1"}, ids(got.Entries))
						require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "x1", Error: "down", Delay: time.Hour}}))
						n, err := c.Exists(ctx, b.parts[0].keyorder).Result()
						require.NoError(t, err)
						require.EqualValues(t, 1, n, "the failing x1 is in the key-order set")
					}
					require.NoError(t, b.Append(ctx,
						outbox.Entry{ID: "a1", Topic: "t", Key: "k"},
						outbox.Entry{ID: "a2", Topic: "t", Key: "k"},
						outbox.Entry{ID: "b1", Topic: "t", Key: "j"},
						outbox.Entry{ID: "b2", Topic: "t", Key: "j"}))
					first, err := b.FetchBatch(ctx, l, 1)
					require.NoError(t, err)
					require.Equal(t, []string{"a1"}, ids(first.Entries))
					next, err := b.FetchNext(ctx, l, 2, first.Entries)
					require.NoError(t, err)
					assert.Empty(t, next.Parked)
					assert.Equal(t, []string{"a2", "b1"}, ids(next.Entries), "a1 in flight, never attempted, holds a2 nothing back")

					// An attempted entry in flight stops its key: b1 fails
					// once, due again at once, and is in flight again.
					require.NoError(t, b.MarkSent(ctx, l, []string{"a1"}))
					require.NoError(t, b.MarkSent(ctx, l, []string{"a2"}))
					require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "b1", Error: "transient", Delay: -time.Hour}}))
					retry, err := b.FetchBatch(ctx, l, 1)
					require.NoError(t, err)
					require.Equal(t, []string{"b1"}, ids(retry.Entries))
					require.Equal(t, 1, retry.Entries[0].Attempts)
					next, err = b.FetchNext(ctx, l, 10, retry.Entries)
					require.NoError(t, err)
					assert.Empty(t, next.Entries, "b2 waits for the attempted b1 in flight")
					require.NoError(t, b.MarkSent(ctx, l, []string{"b1"}))
					got, err := b.FetchBatch(ctx, l, 10)
					require.NoError(t, err)
					assert.Equal(t, []string{"b2"}, ids(got.Entries))
				})
			}
		})
	}
}
