package relaycmd

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	"github.com/outboxrelay/outbox/backoff"
)

// The operator-facing files whose metric names TestOpsDocsUseExportedMetrics
// checks, relative to this package.
const (
	opsDoc       = "../../../../docs/operations.md"
	dashboardDoc = "../../../../docs/grafana/outbox-dashboard.json"
	alertsDoc    = "../../../../docs/prometheus/outbox-alerts.yml"
)

// TestOpsDocsUseExportedMetrics: every metric name the Grafana dashboard and
// the Prometheus alert rules query, and every name in the metric table of
// docs/operations.md, is one the relay really exports through newPrometheus
// (the exporter `outbox relay` serves on /metrics); and every outbox_*
// metric the relay exports is in that table.
func TestOpsDocsUseExportedMetrics(t *testing.T) {
	exported := scrapeRelayMetrics(t)

	t.Run("Dashboard", func(t *testing.T) {
		exprs := dashboardExprs(t, dashboardDoc)
		if len(exprs) == 0 {
			t.Fatalf("%s has no queries", dashboardDoc)
		}
		for _, bad := range unknownMetrics(exprs, exported, nil) {
			t.Errorf("%s: %s", dashboardDoc, bad)
		}
		promtoolCheckExprs(t, dashboardDoc, exprs)
	})
	t.Run("AlertRules", func(t *testing.T) {
		rules := alertRules(t, alertsDoc)
		if len(rules) == 0 {
			t.Fatalf("%s has no rules", alertsDoc)
		}
		var exprs []string
		for _, r := range rules {
			exprs = append(exprs, r.Expr)
			if r.Alert == "" {
				continue
			}
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if r.Annotations[a] == "" {
					t.Errorf("%s: alert %s has no %s annotation", alertsDoc, r.Alert, a)
				}
			}
			checkRunbook(t, r.Alert, r.Annotations["runbook_url"])
		}
		// up is Prometheus's own scrape-health series: the relay-down
		// alerts need it.
		for _, bad := range unknownMetrics(exprs, exported, []string{"up"}) {
			t.Errorf("%s: %s", alertsDoc, bad)
		}
		if promtool, err := exec.LookPath("promtool"); err == nil {
			if out, err := exec.Command(promtool, "check", "rules", alertsDoc).CombinedOutput(); err != nil {
				t.Errorf("promtool check rules %s: %v\n%s", alertsDoc, err, out)
			}
		} else {
			t.Log("promtool is not installed: the rules' PromQL is parsed loosely only")
		}
	})
	t.Run("OperationsMetricTable", func(t *testing.T) {
		documented := opsMetricTable(t, opsDoc)
		if len(documented) == 0 {
			t.Fatalf("%s has no metric table (a table under \"## Metrics\" with a \"Prometheus name\" column)", opsDoc)
		}
		for _, name := range documented {
			if !exported[name] {
				t.Errorf("%s documents %s, which the relay does not export%s", opsDoc, name, suggest(name, exported))
			}
		}
		for name := range exported {
			if strings.HasPrefix(name, "outbox_") && !isSampleSuffix(name, exported) && !slices.Contains(documented, name) {
				t.Errorf("the relay exports %s, which the metric table of %s does not document", name, opsDoc)
			}
		}
	})
}

// TestUnknownMetricsCatchesMisspellings: the checker itself reports a name
// that is not exported, and only that one.
func TestUnknownMetricsCatchesMisspellings(t *testing.T) {
	exported := map[string]bool{"outbox_lag_seconds": true, "outbox_relay_publish_duration_seconds_bucket": true}
	bad := unknownMetrics([]string{
		`max by (job) (outbox_lag_seconds) > 60`,
		`histogram_quantile(0.99, sum by (le) (rate(outbox_relay_publish_duration_second_bucket[5m])))`,
		`up{job="outbox-relay"} == 0`,
	}, exported, nil)
	if len(bad) != 2 || !strings.Contains(bad[0], "outbox_relay_publish_duration_second_bucket") || !strings.Contains(bad[1], `"up"`) {
		t.Errorf("unknownMetrics = %q; want the misspelled histogram and up (not allowed here), in that order", bad)
	}
	if bad := unknownMetrics([]string{`up == 0`}, exported, []string{"up"}); len(bad) != 0 {
		t.Errorf("an allowed name was reported: %q", bad)
	}
}

