#!/usr/bin/env bash
# pgbouncer.sh start|stop|status|url — a private PgBouncer in transaction
# pooling mode in front of the tests' PostgreSQL, for the PgBouncer tests
# (OUTBOX_PGBOUNCER_URL, which scripts/test.sh exports from `url`).
#
#   start   start it (or reuse the one this script started that still answers)
#           on 127.0.0.1 and a free port from 6432 up; prints the URL
#   stop    stop it: kills only the PID this script recorded, if it is a pgbouncer
#   status  exit 0 and print the URL if it answers, else exit 1
#   url     print the client URL (no password: clients connect with auth trust)
#
# Upstream is OUTBOX_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/postgres),
# read as postgres[ql]://user[:password]@host[:port]/database: its password, if
# any, goes only into the ini file (mode 600), which nothing prints.
#
# Settings (the ini is $DIR/pgbouncer.ini; DIR defaults to /tmp/outbox-pgbouncer,
# override with OUTBOX_PGBOUNCER_DIR):
#   pool_mode = transaction      a server connection per transaction (no session state,
#                                no prepared statements across transactions: clients use
#                                pgx's default_query_exec_mode=simple_protocol or exec)
#   auth_type = trust            any client of the users in userlist.txt, no password
#   default_pool_size = 20       server connections per database and user
#   max_client_conn = 500
#   server_round_robin = 0       (the default) idle servers reused last-in, first-out
# Databases: the upstream database under its own name, and "outbox_lifo", the
# same database with a pool of its own (pool_size=2) that only
# backends/postgres's prepared-statement test uses, so it knows which server
# connection each of its transactions gets.
#
# PgBouncer refuses to run as root; started by root it drops to the user
# "postgres" (or "nobody") through its own `user` setting.
set -euo pipefail

DIR=${OUTBOX_PGBOUNCER_DIR:-/tmp/outbox-pgbouncer}
PIDFILE=$DIR/pid
PORTFILE=$DIR/port
HOST=127.0.0.1
UPSTREAM=${OUTBOX_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}

