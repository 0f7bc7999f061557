//! The test bodies of the behaviour suite, each taking the deployment.

use std::collections::BTreeSet;
use std::num::NonZeroU32;
use std::time::Duration;

use futures::StreamExt;
use shardlimit::admin::{ScanEvent, Scanner};
use shardlimit::{
    Algorithm, Cluster, Counter, Error, LeaseLimiter, Lock, MultiLimiter, Quota, RateLimiter,
};

use super::Setup;
use crate::batches;

/// Every kind [`one_of_each`] makes.
const KINDS: [&str; 7] = ["fw", "slog", "swc", "gcra", "lock", "lease", "counter"];

/// The master that serves `subject`'s slot, as `host:port`.
async fn owner_of(cluster: &Cluster, subject: &str) -> shardlimit::cluster::NodeAddr {
    let slot = shardlimit::keys::slot(format!("x:{{{subject}}}:y").as_bytes());
    let topology = cluster.topology().await.unwrap();
    topology.owner(slot).unwrap().master.clone()
}

pub async fn topology_covers_every_slot(setup: Setup) {
    let cluster = setup.connect("be-topo").await;
    let topology = cluster.topology().await.unwrap();
    assert_eq!(topology.shards.len(), setup.masters(), "{topology:?}");
    assert_eq!(topology.covered_slots(), 16384);
    for shard in &topology.shards {
        assert_eq!(shard.replicas.len(), setup.replicas(), "{topology:?}");
    }
}

/// A script no server has cached, over many subjects (every master),
/// twice: every result in input order, every call run once.
pub async fn eval_many_runs_every_call_once_in_order(setup: Setup) {
    let cluster = setup.connect("be-batch").await;
    let script = batches::uncached(&cluster);
    batches::twice_in_order(&cluster, &script, 40).await;
    setup.assert_every_key_has_ttl(&cluster).await;
}

pub async fn every_algorithm_checks_denies_peeks_and_resets(setup: Setup) {
    let cluster = setup.connect("be-algo").await;
    let quota = Quota::per_hour(NonZeroU32::new(3).unwrap());
    for algorithm in Algorithm::ALL {
        let limiter = RateLimiter::builder(&cluster, "api", quota)
            .algorithm(algorithm)
            .build()
            .unwrap();
        for subject in ["user:1", "weird{sub}ject%"] {
            for _ in 0..3 {
                assert!(
                    limiter.check(subject).await.unwrap().allowed,
                    "{algorithm:?}"
                );
            }
            let denied = limiter.check(subject).await.unwrap();
            assert!(!denied.allowed, "{algorithm:?}");
            assert!(denied.retry_after.is_some());
            assert!(!limiter.peek(subject).await.unwrap().allowed);
            limiter.reset(subject).await.unwrap();
            let peeked = limiter.peek(subject).await.unwrap();
            assert!(peeked.allowed, "{algorithm:?} after reset");
            assert_eq!(peeked.remaining, 3, "{algorithm:?}: peek spends nothing");
            assert!(limiter.check(subject).await.unwrap().allowed);
        }
    }
    setup.assert_every_key_has_ttl(&cluster).await;
}

pub async fn multi_limit_binds_on_the_tightest(setup: Setup) {
    let cluster = setup.connect("be-multi").await;
    let per_second = RateLimiter::builder(
        &cluster,
        "burst",
        Quota::per_second(NonZeroU32::new(5).unwrap()),
    )
    .build()
    .unwrap();
    let per_hour = RateLimiter::builder(
        &cluster,
        "hourly",
        Quota::per_hour(NonZeroU32::new(2).unwrap()),
    )
    .build()
    .unwrap();
    let multi = MultiLimiter::new([per_second, per_hour]).unwrap();
    assert!(multi.check("user:9").await.unwrap().allowed);
    assert!(multi.check("user:9").await.unwrap().allowed);
    let third = multi.check("user:9").await.unwrap();
    assert!(!third.allowed, "3rd of 2/h");
    assert_eq!(third.binding().limit, 2);
    setup.assert_every_key_has_ttl(&cluster).await;
}

