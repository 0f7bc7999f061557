//! Against a Sentinel deployment (one primary, one replica, three
//! sentinels): the behaviour suite every deployment runs (`tests/behaviour`:
//! every algorithm, a batch of scripts, a `replica_ack` lock, lease, counter,
//! scanner, health, the CLI, the deny cache), plus what is Sentinel's own:
//! discovery, the configuration errors, and the fault tests: the primary
//! killed under load, and switched over and back (`fault_switchover`).
//! `#[ignore]`d so the cluster run skips them; run with
//!
//! ```text
//! cluster-compose/up.sh --sentinel
//! cargo test --all-features --test deployments -- --ignored sentinel:: --skip fault_
//! cargo test --all-features --test deployments -- --ignored sentinel::fault_ --test-threads=1
//! cluster-compose/down.sh --sentinel
//! ```
//!
//! (The fault test kills the primary, so it must not run beside the rest.)
//! `SHARDLIMIT_SENTINEL_NODES` (comma-separated URLs, default the three
//! sentinels of `up.sh --sentinel`, from `SHARDLIMIT_SENTINEL_PORT` as it
//! reads it) and `SHARDLIMIT_SENTINEL_SERVICE` (default `shardlimit`) pick
//! the deployment.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::behaviour;

mod fault_switchover;

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use behaviour::{SENTINEL_COMMAND_TIMEOUT as COMMAND_TIMEOUT, Setup, sentinels};
use shardlimit::cluster::{ClusterBuilder, Deployment};
use shardlimit::{Cluster, Counter, Error, Lock};

use crate::fake_node::FakeNode;

behaviour::suite!(
    Setup::Sentinel,
    #[ignore = "needs cluster-compose/up.sh --sentinel"]
);

/// Scheduling on a busy two-core machine, as in tests/faults.
const SCHEDULING_SLACK: Duration = Duration::from_millis(250);
/// `cluster-compose/lib.sh`: down-after-milliseconds and failover-timeout.
const DOWN_AFTER: Duration = Duration::from_millis(1000);
const FAILOVER_TIMEOUT: Duration = Duration::from_millis(3000);

fn service() -> String {
    behaviour::sentinel_service()
}

async fn sentinel(prefix: &str) -> Cluster {
    Setup::Sentinel.connect(prefix).await
}