func TestPromQLMetricNames(t *testing.T) {
	for _, tc := range []struct{ expr, want string }{
		{`outbox_pending`, "outbox_pending"},
		{`max by (job) (outbox_lag_seconds{job=~"$job", instance=~"${instance}"})`, "outbox_lag_seconds"},
		{`sum(rate(outbox_relay_entries_total{outcome="parked"}[$__rate_interval])) by (job, outcome)`, "outbox_relay_entries_total"},
		{`histogram_quantile(0.99, sum by (le) (rate(a_bucket[5m])))`, "a_bucket"},
		{`a > 1e3 and on(job) b offset 5m unless ignoring(instance) c`, "a b c"},
		{`x / on (job) group_left(instance) y`, "x y"},
		{`x > bool 0 or vector(0)`, "x"},
		{`label_replace(x, "dst", "$1", "src", "(.*)")`, "x"},
		{`sum without (partition) (x @ end())`, "x"},
		{`absent(up{job="outbox-relay"})`, "up"},
		{`rate(x[5m:30s]) * -Inf + NaN`, "x"},
		{`x{label="a{b}"} # a comment mentioning not_a_metric`, "x"},
		{`label_values(outbox_relay_members, job)`, "outbox_relay_members"},
	} {
		if got := strings.Join(promqlMetricNames(tc.expr), " "); got != tc.want {
			t.Errorf("promqlMetricNames(%q) = %q, want %q", tc.expr, got, tc.want)
		}
	}
}

// leaseStealer is a memory backend whose RenewLease reports the lease lost
// while steal is set, so a relay on it loses a lease as it would to a
// newer holder. Embedding keeps the backend's optional interfaces.
type leaseStealer struct {
	*memory.Backend
	steal atomic.Bool
}

func (s *leaseStealer) RenewLease(ctx context.Context, l outbox.Lease, ttl time.Duration) (outbox.Lease, error) {
	if s.steal.Load() {
		return outbox.Lease{}, fmt.Errorf("test: lease taken: %w", outbox.ErrLeaseLost)
	}
	return s.Backend.RenewLease(ctx, l, ttl)
}

// upkeepStore is a leaseStealer that also reports an archive and a health
// reading (a table, the memory and a warning), as the Postgres and Redis
// backends do, so the relay exports the retention and store gauges.
type upkeepStore struct {
	*leaseStealer
}

func (s upkeepStore) MaintainArchive(context.Context, time.Time) error { return nil }

func (s upkeepStore) PurgeArchiveBatch(context.Context, time.Time, int) (int64, bool, error) {
	return 0, false, nil
}

func (s upkeepStore) OldestArchived(context.Context) (time.Time, bool, error) {
	return time.Now().Add(-time.Hour), true, nil
}

func (s upkeepStore) Health(context.Context) (outbox.Health, error) {
	return outbox.Health{
		Tables:   []outbox.TableHealth{{Name: "outbox", Bytes: 8192, LiveRows: 1, DeadRows: 2, Vacuums: 3}},
		Memory:   &outbox.MemoryHealth{UsedBytes: 1 << 20, RSSBytes: 2 << 20, Fragmentation: 2},
		Warnings: []outbox.HealthWarning{{Code: "autovacuum-off", Message: "test: autovacuum is off"}},
	}, nil
}

var (
	_ outbox.ArchiveJanitor = upkeepStore{}
	_ outbox.HealthChecker  = upkeepStore{}
)

