//! `--server-cost`: what one check costs Redis itself, on one master.
//!
//! The client is as fast as bare redis-rs; what bounds every deployment is
//! the script's cost on the server. This drives one master (the first of
//! the topology) with `EVALSHA`s of three kinds of script, side by side in
//! interleaved rounds, at pipeline depth 1 and 16 from 64 concurrent
//! clients (8 connections), random subjects among those the master owns:
//!
//! * the crate's check of each algorithm, exactly as `RateLimiter::check`
//!   sends it (`RateLimiter::invocation`: the same script, keys and
//!   arguments), under a quota that never denies;
//! * a minimal one-key GCRA of the classic shape (the theoretical arrival
//!   time in one key, as redis_rate and redis-cell keep it; written here);
//! * a bare `INCR` script, the floor of any script call;
//! * the floor of any check that honours overrides and blocks kept in keys
//!   of their own: the minimal GCRA reading the override and block keys in
//!   the `MGET` of its state, and nothing more (not a check, a lower bound).
//!
//! Per side: requests per second (median of its rounds) and the master's
//! own microseconds per call from `INFO commandstats` (`cmdstat_evalsha`,
//! the commands the script calls included), which no client cost distorts.
//! The last lines, `server cost vs minimal GCRA: R`, are the minimal
//! script's requests per second over the crate's GCRA check's: 1.0 or less
//! means a check costs Redis no more than the minimal script; the same
//! ratio for the floor says how low any check with separate override and
//! block keys could go.
//!
//! ```text
//! cargo bench --bench load -- --server-cost --rounds 3 --round-secs 3
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::Rng;
use redis::aio::MultiplexedConnection;
use redis::{Cmd, Value};
use serde_json::json;
use shardlimit::cluster::Script;
use shardlimit::keys::slot;
use shardlimit::{Algorithm, Cluster, RateLimiter};

use crate::args::Args;
use crate::report::{median, write_report};
use crate::target::quota;

/// Concurrent clients and the connections they share.
const CLIENTS: usize = 64;
const CONNECTIONS: usize = 8;
/// Distinct subjects, all on the measured master.
const SUBJECTS: usize = 100_000;

/// A minimal GCRA of the classic shape: one key holding the theoretical
/// arrival time (us), the server's clock, one GET and one SET with a TTL.
const MINIMAL_GCRA: &str = include_str!("minimal_gcra.lua");

/// The generic check of any number of limits, as the crate sends it.
fn generic_check() -> &'static str {
    shardlimit::__private::scripts()
        .into_iter()
        .find(|(name, _)| *name == "multi_limit")
        .map(|(_, code)| code)
        .expect("the crate sends a multi_limit script")
}

/// The floor of any script call: one command. Its keys have no TTL, so
/// they are deleted when the run ends.
const BARE_INCR: &str = "return redis.call('INCR', KEYS[1])";

/// One kind of script call, made per random subject.
struct Side {
    name: String,
    make: Box<dyn Fn(&str) -> Cmd + Send + Sync>,
}

