#!/usr/bin/env bash
# The whole test suite, as README.md gives it: brings the six-node cluster up
# if it is not (cluster-compose/up.sh is idempotent), then runs every unit,
# doc and integration test against it.
#
# Fault-injection tests kill and pause nodes of the shared cluster, so they
# are `#[ignore]`d in the normal run and run here afterwards, one at a time.
# Then the same ports come up TLS-only (`up.sh --tls`) for the TLS smoke
# (tests/deployments/tls.rs, as the least-privilege ACL user), and the plaintext cluster
# is brought back so the demo command still works afterwards. Last, one
# standalone redis-server (port 6390, beside the cluster) for the
# standalone suite (tests/deployments/standalone.rs), then the Sentinel setup (primary
# 6400, replica 6401, sentinels 26400-26402) for tests/deployments/sentinel.rs: its
# suite, then its fault test alone (it kills the primary, and restores it
# as a replica). SHARDLIMIT_CLUSTER_PORT, SHARDLIMIT_STANDALONE_PORT,
# SHARDLIMIT_SENTINEL_DATA_PORT and SHARDLIMIT_SENTINEL_PORT move each setup
# (scripts and tests alike) beside another one.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# The library has no default nodes; the tests, the CLI and the examples they
# start find the test cluster through this (cluster-compose/ reads it too).
export SHARDLIMIT_CLUSTER_PORT=${SHARDLIMIT_CLUSTER_PORT:-7000}
cluster-compose/up.sh
# The programs tests run as child processes, built first with the very
# commands the tests use (tests/common/mod.rs: cli_exe, cargo_built), so
# those are no-ops then: a build inside a test takes this machine's 2 cores
# from the tests around it for a minute or more, and their checks time out
# (a clean-clone run, 2026-12-03). With SHARDLIMIT_PREBUILT set, a test
# whose build compiles anything all the same fails and says so.
cargo build --quiet -p shardlimit-cli
cargo build --quiet --example nightly_export
cargo build --quiet --all-features --example service --example axum_api --example grpc_service
export SHARDLIMIT_PREBUILT=1
cargo test --workspace --all-features --no-fail-fast
if [ -d tests/faults ]; then
  cargo test --all-features --test faults -- --ignored --test-threads=1
fi
# The core without its default features (the deny cache, quota slices), as
# a service that turns them off builds it: its unit tests and the cluster
# suite (the tests of those stages are left out, the rest run).
cargo test --no-default-features --lib --test cluster

cluster-compose/down.sh
cluster-compose/up.sh --tls
# cluster-compose/lib.sh: the state of a cluster on another port base is
# in .state-<base>.
state=cluster-compose/.state
[ "$SHARDLIMIT_CLUSTER_PORT" = 7000 ] || state=$state-$SHARDLIMIT_CLUSTER_PORT
SHARDLIMIT_TLS_NODES=rediss://127.0.0.1:$SHARDLIMIT_CLUSTER_PORT \
  SHARDLIMIT_TLS_CA="$PWD/$state/tls/ca.crt" \
  cargo test --all-features --test deployments -- --ignored tls::
cluster-compose/down.sh
cluster-compose/up.sh

cluster-compose/up.sh --standalone
cargo test --all-features --test deployments -- --ignored standalone::
cluster-compose/down.sh --standalone

cluster-compose/up.sh --sentinel
cargo test --all-features --test deployments -- --ignored sentinel:: --skip fault_
cargo test --all-features --test deployments -- --ignored sentinel::fault_ --test-threads=1 --nocapture
cluster-compose/down.sh --sentinel
