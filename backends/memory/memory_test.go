package memory_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
)

// fakeClock is a manual clock for Options.Now.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// ttl is the lease TTL of the tests, longer than any clock step they take
// without meaning to lose the lease.
const ttl = 90 * time.Minute

// newBackend returns a backend on a fake clock, closed at the end of t.
func newBackend(t *testing.T, partitions int) (*memory.Backend, *fakeClock) {
	t.Helper()
	c := newClock()
	b := memory.New(memory.Options{Partitions: partitions, Now: c.Now})
	t.Cleanup(func() { _ = b.Close() })
	return b, c
}

func appendAll(t *testing.T, b *memory.Backend, entries ...outbox.Entry) {
	t.Helper()
	require.NoError(t, b.Append(context.Background(), entries...))
}

func acquire(t *testing.T, b *memory.Backend, partition int, owner string) outbox.Lease {
	t.Helper()
	l, err := b.AcquireLease(context.Background(), partition, owner, ttl)
	require.NoError(t, err)
	return l
}

func fetch(t *testing.T, b *memory.Backend, l outbox.Lease, limit int) []outbox.Entry {
	t.Helper()
	batch, err := b.FindPendingBatch(context.Background(), l, limit)
	require.NoError(t, err)
	return batch
}

func idsOf(entries []outbox.Entry) []string {
	ids := make([]string, 0, len(entries))
	for _, e := range entries {
		ids = append(ids, e.ID)
	}
	return ids
}

func e(id, key string) outbox.Entry {
	return outbox.Entry{ID: id, Topic: "t", Key: key, Payload: []byte(id)}
}

func stats(t *testing.T, b *memory.Backend) outbox.Stats {
	t.Helper()
	s, err := b.Stats(context.Background())
	require.NoError(t, err)
	return s
}

func TestNewDefaults(t *testing.T) {
	t.Parallel()
	assert.Equal(t, 1, memory.New(memory.Options{}).Partitions())
	assert.Equal(t, 7, memory.New(memory.Options{Partitions: 7}).Partitions())
	assert.Panics(t, func() { memory.New(memory.Options{Partitions: -1}) })

	// Default clock is time.Now: CreatedAt lies between before and after.
	b := memory.New(memory.Options{})
	before := time.Now()
	appendAll(t, b, e("a", ""))
	after := time.Now()
	l := acquire(t, b, 0, "o")
	batch := fetch(t, b, l, 1)
	require.Len(t, batch, 1)
	assert.False(t, batch[0].CreatedAt.Before(before.Round(0)))
	assert.False(t, batch[0].CreatedAt.After(after))
}

func TestTransactions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name string
		run  func(t *testing.T, b *memory.Backend) (wantVisible int)
	}{
		{"CommitMakesVisible", func(t *testing.T, b *memory.Backend) int {
			tx := b.Begin()
			require.NoError(t, b.AppendInTx(ctx, tx, e("a", ""), e("b", "")))
			require.NoError(t, tx.Commit())
			return 2
		}},
		{"InvisibleBeforeCommit", func(t *testing.T, b *memory.Backend) int {
			tx := b.Begin()
			require.NoError(t, b.AppendInTx(ctx, tx, e("a", "")))
			assert.Empty(t, fetch(t, b, acquire(t, b, 0, "peek"), 10))
			assert.Equal(t, int64(0), stats(t, b).Pending)
			require.NoError(t, tx.Rollback())
			return 0
		}},
		{"RollbackLeavesNothing", func(t *testing.T, b *memory.Backend) int {
			tx := b.Begin()
			require.NoError(t, b.AppendInTx(ctx, tx, e("a", "")))
			require.NoError(t, tx.Rollback())
			// The ID is free again.
			appendAll(t, b, e("a", ""))
			return 1
		}},
		{"CommitTwiceFails", func(t *testing.T, b *memory.Backend) int {
			tx := b.Begin()
			require.NoError(t, b.AppendInTx(ctx, tx, e("a", "")))
			require.NoError(t, tx.Commit())
			assert.ErrorIs(t, tx.Commit(), memory.ErrTxDone)
			assert.ErrorIs(t, tx.Rollback(), memory.ErrTxDone)
			return 1
		}},
		{"RollbackTwiceFails", func(t *testing.T, b *memory.Backend) int {
			tx := b.Begin()
			require.NoError(t, tx.Rollback())
			assert.ErrorIs(t, tx.Rollback(), memory.ErrTxDone)
			assert.ErrorIs(t, tx.Commit(), memory.ErrTxDone)
			return 0
		}},
		{"AppendAfterEndFails", func(t *testing.T, b *memory.Backend) int {
			tx := b.Begin()
			require.NoError(t, tx.Commit())
			assert.ErrorIs(t, b.AppendInTx(ctx, tx, e("a", "")), memory.ErrTxDone)
			return 0
		}},
		{"NilTxIsInvalid", func(t *testing.T, b *memory.Backend) int {
			assert.ErrorIs(t, b.AppendInTx(ctx, nil, e("a", "")), outbox.ErrInvalidArgument)
			return 0
		}},
		{"ForeignTxIsInvalid", func(t *testing.T, b *memory.Backend) int {
			other := memory.New(memory.Options{})
			defer other.Close()
			assert.ErrorIs(t, b.AppendInTx(ctx, other.Begin(), e("a", "")), outbox.ErrInvalidArgument)
			return 0
		}},
		{"NoEntriesIsNoop", func(t *testing.T, b *memory.Backend) int {
			require.NoError(t, b.AppendInTx(ctx, nil))
			require.NoError(t, b.Append(ctx))
			return 0
		}},
		{"InvalidEntryRejectsWholeCall", func(t *testing.T, b *memory.Backend) int {
			err := b.Append(ctx, e("good", ""), outbox.Entry{ID: "bad"})
			assert.ErrorIs(t, err, outbox.ErrInvalidEntry)
			tx := b.Begin()
			require.NoError(t, b.AppendInTx(ctx, tx, e("kept", "")))
			assert.ErrorIs(t, b.AppendInTx(ctx, tx, e("x", ""), outbox.Entry{ID: "bad"}), outbox.ErrInvalidEntry)
			require.NoError(t, tx.Commit())
			return 1 // only "kept"
		}},
		{"SeveralCallsInOneTx", func(t *testing.T, b *memory.Backend) int {
			tx := b.Begin()
			require.NoError(t, b.AppendInTx(ctx, tx, e("a", "")))
			require.NoError(t, b.AppendInTx(ctx, tx, e("b", "")))
			require.NoError(t, tx.Commit())
			return 2
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, _ := newBackend(t, 1)
			want := tc.run(t, b)
			assert.Equal(t, int64(want), stats(t, b).Pending)
		})
	}
}

func TestAppendSetsBackendFields(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, c := newBackend(t, 8)
	tx := b.Begin()
	require.NoError(t, b.AppendInTx(ctx, tx, outbox.Entry{
		Topic: "t", Key: "k", Attempts: 5, LastError: "old", CreatedAt: time.Unix(1, 0), Partition: 99,
	}))
	c.Advance(time.Minute) // CreatedAt is the commit time.
	commitAt := c.Now()
	require.NoError(t, tx.Commit())

	p := outbox.PartitionOf("k", 8)
	batch := fetch(t, b, acquire(t, b, p, "o"), 10)
	require.Len(t, batch, 1)
	got := batch[0]
	assert.NotEmpty(t, got.ID, "an empty ID gets a generated one")
	assert.Equal(t, p, got.Partition)
	assert.Equal(t, 0, got.Attempts)
	assert.Empty(t, got.LastError)
	assert.True(t, got.CreatedAt.Equal(commitAt), "CreatedAt %v, want %v", got.CreatedAt, commitAt)
}

