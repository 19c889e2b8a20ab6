package history_test

import (
	"fmt"
	"strings"
	"time"

	"github.com/outboxrelay/outbox/chaos/history"
)

// An appender, a consumer and the harness each write a history; the
// checker reads them together. Here the relay lost entry o-3 and
// re-published o-2 after a fault.
func Example() {
	t0 := time.Date(2026, 1, 2, 15, 0, 0, 0, time.UTC)
	files := map[string]string{
		"appender.jsonl": `{"op":"append","id":"o-1","key":"order-7","seq":1}
{"op":"append","id":"o-2","key":"order-7","seq":2}
{"op":"append","id":"o-3","key":"order-7","seq":3}
{"op":"unknown","id":"o-4","key":"order-7","seq":4}
`,
		"consumer.jsonl": `{"op":"deliver","topic":"orders","partition":0,"offset":0,"id":"o-1","at":"2026-01-02T15:00:00Z"}
{"op":"deliver","topic":"orders","partition":0,"offset":1,"id":"o-2","at":"2026-01-02T15:00:01Z"}
{"op":"deliver","topic":"orders","partition":0,"offset":2,"id":"o-2","at":"2026-01-02T15:00:04Z"}
`,
	}
	h := new(history.History)
	for _, name := range []string{"appender.jsonl", "consumer.jsonl"} {
		if err := h.Read(strings.NewReader(files[name]), name); err != nil {
			fmt.Println(err)
			return
		}
	}
	h.Fault(t0.Add(2*time.Second), "SIGKILL relay 1")

	r := h.Check()
	fmt.Println(r)
	fmt.Println(history.TableHeader)
	fmt.Println(r.TableRow("relay SIGKILL"))
	// Output:
	// FAIL: appended 3 (+1 unknown, 0 of them delivered), delivered 3, lost 1, duplicates 1 (max 1 per fault), order violations 0, unexpected 0, faults 1, recovery p50 2s p90 2s max 2s
	//   lost: id o-3 key "order-7" seq 3
	// | scenario | entries | faults | lost | duplicates (total / max per fault) | order violations | unexpected | recovery p50 / p90 / max |
	// |---|---:|---:|---:|---:|---:|---:|---|
	// | relay SIGKILL | 3 | 1 | 1 | 1 / 1 | 0 | 0 | 2s / 2s / 2s |
}
