#!/usr/bin/env bash
# pg-private.sh start|stop|status|url|remove — a private PostgreSQL cluster of
# its own (initdb, own data directory, own port on 127.0.0.1), for
# measurements and tests that need settings the shared server does not have:
# the machine's server runs with autovacuum = off, this one with autovacuum on
# (PostgreSQL's default) unless told otherwise.
#
#   start   initdb DIR/data if it does not exist, then start the server (or
#           reuse the one this script started that still answers) on
#           127.0.0.1 and a free port in 55432-55531; prints the URL
#   stop    stop it (pg_ctl stop -m fast, which signals the postmaster whose
#           PID the data directory records: only the server this script
#           started); the data directory stays
#   status  exit 0 and print the URL if it answers, else exit 1
#   url     print the client URL (superuser postgres, trust, no password)
#   remove  stop it and delete DIR (only a directory this script made)
#
# Environment:
#   OUTBOX_PG_PRIVATE_DIR   the cluster's directory (default /tmp/outbox-pg-private):
#                           DIR/data, DIR/sock (the Unix socket), DIR/postgres.log,
#                           DIR/port
#   OUTBOX_PG_PRIVATE_CONF  extra postgresql.conf lines, separated by newlines or
#                           ';' (e.g. 'autovacuum = off' for a negative control);
#                           written to DIR/data/private.conf on every start
#   OUTBOX_PG_BINDIR        PostgreSQL's bin directory (default: pg_config --bindir,
#                           else the newest /usr/lib/postgresql/*/bin)
#
# Settings (DIR/data/private.conf, rewritten on each start) are those of the
# machine's shared server except autovacuum: fsync on, synchronous_commit on,
# shared_buffers 128MB, max_connections 100, and log_autovacuum_min_duration = 0
# so DIR/postgres.log shows every autovacuum run. Everything else is initdb's
# default (autovacuum on, autovacuum_naptime 1min, 3 workers).
#
# PostgreSQL refuses to run as root; started by root, initdb and pg_ctl run as
# the OS user "postgres" (runuser), which must be able to reach DIR.
set -euo pipefail

DIR=${OUTBOX_PG_PRIVATE_DIR:-/tmp/outbox-pg-private}
DATA=$DIR/data
SOCK=$DIR/sock
LOG=$DIR/postgres.log
PORTFILE=$DIR/port
MARK=$DIR/.made-by-pg-private.sh
HOST=127.0.0.1

bindir() {
	if [ -n "${OUTBOX_PG_BINDIR:-}" ]; then
		echo "$OUTBOX_PG_BINDIR"
		return
	fi
	local d
	if d=$(pg_config --bindir 2>/dev/null) && [ -x "$d/initdb" ]; then
		echo "$d"
		return
	fi
	d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
	if [ -n "$d" ] && [ -x "$d/initdb" ]; then
		echo "$d"
		return
	fi
	echo "pg-private.sh: initdb not found; install PostgreSQL's server package (Debian: apt-get install postgresql) or set OUTBOX_PG_BINDIR" >&2
	return 1
}

