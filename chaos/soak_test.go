package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseMetricsPicksGoroutinesAndRetention(t *testing.T) {
	t.Parallel()
	body := `# HELP go_goroutines Number of goroutines that currently exist.
# TYPE go_goroutines gauge
go_goroutines 42
go_threads 9
outbox_retention_removed_total{kind="archived",otel_scope_name="x"} 1500
outbox_retention_removed_total{kind="parked"} 3
outbox_retention_removed_total{kind="archived",partition="1"} 500
outbox_pending 17
`
	m, err := parseMetrics(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if m["go_goroutines"] != 42 || m["outbox_retention_removed_total:archived"] != 2000 || m["outbox_retention_removed_total:parked"] != 3 || m["outbox_pending"] != 17 {
		t.Errorf("parseMetrics = %v", m)
	}
	if _, ok := m["go_threads"]; ok {
		t.Errorf("kept a metric the soak does not read: %v", m)
	}
}

func TestSoakFlags(t *testing.T) {
	t.Parallel()
	c, err := parseSoakFlags([]string{"-short"})
	if err != nil {
		t.Fatal(err)
	}
	if c.duration != 3*time.Minute || c.rate != 100 || c.out != "" || !c.controls || len(c.backends) != 2 {
		t.Errorf("-short: %+v", c)
	}
	// The restarted relay is past its warm-up when the fitted half starts.
	if c.restartAt+c.warmup > c.duration/2 {
		t.Errorf("-short: restart at %v plus warm-up %v is past the last half's start %v", c.restartAt, c.warmup, c.duration/2)
	}
	c, err = parseSoakFlags([]string{"-duration", "4m", "-backend", "redis", "-out", "/tmp/x"})
	if err != nil {
		t.Fatal(err)
	}
	if c.duration != 4*time.Minute || c.rate != 0 || c.out != "/tmp/x" || len(c.backends) != 1 || c.backends[0] != "redis" || c.window > c.duration/3+time.Minute {
		t.Errorf("-duration 4m -backend redis: %+v", c)
	}
	if c.restartAt+c.warmup > c.duration/2 || c.killAt > c.duration || c.restartAt+c.restartEvery > c.duration {
		t.Errorf("-duration 4m: faults at %v (+%v, warm-up %v) and %v: not all within the run", c.restartAt, c.restartEvery, c.warmup, c.killAt)
	}
	c, err = parseSoakFlags(nil)
	if err != nil || c.out != "docs" || c.duration != time.Hour || c.window != 10*time.Minute {
		t.Errorf("default: %+v, %v", c, err)
	}
	for _, bad := range [][]string{
		{"-backend", "mysql"}, {"-duration", "10s"}, {"-rate", "0"}, {"extra"},
	} {
		if _, err := parseSoakFlags(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestSoakSpecsHaveTheControls(t *testing.T) {
	t.Parallel()
	specs := soakSpecs(defaultSoakConfig(true))
	var names []string
	for _, s := range specs {
		names = append(names, s.name)
		if s.duration != 3*time.Minute {
			t.Errorf("%s runs %v in -short", s.name, s.duration)
		}
	}
	if got := strings.Join(names, ","); got != "control-leak,control-autovacuum-off,postgres,redis" {
		t.Errorf("specs %s", got)
	}
}

func TestLeakRateIsFourFloorsOverTheRun(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{3 * time.Minute, time.Hour} {
		grown := float64(leakRate(d)) * d.Seconds()
		if floor := defaultSoakConfig(false).bounds["rss_bytes"].Abs; grown < 3.9*floor {
			t.Errorf("leak over %v: %.0f bytes, not 4x the RSS floor %.0f", d, grown, floor)
		}
	}
}

func TestRelayFeatString(t *testing.T) {
	t.Parallel()
	if s := (relayFeat{}).String(); !strings.Contains(s, "none of the retention flags") {
		t.Errorf("%q", s)
	}
	if s := (relayFeat{archive: true, retention: true}).String(); !strings.Contains(s, "--archive --archive-retention") || !strings.Contains(s, "not: --retention-interval --health-interval") {
		t.Errorf("%q", s)
	}
}

func TestWarnsWithMatchesTheCodeAttributeOnly(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		line string
		want bool
	}{
		{`{"level":"WARN","msg":"outbox: store health","code":"autovacuum-off","object":"server"}`, true},
		{`{"level":"INFO","msg":"outbox: store health cleared","code":"autovacuum-off"}`, false},
		{`{"level":"WARN","msg":"x","store":"postgres://h/db?application_name=soak-control-autovacuum-off-1-relay-0"}`, false},
		{`not json autovacuum-off`, false},
	} {
		if got := warnsWith(c.line, "autovacuum-off"); got != c.want {
			t.Errorf("warnsWith(%s) = %v, want %v", c.line, got, c.want)
		}
	}
}
