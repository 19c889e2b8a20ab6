package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxrelay/outbox/cmd/outbox/internal/cli"
	"github.com/outboxrelay/outbox/cmd/outbox/internal/clitest"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
	redisoutbox "github.com/outboxrelay/outbox/backends/redis"
)

// uiToken is the token the tests serve the dashboard with.
const uiToken = "ui-test-token-5f2c9a71d3"

// syncBuffer is a bytes.Buffer safe for one writer and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// cliRun is a command that runs until a signal (ui, relay, demo --ui),
// running in this process; stop ends it as SIGINT would.
type cliRun struct {
	args        []string
	stop        chan struct{}
	done        chan int
	out, errs   *syncBuffer
	stopOnce    sync.Once
	exitStatus  int
	exitedEarly bool
}

func startCLI(t *testing.T, args ...string) *cliRun {
	t.Helper()
	r := &cliRun{args: args, stop: make(chan struct{}), done: make(chan int, 1), out: &syncBuffer{}, errs: &syncBuffer{}}
	app := &cli.App{Stdout: r.out, Stderr: r.errs, Stdin: strings.NewReader(""), Version: "test", Stop: r.stop}
	go func() { r.done <- Run(args, app) }()
	t.Cleanup(func() { r.finish(t) })
	return r
}

// waitFor waits until re matches the output (stdout and stderr) and
// returns its first group; it fails if the command exits first.
func (r *cliRun) waitFor(t *testing.T, re *regexp.Regexp) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second) // watchdog, not a speed requirement
	for time.Now().Before(deadline) {
		if m := re.FindStringSubmatch(r.out.String() + r.errs.String()); m != nil {
			return m[1]
		}
		select {
		case code := <-r.done:
			r.exitStatus, r.exitedEarly = code, true
			t.Fatalf("outbox %s exited %d before printing %v\n%s%s", strings.Join(r.args, " "), code, re, r.out, r.errs)
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatalf("outbox %s did not print %v within a minute\n%s%s", strings.Join(r.args, " "), re, r.out, r.errs)
	return ""
}

// finish stops the command and returns its exit status.
func (r *cliRun) finish(t *testing.T) int {
	t.Helper()
	r.stopOnce.Do(func() {
		close(r.stop)
		if r.exitedEarly {
			return
		}
		select {
		case r.exitStatus = <-r.done:
		case <-time.After(60 * time.Second):
			t.Fatalf("outbox %s did not stop within a minute of the stop\n%s%s", strings.Join(r.args, " "), r.out, r.errs)
		}
	})
	return r.exitStatus
}

// uiClient is an HTTP client of one dashboard, with a cookie jar (the
// CSRF cookie) and, when token is set, the bearer token.
type uiClient struct {
	t     *testing.T
	base  string
	token string
	hc    *http.Client
	// bodies holds every response body, for the secrets check.
	bodies []string
}

func newUIClient(t *testing.T, base, token string) *uiClient {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &uiClient{t: t, base: strings.TrimSuffix(base, "/"), token: token, hc: &http.Client{Jar: jar, Timeout: 30 * time.Second}}
}

// do sends a request and returns the status and the body.
func (c *uiClient) do(method, path string, body any) (int, string) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			c.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
		u, _ := url.Parse(c.base)
		for _, ck := range c.hc.Jar.Cookies(u) {
			if ck.Name == "outbox_csrf" {
				req.Header.Set("X-Outbox-CSRF", ck.Value)
			}
		}
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	c.bodies = append(c.bodies, string(b))
	return resp.StatusCode, string(b)
}

// getJSON GETs path, wants 200 and decodes the body into v.
func (c *uiClient) getJSON(path string, v any) {
	c.t.Helper()
	code, body := c.do(http.MethodGet, path, nil)
	if code != http.StatusOK {
		c.t.Fatalf("GET %s: %d %s", path, code, body)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		c.t.Fatalf("GET %s: %v\n%s", path, err, body)
	}
}

// uiOverview is the part of /api/overview the tests read.
type uiOverview struct {
	Store      string `json:"store"`
	Kind       string `json:"kind"`
	Outbox     string `json:"outbox"`
	ReadOnly   bool   `json:"read_only"`
	Partitions int    `json:"partitions"`
	Stats      struct {
		Pending int64 `json:"pending"`
		Due     int64 `json:"due"`
		Parked  int64 `json:"parked"`
	} `json:"stats"`
}

