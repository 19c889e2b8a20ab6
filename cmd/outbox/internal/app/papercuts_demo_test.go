package app

import (
	"regexp"
	"strconv"
	"testing"

	"github.com/outboxrelay/outbox/internal/testenv"
)

// Issue 27, point 8: outbox demo hands over midway on every backend.

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
