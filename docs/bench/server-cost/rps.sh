#!/usr/bin/env bash
# req/s of check scripts and variants on a bare redis-server (cluster mode,
# owning every slot, no valgrind), redis-benchmark 64 clients, P1 and P16,
# interleaved rounds; prints the median req/s per script and depth: the
# minimal GCRA, the floor (as benches/script_cost.sh builds it), the crate's
# one-limit GCRA check and the policy_in_state.lua experiment.
#   docs/bench/server-cost/rps.sh      (ROUNDS=5 N=100000 by default)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
port=7691; rounds=${ROUNDS:-5}; n=${N:-100000}
dir=$(mktemp -d)
redis-server --port $port --bind 127.0.0.1 --cluster-enabled yes --cluster-config-file $dir/nodes.conf --dir $dir --save '' --appendonly no >$dir/log 2>&1 &
trap 'redis-cli -p $port shutdown nosave >/dev/null 2>&1 || true; rm -rf $dir' EXIT
until redis-cli -p $port ping >/dev/null 2>&1; do sleep 0.1; done
redis-cli -p $port cluster addslotsrange 0 16383 >/dev/null
until redis-cli -p $port cluster info | grep -q 'cluster_state:ok'; do sleep 0.1; done
script() { local out=""; for part in "$@"; do out+=$(cat "src/scripts/$part.lua"); out+=$'\n'; done; printf '%s' "$out"; }
three() { echo "3 {t}:$1:s:__rand_int__ {t}:$1:o:__rand_int__ {t}:$1:b:__rand_int__"; }
names=(); codes=(); argsl=()
add() { names+=("$1"); codes+=("$2"); argsl+=("$3"); }
add "minimal" "$(cat benches/load/minimal_gcra.lua)" "1 {t}:m:__rand_int__ 1 1000000"
get="redis.call('GET', KEYS[1])"
minimal=$(cat benches/load/minimal_gcra.lua)
add "floor" "${minimal/"$get"/"redis.call('MGET', KEYS[1], KEYS[2], KEYS[3])[1]"}" "$(three f) 1 1000000"
add "shardlimit_gcra" "$(script clock one_limit gcra_check one_limit_end)" "$(three g) 1000000 1000000 1000000"
add "policy_in_state" "$(cat docs/bench/server-cost/policy_in_state.lua)" "1 {t}:p:__rand_int__ 1000000 1000000 1000000"
shas=()
for c in "${codes[@]}"; do shas+=("$(printf '%s' "$c" | redis-cli -p $port -x script load)"); done
declare -A res
for P in 1 16; do
  for i in "${!names[@]}"; do redis-benchmark -p $port -c 64 -n 20000 -P $P -r 100000 -q evalsha ${shas[$i]} ${argsl[$i]} >/dev/null; done
  for r in $(seq 1 $rounds); do
    for k in "${!names[@]}"; do
      i=$(( (k + r) % ${#names[@]} ))
      v=$(redis-benchmark -p $port -c 64 -n $n -P $P -r 100000 -q evalsha ${shas[$i]} ${argsl[$i]} | tr '\r' '\n' | grep -o '[0-9.]* requests per second' | tail -1 | cut -d' ' -f1)
      res[$P,$i]+="$v "
    done
  done
  for i in "${!names[@]}"; do
    med=$(echo ${res[$P,$i]} | tr ' ' '\n' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    echo "P$P ${names[$i]} median $med  (runs: ${res[$P,$i]})"
  done
done
