#!/usr/bin/env bash
# Services the tests need: PostgreSQL, Redis, MariaDB (or MySQL), NATS with
# JetStream and RabbitMQ on 127.0.0.1, and a Chromium for the dashboard's browser tests
# (ui/browser_test.go).
#
#   ./scripts/services.sh check    say what is reachable (and which Chromium is found),
#                                  and how to get what is not
#   ./scripts/services.sh start    start local PostgreSQL / Redis / MariaDB / NATS / RabbitMQ
#                                  servers that are installed but not running (Debian layout)
#   ./scripts/services.sh install  apt-get install them, pgbouncer and chromium (root,
#                                  Debian/Ubuntu; each only when missing), then start
#                                  the servers (scripts/test.sh starts a private
#                                  PgBouncer with scripts/pgbouncer.sh)
#   ./scripts/services.sh redact   copy standard input to standard output with
#                                  passwords in URLs and password= settings
#                                  replaced by xxxxx (scripts/test.sh's filter)
#
# Everything this script prints, from every command and from the tools it
# runs, passes through redact: the URLs come from OUTBOX_POSTGRES_URL and
# OUTBOX_REDIS_URL (and OUTBOX_MYSQL_URL, OUTBOX_NATS_URL, OUTBOX_AMQP_URL), may carry passwords,
# and this output lands in CI logs.
#
# The Redis Cluster (127.0.0.1:7000-7002) is scripts/redis-cluster.sh's job.
set -uo pipefail

pg_url="${OUTBOX_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}"
redis_url="${OUTBOX_REDIS_URL:-redis://127.0.0.1:6379/0}"
nats_url="${OUTBOX_NATS_URL:-nats://127.0.0.1:4222}"
amqp_url="${OUTBOX_AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/}"
mysql_url="${OUTBOX_MYSQL_URL:-mysql://root@127.0.0.1:3306/}"

# redact keeps a URL's scheme, user, host, port, database and options, and
# replaces with xxxxx
#   - the password in scheme://user:password@ (and scheme://:password@),
#   - the whole user info of redis://password@ (Redis clients read a lone
#     user info as the password),
#   - the value of any password= setting (query parameter or libpq keyword,
#     quoted or not; this also covers sslpassword= and PGPASSWORD=).
# The user info ends at the last @ before the path, as Go's net/url reads it,
# so a password holding a raw @ is covered too. Lines are copied as they come
# (unbuffered), and an interrupt is left to the writer: redact ends when its
# input does, so the writer's last words (a cleanup's) still get through.
redact() {
	trap '' INT TERM
	local unbuffered=-u # GNU sed; BSD sed calls it -l
	sed -u q </dev/null >/dev/null 2>&1 || unbuffered=-l
	LC_ALL=C sed "$unbuffered" -E \
		-e 's,([A-Za-z][A-Za-z0-9+.-]*://[^:/?#@[:space:]]*):[^/?#[:space:]]*@,\1:xxxxx@,g' \
		-e 's,([Rr][Ee][Dd][Ii][Ss][Ss]?://)[^:/?#@[:space:]]+@,\1xxxxx@,g' \
		-e "s,([Pp][Aa][Ss][Ss][Ww][Oo][Rr][Dd][[:space:]]*=[[:space:]]*)('[^']*'|\"[^\"]*\"|[^&[:space:]]*),\\1xxxxx,g"
}

