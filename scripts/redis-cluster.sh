#!/usr/bin/env bash
# redis-cluster.sh start|stop|status — a three-master Redis Cluster on
# 127.0.0.1:7000-7002 for the Redis backend's tests
# (OUTBOX_REDIS_CLUSTER_ADDRS=127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002).
#
# start is idempotent: a healthy cluster already answering on the ports is
# reused. The servers' PIDs go to $DIR/pids; stop kills only those PIDs.
# DIR defaults to /tmp/outbox-redis-cluster (override with
# OUTBOX_REDIS_CLUSTER_DIR). Nothing is persisted (no AOF, no RDB).
set -euo pipefail

DIR=${OUTBOX_REDIS_CLUSTER_DIR:-/tmp/outbox-redis-cluster}
PORTS=(7000 7001 7002)
HOST=127.0.0.1
PIDS=$DIR/pids

healthy() {
  for p in "${PORTS[@]}"; do
    redis-cli -h $HOST -p "$p" cluster info 2>/dev/null | grep -q '^cluster_state:ok' || return 1
  done
}

wait_ok() {
  for _ in $(seq 1 100); do
    healthy && return 0
    sleep 0.1
  done
  echo "redis-cluster.sh: the cluster did not reach cluster_state:ok within 10s; see $DIR/*.log" >&2
  return 1
}

start() {
  if healthy; then
    echo "redis-cluster.sh: reusing the healthy cluster on ${PORTS[*]}"
    return 0
  fi
  for p in "${PORTS[@]}"; do
    if redis-cli -h $HOST -p "$p" ping >/dev/null 2>&1; then
      echo "redis-cluster.sh: port $p answers but the cluster is not healthy; run '$0 stop' (it stops only servers this script started) or free the port" >&2
      return 1
    fi
  done
  mkdir -p "$DIR"
  : >"$PIDS"
  for p in "${PORTS[@]}"; do
    rm -rf "${DIR:?}/$p" && mkdir -p "$DIR/$p"
    redis-server --bind $HOST --port "$p" --cluster-enabled yes \
      --cluster-config-file "$DIR/$p/nodes.conf" --dir "$DIR/$p" \
      --appendonly no --save '' --daemonize no --protected-mode yes \
      --logfile "$DIR/$p.log" &
    echo $! >>"$PIDS"
  done
  for p in "${PORTS[@]}"; do
    for _ in $(seq 1 50); do
      redis-cli -h $HOST -p "$p" ping >/dev/null 2>&1 && break
      sleep 0.1
    done
  done
  redis-cli --cluster create $(for p in "${PORTS[@]}"; do printf '%s:%s ' $HOST "$p"; done) \
    --cluster-replicas 0 --cluster-yes >"$DIR/create.log" 2>&1 || {
    echo "redis-cluster.sh: cluster create failed; see $DIR/create.log" >&2
    return 1
  }
  wait_ok
  echo "redis-cluster.sh: cluster ok on ${PORTS[*]} (PIDs in $PIDS)"
}

stop() {
  [ -f "$PIDS" ] || { echo "redis-cluster.sh: nothing to stop (no $PIDS)"; return 0; }
  while read -r pid; do
    [ -n "$pid" ] || continue
    # Kill only a redis-server this script started.
    if [ "$(ps -o comm= -p "$pid" 2>/dev/null)" = "redis-server" ]; then
      kill "$pid" 2>/dev/null || true
    fi
  done <"$PIDS"
  while read -r pid; do
    [ -n "$pid" ] || continue
    for _ in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
  done <"$PIDS"
  rm -f "$PIDS"
  echo "redis-cluster.sh: stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) healthy && echo ok || { echo "not healthy"; exit 1; } ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
