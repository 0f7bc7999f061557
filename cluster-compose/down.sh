#!/usr/bin/env bash
# Stop and remove the test cluster in either mode (idempotent): any
# container named shardlimit-redis-* (volumes included; a compose project of
# the plain docker-compose.yml too), native processes from .state/native,
# then .state itself (certificates and ACL password included). With
# SHARDLIMIT_CLUSTER_PORT=B: the cluster on B..B+5 only.
# With --standalone: only the standalone server of up.sh --standalone.
# With --sentinel: only the Sentinel setup of up.sh --sentinel.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

case ${1:-} in
  --standalone) standalone_down; exit 0 ;;
  --sentinel) sentinel_down; exit 0 ;;
  "") ;;
  *) die "usage: down.sh [--standalone | --sentinel]" ;;
esac

if docker_up; then
  mapfile -t names < <(docker ps -a --format '{{.Names}}' --filter "name=^$CONTAINER_PREFIX")
  if [ ${#names[@]} -gt 0 ]; then
    # The compose project is the default ports' only; never touch it for another base.
    if [ "$PORT_BASE" = 7000 ]; then compose down -v -t 5 >/dev/null 2>&1 || true; fi
    # rm catches containers started under another compose project name.
    docker rm -fv "${names[@]}" >/dev/null 2>&1 || true
    say "removed containers ${names[*]}"
  fi
fi
for p in "${PORTS[@]}"; do
  if pid=$(native_pid "$p"); then
    kill -9 "$pid"; kill -CONT "$pid" 2>/dev/null || true   # -CONT: it may be paused
    wait_gone "$pid"
    say "killed native node $p (pid $pid)"
  fi
done
rm -rf "$STATE_DIR"
say "cluster down"