# Bounded, so a host that drops packets costs seconds, not minutes.
pg_ok() {
	command -v psql >/dev/null &&
		PGCONNECT_TIMEOUT=5 psql "$pg_url" -qtAc 'select 1' </dev/null >/dev/null 2>&1
}
redis_ok() {
	command -v redis-cli >/dev/null || return 1
	# -u reads the user, password, database and rediss:// (TLS) from the URL.
	[ "$(bounded redis-cli -u "$redis_url" ping </dev/null 2>/dev/null)" = PONG ]
}
# hostport URL DEFAULT_PORT prints the URL's host:port (127.0.0.1 and the
# default port when it names none).
hostport() {
	local rest="${1#*://}"
	rest="${rest%%/*}"
	rest="${rest##*@}"
	local host="${rest%:*}" port="${rest##*:}"
	[ "$host" = "$rest" ] && port="$2"
	[ -n "$host" ] || host=127.0.0.1
	echo "$host:$port"
}
# first_byte HOST:PORT [HELLO] connects with bash's /dev/tcp, writes HELLO
# (printf format) and prints the first byte the server sends, in hex.
first_byte() {
	local hp="$1"
	bounded bash -c 'exec 3<>"/dev/tcp/${1%:*}/${1##*:}" || exit 1
		[ -n "$2" ] && printf "$2" >&3
		head -c1 <&3 | od -An -tx1 | tr -d " \n"' _ "$hp" "${2:-}" 2>/dev/null
}
# A NATS server greets with INFO; RabbitMQ answers the AMQP 0-9-1 header
# with a method frame (type 1).
nats_ok() { [ "$(first_byte "$(hostport "$nats_url" 4222)")" = 49 ]; }
amqp_ok() { [ "$(first_byte "$(hostport "$amqp_url" 5672)" 'AMQP\000\000\011\001')" = 01 ]; }
# A MySQL or MariaDB server greets with a handshake packet: protocol
# version 10 after the 4-byte header (0xff: an error packet, still a server).
mysql_greets() {
	local hp; hp="$(hostport "$mysql_url" 3306)"
	bounded bash -c 'exec 3<>"/dev/tcp/${1%:*}/${1##*:}" || exit 1
		head -c5 <&3 | tail -c1 | od -An -tx1 | tr -d " \n"' _ "$hp" 2>/dev/null
}
# mysql_ok: a server answers and, for the default URL (root without a
# password), lets root in over TCP, as the tests connect.
mysql_ok() {
	case "$(mysql_greets)" in 0a | ff) ;; *) return 1 ;; esac
	[ -n "${OUTBOX_MYSQL_URL:-}" ] && return 0
	local cli; cli="$(command -v mariadb || command -v mysql)" || return 0
	bounded "$cli" --protocol=tcp -h 127.0.0.1 -P 3306 -u root -e 'select 1' </dev/null >/dev/null 2>&1
}
bounded() { if command -v timeout >/dev/null; then timeout 5 "$@"; else "$@"; fi; }

# chromium_path prints the Chromium the browser tests use, as they look for
# it: OUTBOX_CHROMIUM when set, else the first of /usr/bin/chromium,
# chromium-browser and google-chrome found (on the PATH too); it fails when
# there is none.
chromium_path() {
	if [ -n "${OUTBOX_CHROMIUM:-}" ]; then
		[ -x "$OUTBOX_CHROMIUM" ] && echo "$OUTBOX_CHROMIUM"
		return
	fi
	local c
	for c in /usr/bin/chromium chromium chromium-browser google-chrome; do
		c="$(command -v "$c" 2>/dev/null)" && [ -x "$c" ] && { echo "$c"; return 0; }
	done
	return 1
}

