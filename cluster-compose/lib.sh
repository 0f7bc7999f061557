# shellcheck shell=bash
# Helpers shared by up.sh, down.sh and node.sh (sourced, never executed).

# shellcheck disable=SC2034  # constants used by the scripts that source this file
CC_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

die() { echo "$(basename "$0"): error: $*" >&2; exit 1; }
say() { echo "$(basename "$0"): $*"; }

# SHARDLIMIT_CLUSTER_PORT=B runs the cluster on B..B+5 (cluster bus +10000)
# with its own state dir and container names, so a second cluster (say a
# TLS one on 7100) can run beside the default one on 7000 without touching it.
PORT_BASE=${SHARDLIMIT_CLUSTER_PORT:-7000}
[[ $PORT_BASE =~ ^[0-9]+$ ]] && ((PORT_BASE >= 1024 && PORT_BASE <= 55000)) ||
  die "SHARDLIMIT_CLUSTER_PORT must be a port in 1024-55000, not '$PORT_BASE'"
PORTS=($((PORT_BASE)) $((PORT_BASE + 1)) $((PORT_BASE + 2)) $((PORT_BASE + 3)) $((PORT_BASE + 4)) $((PORT_BASE + 5)))
MASTER_PORTS=("${PORTS[@]:0:3}")    # the layout every test scenario starts from
if [ "$PORT_BASE" = 7000 ]; then
  STATE_DIR=$CC_DIR/.state          # gitignored; mode, image, native node dirs, tls/, acl/
  CONTAINER_PREFIX=shardlimit-redis-  # fixed names: docker kill/start/pause by port
else
  STATE_DIR=$CC_DIR/.state-$PORT_BASE
  CONTAINER_PREFIX=shardlimit-$PORT_BASE-redis-
fi
TLS_DIR=$STATE_DIR/tls              # throwaway CA + certificates (up.sh --tls)
ACL_DIR=$STATE_DIR/acl              # the least-privilege user's password
ACL_USER=shardlimit
OFFICIAL_IMAGE=redis:7
OFFLINE_IMAGE=shardlimit/redis:7.0-debian

# The least-privilege ACL user (docs/production.md): exactly
# the commands shardlimit sends, keys only under the namespaces `sl` and
# `aclsmoke-*` (the smoke tests'), and channels too (the deny caches').
# Scripts' own commands are checked too.
ACL_RULE=(resetkeys '~sl:*' '~aclsmoke-*' resetchannels '&sl:*' '&aclsmoke-*' -@all
  +evalsha +eval +multi +exec +asking +wait +time
  +spublish +ssubscribe +publish +subscribe +zpopmax
  +cluster\|slots +cluster\|info +cluster\|countkeysinslot +cluster\|getkeysinslot
  +scan +type +pttl +exists +dbsize +info +ping
  +get +mget +set +del +incrby +decrby +pexpire +pexpireat +pexpiretime +hmget +hset
  +zadd +zcard +zcount +zrange +zrangebyscore +zrem +zremrangebyscore +zscore)

tls_on() { [ -s "$TLS_DIR/ca.crt" ]; }

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

# Install Debian packages; only run `apt-get update` when the plain install fails.
apt_install() {
  command -v apt-get >/dev/null || die "please install: $*"
  local apt=(as_root env DEBIAN_FRONTEND=noninteractive apt-get -y -q install --no-install-recommends "$@")
  "${apt[@]}" >/dev/null 2>&1 || { as_root apt-get -q update >/dev/null && "${apt[@]}" >/dev/null; }
}

# redis-cli against loopback. `timeout` matters: a paused node accepts TCP
# connections (kernel backlog) but never replies, and redis-cli 7.0 would hang.
# On a TLS cluster redis-cli needs the CA (and presents the client cert).
rcli() {
  local tls=()
  tls_on && tls=(--tls --cacert "$TLS_DIR/ca.crt" --cert "$TLS_DIR/client.crt" --key "$TLS_DIR/client.key")
  timeout 2 redis-cli -h 127.0.0.1 "${tls[@]}" "$@"
}
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
  elif docker inspect "${CONTAINER_PREFIX}$PORT_BASE" >/dev/null 2>&1; then echo docker
  else echo none; fi
}

