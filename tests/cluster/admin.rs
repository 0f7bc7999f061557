//! The admin scanner against the six-node cluster: it finds every primitive
//! exactly once, filters, audits, and resets one subject.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use rand::Rng;
use shardlimit::admin::{LimiterInfo, ScanEvent, Scanner, Usage};
use shardlimit::keys::slot;
use std::time::Duration;

use shardlimit::{Algorithm, Cluster, Counter, LeaseLimiter, Lock, Quota, RateLimiter};

type Id = (String, String, Vec<u8>);

/// The test that counts the SCAN calls a read makes on a master takes this
/// for writing; every other test here, which walks the masters, for
/// reading: no walk of theirs runs while it counts.
static WALKS: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

async fn collect(scanner: &Scanner) -> (Vec<LimiterInfo>, Vec<Vec<u8>>) {
    let mut limiters = Vec::new();
    let mut unrecognized = Vec::new();
    let mut events = Box::pin(scanner.scan());
    while let Some(event) = events.next().await {
        match event {
            ScanEvent::Limiter(info) => limiters.push(info),
            ScanEvent::Unrecognized { key, .. } => unrecognized.push(key),
            ScanEvent::Incomplete { node, error } => panic!("{node} incomplete: {error}"),
            other => panic!("{other:?}"),
        }
    }
    (limiters, unrecognized)
}

/// A handle for the admin tests, with a 2 s command timeout instead of the
/// 250 ms default: these tests write thousands of keys in pipelines in
/// parallel, and on the shared 2-core machine a single call behind such a
/// pipeline has taken over 250 ms (a `Timeout` unwrapped in CI). No test
/// here is about timeouts.
async fn admin_cluster(prefix: &str) -> shardlimit::Cluster {
    common::builder(prefix)
        .command_timeout(std::time::Duration::from_secs(2))
        .build()
        .await
        .expect("the test cluster is not reachable; start it with cluster-compose/up.sh")
}

fn id(info: &LimiterInfo) -> Id {
    (info.kind.clone(), info.name.clone(), info.subject.clone())
}

/// One limiter per algorithm. 10 per hour: a GCRA key lives 6 minutes after
/// one check (it expires when the bucket is full again), longer than any
/// test here.
fn limiters(cluster: &Cluster) -> Vec<RateLimiter> {
    Algorithm::ALL
        .into_iter()
        .map(|a| {
            RateLimiter::builder(
                cluster,
                "api",
                Quota::per_hour(NonZeroU32::new(10).unwrap()),
            )
            .algorithm(a)
            .build()
            .unwrap()
        })
        .collect()
}

/// One primitive of each non-limiter kind, all living an hour.
#[derive(Clone)]
struct Others {
    lock: Lock,
    lease: LeaseLimiter,
    counter: Counter,
}

fn others(cluster: &Cluster) -> Others {
    let hour = Duration::from_secs(3600);
    Others {
        lock: Lock::builder(cluster, "job").ttl(hour).build().unwrap(),
        lease: LeaseLimiter::builder(cluster, "exports")
            .max_leases(NonZeroU32::new(3).unwrap())
            .lease_ttl(hour)
            .build()
            .unwrap(),
        counter: Counter::builder(cluster, "billing")
            .idle_ttl(hour)
            .build()
            .unwrap(),
    }
}

