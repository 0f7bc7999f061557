//! `--peers`: shardlimit against what its peers send Redis, on one master.
//!
//! Everything runs against the first master of the topology, with random
//! subjects among those whose slot it owns (as `--server-cost` does), at
//! pipeline depth 1 and 16, from 64 concurrent client tasks, in interleaved
//! rounds. The sides come in three sets, each compared within itself: in
//! every round a set's sides run back to back (the order rotated each
//! round), and each side's rate is divided by its set's reference side's
//! of the same round; a ratio printed is the median of those per-round
//! ratios, which cancels the load of other processes better than a ratio
//! of medians taken seconds apart.
//!
//! **The peers** (two sets; the last lines, ours / theirs, theirs the
//! reference):
//!
//! * *fixed window*: ours through the public API, a [`RateLimiter`] with
//!   [`Algorithm::FixedWindow`] under a quota that never denies: depth 1 is
//!   one `check(subject)` per task at a time, depth 16 one `check_many` of
//!   16 subjects (each check its own pipeline, all at once), decided from
//!   plain commands (`INCRBY` + `PEXPIREAT … NX`; see the `limit` module
//!   docs, "Plain commands"), with a subject-settings cache, so that once a
//!   subject is known to have no override or block they are not read.
//!   Against envoy ratelimit's
//!   fixed window, written here from its description: per decision
//!   `INCRBY <key of the subject and the current window> <hits>` and
//!   `EXPIRE <key> <period>`, the window taken from the client's clock,
//!   pipelined (depth 16: sixteen decisions' commands in one pipeline).
//!   Envoy pipelines
//!   the two commands of each of a request's limits (one here), and its
//!   Redis client pipelines concurrent requests' commands; depth 16 stands
//!   for that.
//! * *GCRA*: ours ([`Algorithm::Gcra`], check / `check_many` of 16, its
//!   script; with the subject-settings cache, in its one-key form)
//!   against go-redis/redis_rate's GCRA script, whose shape and cost
//!   redis_rate_gcra.lua mirrors (its header says how), by `EVALSHA`
//!   through bare redis-rs, one pipeline of 16 at depth 16.
//!
//! Ours includes the library's client work (routing, key building, reply
//! parsing, outcome counting) and theirs only bare redis-rs': on a machine
//! where the bench and Redis share the cores, that shows in the ratio as
//! well as the master's microseconds per decision, which are the server's
//! alone.
//!
//! **Plain shapes** (the third set, for the fixed window's design: what
//! one decision costs in plain commands, each against (a)), all through
//! bare redis-rs, keys `<subject key>:<window start>` like envoy's:
//!
//! * (a) envoy's shape: `INCRBY k 1` + `PEXPIRE k <period ms>`;
//! * (b) `MGET <override key> <block key>` (keys that do not exist, in the
//!   subject's slot: the library's keys for them) + `INCRBY k 1` +
//!   `PEXPIREAT k <window end, ms> NX`;
//! * (c) `INCRBY k 1` + `PEXPIREAT k <window end, ms> NX`;
//! * (d) the library's one-limit fixed-window script exactly as `check`
//!   sends it (`RateLimiter::invocation`), by `EVALSHA`.
//!
//! (a) and the envoy side differ only in `PEXPIRE` against `EXPIRE`: two
//! sides of the same cost, so their difference shows the run's noise.
//!
//! **Connections.** The library keeps one multiplexed connection per node,
//! so all its traffic to the master shares one connection; every bare
//! redis-rs side gets one multiplexed connection to the master too (64
//! tasks on it, as on the library's). A side's `INFO` reads go through a
//! connection of their own, outside the measured ones.
//!
//! **Settling.** After each round the bench waits until the master has
//! finished the work that round left it (keys expiring, the AOF, the
//! replication stream: until a stretch of 100 ms in which it used under a
//! tenth of the CPU time, with the keys the round left to expire within
//! 3 s expired), so that no side pays for the side before it (see
//! `measured::settle`, which says what went wrong without it).
//!
//! Per side and depth: decisions per second (median of the rounds), and
//! from the master's `INFO commandstats` diffed around each round, per
//! decision: the commands Redis ran (those a script calls included), the
//! script runs among them, and the master's microseconds (a script's own
//! time, which includes its commands; for plain commands the sum of
//! theirs); the master's CPU time per decision (`INFO cpu`, every thread,
//! from the round's start until it was quiet again: what `us/dec` leaves
//! out, expiring the keys and writing the AOF, included); the keys it
//! expired per decision in that time (`INFO stats`); and how long it took
//! to settle. Medians of the rounds again.
//!
//! ```text
//! cargo bench --bench load -- --peers
//! cargo bench --bench load -- --peers --rounds 9 --round-secs 3
//! cargo bench --bench load -- --peers --peers-sets gcra
//! ```
//!
//! Default here (when `--rounds` / `--round-secs` are not given): 11
//! rounds of 0.75 s per side and depth, about 2.5 minutes. The library's
//! command timeout is 30 s in this mode (1 s elsewhere), as the bare sides
//! have none. The JSON report is written under `target/bench/`
//! (`*-peers-fixed_window.json`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::future::BoxFuture;
use rand::Rng;
use redis::aio::MultiplexedConnection;
use redis::{Pipeline, Value};
use serde_json::json;
use shardlimit::cluster::Script;
use shardlimit::keys::{KeyBuilder, KeyId, slot};
use shardlimit::{Algorithm, Cluster, Decision, RateLimiter, Result as LibResult};