var (
	uiServingRE = regexp.MustCompile(`(?m)^outbox ui: serving (http://127\.0\.0\.1:\d+/)`)
	uiDemoURLRE = regexp.MustCompile(`(?m)^dashboard  (http://127\.0\.0\.1:\d+/) \(actions answer 403 until the run ends\)$`)
	uiDemoDone  = regexp.MustCompile(`(?m)^dashboard  (http://\S+) still serves the demo's outbox`)
)

// TestUIUsageErrors: addresses, auth and intervals are checked before the
// store is opened (exit 2, naming the fix); a non-loopback address with a
// token passes the check (the unreachable store then fails, exit 1).
func TestUIUsageErrors(t *testing.T) {
	t.Setenv("OUTBOX_UI_TOKEN", "")
	t.Setenv("OUTBOX_UI_PASSWORD", "")
	store := []string{"--store", "redis://127.0.0.1:1"}
	relay := []string{"relay", "--kafka-brokers", "127.0.0.1:1", "--store", "redis://127.0.0.1:1"}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"AllInterfaces", append([]string{"ui", "--addr", "0.0.0.0:8080"}, store...), []string{"--addr 0.0.0.0:8080 is not a loopback address", "--token", "--basic-auth USER", "OUTBOX_UI_PASSWORD", "127.0.0.1"}},
		{"EmptyHost", append([]string{"ui", "--addr", ":8080"}, store...), []string{"not a loopback address"}},
		{"IPv6Any", append([]string{"ui", "--addr", "[::]:0"}, store...), []string{"not a loopback address"}},
		{"OtherHost", append([]string{"ui", "--addr", "192.0.2.7:80"}, store...), []string{"not a loopback address"}},
		{"NoPort", append([]string{"ui", "--addr", "localhost"}, store...), []string{`--addr "localhost" is not HOST:PORT`}},
		{"EmptyPort", append([]string{"ui", "--addr", "127.0.0.1:"}, store...), []string{"is not HOST:PORT"}},
		{"ShortToken", append([]string{"ui", "--token", "short1"}, store...), []string{"--token is shorter than 16 characters"}},
		{"BasicWithoutPassword", append([]string{"ui", "--basic-auth", "admin"}, store...), []string{"--basic-auth admin needs its password in the OUTBOX_UI_PASSWORD"}},
		{"ZeroSampleInterval", append([]string{"ui", "--sample-interval", "0s"}, store...), []string{"--sample-interval must be positive"}},
		{"RelayAllInterfaces", append(slices.Clone(relay), "--ui-addr", ":9000"), []string{"--ui-addr :9000 is not a loopback address", "--ui-token", "--ui-basic-auth USER"}},
		{"RelayBadAddr", append(slices.Clone(relay), "--ui-addr", "9000"), []string{`--ui-addr "9000" is not HOST:PORT`}},
		{"RelayReadOnlyWithoutAddr", append(slices.Clone(relay), "--ui-read-only"), []string{"only --ui-addr turns on"}},
		{"DemoNotLoopback", []string{"demo", "--ui", "--ui-addr", "0.0.0.0:0"}, []string{"--ui-addr 0.0.0.0:0 is not a loopback address"}},
		{"DemoBadAddr", []string{"demo", "--ui", "--ui-addr", "nope"}, []string{`--ui-addr "nope" is not HOST:PORT`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cliFails(t, 2, tc.want, tc.args...)
		})
	}
	t.Run("NotLoopbackWithToken", func(t *testing.T) {
		r := cliFails(t, 1, []string{"ui: opening the outbox"}, append([]string{"ui", "--addr", "0.0.0.0:0", "--token", uiToken}, store...)...)
		if strings.Contains(r.stdout+r.stderr, uiToken) {
			t.Fatalf("the token is printed:\n%v", r)
		}
	})
	t.Run("NotLoopbackWithBasicAuth", func(t *testing.T) {
		t.Setenv("OUTBOX_UI_PASSWORD", "basic-pw-7c1e")
		r := cliFails(t, 1, []string{"ui: opening the outbox"}, append([]string{"ui", "--addr", "0.0.0.0:0", "--basic-auth", "admin"}, store...)...)
		if strings.Contains(r.stdout+r.stderr, "basic-pw-7c1e") {
			t.Fatalf("the password is printed:\n%v", r)
		}
	})
}