func TestAppendIsIdempotentByID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name  string
		setup func(t *testing.T, b *memory.Backend, l outbox.Lease)
	}{
		{"Pending", func(t *testing.T, b *memory.Backend, l outbox.Lease) {}},
		{"Claimed", func(t *testing.T, b *memory.Backend, l outbox.Lease) {
			require.Len(t, fetch(t, b, l, 10), 1)
		}},
		{"Parked", func(t *testing.T, b *memory.Backend, l outbox.Lease) {
			require.Len(t, fetch(t, b, l, 10), 1)
			require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "x", Error: "boom", Park: true}}))
		}},
		{"Retrying", func(t *testing.T, b *memory.Backend, l outbox.Lease) {
			require.Len(t, fetch(t, b, l, 10), 1)
			require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "x", Error: "boom", Delay: -time.Duration(1 << 62)}}))
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, _ := newBackend(t, 1)
			appendAll(t, b, outbox.Entry{ID: "x", Topic: "t", Payload: []byte("first")})
			l := acquire(t, b, 0, "o")
			tc.setup(t, b, l)
			before := stats(t, b)
			appendAll(t, b, outbox.Entry{ID: "x", Topic: "t", Payload: []byte("second")})
			assert.Equal(t, before, stats(t, b), "a duplicate append changes nothing")

			// Whatever state it is in, the stored entry is the first one.
			l2, err := b.AcquireLease(ctx, 0, "o", ttl)
			require.NoError(t, err)
			_, _ = b.Requeue(ctx, "x")
			require.NoError(t, b.ReleaseLease(ctx, l2))
			batch := fetch(t, b, acquire(t, b, 0, "next"), 10)
			require.Len(t, batch, 1)
			assert.Equal(t, "first", string(batch[0].Payload))
		})
	}

	t.Run("FirstWinsWithinOneCallAndOneTx", func(t *testing.T) {
		t.Parallel()
		b, _ := newBackend(t, 1)
		tx := b.Begin()
		require.NoError(t, b.AppendInTx(ctx, tx,
			outbox.Entry{ID: "x", Topic: "t", Payload: []byte("1")},
			outbox.Entry{ID: "x", Topic: "t", Payload: []byte("2")}))
		require.NoError(t, b.AppendInTx(ctx, tx, outbox.Entry{ID: "x", Topic: "t", Payload: []byte("3")}))
		require.NoError(t, tx.Commit())
		batch := fetch(t, b, acquire(t, b, 0, "o"), 10)
		require.Len(t, batch, 1)
		assert.Equal(t, "1", string(batch[0].Payload))
	})

	t.Run("SentIDMayBeAppendedAgain", func(t *testing.T) {
		t.Parallel()
		b, _ := newBackend(t, 1)
		appendAll(t, b, e("x", ""))
		l := acquire(t, b, 0, "o")
		require.NoError(t, b.MarkSent(ctx, l, idsOf(fetch(t, b, l, 10))))
		appendAll(t, b, e("x", ""))
		assert.Equal(t, []string{"x"}, idsOf(fetch(t, b, l, 10)))
	})
}

func TestEntriesAreCopied(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, _ := newBackend(t, 1)
	payload := []byte("original")
	headers := map[string]string{"h": "v"}
	require.NoError(t, b.Append(ctx, outbox.Entry{ID: "a", Topic: "t", Payload: payload, Headers: headers}))
	copy(payload, "XXXXXXXX")
	headers["h"] = "changed"
	headers["new"] = "x"

	l := acquire(t, b, 0, "o")
	batch := fetch(t, b, l, 1)
	require.Len(t, batch, 1)
	assert.Equal(t, "original", string(batch[0].Payload))
	assert.Equal(t, map[string]string{"h": "v"}, batch[0].Headers)

	// Changing a returned entry does not change the stored one.
	batch[0].Payload[0] = 'Z'
	batch[0].Headers["h"] = "mine"
	require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "a", Park: true}}))
	parked, err := b.Parked(ctx, "", 10)
	require.NoError(t, err)
	require.Len(t, parked, 1)
	assert.Equal(t, "original", string(parked[0].Payload))
	assert.Equal(t, map[string]string{"h": "v"}, parked[0].Headers)
	parked[0].Payload[0] = 'Z'
	parked, err = b.Parked(ctx, "", 10)
	require.NoError(t, err)
	assert.Equal(t, "original", string(parked[0].Payload))
}

func TestOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("CommitOrderNotBeginOrder", func(t *testing.T) {
		t.Parallel()
		b, _ := newBackend(t, 1)
		tx1, tx2 := b.Begin(), b.Begin()
		require.NoError(t, b.AppendInTx(ctx, tx1, e("a1", "k"), e("a2", "k")))
		require.NoError(t, b.AppendInTx(ctx, tx2, e("b1", "k")))
		require.NoError(t, tx2.Commit())
		require.NoError(t, tx1.Commit())
		assert.Equal(t, []string{"b1", "a1", "a2"}, idsOf(fetch(t, b, acquire(t, b, 0, "o"), 10)))
	})

	t.Run("ScheduledEntryTakesItsPlaceWhenDue", func(t *testing.T) {
		t.Parallel()
		b, c := newBackend(t, 1)
		t0 := c.Now()
		later := outbox.Entry{ID: "later", Topic: "t", Key: "k", NotBefore: t0.Add(time.Minute)}
		appendAll(t, b, later, e("now1", "k"))
		c.Advance(30 * time.Second)
		appendAll(t, b, e("now2", "k"))
		past := outbox.Entry{ID: "past", Topic: "t", Key: "k", NotBefore: t0.Add(-time.Hour)}
		appendAll(t, b, past) // due at its CreatedAt, not in the past

		l := acquire(t, b, 0, "o")
		assert.Equal(t, []string{"now1", "now2", "past"}, idsOf(fetch(t, b, l, 10)))
		c.Advance(29 * time.Second)
		assert.Empty(t, fetch(t, b, l, 10), "not due one second early")
		c.Advance(time.Second)
		assert.Equal(t, []string{"later"}, idsOf(fetch(t, b, l, 10)))
	})

	t.Run("BatchIsAPrefixUpToLimit", func(t *testing.T) {
		t.Parallel()
		b, _ := newBackend(t, 1)
		for i := range 10 {
			appendAll(t, b, e(fmt.Sprintf("e%d", i), ""))
		}
		l := acquire(t, b, 0, "o")
		assert.Equal(t, []string{"e0", "e1", "e2"}, idsOf(fetch(t, b, l, 3)))
		assert.Equal(t, []string{"e3", "e4", "e5", "e6"}, idsOf(fetch(t, b, l, 4)))
		assert.Equal(t, []string{"e7", "e8", "e9"}, idsOf(fetch(t, b, l, 100)))
		assert.Empty(t, fetch(t, b, l, 100))
	})

	t.Run("PartitionsAreSeparate", func(t *testing.T) {
		t.Parallel()
		b, _ := newBackend(t, 4)
		want := map[int][]string{}
		for i := range 40 {
			key := fmt.Sprintf("key-%d", i)
			id := fmt.Sprintf("e%02d", i)
			appendAll(t, b, e(id, key))
			p := outbox.PartitionOf(key, 4)
			want[p] = append(want[p], id)
		}
		for p := range 4 {
			batch := fetch(t, b, acquire(t, b, p, "o"), 100)
			for _, got := range batch {
				assert.Equal(t, p, got.Partition)
			}
			assert.Equal(t, want[p], idsOf(batch))
		}
	})
}