use crate::args::Args;
use crate::report::{median, write_report};
use crate::server_cost::load_scripts;
use crate::target::quota;

mod measured;

use self::measured::{Measured, Row, commandstats, master_sample, settle};

/// Concurrent client tasks, on every side.
const CLIENTS: usize = 64;
/// Distinct subjects, all on the measured master.
const SUBJECTS: usize = 100_000;
/// Pipeline depths: one decision per request, and sixteen.
const DEPTHS: [usize; 2] = [1, 16];
/// `--peers`' own round defaults, used unless `--rounds` / `--round-secs`
/// are given: a run of about 2.5 minutes, in many short rounds, since on
/// a shared machine the load of other processes changes from second to
/// second and a ratio is only as good as the moments it compares.
const ROUNDS: usize = 11;
const ROUND_SECS: f64 = 0.75;

/// go-redis/redis_rate's GCRA script, its shape and cost (written here).
const REDIS_RATE_GCRA: &str = include_str!("redis_rate_gcra.lua");

/// Sides compared with one another: run back to back in each round, and
/// each divided by the reference side round by round.
struct Set {
    what: &'static str,
    /// Its name for `--peers-sets`.
    flag: &'static str,
    sides: Vec<Side>,
    /// The side the others are divided by: theirs, or plain shape (a).
    reference: usize,
}

const PLAIN_A: &str = "(a) INCRBY + PEXPIRE";
const PLAIN_B: &str = "(b) MGET ovr blk + INCRBY + PEXPIREAT NX";
const PLAIN_C: &str = "(c) INCRBY + PEXPIREAT NX";
const PLAIN_D: &str = "(d) our fixed-window script, bare";

/// One contender: makes one request's decisions (as many as the depth)
/// for the subjects given, and says how many were denied. Errors panic:
/// a side that fails is not measured.
type Decide = Arc<dyn Fn(Vec<usize>) -> BoxFuture<'static, u64> + Send + Sync>;

struct Side {
    name: &'static str,
    decide: Decide,
}

/// The subjects a request is made of.
///
/// Uniform: each decision picks a subject at random among `names`.
// The skewed workload (Zipf subjects, a few hot, with automatic slicing on
// and off; `--workload skewed`, another part) plugs in here: its own
// picker, and in `peers()` the sides it compares, driven by the same
// `drive` and measured by the same `Measured`.
#[derive(Clone)]
struct Subjects {
    names: Arc<[String]>,
}

impl Subjects {
    /// `depth` subjects' indices for one request.
    fn pick(&self, depth: usize) -> Vec<usize> {
        let mut rng = rand::rng();
        (0..depth)
            .map(|_| rng.random_range(0..self.names.len()))
            .collect()
    }
}

