#!/usr/bin/env bash
# Instructions per call that each check script costs redis-server itself,
# counted by callgrind, whatever else the box is doing: the counts move by
# up to 2% between runs (hash seeds, addresses) and the ratios between the
# scripts of one run by under 0.5%, so compare scripts within one run
# (`cargo bench --bench load -- --server-cost` gives the req/s, which move by
# 10-20% between runs here).
#
#   benches/script_cost.sh [calls]      (default 3000 calls per script)
#   SCRIPT_COST_VARIANTS="a.lua b.lua" benches/script_cost.sh
#                                       (also count variants: each file's
#                                        first "-- ARGS " line gives its
#                                        numkeys, keys and args, RAND a
#                                        random integer per call)
#   SCRIPT_COST_REVS="e98c75d" benches/script_cost.sh
#                                       (also count each one-limit check
#                                        and the generic check as they were
#                                        at each git revision, to compare
#                                        side by side: assembled here as
#                                        src/limit/algorithm/assemble.rs
#                                        does, which is checked by
#                                        assembling this tree's the same
#                                        way; for a revision from before
#                                        each algorithm had one Lua file,
#                                        e98c75d or earlier, from its files)
#
# Starts its own redis-server (Debian's, as in the test cluster) under
# valgrind on port ${SCRIPT_COST_PORT:-7690}, in cluster mode owning every
# slot, loads each script as the crate assembles it (src/scripts.rs), warms
# each up with as many calls as it measures, then counts one run of calls on
# random subjects with `redis-benchmark -c 1`. The crate's scripts come
# from the crate itself (`cargo bench --bench load -- --print-script NAME`),
# so what is measured is what it sends. Prints instructions per call
# (the EVALSHA's parsing and reply included), and the minimal one-key GCRA's
# count over each check's: 1.0 or more means the check costs Redis no more.
# The floor is the minimal GCRA whose GET becomes an MGET of the state, the
# override and the block keys: no check that keeps them in keys of their
# own can cost less. The GCRA check also runs in its one-key form (what a
# subject the subject-settings cache knows to have neither override nor
# block is checked with) beside go-redis/redis_rate's GCRA script as the
# peers bench sends it (benches/load/redis_rate_gcra.lua, the same quota):
# redis_rate's count over ours is printed the same way.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
calls=${1:-3000}
port=${SCRIPT_COST_PORT:-7690}
for tool in valgrind callgrind_control redis-server redis-cli redis-benchmark; do
  command -v "$tool" >/dev/null || { echo "script_cost: needs $tool (apt-get install valgrind redis-server)" >&2; exit 1; }
done
dir=$(mktemp -d)
trap 'redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
valgrind --tool=callgrind --callgrind-out-file="$dir/cg.%p" \
  redis-server --port "$port" --bind 127.0.0.1 --cluster-enabled yes \
  --cluster-config-file "$dir/nodes.conf" --dir "$dir" --save '' --appendonly no \
  >"$dir/valgrind.log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do
  redis-cli -p "$port" ping >/dev/null 2>&1 && break
  sleep 0.2
done
redis-cli -p "$port" cluster addslotsrange 0 16383 >/dev/null
until redis-cli -p "$port" cluster info | grep -q 'cluster_state:ok'; do sleep 0.2; done

script() { # the parts of a script from a file list (the minimal ones here)
  local out=""
  for part in "$@"; do out+=$(cat "src/scripts/$part.lua"); out+=$'\n'; done
  printf '%s' "$out"
}
crate_script() { # a script as the crate sends it
  cargo bench --quiet --bench load -- --print-script "$1"
}
old_script() { # a script as it was assembled at revision $1, from files $2...
  local rev=$1 out=""
  shift
  for part in "$@"; do out+=$(git show "$rev:src/scripts/$part.lua"); out+=$'\n'; done
  printf '%s' "$out"
}
file_at() { # the file $2 at revision $1 (HEAD: the work tree's), byte for byte
  local text
  if [[ $1 == HEAD ]]; then text=$(cat "$2"; echo x); else text=$(git show "$1:$2"; echo x); fi
  printf '%s' "${text%x}"
}
# Each algorithm's folder, the kind of its keys, its BURSTS and its
# STRING_STATE (its Rules), in Algorithm::ALL's order.
algorithms=("fixed_window fw false true" "sliding_log slog false false"
  "sliding_window swc false false" "gcra gcra true true")
