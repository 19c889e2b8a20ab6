#!/usr/bin/env bash
# kfake.sh start|stop|status|brokers — an in-memory Kafka (franz-go's kfake,
# internal/cmd/kfakebroker) as a process of its own on 127.0.0.1, for trying
# `outbox relay` without a Kafka cluster:
#
#   ./scripts/kfake.sh start
#   outbox relay --store ... --kafka-brokers "$(./scripts/kfake.sh brokers)" --kafka-auto-create-topics
#
#   start    build the broker and start it on ports it picks (or reuse the one
#            this script started that still runs); prints the broker list
#   stop     stop it: kills only the PID this script recorded, if it is the broker
#   status   exit 0 and print the broker list if it runs, else exit 1
#   brokers  print the broker list (host:port,...) for --kafka-brokers
#
# The broker creates a topic when a client that asks for it first produces
# to it (auto.create.topics.enable on), with OUTBOX_KFAKE_PARTITIONS
# partitions (default 4). `outbox relay` does not ask unless given
# --kafka-auto-create-topics (its default is off, as production brokers
# usually are): without the flag, or topics named in OUTBOX_KFAKE_TOPICS
# (comma-separated, created at start), its entries are retried and then
# parked after --kafka-unknown-topic-timeout (1m). start prints the relay
# flags to use. Nothing is persisted: stop loses every record. DIR defaults
# to /tmp/outbox-kfake (override with OUTBOX_KFAKE_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."

DIR=${OUTBOX_KFAKE_DIR:-/tmp/outbox-kfake}
PIDFILE=$DIR/pid
ADDRFILE=$DIR/brokers

running() {
	local pid
	pid=$(cat "$PIDFILE" 2>/dev/null) || return 1
	[ -n "$pid" ] && [ "$(ps -o comm= -p "$pid" 2>/dev/null)" = kfakebroker ]
}

start() {
	if running && [ -s "$ADDRFILE" ]; then
		echo "kfake.sh: reusing the broker started earlier (PID $(cat "$PIDFILE")): $(cat "$ADDRFILE")"
		hint
		return 0
	fi
	command -v go >/dev/null || { echo "kfake.sh: Go is not installed; get it from https://go.dev/dl/" >&2; return 1; }
	mkdir -p "$DIR"
	go build -o "$DIR/kfakebroker" ./internal/cmd/kfakebroker
	rm -f "$ADDRFILE"
	local args=(-auto-create -partitions "${OUTBOX_KFAKE_PARTITIONS:-4}")
	[ -z "${OUTBOX_KFAKE_TOPICS:-}" ] || args+=(-topics "$OUTBOX_KFAKE_TOPICS")
	# Its output goes to files: a caller's pipe would wait for it to exit.
	"$DIR/kfakebroker" "${args[@]}" </dev/null >"$ADDRFILE" 2>"$DIR/kfake.log" &
	echo $! >"$PIDFILE"
	for _ in $(seq 1 50); do
		[ -s "$ADDRFILE" ] && break
		running || break
		sleep 0.1
	done
	if ! [ -s "$ADDRFILE" ]; then
		echo "kfake.sh: the broker did not start; see $DIR/kfake.log" >&2
		stop >/dev/null || true
		return 1
	fi
	echo "kfake.sh: broker on $(cat "$ADDRFILE") (PID $(cat "$PIDFILE"))"
	hint
}

# hint prints the relay flags for this broker: the relay asks for topics
# to be created only with --kafka-auto-create-topics.
hint() {
	echo "kfake.sh: run the relay with: --kafka-brokers $(cat "$ADDRFILE") --kafka-auto-create-topics"
	echo "kfake.sh: (without --kafka-auto-create-topics only topics in OUTBOX_KFAKE_TOPICS exist; entries of others are parked after --kafka-unknown-topic-timeout)"
}

stop() {
	[ -f "$PIDFILE" ] || { echo "kfake.sh: nothing to stop (no $PIDFILE)"; return 0; }
	local pid
	pid=$(cat "$PIDFILE")
	if running; then
		kill "$pid" 2>/dev/null || true
		for _ in $(seq 1 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
	fi
	rm -f "$PIDFILE" "$ADDRFILE"
	echo "kfake.sh: stopped"
}

case "${1:-}" in
	start) start ;;
	stop) stop ;;
	status) if running && [ -s "$ADDRFILE" ]; then cat "$ADDRFILE"; else echo "kfake.sh: not running" >&2; exit 1; fi ;;
	brokers) if [ -s "$ADDRFILE" ]; then cat "$ADDRFILE"; else echo "kfake.sh: not started; run $0 start" >&2; exit 1; fi ;;
	*) echo "usage: $0 start|stop|status|brokers" >&2; exit 2 ;;
esac