check() {
	local rc=0
	if pg_ok; then echo "services: PostgreSQL ok ($pg_url)"; else
		rc=1
		echo "services: PostgreSQL NOT reachable at $pg_url."
		echo "  Get it: apt-get install postgresql (or any PostgreSQL >= 13), start it, and allow the URL's user"
		echo "  (trust auth or a password in the URL); or point OUTBOX_POSTGRES_URL at yours."
		echo "  On Debian as root, ./scripts/services.sh install does all of that."
		[ -n "${OUTBOX_POSTGRES_URL:-}" ] ||
			echo "  Or run a Docker engine: with OUTBOX_POSTGRES_URL unset, the tests start a PostgreSQL container."
	fi
	if redis_ok; then echo "services: Redis ok ($redis_url)"; else
		rc=1
		echo "services: Redis NOT reachable at $redis_url."
		echo "  Get it: apt-get install redis-server (Redis >= 6.2) and start it, or point OUTBOX_REDIS_URL at yours."
		[ -n "${OUTBOX_REDIS_URL:-}" ] ||
			echo "  Or run a Docker engine: with OUTBOX_REDIS_URL unset, the tests start a Redis container."
	fi
	if mysql_ok; then echo "services: MySQL/MariaDB ok ($mysql_url)"; else
		rc=1
		echo "services: MySQL/MariaDB NOT reachable at $mysql_url (or root may not log in over TCP without a password)."
		echo "  Get it: apt-get install mariadb-server (MariaDB >= 10.6, or MySQL >= 8.0), start it, and let the"
		echo "  URL's user in over TCP (./scripts/services.sh install does all of that as root); or point"
		echo "  OUTBOX_MYSQL_URL at yours (mysql://USER:PASSWORD@HOST:3306/)."
	fi
	if nats_ok; then echo "services: NATS ok ($nats_url)"; else
		rc=1
		echo "services: NATS NOT reachable at $nats_url."
		echo "  Get it: apt-get install nats-server and run it with JetStream: nats-server -a 127.0.0.1 -p 4222 -js -sd DIR"
		echo "  (./scripts/services.sh install does both as root); or point OUTBOX_NATS_URL at yours."
	fi
	if amqp_ok; then echo "services: RabbitMQ ok ($amqp_url)"; else
		rc=1
		echo "services: RabbitMQ NOT reachable at $amqp_url."
		echo "  Get it: apt-get install rabbitmq-server and start it (rabbitmq-server -detached; guest/guest works from"
		echo "  127.0.0.1), as ./scripts/services.sh install does as root; or point OUTBOX_AMQP_URL at yours."
	fi
	local chromium
	if chromium="$(chromium_path)"; then
		echo "services: Chromium ok ($chromium, $(bounded "$chromium" --version 2>/dev/null | head -n1))"
	else
		rc=1
		if [ -n "${OUTBOX_CHROMIUM:-}" ]; then
			echo "services: Chromium NOT found: OUTBOX_CHROMIUM=$OUTBOX_CHROMIUM is not an executable."
		else
			echo "services: Chromium NOT found (/usr/bin/chromium, chromium-browser, google-chrome)."
		fi
		echo "  Get it: apt-get install chromium (./scripts/services.sh install as root does), or point"
		echo "  OUTBOX_CHROMIUM at a Chromium or Chrome binary. The dashboard's browser tests need it."
	fi
	[ $rc = 0 ] || echo "services: tests of missing services are skipped (they fail when OUTBOX_REQUIRE_SERVICES=1)."
	return $rc
}

