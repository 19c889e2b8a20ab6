package redisoutbox

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
)

// MarkSent sends the entries its Backend fetched with their pending
// members and removes them without reading their values (see Backend.markArgs);
// these tests put an entry of such a batch in every state it can reach
// before the MarkSent and check that only pending entries of the batch are
// removed.
func TestMarkSentOfFetchedEntries(t *testing.T) {
	t.Parallel()
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			c := tg.client(t)

			// fetched appends a, b, c of one key and d without one, and
			// fetches them all.
			fetched := func(t *testing.T) (*Backend, outbox.Lease) {
				ctx := testCtx(t)
				b := newBackend(t, c, Options{})
				require.NoError(t, b.Append(ctx,
					outbox.Entry{ID: "a", Topic: "t", Key: "k"},
					outbox.Entry{ID: "b", Topic: "t", Key: "k"},
					outbox.Entry{ID: "c", Topic: "t", Key: "k"},
					outbox.Entry{ID: "d", Topic: "t"}))
				l, err := b.AcquireLease(ctx, 0, "me", time.Minute)
				require.NoError(t, err)
				batch, err := b.FetchBatch(ctx, l, 10)
				require.NoError(t, err)
				require.Equal(t, []string{"a", "b", "c", "d"}, ids(batch.Entries))
				return b, l
			}
			pending := func(t *testing.T, b *Backend) []string {
				var out []string
				for _, id := range []string{"a", "b", "c", "d"} {
					if info, err := b.Lookup(testCtx(t), id); err == nil && !info.Parked {
						out = append(out, id)
					}
				}
				return out
			}

			t.Run("AllPending", func(t *testing.T) {
				t.Parallel()
				b, l := fetched(t)
				require.NoError(t, b.MarkSent(testCtx(t), l, []string{"a", "b", "c", "d"}))
				assert.Empty(t, pending(t, b))
				n, err := c.HLen(testCtx(t), b.parts[0].entries).Result()
				require.NoError(t, err)
				assert.Zero(t, n, "every value removed")
			})

			t.Run("TwiceAndRepeatedIDs", func(t *testing.T) {
				t.Parallel()
				ctx := testCtx(t)
				b, l := fetched(t)
				require.NoError(t, b.MarkSent(ctx, l, []string{"a", "a", "b"}))
				assert.Equal(t, []string{"c", "d"}, pending(t, b))
				require.NoError(t, b.MarkSent(ctx, l, []string{"a", "b"}), "idempotent")
				require.NoError(t, b.MarkSent(ctx, l, []string{"b", "c", "d", "c"}))
				assert.Empty(t, pending(t, b))
			})

			t.Run("CancelledAndAppendedAgain", func(t *testing.T) {
				t.Parallel()
				ctx := testCtx(t)
				b, l := fetched(t)
				// b is cancelled while its batch is being published, and a
				// new entry with its ID is appended: that entry was never
				// published and must stay.
				require.NoError(t, b.Cancel(ctx, "b"))
				require.NoError(t, b.Append(ctx, outbox.Entry{ID: "b", Topic: "t", Key: "k2", Payload: []byte("new")}))
				require.NoError(t, b.MarkSent(ctx, l, []string{"a", "b", "c", "d"}))
				assert.Equal(t, []string{"b"}, pending(t, b))
				info, err := b.Lookup(ctx, "b")
				require.NoError(t, err)
				assert.Equal(t, "new", string(info.Payload))
			})

			t.Run("Parked", func(t *testing.T) {
				t.Parallel()
				ctx := testCtx(t)
				b, l := fetched(t)
				require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "a", Park: true, Error: "no"}}))
				require.NoError(t, b.MarkSent(ctx, l, []string{"a", "b", "c", "d"}))
				assert.Empty(t, pending(t, b))
				info, err := b.Lookup(ctx, "a")
				require.NoError(t, err)
				assert.True(t, info.Parked, "a parked entry is not removed by MarkSent")
			})

			t.Run("RetriedHoldsItsKeyUntilSent", func(t *testing.T) {
				t.Parallel()
				ctx := testCtx(t)
				b, l := fetched(t)
				// a fails: the key-order set gets a member, and the next
				// MarkSent takes the path that reads values.
				require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "a", Delay: -time.Second, Error: "later"}}))
				require.NoError(t, b.MarkSent(ctx, l, []string{"d"}))
				batch, err := b.FetchBatch(ctx, l, 10)
				require.NoError(t, err)
				require.Equal(t, []string{"a"}, ids(batch.Entries), "a failing entry holds back the rest of its key")
				require.NoError(t, b.MarkSent(ctx, l, []string{"a"}))
				n, err := c.ZCard(ctx, b.parts[0].keyorder).Result()
				require.NoError(t, err)
				assert.Zero(t, n, "a sent entry leaves the key-order set")
				batch, err = b.FetchBatch(ctx, l, 10)
				require.NoError(t, err)
				require.Equal(t, []string{"b", "c"}, ids(batch.Entries))
				require.NoError(t, b.MarkSent(ctx, l, []string{"b", "c"}))
				assert.Empty(t, pending(t, b))
			})

			t.Run("AnotherBackendInstance", func(t *testing.T) {
				t.Parallel()
				ctx := testCtx(t)
				b, l := fetched(t)
				// A Backend that did not fetch them knows no member.
				other, err := New(ctx, c, Options{Prefix: b.opts.Prefix, Partitions: 1})
				require.NoError(t, err)
				defer other.Close()
				require.NoError(t, other.MarkSent(ctx, l, []string{"a", "c"}))
				assert.Equal(t, []string{"b", "d"}, pending(t, b))
				require.NoError(t, b.MarkSent(ctx, l, []string{"b", "d"}))
				assert.Empty(t, pending(t, b))
			})

			t.Run("StaleLease", func(t *testing.T) {
				t.Parallel()
				ctx := testCtx(t)
				b, l := fetched(t)
				require.NoError(t, b.ReleaseLease(ctx, l))
				l2, err := b.AcquireLease(ctx, 0, "other", time.Minute)
				require.NoError(t, err)
				err = b.MarkSent(ctx, l, []string{"a"})
				require.ErrorIs(t, err, outbox.ErrLeaseLost)
				// The new holder has not fetched: its MarkSent reads values.
				require.NoError(t, b.MarkSent(ctx, l2, []string{"a", "b", "c", "d"}))
				assert.Empty(t, pending(t, b))
			})
		})
	}
}
