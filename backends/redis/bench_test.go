package redisoutbox

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outbox"
)

// BenchmarkAppendInTx measures appends of one entry per transaction (a SET
// of a business key plus AppendInTx, one MULTI/EXEC round trip) from 8
// concurrent callers. Run: go test -run '^$' -bench AppendInTx ./backends/redis/
// The Redis CPU per transaction it reports is only meaningful on a server
// nobody else uses (see BenchmarkDrain).
//
// Modes: EVAL is AppendInTx as shipped; EVALSHA is the same script by
// hash (unsafe inside MULTI, measured only); raw is the floor, a SET plus
// an EVALSHA of a script doing only HSET and ZADD of the same entry.
func BenchmarkAppendInTx(b *testing.B) {
	raw := redis.NewScript("redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) redis.call('ZADD', KEYS[2], 0, ARGV[1]) return 1")
	for _, mode := range []string{"EVAL", "EVALSHA", "raw"} {
		b.Run(mode, func(b *testing.B) {
			c := standaloneClient(&testing.T{})
			be := benchBackend(b, c, 1)
			ctx := context.Background()
			b.SetParallelism((8 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
			var n atomic.Int64
			if err := raw.Load(ctx, c).Err(); err != nil {
				b.Fatal(err)
			}
			cpu0 := mainThreadCPU(b, c)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					_, err := c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
						pipe.Set(ctx, be.parts[0].tag+":bench", i, time.Minute)
						switch mode {
						case "EVAL":
							return be.AppendInTx(ctx, pipe, outbox.Entry{Topic: "t", Key: "k", Payload: make([]byte, 100)})
						case "raw":
							raw.EvalSha(ctx, pipe, []string{be.parts[0].entries, be.parts[0].pending}, strconv.FormatInt(i, 10), encodeEntry(&outbox.Entry{Topic: "t", Key: "k", Payload: make([]byte, 100)}))
							return nil
						}
						// What AppendInTx would cost with EVALSHA (unsafe
						// inside MULTI after a SCRIPT FLUSH; measured only).
						es, _ := outbox.PrepareEntries(ctx, []outbox.Entry{{Topic: "t", Key: "k", Payload: make([]byte, 100)}}, 1)
						ks, args := be.appendArgs(0, es)
						pipe.EvalSha(ctx, scriptAppend.Hash(), ks, args...)
						return nil
					})
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(len(scriptAppend.src)), "script-bytes")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "entries/s")
			b.ReportMetric(float64((mainThreadCPU(b, c)-cpu0).Microseconds())/float64(b.N), "redis-cpu-µs/tx")
		})
	}
}