func TestLeases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name string
		run  func(t *testing.T, b *memory.Backend, c *fakeClock)
	}{
		{"GrantsIncreasingVersions", func(t *testing.T, b *memory.Backend, c *fakeClock) {
			l1 := acquire(t, b, 0, "a")
			assert.Equal(t, outbox.Lease{Partition: 0, Owner: "a", Version: l1.Version, Expires: c.Now().Add(ttl)}, l1)
			c.Advance(ttl)
			l2 := acquire(t, b, 0, "b")
			assert.Greater(t, l2.Version, l1.Version)
			require.NoError(t, b.ReleaseLease(ctx, l2))
			l3 := acquire(t, b, 0, "b")
			assert.Greater(t, l3.Version, l2.Version, "release keeps the version counter")
			c.Advance(ttl)
			l4 := acquire(t, b, 0, "b")
			assert.Greater(t, l4.Version, l3.Version, "the same owner after expiry gets a new version")
		}},
		{"SameOwnerExtendsAndKeepsVersion", func(t *testing.T, b *memory.Backend, c *fakeClock) {
			l1, err := b.AcquireLease(ctx, 0, "a", 30*time.Second)
			require.NoError(t, err)
			c.Advance(10 * time.Second)
			l2, err := b.AcquireLease(ctx, 0, "a", time.Minute)
			require.NoError(t, err)
			assert.Equal(t, l1.Version, l2.Version)
			assert.Equal(t, c.Now().Add(time.Minute), l2.Expires)
			c.Advance(30 * time.Second) // past l1's expiry, before l2's
			_, err = b.AcquireLease(ctx, 0, "b", ttl)
			assert.ErrorIs(t, err, outbox.ErrLeaseHeld)
		}},
		{"OtherOwnerIsRefusedUntilExpiry", func(t *testing.T, b *memory.Backend, c *fakeClock) {
			acquire(t, b, 0, "a")
			c.Advance(ttl - time.Nanosecond)
			_, err := b.AcquireLease(ctx, 0, "b", ttl)
			assert.ErrorIs(t, err, outbox.ErrLeaseHeld)
			c.Advance(time.Nanosecond)
			acquire(t, b, 0, "b")
		}},
		{"PartitionsLeaseIndependently", func(t *testing.T, b *memory.Backend, c *fakeClock) {
			acquire(t, b, 0, "a")
			acquire(t, b, 1, "b")
		}},
		{"RenewExtendsFromNow", func(t *testing.T, b *memory.Backend, c *fakeClock) {
			l := acquire(t, b, 0, "a")
			c.Advance(20 * time.Second)
			r, err := b.RenewLease(ctx, l, time.Minute)
			require.NoError(t, err)
			assert.Equal(t, l.Version, r.Version)
			assert.Equal(t, c.Now().Add(time.Minute), r.Expires)
			c.Advance(50 * time.Second) // alive thanks to the renewal
			_, err = b.FindPendingBatch(ctx, r, 1)
			require.NoError(t, err)
			_, err = b.FindPendingBatch(ctx, l, 1)
			require.NoError(t, err, "the lease is identified by owner and version, not expiry")
		}},
		{"RenewAfterExpiryIsLost", func(t *testing.T, b *memory.Backend, c *fakeClock) {
			l := acquire(t, b, 0, "a")
			c.Advance(ttl)
			_, err := b.RenewLease(ctx, l, ttl)
			assert.ErrorIs(t, err, outbox.ErrLeaseLost)
		}},
		{"RenewOfTakenLeaseIsLostAndChangesNothing", func(t *testing.T, b *memory.Backend, c *fakeClock) {
			l := acquire(t, b, 0, "a")
			c.Advance(ttl)
			nl := acquire(t, b, 0, "b")
			_, err := b.RenewLease(ctx, l, time.Hour)
			assert.ErrorIs(t, err, outbox.ErrLeaseLost)
			c.Advance(ttl)
			_, err = b.FindPendingBatch(ctx, nl, 1)
			assert.ErrorIs(t, err, outbox.ErrLeaseLost, "the stale renew did not extend the new lease")
		}},
		{"RenewOfWrongVersionIsLost", func(t *testing.T, b *memory.Backend, c *fakeClock) {
			l := acquire(t, b, 0, "a")
			l.Version++
			_, err := b.RenewLease(ctx, l, ttl)
			assert.ErrorIs(t, err, outbox.ErrLeaseLost)
		}},
		{"RenewOfReleasedIsLost", func(t *testing.T, b *memory.Backend, c *fakeClock) {
			l := acquire(t, b, 0, "a")
			require.NoError(t, b.ReleaseLease(ctx, l))
			_, err := b.RenewLease(ctx, l, ttl)
			assert.ErrorIs(t, err, outbox.ErrLeaseLost)
		}},
		{"ReleaseFreesThePartition", func(t *testing.T, b *memory.Backend, c *fakeClock) {
			l := acquire(t, b, 0, "a")
			require.NoError(t, b.ReleaseLease(ctx, l))
			require.NoError(t, b.ReleaseLease(ctx, l), "releasing twice is a no-op")
			acquire(t, b, 0, "b")
		}},
		{"StaleReleaseNeverFreesTheNewHolder", func(t *testing.T, b *memory.Backend, c *fakeClock) {
			l := acquire(t, b, 0, "a")
			c.Advance(ttl)
			nl := acquire(t, b, 0, "b")
			require.NoError(t, b.ReleaseLease(ctx, l))
			_, err := b.AcquireLease(ctx, 0, "c", ttl)
			assert.ErrorIs(t, err, outbox.ErrLeaseHeld)
			_, err = b.FindPendingBatch(ctx, nl, 1)
			require.NoError(t, err)
		}},
		{"ReleaseOfSameOwnerOlderVersionIsNoop", func(t *testing.T, b *memory.Backend, c *fakeClock) {
			l := acquire(t, b, 0, "a")
			c.Advance(ttl)
			nl := acquire(t, b, 0, "a")
			require.NoError(t, b.ReleaseLease(ctx, l))
			_, err := b.FindPendingBatch(ctx, nl, 1)
			require.NoError(t, err)
		}},
		{"InvalidArguments", func(t *testing.T, b *memory.Backend, c *fakeClock) {
			for _, tc := range []struct {
				partition int
				owner     string
				ttl       time.Duration
			}{{-1, "a", ttl}, {2, "a", ttl}, {0, "", ttl}, {0, "a", 0}, {0, "a", -time.Second}} {
				_, err := b.AcquireLease(ctx, tc.partition, tc.owner, tc.ttl)
				assert.ErrorIs(t, err, outbox.ErrInvalidArgument, "%+v", tc)
			}
			l := acquire(t, b, 0, "a")
			_, err := b.RenewLease(ctx, l, 0)
			assert.ErrorIs(t, err, outbox.ErrInvalidArgument)
			assert.ErrorIs(t, b.ReleaseLease(ctx, outbox.Lease{Partition: 5, Owner: "a"}), outbox.ErrInvalidArgument)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, c := newBackend(t, 2)
			tc.run(t, b, c)
		})
	}
}

