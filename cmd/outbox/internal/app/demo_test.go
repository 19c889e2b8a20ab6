package app

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outbox/internal/testenv"
)

// Tests of outbox demo. They run it small (a few hundred entries) so each
// takes seconds; the flags are the demo's own, and every test checks the
// numbers the demo prints against each other and against the store.

// demoSmall are flags for a quick run that still rolls back, retries,
// parks and hands partitions over.
var demoSmall = []string{"--entries", "400", "--keys", "80", "--rollback", "0.1", "--poison", "3", "--progress", "20ms"}

// demoOutput is what a run printed, parsed.
type demoOutput struct {
	text string
	seed int
	// Header: the plan.
	planCommitted, planTxs, planKeys, planRBTxs, planRB, planPoison, planFailures, planExhausted int
	planLine                                                                                     string
	// Progress lines: appended/total, arrived/total, parked/total.
	progress [][6]int
	// Summary.
	appended, txs, keys, rbTxs, rb        int
	published, arrived, duplicates        int
	injected, distinct, retried           int
	parked, parkedPoison, parkedExhausted int
	violations, lost                      int
	ok                                    bool
	schema, redisTag                      string
}

var (
	demoHeaderRE   = regexp.MustCompile(`(?m)^outbox demo: .+, \d+ partitions, 2 relays, (?:in-process Kafka \(kfake\)|embedded NATS JetStream \(nats-server\)|RabbitMQ at \S+, exchange outbox-demo-\S+); seed (\d+)$`)
	demoPlanRE     = regexp.MustCompile(`(?m)^plan: (\d+) entries in (\d+) transactions over (\d+) keys, and (\d+) transactions \((\d+) entries\) that roll back; (\d+) poison entries; \d+(?:\.\d+)?% of publish attempts fail on purpose: (\d+) failures(?:, so (\d+) entries fail 20 times and are parked)?$`)
	demoProgressRE = regexp.MustCompile(`(?m)^  appended (\d+)/(\d+), arrived (\d+)/(\d+), parked (\d+)/(\d+), publish attempts \d+ \(\d+ failed on purpose\)$`)
	demoAppendedRE = regexp.MustCompile(`(?m)^appended   (\d+) entries in (\d+) transactions over (\d+) keys; (\d+) transactions \((\d+) entries\) rolled back$`)
	demoPublishRE  = regexp.MustCompile(`(?m)^published  (\d+) entries acknowledged by (?:Kafka|NATS|RabbitMQ) and marked sent by the relays; (\d+) arrived, plus (\d+) duplicates`)
	demoFailedRE   = regexp.MustCompile(`(?m)^failed     (\d+) publish attempts failed on purpose \((\d+) distinct by entry and attempt\); the relays retried (\d+) with backoff$`)
	demoParkedRE   = regexp.MustCompile(`(?m)^parked     (\d+) entries: (\d+) poison(?:, (\d+) out of attempts)?$`)
	demoOrderRE    = regexp.MustCompile(`(?m)^order      per-key order checked over \d+ keys: (\d+) violations$`)
	demoLostRE     = regexp.MustCompile(`(?m)^lost       (\d+)$`)
	demoSchemaRE   = regexp.MustCompile(`outbox_demo_\d+_[0-9a-f]{4}`)
	demoTagRE      = regexp.MustCompile(`outbox-demo-\d+-[0-9a-f]{4}`)
)

// parseDemo parses out; complete says whether the summary must be there.
func parseDemo(t *testing.T, out string, complete bool) demoOutput {
	t.Helper()
	d := demoOutput{text: out, schema: demoSchemaRE.FindString(out), redisTag: demoTagRE.FindString(out)}
	atoi := func(s string) int {
		if s == "" {
			return 0
		}
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("parsing %q: %v", s, err)
		}
		return n
	}
	match := func(re *regexp.Regexp, into ...*int) bool {
		m := re.FindStringSubmatch(out)
		if m == nil {
			return false
		}
		for i, p := range into {
			*p = atoi(m[i+1])
		}
		return true
	}
	if !match(demoHeaderRE, &d.seed) || !match(demoPlanRE, &d.planCommitted, &d.planTxs, &d.planKeys, &d.planRBTxs, &d.planRB, &d.planPoison, &d.planFailures, &d.planExhausted) {
		t.Fatalf("no header and plan line in the demo's output:\n%s", out)
	}
	d.planLine = demoPlanRE.FindString(out)
	for _, m := range demoProgressRE.FindAllStringSubmatch(out, -1) {
		var p [6]int
		for i := range p {
			p[i] = atoi(m[i+1])
		}
		d.progress = append(d.progress, p)
	}
	if !complete {
		return d
	}
	if !match(demoAppendedRE, &d.appended, &d.txs, &d.keys, &d.rbTxs, &d.rb) ||
		!match(demoPublishRE, &d.published, &d.arrived, &d.duplicates) ||
		!match(demoFailedRE, &d.injected, &d.distinct, &d.retried) ||
		!match(demoParkedRE, &d.parked, &d.parkedPoison, &d.parkedExhausted) ||
		!match(demoOrderRE, &d.violations) || !match(demoLostRE, &d.lost) {
		t.Fatalf("the demo's summary is incomplete:\n%s", out)
	}
	d.ok = strings.Contains(out, "\nOK: ")
	return d
}

