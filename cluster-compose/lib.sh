# shellcheck shell=bash
# Helpers shared by up.sh, down.sh and node.sh (sourced, never executed).

# shellcheck disable=SC2034  # constants used by the scripts that source this file
CC_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
STATE_DIR=$CC_DIR/.state            # gitignored; holds mode, image, native node dirs
PORTS=(7000 7001 7002 7003 7004 7005)
MASTER_PORTS=(7000 7001 7002)       # the layout every test scenario starts from
OFFICIAL_IMAGE=redis:7
OFFLINE_IMAGE=shardlimit/redis:7.0-debian
CONTAINER_PREFIX=shardlimit-redis-  # fixed names: docker kill/start/pause work with compose v1 and v2

die() { echo "$(basename "$0"): error: $*" >&2; exit 1; }
say() { echo "$(basename "$0"): $*"; }

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

# Install Debian packages; only run `apt-get update` when the plain install fails.
apt_install() {
  command -v apt-get >/dev/null || die "please install: $*"
  local apt=(as_root env DEBIAN_FRONTEND=noninteractive apt-get -y -q install --no-install-recommends "$@")
  "${apt[@]}" >/dev/null 2>&1 || { as_root apt-get -q update >/dev/null && "${apt[@]}" >/dev/null; }
}

# redis-cli against loopback. `timeout` matters: a paused node accepts TCP
# connections (kernel backlog) but never replies, and redis-cli 7.0 would hang.
rcli() { timeout 2 redis-cli -h 127.0.0.1 "$@"; }
need_redis_cli() { command -v redis-cli >/dev/null || apt_install redis-tools; }

docker_up() { docker info >/dev/null 2>&1; }

# Compose v1 (docker-compose) if present, else the v2 plugin. A fixed project
# name so up/down find the same containers wherever they are run from.
compose() {
  local c=(docker compose); command -v docker-compose >/dev/null && c=(docker-compose)
  "${c[@]}" -p shardlimit -f "$CC_DIR/docker-compose.yml" "$@"
}

# Which mode is active: docker | native | none (state file, else inferred).
current_mode() {
  if [ -s "$STATE_DIR/mode" ]; then cat "$STATE_DIR/mode"
  elif compgen -G "$STATE_DIR/native/*/redis.pid" >/dev/null; then echo native
  elif docker inspect "${CONTAINER_PREFIX}7000" >/dev/null 2>&1; then echo docker
  else echo none; fi
}

# Native mode: one daemonized redis-server per port, with exactly the flags of
# docker-compose.yml (keep the two in sync), its own dir, pidfile and log.
native_dir() { echo "$STATE_DIR/native/$1"; }
# A killed daemon lingers as a zombie until init reaps it (which can take
# seconds in some sandboxes), so "alive" means: exists and is not state Z.
pid_state() { awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null; }
pid_alive() { local st; st=$(pid_state "$1") && [ -n "$st" ] && [ "$st" != Z ]; }
wait_gone() { while pid_alive "$1"; do sleep 0.02; done; }
native_pid() {  # prints the pid if that node's redis-server is alive
  local f pid; f=$(native_dir "$1")/redis.pid
  [ -s "$f" ] && pid=$(<"$f") && pid_alive "$pid" &&
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == redis-server* ]] && echo "$pid"
}
native_start() {
  local p=$1 d; d=$(native_dir "$1"); mkdir -p "$d"
  [ -n "$(native_pid "$p")" ] && return 0
  redis-server --port "$p" --bind 127.0.0.1 --protected-mode no \
    --cluster-enabled yes --cluster-config-file "nodes-$p.conf" \
    --cluster-node-timeout 2000 --cluster-announce-ip 127.0.0.1 \
    --appendonly yes --save '' --repl-diskless-sync-delay 0 --dir "$d" \
    --daemonize yes --pidfile "$d/redis.pid" --logfile "$d/redis.log"
}