async fn conn(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// The primary's port as the first answering sentinel names it.
async fn primary_port() -> Option<u16> {
    for url in sentinels() {
        let Ok(client) = redis::Client::open(url.as_str()) else {
            continue;
        };
        let answer = tokio::time::timeout(Duration::from_millis(500), async {
            let mut conn = client.get_multiplexed_async_connection().await.ok()?;
            let addr: Option<(String, u16)> = redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(service())
                .query_async(&mut conn)
                .await
                .ok()?;
            addr.map(|(_, port)| port)
        })
        .await;
        if let Ok(Some(port)) = answer {
            return Some(port);
        }
    }
    None
}

#[tokio::test]
#[ignore = "needs cluster-compose/up.sh --sentinel"]
async fn the_primary_is_found_through_the_sentinels() {
    let cluster = sentinel("se-topo").await;
    let topology = cluster.topology().await.unwrap();
    assert_eq!(topology.shards.len(), 1);
    assert_eq!(topology.covered_slots(), 16384);
    let shard = &topology.shards[0];
    assert_eq!(Some(shard.master.port), primary_port().await);
    assert_eq!(shard.replicas.len(), 1, "{topology:?}");
    let mut primary = conn(&format!("redis://127.0.0.1:{}", shard.master.port)).await;
    let role: Vec<redis::Value> = redis::cmd("ROLE").query_async(&mut primary).await.unwrap();
    assert_eq!(role[0], redis::Value::BulkString(b"master".to_vec()));
    // A dead sentinel first in the list is skipped.
    let mut seeds = vec!["redis://127.0.0.1:26499".to_owned()];
    seeds.extend(sentinels());
    let skipping = Cluster::builder(seeds)
        .deployment(Deployment::Sentinel)
        .sentinel_service(service())
        .build()
        .await
        .unwrap();
    let found = skipping.topology().await.unwrap();
    assert_eq!(found.shards[0].master, shard.master);
}

#[tokio::test]
#[ignore = "needs cluster-compose/up.sh --sentinel"]
async fn bad_sentinel_configuration_is_refused() {
    let config_field = |result: shardlimit::Result<Cluster>| match result {
        Err(Error::Config { field, reason }) => (field, reason),
        other => panic!("expected a configuration error, got {other:?}"),
    };
    let (field, reason) = config_field(
        Cluster::builder(sentinels())
            .deployment(Deployment::Sentinel)
            .build()
            .await,
    );
    assert_eq!(field, "sentinel_service");
    assert!(reason.contains("SHARDLIMIT_SENTINEL_SERVICE"), "{reason}");
    let (field, _) = config_field(
        Cluster::builder(sentinels())
            .deployment(Deployment::Sentinel)
            .sentinel_service(" ")
            .build()
            .await,
    );
    assert_eq!(field, "sentinel_service");
    let (_, reason) = config_field(
        Cluster::builder(sentinels())
            .sentinel_service(service())
            .build()
            .await,
    );
    assert!(reason.contains("Deployment::Sentinel"), "{reason}");
    // A service no sentinel monitors: a connect error that names it.
    let err = Cluster::builder(sentinels())
        .deployment(Deployment::Sentinel)
        .sentinel_service("no-such-service")
        .build()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no-such-service"), "{err}");
    assert_eq!(
        "Sentinel".parse::<Deployment>().unwrap(),
        Deployment::Sentinel
    );
}

/// A fake sentinel that names the primary of now whatever happens next
/// (one that missed a switch; it knows no `SUBSCRIBE` either), that
/// primary's port, and a builder of a handle that asks the fake before
/// the real sentinels, under a fresh namespace from `prefix`.
async fn behind_a_stale_sentinel(prefix: &str) -> (FakeNode, u16, ClusterBuilder) {
    let primary = primary_port().await.unwrap();
    let stale = FakeNode::start_stale_sentinel(&format!("127.0.0.1:{primary}")).await;
    let mut seeds = vec![stale.url()];
    seeds.extend(sentinels());
    let builder = Cluster::builder(seeds)
        .deployment(Deployment::Sentinel)
        .sentinel_service(service())
        .namespace(crate::common::unique_namespace(prefix));
    (stale, primary, builder)
}

/// A sentinel that refuses the `+switch-master` subscription (here one
/// that knows no `SUBSCRIBE`; in production an ACL without it) is said
/// once, as a warning, however often the listener asks it again.
#[tokio::test]
#[ignore = "needs cluster-compose/up.sh --sentinel"]
async fn a_sentinel_refusing_the_switch_subscription_is_warned_about_once() {
    let (logs, _guard) = crate::common::LogLines::capture();
    let (refusing, _, builder) = behind_a_stale_sentinel("se-refuse").await;
    let cluster = builder
        .reconnect_backoff(Duration::from_millis(20), Duration::from_millis(40))
        .build()
        .await
        .unwrap();
    let asked = refusing.commands();
    tokio::time::sleep(Duration::from_millis(800)).await;
    // Asked again and again meanwhile (connection set-up and SUBSCRIBE).
    assert!(
        refusing.commands() >= asked + 10,
        "{} commands, {asked} at build",
        refusing.commands()
    );
    let text = logs.text();
    let warnings = logs.lines_with("refused the subscription");
    assert_eq!(warnings.len(), 1, "{text}");
    assert!(
        warnings[0].contains("WARN") && warnings[0].contains(&refusing.addr()),
        "{text}"
    );
    drop(cluster);
}

fn state_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("cluster-compose/.state-sentinel")
}

