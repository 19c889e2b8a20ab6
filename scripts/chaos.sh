#!/usr/bin/env bash
# chaos.sh [-short] [-run REGEXP] [-report FILE] [-work DIR] [-parallel N] [-scale F] [-list]
#
# Builds and runs the chaos harness (chaos/): relays, appenders, a kfake
# broker (or a private nats-server or RabbitMQ node for the nats/ and amqp/
# scenarios) and private PostgreSQL/Redis servers as processes on
# 127.0.0.1, faults injected, histories checked (see docs/reliability.md).
# The mysql/ scenarios run the outbox in MariaDB: mysql/relay-kill in a
# database of its own on the shared server, mysql/conn-kill (KILL
# CONNECTION of the relays' sessions) and mysql/server-restart (mariadbd
# SIGKILLed) on a private mariadbd made with mariadb-install-db.
# The inbox/ scenarios add consumer processes (chaos inbox-consumer) that
# apply the topic through the inbox (PostgreSQL, MySQL or Redis) into an
# effect table, checked exactly once; inbox/control-no-inbox, the same
# without the inbox, must show duplicate effects.
#
#   ./scripts/chaos.sh -short     every scenario briefly (part of the test
#                                 command, so of CI); about 3 minutes here
#   ./scripts/chaos.sh            the full run (about 17 minutes here); writes
#                                 docs/reliability.md
#   ./scripts/chaos.sh -run redis only the scenarios whose name matches
#
# It needs the shared PostgreSQL, Redis and MySQL (OUTBOX_POSTGRES_URL,
# OUTBOX_REDIS_URL, OUTBOX_MYSQL_URL; defaults: the local servers) and,
# for its private servers, PostgreSQL's initdb/pg_ctl,
# redis-server/redis-cli, mariadbd/mariadb-install-db, nats-server and
# rabbitmq-server installed (./scripts/services.sh install). It signals
# only processes it started.
# Output goes through ./scripts/services.sh redact: no password in a log.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v go >/dev/null || { echo "chaos.sh: Go is not installed; get it from https://go.dev/dl/" >&2; exit 1; }

args=("$@")
short=""
report=""
partial=""
for a in "$@"; do
	case "$a" in
	-short | --short) short=1 ;;
	-report | --report | -report=* | --report=*) report=1 ;;
	-run | --run | -run=* | --run=* | -list | --list | -h | -help | --help) partial=1 ;;
	esac
done
# The full run of every scenario is what docs/reliability.md shows.
if [ -z "$short" ] && [ -z "$report" ] && [ -z "$partial" ]; then
	args+=(-report docs/reliability.md)
fi

bin="$(mktemp -d)"
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/chaos" ./chaos

{ "$bin/chaos" "${args[@]}" 2>&1 1>&3 3>&- | ./scripts/services.sh redact >&2; } 3>&1 | ./scripts/services.sh redact
