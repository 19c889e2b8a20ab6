package kafkasink_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outboxrelay/outbox"
	kafkasink "github.com/outboxrelay/outbox/sinks/kafka"
)

// BenchmarkPublish100k publishes 100,000 entries (256-byte payloads, keys
// from 1,000 aggregates) into a kfake cluster through Sink.Publish in
// batches of 500, as a relay partition worker would, and reports entries
// per second. kfake stores every record (no blackholing).
//
//	go test -run '^$' -bench Publish100k -benchtime 3x ./sinks/kafka/
func BenchmarkPublish100k(b *testing.B) {
	for _, txn := range []bool{false, true} {
		b.Run(fmt.Sprintf("transactional=%v", txn), func(b *testing.B) {
			const total, batchSize, aggregates = 100_000, 500, 1_000
			payload := randomBytes(256)
			msgs := make([]outbox.Entry, total)
			for i := range msgs {
				// Consecutive entries cycle through the aggregates, so a
				// batch of 500 never holds two entries of one key.
				msgs[i] = outbox.Entry{ID: outbox.NewID(), Topic: "bench", Key: fmt.Sprintf("aggregate-%04d", i%aggregates), Payload: payload,
					Headers: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}
			}
			var elapsed time.Duration
			for b.Loop() {
				b.StopTimer()
				c := newCluster(b, 8, []string{"bench"}, kfake.NumBrokers(1))
				opts := kafkasink.Options{}
				if txn {
					opts.TransactionalIDPrefix = "bench-"
				}
				sink, err := kafkasink.Dial(c.ListenAddrs(), opts)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				start := time.Now()
				for off := 0; off < total; off += batchSize {
					for i, err := range sink.Publish(context.Background(), msgs[off:off+batchSize]) {
						if err != nil {
							b.Fatalf("entry %d: %v", off+i, err)
						}
					}
				}
				elapsed += time.Since(start)
				b.StopTimer()
				sink.Close()
				c.Close()
				b.StartTimer()
			}
			b.ReportMetric(float64(total*b.N)/elapsed.Seconds(), "entries/s")
		})
	}
}
