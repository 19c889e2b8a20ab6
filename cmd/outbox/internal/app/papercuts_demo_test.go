package app

import (
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/outboxrelay/outbox/internal/testenv"
)

// Issue 27, point 8: outbox demo hands over midway on every backend, and
// its connection errors say what was tried.

var demoHandoverRE = regexp.MustCompile(`(?m)^handover   relay-A stopped after (\d+) arrivals holding \d+ partitions; relay-C took them over$`)

// TestDemoHandsOverMidway runs the demo on each backend and checks that
// relay-A hands over to relay-C midway: after between a quarter and three
// quarters of the planned arrivals. On PostgreSQL it used to come after
// nearly all of them (4,975 of 4,995), because the consumer waited for a
// commit per record. The band is wide on purpose: the point is where the
// handover falls, not how fast anything runs.
func TestDemoHandsOverMidway(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		backend string
		store   func(t *testing.T) string
	}{
		{"memory", func(*testing.T) string { return "" }},
		{"postgres", func(t *testing.T) string {
			url := testenv.PostgresURL()
			demoPostgres(t, url) // skips, or fails under OUTBOX_REQUIRE_SERVICES=1
			return url
		}},
		{"redis", func(t *testing.T) string {
			url := testenv.RedisURL()
			demoRedis(t, url)
			return url
		}},
	} {
		t.Run(tc.backend, func(t *testing.T) {
			t.Parallel()
			args := []string{"--entries", "2000", "--backend", tc.backend}
			if store := tc.store(t); store != "" {
				args = append(args, "--store", store)
			}
			code, out, errs := runDemo(args...)
			if code != 0 {
				t.Fatalf("exit %d\n%s%s", code, out, errs)
			}
			d := parseDemo(t, out, true)
			checkAgreement(t, d)
			m := demoHandoverRE.FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("no handover line:\n%s", out)
			}
			at, _ := strconv.Atoi(m[1])
			arrivals := d.planCommitted - d.planPoison - d.planExhausted
			t.Logf("relay-A handed over after %d of %d arrivals", at, arrivals)
			if at < arrivals/4 || at > arrivals*3/4 {
				t.Errorf("relay-A handed over after %d of %d arrivals, not midway (%d to %d):\n%s", at, arrivals, arrivals/4, arrivals*3/4, out)
			}
		})
	}
}

// demoBadPassword is the wrong password of the connection error tests: it
// must not appear in anything the demo prints.
const demoBadPassword = "S3cretPW"

// TestDemoConnectionErrorsSayWhatWasTried gives the demo a store that
// refuses its credentials, with --store: the error names the URL it tried
// (password masked), that it came from --store, and the server's cause.
func TestDemoConnectionErrorsSayWhatWasTried(t *testing.T) {
	t.Parallel()
	t.Run("PostgresWrongPassword", func(t *testing.T) {
		t.Parallel()
		addr := demoRefusingPostgres(t)
		store := "postgres://app:" + demoBadPassword + "@" + addr + "/app?sslmode=disable"
		demoStoreError(t, []string{"--store", store},
			"demo: cannot reach PostgreSQL at postgres://app:xxxxx@"+addr+"/app?sslmode=disable (from --store): ",
			`password authentication failed for user "app" (SQLSTATE 28P01)`, "hint: correct the --store URL")
	})
	t.Run("PostgresUnknownRole", func(t *testing.T) {
		t.Parallel()
		real := testenv.PostgresURL()
		demoPostgres(t, real)
		store, redacted := demoWithUser(t, real, "outbox_demo_nobody")
		// Trust authentication answers that the role does not exist,
		// password authentication that the password is wrong: both class
		// 28 (invalid authorization).
		demoStoreError(t, []string{"--backend", "postgres", "--store", store},
			"demo: cannot reach PostgreSQL at "+redacted+" (from --store): ", "(SQLSTATE 28", "hint: correct the --store URL")
	})
	t.Run("RedisWrongPassword", func(t *testing.T) {
		t.Parallel()
		real := testenv.RedisURL()
		demoRedis(t, real)
		store, redacted := demoWithUser(t, real, "outbox-demo-nobody")
		demoStoreError(t, []string{"--store", store},
			"demo: cannot reach Redis at "+redacted+" (from --store): ", "WRONGPASS", "hint: correct the --store URL")
	})
}

// TestDemoConnectionErrorsNameTheVariable is the same with the URL in
// OUTBOX_POSTGRES_URL or OUTBOX_REDIS_URL (t.Setenv: not parallel).
func TestDemoConnectionErrorsNameTheVariable(t *testing.T) {
	t.Run("Postgres", func(t *testing.T) {
		addr := demoRefusingPostgres(t)
		t.Setenv("OUTBOX_POSTGRES_URL", "postgres://app:"+demoBadPassword+"@"+addr+"/app")
		demoStoreError(t, []string{"--backend", "postgres"},
			"demo: cannot reach PostgreSQL at postgres://app:xxxxx@"+addr+"/app (from OUTBOX_POSTGRES_URL): ",
			`password authentication failed for user "app" (SQLSTATE 28P01)`, "hint: correct OUTBOX_POSTGRES_URL, or pass --store URL")
	})
	t.Run("Redis", func(t *testing.T) {
		real := testenv.RedisURL()
		demoRedis(t, real)
		store, redacted := demoWithUser(t, real, "outbox-demo-nobody")
		t.Setenv("OUTBOX_REDIS_URL", store)
		demoStoreError(t, []string{"--backend", "redis"},
			"demo: cannot reach Redis at "+redacted+" (from OUTBOX_REDIS_URL): ", "WRONGPASS", "hint: correct OUTBOX_REDIS_URL, or pass --store URL")
	})
}

// demoStoreError runs the demo with args and checks that it fails with
// exit 1 and an error that starts with head, holds cause and ends with
// hint, and that the password appears nowhere.
func demoStoreError(t *testing.T, args []string, head, cause, hint string) {
	t.Helper()
	code, out, errs := runDemo(append(args, "--progress", "0")...)
	if code != 1 || !strings.Contains(errs, head) || !strings.Contains(errs, cause) || !strings.HasSuffix(strings.TrimSpace(errs), hint) {
		t.Errorf("exit %d (want 1); stderr:\n%s\nwant it to contain %q and %q and end with %q", code, errs, head, cause, hint)
	}
	if strings.Contains(out+errs, demoBadPassword) {
		t.Errorf("the output shows the password:\n%s%s", out, errs)
	}
}

// demoWithUser returns raw with its user info replaced by user and
// demoBadPassword, and that URL as the demo prints it (password masked).
func demoWithUser(t *testing.T, raw, user string) (store, redacted string) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(user, demoBadPassword)
	store = u.String()
	u.User = url.UserPassword(user, "xxxxx")
	return store, u.String()
}

// demoRefusingPostgres starts a server speaking the PostgreSQL protocol
// that asks every client for a password and refuses it, as a server does
// with a wrong password (SQLSTATE 28P01), which a test server that trusts
// local connections never does. It returns its host:port.
func demoRefusingPostgres(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go refusePassword(conn) // badinput_test.go
		}
	}()
	return ln.Addr().String()
}