// scrapeRelayMetrics runs a relay on the memory backend with newPrometheus's
// MeterProvider, makes it use every instrument (publishes, a retried
// failure, a park, lease gains and a loss, the breaker opening and closing,
// a stats sample, retention of archived and parked entries, a health
// reading) and returns the metric names /metrics then serves: every sample
// name and every family name.
func scrapeRelayMetrics(t *testing.T) map[string]bool {
	t.Helper()
	var body []byte
	synctest.Test(t, func(t *testing.T) {
		mp, handler, err := newPrometheus()
		if err != nil {
			t.Fatal(err)
		}
		stealer := &leaseStealer{Backend: memory.New(memory.Options{Partitions: 2})}
		store := upkeepStore{stealer}
		var mu sync.Mutex
		down := true // the broker fails every message until cleared
		sink := outbox.SinkFunc(func(ctx context.Context, e outbox.Entry) error {
			if e.ID == "poison" {
				return backoff.Permanent(errors.New("test: refused for good"))
			}
			mu.Lock()
			defer mu.Unlock()
			if down {
				return errors.New("test: broker unreachable")
			}
			return nil
		})
		r, err := outbox.NewRelay(store, sink, outbox.RelayOptions{
			MeterProvider: mp, Logger: slog.New(slog.DiscardHandler),
			LeaseTTL: 3 * time.Second, StatsInterval: time.Second,
			BreakerThreshold: 1, BreakerCooldown: time.Second,
			ArchiveRetention: time.Hour, ParkedRetention: time.Hour,
			RetentionInterval: time.Second, HealthInterval: time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = r.Stop(context.Background()) }()
		appendEntries := func(entries ...outbox.Entry) {
			tx := store.Begin()
			if err := store.AppendInTx(context.Background(), tx, entries...); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
		}
		waitFor := func(what string, cond func(outbox.RelayStats) bool) {
			t.Helper()
			deadline := time.Now().Add(time.Hour) // synthetic time
			for !cond(r.Stats()) {
				if time.Now().After(deadline) {
					t.Fatalf("timed out waiting for %s; stats %+v", what, r.Stats())
				}
				time.Sleep(10 * time.Millisecond)
			}
		}

		waitFor("both partitions held", func(s outbox.RelayStats) bool { return s.PartitionsHeld == 2 })
		appendEntries(outbox.Entry{ID: "flaky", Topic: "t", Key: "k"})
		waitFor("a retried failure", func(s outbox.RelayStats) bool { return s.Retried > 0 })
		mu.Lock()
		down = false
		mu.Unlock()
		waitFor("the retry published", func(s outbox.RelayStats) bool { return s.Published == 1 })
		appendEntries(outbox.Entry{ID: "poison", Topic: "t", Key: "p"})
		waitFor("the poison entry parked", func(s outbox.RelayStats) bool { return s.Parked == 1 })
		stealer.steal.Store(true)
		waitFor("a lease lost", func(s outbox.RelayStats) bool { return s.LeaseLosses > 0 })
		stealer.steal.Store(false)
		waitFor("both partitions held again", func(s outbox.RelayStats) bool { return s.PartitionsHeld == 2 })
		time.Sleep(2 * time.Second) // a stats sample after the last change

		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		body, _ = io.ReadAll(rec.Body)
	})
	if t.Failed() {
		t.FailNow()
	}
	names := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" {
			names[f[2]] = true
			continue
		}
		if line == "" || line[0] == '#' {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	if testing.Verbose() {
		t.Logf("/metrics:\n%s", body)
	}
	return names
}

// grafanaVariables stand in for the dashboard's variables when its queries
// are checked by promtool.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "1m", "${job}", ".*", "$job", ".*", "${instance}", ".*", "$instance", ".*")

// promtoolCheckExprs checks that PromQL expressions parse, as recording
// rules given to promtool, when promtool is installed (Debian's prometheus
// package has it).
func promtoolCheckExprs(t *testing.T, source string, exprs []string) {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Logf("promtool is not installed: the PromQL of %s is parsed loosely only", source)
		return
	}
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rules []rule
	for i, e := range exprs {
		if strings.HasPrefix(strings.TrimSpace(e), "label_values(") {
			continue // Grafana's, not PromQL
		}
		rules = append(rules, rule{Record: fmt.Sprintf("query:%d", i), Expr: grafanaVariables.Replace(e)})
	}
	data, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "queries", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "queries.yml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput(); err != nil {
		t.Errorf("%s: a query does not parse (promtool check rules: %v):\n%s\nqueries:\n%s", source, err, out, data)
	}
}

