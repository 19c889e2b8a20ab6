package relaycmd

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
)

// TestPrometheusNames: the relay's instruments come out of the exporter
// under the names docs/operations.md, the dashboard and the alert rules
// use.
func TestPrometheusNames(t *testing.T) {
	mp, handler, err := newPrometheus()
	if err != nil {
		t.Fatal(err)
	}
	b := memory.New(memory.Options{Partitions: 2})
	tx := b.Begin()
	if err := b.AppendInTx(context.Background(), tx, outbox.Entry{Topic: "t", Key: "k"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	r, err := outbox.NewRelay(b, outbox.ChannelSink(make(chan outbox.Entry, 10)), outbox.RelayOptions{
		MeterProvider: mp, StatsInterval: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Stop(context.Background()) }()
	deadline := time.Now().Add(10 * time.Second)
	for r.Stats().Published == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // a stats sample after the publish
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, name := range []string{
		"outbox_relay_entries_total", "outbox_relay_publish_duration_seconds_bucket",
		"outbox_relay_commit_to_publish_seconds_bucket", "outbox_relay_lease_acquired_total",
		"outbox_relay_partitions_held", "outbox_relay_partitions_target", "outbox_relay_members",
		"outbox_relay_breaker_state", "outbox_pending", "outbox_due", "outbox_parked", "outbox_lag_seconds",
	} {
		if !strings.Contains(string(body), "\n"+name+" ") && !strings.Contains(string(body), "\n"+name+"{") {
			t.Errorf("/metrics has no %s", name)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", body)
	}
}
