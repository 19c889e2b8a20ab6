package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/internal/testenv"
)

func TestBrokerWorkloadSelection(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		only, skip string
		want       []string // "broker sub" that run
	}{
		{"", "", []string{"nats raw publish", "nats sink alone", "nats postgres drain", "nats redis drain", "nats hot key", "nats W3 latency", "rabbitmq raw publish", "rabbitmq sink alone", "rabbitmq postgres drain", "rabbitmq redis drain", "rabbitmq hot key", "rabbitmq W3 latency"}},
		{"nats", "", []string{"nats raw publish", "nats sink alone", "nats postgres drain", "nats redis drain", "nats hot key", "nats W3 latency"}},
		{"rabbitmq (raw publish|postgres drain)", "", []string{"rabbitmq raw publish", "rabbitmq postgres drain"}},
		{"drain", "rabbitmq", []string{"nats postgres drain", "nats redis drain"}},
		{"", "W3|hot key|nats", []string{"rabbitmq raw publish", "rabbitmq sink alone", "rabbitmq postgres drain", "rabbitmq redis drain"}},
		{"postgres W3", "", nil}, // our no-op W3 only
	} {
		s := &Suite{}
		if c.only != "" {
			s.cfg.Only = regexp.MustCompile(c.only)
		}
		if c.skip != "" {
			s.cfg.Skip = regexp.MustCompile(c.skip)
		}
		var got []string
		for _, b := range []string{"nats", "rabbitmq"} {
			for _, sub := range brokerSubs {
				if s.brokerSubSelected(b, sub) {
					got = append(got, b+" "+sub)
				}
			}
			if s.selectedWorkload(workload{name: b}) != slices.ContainsFunc(got, func(g string) bool { return strings.HasPrefix(g, b+" ") }) {
				t.Errorf("-only %q -skip %q: workload %s selected = %v, its parts %v", c.only, c.skip, b, !s.selectedWorkload(workload{name: b}), got)
			}
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("-only %q -skip %q: run %q, want %q", c.only, c.skip, got, c.want)
		}
	}
}

func TestKeyedMessagesRoundRobin(t *testing.T) {
	t.Parallel()
	m := keyedMessages(10, 3)
	wantKeys := []string{"agg-0", "agg-1", "agg-2", "agg-0", "agg-1", "agg-2", "agg-0", "agg-1", "agg-2", "agg-0"}
	if !slices.Equal(m.keys, wantKeys) {
		t.Fatalf("keys %q, want %q", m.keys, wantKeys)
	}
	if want := []int{0, 0, 0, 1, 1, 1, 2, 2, 2, 3}; !slices.Equal(m.keySeq, want) {
		t.Fatalf("key sequence numbers %v, want %v", m.keySeq, want)
	}
	for i, p := range m.payload {
		if keyFrom(m, p) != m.keys[i] {
			t.Fatalf("keyFrom(message %d) = %q, want %q", i, keyFrom(m, p), m.keys[i])
		}
	}
	if keyFrom(m, payload(10, 0)) != "" || keyFrom(m, []byte("foreign")) != "" {
		t.Fatal("keyFrom gave a key to a message not of the set")
	}
}

