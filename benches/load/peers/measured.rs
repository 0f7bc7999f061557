//! What `--peers` measures of a side: its rounds' rates, and per decision
//! the commands and script runs the master ran and its microseconds, from
//! `INFO commandstats` around each round; a row of the report.

use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use serde_json::json;

use super::Set;
use crate::commandstats::Calls;
use crate::report::median;

pub(super) async fn commandstats(conn: &mut MultiplexedConnection) -> Calls {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    Calls::of_info(&info)
}

/// How often [`settle`] samples the master's CPU time.
const SAMPLE: Duration = Duration::from_millis(20);
/// Samples a quiet stretch spans: 100 ms, a period of the server's cron
/// (`hz` 10), which is where it expires keys when no client calls. A
/// shorter stretch could fall between two runs of it.
const WINDOW: usize = 5;
/// The master is quiet when it used under this share of a stretch's time
/// on the CPU (an idle one uses 1-3%; expiring keys when no client calls,
/// up to a quarter).
const QUIET: f64 = 0.1;
/// The master is done expiring the round's keys when it expired fewer than
/// this many in a stretch, and holds at most this many more keys with a
/// time to live than when the round started.
const EXPIRING: u64 = 50;
/// [`settle`] gives up waiting after this long.
const SETTLE_MAX: Duration = Duration::from_secs(3);

/// Waits until the master has finished the work a side's round left it:
/// until the first stretch of [`WINDOW`] samples in which it used under
/// [`QUIET`] of the time on the CPU (its threads together), expired fewer
/// than [`EXPIRING`] keys and ran no AOF rewrite, once it holds no more
/// keys with a time to live than at the round's `start` (give or take
/// [`EXPIRING`]); at most [`SETTLE_MAX`]. Returns the sample that
/// stretch starts with (its CPU time is what the master had used by then)
/// and how long the wait was, up to that sample.
///
/// A round leaves work behind that its own time does not show: keys to
/// expire (redis_rate's GCRA keys live a second at least; ours until their
/// bucket is full again, a millisecond at the default quota), the AOF to
/// write and rewrite (the test cluster appends every write), the
/// replication stream. Left to the next round, that work is paid by
/// whichever side runs next, and in an 11-round run with two sides
/// alternating, one order comes 6 times and the other 5: the median of
/// the rounds' ratios then fell in the one cluster or the other (a GCRA
/// run at depth 16 measured the two sides' rounds alternating between
/// about 80k and 45k decisions per second, in opposite phase, and printed
/// 0.70 where the sides' mean rates were 1.19 apart the other way). A
/// quiet CPU alone is not enough: redis_rate's keys, written with a
/// second to live, begin to expire a quarter of a second after its round,
/// when the master has gone quiet, and the next side's round expired them
/// (ours counted 0.70 and 1.04 expired keys per decision at depth 1 and
/// 16, redis_rate's 0.12 and 0.10). So the next side starts on a quiet
/// master that has expired the keys the round left to expire soon (keys
/// that live longer than [`SETTLE_MAX`], a fixed window's, are left: a
/// round that creates them waits that long), and what the work cost shows
/// in the side's master CPU per decision, which runs to the quiet
/// stretch. It is not in the side's rate: wall time is no measure of it
/// (the server expires keys at a quarter of the CPU when no client calls).
pub(super) async fn settle(
    conn: &mut MultiplexedConnection,
    start: &ServerSample,
) -> (ServerSample, Duration) {
    let started = Instant::now();
    let mut samples = vec![master_sample(conn).await];
    loop {
        tokio::time::sleep(SAMPLE).await;
        samples.push(master_sample(conn).await);
        if let Some(from) = samples.len().checked_sub(WINDOW + 1) {
            let stretch = &samples[from..];
            let (first, last) = (&stretch[0], &stretch[WINDOW]);
            let used = last.cpu_secs - first.cpu_secs;
            let span = last.at.duration_since(first.at).as_secs_f64();
            let expired = last.expired.saturating_sub(first.expired);
            let expiring = last.expires > start.expires + EXPIRING;
            if used < QUIET * span
                && expired < EXPIRING
                && !expiring
                && !stretch.iter().any(|s| s.rewriting)
            {
                let waited = first.at.saturating_duration_since(started);
                return (samples.swap_remove(from), waited);
            }
        }
        if started.elapsed() >= SETTLE_MAX {
            let waited = started.elapsed();
            return (samples.pop().expect("sampled"), waited);
        }
    }
}

/// What [`settle`] reads of the master at one moment.
pub(super) struct ServerSample {
    at: Instant,
    /// `used_cpu_user` + `used_cpu_sys`: every thread of the server.
    cpu_secs: f64,
    /// An AOF rewrite (or RDB save) is running in a child process.
    rewriting: bool,
    /// `expired_keys`: keys the server has expired since it started.
    expired: u64,
    /// Keys with a time to live (`INFO keyspace`, db0).
    expires: u64,
}

