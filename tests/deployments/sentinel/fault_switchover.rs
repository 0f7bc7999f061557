//! A planned switchover and back (`SENTINEL FAILOVER`, twice) under load:
//! the primary moves to the replica, then back to the node the client last
//! saw demoted. Each switch demotes a live primary, which Sentinel does
//! with `REPLICAOF` and `CLIENT KILL TYPE normal`: the client's connection
//! to it ends, and the node answers again at once, as a replica. The
//! client must follow each switch as it follows a failover — the second
//! as quickly as the first. (Named `fault_…` so that `sentinel::fault_`
//! runs it alone, with the kill test, and `--skip fault_` leaves it out.)

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shardlimit::Counter;

use super::{SCHEDULING_SLACK, behind_a_stale_sentinel, primary_port, restore, sentinel, service};
use crate::behaviour::{SENTINEL_COMMAND_TIMEOUT as COMMAND_TIMEOUT, sentinels};

/// After a switch the sentinels name, the failures it causes must end
/// within this: the demoted primary's connection ends at once, the client
/// asks the sentinels every refresh interval (500 ms) while its primary is
/// down or refuses writes, and the promoted node may take a moment to say
/// `master` to `ROLE`.
const FOLLOW: Duration = Duration::from_secs(3);

/// `SENTINEL FAILOVER` on the first sentinel that accepts it, retried while
/// the sentinels still finish the one before (`INPROG`) or do not yet know
/// a replica fit for promotion (`NOGOODSLAVE`), for at most 30 s.
async fn ask_for_failover() {
    let started = Instant::now();
    let mut refusals = Vec::new();
    while started.elapsed() < Duration::from_secs(30) {
        for url in sentinels() {
            let Ok(client) = redis::Client::open(url.as_str()) else {
                continue;
            };
            let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
                continue;
            };
            let answer: redis::RedisResult<()> = redis::cmd("SENTINEL")
                .arg("FAILOVER")
                .arg(service())
                .query_async(&mut conn)
                .await;
            match answer {
                Ok(()) => return,
                Err(err) => refusals.push(err.to_string()),
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!(
        "no sentinel accepted SENTINEL FAILOVER in 30 s: {refusals:?}\n{}",
        failover_log()
    );
}

/// How long the sentinels may take, once one accepted `SENTINEL FAILOVER`,
/// to name the promoted replica: the promotion took about 1 s in every
/// run seen, and a sentinel gives up on it after its failover timeout
/// (3 s, `up.sh --sentinel`).
const NAMED_WITHIN: Duration = Duration::from_secs(10);

/// Switches the primary away from `from`: asks for a failover until the
/// sentinels name another primary; returns when, on `clock`, it was first
/// asked for and named, and the new primary's port.
///
/// A sentinel aborts a failover it accepted when the replica it promotes
/// does not say `master` within the failover timeout
/// (`-failover-abort-slave-timeout` in its log), which a loaded machine
/// can cause; it then stays with `from` and does not try again by itself.
/// That is no switch for the client to follow, so it is asked for again,
/// at most three times.
async fn switch_away(from: u16, clock: Instant) -> (Duration, Duration, u16) {
    let asked = clock.elapsed();
    for _ in 0..3 {
        ask_for_failover().await;
        let accepted = Instant::now();
        while accepted.elapsed() < NAMED_WITHIN {
            if let Some(port) = primary_port().await
                && port != from
            {
                return (asked, clock.elapsed(), port);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        eprintln!(
            "the sentinels still named {from} {NAMED_WITHIN:?} after accepting a \
             failover; asking again\n{}",
            failover_log()
        );
    }
    panic!(
        "three failovers away from {from} accepted, none made\n{}",
        failover_log()
    );
}

/// The sentinels' log lines about failovers and replicas (`+failover-…`,
/// `-failover-abort-…`, `+switch-master`, `+convert-to-slave`, …), the
/// last 60, for a failure's message.
fn failover_log() -> String {
    let mut lines = Vec::new();
    let dirs = std::fs::read_dir(super::state_dir()).into_iter().flatten();
    for dir in dirs.flatten() {
        let Ok(log) = std::fs::read_to_string(dir.path().join("sentinel.log")) else {
            continue;
        };
        let name = dir.file_name().to_string_lossy().into_owned();
        lines.extend(
            log.lines()
                .filter(|l| {
                    ["failover", "switch-master", "slave"]
                        .iter()
                        .any(|w| l.contains(w))
                })
                .map(|l| format!("{name}: {l}")),
        );
    }
    let skip = lines.len().saturating_sub(60);
    lines.split_off(skip).join("\n")
}

/// `INFO` `section` of the node on `port`.
async fn info(port: u16, section: &str) -> redis::RedisResult<String> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}"))?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    redis::cmd("INFO").arg(section).query_async(&mut conn).await
}

/// The `INCRBY`s the node on `port` has run: a counter add's write.
async fn incrbys(port: u16) -> u64 {
    let stats = info(port, "commandstats").await.unwrap();
    stats
        .lines()
        .find_map(|line| line.strip_prefix("cmdstat_incrby:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |calls| calls.parse().unwrap())
}

/// The `INCRBY`s the demoted primary on `old` runs from `FOLLOW` to one
/// second after the switch at `at`: none once the client follows. (The
/// sentinels reconfigure a primary demoted by `SENTINEL FAILOVER` only at
/// their next look at it, ~10 s later; until then it still says `master`
/// and takes writes, which it then drops as it resyncs from the new one.)
async fn writes_after_following(old: u16, at: Duration, clock: Instant) -> u64 {
    tokio::time::sleep((at + FOLLOW).saturating_sub(clock.elapsed())).await;
    let before = incrbys(old).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    incrbys(old).await - before
}

/// Waits until the node on `port` says `master` and has `from` streaming
/// from it again, so the next switch has a replica to promote.
async fn await_replica(port: u16, from: u16, clock: Instant) {
    loop {
        if let Ok(info) = info(port, "replication").await
            && info.contains("role:master")
            && info.contains(&format!("port={from},state=online"))
        {
            return;
        }
        assert!(
            clock.elapsed() < Duration::from_secs(60),
            "{port} never had {from} online as its replica"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// 32 tasks adding to counters, one add per millisecond each, recording
/// every failure on `clock`.
struct Load {
    failures: Arc<Mutex<Vec<(Duration, String)>>>,
    slowest: Arc<Mutex<Duration>>,
    last_ok: Arc<Mutex<Duration>>,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// What a `Load` saw.
struct Seen {
    /// (time on the clock, error) of every failed add.
    failures: Vec<(Duration, String)>,
    slowest: Duration,
    last_ok: Duration,
}

impl Load {
    fn start(counter: &Counter, clock: Instant) -> Load {
        let load = Load {
            failures: Arc::default(),
            slowest: Arc::default(),
            last_ok: Arc::default(),
            stop: Arc::default(),
            tasks: Vec::new(),
        };
        let tasks = (0..32u32)
            .map(|task| {
                let counter = counter.clone();
                let (failures, slowest, last_ok, stop) = (
                    load.failures.clone(),
                    load.slowest.clone(),
                    load.last_ok.clone(),
                    load.stop.clone(),
                );
                tokio::spawn(async move {
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        n += 1;
                        let started = Instant::now();
                        let outcome = counter.add(format!("s:{task}:{}", n % 16), 1).await;
                        let took = started.elapsed();
                        {
                            let mut slowest = slowest.lock().unwrap();
                            *slowest = (*slowest).max(took);
                        }
                        match outcome {
                            Ok(_) => *last_ok.lock().unwrap() = clock.elapsed(),
                            Err(err) => failures
                                .lock()
                                .unwrap()
                                .push((clock.elapsed(), err.to_string())),
                        }
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                })
            })
            .collect();
        Load { tasks, ..load }
    }

    async fn finish(self) -> Seen {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            task.await.unwrap();
        }
        Seen {
            failures: std::mem::take(&mut *self.failures.lock().unwrap()),
            slowest: *self.slowest.lock().unwrap(),
            last_ok: *self.last_ok.lock().unwrap(),
        }
    }
}

impl Seen {
    /// Asserts what holds after every switch in `switches` (when it was
    /// asked for, when the sentinels named the new primary): no failure
    /// past `FOLLOW` after it, no add slower than the command timeout, and
    /// adds succeeding after the last one.
    fn check(&self, switches: &[(Duration, Duration)], text: &str) {
        let late: Vec<&(Duration, String)> = self
            .failures
            .iter()
            .filter(|(at, _)| {
                // The switch this failure belongs to: the last one asked
                // for before it.
                let belongs = switches.iter().rev().find(|(asked, _)| asked <= at);
                belongs.is_some_and(|(_, named)| *at > *named + FOLLOW)
            })
            .collect();
        assert!(
            late.is_empty(),
            "{} failures came more than {FOLLOW:?} after the switch they belong to; first \
             {:?}, last {:?}\n{text}",
            late.len(),
            late.first(),
            late.last()
        );
        assert!(
            self.slowest <= COMMAND_TIMEOUT + SCHEDULING_SLACK,
            "slowest add {:?}\n{text}",
            self.slowest
        );
        let named_last = switches.last().map(|(_, named)| *named).unwrap_or_default();
        assert!(
            self.last_ok > named_last + FOLLOW + Duration::from_secs(1),
            "no success after the last switch\n{text}"
        );
    }

    fn describe(&self) -> String {
        format!(
            "failures: {} in all; first {:?}; last {:?}\nslowest add: {:?}; last success: {:?}",
            self.failures.len(),
            self.failures.first(),
            self.failures.last(),
            self.slowest,
            self.last_ok
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "fault injection: switches the Sentinel primary over and back; run alone"]
async fn a_switchover_and_back_is_followed_each_time() {
    restore();
    let cluster = sentinel("se-switch").await;
    let counter = Counter::builder(&cluster, "hits").build().unwrap();
    let first = primary_port().await.unwrap();
    let clock = Instant::now();
    let load = Load::start(&counter, clock);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (over_asked, over_at, second) = switch_away(first, clock).await;
    let stale_over = writes_after_following(first, over_at, clock).await;
    await_replica(second, first, clock).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (back_asked, back_at, third) = switch_away(second, clock).await;
    let stale_back = writes_after_following(second, back_at, clock).await;
    await_replica(third, second, clock).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let seen = load.finish().await;
    let text = format!(
        "sentinel switchover and back under 32 tasks of counter adds, command timeout \
         {COMMAND_TIMEOUT:?}\n\
         {first} -> {second}: named at {over_at:?}; {second} -> {third}: asked at \
         {back_asked:?}, named at {back_at:?}\n\
         INCRBYs the demoted primary ran from {FOLLOW:?} to {FOLLOW:?} + 1 s after each \
         switch: {stale_over}, {stale_back}\n{}\nstats: {:?}",
        seen.describe(),
        cluster.stats().nodes,
    );
    println!("{text}");
    assert_eq!(third, first, "the second switch goes back\n{text}");
    assert_eq!(
        (stale_over, stale_back),
        (0, 0),
        "the demoted primary still took the client's writes {FOLLOW:?} after the switch\n{text}"
    );
    seen.check(&[(over_asked, over_at), (back_asked, back_at)], &text);
}

/// A sentinel asked first that has not heard of the switch names the old
/// primary, which still says `master` for ~10 s: the refresh the switch
/// wakes must not install it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "fault injection: switches the Sentinel primary over; run alone"]
async fn a_sentinel_that_missed_the_switch_is_not_followed_back() {
    restore();
    let (stale, first, builder) = behind_a_stale_sentinel("se-stale").await;
    let cluster = builder
        .command_timeout(COMMAND_TIMEOUT)
        .build()
        .await
        .unwrap();
    let counter = Counter::builder(&cluster, "hits").build().unwrap();
    let clock = Instant::now();
    let load = Load::start(&counter, clock);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (asked, named, second) = switch_away(first, clock).await;
    let stale_writes = writes_after_following(first, named, clock).await;
    let asked_of_the_stale = stale.commands();
    await_replica(second, first, clock).await;
    let seen = load.finish().await;
    let text = format!(
        "sentinel switchover under 32 tasks of counter adds, a sentinel that names \
         {first} asked first\n\
         {first} -> {second}: named at {named:?}\n\
         INCRBYs the demoted primary ran from {FOLLOW:?} to {FOLLOW:?} + 1 s after the \
         switch: {stale_writes}\ncommands the stale sentinel read: {asked_of_the_stale}\n{}",
        seen.describe(),
    );
    println!("{text}");
    assert_eq!(
        stale_writes, 0,
        "the client went back to the demoted primary\n{text}"
    );
    seen.check(&[(asked, named)], &text);
}