// checkAgreement checks that every number the demo printed agrees with the
// others: the summary with the plan in the header, the progress lines with
// both.
func checkAgreement(t *testing.T, d demoOutput) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf(format+"\n%s", append(args, d.text)...)
	}
	planParked := d.planPoison + d.planExhausted
	planArrivals := d.planCommitted - planParked
	if d.appended != d.planCommitted || d.txs != d.planTxs || d.keys != d.planKeys || d.rbTxs != d.planRBTxs || d.rb != d.planRB {
		fail("summary: appended %d in %d transactions over %d keys, %d rolled back in %d; the plan: %d in %d over %d, %d in %d",
			d.appended, d.txs, d.keys, d.rb, d.rbTxs, d.planCommitted, d.planTxs, d.planKeys, d.planRB, d.planRBTxs)
	}
	if d.arrived != planArrivals || d.lost != 0 || d.violations != 0 {
		fail("summary: %d arrived, %d lost, %d order violations; the plan delivers %d", d.arrived, d.lost, d.violations, planArrivals)
	}
	if d.parked != planParked || d.parkedPoison != d.planPoison || d.parkedExhausted != d.planExhausted {
		fail("summary: parked %d (%d poison, %d out of attempts); the plan parks %d poison and %d out of attempts",
			d.parked, d.parkedPoison, d.parkedExhausted, d.planPoison, d.planExhausted)
	}
	if d.distinct != d.planFailures || d.injected < d.distinct || d.retried != d.planFailures-d.planExhausted {
		fail("summary: %d injected failures (%d distinct), %d retried; the plan fails %d attempts and parks %d entries after 20",
			d.injected, d.distinct, d.retried, d.planFailures, d.planExhausted)
	}
	if d.published != d.arrived+d.duplicates {
		// The relays count an entry once per MarkSent after Kafka took it,
		// the consumer once per record: they differ only if a publish
		// landed and its MarkSent was lost, which this run has no cause for.
		fail("summary: the relays marked %d entries sent; %d arrived plus %d duplicates", d.published, d.arrived, d.duplicates)
	}
	if !d.ok {
		fail("the demo did not print OK")
	}
	if len(d.progress) == 0 {
		fail("no progress line")
	}
	for _, p := range d.progress {
		if p[1] != d.planCommitted || p[3] != planArrivals || p[5] != planParked || p[0] > p[1] || p[2] > p[3] || p[4] > p[5] {
			fail("progress line %v does not agree with the plan (%d appended, %d arrivals, %d parked)", p, d.planCommitted, planArrivals, planParked)
		}
	}
}

// runDemo runs outbox demo in this process; it returns the exit status,
// stdout and stderr.
func runDemo(args ...string) (int, string, string) {
	var out, errs bytes.Buffer
	code := Main(append([]string{"demo"}, args...), &out, &errs, "")
	return code, out.String(), errs.String()
}

func TestDemoOnMemory(t *testing.T) {
	t.Parallel()
	demoSmallRun(t, "in-process Kafka (kfake)", "Kafka")
}

// demoSmallRun runs the demo with demoSmall and args, which must pass;
// its numbers must agree, it must roll back, inject failures, park the 3
// poison entries and hand over, and its header and summary must name the
// broker (header) and short (summary). It returns the parsed output.
func demoSmallRun(t *testing.T, header, short string, args ...string) demoOutput {
	t.Helper()
	code, out, errs := runDemo(append(slices.Clone(demoSmall), args...)...)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	d := parseDemo(t, out, true)
	checkAgreement(t, d)
	if !strings.Contains(out, "2 relays, "+header) || !strings.Contains(out, "acknowledged by "+short+" ") {
		t.Errorf("the run did not publish to %s:\n%s", header, out)
	}
	if d.planPoison != 3 || d.planRB == 0 || d.planFailures == 0 || !strings.Contains(out, "relay-C took them over") {
		t.Errorf("the run should park 3 poison entries, roll back, inject failures and hand over:\n%s", out)
	}
	return d
}