pub(crate) async fn server_cost(cluster: &Cluster, args: &Args) {
    let topology = cluster.topology().await.expect("topology");
    let shard = &topology.shards[0];
    let addr = format!("{}:{}", shard.master.host, shard.master.port);
    let subjects: Arc<Vec<String>> = Arc::new(
        (0u64..)
            .map(|i| format!("sc{i}"))
            .filter(|s| {
                let owned = slot(s.as_bytes());
                shard.slots.iter().any(|r| r.contains(&owned))
            })
            .take(SUBJECTS)
            .collect(),
    );
    let keys = cluster.keys().clone();
    let minimal = Script::new("minimal_gcra", MINIMAL_GCRA);
    let incr = Script::new("bare_incr", BARE_INCR);
    let floor = Script::new("floor_gcra", floor_gcra());
    let mut sides: Vec<Side> = Algorithm::ALL
        .iter()
        .map(|&a| {
            let limiter = RateLimiter::builder(cluster, format!("sc-{}", a.kind()), quota(args, a))
                .algorithm(a)
                .build()
                .unwrap();
            Side {
                name: format!("shardlimit {}", a.kind()),
                make: Box::new(move |subject: &str| {
                    let call = limiter.invocation(subject, 1).unwrap();
                    evalsha(&call.script, call.keys.keys(), &call.args)
                }),
            }
        })
        .collect();
    // The generic check (what a multi-limit sends) of one limit, with the
    // generic ARGV: `cost, consume, kind, limit, period_us, burst, shadow`.
    // The same keys as the GCRA check.
    let generic_script = Script::new("generic_check", generic_check());
    let generic_limiter = RateLimiter::builder(cluster, "sc-generic", quota(args, Algorithm::Gcra))
        .build()
        .unwrap();
    let gq = quota(args, Algorithm::Gcra);
    let generic_args: Vec<Vec<u8>> = [
        "1".to_owned(),
        "1".to_owned(),
        "gcra".to_owned(),
        gq.limit().to_string(),
        gq.period().as_micros().to_string(),
        gq.burst().to_string(),
        "0".to_owned(),
    ]
    .map(String::into_bytes)
    .to_vec();
    let generic = generic_script.clone();
    sides.push(Side {
        name: "shardlimit gcra, generic check".into(),
        make: Box::new(move |subject: &str| {
            let call = generic_limiter.invocation(subject, 1).unwrap();
            evalsha(&generic, call.keys.keys(), &generic_args)
        }),
    });
    let one_key = |script: Script, part: &'static str, args: Vec<Vec<u8>>| {
        let id = shardlimit::keys::KeyId::new("sc", part).unwrap();
        let keys = keys.clone();
        Box::new(move |subject: &str| {
            let key = keys.key(subject, &id).unwrap();
            evalsha(&script, &[key], &args)
        }) as Box<dyn Fn(&str) -> Cmd + Send + Sync>
    };
    // The same rate as the crate's GCRA check: one cell per period / limit.
    let q = quota(args, Algorithm::Gcra);
    let interval_us = q.period().as_micros() / u128::from(q.limit().get());
    sides.push(Side {
        name: "minimal gcra (1 key)".into(),
        make: one_key(
            minimal.clone(),
            "mingcra",
            vec![
                interval_us.max(1).to_string().into_bytes(),
                q.burst().to_string().into_bytes(),
            ],
        ),
    });
    sides.push(Side {
        name: "bare INCR".into(),
        make: one_key(incr.clone(), "incr", Vec::new()),
    });
    // The floor reads the three keys a GCRA check of its own limiter
    // declares (state, override, block), with the minimal script's ARGV.
    let floor_limiter = RateLimiter::builder(cluster, "sc-floor", quota(args, Algorithm::Gcra))
        .build()
        .unwrap();
    let floor_script = floor.clone();
    let floor_args = vec![
        interval_us.max(1).to_string().into_bytes(),
        q.burst().to_string().into_bytes(),
    ];
    sides.push(Side {
        name: "floor: minimal + override, block".into(),
        make: Box::new(move |subject: &str| {
            let call = floor_limiter.invocation(subject, 1).unwrap();
            assert_eq!(call.keys.keys().len(), 3, "state, override, block");
            evalsha(&floor_script, call.keys.keys(), &floor_args)
        }),
    });

    let client = redis::Client::open(format!("redis://{addr}")).unwrap();
    // No response timeout: 1,024 calls in flight on a loaded 2-core box can
    // wait longer than redis-rs' default for their turn.
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    let mut conns = Vec::new();
    for _ in 0..=CONNECTIONS {
        conns.push(
            client
                .get_multiplexed_async_connection_with_config(&config)
                .await
                .unwrap(),
        );
    }
    let mut admin = conns.pop().unwrap();
    // Loaded once, so every call is an EVALSHA (the bench may; the library
    // never sends SCRIPT LOAD).
    let scripts: Vec<Script> = Algorithm::ALL
        .iter()
        .map(|&a| {
            let l = RateLimiter::builder(cluster, "sc-load", quota(args, a))
                .algorithm(a)
                .build()
                .unwrap();
            l.invocation("x", 1).unwrap().script
        })
        .chain([generic_script, minimal, incr, floor])
        .collect();
    load_scripts(&mut admin, &scripts).await;

    let sides: Vec<Arc<Side>> = sides.into_iter().map(Arc::new).collect();
    let round = Duration::from_secs_f64(args.round_secs);
    let mut rows = Vec::new();
    for depth in [1usize, 16] {
        // Warm-up: every side once (keys created, the listpacks allocated).
        for side in &sides {
            drive(
                side,
                &subjects,
                &conns,
                depth,
                Duration::from_secs_f64(args.warmup_secs / 4.0),
            )
            .await;
        }
        let mut rates: Vec<Vec<f64>> = vec![Vec::new(); sides.len()];
        let mut usec: Vec<Vec<f64>> = vec![Vec::new(); sides.len()];
        for r in 0..args.rounds {
            // Rotate the order, so no side always follows the same one.
            for k in 0..sides.len() {
                let i = (k + r) % sides.len();
                let before = evalsha_stats(&mut admin).await;
                let rate = drive(&sides[i], &subjects, &conns, depth, round).await;
                let after = evalsha_stats(&mut admin).await;
                rates[i].push(rate);
                let calls = after.0.saturating_sub(before.0).max(1);
                usec[i].push(after.1.saturating_sub(before.1) as f64 / calls as f64);
            }
        }
        for (i, side) in sides.iter().enumerate() {
            rows.push((
                side.name.clone(),
                depth,
                median(&rates[i]),
                median(&usec[i]),
            ));
        }
    }
    delete_incr_keys(&mut admin, cluster.namespace()).await;

    println!(
        "server cost on master {addr}: {CLIENTS} clients, {} rounds of {:?} per side and depth",
        args.rounds, round
    );
    println!(
        "{:<36} {:>5} {:>12} {:>12}",
        "script", "P", "req/s", "us/call"
    );
    for (name, depth, rate, us) in &rows {
        println!("{name:<36} {depth:>5} {rate:>12.0} {us:>12.2}");
    }
    let find = |name: &str, depth: usize| {
        rows.iter()
            .find(|(n, d, _, _)| n == name && *d == depth)
            .map(|r| (r.2, r.3))
            .unwrap()
    };
    let mut ratios = Vec::new();
    for depth in [1, 16] {
        let (ours, ours_us) = find("shardlimit gcra", depth);
        let (minimal, minimal_us) = find("minimal gcra (1 key)", depth);
        let r = minimal / ours;
        println!(
            "P{depth}: server cost vs minimal GCRA: {r:.2} (us/call {ours_us:.2} against {minimal_us:.2})"
        );
        let (floor, floor_us) = find("floor: minimal + override, block", depth);
        println!(
            "P{depth}: floor (minimal GCRA reading the override and block keys) vs minimal GCRA: {:.2} (us/call {floor_us:.2})",
            minimal / floor
        );
        let (generic, generic_us) = find("shardlimit gcra, generic check", depth);
        println!(
            "P{depth}: one-limit GCRA check vs the generic check: {:.2}x the req/s (us/call {ours_us:.2} against {generic_us:.2})",
            ours / generic
        );
        ratios.push(json!({ "depth": depth, "ratio": r, "us_per_call": ours_us, "minimal_us_per_call": minimal_us, "floor_ratio": minimal / floor, "floor_us_per_call": floor_us, "generic_req_per_sec": generic, "generic_us_per_call": generic_us }));
    }
    write_report(
        "gcra",
        "server-cost",
        &json!({
            "master": addr,
            "clients": CLIENTS,
            "rounds": args.rounds,
            "round_secs": args.round_secs,
            "rows": rows.iter().map(|(n, d, r, u)| json!({"script": n, "depth": d, "req_per_sec": r, "us_per_call": u})).collect::<Vec<_>>(),
            "server_cost_vs_minimal_gcra": ratios,
        }),
    );
}