# The flags of node <port> with its data in <dir> and the TLS files in
# <tlsdir> (paths as the server sees them: docker mounts them elsewhere).
# Both modes use this, so they cannot drift. A 2 s node timeout makes
# failover take ~4 s instead of ~16 s; a zero diskless-sync delay lets a
# restarted node resync at once instead of after 5 s.
node_args() {  # <port> <dir> <tlsdir>
  local p=$1 d=$2 t=$3
  printf '%s\0' --bind 127.0.0.1 --protected-mode no \
    --cluster-enabled yes --cluster-config-file "nodes-$p.conf" \
    --cluster-node-timeout 2000 --cluster-announce-ip 127.0.0.1 \
    --appendonly yes --save '' --repl-diskless-sync-delay 0 --dir "$d"
  if tls_on; then
    # TLS only: no plain port; the cluster bus and replication use TLS too.
    # Client certificates are optional (the CA alone reaches the cluster);
    # a client presenting one must present one the CA signed.
    printf '%s\0' --port 0 --tls-port "$p" --tls-cluster yes --tls-replication yes \
      --tls-cert-file "$t/node.crt" --tls-key-file "$t/node.key" \
      --tls-ca-cert-file "$t/ca.crt" --tls-auth-clients optional
  else
    printf '%s\0' --port "$p"
  fi
  # The password only as its SHA-256, so `ps` shows no secret.
  if [ -s "$ACL_DIR/password.sha256" ]; then
    printf '%s\0' --user "$ACL_USER" on "#$(<"$ACL_DIR/password.sha256")" "${ACL_RULE[@]}"
  fi
}

# Native mode: one daemonized redis-server per port, its own dir, pidfile
# and log.
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
  local p=$1 d args; d=$(native_dir "$1"); mkdir -p "$d"
  [ -n "$(native_pid "$p")" ] && return 0
  mapfile -d '' args < <(node_args "$p" "$d" "$TLS_DIR")
  redis-server "${args[@]}" --daemonize yes --pidfile "$d/redis.pid" --logfile "$d/redis.log"
}

# Standalone mode (up.sh/down.sh --standalone): one plain redis-server, no
# cluster, on $STANDALONE_PORT (SHARDLIMIT_STANDALONE_PORT, default 6390;
# tests/deployments/standalone.rs reads it too) with its own state dir, so it never touches a
# cluster's ports, processes or state. Native only: one process needs no
# image, and the scripts stay usable on a laptop with only redis-server.
STANDALONE_PORT=${SHARDLIMIT_STANDALONE_PORT:-6390}
STANDALONE_DIR=$CC_DIR/.state-standalone  # gitignored like .state
standalone_pid() {  # prints the pid if the standalone redis-server is alive
  local f=$STANDALONE_DIR/redis.pid pid
  [ -s "$f" ] && pid=$(<"$f") && pid_alive "$pid" &&
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == redis-server* ]] && echo "$pid"
}
standalone_up() {
  local log=$STANDALONE_DIR/redis.log pid
  if pid=$(standalone_pid); then
    say "standalone redis-server already running on 127.0.0.1:$STANDALONE_PORT (pid $pid)"
    return 0
  fi
  command -v redis-server >/dev/null || apt_install redis-server
  ! (exec 3<>"/dev/tcp/127.0.0.1/$STANDALONE_PORT") 2>/dev/null ||
    die "port $STANDALONE_PORT is in use by something else"
  mkdir -p "$STANDALONE_DIR"
  # The cluster's flags (node_args) minus the cluster ones; AOF on, as
  # `health` wants for locks.
  redis-server --bind 127.0.0.1 --protected-mode no --port "$STANDALONE_PORT" \
    --appendonly yes --save '' --dir "$STANDALONE_DIR" \
    --daemonize yes --pidfile "$STANDALONE_DIR/redis.pid" --logfile "$log"
  for _ in {1..100}; do
    [[ $(redis-cli -p "$STANDALONE_PORT" ping 2>/dev/null) == PONG ]] && {
      say "standalone redis-server up on 127.0.0.1:$STANDALONE_PORT (state in ${STANDALONE_DIR#"$CC_DIR/"})"
      return 0
    }
    sleep 0.1
  done
  cat "$log" >&2 || true
  die "standalone redis-server did not answer PING on $STANDALONE_PORT"
}
standalone_down() {
  local pid
  if pid=$(standalone_pid); then
    kill -9 "$pid"; kill -CONT "$pid" 2>/dev/null || true
    wait_gone "$pid"
    say "killed standalone redis-server $STANDALONE_PORT (pid $pid)"
  fi
  rm -rf "$STANDALONE_DIR"
  say "standalone down"
}