/// One holder, growing fencing tokens; where there are replicas, taken
/// with `replica_ack`, so the lock's replica holds its keys.
pub async fn lock_is_held_once_and_fenced(setup: Setup) {
    let cluster = setup.connect("be-lock").await;
    let mut builder = Lock::builder(&cluster, "job").ttl(Duration::from_secs(30));
    if let Some(wait) = setup.replica_ack() {
        builder = builder.replica_ack(wait);
    }
    let lock = builder.build().unwrap();
    let first = lock.try_acquire("export").await.unwrap().unwrap();
    assert!(first.is_held());
    assert!(lock.try_acquire("export").await.unwrap().is_none());
    let token = first.fencing_token();
    assert!(first.remaining_ttl().await.unwrap().is_some());
    assert!(first.release().await.unwrap());
    let second = lock.try_acquire("export").await.unwrap().unwrap();
    assert!(second.fencing_token() > token, "fencing tokens grow");
    if setup.replica_ack().is_some() {
        // WAIT confirmed it: the replica of the lock's master has its keys.
        let master = owner_of(&cluster, "export").await;
        let topology = cluster.topology().await.unwrap();
        let shard = topology.shards.iter().find(|s| s.master == master).unwrap();
        let replica = shard.replicas[0].to_string();
        let keys = setup.keys_on(&replica, cluster.namespace()).await;
        assert!(!keys.is_empty(), "the replica holds the lock's keys");
    }
    assert!(second.release().await.unwrap());
    setup.assert_every_key_has_ttl(&cluster).await;
}

pub async fn lease_caps_leases_held(setup: Setup) {
    let cluster = setup.connect("be-lease").await;
    let lease = LeaseLimiter::builder(&cluster, "exports")
        .max_leases(NonZeroU32::new(2).unwrap())
        .lease_ttl(Duration::from_secs(30))
        .build()
        .unwrap();
    let a = lease.try_acquire("tenant").await.unwrap().unwrap();
    let b = lease.try_acquire("tenant").await.unwrap().unwrap();
    assert!(lease.try_acquire("tenant").await.unwrap().is_none());
    assert!(a.release().await.unwrap());
    let c = lease.try_acquire("tenant").await.unwrap().unwrap();
    setup.assert_every_key_has_ttl(&cluster).await;
    assert!(b.release().await.unwrap());
    assert!(c.release().await.unwrap());
}

pub async fn counter_add_and_drain_keep_the_ttl(setup: Setup) {
    let cluster = setup.connect("be-counter").await;
    let counter = Counter::builder(&cluster, "billing")
        .idle_ttl(Duration::from_secs(900))
        .build()
        .unwrap();
    assert_eq!(counter.add("session:9", 30).await.unwrap(), 30);
    assert_eq!(counter.add("session:9", 12).await.unwrap(), 42);
    let (value, ttl) = counter.get_with_ttl("session:9").await.unwrap().unwrap();
    assert_eq!(value, 42);
    assert!(ttl > Duration::from_secs(890));
    assert_eq!(counter.drain("session:9").await.unwrap(), Some(42));
    let (value, ttl) = counter.get_with_ttl("session:9").await.unwrap().unwrap();
    assert_eq!(value, 0);
    assert!(ttl > Duration::from_secs(890), "drain keeps the TTL");
    setup.assert_every_key_has_ttl(&cluster).await;
}