// TestDemoSeedRepeats runs the demo twice with one seed and once with
// another: the same seed gives the same plan and the same counts, however
// the relays interleave; another seed gives another plan.
func TestDemoSeedRepeats(t *testing.T) {
	t.Parallel()
	args := func(seed string) []string {
		return append(slices.Clone(demoSmall), "--fail-rate", "0.3", "--seed", seed)
	}
	var runs [3]demoOutput
	var wg sync.WaitGroup
	for i, seed := range []string{"42", "42", "43"} {
		wg.Go(func() {
			code, out, errs := runDemo(args(seed)...)
			if code != 0 {
				t.Errorf("seed %s: exit %d\n%s%s", seed, code, out, errs)
				return
			}
			runs[i] = parseDemo(t, out, true)
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	counts := func(d demoOutput) string {
		return fmt.Sprintf("%s | appended %d/%d, rolled back %d/%d, parked %d, poison %d, failed on purpose %d (distinct), arrived %d",
			d.planLine, d.appended, d.txs, d.rb, d.rbTxs, d.parked, d.parkedPoison, d.distinct, d.arrived)
	}
	if a, b := counts(runs[0]), counts(runs[1]); a != b {
		t.Errorf("seed 42 twice gave different counts:\n%s\n%s", a, b)
	}
	if runs[0].planLine == runs[2].planLine {
		t.Errorf("seeds 42 and 43 gave the same plan: %s", runs[0].planLine)
	}
	if runs[0].seed != 42 || runs[2].seed != 43 {
		t.Errorf("the header prints seeds %d and %d, want 42 and 43", runs[0].seed, runs[2].seed)
	}
	for _, d := range runs {
		checkAgreement(t, d)
	}
}

func TestDemoOnPostgres(t *testing.T) {
	t.Parallel()
	url := testenv.PostgresURL()
	conn := demoPostgres(t, url)
	code, out, errs := runDemo(append(slices.Clone(demoSmall), "--backend", "postgres", "--store", url)...)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	d := parseDemo(t, out, true)
	checkAgreement(t, d)
	if d.schema == "" || !strings.Contains(out, "removed    schema "+d.schema+"\n") {
		t.Fatalf("the output names no schema, or does not say it was removed:\n%s", out)
	}
	demoSchemaGone(t, conn, d.schema)
}

func TestDemoOnRedis(t *testing.T) {
	t.Parallel()
	url := testenv.RedisURL()
	client := demoRedis(t, url)
	// The backend follows from the URL's scheme.
	code, out, errs := runDemo(append(slices.Clone(demoSmall), "--store", url)...)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	d := parseDemo(t, out, true)
	checkAgreement(t, d)
	if d.redisTag == "" || !strings.Contains(out, "removed    keys {"+d.redisTag+"}*\n") {
		t.Fatalf("the output names no key prefix, or does not say its keys were removed:\n%s", out)
	}
	demoKeysGone(t, client, d.redisTag)
}

// TestDemoTimesOutWithAMessage gives a run far more work than its
// --timeout allows: it ends with exit 1 and says where it stood.
func TestDemoTimesOutWithAMessage(t *testing.T) {
	t.Parallel()
	code, out, errs := runDemo("--entries", "50000", "--fail-rate", "0.5", "--timeout", "300ms", "--progress", "0")
	if code != 1 || !strings.Contains(errs, "demo: timed out after 300ms (raise --timeout): appended ") || strings.Contains(out, "\nOK: ") {
		t.Fatalf("exit %d (want 1 with the timeout and the progress)\n%s%s", code, out, errs)
	}
}

func TestDemoHelpShowsFlagsAndNoURL(t *testing.T) {
	t.Setenv("OUTBOX_POSTGRES_URL", "postgres://app:S3cretPW@db.internal:5432/app")
	t.Setenv("OUTBOX_REDIS_URL", "redis://:R3disPW@cache.internal:6379/0")
	for _, args := range [][]string{{"demo", "--help"}, {"demo", "-h"}, {"help", "demo"}} {
		var out, errs bytes.Buffer
		code := Main(args, &out, &errs, "")
		all := out.String() + errs.String()
		if code != 0 {
			t.Fatalf("outbox %s: exit %d\n%s", strings.Join(args, " "), code, all)
		}
		for _, flag := range []string{"--entries=5000", "--keys=50", "--partitions=4", "--batch=100", "--fail-rate=0.1", "--poison=5",
			"--rollback=0.05", "--seed=1", "--timeout=2m", "--progress=500ms", "--backend=NAME", "--store=URL"} {
			if !strings.Contains(all, flag) {
				t.Errorf("outbox %s does not show %s:\n%s", strings.Join(args, " "), flag, all)
			}
		}
		for _, secret := range []string{"S3cretPW", "R3disPW", "db.internal", "cache.internal", "://"} {
			if strings.Contains(all, secret) {
				t.Errorf("outbox %s prints %q:\n%s", strings.Join(args, " "), secret, all)
			}
		}
	}
}

func TestDemoRejectsBadFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--partitions", "1"}, "--partitions"},
		{[]string{"--entries", "0"}, "--entries"},
		{[]string{"--entries", "10", "--poison", "6"}, "--poison"},
		{[]string{"--fail-rate", "0.9"}, "--fail-rate"},
		{[]string{"--rollback", "-0.1"}, "--rollback"},
		{[]string{"--progress", "-1s"}, "--progress"},
		{[]string{"--timeout", "0s"}, "--timeout"},
		{[]string{"--backend", "mysql"}, "--backend \"mysql\""},
		{[]string{"--backend", "redis", "--store", "postgres://u:S3cretPW@h/db"}, "--backend redis with a postgres --store URL"},
		{[]string{"--backend", "memory", "--store", "redis://h:6379"}, "--backend memory with a redis --store URL"},
		{[]string{"--store", "u:S3cretPW@h/db"}, "no scheme"},
		{[]string{"--store", "mysql://u:S3cretPW@h/db"}, "mysql"},
		{[]string{"--fail-rate", "often"}, "--fail-rate"},
	} {
		code, out, errs := runDemo(tc.args...)
		if code != 2 || !strings.Contains(errs, tc.want) || strings.Contains(out+errs, "S3cretPW") {
			t.Errorf("outbox demo %s: exit %d (want 2), stderr %q (want it to mention %q and no password)",
				strings.Join(tc.args, " "), code, errs, tc.want)
		}
	}
}

// TestDemoAsAProcess runs the built command: Ctrl-C (SIGINT) and SIGTERM
// mid-run remove the demo's schema or keys, and PgBouncer in transaction
// mode ends the run with a hint, not a panic, or passes with the simple
// protocol.
func TestDemoAsAProcess(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "outbox")
	build := exec.Command("go", "build", "-o", bin, "github.com/outboxrelay/outbox/cmd/outbox")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	t.Run("SIGINTOnPostgres", func(t *testing.T) {
		t.Parallel()
		url := testenv.PostgresURL()
		conn := demoPostgres(t, url)
		sweep := func(out string) {
			if schema := demoSchemaRE.FindString(out); schema != "" {
				_, _ = conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
			}
		}
		out := demoInterrupt(t, bin, syscall.SIGINT, 130, sweep, "--backend", "postgres", "--store", url)
		schema := demoSchemaRE.FindString(out)
		if schema == "" || !strings.Contains(out, "removed    schema "+schema+"\n") {
			t.Fatalf("no schema removal in the output:\n%s", out)
		}
		demoSchemaGone(t, conn, schema)
	})
	t.Run("SIGTERMOnRedis", func(t *testing.T) {
		t.Parallel()
		url := testenv.RedisURL()
		client := demoRedis(t, url)
		sweep := func(out string) {
			if tag := demoTagRE.FindString(out); tag != "" {
				if keys, err := client.Keys(context.Background(), "*"+tag+"*").Result(); err == nil && len(keys) > 0 {
					_ = client.Del(context.Background(), keys...).Err()
				}
			}
		}
		out := demoInterrupt(t, bin, syscall.SIGTERM, 143, sweep, "--backend", "redis", "--store", url)
		tag := demoTagRE.FindString(out)
		if tag == "" || !strings.Contains(out, "removed    keys {"+tag+"}*\n") {
			t.Fatalf("no key removal in the output:\n%s", out)
		}
		demoKeysGone(t, client, tag)
	})
	t.Run("PgBouncer", func(t *testing.T) {
		t.Parallel()
		bouncer := demoPgBouncer(t)
		conn := demoPostgres(t, testenv.PostgresURL())
		t.Run("DefaultExecModeEndsWithAHint", func(t *testing.T) {
			t.Parallel()
			code, out, errs := demoProcess(t, bin, append(slices.Clone(demoSmall), "--backend", "postgres", "--store", bouncer)...)
			all := out + errs
			// The hint is the backend's, or the demo's where the backend
			// gives none: either way, once.
			if code != 1 || strings.Count(errs, "default_query_exec_mode=simple_protocol") != 1 ||
				!strings.Contains(errs, "prepared statement") || strings.Contains(all, "goroutine ") || strings.Contains(all, "panic") {
				t.Fatalf("exit %d (want 1 with the hint and no panic)\nstdout:\n%s\nstderr:\n%s", code, out, errs)
			}
			// The schema is named in the header or in the setup error.
			schema := demoSchemaRE.FindString(all)
			if schema == "" {
				t.Fatalf("neither output names the demo's schema:\n%s", all)
			}
			demoSchemaGone(t, conn, schema)
		})
		t.Run("SimpleProtocolPasses", func(t *testing.T) {
			t.Parallel()
			store := bouncer + "&default_query_exec_mode=simple_protocol"
			if !strings.Contains(bouncer, "?") {
				store = bouncer + "?default_query_exec_mode=simple_protocol"
			}
			code, out, errs := demoProcess(t, bin, append(slices.Clone(demoSmall), "--backend", "postgres", "--store", store)...)
			if code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
			}
			d := parseDemo(t, out, true)
			checkAgreement(t, d)
			demoSchemaGone(t, conn, d.schema)
		})
	})
}