pub(crate) async fn peers(cluster: &Cluster, args: &Args) {
    let rounds = if args.rounds_given {
        args.rounds
    } else {
        ROUNDS
    };
    let round = Duration::from_secs_f64(if args.round_secs_given {
        args.round_secs
    } else {
        ROUND_SECS
    });
    let topology = cluster.topology().await.expect("topology");
    let shard = &topology.shards[0];
    let addr = format!("{}:{}", shard.master.host, shard.master.port);
    let names: Arc<[String]> = (0u64..)
        .map(|i| format!("pe{i}"))
        .filter(|s| {
            let owned = slot(s.as_bytes());
            shard.slots.iter().any(|r| r.contains(&owned))
        })
        .take(SUBJECTS)
        .collect();
    let subjects = Subjects {
        names: names.clone(),
    };

    let client = redis::Client::open(format!("redis://{addr}")).unwrap();
    // No response timeout: 1,024 decisions in flight on a loaded 2-core box
    // can wait longer than redis-rs' default for their turn.
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    // One for the bare redis-rs sides (the library has one per node), one
    // for INFO and SCRIPT LOAD.
    let raw = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap();
    let mut admin = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap();

    let fixed_window = limiter(cluster, args, Algorithm::FixedWindow, "pe-fw");
    let gcra = limiter(cluster, args, Algorithm::Gcra, "pe-gcra");
    let redis_rate = Script::new("redis_rate_gcra", REDIS_RATE_GCRA);
    let fw_script = fixed_window.invocation("x", 1).unwrap().script;
    // Loaded once, so every bare call is an EVALSHA.
    load_scripts(&mut admin, [&redis_rate, &fw_script]).await;

    let q = quota(args, Algorithm::FixedWindow);
    let limit = i64::from(q.limit().get());
    let period_secs = q.period().as_secs().max(1);
    let keys = cluster.keys().clone();
    let raw_side = |name, commands, build: RawBuild, denied: RawDenied| Side {
        name,
        decide: raw_decide(raw.clone(), names.clone(), commands, build, denied),
    };
    let incr_over_limit = move |replies: &[Value], at: usize| int(&replies[at]) > limit;

    let mut sides = vec![
        lib_side("ours: fixed window", &fixed_window, &names),
        raw_side(
            "envoy: INCRBY + EXPIRE",
            2,
            {
                let (keys, id) = (keys.clone(), key_id("envoy"));
                Box::new(move |subject, pipe| {
                    let (key, _) = window_key(&keys, subject, &id, period_secs);
                    pipe.cmd("INCRBY").arg(&key).arg(1);
                    pipe.cmd("EXPIRE").arg(&key).arg(period_secs);
                })
            },
            Box::new(move |r| incr_over_limit(r, 0)),
        ),
        lib_side("ours: gcra", &gcra, &names),
        raw_side(
            "redis_rate: gcra script",
            1,
            {
                let (keys, id) = (keys.clone(), key_id("redis_rate"));
                let g = quota(args, Algorithm::Gcra);
                let argv: Vec<String> = vec![
                    g.burst().to_string(),
                    g.limit().to_string(),
                    g.period().as_secs_f64().to_string(),
                    "1".to_owned(),
                ];
                Box::new(move |subject, pipe| {
                    let key = keys.key(subject, &id).unwrap();
                    pipe.cmd("EVALSHA")
                        .arg(redis_rate.sha1())
                        .arg(1)
                        .arg(key)
                        .arg(&argv);
                })
            },
            // redis_rate replies the cost (1) when admitted, 0 when not.
            Box::new(|r| int(first(&r[0])) == 0),
        ),
        raw_side(
            PLAIN_A,
            2,
            {
                let (keys, id) = (keys.clone(), key_id("a"));
                let period_ms = period_secs * 1000;
                Box::new(move |subject, pipe| {
                    let (key, _) = window_key(&keys, subject, &id, period_secs);
                    pipe.cmd("INCRBY").arg(&key).arg(1);
                    pipe.cmd("PEXPIRE").arg(&key).arg(period_ms);
                })
            },
            Box::new(move |r| incr_over_limit(r, 0)),
        ),
        raw_side(
            PLAIN_B,
            3,
            {
                let (keys, id) = (keys.clone(), key_id("b"));
                let fixed_window = fixed_window.clone();
                Box::new(move |subject, pipe| {
                    let (key, end_ms) = window_key(&keys, subject, &id, period_secs);
                    // The library's override and block keys of the
                    // subject: absent, in the same slot.
                    let call = fixed_window.invocation(subject, 1).unwrap();
                    let theirs = call.keys.keys();
                    pipe.cmd("MGET").arg(&theirs[1]).arg(&theirs[2]);
                    pipe.cmd("INCRBY").arg(&key).arg(1);
                    pipe.cmd("PEXPIREAT").arg(&key).arg(end_ms).arg("NX");
                })
            },
            Box::new(move |r| incr_over_limit(r, 1)),
        ),
        raw_side(
            PLAIN_C,
            2,
            {
                let (keys, id) = (keys.clone(), key_id("c"));
                Box::new(move |subject, pipe| {
                    let (key, end_ms) = window_key(&keys, subject, &id, period_secs);
                    pipe.cmd("INCRBY").arg(&key).arg(1);
                    pipe.cmd("PEXPIREAT").arg(&key).arg(end_ms).arg("NX");
                })
            },
            Box::new(move |r| incr_over_limit(r, 0)),
        ),
        raw_side(
            PLAIN_D,
            1,
            {
                let fixed_window = fixed_window.clone();
                Box::new(move |subject, pipe| {
                    let call = fixed_window.invocation(subject, 1).unwrap();
                    pipe.cmd("EVALSHA")
                        .arg(call.script.sha1())
                        .arg(call.keys.keys().len())
                        .arg(call.keys.keys())
                        .arg(&call.args);
                })
            },
            // The compact reply's verdict is 3 when admitted (2 * all
            // allowed + allowed); the long reply starts with all_allowed.
            Box::new(|r| !matches!(int(first(&r[0])), 1 | 3)),
        ),
    ];

    // The skewed workload's sets (see `Subjects`) join these.
    let sets: Vec<Set> = [
        Set {
            what: "fixed window vs envoy-style plain commands",
            flag: "fixed-window",
            sides: sides.drain(..2).collect(),
            reference: 1,
        },
        Set {
            what: "GCRA vs redis_rate",
            flag: "gcra",
            sides: sides.drain(..2).collect(),
            reference: 1,
        },
        Set {
            what: "plain shapes",
            flag: "plain",
            sides: std::mem::take(&mut sides),
            reference: 0,
        },
    ]
    .into_iter()
    .filter(|set| args.peers_sets.iter().any(|s| s == set.flag))
    .collect();

    // Every subject once through each of our limiters, so that their
    // settings caches know all of them before anything is measured: the
    // steady state of a service whose subjects were seen before, which is
    // what the peers' shape (no settings to read) is compared with. Left
    // to the rounds, a random pick of 100,000 subjects meets most of them
    // for the first time at depth 1 (coupon collector: ~1.2 million picks
    // to see them all), and each first check reads the settings (the
    // three-key form). After the slots' subscriptions are live: a subject
    // is remembered only then. Twice: a subject is not remembered from a
    // check in flight while a slot's subscription came up (the library
    // keeps nothing learned across such a change), and on a loaded box
    // some come up during the first pass — about one subject in twenty
    // was left to the rounds, each checked in the three-key form.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for limiter in [&fixed_window, &gcra, &fixed_window, &gcra] {
        for chunk in names.chunks(1000) {
            let requests: Vec<(&str, u32)> = chunk.iter().map(|s| (s.as_str(), 1)).collect();
            for d in limiter.check_many(&requests).await {
                let _ = d.unwrap_or_else(|e| panic!("{}: warm-up: {e}", limiter.name()));
            }
        }
    }

    let mut rows: Vec<Row> = Vec::new();
    for depth in DEPTHS {
        // Warm-up: every side once (keys created, scripts cached, the
        // library's connection open).
        for side in sets.iter().flat_map(|s| &s.sides) {
            let warmup = Duration::from_secs_f64(args.warmup_secs / 4.0);
            drive(side, &subjects, depth, warmup).await;
        }
        // The first round starts on a quiet master too (see `settle`).
        let now = master_sample(&mut admin).await;
        let _ = settle(&mut admin, &now).await;
        let mut measured: Vec<Vec<Measured>> = sets
            .iter()
            .map(|s| s.sides.iter().map(|_| Measured::default()).collect())
            .collect();
        for r in 0..rounds {
            for (set, measured) in sets.iter().zip(&mut measured) {
                // A set's sides back to back, so that a ratio within a
                // round compares moments close in time; the order rotated
                // each round, so that no side always follows the same one.
                let n = set.sides.len();
                for k in 0..n {
                    let i = (k + r) % n;
                    let before = commandstats(&mut admin).await;
                    let cpu_before = master_sample(&mut admin).await;
                    let (secs, decisions, denied) =
                        drive(&set.sides[i], &subjects, depth, round).await;
                    let calls = commandstats(&mut admin).await.since(&before);
                    let (quiet, settled) = settle(&mut admin, &cpu_before).await;
                    measured[i].add(
                        secs,
                        decisions,
                        denied,
                        &calls,
                        (&cpu_before, &quiet),
                        settled,
                    );
                }
            }
        }
        for (s, (set, measured)) in sets.iter().zip(measured).enumerate() {
            let reference = measured[set.reference].rates.clone();
            for (side, m) in set.sides.iter().zip(measured) {
                // Per round, this side's rate over the reference's.
                let ratios: Vec<f64> = m.rates.iter().zip(&reference).map(|(a, b)| a / b).collect();
                rows.push(Row {
                    set: s,
                    name: side.name,
                    depth,
                    ratio: median(&ratios),
                    m,
                });
            }
        }
    }

    println!(
        "peers on master {addr}: {CLIENTS} clients, one connection a side, {rounds} rounds of {round:?} per side and depth"
    );
    for (s, set) in sets.iter().enumerate() {
        let reference = set.sides[set.reference].name;
        println!("\n{} (x ref: per round, over {reference})", set.what);
        println!(
            "{:<42} {:>3} {:>9} {:>6} {:>9} {:>9} {:>8} {:>8} {:>8} {:>7} {:>7}",
            "side",
            "P",
            "dec/s",
            "x ref",
            "cmds/dec",
            "evals/dec",
            "us/dec",
            "cpu/dec",
            "expd/dec",
            "settle",
            "denied"
        );
        for row in rows.iter().filter(|r| r.set == s) {
            let m = &row.m;
            println!(
                "{:<42} {:>3} {:>9.0} {:>6.2} {:>9.2} {:>9.2} {:>8.2} {:>8.2} {:>8.2} {:>5}ms {:>7}",
                row.name,
                row.depth,
                m.rate(),
                row.ratio,
                median(&m.commands),
                median(&m.scripts),
                median(&m.usec),
                median(&m.cpu_usec),
                median(&m.expired),
                median(&m.settle_ms).round(),
                m.denied
            );
        }
    }
    let ratio = |name: &str, depth: usize| {
        rows.iter()
            .find(|r| r.name == name && r.depth == depth)
            .map(|r| r.ratio)
            .unwrap()
    };
    println!();
    let mut plain = Vec::new();
    for depth in DEPTHS
        .into_iter()
        .filter(|_| sets.iter().any(|s| s.flag == "plain"))
    {
        let (b, c, d) = (
            ratio(PLAIN_B, depth),
            ratio(PLAIN_C, depth),
            ratio(PLAIN_D, depth),
        );
        println!("plain shapes (depth {depth}): b/a {b:.2}, c/a {c:.2}, d/a {d:.2}");
        plain.push(json!({ "depth": depth, "b_over_a": b, "c_over_a": c, "d_over_a": d }));
    }
    let mut last = Vec::new();
    let mut ratios = Vec::new();
    for set in sets.iter().filter(|s| s.flag != "plain") {
        for depth in DEPTHS {
            // The sets' ours is the side that is not the reference.
            let r = ratio(set.sides[1 - set.reference].name, depth);
            last.push(format!("{} (depth {depth}): {r:.2}", set.what));
            ratios.push(json!({ "comparison": set.what, "depth": depth, "ours_over_theirs": r }));
        }
    }
    write_report(
        "fixed_window",
        "peers",
        &json!({
            "master": addr,
            "clients": CLIENTS,
            "connections_per_side": 1,
            "subjects": SUBJECTS,
            "rounds": rounds,
            "round_secs": round.as_secs_f64(),
            "rows": rows.iter().map(|r| r.json(&sets)).collect::<Vec<_>>(),
            "plain_shapes_over_a": plain,
            "ours_over_theirs": ratios,
        }),
    );
    for line in last {
        println!("{line}");
    }
}

