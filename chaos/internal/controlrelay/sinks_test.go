package controlrelay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
)

// fakeSink records what it is handed and fails the IDs in fail.
type fakeSink struct {
	mu     sync.Mutex
	calls  [][]outbox.Entry
	fail   map[string]bool
	closed bool
	order  bool // KeepsKeyOrder
}

func (f *fakeSink) Publish(_ context.Context, msgs []outbox.Entry) []error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, slices.Clone(msgs))
	errs := make([]error, len(msgs))
	for i, m := range msgs {
		if f.fail[m.ID] {
			errs[i] = errors.New("failed " + m.ID)
		}
	}
	return errs
}

func (f *fakeSink) LandingBound() time.Duration { return 7 * time.Second }
func (f *fakeSink) KeepsKeyOrder() bool         { return f.order }
func (f *fakeSink) Close() error                { f.closed = true; return nil }

// batch returns n entries of topic t over keys k0..k{keys-1}, round robin,
// IDs in order.
func batch(n, keys int) []outbox.Entry {
	out := make([]outbox.Entry, n)
	for i := range out {
		out[i] = outbox.Entry{ID: fmt.Sprintf("e%03d", i), Topic: "t", Key: fmt.Sprintf("k%d", i%keys)}
	}
	return out
}

// keyOrderBroken reports whether some key's entries in msgs are not in
// ascending ID order.
func keyOrderBroken(msgs []outbox.Entry) bool {
	last := map[string]string{}
	for _, m := range msgs {
		if m.Key == "" {
			continue
		}
		if prev, ok := last[m.Key]; ok && m.ID < prev {
			return true
		}
		last[m.Key] = m.ID
	}
	return false
}

func TestShuffleSinkMapsResultsBackToTheCallersOrder(t *testing.T) {
	t.Parallel()
	msgs := batch(40, 3)
	inner := &fakeSink{fail: map[string]bool{"e001": true, "e017": true, "e039": true}}
	s := newShuffleSink(inner, rand.New(rand.NewPCG(1, 2)))
	errs := s.Publish(context.Background(), msgs)
	require.Len(t, errs, len(msgs))
	for i, m := range msgs {
		if inner.fail[m.ID] {
			require.EqualError(t, errs[i], "failed "+m.ID, "error %d", i)
		} else {
			require.NoError(t, errs[i], "error %d", i)
		}
	}
	require.Len(t, inner.calls, 1)
	require.ElementsMatch(t, msgs, inner.calls[0], "every message handed on once")
	require.True(t, keyOrderBroken(inner.calls[0]))
	require.True(t, s.KeepsKeyOrder(), "it must claim key order to get several entries of a key per call")
	require.Equal(t, 7*time.Second, s.LandingBound())
	require.NoError(t, s.Close())
	require.True(t, inner.closed)
}

// A shuffle that happens to keep every key's order is corrected: with two
// entries of one key among a few others, a plain shuffle keeps their order
// half the time.
func TestShuffleSinkReordersEveryCallWithSeveralEntriesOfAKey(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 2000 {
		n := 2 + trial%6
		msgs := make([]outbox.Entry, n)
		for i := range msgs {
			msgs[i] = outbox.Entry{ID: fmt.Sprintf("e%d", i), Topic: "t", Key: fmt.Sprintf("other%d", i)}
		}
		// Two entries of key "hot" at random positions, in ID order.
		a := rng.IntN(n - 1)
		b := a + 1 + rng.IntN(n-1-a)
		msgs[a].Key, msgs[b].Key = "hot", "hot"
		order, multi := perm(msgs, rng)
		require.True(t, multi)
		handed := make([]outbox.Entry, n)
		for i, j := range order {
			handed[i] = msgs[j]
		}
		require.True(t, keyOrderBroken(handed), "trial %d: %v", trial, order)
		sorted := slices.Clone(order)
		slices.Sort(sorted)
		for i := range sorted {
			require.Equal(t, i, sorted[i], "trial %d: not a permutation: %v", trial, order)
		}
	}
}

