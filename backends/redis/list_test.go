package redisoutbox

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
)

// failAll fetches every partition of b and fails the fetched entries that
// fail selects with the failure it returns (ok false: left alone).
func failAll(t *testing.T, b *Backend, fail func(e outbox.Entry) (outbox.Failure, bool)) {
	t.Helper()
	ctx := testCtx(t)
	for p := range b.Partitions() {
		l := lease(t, b, p, "lister")
		got, err := b.FindPendingBatch(ctx, l, 5000)
		require.NoError(t, err)
		var fs []outbox.Failure
		for _, e := range got {
			if f, ok := fail(e); ok {
				f.ID = e.ID
				fs = append(fs, f)
			}
		}
		require.NoError(t, b.MarkFailed(ctx, l, fs))
		require.NoError(t, b.ReleaseLease(ctx, l))
	}
}

// pageEntries pages through Entries of state with limit n per page.
func pageEntries(t *testing.T, b *Backend, state outbox.EntryState, f outbox.ListFilter, n int) []string {
	t.Helper()
	var out []string
	after := ""
	for {
		page, err := b.Entries(testCtx(t), state, f, after, n)
		require.NoError(t, err)
		require.LessOrEqual(t, len(page), n)
		for _, e := range page {
			out = append(out, e.ID)
		}
		if len(page) < n {
			return out
		}
		after = page[len(page)-1].ID
	}
}

func sorted(ss ...string) []string {
	out := append([]string(nil), ss...)
	sort.Strings(out)
	return out
}

func testEntriesByState(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{Partitions: 3})
	_, err := b.Entries(ctx, "pending", outbox.ListFilter{}, "", 1)
	require.ErrorIs(t, err, outbox.ErrInvalidArgument)
	_, err = b.Entries(ctx, outbox.StateDue, outbox.ListFilter{}, "", 0)
	require.ErrorIs(t, err, outbox.ErrInvalidArgument)
	_, err = b.BlockedKeys(ctx, outbox.ListFilter{}, outbox.BlockedKey{}, -1)
	require.ErrorIs(t, err, outbox.ErrInvalidArgument)

	later := time.Now().Add(time.Hour)
	var es []outbox.Entry
	due := []string{"B", "a", "c", "Ä", "d1"} // byte order: B a c d1 Ä
	for i, id := range due {
		es = append(es, outbox.Entry{ID: id, Topic: "t", Key: fmt.Sprint("due", i)})
	}
	es = append(es,
		outbox.Entry{ID: "s-a", Topic: "t", Key: "s1", NotBefore: later},
		outbox.Entry{ID: "s-B", Topic: "t", NotBefore: later},
		outbox.Entry{ID: "r1", Topic: "t", Key: "rk"},
		outbox.Entry{ID: "r1b", Topic: "t", Key: "rk"}, // held back behind r1: due by its own time
		outbox.Entry{ID: "r2", Topic: "t", Key: "rk2"},
		outbox.Entry{ID: "p-c", Topic: "t", Key: "pk1"},
		outbox.Entry{ID: "p-Ä", Topic: "t", Key: "pk2"},
		outbox.Entry{ID: "p-B", Topic: "t"})
	require.NoError(t, b.Append(ctx, es...))
	failAll(t, b, func(e outbox.Entry) (outbox.Failure, bool) {
		switch e.ID[0] {
		case 'r':
			return outbox.Failure{Error: "retry " + e.ID, Delay: time.Hour}, e.ID != "r1b"
		case 'p':
			return outbox.Failure{Error: "park " + e.ID, Park: true}, true
		}
		return outbox.Failure{}, false
	})
	// A claim re-scores r1b behind r1's retry time; it stays due.
	failAll(t, b, func(outbox.Entry) (outbox.Failure, bool) { return outbox.Failure{}, false })

	want := map[outbox.EntryState][]string{
		outbox.StateDue:       sorted(append(due, "r1b")...),
		outbox.StateScheduled: sorted("s-a", "s-B"),
		outbox.StateRetrying:  sorted("r1", "r2"),
		outbox.StateParked:    sorted("p-c", "p-Ä", "p-B"),
	}
	for _, st := range outbox.EntryStates {
		for _, n := range []int{1, 2, 100} {
			assert.Equal(t, want[st], pageEntries(t, b, st, outbox.ListFilter{}, n), "%s, %d per page: byte order of IDs across partitions", st, n)
		}
	}
	page, err := b.Entries(ctx, outbox.StateRetrying, outbox.ListFilter{}, "", 10)
	require.NoError(t, err)
	require.Len(t, page, 2)
	assert.Equal(t, 1, page[0].Attempts)
	require.Len(t, page[0].History, 1)
	assert.Equal(t, "retry r1", page[0].History[0].Error)
	assert.Equal(t, "lister", page[0].History[0].Owner)
	page, err = b.Entries(ctx, outbox.StateParked, outbox.ListFilter{}, "p-B", 1)
	require.NoError(t, err)
	require.Len(t, page, 1)
	assert.Equal(t, "p-c", page[0].ID)
	assert.True(t, page[0].Parked)
	assert.Len(t, page[0].History, 1)

	stats, err := b.PartitionStats(ctx)
	require.NoError(t, err)
	blocked := map[int]int64{}
	bk, err := b.BlockedKeys(ctx, outbox.ListFilter{}, outbox.BlockedKey{}, 100)
	require.NoError(t, err)
	for _, k := range bk {
		blocked[k.Head.Partition]++
	}
	assert.Len(t, bk, 2, "rk and rk2")
	for _, s := range stats {
		assert.Equal(t, blocked[s.Partition], s.BlockedKeys, "partition %d", s.Partition)
		if s.Due == 0 {
			assert.Empty(t, s.OldestDueID)
			continue
		}
		info := lookup(t, b, s.OldestDueID)
		assert.Equal(t, s.Partition, info.Partition)
		assert.Equal(t, s.OldestDue.UnixMilli(), info.DueAt.UnixMilli(), "OldestDueID is the entry OldestDue is the due time of")
	}
}