/// The floor: the minimal GCRA whose one `GET` becomes an `MGET` of its
/// state, override and block keys (KEYS[1..3]); nothing else changes, so it
/// costs exactly what reading the two keys adds.
fn floor_gcra() -> String {
    const GET: &str = "redis.call('GET', KEYS[1])";
    assert_eq!(
        MINIMAL_GCRA.matches(GET).count(),
        1,
        "minimal_gcra.lua reads its key once"
    );
    MINIMAL_GCRA.replace(GET, "redis.call('MGET', KEYS[1], KEYS[2], KEYS[3])[1]")
}

/// `SCRIPT LOAD`s each script on the node of `conn`, so that a bench's
/// calls can all be `EVALSHA`s (the bench may; the library never sends
/// `SCRIPT LOAD`, it loads a script by `EVAL` on `NOSCRIPT`).
pub(crate) async fn load_scripts<'s>(
    conn: &mut MultiplexedConnection,
    scripts: impl IntoIterator<Item = &'s Script>,
) {
    for script in scripts {
        let _: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(script.code())
            .query_async(conn)
            .await
            .unwrap();
    }
}

fn evalsha(script: &Script, keys: &[Vec<u8>], args: &[Vec<u8>]) -> Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.sha1()).arg(keys.len());
    for key in keys {
        cmd.arg(key);
    }
    for arg in args {
        cmd.arg(arg);
    }
    cmd
}