/// One of every primitive under `cluster`'s namespace, for the scanner and
/// the CLI: seven, all of subject `user:1`.
async fn one_of_each(cluster: &Cluster) -> (shardlimit::lock::LockGuard, shardlimit::lease::Lease) {
    let quota = Quota::per_hour(NonZeroU32::new(10).unwrap());
    for algorithm in Algorithm::ALL {
        let l = RateLimiter::builder(cluster, "api", quota)
            .algorithm(algorithm)
            .build()
            .unwrap();
        assert!(l.check("user:1").await.unwrap().allowed);
    }
    let hour = Duration::from_secs(3600);
    let guard = Lock::builder(cluster, "job")
        .ttl(hour)
        .build()
        .unwrap()
        .try_acquire("user:1")
        .await
        .unwrap()
        .unwrap();
    let lease = LeaseLimiter::builder(cluster, "exports")
        .lease_ttl(hour)
        .build()
        .unwrap()
        .try_acquire("user:1")
        .await
        .unwrap()
        .unwrap();
    Counter::builder(cluster, "billing")
        .build()
        .unwrap()
        .add("user:1", 5)
        .await
        .unwrap();
    (guard, lease)
}

pub async fn scanner_lists_counts_audits_and_resets(setup: Setup) {
    let cluster = setup.connect("be-scan").await;
    let (guard, lease) = one_of_each(&cluster).await;
    let scanner = Scanner::new(&cluster);

    let owner = owner_of(&cluster, "user:1").await.to_string();
    let found = scanner.subject("user:1").await.unwrap();
    assert_eq!(found.len(), KINDS.len(), "{found:?}");
    let kinds: BTreeSet<String> = found
        .into_iter()
        .map(|info| {
            assert!(info.ttl.is_some(), "{} has a TTL", info.subject_lossy());
            assert_eq!(info.node, owner);
            info.kind
        })
        .collect();
    for kind in KINDS {
        assert!(kinds.contains(kind), "subject() misses {kind}: {kinds:?}");
    }

    // A name's limiters over subjects on every master, by a scan.
    let spread = RateLimiter::builder(
        &cluster,
        "spread",
        Quota::per_hour(NonZeroU32::new(2).unwrap()),
    )
    .build()
    .unwrap();
    for i in 0..30 {
        assert!(spread.check(&format!("user:{i}")).await.unwrap().allowed);
    }
    let mut events = Box::pin(Scanner::new(&cluster).name("spread").scan());
    let mut spread_found = 0;
    while let Some(event) = events.next().await {
        match event {
            ScanEvent::Limiter(_) => spread_found += 1,
            ScanEvent::Incomplete { node, error } => panic!("{node}: {error}"),
            _ => {}
        }
    }
    assert_eq!(spread_found, 30);

    let counts = scanner.count_limiters().await.unwrap();
    assert!(counts.incomplete.is_empty(), "{:?}", counts.incomplete);
    for kind in KINDS {
        assert!(
            counts.counts.keys().any(|(_, k, _)| k == kind),
            "count misses {kind}: {:?}",
            counts.counts
        );
    }

    let audit = scanner.audit().await.unwrap();
    assert!(audit.is_clean(), "{audit:?}");
    assert!(audit.scanned >= 8, "{audit:?}");
    setup.assert_every_key_has_ttl(&cluster).await;

    // reset refuses what is in use, then deletes it when forced.
    assert!(matches!(
        scanner.reset("user:1", None, None).await,
        Err(Error::ResetRefused { .. })
    ));
    drop((guard, lease));
    let plan = scanner.plan_reset("user:1", None, None).await.unwrap();
    assert!(plan.execute(&scanner, true).await.unwrap() > 0);
    assert!(scanner.subject("user:1").await.unwrap().is_empty());
}

/// Every master answers, with AOF on (as up.sh starts them all) and its
/// replicas connected; fit for locks exactly when there are replicas.
pub async fn health_reports_every_master(setup: Setup) {
    let cluster = setup.connect("be-health").await;
    let health = cluster.health().await.unwrap();
    assert_eq!(health.covered_slots, 16384);
    assert_eq!(health.masters.len(), setup.masters());
    for master in &health.masters {
        let status = master.status.as_ref().unwrap();
        assert_eq!(status.role, "master");
        assert!(status.cluster_state_ok);
        assert!(status.aof_enabled, "up.sh turns AOF on");
        assert_eq!(
            usize::try_from(status.connected_replicas).unwrap(),
            setup.replicas(),
            "{health:?}"
        );
    }
    // Without a replica locks are at risk, and health says so.
    assert_eq!(
        health.fit_for_locks(),
        setup.replicas() > 0,
        "{:?}",
        health.lock_problems()
    );
}

