package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox/chaos/history"
)

func TestScenarioNamesAreUniqueAndDescribed(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	slugs := map[string]bool{}
	for _, sc := range scenarios() {
		if seen[sc.name] {
			t.Errorf("scenario %q twice", sc.name)
		}
		seen[sc.name] = true
		if slugs[sc.slug()] {
			t.Errorf("scenario %q: slug %q taken (it names schemas, prefixes and directories)", sc.name, sc.slug())
		}
		slugs[sc.slug()] = true
		if !regexp.MustCompile(`^[a-z0-9-]+$`).MatchString(sc.slug()) {
			t.Errorf("scenario %q: slug %q has more than letters, digits and '-'", sc.name, sc.slug())
		}
		if sc.title == "" || sc.notes == "" || sc.inject == nil {
			t.Errorf("scenario %q lacks a title, notes or inject", sc.name)
		}
		if sc.short <= 0 || sc.full < sc.short || sc.every <= 0 {
			t.Errorf("scenario %q: phases short %v full %v every %v", sc.name, sc.short, sc.full, sc.every)
		}
		// Dozens of faults in the full run (the cluster and restart
		// scenarios take a few seconds per fault on top of every).
		if sc.control == "" && sc.full/(sc.every+sc.jitter/2) < 20 {
			t.Errorf("scenario %q: about %d faults in the full run, want 20 or more", sc.name, sc.full/(sc.every+sc.jitter/2))
		}
	}
}

func TestBadFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"-run", "no-such-scenario"},
		{"-run", "("},
		{"-scale", "0"},
		{"extra"},
	} {
		err := runHarness(context.Background(), args)
		if err == nil {
			t.Errorf("%q: no error", args)
			continue
		}
		t.Logf("%q: %v", args, err)
	}
}

func TestVerdicts(t *testing.T) {
	t.Parallel()
	ok := &history.Report{Appended: 10, Delivered: 10}
	lost := &history.Report{Appended: 10, Delivered: 9, Lost: []history.Entry{{ID: "e1"}}}
	inside := &scenario{name: "in"}
	outside := &scenario{name: "out", outside: "asynchronous replication"}
	control := &scenario{name: "c", control: "lossy"}
	dedupe := &scenario{name: "dedupe", noDuplicates: "the stream drops them"}
	dup := &history.Report{Appended: 10, Delivered: 11, Duplicates: 1}
	for _, c := range []struct {
		r       result
		passed  bool
		verdict string
	}{
		{result{sc: inside, report: ok}, true, "ok"},
		{result{sc: inside, report: lost}, false, "FAIL"},
		{result{sc: outside, report: lost}, true, "outside the guarantees"},
		{result{sc: control, report: lost}, true, "caught"},
		{result{sc: control, report: ok}, false, "NOT CAUGHT"},
		{result{sc: inside, err: errNoRelay}, false, "ERROR"},
		{result{sc: inside, skipped: "no redis-server"}, true, "skipped"},
		{result{sc: inside, report: dup}, true, "ok"},
		{result{sc: dedupe, report: dup}, false, "FAIL"},
		{result{sc: dedupe, report: ok}, true, "ok"},
	} {
		if got := c.r.passed(); got != c.passed {
			t.Errorf("%s %v: passed %v, want %v", c.r.sc.name, c.r.verdict(), got, c.passed)
		}
		if got := c.r.verdict(); got != c.verdict {
			t.Errorf("%s: verdict %q, want %q", c.r.sc.name, got, c.verdict)
		}
	}
}

func TestTargets(t *testing.T) {
	t.Parallel()
	c := defaultConfig(false)
	sc := &scenario{name: "x"}
	r := result{sc: sc, report: &history.Report{RecoveryMax: c.leaseTTL}}
	if got := r.targets(c); got != "met" {
		t.Errorf("recovery of a lease: %q, want met", got)
	}
	// A scenario's own lease sets its recovery target.
	long := result{sc: &scenario{name: "long", leaseTTL: 3 * c.leaseTTL}, report: &history.Report{RecoveryMax: 2 * c.leaseTTL}}
	if got := long.targets(c); got != "met" {
		t.Errorf("recovery of two config leases under a scenario lease of three: %q, want met", got)
	}
	r.report.RecoveryMax = c.leaseTTL + 2*time.Second
	r.report.Faults = []history.FaultReport{{Duplicates: c.batch*c.partitions + 1}}
	got := r.targets(c)
	if !strings.Contains(got, "recovery max") || !strings.Contains(got, "duplicates in one fault") {
		t.Errorf("targets = %q, want both misses named", got)
	}
}

