package relaycmd

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	kafkasink "github.com/outboxrelay/outbox/sinks/kafka"
)

// histogramsAfterFirstRound are the histogram families the dashboard
// queries (through their _bucket, _sum or _count series) that a fresh
// relay cannot export: the OpenTelemetry SDK exports a histogram only
// once something was recorded in it, and these record publish rounds.
// TestOpsDocsUseExportedMetrics checks their names after the relay has
// published.
var histogramsAfterFirstRound = []string{
	"outbox_relay_publish_duration_seconds",
	"outbox_relay_commit_to_publish_seconds",
}

// TestDocsMetricsExistOnFreshRelay: every metric the Grafana dashboard and
// the Prometheus alert rules query has a sample on /metrics right after
// `outbox relay` starts, before anything was published, leased away or
// tripped (so no panel shows "No data" on a healthy relay and rate() and
// increase() see a counter's first event). Only the histograms of publish
// rounds are left out (see histogramsAfterFirstRound).
func TestDocsMetricsExistOnFreshRelay(t *testing.T) {
	fresh := scrapeFreshRelay(t)

	referenced := map[string][]string{} // name -> the files that query it
	exprs := map[string][]string{dashboardDoc: dashboardExprs(t, dashboardDoc)}
	for _, r := range alertRules(t, alertsDoc) {
		exprs[alertsDoc] = append(exprs[alertsDoc], r.Expr)
	}
	for doc, list := range exprs {
		if len(list) == 0 {
			t.Fatalf("%s has no queries", doc)
		}
		for _, e := range list {
			for _, name := range promqlMetricNames(e) {
				if !slices.Contains(referenced[name], doc) {
					referenced[name] = append(referenced[name], doc)
				}
			}
		}
	}
	usedHistograms := map[string]bool{}
	for name, docs := range referenced {
		if name == "up" { // Prometheus's own scrape-health series
			continue
		}
		if base, ok := histogramFamily(name); ok {
			usedHistograms[base] = true
			continue
		}
		if !fresh[name] {
			t.Errorf("%s: %s has no sample on a fresh relay's /metrics", strings.Join(docs, ", "), name)
		}
	}
	for _, h := range histogramsAfterFirstRound {
		if !usedHistograms[h] {
			t.Errorf("histogramsAfterFirstRound lists %s, which no dashboard query or alert rule uses", h)
		}
	}
	if t.Failed() {
		t.Logf("names checked: %d; a fresh relay's samples: %v", len(referenced), sortedNames(fresh))
	}
}

// histogramFamily returns the histogram family of a _bucket, _sum or
// _count series of histogramsAfterFirstRound.
func histogramFamily(name string) (string, bool) {
	for _, s := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, s); ok && slices.Contains(histogramsAfterFirstRound, base) {
			return base, true
		}
	}
	return "", false
}

// scrapeFreshRelay starts a relay the way `outbox relay` does (its
// options from the command's defaults, the command's Kafka sink, which
// connects on first publish only, and newPrometheus's MeterProvider) on
// an empty memory store, GETs /metrics once from the command's HTTP
// server right after Start, and returns the names that have a sample.
func scrapeFreshRelay(t *testing.T) map[string]bool {
	t.Helper()
	mp, metrics, err := newPrometheus()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = mp.Shutdown(context.Background()) }()
	var c RelayCmd
	sink, err := kafkasink.Dial([]string{"127.0.0.1:1"}, c.SinkOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sink.Close() }()
	store := memory.New(memory.Options{Partitions: 4})
	relay, err := outbox.NewRelay(store, sink, c.relayOptions(slog.New(slog.DiscardHandler), mp))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(relayServer(metrics, &relayReadiness{}, nil).Handler)
	defer srv.Close()
	if err := relay.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = relay.Stop(context.Background()) }()

	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s, %v", resp.Status, err)
	}
	names := map[string]bool{} // a sample line starts with its name
	for _, line := range strings.Split(string(body), "\n") {
		if name, _, _ := strings.Cut(strings.SplitN(line, "{", 2)[0], " "); name != "" && name[0] != '#' {
			names[name] = true
		}
	}
	if testing.Verbose() {
		t.Logf("/metrics of a fresh relay:\n%s", body)
	}
	return names
}

func sortedNames(m map[string]bool) []string {
	var names []string
	for n := range m {
		if strings.HasPrefix(n, "outbox_") {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}