func TestShuffleSinkSameKeyOnOtherTopicsOrEmptyKeysIsNotMulti(t *testing.T) {
	t.Parallel()
	msgs := []outbox.Entry{
		{ID: "a", Topic: "t1", Key: "k"},
		{ID: "b", Topic: "t2", Key: "k"},
		{ID: "c", Topic: "t1"},
		{ID: "d", Topic: "t1"},
	}
	_, multi := perm(msgs, rand.New(rand.NewPCG(5, 6)))
	require.False(t, multi)
}

func TestLossySink(t *testing.T) {
	t.Parallel()
	t.Run("DropsNothingAtZero", func(t *testing.T) {
		t.Parallel()
		inner := &fakeSink{order: true}
		s := newLossySink(inner, 0, rand.New(rand.NewPCG(1, 1)))
		msgs := batch(50, 5)
		require.Equal(t, make([]error, 50), s.Publish(context.Background(), msgs))
		require.Equal(t, [][]outbox.Entry{msgs}, inner.calls)
		require.Zero(t, s.dropped.Load())
		require.True(t, s.KeepsKeyOrder(), "passed on from the inner sink")
		require.Equal(t, 7*time.Second, s.LandingBound())
	})
	t.Run("DropsEverythingAtOneAndReportsItPublished", func(t *testing.T) {
		t.Parallel()
		inner := &fakeSink{}
		s := newLossySink(inner, 1, rand.New(rand.NewPCG(1, 1)))
		require.Equal(t, make([]error, 20), s.Publish(context.Background(), batch(20, 5)))
		require.Empty(t, inner.calls, "nothing handed on")
		require.EqualValues(t, 20, s.dropped.Load())
		require.False(t, s.KeepsKeyOrder(), "passed on from the inner sink")
	})
	t.Run("KeepsOrderAndMapsErrorsOfTheRest", func(t *testing.T) {
		t.Parallel()
		msgs := batch(200, 4)
		fail := map[string]bool{}
		for _, m := range msgs[:100] {
			fail[m.ID] = true
		}
		inner := &fakeSink{fail: fail}
		s := newLossySink(inner, 0.3, rand.New(rand.NewPCG(7, 8)))
		errs := s.Publish(context.Background(), msgs)
		require.Len(t, inner.calls, 1)
		handed := inner.calls[0]
		require.EqualValues(t, len(msgs)-len(handed), s.dropped.Load())
		require.Greater(t, s.dropped.Load(), int64(20))
		require.Less(t, s.dropped.Load(), int64(100))
		require.True(t, slices.IsSortedFunc(handed, func(a, b outbox.Entry) int { return cmp.Compare(a.ID, b.ID) }), "handed on in the caller's order")
		kept := map[string]bool{}
		for _, m := range handed {
			kept[m.ID] = true
		}
		for i, m := range msgs {
			if kept[m.ID] && fail[m.ID] {
				require.EqualError(t, errs[i], "failed "+m.ID)
			} else {
				require.NoError(t, errs[i], "dropped or published: reported published")
			}
		}
		require.NoError(t, s.Close())
		require.True(t, inner.closed)
	})
}

// The drops are spread, not drawn: 1,000 messages at 0.1% lose exactly
// one whatever the seed, so the control never passes the checker by luck.
func TestLossySinkDropsOneInEveryThousand(t *testing.T) {
	t.Parallel()
	for seed := range uint64(50) {
		inner := &fakeSink{}
		s := newLossySink(inner, 0.001, rand.New(rand.NewPCG(seed, 1)))
		for range 10 {
			s.Publish(context.Background(), batch(100, 7))
		}
		if got := s.dropped.Load(); got != 1 {
			t.Fatalf("seed %d: dropped %d of 1000 at 0.1%%, want exactly 1", seed, got)
		}
	}
}