/// A rate limiter of algorithm `a` under the bench's quota (never denies),
/// remembering the subjects that have no override or block (all of them
/// here), as a service that wants this shape's cost would build it: its
/// checks then read the state key alone, as the peers' do (they have no
/// overrides or blocks to read). The first check of each subject reads
/// them, in the pass over every subject before the rounds.
fn limiter(cluster: &Cluster, args: &Args, a: Algorithm, name: &str) -> RateLimiter {
    RateLimiter::builder(cluster, name, quota(args, a))
        .algorithm(a)
        .subject_settings_cache(2 * SUBJECTS as u64)
        .build()
        .unwrap()
}

/// Ours: `check` at depth 1, `check_many` of the request's subjects above.
fn lib_side(name: &'static str, limiter: &RateLimiter, names: &Arc<[String]>) -> Side {
    let (limiter, names) = (limiter.clone(), names.clone());
    let decide: Decide = Arc::new(move |picked: Vec<usize>| {
        let (limiter, names) = (limiter.clone(), names.clone());
        Box::pin(async move {
            let decisions: Vec<LibResult<Decision>> = if let [one] = picked[..] {
                vec![limiter.check(&names[one]).await]
            } else {
                let requests: Vec<(&str, u32)> =
                    picked.iter().map(|&k| (names[k].as_str(), 1)).collect();
                limiter.check_many(&requests).await
            };
            let mut denied = 0;
            for d in decisions {
                let d = d.unwrap_or_else(|e| panic!("{name}: {e}"));
                // Fail-open would hide a failure behind an admission.
                assert!(d.bypassed.is_none(), "{name}: bypassed {:?}", d.bypassed);
                denied += u64::from(!d.allowed);
            }
            denied
        })
    });
    Side { name, decide }
}

