package kafkasink_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	kafkasink "github.com/outboxrelay/outbox/sinks/kafka"
)

func seqRecord(key, seq string) *kgo.Record {
	r := &kgo.Record{Key: []byte(key)}
	if seq != "" {
		r.Headers = []kgo.RecordHeader{{Key: outbox.HeaderKeySeq, Value: []byte(seq)}}
	}
	return r
}

func TestKeySeqCheckerFindsGapsAndDuplicates(t *testing.T) {
	t.Parallel()
	c := kafkasink.NewKeySeqChecker(kafkasink.KeySeqCheckerOptions{})
	for _, tc := range []struct {
		key, seq string
		want     kafkasink.KeySeqStatus
		last     int64
		missing  int64
	}{
		{"a", "1", kafkasink.KeySeqOK, 0, 0},
		{"a", "2", kafkasink.KeySeqOK, 1, 0},
		{"b", "5", kafkasink.KeySeqFirst, 0, 0},
		{"a", "2", kafkasink.KeySeqDuplicate, 2, 0},
		{"a", "5", kafkasink.KeySeqGap, 2, 2},
		{"a", "3", kafkasink.KeySeqDuplicate, 5, 0}, // late, inside the gap
		{"a", "6", kafkasink.KeySeqOK, 5, 0},
		{"b", "6", kafkasink.KeySeqOK, 5, 0},
		{"b", "1", kafkasink.KeySeqDuplicate, 6, 0},
		{"", "1", kafkasink.KeySeqUnnumbered, 0, 0},
		{"c", "", kafkasink.KeySeqUnnumbered, 0, 0},
		{"c", "01", kafkasink.KeySeqInvalid, 0, 0},
		{"c", "-1", kafkasink.KeySeqInvalid, 0, 0},
		{"c", "x", kafkasink.KeySeqInvalid, 0, 0},
	} {
		r := c.CheckRecord(seqRecord(tc.key, tc.seq))
		assert.Equal(t, tc.want, r.Status, "%s %s: %+v", tc.key, tc.seq, r)
		assert.Equal(t, tc.last, r.Last, "%s %s last", tc.key, tc.seq)
		assert.Equal(t, tc.missing, r.Missing, "%s %s missing", tc.key, tc.seq)
		if tc.want == kafkasink.KeySeqInvalid {
			assert.Error(t, r.Err)
		}
	}
	assert.Equal(t, kafkasink.KeySeqStats{OK: 4, First: 1, Gaps: 1, Missing: 2, Duplicates: 3, Unnumbered: 2, Invalid: 3, Keys: 2}, c.Stats())
	assert.Equal(t, kafkasink.KeySeqUnnumbered, c.CheckRecord(nil).Status)
	assert.Equal(t, "gap", kafkasink.KeySeqGap.String())
}

// TestKeySeqCheckerMemoryIsBounded: with MaxKeys 100, a million keys leave
// 100 remembered; the least recently seen go first, so a key seen all
// along is still checked, and a forgotten key comes back unchecked. It
// measures the process's heap, so it does not run in parallel: the
// package's parallel tests wait until it is done (in a CI run their kfake
// clusters, allocating meanwhile, grew the heap by 2.5 MB).
func TestKeySeqCheckerMemoryIsBounded(t *testing.T) {
	c := kafkasink.NewKeySeqChecker(kafkasink.KeySeqCheckerOptions{MaxKeys: 100})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	hot := int64(0)
	for i := range 1_000_000 {
		if i%50 == 0 {
			hot++
			require.Equal(t, kafkasink.KeySeqOK, c.Check("hot", hot).Status)
		}
		c.Check(fmt.Sprintf("key-%d", i), 1)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	st := c.Stats()
	assert.Equal(t, 100, st.Keys)
	assert.Equal(t, int64(1_000_001-100), st.Forgotten)
	assert.Less(t, int64(after.HeapAlloc)-int64(before.HeapAlloc), int64(1<<20), "heap grew by %d bytes", int64(after.HeapAlloc)-int64(before.HeapAlloc))
	r := c.Check("hot", hot+2)
	assert.Equal(t, kafkasink.KeySeqGap, r.Status, "the hot key was never forgotten")
	assert.Equal(t, int64(1), r.Missing)
	assert.Equal(t, kafkasink.KeySeqOK, c.Check("key-0", 1).Status, "a forgotten key is checked from scratch: the duplicate is missed")
	c.Forget("hot")
	assert.Equal(t, kafkasink.KeySeqFirst, c.Check("hot", hot+3).Status)
	runtime.KeepAlive(c)
}

// TestKeySeqEndToEnd appends with the memory backend's KeySequence,
// publishes through the sink to kfake and checks what comes back: clean
// at first, then one entry published twice (a duplicate) and one entry
// cancelled before it was published (a gap).
func TestKeySeqEndToEnd(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := newCluster(t, 3, []string{"orders"})
	sink, err := kafkasink.New(newClient(t, cl), kafkasink.Options{})
	require.NoError(t, err)
	b := memory.New(memory.Options{KeySequence: true})
	for i := range 4 {
		for _, k := range []string{"o-1", "o-2"} {
			require.NoError(t, b.Append(ctx, outbox.Entry{ID: fmt.Sprintf("%s-%d", k, i), Topic: "orders", Key: k}))
		}
	}
	require.NoError(t, b.Cancel(ctx, "o-2-2")) // number 3 of o-2 is never published
	l, err := b.AcquireLease(ctx, 0, "me", time.Minute)
	require.NoError(t, err)
	batch, err := b.FindPendingBatch(ctx, l, 100)
	require.NoError(t, err)
	require.Len(t, batch, 7)
	// The relay publishes a key's entries one after the other; so does
	// this, one entry per call, and o-1-1 twice (a lost acknowledgement).
	var publish []outbox.Entry
	for _, e := range batch {
		publish = append(publish, e)
		if e.ID == "o-1-1" {
			publish = append(publish, e)
		}
	}
	for _, e := range publish {
		for _, err := range sink.Publish(ctx, []outbox.Entry{e}) {
			require.NoError(t, err)
		}
	}
	recs := consume(t, cl, len(publish), []string{"orders"})
	c := kafkasink.NewKeySeqChecker(kafkasink.KeySeqCheckerOptions{})
	var found []string
	for _, r := range recs {
		if res := c.CheckRecord(r); res.Status != kafkasink.KeySeqOK {
			found = append(found, fmt.Sprintf("%s %s %d", res.Key, res.Status, res.Seq))
		}
	}
	assert.ElementsMatch(t, []string{"o-1 duplicate 2", "o-2 gap 4"}, found)
}
