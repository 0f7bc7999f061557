#!/usr/bin/env bash
# Seed 000's check, forced rather than waited for: three "cron hosts" run the
# nightly export at the same moment; exactly one exports.
#
#   scripts/nightly_export_race.sh [export-secs]
#
# Uses a fresh namespace per run so an earlier run's lock does not interfere.
# Honours SHARDLIMIT_NODES like the example; unset, the local test cluster
# of cluster-compose/ (the library itself has no default nodes).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export SHARDLIMIT_NODES="${SHARDLIMIT_NODES:-redis://127.0.0.1:${SHARDLIMIT_CLUSTER_PORT:-7000}}"

export_secs="${1:-2}"
ns="race-$(date +%s)-$$"
cargo build --quiet --example nightly_export
exe=target/debug/examples/nightly_export
if [ -n "${CARGO_TARGET_DIR:-}" ]; then exe="$CARGO_TARGET_DIR/debug/examples/nightly_export"; fi

for h in cron-01 cron-02 cron-03; do
  "$exe" --host "$h" --namespace "$ns" --export-secs "$export_secs" &
done
wait
