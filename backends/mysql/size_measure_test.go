package mysqloutbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
	mysqloutbox "github.com/outboxrelay/outbox/backends/mysql"
)

// TestMeasureTableSizeOverDrain is the measurement of docs/mysql.md,
// "Table size over time": in a database of its own it appends
// OUTBOX_MEASURE entries (e.g. 200000), drains them with a relay into a
// sink that only counts, and logs the outbox table's figures (after
// ANALYZE TABLE) before, at the peak and after. It runs only when
// OUTBOX_MEASURE is set, and fails when the drain does not deliver every
// entry or leaves one stored.
func TestMeasureTableSizeOverDrain(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("OUTBOX_MEASURE"))
	if n <= 0 {
		t.Skip("a measurement: set OUTBOX_MEASURE=200000 to run it")
	}
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 8})
	ctx := context.Background()
	report := func(what string) {
		exec(t, db, "ANALYZE TABLE `outbox`")
		var data, index, free, rows int64
		if err := db.QueryRow("SELECT DATA_LENGTH, INDEX_LENGTH, DATA_FREE, TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'outbox'").Scan(&data, &index, &free, &rows); err != nil {
			t.Fatal(err)
		}
		var hist int64
		_ = db.QueryRow("SELECT COUNT FROM information_schema.INNODB_METRICS WHERE NAME = 'trx_rseg_history_len'").Scan(&hist)
		h, err := b.Health(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%-30s data %7.1f MiB  index %7.1f MiB  data_free %7.1f MiB  rows ~%d  history list %d  Health bytes %d, warnings %d",
			what, mib(data), mib(index), mib(free), rows, hist, h.Tables[0].Bytes, len(h.Warnings))
	}
	report("empty outbox")
	for round := 1; round <= 2; round++ {
		measureRound(t, b, db, n, round, report)
	}
	exec(t, db, "OPTIMIZE TABLE `outbox`")
	report("after OPTIMIZE TABLE")
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// measureRound appends n entries, drains them with a relay and reports.
func measureRound(t *testing.T, b *mysqloutbox.Backend, db *sql.DB, n, round int, report func(string)) {
	ctx := context.Background()
	payload := []byte(strings.Repeat("x", 100))
	start := time.Now()
	const batch = 1000
	for i := 0; i < n; i += batch {
		err := b.InTx(ctx, db, func(tx *sql.Tx) error {
			es := make([]outbox.Entry, 0, batch)
			for j := i; j < i+batch && j < n; j++ {
				es = append(es, outbox.Entry{ID: fmt.Sprintf("r%d-%09d", round, j), Topic: "orders", Key: "k" + strconv.Itoa(j%1000), Payload: payload})
			}
			return b.AppendInTx(ctx, tx, es...)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("appended %d entries in %s", n, time.Since(start).Round(time.Millisecond))
	report(fmt.Sprintf("round %d: %d entries stored", round, n))

	var published atomic.Int64
	sink := outbox.SinkFunc(func(context.Context, outbox.Entry) error { published.Add(1); return nil })
	r, err := outbox.NewRelay(b, sink, outbox.RelayOptions{BatchSize: 500})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	start = time.Now()
	for published.Load() < int64(n) {
		if time.Since(start) > 30*time.Minute {
			t.Fatalf("watchdog: the drain stalled at %d", published.Load())
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	<-done
	t.Logf("drained %d entries in %s", n, time.Since(start).Round(time.Millisecond))
	st, err := b.Stats(ctx)
	if err != nil || st != (outbox.Stats{}) {
		t.Fatalf("left stored: %+v, %v", st, err)
	}
	report(fmt.Sprintf("round %d: drained", round))
	time.Sleep(30 * time.Second)
	report(fmt.Sprintf("round %d: 30 s later", round))
}