func TestFencing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	calls := []struct {
		name string
		call func(b *memory.Backend, l outbox.Lease, id string) error
	}{
		{"FindPendingBatch", func(b *memory.Backend, l outbox.Lease, id string) error {
			_, err := b.FindPendingBatch(ctx, l, 10)
			return err
		}},
		{"MarkSent", func(b *memory.Backend, l outbox.Lease, id string) error {
			return b.MarkSent(ctx, l, []string{id})
		}},
		{"MarkFailed", func(b *memory.Backend, l outbox.Lease, id string) error {
			return b.MarkFailed(ctx, l, []outbox.Failure{{ID: id, Error: "x", Park: true}})
		}},
		{"Release", func(b *memory.Backend, l outbox.Lease, id string) error {
			return b.Release(ctx, l, []string{id})
		}},
	}
	stale := []struct {
		name string
		// make returns a lease that is no longer live; the claims of the
		// original lease on "a" may have moved to the returned current
		// lease (zero Lease when nobody holds the partition).
		make func(t *testing.T, b *memory.Backend, c *fakeClock, l outbox.Lease) (staleLease, current outbox.Lease)
	}{
		{"Expired", func(t *testing.T, b *memory.Backend, c *fakeClock, l outbox.Lease) (outbox.Lease, outbox.Lease) {
			c.Advance(ttl)
			return l, outbox.Lease{}
		}},
		{"TakenOver", func(t *testing.T, b *memory.Backend, c *fakeClock, l outbox.Lease) (outbox.Lease, outbox.Lease) {
			c.Advance(ttl)
			return l, acquire(t, b, 0, "other")
		}},
		{"Released", func(t *testing.T, b *memory.Backend, c *fakeClock, l outbox.Lease) (outbox.Lease, outbox.Lease) {
			require.NoError(t, b.ReleaseLease(ctx, l))
			return l, outbox.Lease{}
		}},
		{"WrongOwner", func(t *testing.T, b *memory.Backend, c *fakeClock, l outbox.Lease) (outbox.Lease, outbox.Lease) {
			forged := l
			forged.Owner = "other"
			return forged, l
		}},
		{"WrongVersion", func(t *testing.T, b *memory.Backend, c *fakeClock, l outbox.Lease) (outbox.Lease, outbox.Lease) {
			forged := l
			forged.Version--
			return forged, l
		}},
		{"SameOwnerOlderVersion", func(t *testing.T, b *memory.Backend, c *fakeClock, l outbox.Lease) (outbox.Lease, outbox.Lease) {
			c.Advance(ttl)
			return l, acquire(t, b, 0, l.Owner)
		}},
	}
	for _, call := range calls {
		for _, s := range stale {
			t.Run(call.name+"/"+s.name, func(t *testing.T) {
				t.Parallel()
				b, c := newBackend(t, 1)
				appendAll(t, b, e("claimed", ""), e("waiting", ""))
				l := acquire(t, b, 0, "a")
				require.Equal(t, []string{"claimed"}, idsOf(fetch(t, b, l, 1)))
				before := stats(t, b)
				old, current := s.make(t, b, c, l)

				err := call.call(b, old, "claimed")
				require.ErrorIs(t, err, outbox.ErrLeaseLost)
				assert.Equal(t, before.Pending, stats(t, b).Pending)
				assert.Equal(t, before.Parked, stats(t, b).Parked)

				// Nothing changed: the current holder (or the next one)
				// still finds the entries where they were.
				if current == (outbox.Lease{}) {
					c.Advance(ttl)
					current = acquire(t, b, 0, "next")
				}
				got := idsOf(fetch(t, b, current, 10))
				if current.Version == l.Version {
					assert.Equal(t, []string{"waiting"}, got, "the live lease keeps its claim")
				} else {
					assert.Equal(t, []string{"claimed", "waiting"}, got, "the claim came back to the new holder")
				}
			})
		}
	}

	t.Run("EmptyInputSkipsTheLeaseCheck", func(t *testing.T) {
		t.Parallel()
		b, _ := newBackend(t, 1)
		bogus := outbox.Lease{Owner: "nobody", Version: 42}
		assert.NoError(t, b.MarkSent(ctx, bogus, nil))
		assert.NoError(t, b.MarkFailed(ctx, bogus, []outbox.Failure{}))
		assert.NoError(t, b.Release(ctx, bogus, []string{}))
	})

	t.Run("NonPositiveLimit", func(t *testing.T) {
		t.Parallel()
		b, _ := newBackend(t, 1)
		l := acquire(t, b, 0, "a")
		for _, limit := range []int{0, -1} {
			_, err := b.FindPendingBatch(ctx, l, limit)
			assert.ErrorIs(t, err, outbox.ErrInvalidArgument)
		}
	})

	t.Run("PartitionOutOfRange", func(t *testing.T) {
		t.Parallel()
		b, _ := newBackend(t, 1)
		_, err := b.FindPendingBatch(ctx, outbox.Lease{Partition: 1, Owner: "a", Version: 1}, 1)
		assert.ErrorIs(t, err, outbox.ErrInvalidArgument)
	})
}

func TestClaims(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("ClaimedEntriesAreNotFetchedAgain", func(t *testing.T) {
		t.Parallel()
		b, _ := newBackend(t, 1)
		appendAll(t, b, e("a", ""), e("b", ""))
		l := acquire(t, b, 0, "o")
		assert.Equal(t, []string{"a"}, idsOf(fetch(t, b, l, 1)))
		assert.Equal(t, []string{"b"}, idsOf(fetch(t, b, l, 10)))
		assert.Empty(t, fetch(t, b, l, 10))
		assert.Equal(t, int64(2), stats(t, b).Pending, "claimed entries are still pending")
	})

	t.Run("TakeoverReturnsClaimsInOrder", func(t *testing.T) {
		t.Parallel()
		b, c := newBackend(t, 1)
		appendAll(t, b, e("a", "k"), e("b", "k"), e("c", ""))
		l := acquire(t, b, 0, "o")
		batch := fetch(t, b, l, 2)
		require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "a", Error: "e1", Delay: 0}}))
		assert.Equal(t, []string{"a", "b"}, idsOf(batch))
		assert.Equal(t, []string{"a", "c"}, idsOf(fetch(t, b, l, 10)), "b is held back behind a")

		c.Advance(ttl) // the holder "crashed"
		nl := acquire(t, b, 0, "new")
		batch = fetch(t, b, nl, 10)
		assert.Equal(t, []string{"a", "c"}, idsOf(batch))
		assert.Equal(t, 1, batch[0].Attempts)
		assert.Equal(t, "e1", batch[0].LastError)
	})

	t.Run("ReleaseLeaseReturnsClaims", func(t *testing.T) {
		t.Parallel()
		b, _ := newBackend(t, 1)
		appendAll(t, b, e("a", ""), e("b", ""))
		l := acquire(t, b, 0, "o")
		require.Len(t, fetch(t, b, l, 10), 2)
		require.NoError(t, b.ReleaseLease(ctx, l))
		assert.Equal(t, []string{"a", "b"}, idsOf(fetch(t, b, acquire(t, b, 0, "p"), 10)))
	})

	t.Run("ExtendingKeepsClaims", func(t *testing.T) {
		t.Parallel()
		b, _ := newBackend(t, 1)
		appendAll(t, b, e("a", ""), e("b", ""))
		l := acquire(t, b, 0, "o")
		require.Len(t, fetch(t, b, l, 1), 1)
		l = acquire(t, b, 0, "o")
		assert.Equal(t, []string{"b"}, idsOf(fetch(t, b, l, 10)))
	})

	t.Run("ReleaseReturnsEntriesUnchanged", func(t *testing.T) {
		t.Parallel()
		b, _ := newBackend(t, 1)
		appendAll(t, b, e("a", ""), e("b", ""), e("c", ""))
		l := acquire(t, b, 0, "o")
		require.Len(t, fetch(t, b, l, 1), 1)
		require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "a", Error: "boom", Delay: 0}}))
		batch := fetch(t, b, l, 2)
		require.Equal(t, []string{"a", "b"}, idsOf(batch))
		require.NoError(t, b.Release(ctx, l, []string{"a", "b", "unknown", "c"}))
		batch = fetch(t, b, l, 10)
		assert.Equal(t, []string{"a", "b", "c"}, idsOf(batch))
		assert.Equal(t, 1, batch[0].Attempts)
		assert.Equal(t, "boom", batch[0].LastError)
	})
}

func TestHoldBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// failFirst appends a1 a2 a3 (key a) and b1 (key b), claims a1 and
	// marks it failed, due again at once.
	failFirst := func(t *testing.T) (*memory.Backend, *fakeClock, outbox.Lease) {
		b, c := newBackend(t, 1)
		appendAll(t, b, e("a1", "a"), e("a2", "a"), e("b1", "b"), e("a3", "a"), e("u1", ""))
		l := acquire(t, b, 0, "o")
		require.Equal(t, []string{"a1"}, idsOf(fetch(t, b, l, 1)))
		require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "a1", Error: "boom", Delay: time.Minute}}))
		return b, c, l
	}

	t.Run("FailingEntryHoldsBackOnlyItsKey", func(t *testing.T) {
		t.Parallel()
		b, _, l := failFirst(t)
		assert.Equal(t, []string{"b1", "u1"}, idsOf(fetch(t, b, l, 10)))
	})

	t.Run("HeldBackEntriesDoNotStarveOthers", func(t *testing.T) {
		t.Parallel()
		b, _, l := failFirst(t)
		assert.Equal(t, []string{"b1"}, idsOf(fetch(t, b, l, 1)))
		assert.Equal(t, []string{"u1"}, idsOf(fetch(t, b, l, 1)))
		assert.Empty(t, fetch(t, b, l, 1))
	})

	t.Run("RetryDueReturnsTheFailingEntryFirst", func(t *testing.T) {
		t.Parallel()
		b, c, l := failFirst(t)
		require.Len(t, fetch(t, b, l, 10), 2)
		c.Advance(time.Minute)
		batch := fetch(t, b, l, 10)
		assert.Equal(t, []string{"a1"}, idsOf(batch), "a2 and a3 stay held back while a1 is unsent")
		require.NoError(t, b.MarkSent(ctx, l, []string{"a1"}))
		assert.Equal(t, []string{"a2", "a3"}, idsOf(fetch(t, b, l, 10)))
	})

	releases := []struct {
		name string
		do   func(t *testing.T, b *memory.Backend, c *fakeClock, l outbox.Lease)
	}{
		{"Sent", func(t *testing.T, b *memory.Backend, c *fakeClock, l outbox.Lease) {
			c.Advance(time.Minute)
			require.Equal(t, []string{"a1"}, idsOf(fetch(t, b, l, 1)))
			require.NoError(t, b.MarkSent(ctx, l, []string{"a1"}))
		}},
		{"Parked", func(t *testing.T, b *memory.Backend, c *fakeClock, l outbox.Lease) {
			c.Advance(time.Minute)
			require.Equal(t, []string{"a1"}, idsOf(fetch(t, b, l, 1)))
			require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "a1", Error: "fatal", Park: true}}))
		}},
		{"Cancelled", func(t *testing.T, b *memory.Backend, c *fakeClock, l outbox.Lease) {
			require.NoError(t, b.Cancel(ctx, "a1"))
			c.Advance(time.Minute)
		}},
	}
	for _, r := range releases {
		t.Run("ReleasedWhenFailingEntryIs"+r.name, func(t *testing.T) {
			t.Parallel()
			b, c, l := failFirst(t)
			require.Equal(t, []string{"b1", "u1"}, idsOf(fetch(t, b, l, 10))) // a2, a3 set aside
			r.do(t, b, c, l)
			assert.Equal(t, []string{"a2", "a3"}, idsOf(fetch(t, b, l, 10)))
		})
	}

	t.Run("EarlierEntryOfTheKeyIsNotHeldBack", func(t *testing.T) {
		t.Parallel()
		b, c := newBackend(t, 1)
		appendAll(t, b,
			outbox.Entry{ID: "early", Topic: "t", Key: "a", NotBefore: c.Now().Add(time.Minute)},
			e("late", "a"))
		l := acquire(t, b, 0, "o")
		require.Equal(t, []string{"late"}, idsOf(fetch(t, b, l, 10)))
		require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "late", Delay: time.Hour}}))
		c.Advance(time.Minute)
		assert.Equal(t, []string{"early"}, idsOf(fetch(t, b, l, 10)), "only later entries are held back")
	})

	t.Run("TwoFailingEntriesOfOneKey", func(t *testing.T) {
		t.Parallel()
		b, _ := newBackend(t, 1)
		appendAll(t, b, e("a1", "a"), e("a2", "a"), e("a3", "a"))
		l := acquire(t, b, 0, "o")
		require.Len(t, fetch(t, b, l, 2), 2)
		require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{
			{ID: "a1", Delay: 0}, {ID: "a2", Delay: 0},
		}))
		assert.Equal(t, []string{"a1"}, idsOf(fetch(t, b, l, 10)))
		require.NoError(t, b.MarkSent(ctx, l, []string{"a1"}))
		assert.Equal(t, []string{"a2"}, idsOf(fetch(t, b, l, 10)), "a2 still fails and holds back a3")
		require.NoError(t, b.MarkSent(ctx, l, []string{"a2"}))
		assert.Equal(t, []string{"a3"}, idsOf(fetch(t, b, l, 10)))
	})

	t.Run("RequeuedEntryDoesNotHoldBack", func(t *testing.T) {
		t.Parallel()
		b, c := newBackend(t, 1)
		appendAll(t, b, e("a1", "a"), e("a2", "a"))
		l := acquire(t, b, 0, "o")
		require.Len(t, fetch(t, b, l, 1), 1)
		require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "a1", Park: true}}))
		c.Advance(time.Second)
		n, err := b.Requeue(ctx, "a1")
		require.NoError(t, err)
		require.Equal(t, 1, n)
		// a2 was due before a1 was requeued (due now), so it comes first.
		assert.Equal(t, []string{"a2", "a1"}, idsOf(fetch(t, b, l, 10)))
	})

	t.Run("HeldBackEntriesComeBackAfterTakeover", func(t *testing.T) {
		t.Parallel()
		b, c, l := failFirst(t)
		require.Len(t, fetch(t, b, l, 10), 2) // b1 and u1 claimed, a2 and a3 set aside
		c.Advance(ttl)
		nl := acquire(t, b, 0, "new")
		c.Advance(time.Minute)
		batch := fetch(t, b, nl, 10)
		require.Equal(t, []string{"b1", "u1", "a1"}, idsOf(batch))
		require.NoError(t, b.MarkSent(ctx, nl, idsOf(batch)))
		assert.Equal(t, []string{"a2", "a3"}, idsOf(fetch(t, b, nl, 10)))
	})
}

func TestMarkSent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, _ := newBackend(t, 2)
	k0, k1 := keyIn(0, 2), keyIn(1, 2)
	appendAll(t, b, e("p0", k0), e("p1", k1))
	l0 := acquire(t, b, 0, "o")
	require.Len(t, fetch(t, b, l0, 10), 1)
	require.NoError(t, b.MarkSent(ctx, l0, []string{"p0", "p0", "unknown", "p1"}))
	require.NoError(t, b.MarkSent(ctx, l0, []string{"p0"}), "idempotent")
	assert.Equal(t, int64(1), stats(t, b).Pending, "p1 is of another partition and stays")
	assert.Equal(t, []string{"p1"}, idsOf(fetch(t, b, acquire(t, b, 1, "o"), 10)))
}

// keyIn returns a key that maps to partition p of n.
func keyIn(p, n int) string {
	for i := 0; ; i++ {
		k := fmt.Sprintf("key-%d", i)
		if outbox.PartitionOf(k, n) == p {
			return k
		}
	}
}