// TestUIHelp: outbox ui --help shows its flags and defaults, and the
// relay and the demo show theirs.
func TestUIHelp(t *testing.T) {
	t.Parallel()
	for cmd, flags := range map[string][]string{
		"ui":    {"Usage: outbox ui", "--store=URL", "--addr=HOST:PORT", "Default: 127.0.0.1:8080", "--read-only", "--token=TOKEN", "--basic-auth=USER", "--sample-interval=DURATION", "Default: 5s", "OUTBOX_UI_TOKEN", "OUTBOX_UI_PASSWORD"},
		"relay": {"--ui-addr=HOST:PORT", "--ui-read-only", "--ui-token=TOKEN", "--ui-basic-auth=USER"},
		"demo":  {"--ui", "--ui-addr=HOST:PORT", "Default: a free port of the IPv4 loopback address"},
	} {
		out := strings.Join(strings.Fields(cliOK(t, cmd, "--help")), " ") // unwrapped
		for _, f := range flags {
			if !strings.Contains(out, f) {
				t.Errorf("outbox %s --help lacks %s:\n%s", cmd, f, out)
			}
		}
	}
}

func TestUIOnPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, pool := cliPostgres(t)
	schema := cliSchema(t, pool)
	opts := pgoutbox.Options{Schema: schema, Partitions: 2}
	if err := pgoutbox.Migrate(ctx, pool, opts); err != nil {
		t.Fatal(err)
	}
	b, err := pgoutbox.New(ctx, pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	clitest.SeedAdmin(t, b, func(e ...outbox.Entry) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return b.AppendInTx(ctx, tx, e...) })
	})
	var secrets []string
	if cfg, err := pgconn.ParseConfig(url); err == nil && cfg.Password != "" {
		secrets = append(secrets, cfg.Password)
	}
	exerciseUI(t, "postgres", secrets, "--store", url, "--schema", schema)
}