# Docker mode: one container per node on the host network, named by port,
# data in the image's /data volume, TLS files mounted read-only at /tls.
docker_start() {  # <port> <image>
  local p=$1 args; mapfile -d '' args < <(node_args "$p" /data /tls)
  local mount=(); tls_on && mount=(-v "$TLS_DIR:/tls:ro")
  docker run -d --name "$CONTAINER_PREFIX$p" --network host --restart no \
    --stop-timeout 5 "${mount[@]}" "$2" redis-server "${args[@]}" >/dev/null
}

# A throwaway CA, one certificate for every node (127.0.0.1 and localhost)
# and a client certificate, valid two days. Never committed (.state is
# gitignored); regenerated by every fresh up.sh --tls.
make_tls() {
  command -v openssl >/dev/null || apt_install openssl
  rm -rf "$TLS_DIR"; mkdir -p "$TLS_DIR"
  (
    cd "$TLS_DIR"
    local ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
    openssl req -x509 "${ec[@]}" -keyout ca.key -out ca.crt -days 2 \
      -subj "/CN=shardlimit throwaway test CA" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n' >node.ext
    printf 'extendedKeyUsage=clientAuth\n' >client.ext
    for who in node client; do
      openssl req -new "${ec[@]}" -keyout "$who.key" -out "$who.csr" -subj "/CN=shardlimit-$who" 2>/dev/null
      openssl x509 -req -in "$who.csr" -CA ca.crt -CAkey ca.key -CAcreateserial \
        -out "$who.crt" -days 2 -extfile "$who.ext" 2>/dev/null
    done
    rm -f ./*.csr ./*.ext ca.srl ca.key   # nobody signs anything else with it
    # World-readable: the official image's redis runs as uid 999 and must
    # read node.key through the mount. Throwaway test keys, nothing else.
    chmod 644 ./*.crt ./*.key
  ) || die "openssl could not make the test certificates"
}

# The least-privilege user's password: random, in acl/password (0600), and
# its SHA-256 for node_args.
make_acl() {
  rm -rf "$ACL_DIR"; mkdir -p "$ACL_DIR"; chmod 700 "$ACL_DIR"
  (umask 077; head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$ACL_DIR/password")
  printf '%s' "$(<"$ACL_DIR/password")" | sha256sum | cut -d' ' -f1 >"$ACL_DIR/password.sha256"
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

# The layout every scenario starts from: the first three ports masters, port
# X+3 the replica of X. Fails over where a pair is swapped, re-points a replica
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

# Sentinel mode (up.sh/down.sh --sentinel): one primary, one replica and
# three sentinels watching them as service $SENTINEL_SERVICE, all native
# processes on 127.0.0.1 with ports of their own (never the cluster's or the
# standalone server's), state under .state-sentinel. The sentinels decide
# which data node is the primary: after a failover it may be either port.
# A 1 s down-after and a 3 s failover timeout make a failover take ~2-3 s
# instead of the defaults' ~30 s+. SHARDLIMIT_SENTINEL_DATA_PORT (default
# 6400: the data nodes on it and the next port) and SHARDLIMIT_SENTINEL_PORT
# (default 26400: the sentinels on it and the next two) move the setup
# beside another one; tests/deployments/sentinel.rs reads the same variables.
SENTINEL_SERVICE=${SHARDLIMIT_SENTINEL_SERVICE:-shardlimit}
SENTINEL_DATA_PORT=${SHARDLIMIT_SENTINEL_DATA_PORT:-6400}
SENTINEL_PORT=${SHARDLIMIT_SENTINEL_PORT:-26400}
SENTINEL_DATA_PORTS=("$SENTINEL_DATA_PORT" $((SENTINEL_DATA_PORT + 1)))
SENTINEL_PORTS=("$SENTINEL_PORT" $((SENTINEL_PORT + 1)) $((SENTINEL_PORT + 2)))
SENTINEL_DOWN_AFTER_MS=1000
SENTINEL_FAILOVER_TIMEOUT_MS=3000
SENTINEL_DIR=$CC_DIR/.state-sentinel  # gitignored like .state
sentinel_pid() {  # <port>: prints the pid if that process is alive
  local f=$SENTINEL_DIR/$1/redis.pid pid
  [ -s "$f" ] && pid=$(<"$f") && pid_alive "$pid" &&
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == redis-* ]] && echo "$pid"
}
scli() { timeout 2 redis-cli -h 127.0.0.1 "$@"; }
# The primary's port as the first sentinel that answers names it.
sentinel_master_port() {
  local s out
  for s in "${SENTINEL_PORTS[@]}"; do
    out=$(scli -p "$s" sentinel get-master-addr-by-name "$SENTINEL_SERVICE" 2>/dev/null | sed -n 2p) &&
      [[ $out =~ ^[0-9]+$ ]] && { echo "$out"; return 0; }
  done
  return 1
}
sentinel_start_data() {  # <port> [<primary port>]
  local p=$1 d=$SENTINEL_DIR/$1 of=()
  [ -n "$(sentinel_pid "$p")" ] && return 0
  mkdir -p "$d"
  [ -n "${2:-}" ] && [ "$2" != "$p" ] && of=(--replicaof 127.0.0.1 "$2")
  # AOF on, as `health` wants for locks; no RDB snapshots; a zero
  # diskless-sync delay so a restarted node resyncs at once.
  redis-server --bind 127.0.0.1 --protected-mode no --port "$p" \
    --appendonly yes --save '' --repl-diskless-sync-delay 0 --dir "$d" "${of[@]}" \
    --daemonize yes --pidfile "$d/redis.pid" --logfile "$d/redis.log"
}
sentinel_start_sentinel() {  # <port> <primary port>
  local p=$1 d=$SENTINEL_DIR/$1
  [ -n "$(sentinel_pid "$p")" ] && return 0
  mkdir -p "$d"
  # A sentinel rewrites its config file (it records what it learns), so
  # each gets its own; a restarted one keeps what it knew.
  [ -s "$d/sentinel.conf" ] || cat >"$d/sentinel.conf" <<CONF
bind 127.0.0.1
port $p
protected-mode no
dir $d
sentinel monitor $SENTINEL_SERVICE 127.0.0.1 $2 2
sentinel down-after-milliseconds $SENTINEL_SERVICE $SENTINEL_DOWN_AFTER_MS
sentinel failover-timeout $SENTINEL_SERVICE $SENTINEL_FAILOVER_TIMEOUT_MS
sentinel parallel-syncs $SENTINEL_SERVICE 1
CONF
  redis-server "$d/sentinel.conf" --sentinel \
    --daemonize yes --pidfile "$d/redis.pid" --logfile "$d/sentinel.log"
}
# Prints why the Sentinel setup is not healthy, or nothing when it is: every
# sentinel names the same primary, sees the two other sentinels and the
# replica, the primary says so and the replica's link is up.
sentinel_problem() {
  local s p m="" out info
  for p in "${SENTINEL_DATA_PORTS[@]}" "${SENTINEL_PORTS[@]}"; do
    [ -n "$(sentinel_pid "$p")" ] || { echo "$p: not running"; return; }
  done
  for s in "${SENTINEL_PORTS[@]}"; do
    out=$(scli -p "$s" sentinel get-master-addr-by-name "$SENTINEL_SERVICE" 2>&1 | sed -n 2p) || true
    [[ $out =~ ^[0-9]+$ ]] || { echo "sentinel $s: no primary for $SENTINEL_SERVICE"; return; }
    [ -z "$m" ] || [ "$m" = "$out" ] || { echo "sentinels disagree: $m vs $out"; return; }
    m=$out
    info=$(scli -p "$s" sentinel master "$SENTINEL_SERVICE" 2>&1 | paste - - | tr -d '\r') || true
    [[ $(awk -F'\t' '$1 == "flags" { print $2 }' <<<"$info") == master ]] ||
      { echo "sentinel $s: primary $m flagged $(awk -F'\t' '$1 == "flags" { print $2 }' <<<"$info")"; return; }
    [[ $(awk -F'\t' '$1 == "num-other-sentinels" { print $2 }' <<<"$info") == 2 ]] ||
      { echo "sentinel $s: does not see the two other sentinels yet"; return; }
    [[ $(awk -F'\t' '$1 == "num-slaves" { print $2 }' <<<"$info") -ge 1 ]] 2>/dev/null ||
      { echo "sentinel $s: knows no replica yet"; return; }
  done
  out=$(scli -p "$m" info replication 2>&1 | tr -d '\r') || true
  [[ $out == *role:master* && $out == *connected_slaves:1* ]] ||
    { echo "$m: not a primary with one replica"; return; }
  for p in "${SENTINEL_DATA_PORTS[@]}"; do
    [ "$p" = "$m" ] && continue
    out=$(scli -p "$p" info replication 2>&1 | tr -d '\r') || true
    [[ $out == *master_link_status:up* ]] || { echo "$p: replica link not up"; return; }
  done
}
sentinel_up() {
  local limit=60 p m why deadline
  command -v redis-server >/dev/null || apt_install redis-server
  need_redis_cli
  if [ -z "$(sentinel_problem)" ]; then
    say "sentinel setup already healthy: primary 127.0.0.1:$(sentinel_master_port), service $SENTINEL_SERVICE"
    return 0
  fi
  mkdir -p "$SENTINEL_DIR"
  # Whatever runs already stays; a missing data node comes back as a
  # replica of the primary the sentinels name (after a failover test, the
  # old primary rejoins this way), the first start makes 6400 the primary.
  m=$(sentinel_master_port) || m=${SENTINEL_DATA_PORTS[0]}
  for p in "${SENTINEL_DATA_PORTS[@]}" "${SENTINEL_PORTS[@]}"; do
    [ -n "$(sentinel_pid "$p")" ] && continue
    ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || die "port $p is in use by something else"
  done
  for p in "${SENTINEL_DATA_PORTS[@]}"; do sentinel_start_data "$p" "$m"; done
  for p in "${SENTINEL_PORTS[@]}"; do sentinel_start_sentinel "$p" "$m"; done
  deadline=$((SECONDS + limit))
  while why=$(sentinel_problem); [ -n "$why" ]; do
    [ "$SECONDS" -lt "$deadline" ] || die "sentinel setup not healthy after ${limit}s: $why"
    sleep 0.2
  done
  say "sentinel setup healthy: primary 127.0.0.1:$(sentinel_master_port), replica and sentinels on" \
    "127.0.0.1:${SENTINEL_PORTS[0]}-${SENTINEL_PORTS[2]}, service $SENTINEL_SERVICE (state in ${SENTINEL_DIR#"$CC_DIR/"})"
}
sentinel_down() {
  local p pid
  for p in "${SENTINEL_PORTS[@]}" "${SENTINEL_DATA_PORTS[@]}"; do
    if pid=$(sentinel_pid "$p"); then
      kill -9 "$pid"; kill -CONT "$pid" 2>/dev/null || true
      wait_gone "$pid"
      say "killed $p (pid $pid)"
    fi
  done
  rm -rf "$SENTINEL_DIR"
  say "sentinel setup down"
}
