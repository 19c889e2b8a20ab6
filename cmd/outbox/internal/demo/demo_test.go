package demo

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox/cmd/outbox/internal/cli"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestDemoPlanIsAFunctionOfTheSeed checks the plan itself: everything but
// the entry IDs is the same for the same seed and flags, and the injected
// failures depend on the entry and the attempt only.
func TestDemoPlanIsAFunctionOfTheSeed(t *testing.T) {
	t.Parallel()
	c := &DemoCmd{Entries: 3000, Keys: 40, Partitions: 4, Batch: 100, FailRate: 0.85, Poison: 7, Rollback: 0.2, Seed: 9}
	strip := func(p *demoPlan) []demoEntry {
		es := slices.Clone(p.entries)
		for i := range es {
			es[i].id = ""
		}
		return es
	}
	p1, p2 := planDemo(c), planDemo(c)
	if !slices.Equal(strip(p1), strip(p2)) || !slices.Equal(p1.txs, p2.txs) {
		t.Fatal("two plans from one seed differ")
	}
	c.Seed = 10
	if p3 := planDemo(c); slices.Equal(strip(p1), strip(p3)) {
		t.Fatal("seeds 9 and 10 gave the same plan")
	}
	checkPlanCounts(t, c, p1)
	checkPlanTransactions(t, p1)
}

// checkPlanCounts checks the plan's entries against its counts and the
// flags: rolled-back entries are neither poison nor numbered, each
// entry's failures are the attempts failsOnPurpose fails, and the totals
// add up.
func checkPlanCounts(t *testing.T, c *DemoCmd, p *demoPlan) {
	t.Helper()
	poison, exhausted, failures, committed := 0, 0, 0, 0
	for i, e := range p.entries {
		if e.rollback {
			if e.poison || e.seq != -1 {
				t.Fatalf("entry %d of a rolled-back transaction is poison or has a sequence number: %+v", i, e)
			}
			continue
		}
		committed++
		if e.poison {
			poison++
			continue
		}
		checkEntryFailures(t, p, i)
		if e.failures == demoMaxAttempts {
			exhausted++
		}
		failures += e.failures
	}
	if committed != c.Entries || poison != c.Poison || exhausted != p.exhausted || failures != p.failures || p.poison != c.Poison {
		t.Fatalf("plan counts: committed %d poison %d exhausted %d failures %d; the plan says %d, %d, %d, %d",
			committed, poison, exhausted, failures, p.committed, p.poison, p.exhausted, p.failures)
	}
	if exhausted == 0 {
		t.Fatal("at a fail rate of 0.85, some of 3000 entries should run out of attempts")
	}
}

// checkEntryFailures checks that entry i's first failures attempts fail on
// purpose and the next one, if any is left, passes.
func checkEntryFailures(t *testing.T, p *demoPlan, i int) {
	t.Helper()
	e := p.entries[i]
	for a := range e.failures {
		if !p.failsOnPurpose(i, a) {
			t.Fatalf("entry %d: attempt %d counted as failing but failsOnPurpose says it passes", i, a)
		}
	}
	if e.failures < demoMaxAttempts && p.failsOnPurpose(i, e.failures) {
		t.Fatalf("entry %d: attempt %d should pass", i, e.failures)
	}
}

// checkPlanTransactions checks that transactions commit whole or not at
// all, and that a key's sequence numbers count its committed entries in
// plan order.
func checkPlanTransactions(t *testing.T, p *demoPlan) {
	t.Helper()
	next := map[string]int{}
	for _, tx := range p.txs {
		for _, e := range p.entries[tx.first : tx.first+tx.n] {
			if e.rollback != tx.rollback {
				t.Fatalf("transaction %+v holds an entry with rollback %v", tx, e.rollback)
			}
			if !e.rollback {
				if e.seq != next[e.key] {
					t.Fatalf("key %s: seq %d, want %d", e.key, e.seq, next[e.key])
				}
				next[e.key]++
			}
		}
	}
}

func TestDemoResolvesTheStore(t *testing.T) {
	t.Parallel()
	env := map[string]string{"OUTBOX_POSTGRES_URL": "postgres://env-pg", "OUTBOX_REDIS_URL": "redis://env-redis"}
	getenv := func(k string) string { return env[k] }
	none := func(string) string { return "" }
	for _, tc := range []struct {
		backend, store string
		getenv         func(string) string
		wantBackend    string
		wantStore      string
	}{
		{"", "", getenv, "memory", ""},
		{"postgres", "", getenv, "postgres", "postgres://env-pg"},
		{"redis", "", getenv, "redis", "redis://env-redis"},
		{"postgres", "", none, "postgres", demoDefaultPostgres},
		{"redis", "", none, "redis", demoDefaultRedis},
		{"", "postgresql://flag", getenv, "postgres", "postgresql://flag"},
		{"", "rediss://flag", getenv, "redis", "rediss://flag"},
		{"postgres", "postgres://flag", getenv, "postgres", "postgres://flag"},
	} {
		c := &DemoCmd{Entries: 10, Keys: 1, Partitions: 2, Batch: 1, Timeout: time.Second, Backend: tc.backend, Store: tc.store, Seed: 1}
		r, err := c.resolve(tc.getenv)
		if err != nil || r.Backend != tc.wantBackend || r.Store != tc.wantStore {
			t.Errorf("--backend %q --store %q: got %+v, %v; want backend %s, store %q", tc.backend, tc.store, r, err, tc.wantBackend, tc.wantStore)
		}
	}
	c := &DemoCmd{Entries: 10, Keys: 1, Partitions: 2, Batch: 1, Timeout: time.Second}
	if r, err := c.resolve(none); err != nil || r.Seed == 0 {
		t.Errorf("--seed 0 should pick a seed: %+v, %v", r, err)
	}
}