// demoWatchdog bounds a child process: it is killed if it outlives this,
// and the test fails saying so. It is no speed requirement: runs take
// seconds.
const demoWatchdog = 3 * time.Minute

// demoProcess runs the built demo to its end.
func demoProcess(t *testing.T, bin string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), demoWatchdog)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"demo"}, args...)...)
	var out, errs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errs
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("outbox demo still ran after %v; killed it\n%s%s", demoWatchdog, out.String(), errs.String())
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errs.String()
}

// demoInterrupt starts a long demo, sends sig once entries have arrived in
// Kafka, and checks how it ends: exit status code, the message, no trace.
// It returns stdout. When the test ends, sweep gets stdout to remove what
// a failed run may have left (after the test's own checks).
func demoInterrupt(t *testing.T, bin string, sig syscall.Signal, code int, sweep func(string), args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), demoWatchdog)
	defer cancel()
	// Far more work than happens before the signal: 50000 entries, half
	// of the attempts failing.
	args = append([]string{"demo", "--entries", "50000", "--fail-rate", "0.5", "--progress", "20ms"}, args...)
	cmd := exec.CommandContext(ctx, bin, args...)
	var errs bytes.Buffer
	cmd.Stderr = &errs
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	t.Cleanup(func() { sweep(out.String()) })
	sc := bufio.NewScanner(stdout)
	signalled := false
	for sc.Scan() {
		line := sc.Text()
		out.WriteString(line + "\n")
		if m := demoProgressRE.FindStringSubmatch(line); !signalled && m != nil && m[3] != "0" {
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			signalled = true
		}
	}
	_, _ = io.Copy(io.Discard, stdout)
	err = cmd.Wait()
	all := out.String() + errs.String()
	if ctx.Err() != nil {
		t.Fatalf("outbox demo still ran after %v; killed it\n%s", demoWatchdog, all)
	}
	if !signalled {
		t.Fatalf("the demo ended before any entry arrived (%v):\n%s", err, all)
	}
	name := map[syscall.Signal]string{syscall.SIGINT: "SIGINT", syscall.SIGTERM: "SIGTERM"}[sig]
	if got := cmd.ProcessState.ExitCode(); got != code ||
		!strings.Contains(errs.String(), "demo interrupted by "+name+": it stopped and left nothing behind") ||
		!strings.Contains(out.String(), "interrupted by "+name+": stopping the relays") ||
		strings.Contains(all, "goroutine ") || strings.Contains(all, "\nOK: ") {
		t.Fatalf("after %s: exit %d (want %d), output:\n%s", name, got, code, all)
	}
	return out.String()
}