func writeReport(t *testing.T, path string, r report) {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestMergeReplacesTheSameFiguresAndKeepsTheRest(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pubPath, addPath := filepath.Join(dir, "results.json"), filepath.Join(dir, "add.json")
	writeReport(t, pubPath, report{
		Machine: MachineInfo{Date: "full", N: 100, Runs: 3, Peers: map[string]string{"a": "v1"}},
		Results: []*Result{{Key: "kept", Runs: []float64{1}, Median: 1}, {Key: "replaced", Runs: []float64{2}, Median: 2, Note: "old"}},
	})
	writeReport(t, addPath, report{
		Machine: MachineInfo{Date: "later", N: 100, Runs: 2, Peers: map[string]string{"a": "v2", "b": "v3"}},
		Results: []*Result{{Key: "replaced", Runs: []float64{5, 7}, Median: 6, Note: "new"}, {Key: "added", Runs: []float64{9}, Median: 9}},
	})
	cfg := Config{JSONPath: pubPath, DocPath: filepath.Join(dir, "benchmarks.md")}
	if err := merge(cfg, addPath); err != nil {
		t.Fatal(err)
	}
	got, err := readReport(pubPath)
	if err != nil {
		t.Fatal(err)
	}
	if got.Machine.Date != "full" || got.Machine.Peers["a"] != "v1" || got.Machine.Peers["b"] != "v3" {
		t.Errorf("machine %+v: want the full run's, with the new peer b", got.Machine)
	}
	byKey := map[string]*Result{}
	for _, r := range got.Results {
		byKey[r.Key] = r
	}
	if len(got.Results) != 3 || byKey["kept"].Median != 1 || byKey["replaced"].Median != 6 || byKey["added"].Median != 9 {
		t.Fatalf("results after the merge: %d, kept/replaced/added = %v/%v/%v", len(got.Results), byKey["kept"], byKey["replaced"], byKey["added"])
	}
	if n := byKey["replaced"].Note; !strings.HasPrefix(n, "new; ") || !strings.Contains(n, "measured later, 2 rounds") {
		t.Errorf("merged note %q does not say when it was measured", n)
	}
	if n := byKey["added"].Note; !strings.HasPrefix(n, "measured later") {
		t.Errorf("merged note %q does not say when it was measured", n)
	}
	doc, err := os.ReadFile(cfg.DocPath)
	if err != nil || !strings.Contains(string(doc), "measured later") {
		t.Fatalf("the markdown report was not rewritten with the merged figures (%v)", err)
	}

	for _, bad := range []report{
		{Machine: MachineInfo{Quick: true, N: 100}},
		{Machine: MachineInfo{N: 5}},
		{Machine: MachineInfo{N: 100}, Failures: []string{"lost one"}},
	} {
		writeReport(t, addPath, bad)
		if err := merge(cfg, addPath); err == nil {
			t.Errorf("merge accepted %+v", bad)
		}
	}
}

// destinationRoundTrip checks a broker destination: the raw client's
// messages are acknowledged and read back, each once and in key order;
// and the read-back of a destination holding one message too many fails.
func destinationRoundTrip(t *testing.T, b brokerTarget) {
	t.Cleanup(b.close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 300
	m := keyedMessages(n, 7)
	publish := func(d destination) []string {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = outbox.NewID()
		}
		tr := newTracker(n)
		if err := d.rawPublish(ctx, m, ids, tr); err != nil {
			t.Fatal(err)
		}
		if err := tr.counts_().check(false); err != nil {
			t.Fatalf("acknowledged: %v", err)
		}
		return ids
	}

	d, err := b.open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	publish(d)
	back := newTracker(n)
	if err := readBack(ctx, d, m, n, back); err != nil {
		t.Fatal(err)
	}
	if c := back.counts_(); c.check(false) != nil || c.Delivered != n {
		t.Fatalf("read back %+v", c)
	}

	d2, err := b.open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.close()
	ids := publish(d2)
	if b.key == "nats" {
		// The same entry ID again: the stream's duplicate window drops it,
		// and the raw client says so.
		err := d2.rawPublish(ctx, m.head(1), ids[:1], newTracker(1))
		if err == nil || !strings.Contains(err.Error(), "duplicate") {
			t.Fatalf("a message published again with its ID: %v, want it taken for a duplicate", err)
		}
	}
	if err := d2.rawPublish(ctx, m.head(1), []string{outbox.NewID()}, newTracker(1)); err != nil {
		t.Fatal(err)
	}
	if err := readBack(ctx, d2, m, n, newTracker(n)); err == nil || !strings.Contains(err.Error(), "count wrong") {
		t.Fatalf("read-back of a destination with a message too many: %v, want a wrong count", err)
	}
}

func TestNATSDestinationRoundTrip(t *testing.T) {
	t.Parallel()
	b, err := dialNATSTarget(context.Background(), testenv.NATSURL())
	if err != nil {
		testenv.Unavailable(t, "NATS", "OUTBOX_NATS_URL", err)
	}
	destinationRoundTrip(t, b)
}

func TestAMQPDestinationRoundTrip(t *testing.T) {
	t.Parallel()
	b, err := dialAMQPTarget(context.Background(), testenv.AMQPURL())
	if err != nil {
		testenv.Unavailable(t, "RabbitMQ", "OUTBOX_AMQP_URL", err)
	}
	destinationRoundTrip(t, b)
}

func TestUnreachableBrokerIsSkippedOrFailsWithoutItsPassword(t *testing.T) {
	// Not parallel: it sets environment variables.
	t.Setenv("OUTBOX_AMQP_URL", "amqp://bench:s3cret-pw@127.0.0.1:1/")
	t.Setenv("OUTBOX_REQUIRE_SERVICES", "")
	s := &Suite{keep: map[string]any{}}
	if err := s.brokerWorkload(context.Background(), "rabbitmq"); err != nil {
		t.Fatalf("an unreachable broker failed the run without OUTBOX_REQUIRE_SERVICES: %v", err)
	}
	if b, ok := s.keep["broker.rabbitmq"].(brokerTarget); !ok || b.open != nil {
		t.Fatalf("the unreachable broker is not remembered as skipped: %#v", s.keep["broker.rabbitmq"])
	}
	if err := s.brokerWorkload(context.Background(), "rabbitmq"); err != nil {
		t.Fatalf("second round: %v", err)
	}

	t.Setenv("OUTBOX_REQUIRE_SERVICES", "1")
	s = &Suite{keep: map[string]any{}}
	err := s.brokerWorkload(context.Background(), "rabbitmq")
	if err == nil {
		t.Fatal("an unreachable broker did not fail the run under OUTBOX_REQUIRE_SERVICES=1")
	}
	for _, want := range []string{"OUTBOX_AMQP_URL", "127.0.0.1:1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if strings.Contains(err.Error(), "s3cret-pw") {
		t.Errorf("error %q shows the password", err)
	}
}