check_part() { # the part of algorithm $2's file the checks take, at revision $1
  local lua
  lua=$(file_at "$1" "src/limit/algorithm/$2/$2.lua")
  printf '%s' "${lua%%$'\n-- [adjust]'*}"
}
settings() { printf 'local BURSTS = %s\nlocal STRING_STATE = %s\n' "$1" "$2"; }
rev_one_limit() { # algorithm $2's one-limit check at revision $1, as assemble.rs builds it
  local a name kind bursts string_state
  for a in "${algorithms[@]}"; do
    read -r name kind bursts string_state <<<"$a"
    [[ $name == "$2" ]] || continue
    file_at "$1" src/scripts/clock.lua
    settings "$bursts" "$string_state"
    check_part "$1" "$name"
    file_at "$1" src/scripts/one_limit.lua
  done
}
rev_generic() { # the generic check at revision $1, as assemble.rs builds it
  local a name kind bursts string_state
  file_at "$1" src/scripts/clock.lua
  file_at "$1" src/scripts/limit_prelude.lua
  for a in "${algorithms[@]}"; do
    read -r name kind bursts string_state <<<"$a"
    printf 'do\n'
    settings "$bursts" "$string_state"
    check_part "$1" "$name"
    printf "ALGOS['%s'] = { bursts = BURSTS, string_state = STRING_STATE, decide = decide, }\nend\n" "$kind"
  done
  file_at "$1" src/scripts/limit_main.lua
}
load() { printf '%s' "$1" | redis-cli -p "$port" -x script load; }

# name | script | keys | args (a quota that never denies: 1,000,000 per second)
tag='{t}'
# Each script its own keys (the sliding window counter's state is a hash).
three() { echo "3 $tag:$1:s:__rand_int__ $tag:$1:o:__rand_int__ $tag:$1:b:__rand_int__"; }
declare -a names codes calls_args
add() { names+=("$1"); codes+=("$2"); calls_args+=("$3"); }
cargo bench --quiet --bench load --no-run 2>/dev/null || cargo bench --bench load --no-run
add "shardlimit gcra" "$(crate_script gcra)" "$(three g) 1000000 1000000 1000000"
add "shardlimit fixed window" "$(crate_script fixed_window)" "$(three f) 1000000 1000000 1000000"
add "shardlimit sliding window counter" "$(crate_script sliding_window)" "$(three w) 1000000 1000000 1000000"
add "shardlimit sliding log" "$(crate_script sliding_log)" "$(three l) 128 1000000 128"
add "shardlimit gcra, generic check" "$(crate_script multi_limit)" "$(three x) 1 1 gcra 1000000 1000000 1000000 0"
add "minimal gcra (1 key)" "$(cat benches/load/minimal_gcra.lua)" "1 $tag:m:__rand_int__ 1 1000000"
add "bare INCR" "return redis.call('INCR', KEYS[1])" "1 $tag:i:__rand_int__"
get="redis.call('GET', KEYS[1])"
minimal=$(cat benches/load/minimal_gcra.lua)
[[ $minimal == *"$get"* ]] || { echo "script_cost: minimal_gcra.lua no longer reads its key with $get" >&2; exit 1; }
add "floor: minimal + override, block keys" \
  "${minimal/"$get"/"redis.call('MGET', KEYS[1], KEYS[2], KEYS[3])[1]"}" "$(three m2) 1 1000000"
# The one-key form (see limit/check/settings_cache.rs) against redis_rate's
# script under the same quota (burst, rate, period in seconds, cost).
add "shardlimit gcra, one key" "${codes[0]}" "1 $tag:g1:__rand_int__ 1000000 1000000 1000000"
add "redis_rate gcra (peer)" "$(cat benches/load/redis_rate_gcra.lua)" "1 $tag:rr:__rand_int__ 1000000 1000000 1 1"
# The revisions' checks are assembled here: this tree's first, which must
# come out as the crate assembles them.
if [[ -n ${SCRIPT_COST_REVS:-} ]]; then
  for a in "${algorithms[@]}"; do
    read -r name _ <<<"$a"
    [[ "$(rev_one_limit HEAD "$name")" == "$(crate_script "$name")" ]] \
      || { echo "script_cost: $name is not assembled here as the crate does (assemble.rs changed?)" >&2; exit 1; }
  done
  [[ "$(rev_generic HEAD)" == "$(crate_script multi_limit)" ]] \
    || { echo "script_cost: the generic check is not assembled here as the crate does (assemble.rs changed?)" >&2; exit 1; }
