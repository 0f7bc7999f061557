//! The operational events a production cluster sees every week — not only
//! kill -9 — under load from every primitive at once: the four rate-limit
//! algorithms and a multi-limit (each with a deny cache), `check_many`, a
//! fixed window decided from plain commands (no deny cache, a
//! subject-settings cache), a `replica_ack` lock, a lease and a counter,
//! all fail-closed, while a
//! second handle (another process, as far as the deny caches know) resets
//! the hot subjects.
//!
//! The events, in order: idle connections closed by the server's `timeout`;
//! `CLIENT KILL` of every client; a busy slot migrated key by key and back;
//! a hung master (`docker pause`) that fails over and comes back; a killed
//! master; a stopped replica; `SCRIPT FLUSH` on every master. The first two
//! happen "between calls" (the load is held while the connections go, as
//! an idle service's would): a connection cut while a request is in flight
//! loses that reply, and that call rightly fails as ambiguous.
//!
//! After each event: every cached denial agreed with a peek sent right
//! after it (unless a reset of that subject was published within the
//! delivery allowance before, or the entry expired meanwhile); no lock or
//! lease is left held by nobody once the load stopped; 0 errors on the
//! slots of healthy masters, outside Redis' own `CLUSTERDOWN` window (and
//! a `replica_ack` lock refused as unconfirmed on the master whose replica
//! is stopped, which is its purpose); every key has a TTL. The table goes to
//! `target/faults/operational_events.txt` and docs/failures.md.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::Rng;
use shardlimit::keys::slot;
use shardlimit::{
    Algorithm, Cluster, Counter, LeaseLimiter, Lock, MultiLimiter, Quota, RateLimiter,
};

use crate::common::{self, Master};
use crate::harness::*;

/// Hot subjects (denied, cached, reset) and the cold rest.
const HOT: usize = 3;
const COLD: usize = 2_000;
const TASKS: usize = 12;
/// How long after a reset a cached denial of that subject may still be
/// answered: the invalidation is on its way (SPUBLISH to the subscriber),
/// on a 2-core box running six Redis nodes and the load.
const DELIVERY: Duration = Duration::from_millis(500);

/// The primitives, built on the handle under test, and their rivals on a
/// second handle.
struct Rig {
    cluster: Cluster,
    limiters: Vec<RateLimiter>,
    /// The same limiters (and the multi-limit's) built on the other handle,
    /// for resets.
    resetters: Vec<RateLimiter>,
    multi: MultiLimiter,
    batch: RateLimiter,
    /// A fixed window whose checks are plain commands (see
    /// `limit/check/plain.rs`), reading no settings once it knows a
    /// subject has none.
    plain: RateLimiter,
    lock: Lock,
    leases: LeaseLimiter,
    counter: Counter,
    hot: Vec<String>,
    cold: Vec<String>,
    started: Instant,
    /// When each hot subject was last reset (through the other handle).
    resets: Mutex<HashMap<String, Instant>>,
}

/// What one event's load saw.
#[derive(Default)]
struct Tally {
    calls: AtomicU64,
    cached_checked: AtomicU64,
    disagreements: Mutex<Vec<String>>,
    failures: Mutex<Vec<Failure>>,
}

struct Failure {
    /// When it ended, since the rig was built.
    at: Duration,
    slot: u16,
    what: &'static str,
    error: String,
}

/// The load's controls: stop, hold (finish the call in hand, then wait),
/// and how many calls are in flight.
#[derive(Default)]
struct Control {
    stop: AtomicBool,
    hold: AtomicBool,
    in_flight: AtomicUsize,
}

impl Control {
    /// Holds the load and waits until no call is in flight.
    async fn quiet(&self) {
        self.hold.store(true, Ordering::SeqCst);
        while self.in_flight.load(Ordering::SeqCst) > 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    fn resume(&self) {
        self.hold.store(false, Ordering::SeqCst);
    }
}

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap()
}

