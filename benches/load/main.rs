//! Load harness: throughput, latency and memory of shardlimit's primitives on
//! the six-node cluster, side by side with bare redis-rs.
//!
//! ```text
//! cargo bench --bench load -- --kind gcra --subjects 1000000 --concurrency 64 \
//!     --rounds 10 --round-secs 3 --baseline raw
//! cargo bench --bench load -- --kind gcra --populate 10000000 --limit 1 --period-secs 3600
//! cargo bench --bench load -- --peers
//! cargo bench --bench load -- --help
//! ```
//!
//! * `--baseline raw` runs the **same Lua script with the same keys and
//!   arguments** through a bare redis-rs cluster connection (no shardlimit),
//!   interleaved with the library round by round (A B A B …), and reports
//!   medians and the library/raw ratio measured in the same run, so machine
//!   noise cancels.
//! * `--baseline plain --plain-nodes redis://127.0.0.1:7200` measures the
//!   cost of TLS: the library against the cluster of `SHARDLIMIT_NODES`
//!   (`rediss://`, with `SHARDLIMIT_TLS_CA`), interleaved with the library
//!   against a plaintext cluster of the same redis-server build, and reports
//!   the tls/plain ratios of the same run (see docs/production.md, "What
//!   TLS costs").
//! * `--workload attack --baseline nocache` (the baseline is implied): 1%
//!   of the subjects send 90% of the requests at 10× their limit; the
//!   limiter with a deny cache against the same limiter without one, with
//!   the Redis commands each costs and the normal users' latency (see
//!   attack.rs).
//! * `--workload hot`: one subject limited far above one master's rate
//!   (`--hot-limit`, 200,000/s), quota slices against exact checks, over
//!   `--hot-handles` (4) separate `Cluster` handles (see hot.rs).
//! * `--workload skewed`: Zipf subjects, a few hot, each with its own
//!   limit; automatic slicing (`Slices::when_hot`) against exact checks,
//!   Redis commands per decision and the bound per subject and period
//!   (see skewed.rs).
//! * `--batch 64 --baseline single` (the baseline is implied):
//!   `check_many` of 64 subjects per call against single checks at the
//!   same number of decisions in flight (see batch.rs).
//! * `--server-cost`: what one check costs Redis itself, on one master,
//!   against a minimal one-key GCRA script and a bare `INCR` (see
//!   server_cost.rs).
//! * `--peers`: shardlimit against its peers on one master, at pipeline
//!   depth 1 and 16: our fixed window against envoy ratelimit's
//!   `INCRBY` + `EXPIRE`, our GCRA against redis_rate's GCRA script (its
//!   shape, redis_rate_gcra.lua), and the plain-command shapes of a fixed
//!   window; decisions per second, ratios per round, and the master's
//!   commands and microseconds per decision (see peers.rs).
//! * `--populate N` measures memory: `used_memory` summed over the masters
//!   before and after creating N limiters (one operation per subject),
//!   divided by N, next to N minimal raw keys of the same value and TTL.
//!
//! Results: a table on stdout and a JSON file under `target/bench/`.
//! Only ever targets the cluster in `SHARDLIMIT_NODES` / the local test
//! nodes on 127.0.0.1.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

mod args;
mod attack;
mod batch;
mod commandstats;
mod compare;
mod drive;
mod hot;
mod memory;
mod peers;
mod raw;
mod report;
mod server_cost;
mod skewed;
mod target;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches};
use shardlimit::Cluster;

use crate::args::Args;
use crate::compare::{Contender, compare};
use crate::drive::Sampler;
use crate::memory::populate;
use crate::raw::Raw;
#[cfg(feature = "tower")]
use crate::target::{Target, http_layer};
use crate::target::{lib_call, target};

