// Package testenv finds the services tests run against and decides what a
// missing one means: a skip on a developer's machine, a failure in CI
// (OUTBOX_REQUIRE_SERVICES=1).
package testenv

import (
	"os"
	"strings"
	"testing"
)

// Defaults used when the variables are unset.
const (
	DefaultPostgresURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	DefaultRedisURL    = "redis://127.0.0.1:6379/0"
)

// Required reports whether OUTBOX_REQUIRE_SERVICES=1: a missing service
// must fail the test instead of skipping it.
func Required() bool { return os.Getenv("OUTBOX_REQUIRE_SERVICES") == "1" }

// Unavailable skips t, or fails it when services are required, saying which
// service is missing, why, and how to provide it.
func Unavailable(t testing.TB, service, variable string, err error) {
	t.Helper()
	msg := service + " is not reachable (" + err.Error() + "); set " + variable +
		" or run ./scripts/services.sh start (see README.md)"
	if Required() {
		t.Fatal(msg + " [OUTBOX_REQUIRE_SERVICES=1, so this is a failure]")
	}
	t.Skip(msg)
}

// PostgresURL returns OUTBOX_POSTGRES_URL or the default.
func PostgresURL() string { return env("OUTBOX_POSTGRES_URL", DefaultPostgresURL) }

// RedisURL returns OUTBOX_REDIS_URL or the default.
func RedisURL() string { return env("OUTBOX_REDIS_URL", DefaultRedisURL) }

// RedisClusterAddrs returns the addresses in OUTBOX_REDIS_CLUSTER_ADDRS
// (comma-separated), or nil when it is unset: the cluster has no default
// because it is not a standard service.
func RedisClusterAddrs() []string {
	v := strings.TrimSpace(os.Getenv("OUTBOX_REDIS_CLUSTER_ADDRS"))
	if v == "" {
		return nil
	}
	var out []string
	for _, a := range strings.Split(v, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