// demoPostgres connects to PostgreSQL for the checks, or skips (fails
// under OUTBOX_REQUIRE_SERVICES=1).
func demoPostgres(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), url)
	if err == nil {
		if err = pool.Ping(t.Context()); err != nil {
			pool.Close()
		}
	}
	if err != nil {
		testenv.Unavailable(t, "PostgreSQL", "OUTBOX_POSTGRES_URL", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// demoSchemaGone fails t if schema exists; it drops it then, so a failing
// test leaves nothing behind either.
func demoSchemaGone(t *testing.T, conn *pgxpool.Pool, schema string) {
	t.Helper()
	var n int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM pg_namespace WHERE nspname = $1", schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("schema %s is still there", schema)
		_, _ = conn.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	}
}

// demoRedis connects to Redis for the checks, or skips (fails under
// OUTBOX_REQUIRE_SERVICES=1).
func demoRedis(t *testing.T, url string) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(opts)
	t.Cleanup(func() { _ = client.Close() })
	if err := client.Ping(t.Context()).Err(); err != nil {
		testenv.Unavailable(t, "Redis", "OUTBOX_REDIS_URL", err)
	}
	return client
}

// demoKeysGone fails t if a key holding tag exists, and deletes them then.
func demoKeysGone(t *testing.T, client *redis.Client, tag string) {
	t.Helper()
	keys, err := client.Keys(context.Background(), "*"+tag+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) > 0 {
		t.Errorf("keys of %s are still there: %v", tag, keys)
		_ = client.Del(context.Background(), keys...).Err()
	}
}

