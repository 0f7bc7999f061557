#!/usr/bin/env bash
# Stop and remove the test cluster in either mode (idempotent): compose
# project + any container named shardlimit-redis-* (volumes included), native
# processes from .state/native, then .state itself.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if docker_up; then
  mapfile -t names < <(docker ps -a --format '{{.Names}}' --filter "name=^$CONTAINER_PREFIX")
  if [ ${#names[@]} -gt 0 ]; then
    compose down -v -t 5 >/dev/null 2>&1 || true
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