async fn rig() -> Rig {
    let cluster = cluster_builder("opevents").build().await.unwrap();
    let other = common::builder("unused")
        .namespace(cluster.namespace())
        .command_timeout(COMMAND_TIMEOUT)
        .build()
        .await
        .unwrap();
    // Small enough that hot subjects are denied (and cached) all the time.
    let quota = Quota::with_period(nz(2), Duration::from_secs(10));
    let build = |c: &Cluster, name: &str, a: Algorithm| {
        RateLimiter::builder(c, name, quota)
            .algorithm(a)
            .deny_cache(10_000)
            .build()
            .unwrap()
    };
    let names: Vec<(String, Algorithm)> = Algorithm::ALL
        .iter()
        .map(|&a| (format!("op-{}", a.kind()), a))
        .chain([
            ("op-m1".to_owned(), Algorithm::Gcra),
            ("op-m2".to_owned(), Algorithm::FixedWindow),
        ])
        .collect();
    let mut limiters: Vec<RateLimiter> =
        names.iter().map(|(n, a)| build(&cluster, n, *a)).collect();
    let resetters = names.iter().map(|(n, a)| build(&other, n, *a)).collect();
    let m2 = limiters.pop().unwrap();
    let m1 = limiters.pop().unwrap();
    let multi = MultiLimiter::new([m1, m2])
        .unwrap()
        .with_deny_cache(10_000)
        .unwrap();
    Rig {
        batch: build(&cluster, "op-batch", Algorithm::Gcra),
        plain: RateLimiter::builder(&cluster, "op-plain", quota)
            .algorithm(Algorithm::FixedWindow)
            .subject_settings_cache(10_000)
            .build()
            .unwrap(),
        // Long TTLs: a lock or lease left held by nobody is still there
        // when the event's invariants are checked.
        lock: Lock::builder(&cluster, "op-lock")
            .ttl(Duration::from_secs(60))
            .replica_ack(Duration::from_millis(100))
            .build()
            .unwrap(),
        leases: LeaseLimiter::builder(&cluster, "op-lease")
            .max_leases(nz(2))
            .lease_ttl(Duration::from_secs(60))
            .build()
            .unwrap(),
        counter: Counter::builder(&cluster, "op-count").build().unwrap(),
        hot: (0..HOT).map(|i| format!("hot-{i}")).collect(),
        cold: (0..COLD).map(|i| format!("cold-{i}")).collect(),
        limiters,
        resetters,
        multi,
        cluster,
        started: Instant::now(),
        resets: Mutex::new(HashMap::new()),
    }
}

impl Rig {
    fn subject(&self) -> &str {
        let mut rng = rand::rng();
        if rng.random_bool(0.6) {
            &self.hot[rng.random_range(0..HOT)]
        } else {
            &self.cold[rng.random_range(0..COLD)]
        }
    }

    fn fail(&self, tally: &Tally, subject: &str, what: &'static str, error: shardlimit::Error) {
        tally.failures.lock().unwrap().push(Failure {
            at: self.started.elapsed(),
            slot: slot(subject.as_bytes()),
            what,
            error: error.to_string(),
        });
    }

    /// A denial answered from a cache now, to wait `wait`, checked against
    /// `peek` (which always asks Redis: `true` if it admits).
    async fn recheck(
        &self,
        tally: &Tally,
        what: &str,
        subject: &str,
        wait: Option<Duration>,
        peek: impl std::future::Future<Output = shardlimit::Result<bool>>,
    ) {
        let at = Instant::now();
        let until = at + wait.unwrap_or_default();
        let Ok(admits) = peek.await else {
            return;
        };
        let reset = self.resets.lock().unwrap().get(subject).copied();
        if Instant::now() >= until || reset.is_some_and(|r| r + DELIVERY > at) {
            return; // the entry ended, or a reset was still on its way
        }
        tally.cached_checked.fetch_add(1, Ordering::Relaxed);
        if admits {
            tally.disagreements.lock().unwrap().push(format!(
                "{what} {subject} at {:.2} s: a cached denial for {wait:?}, Redis admits",
                self.started.elapsed().as_secs_f64()
            ));
        }
    }