fn main() {
    let matches = Args::command().get_matches();
    let mut args = Args::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let given = |id: &str| matches.value_source(id) == Some(ValueSource::CommandLine);
    args.rounds_given = given("rounds");
    args.round_secs_given = given("round_secs");
    if let Some(name) = &args.print_script {
        let scripts = shardlimit::__private::scripts();
        match scripts.iter().find(|(n, _)| n == name) {
            Some((_, code)) => print!("{code}"),
            None => {
                let names: Vec<&str> = scripts.iter().map(|(n, _)| *n).collect();
                eprintln!("no script {name:?}; the crate's: {}", names.join(", "));
                std::process::exit(2);
            }
        }
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run(args));
}

pub(crate) async fn run(args: Args) {
    let namespace = args.namespace.clone().unwrap_or_else(|| {
        format!(
            "bench{}",
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_secs()
        )
    });
    let cluster = Cluster::builder_from_env()
        .namespace(&namespace)
        // `--peers` measures the library against bare redis-rs sides that
        // wait as long as it takes: a timeout there would end the run on a
        // loaded box instead of measuring it.
        .command_timeout(Duration::from_secs(if args.peers { 30 } else { 1 }))
        .build()
        .await
        .expect("cluster: start it with cluster-compose/up.sh");
    #[cfg(feature = "tower")]
    if args.kind == "tower" {
        // The HTTP layer around a GCRA limiter, against the same limiter
        // called directly: the layer's overhead per request.
        let mut inner = args.clone();
        inner.kind = "gcra".into();
        let Target::Limiter(limiter) = target(&cluster, &inner) else {
            unreachable!()
        };
        let (layer, direct) = http_layer::calls(limiter);
        let sampler = Sampler::new(&args);
        let layer = Contender::single("layer", layer, &args);
        let direct = Contender::single("direct", direct, &args);
        return compare(&args, &sampler, layer, Some(direct)).await;
    }
    match args.workload.as_deref() {
        Some("attack") => return attack::attack(&cluster, &args).await,
        Some("hot") => return hot::hot(&cluster, &args).await,
        Some("skewed") => return skewed::skewed(&cluster, &args).await,
        Some(other) => panic!("unknown workload {other:?} (`attack`, `hot` or `skewed`)"),
        None => {}
    }
    if args.peers {
        return peers::peers(&cluster, &args).await;
    }
    if args.server_cost {
        return server_cost::server_cost(&cluster, &args).await;
    }
    if let Some(per_call) = args.batch {
        return batch::batch(&cluster, &args, per_call).await;
    }
    let target = target(&cluster, &args);
    if let Some(n) = args.populate {
        return populate(&cluster, &target, &args, n).await;
    }
    let sampler = Sampler::new(&args);
    if args.baseline.as_deref() == Some("plain") {
        let nodes = args
            .plain_nodes
            .clone()
            .expect("--baseline plain needs --plain-nodes");
        let plain = Cluster::builder(nodes.split(',').map(str::to_owned))
            .namespace(&namespace)
            .command_timeout(Duration::from_secs(1))
            .build()
            .await
            .expect("the plaintext cluster of --plain-nodes");
        let plain = self::target(&plain, &args);
        let tls = move |k: &[u64]| lib_call(target.clone(), k[0]);
        let plain = move |k: &[u64]| lib_call(plain.clone(), k[0]);
        let (tls, plain) = (
            Contender::single("tls", tls, &args),
            Contender::single("plain", plain, &args),
        );
        return compare(&args, &sampler, tls, Some(plain)).await;
    }
    let raw = match args.baseline.as_deref() {
        Some("raw") => Some(Arc::new(Raw::new(&cluster, &target).await)),
        Some(other) => panic!("unknown baseline {other:?} (`raw` or `plain`)"),
        None => None,
    };
    let lib = move |k: &[u64]| lib_call(target.clone(), k[0]);
    let raw = raw.map(|raw| Contender::single("raw", move |k: &[u64]| raw.call(k[0]), &args));
    compare(&args, &sampler, Contender::single("lib", lib, &args), raw).await;
}
