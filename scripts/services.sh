#!/usr/bin/env bash
# Services the tests need: PostgreSQL and Redis on 127.0.0.1.
#
#   ./scripts/services.sh check    say what is reachable, and how to get what is not
#   ./scripts/services.sh start    start local PostgreSQL / Redis servers that are
#                                  installed but not running (Debian layout)
#   ./scripts/services.sh install  apt-get install them (root, Debian/Ubuntu), then start
#
# The Redis Cluster (127.0.0.1:7000-7002) is scripts/redis-cluster.sh's job.
set -uo pipefail

pg_url="${OUTBOX_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}"
redis_url="${OUTBOX_REDIS_URL:-redis://127.0.0.1:6379/0}"

pg_ok() { command -v psql >/dev/null && psql "$pg_url" -qtAc 'select 1' >/dev/null 2>&1; }
redis_hostport() { local hp="${redis_url#*://}"; hp="${hp#*@}"; hp="${hp%%/*}"; echo "$hp"; }
redis_ok() {
	command -v redis-cli >/dev/null || return 1
	local hp; hp="$(redis_hostport)"
	[ "$(redis-cli -h "${hp%:*}" -p "${hp##*:}" ping 2>/dev/null)" = PONG ]
}

check() {
	local rc=0
	if pg_ok; then echo "services: PostgreSQL ok ($pg_url)"; else
		rc=1
		echo "services: PostgreSQL NOT reachable at $pg_url."
		echo "  Get it: apt-get install postgresql (or any PostgreSQL >= 13), start it, and allow the URL's user"
		echo "  (trust auth or a password in the URL); or point OUTBOX_POSTGRES_URL at yours."
		echo "  On Debian as root, ./scripts/services.sh install does all of that."
	fi
	if redis_ok; then echo "services: Redis ok ($redis_url)"; else
		rc=1
		echo "services: Redis NOT reachable at $redis_url."
		echo "  Get it: apt-get install redis-server (Redis >= 6.2) and start it, or point OUTBOX_REDIS_URL at yours."
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
	check
}

install() {
	if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
		echo "services: install needs root on Debian/Ubuntu; install PostgreSQL and Redis yourself (see check)." >&2
		return 1
	fi
	local need=()
	command -v psql >/dev/null && [ -d /etc/postgresql ] || need+=(postgresql)
	command -v redis-server >/dev/null || need+=(redis-server)
	if [ ${#need[@]} -gt 0 ]; then
		echo "services: apt-get install ${need[*]}"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq && apt-get install -y -qq "${need[@]}" >/dev/null
	fi
	start
}

case "${1:-check}" in
	check) check ;;
	start) start ;;
	install) install ;;
	*) echo "usage: $0 check|start|install" >&2; exit 2 ;;
esac