func testEntriesFilters(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{Partitions: 2})
	require.NoError(t, b.Append(ctx,
		outbox.Entry{ID: "x1", Topic: "orders", Key: "k1"},
		outbox.Entry{ID: "x2", Topic: "orders", Key: "k2"},
		outbox.Entry{ID: "x3", Topic: "ships", Key: "k1"}))
	mid := serverMillis(t, ctx, c)
	time.Sleep(5 * time.Millisecond)
	require.NoError(t, b.Append(ctx, outbox.Entry{ID: "x4", Topic: "ships", Key: "k4"}))
	failAll(t, b, func(e outbox.Entry) (outbox.Failure, bool) {
		return outbox.Failure{Error: "Broker said TIMEOUT on " + e.ID, Park: true}, e.ID != "x4"
	})
	for _, tc := range []struct {
		name string
		st   outbox.EntryState
		f    outbox.ListFilter
		want []string
	}{
		{"topic", outbox.StateParked, outbox.ListFilter{Topic: "orders"}, []string{"x1", "x2"}},
		{"key", outbox.StateParked, outbox.ListFilter{Key: "k1"}, []string{"x1", "x3"}},
		{"error folds ASCII case", outbox.StateParked, outbox.ListFilter{Error: "timeout ON x2"}, []string{"x2"}},
		{"error misses", outbox.StateParked, outbox.ListFilter{Error: "refused"}, nil},
		{"until", outbox.StateParked, outbox.ListFilter{Until: time.UnixMilli(mid + 1)}, []string{"x1", "x2", "x3"}},
		{"since", outbox.StateDue, outbox.ListFilter{Since: time.UnixMilli(mid + 1)}, []string{"x4"}},
		{"since excludes", outbox.StateDue, outbox.ListFilter{Until: time.UnixMilli(mid + 1)}, nil},
		{"all of them", outbox.StateParked, outbox.ListFilter{Topic: "ships", Key: "k1", Error: "broker"}, []string{"x3"}},
	} {
		assert.Equal(t, tc.want, pageEntries(t, b, tc.st, tc.f, 1), tc.name)
	}
}