/// Creates `n` primitives of mixed kinds — the four rate limiters, locks,
/// leases and counters — over random subjects (some with braces, percent
/// signs and binary bytes) and returns their ids.
async fn populate(cluster: &Cluster, n: usize) -> BTreeSet<Id> {
    let limiters = Arc::new(limiters(cluster));
    let others = others(cluster);
    let made = Arc::new(Mutex::new(BTreeSet::new()));
    let tasks: Vec<_> = (0..64)
        .map(|task| {
            let (limiters, others, made) = (limiters.clone(), others.clone(), made.clone());
            tokio::spawn(async move {
                for i in (task..n).step_by(64) {
                    let salt: u32 = rand::rng().random();
                    let mut subject = format!("u{i}-{salt}").into_bytes();
                    if i % 10 == 0 {
                        subject.extend_from_slice(b"{%}\xff:x");
                    }
                    let id = match i % 7 {
                        k @ 0..4 => {
                            let limiter = &limiters[k];
                            assert!(limiter.check(&subject).await.unwrap().allowed);
                            (limiter.algorithm().kind(), limiter.name())
                        }
                        4 => {
                            // Dropping the guard keeps the lock until its TTL.
                            drop(others.lock.try_acquire(&subject).await.unwrap().unwrap());
                            ("lock", "job")
                        }
                        5 => {
                            drop(others.lease.try_acquire(&subject).await.unwrap().unwrap());
                            ("lease", "exports")
                        }
                        _ => {
                            others.counter.add(&subject, 1).await.unwrap();
                            ("counter", "billing")
                        }
                    };
                    made.lock()
                        .unwrap()
                        .insert((id.0.to_owned(), id.1.to_owned(), subject));
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    Arc::try_unwrap(made).unwrap().into_inner().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finds_exactly_every_primitive_spread_over_every_master() {
    let _walks = WALKS.read().await;
    let cluster = admin_cluster("scan30k").await;
    let expected = populate(&cluster, 30_000).await;
    assert_eq!(expected.len(), 30_000);

    let progress = Arc::new(Mutex::new(BTreeMap::new()));
    let seen_progress = progress.clone();
    let scanner = Scanner::new(&cluster).on_progress(move |p| {
        seen_progress
            .lock()
            .unwrap()
            .insert(p.node.clone(), (p.scanned, p.dbsize, p.done));
    });
    let (found, unrecognized) = collect(&scanner).await;
    assert!(unrecognized.is_empty());
    assert_eq!(found.len(), 30_000, "each primitive exactly once");
    let ids: BTreeSet<Id> = found.iter().map(id).collect();
    assert_eq!(ids.len(), 30_000, "no duplicates");
    assert_eq!(ids, expected, "none missing, none extra");

    let masters: BTreeSet<String> = common::masters()
        .await
        .into_iter()
        .map(|m| m.addr)
        .collect();
    let nodes: BTreeSet<String> = found.iter().map(|i| i.node.clone()).collect();
    assert_eq!(nodes, masters, "keys spread over every master");
    for info in &found {
        assert_eq!(info.slot, slot(&info.keys[0]));
        assert!(info.ttl.is_some(), "{info:?}");
        match (&*info.kind, &info.usage) {
            ("fw", Usage::FixedWindow { used: 1 })
            | ("slog", Usage::SlidingLog { entries: 1 })
            | (
                "swc",
                Usage::SlidingWindow {
                    current: 1,
                    previous: 0,
                },
            )
            | ("gcra", Usage::Gcra { .. })
            | ("lease", Usage::Lease { leases_held: 1 })
            | ("counter", Usage::Counter { value: 1 })
            | (
                "lock",
                Usage::Lock {
                    held: true,
                    fencing_token: Some(_),
                },
            ) => {}
            other => panic!("unexpected state {other:?}"),
        }
    }
    let progress = progress.lock().unwrap().clone();
    assert_eq!(progress.len(), 3);
    // Every key: a lock is two (token and fence).
    let locks = expected.iter().filter(|(k, _, _)| k == "lock").count();
    let scanned: u64 = progress.values().map(|p| p.0).sum();
    assert_eq!(scanned, u64::try_from(30_000 + locks).unwrap());
    assert!(
        progress
            .values()
            .all(|&(s, dbsize, done)| done && s <= dbsize)
    );

    let counts = Scanner::new(&cluster).count_limiters().await.unwrap();
    assert_eq!(counts.total(), 30_000);
    assert!(counts.incomplete.is_empty());
    for kind in ["fw", "slog", "swc", "gcra", "lock", "lease", "counter"] {
        let per_kind: u64 = counts
            .counts
            .iter()
            .filter(|((_, k, _), _)| k == kind)
            .map(|(_, n)| n)
            .sum();
        let expected = expected.iter().filter(|(k, _, _)| k == kind).count();
        assert_eq!(per_kind, u64::try_from(expected).unwrap(), "{kind}");
    }
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn filters_return_exactly_the_matching_primitives() {
    let _walks = WALKS.read().await;
    let cluster = admin_cluster("filters").await;
    let all = limiters(&cluster);
    let other = RateLimiter::builder(
        &cluster,
        "other",
        Quota::per_hour(NonZeroU32::new(5).unwrap()),
    )
    .build()
    .unwrap();
    for subject in ["user:1", "user:2", "team:1", "user:10"] {
        for l in all.iter().chain([&other]) {
            let _ = l.check(subject).await.unwrap();
        }
    }
    let names = |found: Vec<LimiterInfo>| -> BTreeSet<(String, String, String)> {
        found
            .into_iter()
            .map(|i| (i.kind.clone(), i.name.clone(), i.subject_lossy()))
            .collect()
    };
    let (by_kind, _) = collect(&Scanner::new(&cluster).kind("gcra")).await;
    assert_eq!(by_kind.len(), 8);
    assert!(by_kind.iter().all(|i| i.kind == "gcra"));
    let (by_name, _) = collect(&Scanner::new(&cluster).name("other")).await;
    assert_eq!(
        names(by_name),
        ["user:1", "user:2", "team:1", "user:10"]
            .into_iter()
            .map(|s| ("gcra".into(), "other".into(), s.into()))
            .collect()
    );
    let (by_glob, _) = collect(&Scanner::new(&cluster).subject_glob("user:?")).await;
    assert_eq!(by_glob.len(), 10);
    assert!(
        by_glob
            .iter()
            .all(|i| i.subject == b"user:1" || i.subject == b"user:2")
    );
    let (combined, _) = collect(
        &Scanner::new(&cluster)
            .kind("fw")
            .name("api")
            .subject_glob("*1*"),
    )
    .await;
    assert_eq!(
        names(combined),
        ["user:1", "team:1", "user:10"]
            .into_iter()
            .map(|s| ("fw".into(), "api".into(), s.into()))
            .collect()
    );
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn audit_flags_immortal_and_unrecognised_keys() {
    let _walks = WALKS.read().await;
    let cluster = admin_cluster("audit").await;
    for l in limiters(&cluster) {
        let _ = l.check("fine").await.unwrap();
    }
    let scanner = Scanner::new(&cluster);
    let clean = scanner.audit().await.unwrap();
    assert!(clean.is_clean(), "{clean:?}");
    assert_eq!(clean.scanned, 4);

    let ns = cluster.namespace().to_owned();
    let immortal = format!("{ns}:{{leaky}}:counter:billing").into_bytes();
    let garbage = format!("{ns}:no-hash-tag-here").into_bytes();
    let _: () = common::on_owner(&immortal, redis::cmd("SET").arg(&immortal).arg(42)).await;
    let _: () = common::on_owner(
        &garbage,
        redis::cmd("SET")
            .arg(&garbage)
            .arg("x")
            .arg("PX")
            .arg(600_000),
    )
    .await;

    let report = scanner.audit().await.unwrap();
    assert!(!report.is_clean());
    assert_eq!(report.immortal.len(), 1);
    assert_eq!(report.immortal[0].0, immortal);
    assert_eq!(report.unrecognized.len(), 1);
    assert_eq!(report.unrecognized[0].0, garbage);
    assert_eq!(report.scanned, 6);

    // The listing reports the stranger too, and the immortal key's missing TTL.
    let (found, unrecognized) = collect(&scanner).await;
    assert_eq!(unrecognized, vec![garbage.clone()]);
    let leaky = found.iter().find(|i| i.subject == b"leaky").unwrap();
    assert_eq!(leaky.ttl, None);
    assert_eq!(leaky.usage, Usage::Counter { value: 42 });

    for key in [&immortal, &garbage] {
        let _: i64 = common::on_owner(key, redis::cmd("DEL").arg(key)).await;
    }
    assert!(scanner.audit().await.unwrap().is_clean());
}

/// A key named like one of ours but of another Redis type, without a TTL,
/// is not shardlimit's — as the listing and `shardlimit list` say — not
/// one of ours that lost its TTL (which a TTL given from the Limits page
/// would "fix").
#[tokio::test]
async fn audit_says_a_wrong_type_key_without_a_ttl_is_not_shardlimits() {
    let _walks = WALKS.read().await;
    let cluster = admin_cluster("audit-type").await;
    let ns = cluster.namespace().to_owned();
    let stranger = format!("{ns}:{{wrong}}:counter:billing").into_bytes();
    let leaky = format!("{ns}:{{leaky}}:counter:billing").into_bytes();
    let _: i64 = common::on_owner(&stranger, redis::cmd("RPUSH").arg(&stranger).arg("x")).await;
    let _: () = common::on_owner(&leaky, redis::cmd("SET").arg(&leaky).arg(7)).await;
    let report = Scanner::new(&cluster).audit().await.unwrap();
    let keys = |list: &[(Vec<u8>, String)]| list.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
    assert_eq!(keys(&report.immortal), vec![leaky.clone()], "{report:?}");
    assert_eq!(
        keys(&report.unrecognized),
        vec![stranger.clone()],
        "{report:?}"
    );
    for key in [&stranger, &leaky] {
        let _: i64 = common::on_owner(key, redis::cmd("DEL").arg(key)).await;
    }
}

#[tokio::test]
async fn reset_removes_exactly_one_subjects_keys() {
    let _walks = WALKS.read().await;
    let cluster = admin_cluster("adminreset").await;
    let all = limiters(&cluster);
    // A second subject in the same slot, to prove the reset looks at
    // subjects, not slots.
    let target = "victim";
    let neighbour = (0..)
        .map(|i| format!("neighbour-{i}"))
        .find(|s| slot(s.as_bytes()) == slot(target.as_bytes()))
        .unwrap();
    for l in &all {
        for s in [target, neighbour.as_str(), "elsewhere"] {
            let _ = l.check(s).await.unwrap();
        }
    }
    let scanner = Scanner::new(&cluster);
    assert_eq!(scanner.reset(target, Some("fw"), None).await.unwrap(), 1);
    assert_eq!(scanner.reset(target, None, Some("api")).await.unwrap(), 3);
    assert_eq!(scanner.reset(target, None, None).await.unwrap(), 0);
    let (found, _) = collect(&scanner).await;
    let subjects: BTreeMap<String, usize> = found.iter().fold(BTreeMap::new(), |mut m, i| {
        *m.entry(i.subject_lossy()).or_default() += 1;
        m
    });
    assert_eq!(
        subjects,
        [(neighbour.clone(), 4), ("elsewhere".to_owned(), 4)]
            .into_iter()
            .collect()
    );
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn a_wrong_type_key_is_reported_unrecognised_and_the_walk_goes_on() {
    let _walks = WALKS.read().await;
    let cluster = admin_cluster("wrongtype").await;
    let expected = populate(&cluster, 70).await;
    // Keys shaped like ours whose type the state reads cannot read: GET on
    // a list (fixed window), ZCARD on a string (lease), HMGET on a set
    // (sliding window counter).
    let ns = cluster.namespace().to_owned();
    let planted: Vec<(Vec<u8>, redis::Cmd)> = [
        ("{planted-1}:fw:api", "RPUSH"),
        ("{planted-2}:lease:exports", "SET"),
        ("{planted-3}:swc:api", "SADD"),
    ]
    .into_iter()
    .map(|(rest, write)| {
        let key = format!("{ns}:{rest}").into_bytes();
        let mut cmd = redis::cmd(write);
        cmd.arg(&key).arg("x");
        (key, cmd)
    })
    .collect();
    for (key, cmd) in &planted {
        let _: redis::Value = common::on_owner(key, &mut cmd.clone()).await;
        let _: i64 = common::on_owner(key, redis::cmd("PEXPIRE").arg(key).arg(600_000)).await;
    }

    let scanner = Scanner::new(&cluster);
    let (found, mut unrecognized) = collect(&scanner).await;
    let found: BTreeSet<Id> = found.iter().map(id).collect();
    assert_eq!(found, expected);
    unrecognized.sort();
    let mut keys: Vec<Vec<u8>> = planted.iter().map(|(k, _)| k.clone()).collect();
    keys.sort();
    assert_eq!(unrecognized, keys);

    // `show` of such a subject answers too (without the stranger).
    assert!(scanner.subject("planted-1").await.unwrap().is_empty());
}

#[tokio::test]
async fn show_and_reset_page_through_a_slot_with_many_keys() {
    let _walks = WALKS.write().await;
    let cluster = admin_cluster("slotpage").await;
    let all = limiters(&cluster);
    let target = "crowded";
    // Seven neighbours in the target's slot: 32 keys there, listed 5 at a
    // time.
    let neighbours: Vec<String> = (0..)
        .map(|i| format!("n-{i}"))
        .filter(|s| slot(s.as_bytes()) == slot(target.as_bytes()))
        .take(7)
        .collect();
    for l in &all {
        for s in neighbours.iter().map(String::as_str).chain([target]) {
            let _ = l.check(s).await.unwrap();
        }
    }
    let scanner = Scanner::new(&cluster).count(5);
    // The slot is read, not its master scanned, even with more keys in the
    // slot than a SCAN call's count (it scanned the whole master before):
    // no SCAN on the owner while the subject is read. The other tests of
    // this module wait (WALKS); an attempt that saw a SCAN from elsewhere
    // (another module's walk) is retried.
    let owner = common::owner(slot(target.as_bytes())).await;
    let scans = async || -> u64 {
        let info = common::cmd(&owner.addr, &["INFO", "commandstats"]).await;
        let info: String = redis::from_redis_value(info).unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("cmdstat_scan:calls="))
            .and_then(|rest| rest.split(',').next())
            .map_or(0, |n| n.parse().unwrap())
    };
    let mut scanned = Vec::new();
    for _ in 0..5 {
        let before = scans().await;
        let shown = scanner.subject(target).await.unwrap();
        assert_eq!(shown.len(), 4);
        scanned.push(scans().await - before);
        if scanned.last() == Some(&0) {
            break;
        }
    }
    assert_eq!(scanned.last(), Some(&0), "SCAN calls per read: {scanned:?}");
    let shown = scanner.subject(target).await.unwrap();
    assert_eq!(shown.len(), 4);
    assert!(shown.iter().all(|i| i.subject == target.as_bytes()));
    assert_eq!(scanner.reset(target, None, None).await.unwrap(), 4);
    assert!(scanner.subject(target).await.unwrap().is_empty());
    assert_eq!(scanner.subject(&neighbours[0]).await.unwrap().len(), 4);
}

/// A slot of more than the 1,000 keys read at first is counted, then read
/// whole: the subject's primitives are found among 1,500 strangers.
#[tokio::test]
async fn show_reads_a_slot_of_over_a_thousand_keys_whole() {
    let _walks = WALKS.read().await;
    let cluster = admin_cluster("bigslot").await;
    let all = limiters(&cluster);
    let target = "bigslot-subject";
    for l in &all {
        let _ = l.check(target).await.unwrap();
    }
    // Strangers of the same slot (the subject's hash tag), in one pipeline.
    let strangers: Vec<String> = (0..1500)
        .map(|i| format!("stranger:{{{target}}}:{i}"))
        .collect();
    let mut conn = common::owner_conn(strangers[0].as_bytes()).await;
    let mut pipe = redis::pipe();
    for key in &strangers {
        pipe.cmd("SET")
            .arg(key)
            .arg(1)
            .arg("PX")
            .arg(120_000)
            .ignore();
    }
    let _: () = pipe.query_async(&mut conn).await.unwrap();
    let shown = Scanner::new(&cluster).subject(target).await.unwrap();
    assert_eq!(shown.len(), all.len(), "{shown:?}");
    assert!(shown.iter().all(|i| i.subject == target.as_bytes()));
    let mut pipe = redis::pipe();
    for key in &strangers {
        pipe.cmd("DEL").arg(key).ignore();
    }
    let _: () = pipe.query_async(&mut conn).await.unwrap();
}

#[tokio::test]
async fn reset_refuses_what_is_in_use_unless_forced_and_plans_exactly_its_keys() {
    let _walks = WALKS.read().await;
    let cluster = admin_cluster("adminreset-safe").await;
    let o = others(&cluster);
    let guard = o.lock.try_acquire("busy").await.unwrap().unwrap();
    let lease = o.lease.try_acquire("busy").await.unwrap().unwrap();
    o.counter.add("busy", 7).await.unwrap();
    let scanner = Scanner::new(&cluster);

    let plan = scanner.plan_reset("busy", None, None).await.unwrap();
    let ns = cluster.namespace();
    let expected: Vec<Vec<u8>> = [
        "counter:billing",
        "lease:exports",
        "lock:job",
        "lock:job:fence",
    ]
    .iter()
    .map(|rest| format!("{ns}:{{busy}}:{rest}").into_bytes())
    .collect();
    assert_eq!(plan.keys(), expected);
    let reasons: Vec<String> = plan.in_use().iter().map(ToString::to_string).collect();
    assert_eq!(
        reasons,
        [
            "counter billing holds 7 (not drained)",
            "lease exports has 1 lease(s) held",
            "lock job is held",
        ]
    );
    match scanner.reset("busy", None, None).await {
        Err(shardlimit::Error::ResetRefused { in_use }) => assert_eq!(in_use, reasons),
        other => panic!("{other:?}"),
    }
    assert_eq!(common::keys_with_pttl(ns).await.len(), 4);
    assert!(guard.is_held());

    // Released and drained: nothing in the way (the free lock's fence and
    // the drained counter remain).
    assert!(guard.release().await.unwrap());
    assert!(lease.release().await.unwrap());
    assert_eq!(o.counter.drain("busy").await.unwrap(), Some(7));
    assert!(
        scanner
            .plan_reset("busy", None, None)
            .await
            .unwrap()
            .in_use()
            .is_empty()
    );
    assert_eq!(scanner.reset("busy", None, None).await.unwrap(), 2);

    // Forced: deleted while in use.
    let _guard = o.lock.try_acquire("busy").await.unwrap().unwrap();
    let plan = scanner
        .plan_reset("busy", Some("lock"), None)
        .await
        .unwrap();
    assert_eq!(plan.in_use().len(), 1);
    assert_eq!(plan.execute(&scanner, true).await.unwrap(), 2);
    assert!(common::keys_with_pttl(ns).await.is_empty());
}

/// A rate limiter's override and block are shown with its entry — also for a
/// subject that has no state yet — never as primitives of their own, and
/// never counted beside the limiter.
#[tokio::test]
async fn overrides_and_blocks_show_with_their_limiter_and_are_not_counted() {
    let _walks = WALKS.read().await;
    let cluster = admin_cluster("admin-settings").await;
    let ns = cluster.namespace().to_owned();
    let (day, block) = (Duration::from_secs(86_400), Duration::from_secs(600));
    let five = Quota::per_hour(NonZeroU32::new(5).unwrap());
    for limiter in limiters(&cluster) {
        assert!(limiter.check("both").await.unwrap().allowed);
        limiter.set_override("both", five, day).await.unwrap();
        limiter.block("both", block).await.unwrap();
        limiter
            .set_override("override-only", five, day)
            .await
            .unwrap();
        limiter.block("block-only", block).await.unwrap();
    }
    assert_eq!(common::keys_with_pttl(&ns).await.len(), 4 * (3 + 1 + 1));

    let (found, unrecognized) = collect(&Scanner::new(&cluster)).await;
    assert!(unrecognized.is_empty(), "{unrecognized:?}");
    assert_eq!(found.len(), 4 * 3, "one entry per limiter and subject");
    let near = |d: Option<Duration>, full: Duration| {
        d.is_some_and(|d| d <= full && d > full - Duration::from_secs(60))
    };
    for info in &found {
        let (s, what) = (&info.settings, format!("{info:?}"));
        let state = info.keys[0].clone();
        match info.subject_lossy().as_str() {
            "both" => {
                assert!(!matches!(info.usage, Usage::Unused), "{what}");
                assert_eq!(s.override_quota, Some(five), "{what}");
                assert!(
                    near(s.override_ttl, day) && near(s.blocked_for, block),
                    "{what}"
                );
                let mut parts = state.clone();
                parts.extend_from_slice(b":quota");
                assert_eq!(info.keys[1], parts, "{what}");
                assert_eq!(info.keys.len(), 3, "{what}");
            }
            "override-only" => {
                assert_eq!(info.usage, Usage::Unused, "{what}");
                assert_eq!(s.override_quota, Some(five), "{what}");
                assert!(near(s.override_ttl, day) && near(info.ttl, day), "{what}");
                assert_eq!(s.blocked_for, None, "{what}");
                assert!(state.ends_with(b":quota") && info.keys.len() == 1, "{what}");
            }
            "block-only" => {
                assert_eq!(info.usage, Usage::Unused, "{what}");
                assert_eq!((s.override_quota, s.override_ttl), (None, None), "{what}");
                assert!(
                    near(s.blocked_for, block) && near(info.ttl, block),
                    "{what}"
                );
                assert!(state.ends_with(b":block") && info.keys.len() == 1, "{what}");
            }
            other => panic!("unexpected subject {other}"),
        }
    }

    let counts = Scanner::new(&cluster).count_limiters().await.unwrap();
    assert_eq!(counts.total(), 12, "{counts:?}");
    assert_eq!(counts.unrecognized, 0);
    assert!(Scanner::new(&cluster).audit().await.unwrap().is_clean());
    let shown = Scanner::new(&cluster).subject("both").await.unwrap();
    assert_eq!(shown.len(), 4);
    assert!(
        shown
            .iter()
            .all(|i| i.settings.override_quota == Some(five))
    );
    let (gcra, _) = collect(&Scanner::new(&cluster).kind("gcra")).await;
    assert_eq!(gcra.len(), 3);

    // An override the check script would refuse is flagged; the limiter
    // still shows, without it.
    let junk = format!("{ns}:{{both}}:fw:api:quota").into_bytes();
    let _: () = common::on_owner(
        &junk,
        redis::cmd("SET").arg(&junk).arg("lots").arg("EX").arg(60),
    )
    .await;
    // So is one of another type (its GET answers WRONGTYPE), for a subject
    // with no state: nothing else to show.
    let hash = format!("{ns}:{{hashed}}:fw:api:quota").into_bytes();
    let _: () = common::on_owner(&hash, redis::cmd("HSET").arg(&hash).arg("f").arg(1)).await;
    let _: () = common::on_owner(&hash, redis::cmd("EXPIRE").arg(&hash).arg(60)).await;
    let (found, mut unrecognized) = collect(&Scanner::new(&cluster).kind("fw")).await;
    unrecognized.sort();
    let mut expected = vec![junk, hash];
    expected.sort();
    assert_eq!(unrecognized, expected);
    assert_eq!(found.len(), 3, "{found:?}");
    let fw = found.iter().find(|i| i.subject == b"both").unwrap();
    assert_eq!(fw.settings.override_quota, None);
    assert!(fw.settings.blocked_for.is_some());
    common::assert_every_key_has_ttl(&ns).await;

    // A reset would delete a paid override and lift a block: refused
    // without force, saying so (it deleted them silently before), nothing
    // deleted; forced, gone.
    let scanner = Scanner::new(&cluster);
    for subject in ["override-only", "block-only"] {
        let refused = scanner.reset(subject, Some("gcra"), None).await;
        let Err(shardlimit::Error::ResetRefused { in_use }) = refused else {
            panic!("{subject}: {refused:?}");
        };
        let said = in_use.join("; ");
        let expected = if subject == "override-only" {
            "gcra api has an override of 5 per 3600s"
        } else {
            "gcra api is blocked for"
        };
        assert!(said.contains(expected), "{subject}: {said}");
        assert_eq!(
            scanner.subject(subject).await.unwrap().len(),
            4,
            "{subject}"
        );
        let plan = scanner
            .plan_reset(subject, Some("gcra"), None)
            .await
            .unwrap();
        assert_eq!(plan.execute(&scanner, true).await.unwrap(), 1, "{subject}");
        assert_eq!(
            scanner.subject(subject).await.unwrap().len(),
            3,
            "{subject}"
        );
    }
}
