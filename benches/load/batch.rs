//! `--batch N`: `RateLimiter::check_many` of `N` subjects per call against
//! single `check`s (`--baseline single`, implied; no other baseline) at the
//! same number of decisions in flight: `--concurrency / N` tasks of one
//! batch each against `--concurrency` tasks of one check each (512 with 64:
//! 8 tasks × 64 against 512 × 1).
//!
//! Both sides check the same limiter over the same subjects (the default
//! quota never denies). Rates count decisions, not calls: a batch of 64 is
//! 64 decisions. The latency columns are per call — for the batch side the
//! time until all of a call's decisions are back — so the p99 ratio
//! compares a batch's wait with a single check's, which is what a caller
//! of each waits for; the batch side's calls per second are reported
//! beside it.

use std::fmt::Write as _;

use serde_json::json;
use shardlimit::Cluster;

use crate::args::Args;
use crate::commandstats::{CommandProbe, Masters};
use crate::compare::{Contender, rounds, summary};
use crate::drive::{Reply, Sampler, Shape};
use crate::report::{median, write_report};
use crate::target::{Target, lib_call, target};

pub(crate) async fn batch(cluster: &Cluster, args: &Args, per_call: usize) {
    match args.baseline.as_deref() {
        None | Some("single") => {}
        Some(other) => panic!("--batch compares with `single`, not {other:?}"),
    }
    assert!(per_call > 0, "--batch: at least 1");
    assert!(
        args.workload.is_none(),
        "--batch runs the uniform or zipf workload"
    );
    let tasks = args.concurrency / per_call;
    assert!(
        tasks > 0 && tasks * per_call == args.concurrency,
        "--concurrency must be a multiple of --batch"
    );
    let Target::Limiter(limiter) = target(cluster, args) else {
        panic!("--batch is for the rate limiters")
    };
    let sampler = Sampler::new(args);
    let many = {
        let limiter = limiter.clone();
        move |ks: &[u64]| {
            let requests: Vec<(String, u32)> = ks.iter().map(|k| (format!("s{k}"), 1)).collect();
            let limiter = limiter.clone();
            async move {
                let results = limiter.check_many(&requests).await;
                Reply::decisions(results.iter().map(Result::as_ref))
            }
        }
    };
    let single = {
        let target = Target::Limiter(limiter);
        move |k: &[u64]| lib_call(target.clone(), k[0])
    };
    let many = Contender {
        shape: Shape {
            per_call,
            ..Shape::single(tasks)
        },
        ..Contender::single("batch", many, args)
    };
    let single = Contender::single("single", single, args);
    let mut masters = Masters::connect(cluster).await;
    let mut probe = CommandProbe::new(&mut masters);
    let (a, b) = rounds(args, &sampler, &many, Some(&single), &mut probe).await;
    let costs = probe.costs(&a, &b);
    let (mut table, mut report) = summary(args, ("batch", &a), Some(("single", &b)));
    let title = format!(
        "check_many of {per_call} subjects per call on {tasks} tasks against check on {} tasks; \
         latency columns are per call (a batch row: one call of {per_call} decisions)\n",
        args.concurrency
    );
    table.insert_str(0, &title);
    writeln!(
        table,
        "batch calls/s: {:.0} ({:.0} decisions/s); single calls/s: {:.0}",
        median(&a.call_rates),
        median(&a.rates),
        median(&b.call_rates),
    )
    .unwrap();
    // Where the time goes: each decision is still its own script on Redis.
    writeln!(
        table,
        "Redis (the masters' INFO commandstats, medians of rounds): script runs/s batch {:.0}, single {:.0}; \
         µs in scripts per decision batch {:.1}, single {:.1}; commands/s batch {:.0}, single {:.0}",
        costs[0].server_per_sec,
        costs[1].server_per_sec,
        costs[0].server_usec_per_decision,
        costs[1].server_usec_per_decision,
        costs[0].commands_per_sec,
        costs[1].commands_per_sec,
    )
    .unwrap();
    report["batch"]["redis"] = costs[0].json();
    report["single"]["redis"] = costs[1].json();
    report["batch_tasks"] = json!(tasks);
    report["batch_subjects_per_call"] = json!(per_call);
    report["single_tasks"] = json!(args.concurrency);
    print!("{table}");
    write_report(&args.kind, "batch", &report);
}