func testParkedPaging(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{Partitions: 3})
	const n = 1300 // over two parkedChunks per partition on average
	var es []outbox.Entry
	var want []string
	for i := range n {
		id := fmt.Sprintf("p%05d", (i*7919)%n)
		es = append(es, outbox.Entry{ID: id, Topic: "t", Key: fmt.Sprint("k", i)})
		want = append(want, id)
	}
	require.NoError(t, b.Append(ctx, es...))
	failAll(t, b, func(outbox.Entry) (outbox.Failure, bool) { return outbox.Failure{Error: "x", Park: true}, true })
	sort.Strings(want)
	assert.Equal(t, want, pageEntries(t, b, outbox.StateParked, outbox.ListFilter{}, 97))
	assert.Equal(t, want, pageEntries(t, b, outbox.StateParked, outbox.ListFilter{}, 1000))
	// A filter that skips most entries passes over whole chunks.
	assert.Equal(t, []string{"p01299"}, pageEntries(t, b, outbox.StateParked, outbox.ListFilter{Key: keyOf(es, "p01299")}, 5))
}

func keyOf(es []outbox.Entry, id string) string {
	for _, e := range es {
		if e.ID == id {
			return e.Key
		}
	}
	return ""
}

func testBlockedKeys(t *testing.T, c redis.UniversalClient) {
	ctx := testCtx(t)
	b := newBackend(t, c, Options{Partitions: 2})
	require.NoError(t, b.Append(ctx,
		outbox.Entry{ID: "c1", Topic: "t", Key: "C"}, // deferred first: blocked since its creation
		outbox.Entry{ID: "c2", Topic: "t", Key: "C"},
		outbox.Entry{ID: "a1", Topic: "t", Key: "A"},
		outbox.Entry{ID: "a2", Topic: "u", Key: "A"},
		outbox.Entry{ID: "a3", Topic: "t", Key: "A"},
		outbox.Entry{ID: "b1", Topic: "t", Key: "B"},
		outbox.Entry{ID: "free", Topic: "t", Key: "F"},
		outbox.Entry{ID: "nokey", Topic: "t"}))
	time.Sleep(3 * time.Millisecond)
	failAll(t, b, func(e outbox.Entry) (outbox.Failure, bool) {
		switch e.ID {
		case "c1":
			return outbox.Failure{Delay: time.Hour, Deferred: true}, true
		case "a1":
			return outbox.Failure{Error: "first A", Delay: -time.Second}, true
		case "nokey":
			return outbox.Failure{Error: "x", Delay: time.Hour}, true
		}
		return outbox.Failure{}, false
	})
	time.Sleep(3 * time.Millisecond)
	failAll(t, b, func(e outbox.Entry) (outbox.Failure, bool) {
		switch e.ID {
		case "a1":
			return outbox.Failure{Error: "second A", Delay: time.Hour}, true
		case "b1":
			return outbox.Failure{Error: "first B", Delay: time.Hour}, true
		}
		return outbox.Failure{}, false
	})
	all, err := b.BlockedKeys(ctx, outbox.ListFilter{}, outbox.BlockedKey{}, 10)
	require.NoError(t, err)
	heads := make([]string, len(all))
	for i, k := range all {
		heads[i] = k.Head.ID
	}
	require.Equal(t, []string{"c1", "a1", "b1"}, heads, "by Since: c1's creation, a1's first attempt, b1's first attempt")
	assert.Equal(t, []int64{1, 2, 0}, []int64{all[0].Waiting, all[1].Waiting, all[2].Waiting})
	assert.True(t, all[1].Since.Equal(all[1].Head.History[0].At))
	assert.Equal(t, "second A", all[1].Head.LastError)
	assert.Equal(t, "A", all[1].Head.Key)
	assert.Equal(t, outbox.PartitionOf("A", 2), all[1].Head.Partition)
	assert.True(t, all[2].Head.DueAt.After(time.Now().Add(30*time.Minute)), "DueAt: the next attempt time")
	// Paging.
	var paged []string
	after := outbox.BlockedKey{}
	for {
		page, err := b.BlockedKeys(ctx, outbox.ListFilter{}, after, 1)
		require.NoError(t, err)
		if len(page) == 0 {
			break
		}
		paged = append(paged, page[0].Head.ID)
		after = page[0]
	}
	assert.Equal(t, heads, paged)
	// The filter applies to the head.
	got, err := b.BlockedKeys(ctx, outbox.ListFilter{Error: "FIRST b"}, outbox.BlockedKey{}, 10)
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, "b1", got[0].Head.ID)
	got, err = b.BlockedKeys(ctx, outbox.ListFilter{Topic: "u"}, outbox.BlockedKey{}, 10)
	require.NoError(t, err)
	assert.Empty(t, got, "a2 of topic u waits, but the head a1 is of topic t")
}
