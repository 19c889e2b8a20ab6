package redisoutbox

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outbox"
)

// BenchmarkAppendKeySeq measures what Options.KeySequence costs the append
// rate: 8 concurrent callers (as BenchmarkAppendInTx), each transaction a
// SET of a business key plus AppendInTx of 1 or 100 entries (100-byte
// payloads) in one MULTI/EXEC, keys from 1000 aggregates ("keys1000") or
// all one key ("hotkey"), with the option off and on. b.N is the number
// of transactions. It reports entries/s and the CPU time of Redis's main
// thread per transaction (meaningful only on a server nobody else uses;
// point OUTBOX_REDIS_URL at a private one). Run, for example:
//
//	go test -run '^$' -bench 'AppendKeySeq/.*/1-per-tx' -benchtime 20000x -count 3 ./backends/redis/
//	go test -run '^$' -bench 'AppendKeySeq/.*/100-per-tx' -benchtime 1000x -count 3 ./backends/redis/
func BenchmarkAppendKeySeq(b *testing.B) {
	for _, keys := range []string{"keys1000", "hotkey"} {
		for _, per := range []int{1, 100} {
			for _, on := range []bool{false, true} {
				b.Run(fmt.Sprintf("%s/%d-per-tx/keyseq=%v", keys, per, on), func(b *testing.B) {
					c := standaloneClient(&testing.T{})
					be, err := New(context.Background(), c, Options{Prefix: uniquePrefix(), Partitions: 1, KeySequence: on})
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() {
						c.Del(context.Background(), be.parts[0].tag+":bench", be.parts[0].keyseq)
						deleteKeys(c, be)
					})
					ctx := context.Background()
					payload := make([]byte, 100)
					b.SetParallelism((8 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
					var n atomic.Int64
					cpu0 := mainThreadCPU(b, c)
					b.ResetTimer()
					b.RunParallel(func(pb *testing.PB) {
						es := make([]outbox.Entry, per)
						for pb.Next() {
							i := n.Add(1)
							for j := range es {
								key := "hot"
								if keys == "keys1000" {
									key = fmt.Sprint("agg-", (int(i)*per+j)%1000)
								}
								es[j] = outbox.Entry{Topic: "bench", Key: key, Payload: payload}
							}
							_, err := c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
								pipe.Set(ctx, be.parts[0].tag+":bench", i, time.Minute)
								return be.AppendInTx(ctx, pipe, es...)
							})
							if err != nil {
								b.Error(err)
								return
							}
						}
					})
					b.StopTimer()
					b.ReportMetric(float64(b.N*per)/b.Elapsed().Seconds(), "entries/s")
					b.ReportMetric(float64((mainThreadCPU(b, c)-cpu0).Microseconds())/float64(b.N), "redis-cpu-µs/tx")
				})
			}
		}
	}
}
