#!/usr/bin/env bash
# Control one node of the test cluster, in whichever mode up.sh started it.
# Meant to be shelled out to by the Rust fault tests: fast, exits non-zero
# with a message on error.
#   node.sh kill|stop|start|restart|pause|unpause|status <port>
#   node.sh wait-healthy [timeout_s]     (default 60)
#   node.sh rebalance-roles [timeout_s]  back to masters 7000-7002, 700(X+3) replica of 700X
#   node.sh roles                        "<port> <flags> <master-port|->" per node
# kill = SIGKILL; stop = SIGTERM (clean shutdown); pause = freeze (docker
# pause / SIGSTOP): the process keeps its sockets but never answers.
# start/restart return once the node answers PING. status prints
# running|paused|stopped.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() { echo "usage:" >&2; grep '^#   node.sh' "$0" | cut -c3- >&2; exit 2; }
action=${1:-}
case $action in
  wait-healthy) wait_healthy "${2:-60}"; exit ;;
  rebalance-roles) need_redis_cli; restore_layout "${2:-60}"; exit ;;
  roles) need_redis_cli; cluster_roles; exit ;;
  kill | stop | start | restart | pause | unpause | status) ;;
  *) usage ;;
esac
port=${2:-}
[[ " ${PORTS[*]} " == *" $port "* ]] || die "port must be one of ${PORTS[*]}, got '$port'"
mode=$(current_mode)

wait_ping() {  # a (re)started node must answer before tests go on
  for _ in {1..100}; do
    [[ $(rcli -p "$port" ping 2>/dev/null) == PONG ]] && return 0
    sleep 0.1
  done
  die "node $port does not answer PING 10s after $action"
}

if [ "$mode" = docker ]; then
  name=$CONTAINER_PREFIX$port
  case $action in
    status)
      st=$(docker inspect -f '{{.State.Status}}' "$name" 2>/dev/null) || die "no container $name"
      case $st in running | paused) echo "$st" ;; *) echo stopped ;; esac ;;
    stop | restart) docker "$action" -t 10 "$name" >/dev/null || die "docker $action $name failed" ;;
    *) docker "$action" "$name" >/dev/null || die "docker $action $name failed" ;;
  esac
elif [ "$mode" = native ]; then
  pid=$(native_pid "$port") || pid=
  need() { [ -n "$pid" ] || die "native node $port is not running"; }
  case $action in
    status)
      if [ -z "$pid" ]; then echo stopped
      elif [ "$(pid_state "$pid")" = T ]; then echo paused
      else echo running; fi ;;
    kill) need; kill -9 "$pid"; wait_gone "$pid" ;;
    stop | restart)  # like docker: stopping a stopped node is fine
      if [ -n "$pid" ]; then kill -TERM "$pid"; kill -CONT "$pid"; wait_gone "$pid"; fi
      [ "$action" = stop ] || native_start "$port" ;;
    start)  # like docker: starting a running node is fine, a paused one is not
      [ -z "$pid" ] || [ "$(pid_state "$pid")" != T ] || die "node $port is paused, unpause it instead"
      native_start "$port" ;;
    pause) need; kill -STOP "$pid" ;;
    unpause) need; kill -CONT "$pid" ;;
  esac
else
  die "no cluster is up (run up.sh)"
fi
case $action in start | restart) need_redis_cli; wait_ping ;; esac
