#!/usr/bin/env bash
# Start the six-node test cluster on 127.0.0.1:7000-7005 (idempotent).
#   usage: up.sh [--tls | --standalone | --sentinel]
#   --sentinel: instead of the cluster, one primary (6400,
#     $SHARDLIMIT_SENTINEL_DATA_PORT), one replica (the next port) and three
#     sentinels (26400-26402, from $SHARDLIMIT_SENTINEL_PORT) watching them as service
#     `shardlimit`, native processes on 127.0.0.1, state in .state-sentinel;
#     idempotent, and restarts whichever of them is missing (a data node as
#     a replica of the current primary). Stop it with down.sh --sentinel.
#   --standalone: instead of the cluster, one plain redis-server (no
#     cluster, AOF on) on 127.0.0.1:6390 ($SHARDLIMIT_STANDALONE_PORT),
#     native process, state in .state-standalone; a running cluster is not
#     touched. Stop it with down.sh --standalone.
#   --tls: TLS only (no plain port; cluster bus and replication over TLS
#     too), with a throwaway CA and certificates made by openssl under
#     .state/tls (ca.crt, node.*, client.* for mutual TLS).
#   mode docker (default when a Docker engine answers): one container per
#     node (host network) from $SHARDLIMIT_REDIS_IMAGE, else redis:7 if
#     present or pullable in 10 s, else the offline image from build-image.sh;
#   mode native (no Docker engine, or SHARDLIMIT_CLUSTER_MODE=native): six
#     daemonized redis-server processes, same ports and flags, under .state/native.
#   SHARDLIMIT_CLUSTER_PORT=7100: ports 7100-7105, state in .state-7100,
#     containers shardlimit-7100-redis-*, beside a cluster on 7000.
# Every node also has the least-privilege ACL user `shardlimit`
# (docs/production.md); its password is in .state/acl/password.
# The mode is recorded in .state/mode for node.sh and down.sh.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
TIMEOUT=90

tls=no
case ${1:-} in
  --tls) tls=yes ;;
  --standalone) standalone_up; exit 0 ;;
  --sentinel) sentinel_up; exit 0 ;;
  "") ;;
  *) die "usage: up.sh [--tls | --standalone | --sentinel]" ;;
esac
span="127.0.0.1:${PORTS[0]}-${PORTS[5]}"
need_redis_cli
mode=$(current_mode)
have_tls=no; tls_on && have_tls=yes
# Healthy, with its ACL user, TLS as asked and in the requested mode (if
# one is forced): nothing to do.
if [[ ${SHARDLIMIT_CLUSTER_MODE:-$mode} == "$mode" && $tls == "$have_tls" && -s $ACL_DIR/password ]] &&
  [ -z "$(cluster_problem)" ]; then
  case $mode in
    docker) mode="docker (image $(docker inspect -f '{{.Config.Image}}' "${CONTAINER_PREFIX}${PORTS[0]}"))" ;;
  esac
  say "cluster on $span already healthy, nothing to do (mode: $mode, tls: $tls)"
  exit 0
fi

have_image() { docker image inspect "$1" >/dev/null 2>&1; }
pick_image() {  # prints the image to use, building the offline one if needed
  local want=${SHARDLIMIT_REDIS_IMAGE:-}
  if [ -n "$want" ]; then
    if have_image "$want"; then :
    elif [ "$want" = "$OFFLINE_IMAGE" ]; then "$CC_DIR/build-image.sh" >&2
    else timeout 60 docker pull "$want" >&2 || die "image $want is not present and cannot be pulled"; fi
    echo "$want"; return
  fi
  for want in "$OFFICIAL_IMAGE" "$OFFLINE_IMAGE"; do have_image "$want" && { echo "$want"; return; }; done
  say "trying docker pull $OFFICIAL_IMAGE (10 s max)" >&2
  if timeout 10 docker pull -q "$OFFICIAL_IMAGE" >/dev/null 2>&1; then echo "$OFFICIAL_IMAGE"; return; fi
  say "no registry: building $OFFLINE_IMAGE offline" >&2
  SHARDLIMIT_REDIS_IMAGE=$OFFLINE_IMAGE "$CC_DIR/build-image.sh" >&2
  echo "$OFFLINE_IMAGE"
}

# Anything left (stale containers, native processes, a half-formed cluster)
# is torn down first: a fresh cluster is quicker and surer than repairing one.
fresh_start() {
  "$CC_DIR/down.sh" >/dev/null
  local p q
  for p in "${PORTS[@]}"; do
    for q in "$p" $((p + 10000)); do  # client port and cluster bus port
      ! (exec 3<>"/dev/tcp/127.0.0.1/$q") 2>/dev/null || die "port $q is in use by something else"
    done
  done
  mkdir -p "$STATE_DIR"; echo "$1" >"$STATE_DIR/mode"
  make_acl
  if [ "$tls" = yes ]; then make_tls; fi
}

# Form the cluster from the host (every mode uses host networking): create,
# then pin the layout — redis-cli pairs nodes on one host at random — so
# port X+3 is the replica of X.
form_cluster() {
  local p m log=$STATE_DIR/create.log
  for p in "${PORTS[@]}"; do
    for _ in {1..100}; do [[ $(rcli -p "$p" ping 2>/dev/null) == PONG ]] && break; sleep 0.1; done
  done
  local tls_args=()
  tls_on && tls_args=(--tls --cacert "$TLS_DIR/ca.crt" --cert "$TLS_DIR/client.crt" --key "$TLS_DIR/client.key")
  redis-cli "${tls_args[@]}" --cluster create "${PORTS[@]/#/127.0.0.1:}" --cluster-replicas 1 --cluster-yes \
    >"$log" 2>&1 || { cat "$log"; die "cluster create failed"; }
  for m in "${MASTER_PORTS[@]}"; do
    rcli -p $((m + 3)) cluster replicate "$(rcli -p "$m" cluster myid)" >/dev/null
  done
}

mode=${SHARDLIMIT_CLUSTER_MODE:-}
[ -n "$mode" ] || if docker_up; then mode=docker; else mode=native; fi
case $mode in
  docker)
    docker_up || die "SHARDLIMIT_CLUSTER_MODE=docker but no Docker engine answers"
    image=$(pick_image)
    fresh_start docker; echo "$image" >"$STATE_DIR/image"
    say "mode: docker (image $image, tls: $tls)"
    for p in "${PORTS[@]}"; do docker_start "$p" "$image"; done
    ;;
  native)
    command -v redis-server >/dev/null || apt_install redis-server
    fresh_start native
    say "mode: native ($(command -v redis-server), dirs under ${STATE_DIR#"$CC_DIR/"}/native, tls: $tls)"
    for p in "${PORTS[@]}"; do native_start "$p"; done
    ;;
  *) die "SHARDLIMIT_CLUSTER_MODE must be docker or native, not '$mode'" ;;
esac
form_cluster

if ! wait_healthy "$TIMEOUT"; then
  die "cluster did not become healthy within ${TIMEOUT}s"
fi
say "cluster healthy on $span (mode: $mode, tls: $tls)"
if [ "$tls" = yes ]; then say "CA: ${TLS_DIR#"$PWD/"}/ca.crt"; fi
cluster_roles | sed 's/^/  /'
