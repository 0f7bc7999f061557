//! Locks against the six-node cluster: one holder at a time under a 64-task
//! race and across three OS processes, fencing tokens that only grow (also
//! after the fence key expired), stale release/extend, the watchdog, replica
//! acknowledgement, and failing closed when the cluster is unreachable.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use crate::fake_node;

use std::num::NonZeroU32;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shardlimit::keys::{KeyId, slot};
use shardlimit::{Cluster, Error, Lock};

/// The lock key and fence key of lock `name` on `resource`.
fn lock_keys(cluster: &Cluster, name: &str, resource: &str) -> (Vec<u8>, Vec<u8>) {
    let id = KeyId::new("lock", name).unwrap();
    let fence = id.with_part("fence").unwrap();
    (
        cluster.keys().key(resource, &id).unwrap(),
        cluster.keys().key(resource, &fence).unwrap(),
    )
}

/// Lock `job` with a TTL of `ttl`.
fn job_lock(cluster: &Cluster, ttl: Duration) -> Lock {
    Lock::builder(cluster, "job").ttl(ttl).build().unwrap()
}

/// The owning master's clock in microseconds (`TIME`).
async fn server_time_us(key: &[u8]) -> u64 {
    let mut conn = common::owner_conn(key).await;
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
    secs * 1_000_000 + micros
}