start() {
	if ! pg_ok && command -v pg_ctlcluster >/dev/null && [ -d /etc/postgresql ]; then
		local v; v="$(ls /etc/postgresql | sort -V | tail -n1)"
		echo "services: starting PostgreSQL $v"
		pg_ctlcluster --skip-systemctl-redirect "$v" main start || true
		for _ in $(seq 1 30); do pg_ok && break; sleep 0.5; done
		if ! pg_ok && [ "$(id -u)" = 0 ]; then
			# A fresh Debian cluster wants a password over TCP: trust loopback instead.
			local hba; hba="$(ls /etc/postgresql/"$v"/main/pg_hba.conf 2>/dev/null)"
			if [ -n "$hba" ] && ! grep -q 'outbox-tests' "$hba"; then
				echo "services: allowing trust auth on 127.0.0.1 for the tests in $hba"
				sed -i '1i host all all 127.0.0.1/32 trust # outbox-tests\nhost all all ::1/128 trust # outbox-tests' "$hba"
				pg_ctlcluster --skip-systemctl-redirect "$v" main reload || true
				sleep 1
			fi
		fi
	fi
	if ! redis_ok && command -v redis-server >/dev/null; then
		echo "services: starting Redis on 127.0.0.1:6379 (no persistence)"
		mkdir -p /tmp/outbox-redis
		redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
			--dir /tmp/outbox-redis --logfile /tmp/outbox-redis/redis.log
		for _ in $(seq 1 30); do redis_ok && break; sleep 0.2; done
	fi
	local mysqld; mysqld="$(command -v mariadbd || command -v mysqld)"
	if [ -z "$(mysql_greets)" ] && [ -n "$mysqld" ]; then
		echo "services: starting MariaDB on 127.0.0.1:3306"
		if [ "$(id -u)" = 0 ]; then
			# As Debian's package runs it (user mysql, /etc/mysql config,
			# socket in /run/mysqld), without systemd.
			mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld 2>/dev/null
			start-stop-daemon --start --oknodo --background --exec "$mysqld" -- --user=mysql >/dev/null 2>&1 ||
				nohup "$mysqld" --user=mysql </dev/null >/dev/null 2>&1 &
		fi
		for _ in $(seq 1 60); do [ -n "$(mysql_greets)" ] && break; sleep 0.5; done
	fi
	if [ -z "${OUTBOX_MYSQL_URL:-}" ] && [ -n "$(mysql_greets)" ] && ! mysql_ok && [ "$(id -u)" = 0 ]; then
		# Debian's root@localhost authenticates by unix socket only; the
		# tests connect over TCP without a password: allow that for
		# root@127.0.0.1 (this machine only).
		local cli; cli="$(command -v mariadb || command -v mysql)"
		if [ -n "$cli" ]; then
			echo "services: letting root in from 127.0.0.1 without a password for the tests"
			"$cli" -u root </dev/null -e "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY ''; GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION; FLUSH PRIVILEGES;" >/dev/null 2>&1 || true
		fi
	fi
	if ! nats_ok && command -v nats-server >/dev/null; then
		echo "services: starting nats-server with JetStream on 127.0.0.1:4222 (store in /tmp/outbox-nats)"
		mkdir -p /tmp/outbox-nats
		nohup nats-server -a 127.0.0.1 -p 4222 -js -sd /tmp/outbox-nats -l /tmp/outbox-nats/nats.log \
			</dev/null >/dev/null 2>&1 &
		for _ in $(seq 1 50); do nats_ok && break; sleep 0.2; done
	fi
	if ! amqp_ok && command -v rabbitmq-server >/dev/null; then
		echo "services: starting RabbitMQ on 127.0.0.1:5672"
		RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 rabbitmq-server -detached >/dev/null 2>&1 || true
		# The node takes a few seconds (more on a busy machine) to boot.
		for _ in $(seq 1 120); do amqp_ok && break; sleep 0.5; done
	fi
	check
}

install() {
	if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
		echo "services: install needs root on Debian/Ubuntu; install PostgreSQL, Redis and Chromium yourself (see check)." >&2
		return 1
	fi
	local need=()
	command -v psql >/dev/null && [ -d /etc/postgresql ] || need+=(postgresql)
	command -v redis-server >/dev/null || need+=(redis-server)
	# For the NATS and RabbitMQ sinks' tests (and their chaos scenarios,
	# which run private servers from the same binaries).
	# For the MySQL backend's tests (its chaos scenarios run a private
	# mariadbd made with mariadb-install-db).
	command -v mariadbd >/dev/null || command -v mysqld >/dev/null || need+=(mariadb-server)
	command -v nats-server >/dev/null || need+=(nats-server)
	command -v rabbitmq-server >/dev/null || need+=(rabbitmq-server)
	# For the PgBouncer tests (scripts/pgbouncer.sh runs a private one;
	# the package's own service is left as Debian configures it).
	command -v pgbouncer >/dev/null || need+=(pgbouncer)
	# For the dashboard's browser tests (ui/browser_test.go).
	chromium_path >/dev/null || need+=(chromium)
	if [ ${#need[@]} -gt 0 ]; then
		echo "services: apt-get install ${need[*]}"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq && apt-get install -y -qq "${need[@]}" >/dev/null
	fi
	start
}

main() {
	case "${1:-check}" in
		check) check ;;
		start) start ;;
		install) install ;;
		*) echo "usage: $0 check|start|install|redact" >&2; return 2 ;;
	esac
}

if [ "${1:-}" = redact ]; then
	redact
	exit
fi
# Standard output and standard error each through redact, kept apart.
{ main "$@" 2>&1 1>&3 3>&- | redact >&2; } 3>&1 | redact