# parse_upstream sets up_user, up_pass, up_host, up_port and up_db from UPSTREAM.
parse_upstream() {
	local rest userinfo hostport
	case "$UPSTREAM" in
		postgres://* | postgresql://*) rest=${UPSTREAM#*://} ;;
		*)
			echo "pgbouncer.sh: OUTBOX_POSTGRES_URL must be a postgres:// or postgresql:// URL" >&2
			return 1
			;;
	esac
	rest=${rest%%\?*}
	up_user=postgres up_pass=""
	if [[ $rest == *@* ]]; then
		userinfo=${rest%@*}
		rest=${rest##*@}
		up_user=${userinfo%%:*}
		[[ $userinfo == *:* ]] && up_pass=${userinfo#*:}
	fi
	hostport=${rest%%/*}
	up_db=postgres
	[[ $rest == */* && -n ${rest#*/} ]] && up_db=${rest#*/}
	up_host=${hostport%%:*}
	up_port=5432
	[[ $hostport == *:* ]] && up_port=${hostport##*:}
	[ -n "$up_host" ] || up_host=127.0.0.1
}

url() {
	parse_upstream
	local port
	port=$(cat "$PORTFILE" 2>/dev/null) || {
		echo "pgbouncer.sh: not started (no $PORTFILE); run $0 start" >&2
		return 1
	}
	echo "postgres://$up_user@$HOST:$port/$up_db?sslmode=disable"
}

running() {
	local pid
	pid=$(cat "$PIDFILE" 2>/dev/null) || return 1
	[ -n "$pid" ] && [ "$(ps -o comm= -p "$pid" 2>/dev/null)" = pgbouncer ]
}

answers() {
	local u
	u=$(url 2>/dev/null) || return 1
	PGCONNECT_TIMEOUT=3 psql "$u" -qtAc 'select 1' </dev/null >/dev/null 2>&1
}

port_free() {
	! (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null
}

start() {
	command -v pgbouncer >/dev/null || {
		echo "pgbouncer.sh: pgbouncer is not installed (Debian: apt-get install pgbouncer, or ./scripts/services.sh install)" >&2
		return 1
	}
	if running && answers; then
		echo "pgbouncer.sh: reusing the PgBouncer started earlier (PID $(cat "$PIDFILE")): $(url)"
		return 0
	fi
	running && stop >/dev/null
	parse_upstream
	command -v psql >/dev/null || {
		echo "pgbouncer.sh: psql is not installed (Debian: apt-get install postgresql-client); it checks that PgBouncer answers" >&2
		return 1
	}
	if ! PGCONNECT_TIMEOUT=3 psql "$UPSTREAM" -qtAc 'select 1' </dev/null >/dev/null 2>&1; then
		echo "pgbouncer.sh: the PostgreSQL of OUTBOX_POSTGRES_URL (or the default 127.0.0.1:5432) does not answer; start it first (./scripts/services.sh start)" >&2
		return 1
	fi
	local port="" p
	for p in $(seq 6432 6531); do
		if port_free "$p"; then port=$p; break; fi
	done
	[ -n "$port" ] || { echo "pgbouncer.sh: no free port in 6432-6531 on $HOST" >&2; return 1; }

	mkdir -p "$DIR"
	chmod 700 "$DIR"
	local runas=""
	if [ "$(id -u)" = 0 ]; then
		if id postgres >/dev/null 2>&1; then runas=postgres; else runas=nobody; fi
		chown "$runas" "$DIR"
	fi
	local server="host=$up_host port=$up_port dbname=$up_db user=$up_user"
	[ -z "$up_pass" ] || server="$server password=$up_pass"
	(
		umask 077
		cat >"$DIR/pgbouncer.ini" <<-EOF
			; written by scripts/pgbouncer.sh
			[databases]
			$up_db = $server
			outbox_lifo = $server pool_size=2

			[pgbouncer]
			listen_addr = $HOST
			listen_port = $port
			unix_socket_dir =
			auth_type = trust
			auth_file = $DIR/userlist.txt
			pool_mode = transaction
			default_pool_size = 20
			max_client_conn = 500
			server_round_robin = 0
			log_connections = 0
			log_disconnections = 0
			logfile = $DIR/pgbouncer.log
			pidfile = $DIR/pgbouncer.pid
			${runas:+user = $runas}
		EOF
		printf '"%s" ""\n' "$up_user" >"$DIR/userlist.txt"
	)
	[ -z "$runas" ] || chown "$runas" "$DIR/pgbouncer.ini" "$DIR/userlist.txt"
	echo "$port" >"$PORTFILE"
	# Its output goes to a file: a caller's pipe would wait for it to exit.
	pgbouncer "$DIR/pgbouncer.ini" >>"$DIR/stdout.log" 2>&1 &
	echo $! >"$PIDFILE"
	local until=$((SECONDS + 5))
	while [ $SECONDS -lt $until ]; do
		answers && break
		running || break
		sleep 0.1
	done
	if ! answers; then
		echo "pgbouncer.sh: PgBouncer did not answer on $HOST:$port within 5s; see $DIR/pgbouncer.log and $DIR/stdout.log" >&2
		stop >/dev/null || true
		return 1
	fi
	echo "pgbouncer.sh: PgBouncer $(pgbouncer --version | head -n1 | awk '{print $2}') on $HOST:$port (transaction pooling, PID $(cat "$PIDFILE")): $(url)"
}

stop() {
	[ -f "$PIDFILE" ] || { echo "pgbouncer.sh: nothing to stop (no $PIDFILE)"; return 0; }
	local pid
	pid=$(cat "$PIDFILE")
	if running; then
		kill "$pid" 2>/dev/null || true
		for _ in $(seq 1 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
	fi
	rm -f "$PIDFILE" "$PORTFILE"
	echo "pgbouncer.sh: stopped"
}

status() {
	if running && answers; then
		url
	else
		echo "pgbouncer.sh: not running" >&2
		return 1
	fi
}

case "${1:-}" in
	start) start ;;
	stop) stop ;;
	status) status ;;
	url) url ;;
	*) echo "usage: $0 start|stop|status|url" >&2; exit 2 ;;
esac