    /// One call of primitive `i % 10`.
    async fn call(&self, tally: &Tally, i: usize) {
        tally.calls.fetch_add(1, Ordering::Relaxed);
        let subject = self.subject().to_owned();
        match i % 10 {
            n @ 0..=3 => {
                let l = &self.limiters[n];
                match l.check(&subject).await {
                    Ok(d) if d.cached => {
                        let peek = async { Ok(l.peek(&subject).await?.allowed) };
                        self.recheck(tally, l.name(), &subject, d.retry_after, peek)
                            .await;
                    }
                    Ok(_) => {}
                    Err(e) => self.fail(tally, &subject, "check", e),
                }
            }
            4 => match self.multi.check(&subject).await {
                Ok(d) if d.decisions.iter().any(|d| d.cached) => {
                    let wait = d.decisions.iter().filter_map(|d| d.retry_after).max();
                    let peek = async { Ok(self.multi.peek(&subject).await?.allowed) };
                    self.recheck(tally, "multi", &subject, wait, peek).await;
                }
                Ok(_) => {}
                Err(e) => self.fail(tally, &subject, "multi", e),
            },
            5 => {
                let subjects: Vec<(String, u32)> =
                    (0..8).map(|_| (self.subject().to_owned(), 1)).collect();
                for ((s, _), d) in subjects.iter().zip(self.batch.check_many(&subjects).await) {
                    if let Err(e) = d {
                        self.fail(tally, s, "check_many", e);
                    }
                }
            }
            6 => {
                let resource = format!("res-{}", rand::rng().random_range(0..50));
                match self.lock.try_acquire(&resource).await {
                    Ok(Some(guard)) => {
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        if let Err(e) = guard.release().await {
                            self.fail(tally, &resource, "lock release", e);
                        }
                    }
                    Ok(None) => {}
                    Err(e) => self.fail(tally, &resource, "lock", e),
                }
            }
            7 => {
                let tenant = format!("tenant-{}", rand::rng().random_range(0..50));
                match self.leases.try_acquire(&tenant).await {
                    Ok(Some(lease)) => {
                        if let Err(e) = lease.release().await {
                            self.fail(tally, &tenant, "lease release", e);
                        }
                    }
                    Ok(None) => {}
                    Err(e) => self.fail(tally, &tenant, "lease", e),
                }
            }
            9 => {
                if let Err(e) = self.plain.check(&subject).await {
                    self.fail(tally, &subject, "plain check", e);
                }
            }
            _ => {
                if let Err(e) = self.counter.add(&subject, 1).await {
                    self.fail(tally, &subject, "counter", e);
                }
            }
        }
    }
}