/// `CLIENTS` tasks sending pipelines of `depth` calls of `side` for `time`;
/// requests per second.
async fn drive(
    side: &Arc<Side>,
    subjects: &Arc<Vec<String>>,
    conns: &[MultiplexedConnection],
    depth: usize,
    time: Duration,
) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (side, subjects, stop, done) =
                (side.clone(), subjects.clone(), stop.clone(), done.clone());
            let mut conn = conns[c % conns.len()].clone();
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let mut pipe = redis::pipe();
                    for _ in 0..depth {
                        let k = rand::rng().random_range(0..subjects.len());
                        pipe.add_command((side.make)(&subjects[k]));
                    }
                    let replies: Vec<Value> = pipe.query_async(&mut conn).await.unwrap();
                    if let Some(err) = replies.iter().find_map(|v| match v {
                        Value::ServerError(e) => Some(e.clone()),
                        _ => None,
                    }) {
                        panic!("{}: {err:?}", side.name);
                    }
                    done.fetch_add(depth as u64, Ordering::Relaxed);
                }
            })
        })
        .collect();
    tokio::time::sleep(time).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

/// `cmdstat_evalsha`'s calls and microseconds on the master.
async fn evalsha_stats(conn: &mut MultiplexedConnection) -> (u64, u64) {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    let line = info
        .lines()
        .find(|l| l.starts_with("cmdstat_evalsha:"))
        .unwrap_or("");
    let field = |name: &str| {
        line.split([':', ','])
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("calls"), field("usec"))
}

/// The bare INCR side's keys have no TTL: they go when the run ends.
async fn delete_incr_keys(conn: &mut MultiplexedConnection, namespace: &str) {
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{namespace}:*:sc:incr"))
            .arg("COUNT")
            .arg(10_000)
            .query_async(conn)
            .await
            .unwrap();
        // One UNLINK per key: a cluster node refuses a multi-key command
        // across slots.
        let mut pipe = redis::pipe();
        for key in &keys {
            pipe.cmd("UNLINK").arg(key).ignore();
        }
        let () = pipe.query_async(conn).await.unwrap();
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
}