# Prints why the cluster is not healthy, or nothing when it is: every node
# says cluster_state:ok with 16384 ok slots, and every node's CLUSTER NODES
# view has 6 connected nodes, 3 masters with slots, 3 replicas of 3 distinct
# masters, no fail/pfail/handshake flags; every replica's link is up.
cluster_problem() {
  local p out
  for p in "${PORTS[@]}"; do
    out=$(rcli -p "$p" cluster info 2>&1 | tr -d '\r') || true
    [[ $out == *cluster_state:ok* ]] || { echo "$p: ${out:-no answer}" | head -n1; return; }
    [[ $out == *cluster_slots_ok:16384* ]] || { echo "$p: not all 16384 slots ok"; return; }
    out=$(rcli -p "$p" cluster nodes 2>&1 | awk '
      { n++ }
      $3 ~ /fail|handshake|noaddr/ || $8 != "connected" { bad = bad " " $2 "(" $3 "," $8 ")" }
      $3 ~ /master/ { m++; if (NF < 9) bad = bad " " $2 "(master without slots)" }
      $3 ~ /slave/ { s++; if (!($4 in of)) d++; of[$4] = 1 }
      $3 ~ /myself,slave/ { me = "slave" }
      END {
        if (n != 6 || m != 3 || s != 3 || d != 3)
          bad = bad sprintf(" %d nodes, %d masters, %d replicas of %d masters", n, m, s, d)
        if (bad != "") print "nodes:" bad; else if (me == "slave") print "REPLICA" }') || true
    if [ "$out" = REPLICA ]; then
      out=$(rcli -p "$p" info replication 2>&1 | tr -d '\r') || true
      [[ $out == *master_link_status:up* ]] || { echo "$p: replica link not up"; return; }
    elif [ -n "$out" ]; then echo "$p: $out"; return; fi
  done
}

wait_healthy() {  # [timeout_s]
  local limit=${1:-60} why; local deadline=$((SECONDS + limit))
  need_redis_cli
  while why=$(cluster_problem); [ -n "$why" ]; do
    [ "$SECONDS" -lt "$deadline" ] || { echo "cluster not healthy after ${limit}s: $why" >&2; return 1; }
    sleep 0.2
  done
}

# Prints "<port> <flags> <master-port|->" for each node, as seen by the first
# node that answers (flags from CLUSTER NODES without "myself").
cluster_roles() {
  local p out
  for p in "${PORTS[@]}"; do out=$(rcli -p "$p" cluster nodes 2>/dev/null) && [ -n "$out" ] && break; done
  [ -n "${out:-}" ] || { echo "no node answers" >&2; return 1; }
  awk '{ split($2, a, "[:@]"); port[$1] = a[2]; sub(/myself,/, "", $3); flags[$1] = $3; of[$1] = $4 }
       END { for (id in port) print port[id], flags[id], (of[id] in port ? port[of[id]] : "-") }' <<<"$out" | sort -n
}

# The layout every scenario starts from: 7000-7002 masters, 700(X+3) the
# replica of 700X. Fails over where a pair is swapped, re-points a replica
# that follows the wrong master, then waits for health.
restore_layout() {  # [timeout_s]
  local limit=${1:-60} m r id deadline
  wait_healthy "$limit"
  for m in "${MASTER_PORTS[@]}"; do
    r=$((m + 3)) deadline=$((SECONDS + limit))
    if [[ $(rcli -p "$m" role | head -n1) != master ]]; then
      rcli -p "$m" cluster failover >/dev/null
      until [[ $(rcli -p "$m" role | head -n1) == master ]]; do
        [ "$SECONDS" -lt "$deadline" ] || die "$m did not become master within ${limit}s"
        sleep 0.2
      done
    fi
    id=$(rcli -p "$m" cluster myid)
    [[ $(rcli -p "$r" cluster nodes | awk '/myself/ { print $4 }') == "$id" ]] ||
      rcli -p "$r" cluster replicate "$id" >/dev/null
  done
  wait_healthy "$limit"
}