/// `cluster-compose/up.sh --sentinel`: restarts whatever is missing (a
/// killed primary comes back as a replica) and waits until healthy.
fn restore() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/cluster-compose/up.sh");
    let out = Command::new(script).arg("--sentinel").output().unwrap();
    assert!(
        out.status.success(),
        "up.sh --sentinel: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[derive(Default)]
struct Record {
    /// (time since the kill, error) of every failed call after it.
    failures: Vec<(Duration, String)>,
    calls: u64,
    errors: u64,
    slowest: Duration,
    grants: Vec<u64>,
    /// The last failure of a counter add (not a lock), after the kill.
    last_counter_failure: Option<Duration>,
    /// The last successful call, after the kill.
    last_ok: Option<Duration>,
}

/// Kills the primary (`kill -9`) under 64 concurrent tasks (60 counter
/// adds, 4 lock acquisitions with replica acknowledgement): every call
/// ends within the command timeout, the failover's failures end within
/// the sentinels' down-after + failover timeout + 3 s of the kill, or 3 s
/// after a second failover the sentinels make meanwhile (any later one is
/// a brief blip of the old primary's rejoin as a replica, which comes
/// meanwhile), the lock is never granted twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "fault injection: kills the Sentinel primary; run alone"]
async fn fault_kill_the_primary_under_64_tasks() {
    restore();
    let run = tokio::time::timeout(Duration::from_secs(60), kill_under_load());
    let figures = run.await.expect("the fault test hung");
    restore();
    figures.check();
}

struct Figures {
    promoted_after: Option<Duration>,
    /// Every change of the primary the sentinels name, after the kill:
    /// (when, the new primary's port). More than one when they fail over
    /// again while the old primary rejoins.
    switches: Vec<(Duration, u16)>,
    /// When the old primary was back as a replica, after the kill.
    rejoined_after: Duration,
    record: Record,
    text: String,
}

impl Figures {
    fn check(&self) {
        let limit = DOWN_AFTER + FAILOVER_TIMEOUT + Duration::from_secs(3);
        let r = &self.record;
        assert!(
            self.promoted_after.is_some(),
            "no new primary\n{}",
            self.text
        );
        let last = r.failures.last().map(|(at, _)| *at).unwrap_or_default();
        // Past the failover's bound, failures may come only from the old
        // primary's rejoin, a second event: the sentinels see the replica
        // at their next INFO of the primary (every 10 s), so the rejoin
        // lands anywhere from ~3 s to ~15 s after the kill, and it briefly
        // troubled the new primary once (a clean-clone CI run: 6401 marked
        // down for a moment at 14.4 s, the rejoin done at 14.85 s; 3.4 s
        // here, inside the bound). So they must end by the rejoin (+1 s)
        // and last at most 2 s: a slow recovery from the failover itself
        // still fails.
        //
        // The sentinels may also fail over a second time while the old
        // primary rejoins (a clean-clone run: one sentinel saw the new
        // primary 6401 down for a second at +3.3 s, the old one, back as a
        // replica, was promoted at +4.5 s, and failures ran to +7.009 s):
        // a client is then held to the same allowance after that switch as
        // after the first, 3 s.
        let last_switch = self.switches.last().map(|(at, _)| *at).unwrap_or_default();
        let limit = limit.max(last_switch + Duration::from_secs(3));
        let late: Vec<Duration> = r
            .failures
            .iter()
            .map(|(at, _)| *at)
            .filter(|at| *at > limit)
            .collect();
        if let (Some(&first), Some(&late_last)) = (late.first(), late.last()) {
            assert!(
                late_last <= self.rejoined_after + Duration::from_secs(1)
                    && late_last - first <= Duration::from_secs(2),
                "failures from {first:?} to {late_last:?}, past {limit:?} and not a brief \
                 blip of the rejoin (done {:?} after the kill)\n{}",
                self.rejoined_after,
                self.text
            );
        }
        assert!(
            r.slowest <= COMMAND_TIMEOUT + SCHEDULING_SLACK,
            "slowest call {:?}\n{}",
            r.slowest,
            self.text
        );
        assert!(r.grants.len() <= 1, "lock granted twice: {:?}", r.grants);
        assert!(
            r.last_ok
                .is_some_and(|ok| ok > last + Duration::from_secs(1)),
            "no recovery after the last failure\n{}",
            self.text
        );
    }
}

async fn kill_under_load() -> Figures {
    let cluster = sentinel("se-fault").await;
    let old = primary_port().await.unwrap();
    let counter = Counter::builder(&cluster, "hits").build().unwrap();
    let lock = Lock::builder(&cluster, "job")
        .ttl(Duration::from_secs(120))
        .replica_ack(Duration::from_millis(100))
        .build()
        .unwrap();
    let record = Arc::new(Mutex::new(Record::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let killed: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    let mut tasks = Vec::new();
    for task in 0..64u32 {
        let (counter, lock) = (counter.clone(), lock.clone());
        let (record, stop, killed) = (record.clone(), stop.clone(), killed.clone());
        tasks.push(tokio::spawn(async move {
            let mut held = Vec::new();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let started = Instant::now();
                let outcome: Result<(), String> = if task < 4 {
                    match lock.try_acquire("the-one").await {
                        Ok(Some(guard)) => {
                            record.lock().unwrap().grants.push(guard.fencing_token());
                            // Kept to the end: any second grant is a double.
                            held.push(guard);
                            Ok(())
                        }
                        Ok(None) => Ok(()),
                        Err(err) => Err(err.to_string()),
                    }
                } else {
                    counter
                        .add(format!("s:{task}:{}", n % 16), 1)
                        .await
                        .map(drop)
                        .map_err(|e| e.to_string())
                };
                let took = started.elapsed();
                let since_kill = killed.lock().unwrap().map(|k| k.elapsed());
                {
                    let mut r = record.lock().unwrap();
                    r.calls += 1;
                    r.slowest = r.slowest.max(took);
                    let at = since_kill.unwrap_or_default();
                    match outcome {
                        Err(err) => {
                            r.errors += 1;
                            if task >= 4 {
                                r.last_counter_failure = Some(at);
                            }
                            r.failures.push((at, err));
                        }
                        Ok(()) => r.last_ok = since_kill,
                    }
                }
                // Closed loop with a pause, as in tests/faults: fast
                // failures must not spin 64 tasks on two cores (which
                // would measure the scheduler, not the library).
                let pause = if task < 4 { 20 } else { 1 };
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
            drop(held);
        }));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pid = std::fs::read_to_string(state_dir().join(format!("{old}/redis.pid"))).unwrap();
    // The clock starts before the kill, so no failure it causes is
    // counted as "before the kill".
    let kill_at = Instant::now();
    *killed.lock().unwrap() = Some(kill_at);
    let status = Command::new("kill")
        .args(["-9", pid.trim()])
        .status()
        .unwrap();
    assert!(status.success());
    // Every switch of the primary the sentinels name, until the end.
    let watch = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let (mut switches, mut current) = (Vec::new(), old);
            while !stop.load(Ordering::Relaxed) {
                if let Some(port) = primary_port().await
                    && port != current
                {
                    current = port;
                    switches.push((kill_at.elapsed(), port));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            switches
        })
    };
    let mut promoted_after = None;
    while kill_at.elapsed() < Duration::from_secs(15) {
        if let Some(port) = primary_port().await
            && port != old
        {
            promoted_after = Some(kill_at.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // As an operator would: the old primary comes back, as a replica, so
    // the new primary has a replica to acknowledge locks again.
    if promoted_after.is_some() {
        tokio::task::spawn_blocking(restore).await.unwrap();
    }
    let rejoined_after = kill_at.elapsed();
    tokio::time::sleep(
        (DOWN_AFTER + FAILOVER_TIMEOUT + Duration::from_secs(5)).saturating_sub(kill_at.elapsed()),
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.unwrap();
    }
    let switches = watch.await.unwrap();
    let record = Arc::try_unwrap(record).ok().unwrap().into_inner().unwrap();
    let last = record.failures.last().cloned();
    let before_kill = record
        .failures
        .iter()
        .filter(|(at, _)| at.is_zero())
        .count();
    let text = format!(
        "sentinel failover: kill -9 of primary 127.0.0.1:{old} under 64 tasks \
         (60 counter adds, 4 replica-acknowledged lock acquisitions), command timeout {COMMAND_TIMEOUT:?}, \
         down-after {DOWN_AFTER:?}, failover timeout {FAILOVER_TIMEOUT:?}\n\
         new primary named by the sentinels after: {promoted_after:?}\n\
         every switch of the named primary (after the kill, new port): {switches:?}\n\
         old primary back as a replica after: {rejoined_after:?}\n\
         last failure after the kill: {:?} ({})\n\
         last counter failure after the kill: {:?}\n\
         slowest call: {:?}\n\
         calls: {}, errors: {} (before the kill: {before_kill}), lock grants: {}\n\
         stats: {:?}\n",
        last.as_ref().map(|(at, _)| *at),
        last.as_ref().map(|(_, e)| e.as_str()).unwrap_or("none"),
        record.last_counter_failure,
        record.slowest,
        record.calls,
        record.errors,
        record.grants.len(),
        cluster.stats().nodes,
    );
    println!("{text}");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/faults");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("sentinel_failover.txt"), &text).unwrap();
    Figures {
        promoted_after,
        switches,
        rejoined_after,
        record,
        text,
    }
}
