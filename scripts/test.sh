#!/usr/bin/env bash
# The project's test command: vet, then every package's tests under -race,
# then the benchmark harness in quick mode (it checks the harness still works
# and counts are right; it measures nothing worth keeping).
#
# Services: tests use PostgreSQL (OUTBOX_POSTGRES_URL, default
# postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable), Redis
# (OUTBOX_REDIS_URL, default redis://127.0.0.1:6379/0) and a Redis Cluster
# (OUTBOX_REDIS_CLUSTER_ADDRS), which this script starts on 127.0.0.1:7000-7002
# from the local redis-server binary when it is unset, and stops afterwards.
# A missing service makes its tests skip, or fail when OUTBOX_REQUIRE_SERVICES=1
# (as in CI). ./scripts/services.sh check says what is missing and how to get it.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v go >/dev/null || { echo "test.sh: Go is not installed; get it from https://go.dev/dl/" >&2; exit 1; }

./scripts/services.sh check || true

started_cluster=""
cleanup() {
	if [ -n "$started_cluster" ]; then ./scripts/redis-cluster.sh stop || true; fi
}
trap cleanup EXIT

if [ -z "${OUTBOX_REDIS_CLUSTER_ADDRS:-}" ] && [ -x scripts/redis-cluster.sh ]; then
	if command -v redis-server >/dev/null && command -v redis-cli >/dev/null; then
		if ./scripts/redis-cluster.sh status >/dev/null 2>&1; then
			echo "test.sh: using the Redis Cluster already running on 127.0.0.1:7000-7002 (left running)"
			export OUTBOX_REDIS_CLUSTER_ADDRS=127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002
		elif ./scripts/redis-cluster.sh start; then
			started_cluster=1
			export OUTBOX_REDIS_CLUSTER_ADDRS=127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002
		else
			echo "test.sh: could not start the Redis Cluster; its tests will skip (or fail under OUTBOX_REQUIRE_SERVICES=1)" >&2
		fi
	else
		echo "test.sh: redis-server/redis-cli not found, so no Redis Cluster; install Redis (Debian: apt-get install redis-server) to run the cluster tests" >&2
	fi
fi

echo "== go vet ./..."
go vet ./...

if [ -f bench/go.mod ]; then
	echo "== bench -quick (checks the benchmark harness works; numbers are meaningless)"
	(cd bench && go vet ./... && go run . -quick)
fi

echo "== go test -race ./..."
go test -race -count=1 -timeout 15m ./...