// isSampleSuffix reports whether name is the _bucket, _sum or _count series
// of an exported histogram family (documented under the family's name).
func isSampleSuffix(name string, exported map[string]bool) bool {
	for _, s := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, s); ok && exported[base] {
			return true
		}
	}
	return false
}

// unknownMetrics returns a message for each metric name the PromQL
// expressions use that is neither exported nor allowed.
func unknownMetrics(exprs []string, exported map[string]bool, allowed []string) []string {
	var bad []string
	for _, e := range exprs {
		for _, name := range promqlMetricNames(e) {
			if !exported[name] && !slices.Contains(allowed, name) {
				bad = append(bad, fmt.Sprintf("%q is not a metric the relay exports%s (in %q)", name, suggest(name, exported), e))
			}
		}
	}
	return bad
}

// suggest names the exported metric closest to a misspelled one: the name
// with the suffix the exporter adds (a unit, _total), else the nearest by
// edit distance.
func suggest(name string, exported map[string]bool) string {
	for _, s := range []string{"_seconds", "_total", "_ratio"} {
		if exported[name+s] {
			return "; did you mean " + name + s + "?"
		}
	}
	best, dist := "", 4
	for e := range exported {
		if d := levenshtein(name, e); d < dist || d == dist && e < best {
			best, dist = e, d
		}
	}
	if best == "" {
		return ""
	}
	return "; did you mean " + best + "?"
}

func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// promqlKeywords are the identifiers of PromQL that are not metric names
// even when no parenthesis follows them: operators, modifiers, the
// aggregations (which may be followed by "by (...)" before their
// parenthesis) and the special numbers.
var promqlKeywords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true,
	"group_left": true, "group_right": true, "inf": true, "nan": true,
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true,
	"stdvar": true, "count": true, "count_values": true, "bottomk": true, "topk": true,
	"quantile": true, "limitk": true, "limit_ratio": true,
}

// labelListKeywords take a parenthesized list of label names.
var labelListKeywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
}

// promqlMetricNames returns the metric names a PromQL expression (or a
// Grafana label_values(metric, label) query) selects, loosely parsed:
// identifiers outside strings, label matchers ({...}), ranges ([...]),
// Grafana variables ($name, ${name}) and comments, that are neither
// followed by "(" (functions, aggregations) nor keywords, nor the label
// lists of by, without, on, ignoring, group_left and group_right.
func promqlMetricNames(expr string) []string {
	var names []string
	if rest, ok := strings.CutPrefix(strings.TrimSpace(expr), "label_values("); ok {
		// label_values(metric, label): only the first argument is a
		// selector.
		depth, i := 0, 0
		for ; i < len(rest); i++ {
			if c := rest[i]; c == '{' || c == '(' {
				depth++
			} else if c == '}' || c == ')' {
				depth--
			} else if c == ',' && depth == 0 {
				break
			}
		}
		expr = rest[:i]
	}
	s := expr
	skipString := func(i int) int { // s[i] is a quote; returns the index after the closing one
		q := s[i]
		for i++; i < len(s); i++ {
			if s[i] == '\\' && q != '`' {
				i++
			} else if s[i] == q {
				return i + 1
			}
		}
		return len(s)
	}
	skipTo := func(i int, close byte) int { // past the matching close, strings skipped
		for i++; i < len(s); {
			switch s[i] {
			case '"', '\'', '`':
				i = skipString(i)
			case close:
				return i + 1
			default:
				i++
			}
		}
		return len(s)
	}
	isIdentStart := func(c byte) bool { return c == '_' || c == ':' || c < 128 && unicode.IsLetter(rune(c)) }
	isIdent := func(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			i = skipString(i)
		case c == '{':
			i = skipTo(i, '}')
		case c == '[':
			i = skipTo(i, ']')
		case c == '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '$':
			i++
			if i < len(s) && s[i] == '{' {
				i = skipTo(i, '}')
			}
			for i < len(s) && isIdent(s[i]) {
				i++
			}
		case c >= '0' && c <= '9' || c == '.':
			for i < len(s) && (isIdent(s[i]) || s[i] == '.') {
				i++ // numbers and durations: 0.99, 1e3, 5m
			}
		case isIdentStart(c):
			j := i
			for j < len(s) && isIdent(s[j]) {
				j++
			}
			word := s[i:j]
			k := j
			for k < len(s) && (s[k] == ' ' || s[k] == '\t' || s[k] == '\n' || s[k] == '\r') {
				k++
			}
			switch {
			case labelListKeywords[strings.ToLower(word)] && k < len(s) && s[k] == '(':
				j = skipTo(k, ')')
			case k < len(s) && s[k] == '(':
				// a function or an aggregation
			case promqlKeywords[strings.ToLower(word)]:
			default:
				names = append(names, word)
			}
			i = j
		default:
			i++
		}
	}
	return names
}