/// Waits until `limiter` answers `subject` from its deny cache.
#[cfg(feature = "deny-cache")]
async fn until_cached(limiter: &RateLimiter, subject: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !limiter.check(subject).await.unwrap().cached {
        assert!(
            std::time::Instant::now() < deadline,
            "no denial was ever cached"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The deny cache's subscription and a reset's publication: a denial
/// cached here is lifted by a reset here at once, and by a reset through
/// another handle (its own connections, as another process has) soon.
#[cfg(feature = "deny-cache")]
pub async fn a_reset_lifts_a_cached_denial_here_and_through_another_handle(setup: Setup) {
    let here = setup.connect("be-lift").await;
    let there = setup.builder_in(here.namespace()).build().await.unwrap();
    let quota = Quota::per_hour(NonZeroU32::MIN);
    let cached = RateLimiter::builder(&here, "lift", quota)
        .deny_cache(100)
        .build()
        .unwrap();
    let other = RateLimiter::builder(&there, "lift", quota).build().unwrap();

    assert!(cached.check("s").await.unwrap().allowed);
    until_cached(&cached, "s").await;
    cached.reset("s").await.unwrap();
    assert!(cached.check("s").await.unwrap().allowed);

    until_cached(&cached, "s").await;
    other.reset("s").await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let d = cached.check("s").await.unwrap();
        if d.allowed {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still denied 5 s after the reset: {d:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[cfg(feature = "deny-cache")]
pub async fn a_block_denies_and_a_reward_gives_back(setup: Setup) {
    let cluster = setup.connect("be-block").await;
    let limiter = RateLimiter::builder(
        &cluster,
        "blocked",
        Quota::per_hour(NonZeroU32::new(2).unwrap()),
    )
    .deny_cache(100)
    .build()
    .unwrap();
    limiter
        .block("user:1", Duration::from_secs(5))
        .await
        .unwrap();
    let d = limiter.check("user:1").await.unwrap();
    assert!(!d.allowed && d.blocked, "{d:?}");
    limiter.unblock("user:1").await.unwrap();
    assert!(limiter.check("user:1").await.unwrap().allowed);
    assert_eq!(limiter.peek("user:1").await.unwrap().remaining, 1);
    setup.assert_every_key_has_ttl(&cluster).await;
    // A full GCRA bucket has no key: the reward refills it.
    limiter.reward("user:1", NonZeroU32::MIN).await.unwrap();
    assert_eq!(limiter.peek("user:1").await.unwrap().remaining, 2);
}

/// The CLI reaches the deployment with its flags alone: `list` and `show`
/// print what one of each primitive wrote, `health` covers every slot.
pub async fn cli_lists_shows_and_reports_health(setup: Setup) {
    let cluster = setup.connect("be-cli").await;
    let ns = cluster.namespace().to_owned();
    let _held = one_of_each(&cluster).await;
    let rows = |args: &[&str]| {
        let out = setup.cli(&ns).args(args).output().unwrap();
        let stdout = String::from_utf8(out.stdout).unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .collect::<Vec<_>>()
    };
    for args in [&["list", "--json"][..], &["show", "user:1", "--json"]] {
        let rows = rows(args);
        assert_eq!(rows.len(), KINDS.len(), "{args:?}: {rows:?}");
        for row in &rows {
            assert_eq!(row["subject"], "user:1");
            assert!(row["ttl_ms"].as_u64().unwrap() > 0);
        }
        assert!(rows.iter().any(|r| r["name"] == "api"), "{rows:?}");
    }

    let out = setup.cli(&ns).arg("health").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("slots covered: 16384 of 16384"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