func TestMarkFailed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("RetryCountsAndReschedules", func(t *testing.T) {
		t.Parallel()
		b, c := newBackend(t, 1)
		appendAll(t, b, e("a", ""))
		l := acquire(t, b, 0, "o")
		for i := 1; i <= 3; i++ {
			batch := fetch(t, b, l, 1)
			require.Len(t, batch, 1)
			require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "a", Error: fmt.Sprint("err", i), Delay: time.Second}}))
			assert.Empty(t, fetch(t, b, l, 1), "not due before its retry delay passed")
			c.Advance(time.Second)
		}
		batch := fetch(t, b, l, 1)
		require.Len(t, batch, 1)
		assert.Equal(t, 3, batch[0].Attempts)
		assert.Equal(t, "err3", batch[0].LastError)
	})

	t.Run("ParkIsTerminal", func(t *testing.T) {
		t.Parallel()
		b, c := newBackend(t, 1)
		appendAll(t, b, e("a", ""))
		l := acquire(t, b, 0, "o")
		require.Len(t, fetch(t, b, l, 1), 1)
		require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "a", Error: "poison", Park: true, Delay: 0}}))
		c.Advance(time.Hour)
		assert.Empty(t, fetch(t, b, l, 10))
		s := stats(t, b)
		assert.Equal(t, outbox.Stats{Parked: 1}, s)
		parked, err := b.Parked(ctx, "", 10)
		require.NoError(t, err)
		require.Len(t, parked, 1)
		assert.Equal(t, 1, parked[0].Attempts)
		assert.Equal(t, "poison", parked[0].LastError)

		// A later failure report for a parked entry is ignored.
		require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "a", Error: "late", Delay: 0}}))
		assert.Empty(t, fetch(t, b, l, 10))
		parked, err = b.Parked(ctx, "", 10)
		require.NoError(t, err)
		assert.Equal(t, "poison", parked[0].LastError)
	})

	t.Run("NeverResurrectsASentEntry", func(t *testing.T) {
		t.Parallel()
		b, _ := newBackend(t, 1)
		appendAll(t, b, e("a", ""))
		l := acquire(t, b, 0, "o")
		require.Len(t, fetch(t, b, l, 1), 1)
		require.NoError(t, b.MarkSent(ctx, l, []string{"a"}))
		require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "a", Delay: 0}, {ID: "b", Park: true}}))
		assert.Equal(t, outbox.Stats{}, stats(t, b))
	})

	t.Run("LongErrorIsKept", func(t *testing.T) {
		t.Parallel()
		b, _ := newBackend(t, 1)
		appendAll(t, b, e("a", ""))
		l := acquire(t, b, 0, "o")
		require.Len(t, fetch(t, b, l, 1), 1)
		long := string(make([]byte, 4096))
		require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "a", Error: long, Park: true}}))
		parked, err := b.Parked(ctx, "", 1)
		require.NoError(t, err)
		assert.Len(t, parked[0].LastError, 4096)
	})
}

func TestCancel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name    string
		setup   func(t *testing.T, b *memory.Backend, c *fakeClock, l outbox.Lease)
		wantErr error
	}{
		{"Pending", func(t *testing.T, b *memory.Backend, c *fakeClock, l outbox.Lease) {}, nil},
		{"Claimed", func(t *testing.T, b *memory.Backend, c *fakeClock, l outbox.Lease) {
			require.Len(t, fetch(t, b, l, 1), 1)
		}, nil},
		{"Parked", func(t *testing.T, b *memory.Backend, c *fakeClock, l outbox.Lease) {
			require.Len(t, fetch(t, b, l, 1), 1)
			require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "x", Park: true}}))
		}, nil},
		{"Retrying", func(t *testing.T, b *memory.Backend, c *fakeClock, l outbox.Lease) {
			require.Len(t, fetch(t, b, l, 1), 1)
			require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "x", Delay: time.Hour}}))
			require.Empty(t, fetch(t, b, l, 10), "y is held back behind x")
		}, nil},
		{"Sent", func(t *testing.T, b *memory.Backend, c *fakeClock, l outbox.Lease) {
			require.Len(t, fetch(t, b, l, 1), 1)
			require.NoError(t, b.MarkSent(ctx, l, []string{"x"}))
		}, outbox.ErrNotFound},
		{"AlreadyCancelled", func(t *testing.T, b *memory.Backend, c *fakeClock, l outbox.Lease) {
			require.NoError(t, b.Cancel(ctx, "x"))
		}, outbox.ErrNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, c := newBackend(t, 1)
			appendAll(t, b, e("x", "k"), e("y", "k"))
			l := acquire(t, b, 0, "o")
			tc.setup(t, b, c, l)
			err := b.Cancel(ctx, "x")
			if tc.wantErr != nil {
				assert.ErrorIs(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.ErrorIs(t, b.Cancel(ctx, "x"), outbox.ErrNotFound)
			// x is gone for good: a late outcome is ignored, and the next
			// holder sees only y.
			require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "x", Delay: 0}}))
			c.Advance(2 * time.Hour)
			assert.Equal(t, []string{"y"}, idsOf(fetch(t, b, acquire(t, b, 0, "next"), 10)))
			assert.Equal(t, int64(0), stats(t, b).Parked)
		})
	}

	t.Run("Scheduled", func(t *testing.T) {
		t.Parallel()
		b, c := newBackend(t, 1)
		appendAll(t, b, outbox.Entry{ID: "s", Topic: "t", NotBefore: c.Now().Add(time.Hour)})
		require.NoError(t, b.Cancel(ctx, "s"))
		c.Advance(2 * time.Hour)
		assert.Empty(t, fetch(t, b, acquire(t, b, 0, "o"), 10))
	})

	t.Run("NeverAppended", func(t *testing.T) {
		t.Parallel()
		b, _ := newBackend(t, 1)
		assert.ErrorIs(t, b.Cancel(ctx, "nope"), outbox.ErrNotFound)
	})
}

func TestStats(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, c := newBackend(t, 2)
	t0 := c.Now()
	assert.Equal(t, outbox.Stats{}, stats(t, b))

	k0, k1 := keyIn(0, 2), keyIn(1, 2)
	appendAll(t, b, e("d1", k0), e("d2", k1), e("d3", k0))
	c.Advance(time.Second)
	appendAll(t, b, e("d4", k1))
	appendAll(t, b, outbox.Entry{ID: "s1", Topic: "t", Key: k0, NotBefore: t0.Add(time.Hour)})
	s := stats(t, b)
	assert.Equal(t, outbox.Stats{Pending: 5, Due: 4, OldestDue: t0}, s)

	// Claimed, held back, retrying and parked entries.
	l0 := acquire(t, b, 0, "o")
	require.Equal(t, []string{"d1"}, idsOf(fetch(t, b, l0, 1)))
	require.NoError(t, b.MarkFailed(ctx, l0, []outbox.Failure{{ID: "d1", Delay: t0.Add(10 * time.Minute).Sub(c.Now())}}))
	require.Empty(t, fetch(t, b, l0, 10)) // d3 is held back
	l1 := acquire(t, b, 1, "o")
	require.Equal(t, []string{"d2", "d4"}, idsOf(fetch(t, b, l1, 10))) // claimed
	require.NoError(t, b.MarkFailed(ctx, l1, []outbox.Failure{{ID: "d4", Park: true}}))

	s = stats(t, b)
	// Pending: d1 (retrying, not due), d2 (claimed, due), d3 (held, due),
	// s1 (scheduled). Due: d2, d3.
	assert.Equal(t, outbox.Stats{Pending: 4, Due: 2, Parked: 1, OldestDue: t0}, s)

	c.Advance(2 * time.Hour)
	s = stats(t, b)
	assert.Equal(t, outbox.Stats{Pending: 4, Due: 4, Parked: 1, OldestDue: t0}, s)
}

