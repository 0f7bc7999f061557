#!/usr/bin/env bash
# Start the six-node test cluster on 127.0.0.1:7000-7005 (idempotent).
#   mode docker (default when a Docker engine answers): docker-compose.yml with
#     $SHARDLIMIT_REDIS_IMAGE, else redis:7 if present or pullable in 10 s,
#     else the offline image from build-image.sh;
#   mode native (no Docker engine, or SHARDLIMIT_CLUSTER_MODE=native): six
#     daemonized redis-server processes, same ports and flags, under .state/native.
# The mode is recorded in .state/mode for node.sh and down.sh.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
TIMEOUT=90

need_redis_cli
mode=$(current_mode)
# Healthy and in the requested mode (if one is forced): nothing to do.
if [[ ${SHARDLIMIT_CLUSTER_MODE:-$mode} == "$mode" && -z $(cluster_problem) ]]; then
  case $mode in
    docker) mode="docker (image $(docker inspect -f '{{.Config.Image}}' "${CONTAINER_PREFIX}7000"))" ;;
    none) mode="unknown: not started by up.sh" ;;
  esac
  say "cluster on 127.0.0.1:7000-7005 already healthy, nothing to do (mode: $mode)"
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
}

mode=${SHARDLIMIT_CLUSTER_MODE:-}
[ -n "$mode" ] || if docker_up; then mode=docker; else mode=native; fi
case $mode in
  docker)
    docker_up || die "SHARDLIMIT_CLUSTER_MODE=docker but no Docker engine answers"
    image=$(pick_image)
    fresh_start docker; echo "$image" >"$STATE_DIR/image"
    say "mode: docker (image $image)"
    SHARDLIMIT_REDIS_IMAGE=$image compose up -d
    ;;
  native)
    command -v redis-server >/dev/null || apt_install redis-server
    fresh_start native
    say "mode: native ($(command -v redis-server), dirs under .state/native)"
    for p in "${PORTS[@]}"; do native_start "$p"; done
    for p in "${PORTS[@]}"; do
      for _ in {1..50}; do [[ $(rcli -p "$p" ping 2>/dev/null) == PONG ]] && break; sleep 0.1; done
    done
    redis-cli --cluster create "${PORTS[@]/#/127.0.0.1:}" --cluster-replicas 1 --cluster-yes \
      >"$STATE_DIR/native/create.log" 2>&1 || { cat "$STATE_DIR/native/create.log"; die "cluster create failed"; }
    # Same pinning as the compose init: redis-cli pairs nodes on one host at random.
    for m in "${MASTER_PORTS[@]}"; do
      rcli -p $((m + 3)) cluster replicate "$(rcli -p "$m" cluster myid)" >/dev/null
    done
    ;;
  *) die "SHARDLIMIT_CLUSTER_MODE must be docker or native, not '$mode'" ;;
esac

if ! wait_healthy "$TIMEOUT"; then
  [ "$mode" = native ] || compose logs --tail 30 init >&2 || true
  die "cluster did not become healthy within ${TIMEOUT}s"
fi
say "cluster healthy on 127.0.0.1:7000-7005 (mode: $mode)"
cluster_roles | sed 's/^/  /'
