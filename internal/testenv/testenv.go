// Package testenv finds the services tests run against and decides what a
// missing one means: a skip on a developer's machine, a failure in CI
// (OUTBOX_REQUIRE_SERVICES=1).
//
// # Where PostgreSQL and Redis come from
//
// [PostgresURL] and [RedisURL] decide once per test binary, in this order:
//
//  1. the variable (OUTBOX_POSTGRES_URL, OUTBOX_REDIS_URL) when it is set,
//     used as it is;
//  2. the local default ([DefaultPostgresURL], [DefaultRedisURL]) when a
//     server answers there (./scripts/services.sh start runs one);
//  3. a container started with testcontainers-go when a Docker engine is
//     reachable, shared by the binary's tests (see Containers);
//  4. the local default again, which the caller then fails to reach and
//     reports with [Unavailable], naming all three ways to get the service
//     and why no container was started.
//
// # Containers
//
// A container is started only for a variable that is unset, and only after
// the local default did not answer: setting the variable keeps the tests off
// Docker. This package imports nothing but the standard library (and
// internal/mysqlurl, which imports nothing else either); the
// container is started by a program of its own module,
// internal/testenv/containers (testcontainers-go), which the test binary
// builds with the go command and runs, so that no other module of the
// project requires testcontainers-go. Before that, the environment is
// checked within milliseconds: DOCKER_HOST naming a Unix socket that does
// not exist, or no DOCKER_HOST, no ~/.testcontainers.properties and no
// Docker socket, means no engine. Otherwise the starter finds the engine
// the way testcontainers-go does; finding none takes seconds at most.
//
// The starter keeps its container as long as the test binary runs and
// removes it when the binary's end closes its standard input, however the
// binary ended; testcontainers-go's reaper (Ryuk) removes it too, about ten
// seconds after the starter has gone. With the reaper disabled
// (TESTCONTAINERS_RYUK_DISABLED=true) a container outlives a killed starter,
// labelled outbox.testenv=1:
// docker rm -f $(docker ps -aq --filter label=outbox.testenv=1).
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
	// DefaultNATSURL is a nats-server with JetStream (-js).
	DefaultNATSURL = "nats://127.0.0.1:4222"
	// DefaultAMQPURL is a RabbitMQ server with its default guest user
	// (which RabbitMQ lets in from loopback only).
	DefaultAMQPURL = "amqp://guest:guest@127.0.0.1:5672/"
	// DefaultMySQLURL is a MariaDB (10.6 or later) or MySQL (8.0 or
	// later) server whose root user has no password, as Debian's
	// mariadb-server sets it up for local connections over TCP once
	// ./scripts/services.sh has granted it.
	DefaultMySQLURL = "mysql://root@127.0.0.1:3306/"
)

// Required reports whether OUTBOX_REQUIRE_SERVICES=1: a missing service
// must fail the test instead of skipping it.
func Required() bool { return os.Getenv("OUTBOX_REQUIRE_SERVICES") == "1" }

// Unavailable skips t, or fails it when services are required, saying which
// service is missing, why, and how to provide it. For OUTBOX_POSTGRES_URL and
// OUTBOX_REDIS_URL the message also says what became of the container (see
// the package doc).
func Unavailable(t testing.TB, service, variable string, err error) {
	t.Helper()
	msg := service + " is not reachable (" + oneLine(err) + "); "
	if s := serviceFor(variable); s != nil {
		msg += s.remedy()
	} else {
		msg += "set " + variable + " or run ./scripts/services.sh start"
	}
	msg += " (see README.md)"
	if Required() {
		t.Fatal(msg + " [OUTBOX_REQUIRE_SERVICES=1, so this is a failure]")
	}
	t.Skip(msg)
}

// PostgresURL returns the URL of the PostgreSQL server the tests use:
// OUTBOX_POSTGRES_URL when set, else the local default when it answers,
// else a container's when a Docker engine is reachable, else the default.
// The first call decides for the whole test binary and may take as long as
// starting a container; it is safe for concurrent use.
func PostgresURL() string { return postgresService.url() }

// RedisURL returns the URL of the Redis server the tests use, decided as
// [PostgresURL] decides with OUTBOX_REDIS_URL.
func RedisURL() string { return redisService.url() }

// NATSURL returns the URL of the NATS server (with JetStream) the tests
// use: OUTBOX_NATS_URL when set, else [DefaultNATSURL] when a server answers
// there, else the default, which the caller then fails to reach and
// reports with [Unavailable]. There is no container fallback: nats-server
// is one Debian package (./scripts/services.sh install), and the NATS sink's
// tests also run an embedded server of their own.
func NATSURL() string { return natsService.url() }

// AMQPURL returns the URL of the RabbitMQ server the tests use, decided as
// [NATSURL] decides with OUTBOX_AMQP_URL and [DefaultAMQPURL].
func AMQPURL() string { return amqpService.url() }

// MySQLURL returns the URL of the MySQL or MariaDB server the tests use,
// decided as [NATSURL] decides with OUTBOX_MYSQL_URL and [DefaultMySQLURL]:
// mysql://USER[:PASSWORD]@HOST[:PORT]/[DATABASE]. There is no container
// fallback: mariadb-server is one Debian package (./scripts/services.sh
// install). [MySQLDSN] turns it into a go-sql-driver/mysql DSN.
func MySQLURL() string { return mysqlService.url() }

// MySQLDSN returns [MySQLURL] as a go-sql-driver/mysql data source name
// (USER:PASSWORD@tcp(HOST:PORT)/DATABASE?PARAMS), with database (when not
// empty) in place of the URL's and the URL's query parameters kept. Tests
// create their own database and pass its name.
func MySQLDSN(database string) string {
	return mysqlDSN(MySQLURL(), database)
}

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

// oneLine is err's text on one line (joined errors, as testcontainers-go
// returns them, span several).
func oneLine(err error) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
}