fi
check_at() { # the one-limit check of algorithm $1 (its old file $2) at $rev
  if $assembled; then rev_one_limit "$rev" "$1"; else old_script "$rev" clock one_limit "$2" one_limit_end; fi
}
for rev in ${SCRIPT_COST_REVS:-}; do
  assembled=false
  if git cat-file -e "$rev:src/limit/algorithm/assemble.rs" 2>/dev/null; then
    assembled=true
    generic=$(rev_generic "$rev")
  elif git cat-file -e "$rev:src/scripts/gcra_check.lua" 2>/dev/null; then
    generic=$(old_script "$rev" clock limit_prelude fixed_window sliding_log sliding_window gcra limit_main)
  else
    echo "script_cost: $rev has neither src/limit/algorithm/assemble.rs nor src/scripts/gcra_check.lua" >&2
    exit 1
  fi
  add "shardlimit gcra at $rev" "$(check_at gcra gcra_check)" \
    "$(three "r${#names[@]}") 1000000 1000000 1000000"
  add "shardlimit fixed window at $rev" "$(check_at fixed_window fw_check)" \
    "$(three "r${#names[@]}") 1000000 1000000 1000000"
  add "shardlimit sliding window counter at $rev" "$(check_at sliding_window swc_check)" \
    "$(three "r${#names[@]}") 1000000 1000000 1000000"
  add "shardlimit sliding log at $rev" "$(check_at sliding_log slog_check)" \
    "$(three "r${#names[@]}") 128 1000000 128"
  add "shardlimit gcra, generic check at $rev" "$generic" \
    "$(three "r${#names[@]}") 1 1 gcra 1000000 1000000 1000000 0"
  $assembled || continue
  # Before one key alone said inline, the one-key form took all six
  # arguments and the two values ('' = none).
  if git show "$rev:src/scripts/one_limit.lua" | grep -q 'if not KEYS\[2\] then'; then
    one_key_args="1000000 1000000 1000000"
  else
    one_key_args="1000000 1000000 1000000 1 i1 0 '' ''"
  fi
  add "shardlimit gcra, one key at $rev" "$(check_at gcra gcra_check)" \
    "1 $tag:r${#names[@]}:__rand_int__ $one_key_args"
done
for file in ${SCRIPT_COST_VARIANTS:-}; do
  [[ -f $file ]] || { echo "script_cost: no variant $file" >&2; exit 1; }
  args=$(grep -m1 '^-- ARGS ' "$file" | sed -e 's/^-- ARGS //' -e 's/RAND/__rand_int__/g')
  [[ -n $args ]] || { echo "script_cost: $file has no '-- ARGS ' line" >&2; exit 1; }
  add "variant $(basename "$file" .lua)" "$(cat "$file")" "$args"
done

count() { # instructions since the last zeroing
  callgrind_control -d "$pid" >/dev/null 2>&1
  local last
  last=$(ls -t "$dir"/cg."$pid".* | head -1)
  awk '/^summary:|^totals:/ { print $2; exit }' "$last"
}
declare -a per_call
for i in "${!names[@]}"; do
  sha=$(load "${codes[$i]}")
  # Split as the shell would ('' an empty argument).
  eval "args=(${calls_args[$i]})"
  redis-benchmark -p "$port" -c 1 -n "$calls" -r 100000 -q evalsha "$sha" "${args[@]}" >/dev/null
  callgrind_control -z "$pid" >/dev/null 2>&1
  redis-benchmark -p "$port" -c 1 -n "$calls" -r 100000 -q evalsha "$sha" "${args[@]}" >/dev/null
  total=$(count)
  per_call[$i]=$((total / calls))
  printf '%-36s %9d instructions per call\n' "${names[$i]}" "${per_call[$i]}"
done
minimal=${per_call[5]}
for i in "${!names[@]}"; do
  case $i in 4|5|6|9) continue ;; esac
  awk -v n="${names[$i]}" -v m="$minimal" -v c="${per_call[$i]}" \
    'BEGIN { printf "server cost vs minimal GCRA (%s, instructions): %.2f\n", n, m / c }'
done
for i in "${!names[@]}"; do
  [[ ${names[$i]} == "shardlimit gcra, one key"* ]] || continue
  awk -v n="${names[$i]}" -v m="${per_call[9]}" -v c="${per_call[$i]}" \
    'BEGIN { printf "server cost vs redis_rate (%s, instructions): %.2f\n", n, m / c }'
done