// TestUIOnRedis runs against a Redis of its own with a password, so the
// store URL holds one the dashboard must never show.
func TestUIOnRedis(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const password = "R3dis-UI-secret"
	port := privateRedis(t, "port", "requirepass "+password)
	url := fmt.Sprintf("redis://:%s@127.0.0.1:%d/0", password, port)
	client := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), Password: password})
	defer client.Close()
	prefix := "{ui_test}"
	b, err := redisoutbox.New(ctx, client, redisoutbox.Options{Prefix: prefix, Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	clitest.SeedAdmin(t, b, func(e ...outbox.Entry) error { return b.Append(ctx, e...) })
	exerciseUI(t, "redis", []string{password}, "--store", url, "--prefix", prefix)
}

// exerciseUI serves the outbox clitest.SeedAdmin filled (named by flags) with
// outbox ui, with a token and then read-only, and checks what it serves
// against outbox status, the auth, the actions and that no secret shows.
func exerciseUI(t *testing.T, kind string, secrets []string, flags ...string) {
	secrets = append(secrets, uiToken)
	run := startCLI(t, append([]string{"ui", "--addr", "127.0.0.1:0", "--token", uiToken, "--sample-interval", "1s"}, flags...)...)
	base := run.waitFor(t, uiServingRE)
	if line := strings.TrimSpace(run.out.String()); line != "outbox ui: serving "+base+" (token required)" {
		t.Errorf("the serving line is %q", line)
	}

	// Without the token: 401, for the page and the API.
	anon := newUIClient(t, base, "")
	for _, path := range []string{"/", "/api/overview"} {
		if code, body := anon.do(http.MethodGet, path, nil); code != http.StatusUnauthorized {
			t.Errorf("GET %s without the token: %d %s", path, code, body)
		}
	}
	if code, _ := newUIClient(t, base, "wrong-token-0000000000").do(http.MethodGet, "/api/overview", nil); code != http.StatusUnauthorized {
		t.Errorf("GET /api/overview with a wrong token: %d", code)
	}

	c := newUIClient(t, base, uiToken)
	if code, body := c.do(http.MethodGet, "/", nil); code != http.StatusOK || !strings.Contains(body, "<html") {
		t.Fatalf("GET /: %d %.200s", code, body)
	}
	var ov uiOverview
	c.getJSON("/api/overview", &ov)
	st := statusOf(t, flags)
	if ov.Stats.Pending != st.Total.Pending || ov.Stats.Due != st.Total.Due || ov.Stats.Parked != st.Total.Parked ||
		ov.Partitions != st.Partitions || ov.Kind != kind || ov.Outbox != st.Outbox || ov.Store != st.Store || ov.ReadOnly {
		t.Fatalf("/api/overview %+v does not agree with outbox status -o json %+v", ov, st)
	}
	if st.Total.Pending != 3 || st.Total.Parked != 3 {
		t.Fatalf("seeded outbox: %+v", st.Total)
	}

	// An action: requeue e1 (parked) back to pending.
	if code, body := c.do(http.MethodPost, "/api/requeue", map[string]any{"ids": []string{"e1"}}); code != http.StatusOK || !strings.Contains(body, `"requeued": 1`) && !strings.Contains(body, `"requeued":1`) {
		t.Fatalf("POST /api/requeue e1: %d %s", code, body)
	}
	if st := statusOf(t, flags); st.Total.Parked != 2 || st.Total.Pending != 4 {
		t.Fatalf("after the requeue: %+v", st.Total)
	}
	if code := run.finish(t); code != 0 {
		t.Fatalf("outbox ui exited %d after the stop\n%s%s", code, run.out, run.errs)
	}
	if conn, err := net.DialTimeout("tcp", strings.TrimSuffix(strings.TrimPrefix(base, "http://"), "/"), time.Second); err == nil {
		conn.Close()
		t.Errorf("%s still accepts connections after outbox ui stopped", base)
	}

	// Read-only, without a token (loopback): the page and the API, but
	// every POST is 403 and changes nothing.
	ro := startCLI(t, append([]string{"ui", "--addr", "127.0.0.1:0", "--read-only"}, flags...)...)
	roBase := ro.waitFor(t, uiServingRE)
	if !strings.Contains(ro.out.String(), roBase+" (read-only)\n") {
		t.Errorf("the serving line does not say read-only: %q", ro.out.String())
	}
	rc := newUIClient(t, roBase, "")
	if code, _ := rc.do(http.MethodGet, "/", nil); code != http.StatusOK {
		t.Fatalf("GET / (read-only): %d", code)
	}
	var rov uiOverview
	rc.getJSON("/api/overview", &rov)
	if !rov.ReadOnly || rov.Stats.Parked != 2 {
		t.Errorf("read-only overview: %+v", rov)
	}
	for _, path := range []string{"/api/requeue", "/api/cancel"} {
		if code, body := rc.do(http.MethodPost, path, map[string]any{"ids": []string{"e2"}}); code != http.StatusForbidden || !strings.Contains(body, "read-only") {
			t.Errorf("POST %s (read-only): %d %s", path, code, body)
		}
	}
	if st := statusOf(t, flags); st.Total.Parked != 2 {
		t.Errorf("a read-only POST changed the outbox: %+v", st.Total)
	}
	if code := ro.finish(t); code != 0 {
		t.Fatalf("outbox ui --read-only exited %d\n%s%s", code, ro.out, ro.errs)
	}

	// No secret anywhere: outputs and response bodies.
	all := strings.Join(slices.Concat(c.bodies, anon.bodies, rc.bodies, []string{run.out.String(), run.errs.String(), ro.out.String(), ro.errs.String()}), "\n")
	for _, s := range secrets {
		if strings.Contains(all, s) {
			t.Errorf("a secret (%d characters) appears in an output or a response", len(s))
		}
	}
}

// TestDemoUI: outbox demo --ui serves the demo's in-memory outbox during
// the run (actions refused), keeps serving it after the run with actions
// until stopped, and still prints and checks what the demo always did.
func TestDemoUI(t *testing.T) {
	t.Parallel()
	run := startCLI(t, append([]string{"demo", "--ui"}, demoSmall...)...)
	base := run.waitFor(t, uiDemoURLRE)
	c := newUIClient(t, base, "")
	if code, body := c.do(http.MethodGet, "/", nil); code != http.StatusOK || !strings.Contains(body, "<html") {
		t.Fatalf("GET / during the demo: %d %.200s", code, body)
	}
	var ov uiOverview
	c.getJSON("/api/overview", &ov)
	if ov.Kind != "memory" || ov.Store != "in-memory backend" || ov.Partitions != 4 {
		t.Errorf("overview during the demo: %+v", ov)
	}
	code, body := c.do(http.MethodPost, "/api/requeue", map[string]any{"ids": []string{"x"}})
	if finished := uiDemoDone.MatchString(run.out.String()); !finished && (code != http.StatusForbidden || !strings.Contains(body, "the demo is running")) {
		t.Errorf("POST during the demo: %d %s", code, body)
	}

	run.waitFor(t, uiDemoDone)
	d := parseDemo(t, run.out.String(), true)
	checkAgreement(t, d)
	c.getJSON("/api/overview", &ov)
	if ov.Stats.Parked != int64(d.parked) || ov.Stats.Pending != 0 {
		t.Errorf("overview after the demo: %+v; the demo parked %d", ov.Stats, d.parked)
	}
	var parked struct {
		Entries []struct {
			ID string `json:"id"`
		} `json:"entries"`
	}
	c.getJSON("/api/parked?limit=5", &parked)
	if len(parked.Entries) == 0 {
		t.Fatalf("no parked entry listed after the demo")
	}
	if code, body := c.do(http.MethodPost, "/api/requeue", map[string]any{"ids": []string{parked.Entries[0].ID}}); code != http.StatusOK {
		t.Errorf("POST /api/requeue after the demo: %d %s", code, body)
	}
	if code := run.finish(t); code != 0 {
		t.Fatalf("demo --ui exited %d after the stop\n%s%s", code, run.out, run.errs)
	}
	if conn, err := net.DialTimeout("tcp", strings.TrimSuffix(strings.TrimPrefix(base, "http://"), "/"), time.Second); err == nil {
		conn.Close()
		t.Errorf("%s still accepts connections after the demo ended", base)
	}
}

// TestUIOnTheRelaysMetricsServer: outbox relay --ui-addr equal to
// --metrics-addr serves the dashboard next to /metrics, /healthz and
// /readyz, which need no token, while the dashboard does.
func TestUIOnTheRelaysMetricsServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, client := cliRedis(t)
	prefix := cliPrefix(t, client)
	b, err := redisoutbox.New(ctx, client, redisoutbox.Options{Prefix: prefix, Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	run := startCLI(t, "relay", "--store", url, "--prefix", prefix, "--kafka-brokers", "127.0.0.1:1",
		"--metrics-addr", addr, "--ui-addr", addr, "--ui-read-only", "--ui-token", uiToken)
	run.waitFor(t, regexp.MustCompile(`(outbox relay: running)`))
	if !strings.Contains(run.errs.String(), "serving the dashboard next to /metrics") || strings.Contains(run.errs.String(), uiToken) {
		t.Errorf("the relay's log does not say where the dashboard is, or shows the token:\n%s", run.errs)
	}
	base := "http://" + addr
	if code, _ := newUIClient(t, base, "").do(http.MethodGet, "/metrics", nil); code != http.StatusOK {
		t.Errorf("GET /metrics without the token: %d", code)
	}
	if code, _ := newUIClient(t, base, "").do(http.MethodGet, "/healthz", nil); code != http.StatusOK {
		t.Errorf("GET /healthz without the token: %d", code)
	}
	if code, _ := newUIClient(t, base, "").do(http.MethodGet, "/api/overview", nil); code != http.StatusUnauthorized {
		t.Errorf("GET /api/overview without the token: %d", code)
	}
	c := newUIClient(t, base, uiToken)
	if code, _ := c.do(http.MethodGet, "/", nil); code != http.StatusOK {
		t.Errorf("GET / with the token: %d", code)
	}
	var ov uiOverview
	c.getJSON("/api/overview", &ov)
	if !ov.ReadOnly || ov.Kind != "redis" || ov.Partitions != 2 {
		t.Errorf("overview: %+v", ov)
	}
	if code, _ := c.do(http.MethodPost, "/api/requeue", map[string]any{"ids": []string{"x"}}); code != http.StatusForbidden {
		t.Errorf("POST with --ui-read-only: %d", code)
	}
	if code := run.finish(t); code != 0 {
		t.Fatalf("relay exited %d\n%s", code, run.errs)
	}
}
