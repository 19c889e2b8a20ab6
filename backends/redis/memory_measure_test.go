package redisoutbox

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
)

// TestMeasureMemoryOverDrain is the measurement of docs/redis.md, "Memory
// over time": on a private redis-server it appends OUTBOX_MEASURE entries
// (e.g. 1000000), drains them with a relay into a sink that only counts,
// and logs INFO memory before, at the peak and after. It runs only when
// OUTBOX_MEASURE is set, and fails when the drain does not deliver every
// entry or leaves one stored.
func TestMeasureMemoryOverDrain(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("OUTBOX_MEASURE"))
	if n <= 0 {
		t.Skip("a measurement: set OUTBOX_MEASURE=1000000 to run it")
	}
	bin, err := exec.LookPath("redis-server")
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port)})
	defer c.Close()
	ctx := context.Background()
	for deadline := time.Now().Add(10 * time.Second); c.Ping(ctx).Err() != nil; time.Sleep(20 * time.Millisecond) {
		require.False(t, time.Now().After(deadline))
	}
	b, err := New(ctx, c, Options{Prefix: "m:{ob}", Partitions: 8})
	require.NoError(t, err)
	report := func(what string) {
		h, err := b.Health(ctx)
		require.NoError(t, err)
		info := c.Info(ctx, "memory").Val()
		var frag string
		for line := range strings.Lines(info) {
			if strings.HasPrefix(line, "allocator_frag_ratio:") {
				frag = strings.TrimSpace(line)
			}
		}
		t.Logf("%-28s used_memory %8.1f MiB  used_memory_rss %8.1f MiB  mem_fragmentation_ratio %.2f  %s  warnings %v",
			what, float64(h.Memory.UsedBytes)/(1<<20), float64(h.Memory.RSSBytes)/(1<<20), h.Memory.Fragmentation, frag, h.Warnings)
	}
	report("empty outbox")
	payload := strings.Repeat("x", 100)
	start := time.Now()
	const batch = 1000
	for i := 0; i < n; i += batch {
		es := make([]outbox.Entry, 0, batch)
		for j := i; j < i+batch && j < n; j++ {
			es = append(es, outbox.Entry{ID: fmt.Sprintf("e%09d", j), Topic: "orders", Key: "k" + strconv.Itoa(j%1000), Payload: []byte(payload)})
		}
		require.NoError(t, b.Append(ctx, es...))
	}
	t.Logf("appended %d entries in %s", n, time.Since(start).Round(time.Millisecond))
	report(fmt.Sprintf("%d entries stored", n))

	var published atomic.Int64
	sink := outbox.SinkFunc(func(context.Context, outbox.Entry) error { published.Add(1); return nil })
	r, err := outbox.NewRelay(b, sink, outbox.RelayOptions{BatchSize: 500})
	require.NoError(t, err)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	start = time.Now()
	for published.Load() < int64(n) {
		require.Less(t, time.Since(start), 30*time.Minute, "watchdog: the drain stalled at %d", published.Load())
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	<-done
	t.Logf("drained %d entries in %s", n, time.Since(start).Round(time.Millisecond))
	st, err := b.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, outbox.Stats{}, st, "nothing left stored")
	report("drained")
	time.Sleep(10 * time.Second)
	report("drained, 10 s later")
	require.NoError(t, c.Do(ctx, "MEMORY", "PURGE").Err())
	report("after MEMORY PURGE")
}