// demoPgBouncer returns the URL of a PgBouncer in transaction pooling mode
// in front of the tests' PostgreSQL: OUTBOX_PGBOUNCER_URL when set
// (scripts/test.sh sets it from scripts/pgbouncer.sh), else one this test
// starts on a free port and stops (by its PID) when it ends. Without the
// pgbouncer program it skips, or fails under OUTBOX_REQUIRE_SERVICES=1.
func demoPgBouncer(t *testing.T) string {
	t.Helper()
	if u := os.Getenv("OUTBOX_PGBOUNCER_URL"); u != "" {
		return u
	}
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/pgbouncer"); serr == nil {
			bin, err = "/usr/sbin/pgbouncer", nil
		}
	}
	if err != nil {
		msg := "PgBouncer: OUTBOX_PGBOUNCER_URL is not set and pgbouncer is not installed (Debian: apt-get install pgbouncer, or ./scripts/services.sh install)"
		if testenv.Required() {
			t.Fatal(msg + " [OUTBOX_REQUIRE_SERVICES=1, so this is a failure]")
		}
		t.Skip(msg)
	}
	upstream := testenv.PostgresURL()
	demoPostgres(t, upstream) // skips or fails here if PostgreSQL is missing
	cfg, err := pgconn.ParseConfig(upstream)
	if err != nil {
		t.Fatal(err)
	}
	server := fmt.Sprintf("host=%s port=%d dbname=%s user=%s", cfg.Host, cfg.Port, cfg.Database, cfg.User)
	if cfg.Password != "" {
		server += " password=" + cfg.Password
	}
	var runAs []string
	if os.Geteuid() == 0 { // PgBouncer refuses to run as root
		for _, name := range []string{"postgres", "nobody"} {
			if _, err := user.Lookup(name); err == nil {
				runAs = []string{"-u", name}
				break
			}
		}
	}
	dir := t.TempDir()
	for try := 0; ; try++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		ini := filepath.Join(dir, "pgbouncer.ini")
		if err := os.WriteFile(filepath.Join(dir, "users.txt"), fmt.Appendf(nil, "%q \"\"\n", cfg.User), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(ini, fmt.Appendf(nil, `[databases]
%s = %s
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
default_pool_size = 20
max_client_conn = 500
ignore_startup_parameters = extra_float_digits
`, cfg.Database, server, port, filepath.Join(dir, "users.txt")), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, append(runAs, ini)...)
		var log bytes.Buffer
		cmd.Stdout, cmd.Stderr = &log, &log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		stop := func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
		}
		url := fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", cfg.User, port, cfg.Database)
		deadline := time.Now().Add(30 * time.Second) // watchdog, not a speed requirement
		for {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			c, err := pgconn.Connect(ctx, url)
			cancel()
			if err == nil {
				_ = c.Close(context.Background())
				t.Cleanup(stop)
				return url
			}
			select {
			case <-exited:
			case <-time.After(20 * time.Millisecond):
				if time.Now().Before(deadline) {
					continue
				}
				stop()
				t.Fatalf("PgBouncer did not answer on port %d: %v\n%s", port, err, log.String())
			}
			break // it exited: most likely the port was taken meanwhile
		}
		if try == 2 {
			t.Fatalf("PgBouncer exited three times:\n%s", log.String())
		}
	}
}
