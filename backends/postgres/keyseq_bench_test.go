package pgoutbox_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
)

// BenchmarkAppendKeySeq measures what Options.KeySequence costs the append
// rate: 8 concurrent callers (as BenchmarkAppend), 1 or 100 entries per
// transaction, keys from 1000 aggregates ("keys1000") or all one key
// ("hotkey"), with the option off and on. b.N is the number of
// transactions. Run alone (the machine is shared), for example:
//
//	go test -run '^$' -bench 'AppendKeySeq/.*/1-per-tx' -benchtime 3000x -count 3 ./backends/postgres/
//	go test -run '^$' -bench 'AppendKeySeq/.*/100-per-tx' -benchtime 300x -count 3 ./backends/postgres/
func BenchmarkAppendKeySeq(b *testing.B) {
	for _, keys := range []string{"keys1000", "hotkey", "nokey"} {
		for _, per := range []int{1, 100} {
			for _, on := range []bool{false, true} {
				name := fmt.Sprintf("%s/%d-per-tx/keyseq=%v", keys, per, on)
				b.Run(name, func(b *testing.B) {
					be, p := newBackend(b, extended, pgoutbox.Options{KeySequence: on})
					payload := benchPayload()
					var next atomic.Int64
					var wg sync.WaitGroup
					b.ResetTimer()
					for w := range appendCallers {
						wg.Go(func() {
							ctx := context.Background()
							for n := next.Add(1); n <= int64(b.N); n = next.Add(1) {
								es := make([]outbox.Entry, per)
								for i := range es {
									key := "hot"
									if keys == "keys1000" {
										key = fmt.Sprint("agg-", (int(n)*per+i)%1000)
									}
									if keys == "nokey" {
										key = ""
									}
									es[i] = outbox.Entry{ID: fmt.Sprintf("w%d-%d-%d", w, n, i), Topic: "bench", Key: key, Payload: payload}
								}
								err := pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
									return be.AppendInTx(ctx, tx, es...)
								})
								if err != nil {
									b.Error(err)
									return
								}
							}
						})
					}
					wg.Wait()
					b.ReportMetric(float64(b.N*per)/b.Elapsed().Seconds(), "entries/s")
				})
			}
		}
	}
}