func TestStatsDueOverManyEntries(t *testing.T) {
	t.Parallel()
	b, c := newBackend(t, 1)
	t0 := c.Now()
	var entries []outbox.Entry
	for i := range 1000 {
		// Every third entry is scheduled in the future, in a shuffled
		// order, so the heap holds due and scheduled entries mixed.
		en := e(fmt.Sprint(i), "")
		if i%3 == 0 {
			en.NotBefore = t0.Add(time.Duration(1+(i*7919)%1000) * time.Second)
		}
		entries = append(entries, en)
	}
	appendAll(t, b, entries...)
	assert.Equal(t, outbox.Stats{Pending: 1000, Due: 666, OldestDue: t0}, stats(t, b))
	c.Advance(500 * time.Second)
	s := stats(t, b)
	want := int64(666)
	for i := 0; i < 1000; i += 3 {
		if 1+(i*7919)%1000 <= 500 {
			want++
		}
	}
	assert.Equal(t, want, s.Due)
}

func TestParkedAndRequeue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, c := newBackend(t, 1)
	ids := []string{"e", "b", "d", "a", "c"}
	for _, id := range ids {
		appendAll(t, b, e(id, ""))
	}
	appendAll(t, b, e("pending", ""))
	l := acquire(t, b, 0, "o")
	require.Len(t, fetch(t, b, l, 5), 5)
	var failures []outbox.Failure
	for _, id := range ids {
		failures = append(failures, outbox.Failure{ID: id, Error: "err-" + id, Park: true})
	}
	require.NoError(t, b.MarkFailed(ctx, l, failures))

	page := func(after string, limit int) []string {
		got, err := b.Parked(ctx, after, limit)
		require.NoError(t, err)
		return idsOf(got)
	}
	assert.Equal(t, []string{"a", "b"}, page("", 2))
	assert.Equal(t, []string{"c", "d"}, page("b", 2))
	assert.Equal(t, []string{"e"}, page("d", 2))
	assert.Empty(t, page("e", 2))
	assert.Equal(t, []string{"c", "d", "e"}, page("bb", 10), "after need not be a parked ID")
	_, err := b.Parked(ctx, "", 0)
	assert.ErrorIs(t, err, outbox.ErrInvalidArgument)

	c.Advance(time.Minute)
	n, err := b.Requeue(ctx, "d", "b", "b", "pending", "unknown")
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	assert.Equal(t, []string{"a", "c", "e"}, page("", 10))
	s := stats(t, b)
	assert.Equal(t, outbox.Stats{Pending: 3, Due: 3, Parked: 3, OldestDue: c.Now().Add(-time.Minute)}, s)

	batch := fetch(t, b, l, 10)
	// "pending" has been due since the start; b and d are due now, in
	// append order (e, b, d, a, c).
	assert.Equal(t, []string{"pending", "b", "d"}, idsOf(batch))
	assert.Equal(t, 0, batch[1].Attempts)
	assert.Equal(t, "err-b", batch[1].LastError)

	n, err = b.Requeue(ctx)
	require.NoError(t, err)
	assert.Equal(t, 0, n)
}

func TestRequeueOrdersAsIfAppendedNow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, _ := newBackend(t, 1) // the clock stands still: every entry is due at one instant
	appendAll(t, b, e("a1", "a"), e("a2", "a"), e("a3", "a"), e("a4", "a"))
	l := acquire(t, b, 0, "o")
	require.Len(t, fetch(t, b, l, 2), 2)
	require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "a1", Park: true}, {ID: "a2", Park: true}}))
	n, err := b.Requeue(ctx, "a2", "a1")
	require.NoError(t, err)
	require.Equal(t, 2, n)
	appendAll(t, b, e("a5", "a"))
	// a3 and a4 were already due; a1 and a2 keep their order among
	// themselves; a5 was appended after the requeue.
	assert.Equal(t, []string{"a3", "a4", "a1", "a2", "a5"}, idsOf(fetch(t, b, l, 10)))
}

func TestNotifications(t *testing.T) {
	t.Parallel()

	received := func(ch <-chan int) (int, bool) {
		select {
		case p, ok := <-ch:
			return p, ok
		default:
			return 0, false
		}
	}

	t.Run("SignalledOnCommitOfNewEntries", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b, _ := newBackend(t, 1)
		ch1, err := b.Notifications(ctx)
		require.NoError(t, err)
		ch2, err := b.Notifications(ctx)
		require.NoError(t, err)

		tx := b.Begin()
		require.NoError(t, b.AppendInTx(ctx, tx, e("a", "")))
		_, got := received(ch1)
		assert.False(t, got, "nothing before commit")
		require.NoError(t, tx.Commit())
		_, got = received(ch1)
		assert.True(t, got)
		_, got = received(ch2)
		assert.True(t, got, "every subscriber is signalled")
	})

	t.Run("CarriesThePartitions", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b, _ := newBackend(t, 8)
		ch, err := b.Notifications(ctx)
		require.NoError(t, err)
		keys := []string{"a", "b", "c", "a"}
		var want []int
		for _, k := range keys {
			if p := outbox.PartitionOf(k, 8); !slices.Contains(want, p) {
				want = append(want, p)
			}
		}
		tx := b.Begin()
		for i, k := range keys {
			require.NoError(t, b.AppendInTx(ctx, tx, e(fmt.Sprint("e", i), k)))
		}
		require.NoError(t, tx.Commit())
		var got []int
		for {
			p, ok := received(ch)
			if !ok {
				break
			}
			got = append(got, p)
		}
		assert.Equal(t, want, got, "one value per partition appended to, in first-append order")
	})

	t.Run("SlowReceiverMissesValuesPastTheBuffer", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b, _ := newBackend(t, 1)
		ch, err := b.Notifications(ctx)
		require.NoError(t, err)
		for i := range 300 { // the backend never blocks
			appendAll(t, b, e(fmt.Sprint("e", i), ""))
		}
		n := 0
		for {
			if _, ok := received(ch); !ok {
				break
			}
			n++
		}
		assert.Equal(t, 256, n, "the buffer holds 256 values")
	})

	t.Run("NoSignalWithoutNewEntries", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b, _ := newBackend(t, 1)
		appendAll(t, b, e("a", ""))
		ch, err := b.Notifications(ctx)
		require.NoError(t, err)
		appendAll(t, b, e("a", "")) // duplicate only
		tx := b.Begin()
		require.NoError(t, b.AppendInTx(ctx, tx, e("b", "")))
		require.NoError(t, tx.Rollback())
		require.NoError(t, b.Begin().Commit())
		_, got := received(ch)
		assert.False(t, got)
	})

	t.Run("ClosedWhenContextIsDone", func(t *testing.T) {
		t.Parallel()
		b, _ := newBackend(t, 1)
		ctx, cancel := context.WithCancel(t.Context())
		ch, err := b.Notifications(ctx)
		require.NoError(t, err)
		cancel()
		watchdog := time.After(10 * time.Second)
	drain:
		for {
			select {
			case _, ok := <-ch:
				if !ok {
					break drain
				}
			case <-watchdog:
				t.Fatal("the channel was not closed after its context was cancelled")
			}
		}
		appendAll(t, b, e("a", "")) // no send on the closed channel
	})

	t.Run("ClosedOnClose", func(t *testing.T) {
		t.Parallel()
		b, _ := newBackend(t, 1)
		ch, err := b.Notifications(t.Context())
		require.NoError(t, err)
		require.NoError(t, b.Close())
		select {
		case _, ok := <-ch:
			assert.False(t, ok, "Close closes the channel")
		default:
			t.Fatal("Close returned and the channel is still open")
		}
	})
}

