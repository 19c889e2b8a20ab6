#!/usr/bin/env bash
# The project's test command: vet, then the benchmark harness in quick mode
# (it checks the harness still works and counts are right; it measures
# nothing worth keeping), then every package's tests under -race, then the
# chaos harness's short run (relays, servers and the broker killed and
# faulted as processes, histories checked: scripts/chaos.sh -short, about 3
# minutes), then the soak's short run (scripts/soak.sh -short, about 4
# minutes: 3 minutes of load on Postgres and Redis with their negative
# controls, trends, latency windows and histories checked).
#
# Services: tests use PostgreSQL (OUTBOX_POSTGRES_URL, default
# postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable), Redis
# (OUTBOX_REDIS_URL, default redis://127.0.0.1:6379/0) and a Redis Cluster
# (OUTBOX_REDIS_CLUSTER_ADDRS), which this script starts on 127.0.0.1:7000-7002
# from the local redis-server binary when it is unset, and stops afterwards; and
# a PgBouncer in transaction pooling mode in front of that PostgreSQL
# (OUTBOX_PGBOUNCER_URL), which it starts with scripts/pgbouncer.sh when it is
# unset and pgbouncer is installed, and stops afterwards; NATS with JetStream
# (OUTBOX_NATS_URL, default nats://127.0.0.1:4222) and RabbitMQ
# (OUTBOX_AMQP_URL, default amqp://guest:guest@127.0.0.1:5672/) for the NATS
# and RabbitMQ sinks, whose restart tests and chaos scenarios also run private
# nats-server and RabbitMQ processes of their own.
# A missing service makes its tests skip, or fail when OUTBOX_REQUIRE_SERVICES=1
# (as in CI). ./scripts/services.sh check says what is missing and how to get it.
#
# Everything this script prints goes through ./scripts/services.sh redact, so a
# password in a service URL never reaches a log (the benchmark harness, for
# one, prints its URLs when a server is down).
set -euo pipefail
cd "$(dirname "$0")/.."

# modules prints a package pattern for every module of the workspace
# (go.work) but bench/: ./... for the root module, ./DIR/... for the others.
modules() {
	local root dir
	root="$(pwd)"
	go list -m -f '{{.Dir}}' | while read -r dir; do
		case "$dir" in
		"$root") echo "./..." ;;
		"$root/bench") ;;
		*) echo "./${dir#"$root"/}/..." ;;
		esac
	done
}

main() {
	command -v go >/dev/null || { echo "test.sh: Go is not installed; get it from https://go.dev/dl/" >&2; exit 1; }

	./scripts/services.sh check || true

	started_cluster=""
	started_pgbouncer=""
	tmp="$(mktemp -d)"
	cleanup() {
		if [ -n "$started_cluster" ]; then ./scripts/redis-cluster.sh stop || true; fi
		if [ -n "$started_pgbouncer" ]; then ./scripts/pgbouncer.sh stop || true; fi
		rm -rf "$tmp"
	}
	trap cleanup EXIT

	if [ -z "${OUTBOX_REDIS_CLUSTER_ADDRS:-}" ] && [ -x scripts/redis-cluster.sh ]; then
		if command -v redis-server >/dev/null && command -v redis-cli >/dev/null; then
			if ./scripts/redis-cluster.sh status >/dev/null 2>&1; then
				echo "test.sh: using the Redis Cluster already running on 127.0.0.1:7000-7002 (left running)"
				export OUTBOX_REDIS_CLUSTER_ADDRS=127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002
			# The servers it starts inherit its standard output and error: give them
			# a file, not the pipe to redact, which would wait for them to exit.
			elif ./scripts/redis-cluster.sh start >"$tmp/cluster.log" 2>&1; then
				cat "$tmp/cluster.log"
				started_cluster=1
				export OUTBOX_REDIS_CLUSTER_ADDRS=127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002
			else
				cat "$tmp/cluster.log" >&2
				echo "test.sh: could not start the Redis Cluster; its tests will skip (or fail under OUTBOX_REQUIRE_SERVICES=1)" >&2
			fi
		else
			echo "test.sh: redis-server/redis-cli not found, so no Redis Cluster; install Redis (Debian: apt-get install redis-server) to run the cluster tests" >&2
		fi
	fi

	if [ -z "${OUTBOX_PGBOUNCER_URL:-}" ]; then
		if command -v pgbouncer >/dev/null; then
			if ./scripts/pgbouncer.sh status >/dev/null 2>&1; then
				echo "test.sh: using the PgBouncer scripts/pgbouncer.sh started earlier (left running)"
				OUTBOX_PGBOUNCER_URL="$(./scripts/pgbouncer.sh url)"
				export OUTBOX_PGBOUNCER_URL
			elif ./scripts/pgbouncer.sh start >"$tmp/pgbouncer.log" 2>&1; then
				cat "$tmp/pgbouncer.log"
				started_pgbouncer=1
				OUTBOX_PGBOUNCER_URL="$(./scripts/pgbouncer.sh url)"
				export OUTBOX_PGBOUNCER_URL
			else
				cat "$tmp/pgbouncer.log" >&2
				echo "test.sh: could not start PgBouncer; its tests will skip (or fail under OUTBOX_REQUIRE_SERVICES=1)" >&2
			fi
		else
			echo "test.sh: pgbouncer not found, so the PgBouncer tests skip (they fail under OUTBOX_REQUIRE_SERVICES=1); install it (Debian: apt-get install pgbouncer, or ./scripts/services.sh install)" >&2
		fi
	fi

	# The repository is several modules tied by go.work (the root module
	# requires no store, broker, CLI or container library; each backend,
	# sink and command is a module of its own): every pattern below names
	# every module but bench/, which has its own step.
	local pkgs
	pkgs="$(modules)"
	echo "== go vet (every module)"
	# shellcheck disable=SC2086
	go vet $pkgs

	if [ -f bench/go.mod ]; then
		echo "== bench -quick (checks the benchmark harness works; numbers are meaningless)"
		(cd bench && go vet ./... && go run . -quick)
	fi

	echo "== go test -race (every module)"
	# shellcheck disable=SC2086
	go test -race -count=1 -timeout 15m $pkgs

	echo "== chaos -short (every chaos scenario briefly; the full run is ./scripts/chaos.sh, see docs/reliability.md)"
	./scripts/chaos.sh -short

	echo "== soak -short (3 minutes of load, Postgres and Redis, with the leak and autovacuum-off controls; the full run, ./scripts/soak.sh, writes docs/soak.md)"
	./scripts/soak.sh -short
}

# Standard output and standard error each through redact, kept apart.
{ main 2>&1 1>&3 3>&- | ./scripts/services.sh redact >&2; } 3>&1 | ./scripts/services.sh redact