// dashboardExprs returns every query of a Grafana dashboard: the "expr" of
// every target, wherever panels nest, and the query of every templating
// variable.
func dashboardExprs(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var exprs []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && k == "expr" {
					exprs = append(exprs, s)
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(doc["panels"])
	if tmpl, ok := doc["templating"].(map[string]any); ok {
		list, _ := tmpl["list"].([]any)
		for _, x := range list {
			v, _ := x.(map[string]any)
			if v["type"] != "query" {
				continue
			}
			switch q := v["query"].(type) {
			case string:
				exprs = append(exprs, q)
			case map[string]any:
				if s, ok := q["query"].(string); ok {
					exprs = append(exprs, s)
				}
			}
		}
	}
	return exprs
}

type alertRule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	Annotations map[string]string `yaml:"annotations"`
}

// alertRules reads a Prometheus rule file (groups: format).
func alertRules(t *testing.T, path string) []alertRule {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Groups []struct {
			Name  string      `yaml:"name"`
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var rules []alertRule
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			if r.Expr == "" {
				t.Errorf("%s: group %s: rule %s%s has no expr", path, g.Name, r.Alert, r.Record)
			}
			rules = append(rules, r)
		}
	}
	return rules
}

// checkRunbook: a runbook link points at docs/operations.md and at a
// section that exists there.
func checkRunbook(t *testing.T, alert, url string) {
	t.Helper()
	_, anchor, ok := strings.Cut(url, "docs/operations.md#")
	if !ok || anchor == "" {
		t.Errorf("%s: alert %s: runbook_url %q does not point to a section of docs/operations.md", alertsDoc, alert, url)
		return
	}
	data, err := os.ReadFile(opsDoc)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "#") && githubAnchor(strings.TrimLeft(line, "# ")) == anchor {
			return
		}
	}
	t.Errorf("%s: alert %s: runbook_url %q names no heading of %s", alertsDoc, alert, url, opsDoc)
}

// githubAnchor is the anchor GitHub gives a Markdown heading.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// opsMetricTable returns the names in the "Prometheus name" column of the
// tables under the "## Metrics" heading of docs/operations.md.
func opsMetricTable(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Clean(path))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	in, col := false, -1
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "## ") {
			in = strings.TrimSpace(line) == "## Metrics"
			continue
		}
		if !in || !strings.HasPrefix(strings.TrimSpace(line), "|") {
			col = -1
			continue
		}
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		if col < 0 {
			col = slices.IndexFunc(cells, func(c string) bool { return strings.TrimSpace(c) == "Prometheus name" })
			if col < 0 {
				col = -2 // a table without the column: skip its rows
			}
			continue
		}
		if col == -2 || col >= len(cells) || strings.Trim(cells[col], " -:") == "" {
			continue
		}
		for i, part := range strings.Split(cells[col], "`") {
			if i%2 == 1 && strings.TrimSpace(part) != "" {
				names = append(names, strings.TrimSpace(part))
			}
		}
	}
	return names
}