func TestReport(t *testing.T) {
	t.Parallel()
	h := &harness{cfg: defaultConfig(true)}
	rs := []*result{
		{sc: &scenario{name: "a", title: "A", notes: "about a", backend: backendPostgres}, report: &history.Report{Appended: 3, Delivered: 3, Faults: []history.FaultReport{{Fault: history.Fault{What: "kill: a | x"}, Recovery: time.Second}}}, events: []string{"0.0s  relay-0.0:8 unheld:0"}},
		{sc: &scenario{name: "b", title: "B", notes: "about b", backend: backendRedis}, err: errNoRelay},
		{sc: &scenario{name: "c", title: "C", notes: "about c", backend: backendPrivateRedis}, skipped: "redis-server not found"},
	}
	path := filepath.Join(t.TempDir(), "r.md")
	if err := writeReport(path, h, rs, time.Minute); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{"| a | postgres | 3 (0) | 1 | 0 |", "ERROR: no relay is running", "skipped: redis-server not found", "kill: a / x", "| kill | 1 | 0 | 0 | 1s / 1s |", "relay-0.0:8 unheld:0", "### c"} {
		if !strings.Contains(s, want) {
			t.Errorf("report lacks %q:\n%s", want, s)
		}
	}
}

func TestHoldersLine(t *testing.T) {
	t.Parallel()
	got := holdersLine(map[string]int{"relay-1.0": 3, "relay-0.2": 5}, 0)
	if want := "relay-0.2:5 relay-1.0:3 unheld:0"; got != want {
		t.Errorf("holdersLine = %q, want %q", got, want)
	}
	if got := singleDash([]string{"--schema", "s", "--prefix", "{p}"}); strings.Join(got, " ") != "-schema s -prefix {p}" {
		t.Errorf("singleDash = %q", got)
	}
}

func TestPerPartition(t *testing.T) {
	t.Parallel()
	got := perPartition(map[string]time.Duration{"outbox partition 10": time.Second, "outbox partition 2": 20 * time.Millisecond})
	if want := "p2 20ms, p10 1s"; got != want {
		t.Errorf("perPartition = %q, want %q", got, want)
	}
}

func TestByKind(t *testing.T) {
	t.Parallel()
	r := &history.Report{Faults: []history.FaultReport{
		{Fault: history.Fault{What: "relay SIGKILLed: relay-0"}, Lost: 1, Duplicates: 2, Recovery: 3 * time.Second},
		{Fault: history.Fault{What: "relay joins: relay-1"}, Recovery: time.Second},
		{Fault: history.Fault{What: "relay SIGKILLed: relay-2"}, Duplicates: 1, Recovery: 5 * time.Second},
	}}
	got := byKind(r)
	if len(got) != 2 || got[0].kind != "relay SIGKILLed" || got[0].n != 2 || got[0].lost != 1 || got[0].dups != 3 ||
		got[0].p50 != 3*time.Second || got[0].max != 5*time.Second || got[1].kind != "relay joins" || got[1].n != 1 {
		t.Fatalf("byKind = %+v", got)
	}
}

func TestWaitingForBackoff(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	page := func(heads ...string) blockedJSON {
		var b blockedJSON
		js := `{"blocked":[` + strings.Join(heads, ",") + `],"next_after":null}`
		if err := json.Unmarshal([]byte(js), &b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	head := func(key string, due time.Time, waiting int) string {
		return fmt.Sprintf(`{"key":%q,"reason":"failing","head":{"id":"%s-1","due_at":%q},"waiting":%d}`, key, key, due.Format(time.RFC3339Nano), waiting)
	}
	later := now.Add(40 * time.Second)
	for _, c := range []struct {
		name    string
		b       blockedJSON
		due     int
		waiting bool
		why     string
	}{
		{"all behind waiting heads", page(head("a", later, 30), head("b", later, 30)), 60, true, ""},
		{"head just due", page(head("a", now.Add(-time.Second), 60)), 60, true, ""},
		{"head due long ago", page(head("a", now.Add(-time.Minute), 60)), 60, false, `key "a": its head a-1 has been due since`},
		{"due entries of no blocked key", page(head("a", later, 30)), 60, false, "30 due entries are not behind"},
		{"nothing blocked, some due", page(), 1, false, "1 due entries"},
		{"more than a page", blockedJSON{NextAfter: new(string)}, 0, false, "more blocked keys"},
	} {
		waiting, why := waitingForBackoff(c.b, c.due, now)
		if waiting != c.waiting || !strings.Contains(why, c.why) {
			t.Errorf("%s: waiting %v (%q), want %v (%q)", c.name, waiting, why, c.waiting, c.why)
		}
	}
}