/// Polls every node but `except` for `cluster_state:fail` until `stop`;
/// the first and last time one said so.
fn watch_cluster_state(
    started: Instant,
    except: u16,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Option<(Duration, Duration)>> {
    tokio::spawn(async move {
        let mut window: Option<(Duration, Duration)> = None;
        while !stop.load(Ordering::SeqCst) {
            for port in ports().into_iter().filter(|&p| p != except) {
                let addr = format!("127.0.0.1:{port}");
                let info = async {
                    let client = redis::Client::open(format!("redis://{addr}")).ok()?;
                    let mut conn = client.get_multiplexed_async_connection().await.ok()?;
                    redis::cmd("CLUSTER")
                        .arg("INFO")
                        .query_async::<String>(&mut conn)
                        .await
                        .ok()
                };
                let info = tokio::time::timeout(Duration::from_millis(200), info).await;
                if let Ok(Some(info)) = info
                    && info.contains("cluster_state:fail")
                {
                    let now = started.elapsed();
                    window = Some(window.map_or((now, now), |(from, _)| (from, now)));
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        window
    })
}

/// Runs the load (and the resetter) until `control.stop`.
fn start_load(
    rig: &Arc<Rig>,
    tally: &Arc<Tally>,
    control: &Arc<Control>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let (rig, tally, control) = (rig.clone(), tally.clone(), control.clone());
            tokio::spawn(async move {
                let mut i = task;
                while !control.stop.load(Ordering::SeqCst) {
                    if control.hold.load(Ordering::SeqCst) {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        continue;
                    }
                    control.in_flight.fetch_add(1, Ordering::SeqCst);
                    rig.call(&tally, i).await;
                    control.in_flight.fetch_sub(1, Ordering::SeqCst);
                    i += 1;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            })
        })
        .collect();
    let (rig, control) = (rig.clone(), control.clone());
    tasks.push(tokio::spawn(async move {
        while !control.stop.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(400)).await;
            if control.hold.load(Ordering::SeqCst) {
                continue;
            }
            let (subject, which) = {
                let mut rng = rand::rng();
                (
                    rig.hot[rng.random_range(0..HOT)].clone(),
                    rng.random_range(0..rig.resetters.len()),
                )
            };
            // Recorded before sending: a cached denial answered after this
            // may be stale until the message arrives.
            rig.resets
                .lock()
                .unwrap()
                .insert(subject.clone(), Instant::now());
            let _ = rig.resetters[which].reset(&subject).await;
        }
    }));
    tasks
}

/// What an event did to the cluster, for judging its failures.
#[derive(Default)]
struct Affected {
    /// A master that was hung or killed: its slots may fail until its
    /// replica took over.
    master: Option<Master>,
    /// The master whose replica was stopped: its `replica_ack` locks are
    /// refused as unconfirmed, or time out queued behind each other's
    /// `WAIT`s.
    unacknowledged: Option<Master>,
    /// When some node said `cluster_state:fail` (since the rig was built):
    /// Redis' own `CLUSTERDOWN` window, which every slot may fail in.
    cluster_down: Option<(Duration, Duration)>,
    note: String,
}

struct Row {
    event: &'static str,
    calls: u64,
    healthy_errors: Vec<String>,
    allowed_errors: usize,
    cached_checked: u64,
    disagreements: Vec<String>,
    orphans: Vec<String>,
    orphans_on_failed: Vec<String>,
    immortal: usize,
    note: String,
}

async fn set_on_every_node(args: &[&str]) {
    for port in ports() {
        let addr = format!("127.0.0.1:{port}");
        // A node that is down right now has nothing to change.
        let _ = tokio::time::timeout(Duration::from_secs(2), common::cmd(&addr, args)).await;
    }
}

async fn on_every_master(args: &[&str]) {
    for m in common::masters().await {
        common::cmd(&m.addr, args).await;
    }
}

async fn wait_until(what: &str, limit: Duration, mut done: impl AsyncFnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !done().await {
        assert!(
            started.elapsed() < limit,
            "{what} did not happen within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    started.elapsed()
}

/// The port of `master`'s address.
fn port_of(master: &Master) -> u16 {
    master.addr.rsplit_once(':').unwrap().1.parse().unwrap()
}

/// The replica port of the master on `port`, as the node layout pairs them
/// now (`ROLE` of each replica).
async fn replica_of(port: u16) -> u16 {
    for candidate in ports() {
        let addr = format!("127.0.0.1:{candidate}");
        let role = common::cmd(&addr, &["ROLE"]).await;
        if let redis::Value::Array(fields) = role {
            let kind: String = redis::from_redis_value(fields[0].clone()).unwrap();
            if kind == "slave" {
                let master_port: u16 = redis::from_redis_value(fields[2].clone()).unwrap();
                if master_port == port {
                    return candidate;
                }
            }
        }
    }
    panic!("no replica of {port}");
}

async fn idle_close(control: &Control) -> Affected {
    control.quiet().await;
    set_on_every_node(&["CONFIG", "SET", "timeout", "1"]).await;
    // Every connection of the handle sits idle past the server's timeout.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    control.resume();
    tokio::time::sleep(Duration::from_secs(3)).await;
    set_on_every_node(&["CONFIG", "SET", "timeout", "0"]).await;
    Affected {
        note: "CONFIG SET timeout 1, 2.5 s idle".into(),
        ..Affected::default()
    }
}

async fn client_kill(control: &Control) -> Affected {
    tokio::time::sleep(Duration::from_secs(1)).await;
    control.quiet().await;
    on_every_master(&["CLIENT", "KILL", "TYPE", "normal"]).await;
    on_every_master(&["CLIENT", "KILL", "TYPE", "pubsub"]).await;
    control.resume();
    tokio::time::sleep(Duration::from_secs(3)).await;
    Affected {
        note: "CLIENT KILL TYPE normal and pubsub on every master".into(),
        ..Affected::default()
    }
}

/// Moves `slot` key by key from `from` to `to`, a few keys at a time.
async fn migrate_slowly(slot: u16, from: &Master, to: &Master, all: &[Master]) -> usize {
    common::start_move(slot, from, to).await;
    let mut moved = 0;
    for _ in 0..40 {
        let mut keys = common::keys_in_slot(&from.addr, slot).await;
        if keys.is_empty() {
            break;
        }
        keys.truncate(1);
        common::migrate(&from.addr, &to.addr, &keys).await;
        moved += 1;
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    common::migrate_keys(slot, from, to).await;
    common::finish_move(slot, to, all).await;
    moved
}

async fn slot_migration(rig: &Rig) -> Affected {
    tokio::time::sleep(Duration::from_secs(1)).await;
    let busy = slot(rig.hot[0].as_bytes());
    let all = common::masters().await;
    let from = all.iter().find(|m| m.owns(busy)).unwrap().clone();
    let to = all.iter().find(|m| m.addr != from.addr).unwrap().clone();
    let there = migrate_slowly(busy, &from, &to, &all).await;
    let all = common::masters().await;
    let back = migrate_slowly(busy, &to, &from, &all).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    Affected {
        note: format!("slot {busy}: {there} keys moved one by one, then {back} back"),
        ..Affected::default()
    }
}

async fn hung_master(started: Instant) -> Affected {
    tokio::time::sleep(Duration::from_secs(1)).await;
    let victim = common::masters().await.remove(0);
    let port = port_of(&victim);
    let replica = replica_of(port).await;
    let watching = Arc::new(AtomicBool::new(false));
    let watcher = watch_cluster_state(started, port, watching.clone());
    node("pause", port).await;
    let promoted = wait_until("promotion", Duration::from_secs(20), async || {
        is_master(replica).await
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    node("unpause", port).await;
    let rejoined = wait_until("rejoin", Duration::from_secs(20), async || {
        !is_master(port).await
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    watching.store(true, Ordering::SeqCst);
    Affected {
        cluster_down: watcher.await.unwrap(),
        note: format!(
            "{port} paused; {replica} promoted after {:.1} s; {port} unpaused 2 s later, a replica again {:.1} s after",
            promoted.as_secs_f64(),
            rejoined.as_secs_f64()
        ),
        master: Some(victim),
        ..Affected::default()
    }
}

async fn killed_master(started: Instant) -> Affected {
    tokio::time::sleep(Duration::from_secs(1)).await;
    let victim = common::masters().await.remove(1);
    let port = port_of(&victim);
    let replica = replica_of(port).await;
    let watching = Arc::new(AtomicBool::new(false));
    let watcher = watch_cluster_state(started, port, watching.clone());
    node("kill", port).await;
    let promoted = wait_until("promotion", Duration::from_secs(20), async || {
        is_master(replica).await
    })
    .await;
    node("start", port).await;
    let _ = tokio::task::spawn_blocking(|| node_sh(&["wait-healthy", "60"])).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    watching.store(true, Ordering::SeqCst);
    Affected {
        cluster_down: watcher.await.unwrap(),
        note: format!(
            "{port} killed; {replica} promoted after {:.1} s; {port} restarted as a replica",
            promoted.as_secs_f64()
        ),
        master: Some(victim),
        ..Affected::default()
    }
}

async fn stopped_replica() -> Affected {
    tokio::time::sleep(Duration::from_secs(1)).await;
    let master = common::masters().await.remove(2);
    let replica = replica_of(port_of(&master)).await;
    node("stop", replica).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    node("start", replica).await;
    let _ = tokio::task::spawn_blocking(|| node_sh(&["wait-healthy", "60"])).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    Affected {
        note: format!("replica {replica} of {} stopped for 3 s", master.addr),
        unacknowledged: Some(master),
        ..Affected::default()
    }
}

async fn script_flush() -> Affected {
    tokio::time::sleep(Duration::from_secs(1)).await;
    on_every_master(&["SCRIPT", "FLUSH"]).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    Affected {
        note: "SCRIPT FLUSH on every master under load".into(),
        ..Affected::default()
    }
}

/// Locks and leases held by nobody: the load has stopped and released all
/// it held, so any lock key or live lease member left is an orphan. Those
/// on the failed master's slots come second: an acquisition written just
/// before the master hung or died may reach its replica while its reply
/// and its release do not, and then expires with its TTL. Every one found
/// is deleted, so the next event starts clean.
async fn orphans(namespace: &str, failed: &Option<Master>) -> (Vec<String>, Vec<String>) {
    let (mut healthy, mut on_failed) = (Vec::new(), Vec::new());
    for (key, _) in common::keys_with_pttl(namespace).await {
        let text = String::from_utf8_lossy(&key).into_owned();
        let is_lock = text.ends_with(":lock:op-lock");
        let is_lease = text.ends_with(":lease:op-lease");
        if !(is_lock || is_lease) {
            continue;
        }
        if is_lease {
            let now_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis()
                .to_string();
            let live: i64 = common::on_owner(
                &key,
                redis::cmd("ZCOUNT").arg(&key).arg(&now_ms).arg("+inf"),
            )
            .await;
            if live == 0 {
                continue;
            }
        }
        let _: i64 = common::on_owner(&key, redis::cmd("DEL").arg(&key)).await;
        if failed.as_ref().is_some_and(|m| m.owns(slot(&key))) {
            on_failed.push(text);
        } else {
            healthy.push(text);
        }
    }
    (healthy, on_failed)
}

fn judge(event: &'static str, tally: &Tally, affected: &Affected) -> (Vec<String>, usize) {
    let mut healthy = Vec::new();
    let mut allowed = 0;
    for f in tally.failures.lock().unwrap().iter() {
        let on_affected = affected.master.as_ref().is_some_and(|m| m.owns(f.slot));
        // A call that began before the window closed may end a timeout
        // later, retrying CLUSTERDOWN all the while.
        let clusterdown = affected.cluster_down.is_some_and(|(from, to)| {
            f.at + COMMAND_TIMEOUT >= from && f.at <= to + COMMAND_TIMEOUT + SCHEDULING_SLACK
        });
        let unacknowledged = f.what == "lock"
            && affected
                .unacknowledged
                .as_ref()
                .is_some_and(|m| m.owns(f.slot));
        if on_affected || clusterdown || unacknowledged {
            allowed += 1;
        } else {
            healthy.push(format!(
                "{event}: {} slot {} at {:.2} s: {}",
                f.what,
                f.slot,
                f.at.as_secs_f64(),
                f.error
            ));
        }
    }
    (healthy, allowed)
}

/// Every event in turn, each with its own tally and invariants.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "fault injection: run by scripts/test.sh"]
async fn operational_events() {
    restore_cluster();
    let _restore = RestoreOnDrop;
    let rig = Arc::new(rig().await);
    let namespace = rig.cluster.namespace().to_owned();
    let mut rows = Vec::new();
    for event in [
        "idle close",
        "CLIENT KILL",
        "slot migration",
        "hung master",
        "killed master",
        "stopped replica",
        "SCRIPT FLUSH",
    ] {
        let tally = Arc::new(Tally::default());
        let control = Arc::new(Control::default());
        let load = start_load(&rig, &tally, &control);
        let affected = match event {
            "idle close" => idle_close(&control).await,
            "CLIENT KILL" => client_kill(&control).await,
            "slot migration" => slot_migration(&rig).await,
            "hung master" => hung_master(rig.started).await,
            "killed master" => killed_master(rig.started).await,
            "stopped replica" => stopped_replica().await,
            _ => script_flush().await,
        };
        control.stop.store(true, Ordering::SeqCst);
        for task in load {
            task.await.unwrap();
        }
        // Cleanups of failed acquisitions and failed releases run in the
        // background, retried at most 2 s apart while refused.
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        let (healthy_errors, allowed_errors) = judge(event, &tally, &affected);
        let disagreements = tally.disagreements.lock().unwrap().clone();
        let (orphans, orphans_on_failed) = orphans(&namespace, &affected.master).await;
        let mut note = affected.note.clone();
        if let Some((from, to)) = affected.cluster_down {
            note += &format!(
                "; cluster_state:fail from {:.2} s to {:.2} s",
                from.as_secs_f64(),
                to.as_secs_f64()
            );
        }
        let immortal = common::keys_with_pttl(&namespace)
            .await
            .into_iter()
            .filter(|(_, pttl)| *pttl < 0)
            .count();
        rows.push(Row {
            event,
            calls: tally.calls.load(Ordering::Relaxed),
            healthy_errors,
            allowed_errors,
            cached_checked: tally.cached_checked.load(Ordering::Relaxed),
            disagreements,
            orphans,
            orphans_on_failed,
            immortal,
            note,
        });
    }
    let mut lines = vec![
        "| event | calls | errors on healthy slots | errors on the failed master / CLUSTERDOWN / unacknowledged | cached denials re-checked | disagreements | locks and leases held by nobody | the same on the failed master's slots | keys without TTL | what happened |".to_owned(),
        "|---|---|---|---|---|---|---|---|---|---|".to_owned(),
    ];
    for r in &rows {
        lines.push(format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.event,
            r.calls,
            r.healthy_errors.len(),
            r.allowed_errors,
            r.cached_checked,
            r.disagreements.len(),
            r.orphans.len(),
            r.orphans_on_failed.len(),
            r.immortal,
            r.note
        ));
    }
    for r in &rows {
        for detail in r
            .healthy_errors
            .iter()
            .chain(&r.disagreements)
            .chain(&r.orphans)
            .chain(&r.orphans_on_failed)
            .take(10)
        {
            lines.push(format!("  {}: {detail}", r.event));
        }
    }
    report("operational_events", &lines);
    for r in &rows {
        assert!(
            r.healthy_errors.is_empty(),
            "{}: errors on healthy slots",
            r.event
        );
        assert!(
            r.disagreements.is_empty(),
            "{}: cached denials Redis would admit",
            r.event
        );
        assert!(r.orphans.is_empty(), "{}: held by nobody", r.event);
        assert_eq!(r.immortal, 0, "{}: keys without TTL", r.event);
        assert!(r.calls > 1_000, "{}: only {} calls", r.event, r.calls);
    }
    assert!(
        rows.iter().map(|r| r.cached_checked).sum::<u64>() > 100,
        "too few cached denials were re-checked to mean anything"
    );
}