pub(super) async fn master_sample(conn: &mut MultiplexedConnection) -> ServerSample {
    let info: String = redis::cmd("INFO")
        .arg("cpu")
        .arg("persistence")
        .arg("stats")
        .arg("keyspace")
        .query_async(conn)
        .await
        .unwrap();
    let at = Instant::now();
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .unwrap_or_else(|| panic!("INFO has no {name}"))
            .trim()
    };
    let secs = |name: &str| field(name).parse::<f64>().unwrap();
    ServerSample {
        at,
        cpu_secs: secs("used_cpu_user") + secs("used_cpu_sys"),
        rewriting: field("aof_rewrite_in_progress") == "1"
            || field("rdb_bgsave_in_progress") == "1",
        expired: field("expired_keys").parse().unwrap(),
        // `db0:keys=N,expires=M,avg_ttl=T`; no line while db0 is empty.
        expires: info
            .lines()
            .find_map(|l| l.strip_prefix("db0:"))
            .and_then(|db| db.split(',').find_map(|kv| kv.strip_prefix("expires=")))
            .map_or(0, |n| n.trim().parse().unwrap()),
    }
}

/// One side's rounds at one depth.
#[derive(Default)]
pub(super) struct Measured {
    pub(super) rates: Vec<f64>,
    /// Per decision: commands Redis ran (those a script calls included),
    /// script runs, the master's microseconds.
    pub(super) commands: Vec<f64>,
    pub(super) scripts: Vec<f64>,
    pub(super) usec: Vec<f64>,
    /// The master's CPU time per decision from the round's start until it
    /// was quiet again (see [`settle`]), microseconds: every thread, and
    /// the work the round left, which `usec` leaves out.
    pub(super) cpu_usec: Vec<f64>,
    /// Keys the master expired per decision, from the round's start until
    /// it was quiet again: those of the round's own keys that lived less
    /// than [`SETTLE_MAX`] after it.
    pub(super) expired: Vec<f64>,
    /// How long the master went on working after each round, ms.
    pub(super) settle_ms: Vec<f64>,
    pub(super) denied: u64,
}

impl Measured {
    /// A round of `secs` with `decisions`: `calls` from `INFO commandstats`
    /// around it, the master's CPU time at its start and once it was quiet
    /// again, `settled` after its end.
    pub(super) fn add(
        &mut self,
        secs: f64,
        decisions: u64,
        denied: u64,
        calls: &Calls,
        cpu: (&ServerSample, &ServerSample),
        settled: Duration,
    ) {
        let per = |n: u64| n as f64 / decisions.max(1) as f64;
        self.rates.push(decisions as f64 / secs);
        self.cpu_usec
            .push((cpu.1.cpu_secs - cpu.0.cpu_secs) * 1e6 / decisions.max(1) as f64);
        self.expired
            .push(cpu.1.expired.saturating_sub(cpu.0.expired) as f64 / decisions.max(1) as f64);
        self.settle_ms.push(settled.as_secs_f64() * 1e3);
        self.commands.push(per(calls.total()));
        // A script's time includes the commands it calls, which count
        // again under their own names.
        let usec = if calls.scripts() > 0 {
            calls.script_usec()
        } else {
            calls.total_usec()
        };
        self.scripts.push(per(calls.scripts()));
        self.usec.push(per(usec));
        self.denied += denied;
    }

    pub(super) fn rate(&self) -> f64 {
        median(&self.rates)
    }
}

pub(super) struct Row {
    /// Its set's index.
    pub(super) set: usize,
    pub(super) name: &'static str,
    pub(super) depth: usize,
    /// Median of the rounds' ratios to its set's reference side.
    pub(super) ratio: f64,
    pub(super) m: Measured,
}

impl Row {
    pub(super) fn json(&self, sets: &[Set]) -> serde_json::Value {
        let set = &sets[self.set];
        json!({
            "side": self.name,
            "set": set.what,
            "depth": self.depth,
            "decisions_per_sec_rounds": self.m.rates,
            "decisions_per_sec_median": self.m.rate(),
            "over_reference": set.sides[set.reference].name,
            "over_reference_median_of_rounds": self.ratio,
            "redis_commands_per_decision": median(&self.m.commands),
            "script_runs_per_decision": median(&self.m.scripts),
            "master_usec_per_decision": median(&self.m.usec),
            "master_cpu_usec_per_decision": median(&self.m.cpu_usec),
            "expired_keys_per_decision": median(&self.m.expired),
            "settle_ms_rounds": self.m.settle_ms,
            "denied": self.m.denied,
        })
    }
}