/// Adds one decision's commands for a subject to the pipeline.
type RawBuild = Box<dyn Fn(&str, &mut Pipeline) + Send + Sync>;
/// Whether one decision's replies deny it.
type RawDenied = Box<dyn Fn(&[Value]) -> bool + Send + Sync>;

/// A bare redis-rs side: one pipeline per request, `commands` commands
/// per decision, over the one connection given.
fn raw_decide(
    conn: MultiplexedConnection,
    names: Arc<[String]>,
    commands: usize,
    build: RawBuild,
    denied: RawDenied,
) -> Decide {
    let (build, denied) = (Arc::new(build), Arc::new(denied));
    Arc::new(move |picked: Vec<usize>| {
        let mut pipe = redis::pipe();
        for &k in &picked {
            build(&names[k], &mut pipe);
        }
        let (mut conn, denied) = (conn.clone(), denied.clone());
        Box::pin(async move {
            let replies: Vec<Value> = pipe.query_async(&mut conn).await.unwrap();
            if let Some(err) = replies.iter().find_map(|v| match v {
                Value::ServerError(e) => Some(e.clone()),
                _ => None,
            }) {
                panic!("{err:?}");
            }
            replies
                .chunks(commands)
                .map(|one| u64::from(denied(one)))
                .sum()
        })
    })
}