// BenchmarkDrain measures a plain relay loop into a no-op sink: one lease,
// then FindPendingBatch(500) and MarkSent until 100,000 entries are gone
// (two round trips per batch), over 1000 keys. Run with -benchtime 1x.
//
// Besides the rate it reports the CPU time Redis's main thread spent per
// entry during the drain (INFO cpu before and after), and how it splits
// between the claim and MarkSent (INFO cpu between the calls): far less
// noisy than the rate on a busy machine, but only meaningful when nothing
// else uses the server (point OUTBOX_REDIS_URL at a private redis-server).
func BenchmarkDrain(b *testing.B) {
	const total, batch = 100_000, 500
	c := standaloneClient(&testing.T{})
	ctx := context.Background()
	var drained int
	var elapsed, serverCPU, claimCPU, markCPU time.Duration
	for range b.N {
		b.StopTimer()
		be := benchBackend(b, c, 1)
		fillBench(b, be, total, 100)
		cpu0 := mainThreadCPU(b, c)
		b.StartTimer()
		start := time.Now()
		l, err := be.AcquireLease(ctx, 0, "bench", time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		// The server's CPU is read between the calls too, to split it
		// between the claim and MarkSent (two INFO calls per batch of
		// 500, a small part of either).
		before := mainThreadCPU(b, c)
		for {
			es, err := be.FindPendingBatch(ctx, l, batch)
			if err != nil {
				b.Fatal(err)
			}
			if len(es) == 0 {
				break
			}
			mid := mainThreadCPU(b, c)
			claimCPU += mid - before
			if err := be.MarkSent(ctx, l, ids(es)); err != nil {
				b.Fatal(err)
			}
			before = mainThreadCPU(b, c)
			markCPU += before - mid
			drained += len(es)
		}
		elapsed += time.Since(start)
		b.StopTimer()
		serverCPU += mainThreadCPU(b, c) - cpu0
		b.StartTimer()
	}
	b.ReportMetric(float64(drained)/elapsed.Seconds(), "entries/s")
	b.ReportMetric(float64(serverCPU.Microseconds())/float64(drained), "redis-cpu-µs/entry")
	b.ReportMetric(float64(claimCPU.Microseconds())/float64(drained), "claim-cpu-µs/entry")
	b.ReportMetric(float64(markCPU.Microseconds())/float64(drained), "marksent-cpu-µs/entry")
}

// fillBench appends n entries over 1000 keys, 1000 per call, with a
// payload of payloadLen bytes.
func fillBench(b *testing.B, be *Backend, n, payloadLen int) {
	chunk := make([]outbox.Entry, 1000)
	for i := 0; i < n; i += len(chunk) {
		for j := range chunk {
			chunk[j] = outbox.Entry{Topic: "t", Key: fmt.Sprintf("k%d", (i+j)%1000), Payload: make([]byte, payloadLen)}
		}
		if err := be.Append(context.Background(), chunk...); err != nil {
			b.Fatal(err)
		}
	}
}

// mainThreadCPU reads the CPU time (user + system) of the server's main
// thread from INFO cpu.
func mainThreadCPU(b *testing.B, c redis.UniversalClient) time.Duration {
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		name, val, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (name == "used_cpu_user_main_thread" || name == "used_cpu_sys_main_thread") {
			f, err := strconv.ParseFloat(val, 64)
			if err != nil {
				b.Fatalf("INFO cpu: %s: %v", line, err)
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}

func benchBackend(b *testing.B, c redis.UniversalClient, parts int) *Backend {
	be, err := New(context.Background(), c, Options{Prefix: uniquePrefix(), Partitions: parts})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx := context.Background()
		for _, k := range be.parts {
			c.Del(ctx, k.tag+":bench")
		}
		deleteKeys(c, be)
	})
	return be
}

// BenchmarkBacklog drains 10,000 entries (FindPendingBatch(500) then
// MarkSent, 1000 keys) from a backlog of 10,000 and of 1,000,000 entries
// and reports the time per entry of each call, so the cost of a large
// backlog shows where it is paid. Filling the big backlog takes about ten
// seconds. Run: go test -run '^$' -bench Backlog -benchtime 1x ./backends/redis/
func BenchmarkBacklog(b *testing.B) {
	for _, size := range []int{10_000, 1_000_000} {
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			const drain, batch = 10_000, 500
			c := standaloneClient(&testing.T{})
			ctx := context.Background()
			var claim, mark time.Duration
			var drained int
			for range b.N {
				b.StopTimer()
				be := benchBackend(b, c, 1)
				fillBench(b, be, size, 256)
				b.StartTimer()
				l, err := be.AcquireLease(ctx, 0, "bench", time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				for n := 0; n < drain; {
					t0 := time.Now()
					es, err := be.FindPendingBatch(ctx, l, batch)
					if err != nil {
						b.Fatal(err)
					}
					t1 := time.Now()
					if err := be.MarkSent(ctx, l, ids(es)); err != nil {
						b.Fatal(err)
					}
					claim += t1.Sub(t0)
					mark += time.Since(t1)
					n += len(es)
					drained += len(es)
				}
				b.StopTimer()
				for _, k := range be.parts {
					c.Unlink(ctx, k.entries, k.pending, k.keyorder)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(drained)/(claim+mark).Seconds(), "entries/s")
			b.ReportMetric(float64(claim.Nanoseconds())/float64(drained), "claim-ns/entry")
			b.ReportMetric(float64(mark.Nanoseconds())/float64(drained), "mark-ns/entry")
		})
	}
}

// BenchmarkInspect times Lookup (of a pending entry, and of an ID no
// partition has), PartitionStats, a first page of 50 due entries and of
// 50 blocked keys with 1, 16 and 64 partitions holding
// 10,000 entries, on a single node and on the Cluster: Lookup runs one
// script per partition, pipelined (one round trip per node), so its cost
// grows with the partition count. Run:
// go test -run '^$' -bench Inspect ./backends/redis/
func BenchmarkInspect(b *testing.B) {
	for _, tg := range targets {
		for _, parts := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("%s/%d-partitions", tg.name, parts), func(b *testing.B) {
				c := tg.client(&testing.T{})
				be := benchBackend(b, c, parts)
				ctx := context.Background()
				for i := 0; i < 10_000; i += 500 {
					es := make([]outbox.Entry, 500)
					for j := range es {
						es[j] = outbox.Entry{ID: fmt.Sprintf("e%05d", i+j), Topic: "t", Key: strconv.Itoa(i + j), Payload: make([]byte, 100)}
					}
					if err := be.Append(ctx, es...); err != nil {
						b.Fatal(err)
					}
				}
				b.Run("Lookup", func(b *testing.B) {
					for i := 0; b.Loop(); i++ {
						if _, err := be.Lookup(ctx, fmt.Sprintf("e%05d", i%10_000)); err != nil {
							b.Fatal(err)
						}
					}
				})
				b.Run("LookupMissing", func(b *testing.B) {
					for b.Loop() {
						if _, err := be.Lookup(ctx, "missing"); err == nil {
							b.Fatal("found")
						}
					}
				})
				b.Run("PartitionStats", func(b *testing.B) {
					for b.Loop() {
						if _, err := be.PartitionStats(ctx); err != nil {
							b.Fatal(err)
						}
					}
				})
				b.Run("EntriesDuePage", func(b *testing.B) {
					for b.Loop() {
						if _, err := be.Entries(ctx, outbox.StateDue, outbox.ListFilter{}, "", 50); err != nil {
							b.Fatal(err)
						}
					}
				})
				b.Run("BlockedKeys", func(b *testing.B) {
					for b.Loop() {
						if _, err := be.BlockedKeys(ctx, outbox.ListFilter{}, outbox.BlockedKey{}, 50); err != nil {
							b.Fatal(err)
						}
					}
				})
			})
		}
	}
}