/// Polls until `key` no longer exists; panics after `bound`.
async fn wait_until_gone(key: &[u8], bound: Duration) {
    let start = Instant::now();
    while common::pttl(key).await != -2 {
        assert!(
            start.elapsed() < bound,
            "{} still exists after {bound:?}",
            String::from_utf8_lossy(key)
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// How many clients of the node at `addr` are blocked (in a `WAIT`, say).
async fn blocked_clients(addr: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("clients")
        .query_async(&mut common::node(addr).await)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("blocked_clients:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("INFO clients has blocked_clients")
}

fn assert_strictly_increasing(tokens: &[u64]) {
    for pair in tokens.windows(2) {
        assert!(
            pair[0] < pair[1],
            "fencing tokens went {} -> {}",
            pair[0],
            pair[1]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn race_of_64_tasks_has_one_holder_at_a_time_and_increasing_tokens() {
    const TASKS: usize = 64;
    const ROUNDS: usize = 8;
    let cluster = common::cluster("lock-race").await;
    let lock = Lock::builder(&cluster, "race")
        .ttl(Duration::from_secs(30))
        .retry_backoff(Duration::from_millis(1), Duration::from_millis(20))
        .build()
        .unwrap();
    let holders = Arc::new(AtomicUsize::new(0));
    // Pushed inside the critical section, so this is acquisition order.
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let (lock, holders, tokens) = (lock.clone(), holders.clone(), tokens.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                // Generous: 512 hand-overs of ~10 ms each on a busy 2-core
                // machine; starving one task for 2 minutes would be a bug.
                let guard = lock
                    .acquire("nightly-export", Duration::from_secs(120))
                    .await
                    .unwrap()
                    .expect("acquired within the wait");
                let now = holders.fetch_add(1, Ordering::SeqCst) + 1;
                assert_eq!(now, 1, "two holders at once");
                tokens.lock().unwrap().push(guard.fencing_token());
                tokio::time::sleep(Duration::from_millis(1)).await;
                // Leave the critical section before releasing, or the next
                // holder could count itself before we un-count.
                holders.fetch_sub(1, Ordering::SeqCst);
                assert!(guard.release().await.unwrap(), "lock lost while held");
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let tokens = tokens.lock().unwrap().clone();
    assert_eq!(tokens.len(), TASKS * ROUNDS);
    assert_strictly_increasing(&tokens);
    eprintln!(
        "64-task race: {} acquisitions, fencing tokens {}..{}",
        tokens.len(),
        tokens[0],
        tokens[tokens.len() - 1]
    );
    let stats = cluster.stats();
    let s = stats.get("lock", "race").unwrap();
    assert_eq!(
        (s.allowed, s.denied, s.errors),
        ((TASKS * ROUNDS) as u64, 0, 0)
    );
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn try_acquire_is_exclusive_and_release_frees_at_once() {
    let cluster = common::cluster("lock-basic").await;
    let lock = job_lock(&cluster, Duration::from_secs(3600));
    let (key, fence) = lock_keys(&cluster, "job", "nightly-export");
    let guard = lock.try_acquire("nightly-export").await.unwrap().unwrap();
    assert!(guard.is_held());
    assert_eq!(guard.resource(), b"nightly-export");
    assert!(lock.try_acquire("nightly-export").await.unwrap().is_none());
    // Another resource is another lock.
    let other = lock.try_acquire("weekly-export").await.unwrap().unwrap();
    // The key carries the seed's one-hour TTL; the fence key at least as long.
    let ttl = common::pttl(&key).await;
    assert!((3_590_000..=3_600_000).contains(&ttl), "{ttl}");
    assert!(common::pttl(&fence).await >= ttl - 1000);
    let left = guard.remaining_ttl().await.unwrap().unwrap();
    assert!(left > Duration::from_secs(3590) && left <= Duration::from_secs(3600));
    assert!(guard.release().await.unwrap());
    assert_eq!(common::pttl(&key).await, -2, "release deletes the lock key");
    assert!(
        common::pttl(&fence).await > 0,
        "the fence key stays, with its TTL"
    );
    let again = lock.try_acquire("nightly-export").await.unwrap().unwrap();
    assert!(again.release().await.unwrap());
    assert!(other.release().await.unwrap());
    let s = cluster.stats();
    let s = s.get("lock", "job").unwrap();
    assert_eq!((s.allowed, s.denied, s.errors), (3, 1, 0));
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn fencing_tokens_keep_increasing_after_the_fence_key_expired() {
    let cluster = common::cluster("lock-fence").await;
    // Short lock and fence lifetimes so the fence state can expire in a test.
    let lock = Lock::builder(&cluster, "fence")
        .ttl(Duration::from_millis(300))
        .fence_ttl(Duration::from_millis(300))
        .build()
        .unwrap();
    let (key, fence) = lock_keys(&cluster, "fence", "ledger");
    let mut tokens = Vec::new();
    for _ in 0..20 {
        let g = lock.try_acquire("ledger").await.unwrap().unwrap();
        tokens.push(g.fencing_token());
        assert!(g.release().await.unwrap());
    }
    // A round whose holder vanishes: nobody releases, the lock and then the
    // fence key expire on their own.
    let g = lock.try_acquire("ledger").await.unwrap().unwrap();
    tokens.push(g.fencing_token());
    drop(g);
    wait_until_gone(&key, Duration::from_secs(10)).await;
    wait_until_gone(&fence, Duration::from_secs(10)).await;
    let before_us = server_time_us(&key).await;
    let g = lock.try_acquire("ledger").await.unwrap().unwrap();
    let after_expiry = g.fencing_token();
    tokens.push(after_expiry);
    assert_strictly_increasing(&tokens);
    // With no previous token to add one to, the token is the server's time.
    assert!(after_expiry >= before_us, "{after_expiry} < {before_us}");
    eprintln!(
        "fencing tokens: first {}, last before expiry {}, after expiry {} (server time before: {before_us})",
        tokens[0],
        tokens[tokens.len() - 2],
        after_expiry
    );
    assert!(g.release().await.unwrap());
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn fence_key_outlives_the_lock_and_extend_raises_it() {
    let cluster = common::cluster("lock-fencettl").await;
    let lock = Lock::builder(&cluster, "job")
        .ttl(Duration::from_secs(5))
        .fence_ttl(Duration::from_secs(1))
        .build()
        .unwrap();
    let (key, fence) = lock_keys(&cluster, "job", "r");
    let g = lock.try_acquire("r").await.unwrap().unwrap();
    // fence TTL = max(ttl, fence_ttl) = 5 s.
    let f = common::pttl(&fence).await;
    assert!((4_000..=5_000).contains(&f), "{f}");
    assert!(g.extend(Duration::from_secs(20)).await.unwrap());
    let (k, f) = (common::pttl(&key).await, common::pttl(&fence).await);
    assert!((19_000..=20_000).contains(&k), "{k}");
    // Both were set to 20 s by one script; the second PTTL is read a moment
    // later, so allow it a few milliseconds less.
    assert!(f + 50 >= k, "fence {f} < lock {k}");
    // Shortening the lock never shortens the fence.
    assert!(g.extend(Duration::from_secs(2)).await.unwrap());
    assert!(common::pttl(&key).await <= 2_000);
    assert!(common::pttl(&fence).await > 15_000);
    assert!(g.release().await.unwrap());
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn stale_release_and_extend_report_not_held_and_leave_the_new_holder_alone() {
    let cluster = common::cluster("lock-stale").await;
    let lock = job_lock(&cluster, Duration::from_millis(300));
    let long = job_lock(&cluster, Duration::from_secs(60));
    let (key, _) = lock_keys(&cluster, "job", "r");
    let a = lock.try_acquire("r").await.unwrap().unwrap();
    wait_until_gone(&key, Duration::from_secs(10)).await;
    // A's TTL ran out locally too (it is counted from before A's request).
    assert!(!a.is_held());
    let b = long.try_acquire("r").await.unwrap().unwrap();
    assert!(b.fencing_token() > a.fencing_token());

    assert!(!a.extend(Duration::from_secs(600)).await.unwrap());
    assert!(!a.is_held());
    let b_ttl = common::pttl(&key).await;
    assert!(
        (50_000..=60_000).contains(&b_ttl),
        "A's extend touched B's lock: {b_ttl}"
    );

    assert!(!a.release().await.unwrap());
    assert!(
        common::pttl(&key).await > 50_000,
        "A's release deleted B's lock"
    );
    assert!(b.is_held());
    assert!(b.remaining_ttl().await.unwrap().is_some());
    assert!(lock.try_acquire("r").await.unwrap().is_none());
    assert!(b.release().await.unwrap());
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn watchdog_holds_a_1s_lock_for_5s_and_reports_loss_after_an_external_delete() {
    let cluster = common::cluster("lock-watchdog").await;
    let lock = Lock::builder(&cluster, "job")
        .ttl(Duration::from_secs(1))
        .watchdog(true)
        .build()
        .unwrap();
    let rival = Lock::builder(&cluster, "job").build().unwrap();
    let (key, _) = lock_keys(&cluster, "job", "r");
    let guard = lock.try_acquire("r").await.unwrap().unwrap();
    let start = Instant::now();
    let mut checks = 0;
    while start.elapsed() < Duration::from_secs(5) {
        assert!(
            rival.try_acquire("r").await.unwrap().is_none(),
            "rival got the lock after {:?}",
            start.elapsed()
        );
        assert!(guard.is_held());
        let ttl = common::pttl(&key).await;
        assert!((1..=1_000).contains(&ttl), "{ttl}");
        checks += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let extensions = guard.watchdog_extensions();
    // Holding a 1 s lock for 5 s takes at least 4 extensions; the watchdog
    // aims for one every 333 ms (~15).
    assert!(extensions >= 4, "{extensions}");
    eprintln!(
        "watchdog: {extensions} extensions in {:?}, {checks} rival attempts refused",
        start.elapsed()
    );

    // Someone deletes the key behind our back.
    let mut conn = common::owner_conn(&key).await;
    let deleted: i64 = redis::cmd("DEL")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(deleted, 1);
    let noticed = Instant::now();
    // The next extension (≤ 333 ms away) finds it gone; 5 s is generous.
    tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("loss reported");
    eprintln!(
        "watchdog: loss reported {:?} after the DEL",
        noticed.elapsed()
    );
    assert!(!guard.is_held());
    assert!(!guard.release().await.unwrap());
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn dropping_a_guard_stops_its_watchdog_and_the_lock_expires() {
    let cluster = common::cluster("lock-drop").await;
    let lock = Lock::builder(&cluster, "job")
        .ttl(Duration::from_secs(1))
        .watchdog(true)
        .build()
        .unwrap();
    let (key, _) = lock_keys(&cluster, "job", "r");
    let guard = lock.try_acquire("r").await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(guard.watchdog_extensions() >= 1);
    drop(guard);
    // A watchdog still running would keep the key alive forever; 1 s TTL,
    // 5 s bound for a slow machine.
    wait_until_gone(&key, Duration::from_secs(5)).await;
    assert!(
        lock.try_acquire("r")
            .await
            .unwrap()
            .unwrap()
            .release()
            .await
            .unwrap()
    );
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn lost_resolves_when_the_ttl_runs_out_without_a_watchdog() {
    let cluster = common::cluster("lock-lost").await;
    let lock = job_lock(&cluster, Duration::from_millis(400));
    let before = Instant::now();
    let guard = lock.try_acquire("r").await.unwrap().unwrap();
    assert!(guard.is_held());
    // 5 s: generous for a 400 ms TTL on a busy machine.
    tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("lost resolves");
    // The local TTL counts from when the request was sent, which is after
    // `before`: it cannot run out sooner than 400 ms after it.
    assert!(before.elapsed() >= Duration::from_millis(400));
    assert!(!guard.is_held());
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn acquire_waits_for_a_release_and_for_an_expiry() {
    let cluster = common::cluster("lock-wait").await;
    let lock = job_lock(&cluster, Duration::from_secs(30));
    let short = job_lock(&cluster, Duration::from_millis(500));

    let a = lock.try_acquire("r").await.unwrap().unwrap();
    let start = Instant::now();
    let releaser = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(a.release().await.unwrap());
    });
    let b = lock
        .acquire("r", Duration::from_secs(10))
        .await
        .unwrap()
        .expect("acquired after the release");
    assert!(start.elapsed() >= Duration::from_millis(300));
    releaser.await.unwrap();
    assert!(b.release().await.unwrap());

    // A holder that vanishes: the waiter gets the lock when it expires.
    let gone = short.try_acquire("r").await.unwrap().unwrap();
    drop(gone);
    let c = lock
        .acquire("r", Duration::from_secs(10))
        .await
        .unwrap()
        .expect("acquired after the expiry");
    assert!(c.release().await.unwrap());
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn acquire_gives_up_at_the_deadline() {
    let cluster = common::cluster("lock-deadline").await;
    let lock = job_lock(&cluster, Duration::from_secs(30));
    let holder = lock.try_acquire("r").await.unwrap().unwrap();
    let start = Instant::now();
    let got = lock.acquire("r", Duration::from_millis(400)).await.unwrap();
    let waited = start.elapsed();
    assert!(got.is_none());
    assert!(waited >= Duration::from_millis(400), "{waited:?}");
    // Upper bound only guards against waiting for the holder's 30 s TTL.
    assert!(waited < Duration::from_secs(10), "{waited:?}");
    assert!(holder.release().await.unwrap());
    let s = cluster.stats();
    let s = s.get("lock", "job").unwrap();
    assert_eq!((s.allowed, s.denied), (1, 1), "one call, one outcome");
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn replica_ack_succeeds_when_the_replicas_confirm() {
    // A longer acknowledgement wait needs a longer command timeout, which
    // bounds the WAIT reply.
    let cluster = common::builder("lock-ack")
        .command_timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    let lock = Lock::builder(&cluster, "job")
        .replica_ack(Duration::from_millis(500))
        .build()
        .unwrap();
    let guard = lock
        .try_acquire("r")
        .await
        .unwrap()
        .expect("acked and held");
    assert!(guard.release().await.unwrap());
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn replica_ack_that_cannot_be_met_fails_and_releases_the_lock() {
    let cluster = common::cluster("lock-noack").await;
    let (key, _) = lock_keys(&cluster, "job", "r");
    // Ask for one replica more than the owning master has: WAIT can only
    // time out, exactly as when the replica is down or lagging.
    let topology = cluster.topology().await.unwrap();
    let replicas = topology.owner(slot(&key)).unwrap().replicas.len();
    let want = u32::try_from(replicas + 1).unwrap();
    let lock = Lock::builder(&cluster, "job")
        .replica_ack(Duration::from_millis(100))
        .replica_ack_count(NonZeroU32::new(want).unwrap())
        .build()
        .unwrap();
    let err = lock.try_acquire("r").await.unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    assert!(err.is_transient());
    assert!(
        err.to_string()
            .contains(&format!("{replicas} of {want} replicas")),
        "{err}"
    );
    assert_eq!(
        common::pttl(&key).await,
        -2,
        "the unconfirmed lock was released"
    );
    let plain = Lock::builder(&cluster, "job").build().unwrap();
    assert!(
        plain
            .try_acquire("r")
            .await
            .unwrap()
            .unwrap()
            .release()
            .await
            .unwrap()
    );
    assert_eq!(cluster.stats().get("lock", "job").unwrap().errors, 1);
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

/// Issue 23 (4). Acquisitions with `replica_ack` queue on their master's
/// blocking connection behind each other's `WAIT`s, so most callers time
/// out before their acquisition has even run. What such a caller sends to
/// release it must run after it: before the fix, that release went on the
/// master's other connection, overtook the queued acquisition and found
/// nothing, and then the acquisition took its lock for the whole hour.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_ack_acquisitions_cut_off_in_the_queue_leave_nothing_held() {
    const CALLS: u32 = 8;
    const ACK: Duration = Duration::from_millis(300);
    let cluster = common::builder("lock-queue")
        .command_timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    let topology = cluster.topology().await.unwrap();
    let shard = &topology.shards[0];
    let on_shard = |r: &String| shard.slots.iter().any(|s| s.contains(&slot(r.as_bytes())));
    let mut resources: Vec<String> = (0..)
        .map(|i| format!("r{i}"))
        .filter(on_shard)
        .take(CALLS as usize + 1)
        .collect();
    let warm_up = resources.pop().unwrap();
    // One replica more than the master has: every WAIT runs to its timeout.
    let want = u32::try_from(shard.replicas.len() + 1).unwrap();
    let lock = Lock::builder(&cluster, "job")
        .ttl(Duration::from_secs(3600))
        .replica_ack(ACK)
        .replica_ack_count(NonZeroU32::new(want).unwrap())
        .build()
        .unwrap();
    // Load the script on the master first: a NOSCRIPT reply would make every
    // acquisition go round the queue twice.
    let plain = Lock::builder(&cluster, "job").build().unwrap();
    let warm = plain.try_acquire(&warm_up).await.unwrap().unwrap();
    assert!(warm.release().await.unwrap());
    let results = futures::future::join_all(resources.iter().map(|r| lock.try_acquire(r))).await;
    for (resource, result) in resources.iter().zip(&results) {
        assert!(result.is_err(), "{resource}: {result:?}");
    }
    // The master runs the acquisitions one after another, each WAIT for ACK
    // plus up to 100 ms (it notices an expired WAIT on its 10 Hz cron), and
    // what was sent behind them right after the last; 2 s of slack for a
    // busy machine. An acquisition still queued sits behind a WAIT that
    // blocks its connection, so the queue has drained once no client of the
    // master is blocked (other tests' WAITs only make this wait longer).
    let bound = (ACK + Duration::from_millis(100)) * CALLS + Duration::from_secs(2);
    let master = shard.master.to_string();
    let start = Instant::now();
    while blocked_clients(&master).await > 0 {
        assert!(
            start.elapsed() < bound,
            "a WAIT still blocks after {bound:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let keys: Vec<Vec<u8>> = resources
        .iter()
        .map(|r| lock_keys(&cluster, "job", r).0)
        .collect();
    // Releases sent behind the queue ran with it; one sent after a reply
    // (too few replicas confirmed) is one round trip: 1 s is plenty.
    common::wait_until_all_gone(&keys, Duration::from_secs(1)).await;
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

/// Issue 23 (5). As a user without `+wait`, an acquisition with
/// `replica_ack` takes the lock, then its `WAIT` is refused. The caller
/// gets that refusal (a configuration fault, not transient), and the lock
/// it did not get must not stay held for its TTL, as it did before the fix.
#[tokio::test]
async fn an_acquisition_whose_wait_is_refused_leaves_nothing_held() {
    let user = common::AclUser::without("+wait").await;
    let cluster = user
        .builder()
        .command_timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    let lock = Lock::builder(&cluster, "job")
        .ttl(Duration::from_secs(3600))
        .replica_ack(Duration::from_millis(200))
        .build()
        .unwrap();
    let (key, _) = lock_keys(&cluster, "job", "r");
    for _ in 0..2 {
        let err = lock.try_acquire("r").await.unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("no permissions") && text.contains("'wait'"),
            "{text}"
        );
        assert!(!err.is_transient(), "{err}");
        // The release goes out right after the refusal: one round trip,
        // within the command timeout; 1 s of slack.
        common::wait_until_all_gone(std::slice::from_ref(&key), Duration::from_secs(2)).await;
    }
    assert_eq!(cluster.stats().get("lock", "job").unwrap().errors, 2);
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn builder_and_guard_refuse_bad_settings_before_sending() {
    let cluster = common::cluster("lock-config").await;
    let field = |r: shardlimit::Result<Lock>| match r {
        Err(Error::Config { field, .. }) => field,
        other => panic!("{other:?}"),
    };
    let b = || Lock::builder(&cluster, "job");
    assert_eq!(field(b().ttl(Duration::ZERO).build()), "ttl");
    assert_eq!(field(b().ttl(Duration::from_micros(500)).build()), "ttl");
    // 3 × the 250 ms default command timeout.
    assert_eq!(
        field(b().ttl(Duration::from_millis(700)).watchdog(true).build()),
        "ttl"
    );
    b().ttl(Duration::from_millis(750))
        .watchdog(true)
        .build()
        .unwrap();
    assert_eq!(field(b().fence_ttl(Duration::ZERO).build()), "fence_ttl");
    assert_eq!(
        field(b().replica_ack(Duration::ZERO).build()),
        "replica_ack"
    );
    // WAIT 150 ms may answer at 250 ms: no room in the 250 ms command timeout.
    assert_eq!(
        field(b().replica_ack(Duration::from_millis(150)).build()),
        "replica_ack"
    );
    b().replica_ack(Duration::from_millis(149)).build().unwrap();
    assert_eq!(
        field(
            b().retry_backoff(Duration::ZERO, Duration::from_millis(1))
                .build()
        ),
        "retry_backoff"
    );
    assert_eq!(
        field(
            b().retry_backoff(Duration::from_secs(2), Duration::from_secs(1))
                .build()
        ),
        "retry_backoff"
    );
    assert!(matches!(
        Lock::builder(&cluster, "has space").build(),
        Err(Error::InvalidIdent { field: "name", .. })
    ));
    let lock = b().build().unwrap();
    assert!(matches!(
        lock.try_acquire("").await,
        Err(Error::EmptySubject)
    ));
    let g = lock.try_acquire("r").await.unwrap().unwrap();
    assert!(matches!(
        g.extend(Duration::ZERO).await,
        Err(Error::Config { field: "ttl", .. })
    ));
    assert!(g.is_held(), "a refused extend changes nothing");
    assert!(g.release().await.unwrap());
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn never_connected_cluster_fails_closed() {
    // Nothing listens on port 1; the lazily built handle never connects.
    let cluster = common::unreachable_cluster().await;
    let lock = Lock::builder(&cluster, "job").build().unwrap();
    for _ in 0..3 {
        let err = lock.try_acquire("r").await.unwrap_err();
        assert!(err.is_transient(), "{err}");
    }
    // acquire fails at the first error instead of waiting 30 s for a lock.
    let start = Instant::now();
    assert!(lock.acquire("r", Duration::from_secs(30)).await.is_err());
    assert!(start.elapsed() < Duration::from_secs(10));
    let s = cluster.stats();
    let s = s.get("lock", "job").unwrap();
    assert_eq!((s.allowed, s.denied, s.bypassed, s.errors), (0, 0, 0, 4));
}

#[tokio::test]
async fn connected_cluster_that_goes_dark_or_dies_fails_closed() {
    let node = fake_node::FakeNode::start().await;
    let cluster = Cluster::builder([node.url()])
        .command_timeout(Duration::from_millis(200))
        .connect_timeout(Duration::from_millis(500))
        .build()
        .await
        .expect("the fake node accepts the connection");
    let lock = Lock::builder(&cluster, "job").build().unwrap();
    // Connected: the fake node answers scripts with an error — still no guard.
    assert!(lock.try_acquire("r").await.is_err());

    node.go_dark();
    for _ in 0..3 {
        let err = lock.try_acquire("r").await.unwrap_err();
        assert!(err.is_transient(), "{err}");
    }
    let start = Instant::now();
    assert!(lock.acquire("r", Duration::from_secs(30)).await.is_err());
    assert!(start.elapsed() < Duration::from_secs(10));

    node.shut_down();
    for _ in 0..3 {
        let err = lock.try_acquire("r").await.unwrap_err();
        assert!(err.is_transient(), "{err}");
    }
    let s = cluster.stats();
    let s = s.get("lock", "job").unwrap();
    assert_eq!((s.allowed, s.denied, s.bypassed, s.errors), (0, 0, 0, 8));
}

/// The example, three times at once, as the seed's cron hosts: exactly one
/// wins. Builds the example first (the test harness does not build examples
/// for `cargo test --test cluster lock::`).
#[tokio::test]
async fn three_processes_of_the_example_one_exports() {
    let exe = common::cargo_built(&["--example", "nightly_export"], "examples/nightly_export");
    let namespace = common::unique_namespace("lock-procs");
    let mut children = Vec::new();
    for host in ["cron-01", "cron-02", "cron-03"] {
        children.push(
            tokio::process::Command::new(&exe)
                .args([
                    "--host",
                    host,
                    "--namespace",
                    &namespace,
                    "--export-secs",
                    "3",
                ])
                .env("SHARDLIMIT_NODES", common::node_urls().join(","))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        );
    }
    let mut lines = Vec::new();
    for child in children {
        let out = child.wait_with_output().await.unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        lines.extend(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(str::to_owned),
        );
    }
    eprintln!("{}", lines.join("\n"));
    let count = |needle: &str| lines.iter().filter(|l| l.ends_with(needle)).count();
    assert_eq!(count("acquired lock, exporting"), 1);
    assert_eq!(count("lock held elsewhere, exiting"), 2);
    assert_eq!(count("released lock"), 1);
    common::assert_every_key_has_ttl(&namespace).await;
}