fn key_id(name: &str) -> KeyId {
    KeyId::new("pe", name).unwrap()
}

/// Envoy's key of a subject for the current window, from the client's
/// clock: the subject's key (its hash tag puts it on the measured master)
/// and the window's start in seconds; and the window's end in ms.
fn window_key(keys: &KeyBuilder, subject: &str, id: &KeyId, period_secs: u64) -> (Vec<u8>, u64) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let start = now / period_secs * period_secs;
    let mut key = keys.key(subject, id).unwrap();
    key.extend_from_slice(format!(":{start}").as_bytes());
    (key, (start + period_secs) * 1000)
}

fn first(v: &Value) -> &Value {
    match v {
        Value::Array(items) if !items.is_empty() => &items[0],
        other => panic!("expected an array reply, got {other:?}"),
    }
}

fn int(v: &Value) -> i64 {
    match v {
        Value::Int(n) => *n,
        other => panic!("expected an integer reply, got {other:?}"),
    }
}

/// `CLIENTS` tasks making requests of `depth` decisions of `side` for
/// `time`: the seconds it took, the decisions made and those denied.
async fn drive(side: &Side, subjects: &Subjects, depth: usize, time: Duration) -> (f64, u64, u64) {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let denied = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (decide, stop, done, denied) = (
                side.decide.clone(),
                stop.clone(),
                done.clone(),
                denied.clone(),
            );
            let subjects = subjects.clone();
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let d = decide(subjects.pick(depth)).await;
                    done.fetch_add(depth as u64, Ordering::Relaxed);
                    denied.fetch_add(d, Ordering::Relaxed);
                }
            })
        })
        .collect();
    tokio::time::sleep(time).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.unwrap();
    }
    (
        started.elapsed().as_secs_f64(),
        done.load(Ordering::Relaxed),
        denied.load(Ordering::Relaxed),
    )
}