func TestPgBouncerHint(t *testing.T) {
	t.Parallel()
	lost := fmt.Errorf("pgoutbox: AppendInTx: %w", &pgconn.PgError{Code: "26000", Message: `prepared statement "stmtcache_1" does not exist`})
	twice := &pgconn.PgError{Code: "42P05", Message: `prepared statement "stmtcache_1" already exists`}
	other := &pgconn.PgError{Code: "42P01", Message: `relation "x" does not exist`}
	for _, tc := range []struct {
		err      error
		hint     bool
		wantCode int
	}{
		{lost, true, 1},
		{twice, true, 1},
		{&cli.ExitError{Code: 130, Err: lost}, true, 130},
		{errors.New(`ERROR: prepared statement "stmtcache_2" does not exist (SQLSTATE 26000)`), true, 1}, // text only, as after redaction
		{other, false, 0},
		{errors.New("something else"), false, 0},
	} {
		got := pgBouncerHint(tc.err)
		if !errors.Is(got, tc.err) {
			t.Errorf("%v: the hint must wrap the error", tc.err)
		}
		has := strings.Contains(got.Error(), "default_query_exec_mode=simple_protocol")
		if has != tc.hint {
			t.Errorf("%v: hint %v, want %v: %v", tc.err, has, tc.hint, got)
		}
		var ee *cli.ExitError
		if tc.hint && (!errors.As(got, &ee) || ee.Code != tc.wantCode) {
			t.Errorf("%v: exit status %v, want %d", tc.err, ee, tc.wantCode)
		}
	}
	if pgBouncerHint(nil) != nil {
		t.Error("pgBouncerHint(nil) must be nil")
	}
}

// TestDemoStoreErrorSaysWhatWasTried checks the error for a store the demo
// cannot use: the URL it tried with the password masked, where that URL
// came from (--store, the variable, the default), the driver's cause, and
// what to change; never the password.
func TestDemoStoreErrorSaysWhatWasTried(t *testing.T) {
	t.Parallel()
	const secret = "S3cretPW"
	none := func(string) string { return "" }
	for _, b := range []struct{ backend, variable, defaultURL string }{
		{"postgres", "OUTBOX_POSTGRES_URL", demoDefaultPostgres},
		{"redis", "OUTBOX_REDIS_URL", demoDefaultRedis},
	} {
		url := func(host, pw string) string { return b.backend + "://app:" + pw + "@" + host + ":1234/db" }
		fromEnv := func(k string) string {
			if k == b.variable {
				return url("env-host", secret)
			}
			return ""
		}
		for _, tc := range []struct {
			name, backend, store string
			getenv               func(string) string
			wantURL, wantFrom    string
			wantFix              string
		}{
			{"Flag", "", url("flag-host", secret), fromEnv,
				url("flag-host", "xxxxx"), "(from --store)", "correct the --store URL"},
			{"Variable", b.backend, "", fromEnv,
				url("env-host", "xxxxx"), "(from " + b.variable + ")", "correct " + b.variable + ", or pass --store URL"},
			{"Default", b.backend, "", none,
				b.defaultURL, "(the default, as neither --store nor " + b.variable + " is set)", "start the server there, or pass --store URL or set " + b.variable},
		} {
			t.Run(b.backend+tc.name, func(t *testing.T) {
				t.Parallel()
				c := &DemoCmd{Entries: 10, Keys: 1, Partitions: 2, Batch: 1, Timeout: time.Second, Seed: 1, Backend: tc.backend, Store: tc.store}
				r, err := c.resolve(tc.getenv)
				if err != nil {
					t.Fatal(err)
				}
				// A driver's cause that echoes the URL, as some do.
				cause := errors.New(`password authentication failed for user "app" at ` + r.Store)
				err = r.storeError("cannot reach the store at", cause)
				msg := err.Error()
				want := "demo: cannot reach the store at " + tc.wantURL + " " + tc.wantFrom + ": password authentication failed"
				if !strings.HasPrefix(msg, want) || !strings.HasSuffix(msg, "\nhint: "+tc.wantFix) {
					t.Errorf("got:\n%s\nwant it to start with:\n%s\nand end with the hint: %s", msg, want, tc.wantFix)
				}
				if strings.Contains(msg, secret) {
					t.Errorf("the error shows the password: %s", msg)
				}
				if !errors.Is(err, cause) {
					t.Error("the error must wrap the driver's cause")
				}
			})
		}
	}
}
