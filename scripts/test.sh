#!/usr/bin/env bash
# The whole test suite, as README.md gives it: brings the six-node cluster up
# if it is not (cluster-compose/up.sh is idempotent), then runs every unit,
# doc and integration test against it.
#
# Fault-injection tests kill and pause nodes of the shared cluster, so they
# are `#[ignore]`d in the normal run and run here afterwards, one at a time.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

cluster-compose/up.sh
cargo test --all-features --no-fail-fast
if [ -d tests/faults ]; then
  cargo test --all-features --test faults -- --ignored --test-threads=1
fi
