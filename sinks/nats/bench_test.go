package natssink_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/outboxrelay/outbox"
	natssink "github.com/outboxrelay/outbox/sinks/nats"
)

// BenchmarkPublish publishes calls of 1,000 entries into a stream of the
// embedded server (or the real one: -bench Publish/Real), all of one key
// (one round trip per entry) or each of its own key (up to MaxPending in
// flight). Reports entries per second.
func BenchmarkPublish(b *testing.B) {
	for _, tg := range targets {
		for _, keys := range []int{1, 1000} {
			b.Run(fmt.Sprintf("%s/keys=%d", tg.name, keys), func(b *testing.B) {
				url := tg.url(b)
				sfx := suffix()
				subj := "bench." + sfx
				newStream(b, connect(b, url), "BENCH_"+sfx, []string{subj})
				sink, err := natssink.Dial(url, natssink.Options{})
				if err != nil {
					b.Fatal(err)
				}
				defer sink.Close()
				const n = 1000
				msgs := make([]outbox.Entry, n)
				payload := make([]byte, 200)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					for j := range msgs {
						msgs[j] = outbox.Entry{ID: fmt.Sprintf("%d-%d", i, j), Topic: subj, Key: fmt.Sprint(j % keys), Payload: payload}
					}
					for _, err := range sink.Publish(context.Background(), msgs) {
						if err != nil {
							b.Fatal(err)
						}
					}
				}
				b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "entries/s")
			})
		}
	}
}