# as_owner runs a PostgreSQL program as the postgres OS user when root.
as_owner() {
	if [ "$(id -u)" = 0 ]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

url() {
	local port
	port=$(cat "$PORTFILE" 2>/dev/null) || {
		echo "pg-private.sh: not started (no $PORTFILE); run $0 start" >&2
		return 1
	}
	echo "postgres://postgres@$HOST:$port/postgres?sslmode=disable"
}

answers() {
	local u
	u=$(url 2>/dev/null) || return 1
	PGCONNECT_TIMEOUT=3 psql "$u" -qtAc 'select 1' </dev/null >/dev/null 2>&1
}

port_free() {
	! (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null
}

write_conf() {
	local port=$1 extra=${OUTBOX_PG_PRIVATE_CONF:-}
	{
		echo "# Written by scripts/pg-private.sh; rewritten on each start."
		echo "listen_addresses = '$HOST'"
		echo "port = $port"
		echo "unix_socket_directories = '$SOCK'"
		echo "fsync = on"
		echo "synchronous_commit = on"
		echo "shared_buffers = 128MB"
		echo "max_connections = 100"
		echo "log_autovacuum_min_duration = 0"
		if [ -n "$extra" ]; then
			echo "# OUTBOX_PG_PRIVATE_CONF"
			echo "$extra" | tr ';' '\n'
		fi
	} >"$DATA/private.conf"
	[ "$(id -u)" = 0 ] && chown postgres: "$DATA/private.conf"
	return 0
}

init() {
	local bin=$1
	mkdir -p "$DIR"
	touch "$MARK"
	chmod 755 "$DIR"
	mkdir -p "$DATA" "$SOCK"
	chmod 700 "$DATA"
	touch "$LOG"
	if [ "$(id -u)" = 0 ]; then
		local d
		for d in "$DIR" $(dirname "$DIR"); do
			if [ "$(stat -c %A "$d" | cut -c10)" != x ] && [ "$(stat -c %A "$d" | cut -c10)" != t ]; then
				echo "pg-private.sh: $d is not traversable by the postgres user; chmod o+x it or choose another OUTBOX_PG_PRIVATE_DIR" >&2
				return 1
			fi
		done
		chown postgres: "$DATA" "$SOCK" "$LOG"
	fi
	if [ ! -f "$DATA/PG_VERSION" ]; then
		as_owner "$bin/initdb" -D "$DATA" -U postgres --auth=trust -E UTF8 --no-locale --no-sync --no-instructions >"$DIR/initdb.log" 2>&1 || {
			echo "pg-private.sh: initdb failed; see $DIR/initdb.log:" >&2
			tail -5 "$DIR/initdb.log" >&2
			return 1
		}
		printf "\n# Written by scripts/pg-private.sh.\ninclude 'private.conf'\n" >>"$DATA/postgresql.conf"
	fi
}

start() {
	local bin
	bin=$(bindir)
	command -v psql >/dev/null || {
		echo "pg-private.sh: psql is not installed (Debian: apt-get install postgresql-client); it checks that the server answers" >&2
		return 1
	}
	if answers; then
		echo "pg-private.sh: reusing the server started earlier: $(url)"
		return 0
	fi
	init "$bin"
	# Another start (of this script with another DIR, or anything else) may
	# take the port between the check and the server's bind: then the
	# server fails with "Address already in use" and the next port is tried.
	local port="" p attempt from
	for attempt in 1 2 3 4 5; do
		port=""
		for p in $(seq $((55432 + RANDOM % 50)) 55531) $(seq 55432 55531); do
			if port_free "$p"; then port=$p; break; fi
		done
		[ -n "$port" ] || { echo "pg-private.sh: no free port in 55432-55531 on $HOST" >&2; return 1; }
		write_conf "$port"
		echo "$port" >"$PORTFILE"
		from=$(stat -c %s "$LOG")
		if as_owner "$bin/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 start >/dev/null; then
			break
		fi
		if [ "$attempt" = 5 ] || ! tail -c +$((from + 1)) "$LOG" | grep -q "Address already in use"; then
			echo "pg-private.sh: the server did not start; the end of $LOG:" >&2
			tail -10 "$LOG" >&2
			return 1
		fi
	done
	answers || { echo "pg-private.sh: the server started but does not answer on $(url)" >&2; return 1; }
	url
}

stop() {
	local bin
	bin=$(bindir)
	[ -f "$DATA/postmaster.pid" ] || { echo "pg-private.sh: not running ($DATA/postmaster.pid is absent)"; return 0; }
	local rc=0
	as_owner "$bin/pg_ctl" -D "$DATA" status >/dev/null 2>&1 || rc=$?
	[ "$rc" != 3 ] || { echo "pg-private.sh: not running (a stale $DATA/postmaster.pid)"; return 0; }
	as_owner "$bin/pg_ctl" -D "$DATA" -m fast -w -t 60 stop >/dev/null
	echo "pg-private.sh: stopped"
}

remove() {
	[ -d "$DIR" ] || return 0
	[ -f "$MARK" ] || { echo "pg-private.sh: $DIR was not made by this script; not removing it" >&2; return 1; }
	stop
	rm -rf "$DIR"
	echo "pg-private.sh: removed $DIR"
}

case "${1:-}" in
	start) start ;;
	stop) stop ;;
	status) answers && url ;;
	url) url ;;
	remove) remove ;;
	*)
		echo "usage: $0 start|stop|status|url|remove (see the header of this file)" >&2
		exit 2
		;;
esac
