package redisoutbox

import (
	"context"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
)

// BenchmarkFetchAhead drains 100,000 entries (1000 keys) as the relay does
// behind full batches: FetchNext of the next batch with the batch in
// flight, then MarkSent of the batch in flight, in that order
// ("FetchFirst", the claim meets the batch still pending) or the other
// ("MarkFirst", MarkSent reached the server first). It reports the
// server's main-thread CPU per entry (INFO cpu), split between the claims
// and MarkSent: only meaningful when nothing else uses the server (point
// OUTBOX_REDIS_URL at a private redis-server). Run: go test -run '^$'
// -bench FetchAhead -benchtime 3x ./backends/redis/
func BenchmarkFetchAhead(b *testing.B) {
	for _, markFirst := range []bool{false, true} {
		name := "FetchFirst"
		if markFirst {
			name = "MarkFirst"
		}
		b.Run(name, func(b *testing.B) {
			const total, batch = 100_000, 500
			c := standaloneClient(&testing.T{})
			ctx := context.Background()
			var drained int
			var claimCPU, markCPU time.Duration
			for range b.N {
				b.StopTimer()
				be := benchBackend(b, c, 1)
				fillBench(b, be, total, 100)
				l, err := be.AcquireLease(ctx, 0, "bench", time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				t0 := mainThreadCPU(b, c)
				first, err := be.FetchBatch(ctx, l, batch)
				if err != nil {
					b.Fatal(err)
				}
				claimCPU += mainThreadCPU(b, c) - t0
				inFlight := first.Entries
				for len(inFlight) > 0 {
					var next outbox.Batch
					fetch := func() {
						t := mainThreadCPU(b, c)
						if next, err = be.FetchNext(ctx, l, batch, inFlight); err != nil {
							b.Fatal(err)
						}
						claimCPU += mainThreadCPU(b, c) - t
					}
					mark := func() {
						t := mainThreadCPU(b, c)
						if err := be.MarkSent(ctx, l, ids(inFlight)); err != nil {
							b.Fatal(err)
						}
						markCPU += mainThreadCPU(b, c) - t
					}
					if markFirst {
						mark()
						fetch()
					} else {
						fetch()
						mark()
					}
					drained += len(inFlight)
					inFlight = next.Entries
				}
			}
			b.ReportMetric(float64((claimCPU+markCPU).Microseconds())/float64(drained), "redis-cpu-µs/entry")
			b.ReportMetric(float64(claimCPU.Microseconds())/float64(drained), "claim-cpu-µs/entry")
			b.ReportMetric(float64(markCPU.Microseconds())/float64(drained), "marksent-cpu-µs/entry")
		})
	}
}