func TestClose(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, _ := newBackend(t, 1)
	appendAll(t, b, e("a", ""))
	l := acquire(t, b, 0, "o")
	tx := b.Begin()
	require.NoError(t, b.AppendInTx(ctx, tx, e("b", "")))

	require.NoError(t, b.Close())
	require.NoError(t, b.Close(), "idempotent")
	assert.Equal(t, 1, b.Partitions())

	calls := map[string]func() error{
		"Commit":      tx.Commit,
		"AppendInTx":  func() error { return b.AppendInTx(ctx, b.Begin(), e("c", "")) },
		"AppendEmpty": func() error { return b.AppendInTx(ctx, b.Begin()) },
		"Append":      func() error { return b.Append(ctx, e("c", "")) },
		"AcquireLease": func() error {
			_, err := b.AcquireLease(ctx, 0, "o", ttl)
			return err
		},
		"RenewLease": func() error {
			_, err := b.RenewLease(ctx, l, ttl)
			return err
		},
		"ReleaseLease": func() error { return b.ReleaseLease(ctx, l) },
		"FindPendingBatch": func() error {
			_, err := b.FindPendingBatch(ctx, l, 1)
			return err
		},
		"MarkSent":      func() error { return b.MarkSent(ctx, l, []string{"a"}) },
		"MarkSentEmpty": func() error { return b.MarkSent(ctx, l, nil) },
		"MarkFailed":    func() error { return b.MarkFailed(ctx, l, []outbox.Failure{{ID: "a"}}) },
		"Release":       func() error { return b.Release(ctx, l, []string{"a"}) },
		"Cancel":        func() error { return b.Cancel(ctx, "a") },
		"Stats": func() error {
			_, err := b.Stats(ctx)
			return err
		},
		"Parked": func() error {
			_, err := b.Parked(ctx, "", 1)
			return err
		},
		"Requeue": func() error {
			_, err := b.Requeue(ctx, "a")
			return err
		},
		"Notifications": func() error {
			_, err := b.Notifications(ctx)
			return err
		},
	}
	for name, call := range calls {
		assert.ErrorIs(t, call(), outbox.ErrClosed, name)
	}
}

func TestCanceledContext(t *testing.T) {
	t.Parallel()
	b, _ := newBackend(t, 1)
	appendAll(t, b, e("a", ""))
	l := acquire(t, b, 0, "o")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()

	calls := map[string]func() error{
		"AppendInTx": func() error { return b.AppendInTx(ctx, b.Begin(), e("c", "")) },
		"AcquireLease": func() error {
			_, err := b.AcquireLease(ctx, 0, "o", ttl)
			return err
		},
		"FindPendingBatch": func() error {
			_, err := b.FindPendingBatch(ctx, l, 1)
			return err
		},
		"MarkSent": func() error { return b.MarkSent(ctx, l, []string{"a"}) },
		"Cancel":   func() error { return b.Cancel(ctx, "a") },
		"Stats": func() error {
			_, err := b.Stats(ctx)
			return err
		},
	}
	for name, call := range calls {
		assert.ErrorIs(t, call(), context.Canceled, name)
	}
	assert.Equal(t, int64(1), stats(t, b).Pending, "nothing was applied")
}

// TestConcurrentRelays runs appenders and competing relays on several
// partitions at once (under -race) and checks that every entry is
// delivered exactly once (no lease is lost: the clock does not move) and in
// per-key append order.
func TestConcurrentRelays(t *testing.T) {
	t.Parallel()
	const (
		partitions = 4
		appenders  = 4
		perAppend  = 500
		keys       = 16
		total      = appenders * perAppend
	)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // watchdog
	defer cancel()
	b, _ := newBackend(t, partitions)

	var wg sync.WaitGroup
	for a := range appenders {
		wg.Go(func() {
			for i := range perAppend {
				key := fmt.Sprintf("k%d", (a*perAppend+i)%keys)
				// The sequence number in the ID is per appender and key,
				// so order is checkable per (appender, key).
				id := fmt.Sprintf("%d/%s/%06d", a, key, i)
				if err := b.Append(ctx, outbox.Entry{ID: id, Topic: "t", Key: key}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}

	var mu sync.Mutex
	delivered := map[string]int{}
	var order []string
	for r := range 3 {
		owner := fmt.Sprintf("relay-%d", r)
		wg.Go(func() {
			for ctx.Err() == nil {
				mu.Lock()
				done := len(delivered) == total
				mu.Unlock()
				if done {
					return
				}
				for p := range partitions {
					l, err := b.AcquireLease(ctx, p, owner, time.Hour)
					if errors.Is(err, outbox.ErrLeaseHeld) {
						continue
					}
					if err != nil {
						t.Error(err)
						return
					}
					batch, err := b.FindPendingBatch(ctx, l, 17)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					for _, en := range batch {
						delivered[en.ID]++
						order = append(order, en.ID)
					}
					mu.Unlock()
					if err := b.MarkSent(ctx, l, idsOf(batch)); err != nil {
						t.Error(err)
						return
					}
					if err := b.ReleaseLease(ctx, l); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	require.NoError(t, ctx.Err(), "watchdog fired: relays did not finish")
	require.Len(t, delivered, total)
	for id, n := range delivered {
		assert.Equal(t, 1, n, id)
	}
	// Per (appender, key) the IDs were delivered in increasing order.
	last := map[string]string{}
	for _, id := range order {
		prefix := id[:strings.LastIndexByte(id, '/')]
		assert.Less(t, last[prefix], id, "out of order")
		last[prefix] = id
	}
	assert.Equal(t, outbox.Stats{}, stats(t, b))
}

func BenchmarkFindPendingBatch(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{1_000, 100_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			be := memory.New(memory.Options{})
			defer be.Close()
			entries := make([]outbox.Entry, n)
			for i := range entries {
				entries[i] = outbox.Entry{Topic: "t", Key: fmt.Sprint(i % 100)}
			}
			if err := be.Append(ctx, entries...); err != nil {
				b.Fatal(err)
			}
			l, err := be.AcquireLease(ctx, 0, "bench", time.Hour)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				batch, err := be.FindPendingBatch(ctx, l, 100)
				if err != nil {
					b.Fatal(err)
				}
				if err := be.Release(ctx, l, idsOf(batch)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFindPendingBatchBehindFailingKey measures fetches when half of
// 100k entries sit behind a failing entry of one key: after the first
// fetch sets them aside, they cost nothing per fetch.
func BenchmarkFindPendingBatchBehindFailingKey(b *testing.B) {
	ctx := context.Background()
	be := memory.New(memory.Options{})
	defer be.Close()
	const n = 100_000
	entries := make([]outbox.Entry, n)
	for i := range entries {
		key := "hot"
		if i%2 == 1 {
			key = fmt.Sprint(i % 100)
		}
		entries[i] = outbox.Entry{Topic: "t", Key: key}
	}
	if err := be.Append(ctx, entries...); err != nil {
		b.Fatal(err)
	}
	l, err := be.AcquireLease(ctx, 0, "bench", time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	first, err := be.FindPendingBatch(ctx, l, 1)
	if err != nil || len(first) != 1 || first[0].Key != "hot" {
		b.Fatalf("first fetch: %v, %v", first, err)
	}
	err = be.MarkFailed(ctx, l, []outbox.Failure{{ID: first[0].ID, Delay: time.Hour}})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		batch, err := be.FindPendingBatch(ctx, l, 100)
		if err != nil {
			b.Fatal(err)
		}
		if len(batch) != 100 || batch[0].Key == "hot" {
			b.Fatalf("got %d entries, first key %q", len(batch), batch[0].Key)
		}
		if err := be.Release(ctx, l, idsOf(batch)); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppend(b *testing.B) {
	ctx := context.Background()
	be := memory.New(memory.Options{Partitions: 4})
	defer be.Close()
	payload := make([]byte, 256)
	for b.Loop() {
		tx := be.Begin()
		if err := be.AppendInTx(ctx, tx, outbox.Entry{Topic: "t", Key: "k", Payload: payload}); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
}
