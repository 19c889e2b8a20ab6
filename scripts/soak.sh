#!/usr/bin/env bash
# soak.sh [-short] [-duration D] [-backend postgres|redis|postgres,redis] [-rate N] [-out DIR] [-work DIR]
#
# Builds the chaos harness (chaos/) and runs its soak (`chaos soak`): per
# backend a private server (PostgreSQL with autovacuum on, or Redis),
# three `outbox relay` processes publishing to a kfake broker process,
# appenders at a steady rate, one relay restarted every 5 minutes and one
# relay's store connections killed every 10; every 10 s a sample of the
# commit-to-publish latency, backlog, relay RSS and goroutines, table
# size and dead tuples (PostgreSQL), used_memory (Redis) and rows removed
# by retention. It fails when a resource trends upward over the last half
# of the run, when a latency window's p99 is over twice the first's, when
# an entry is lost or out of order, or when a negative control (a leaking
# relay; a PostgreSQL with autovacuum off) is not caught. The full run writes docs/soak.md, which states the bounds.
#
#   ./scripts/soak.sh -short      3 minutes, the backends and controls at
#                                 once, a fixed rate (part of the test
#                                 command, so of CI)
#   ./scripts/soak.sh             60 minutes per backend at half the
#                                 calibrated sustainable rate; writes
#                                 docs/soak.md and docs/images/soak-*.png
#   ./scripts/soak.sh -duration 4m -out /tmp/soak   a shorter full run,
#                                 its report elsewhere
#
# It needs PostgreSQL's initdb/pg_ctl and redis-server installed
# (./scripts/services.sh install); it signals only processes it started.
# Output goes through ./scripts/services.sh redact: no password in a log.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v go >/dev/null || { echo "soak.sh: Go is not installed; get it from https://go.dev/dl/" >&2; exit 1; }

bin="$(mktemp -d)"
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/chaos" ./chaos

{ "$bin/chaos" soak "$@" 2>&1 1>&3 3>&- | ./scripts/services.sh redact >&2; } 3>&1 | ./scripts/services.sh redact
