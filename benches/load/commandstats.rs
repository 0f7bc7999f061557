//! `INFO commandstats` of every master, before and after a round: the
//! commands Redis ran, from every client — the bench's and anyone else's
//! on the same cluster, which is why the attack report puts the client's
//! own count of script calls next to it; and what a side cost Redis.

use std::collections::BTreeMap;

use redis::aio::MultiplexedConnection;
use serde_json::json;
use shardlimit::Cluster;

use crate::compare::{Probe, Side};
use crate::drive::Round;
use crate::report::median;

/// Calls and microseconds per command, summed over the masters.
#[derive(Clone, Default, Debug)]
pub(crate) struct Calls(BTreeMap<String, Count>);

#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct Count {
    calls: u64,
    usec: u64,
}

/// Script runs: `EVALSHA` and `EVAL` (and their read-only forms).
const SCRIPTS: [&str; 4] = ["evalsha", "eval", "evalsha_ro", "eval_ro"];

impl Calls {
    pub(crate) fn scripts(&self) -> u64 {
        self.sum(|c| SCRIPTS.contains(&c), |n| n.calls)
    }

    /// Microseconds the masters spent running scripts (the commands the
    /// scripts call included).
    pub(crate) fn script_usec(&self) -> u64 {
        self.sum(|c| SCRIPTS.contains(&c), |n| n.usec)
    }

    /// Every command but the `INFO`s that read these counts; the commands a
    /// script calls count too.
    pub(crate) fn total(&self) -> u64 {
        self.sum(|c| c != "info", |n| n.calls)
    }

    /// Microseconds the masters spent in every command but the `INFO`s
    /// (a script's time includes the commands it calls, which count again
    /// under their own names: for script runs read
    /// [`script_usec`](Self::script_usec)).
    pub(crate) fn total_usec(&self) -> u64 {
        self.sum(|c| c != "info", |n| n.usec)
    }

    /// The counts of one node's `INFO commandstats`.
    pub(crate) fn of_info(info: &str) -> Calls {
        let mut calls = Calls::default();
        for (command, n) in info.lines().filter_map(parse) {
            calls.add_one(command, n);
        }
        calls
    }

    /// Adds another node's counts to these.
    fn add(&mut self, other: &Calls) {
        for (command, n) in &other.0 {
            self.add_one(command.clone(), *n);
        }
    }

    fn add_one(&mut self, command: String, n: Count) {
        let sum = self.0.entry(command).or_default();
        sum.calls += n.calls;
        sum.usec += n.usec;
    }

    fn sum(&self, which: impl Fn(&str) -> bool, field: impl Fn(&Count) -> u64) -> u64 {
        self.0
            .iter()
            .filter(|(c, _)| which(c))
            .map(|(_, n)| field(n))
            .sum()
    }

    /// The calls made between `before` and this snapshot.
    pub(crate) fn since(&self, before: &Calls) -> Calls {
        Calls(
            self.0
                .iter()
                .map(|(c, n)| {
                    let was = before.0.get(c).copied().unwrap_or_default();
                    let count = Count {
                        calls: n.calls.saturating_sub(was.calls),
                        usec: n.usec.saturating_sub(was.usec),
                    };
                    (c.clone(), count)
                })
                .collect(),
        )
    }
}

/// Connections to the masters, kept open so that reading the counts adds
/// nothing but the `INFO` itself.
pub(crate) struct Masters {
    cluster: Cluster,
    masters: Vec<String>,
    conns: Vec<MultiplexedConnection>,
}

impl Masters {
    pub(crate) async fn connect(cluster: &Cluster) -> Self {
        let masters = masters(cluster).await;
        let mut conns = Vec::new();
        for m in &masters {
            let client = redis::Client::open(format!("redis://{m}")).unwrap();
            conns.push(client.get_multiplexed_async_connection().await.unwrap());
        }
        Masters {
            cluster: cluster.clone(),
            masters,
            conns,
        }
    }

    /// The counts now, summed over the masters; `None` if the masters are
    /// not the ones connected to any more (a failover: counts of a round
    /// across it mean nothing).
    pub(crate) async fn snapshot(&mut self) -> Option<Calls> {
        if masters(&self.cluster).await != self.masters {
            eprintln!("\nthe masters changed (a failover?): no command counts");
            return None;
        }
        let mut calls = Calls::default();
        for conn in &mut self.conns {
            let info: String = redis::cmd("INFO")
                .arg("commandstats")
                .query_async(conn)
                .await
                .ok()?;
            calls.add(&Calls::of_info(&info));
        }
        Some(calls)
    }
}

/// [`Masters::snapshot`] when the masters are measured (`None` when not).
pub(crate) async fn snapshot(masters: Option<&mut Masters>) -> Option<Calls> {
    match masters {
        Some(m) => m.snapshot().await,
        None => None,
    }
}

async fn masters(cluster: &Cluster) -> Vec<String> {
    let topology = cluster.topology().await.unwrap();
    topology
        .shards
        .iter()
        .map(|s| s.master.to_string())
        .collect()
}

/// `cmdstat_evalsha:calls=10293,usec=525091,...` → (`evalsha`, 10293
/// calls, 525091 µs).
fn parse(line: &str) -> Option<(String, Count)> {
    let (command, fields) = line.trim_end().strip_prefix("cmdstat_")?.split_once(':')?;
    let field = |name: &str| {
        fields
            .split(',')
            .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))?
            .parse()
            .ok()
    };
    let count = Count {
        calls: field("calls")?,
        usec: field("usec")?,
    };
    Some((command.to_owned(), count))
}

/// `INFO commandstats` of the masters around each round.
pub(crate) struct CommandProbe<'m> {
    masters: &'m mut Masters,
    before: Option<Calls>,
    /// Per side, each round's calls (`None`: not measured).
    rounds: [Vec<Option<Calls>>; 2],
}

impl<'m> CommandProbe<'m> {
    pub(crate) fn new(masters: &'m mut Masters) -> Self {
        CommandProbe {
            masters,
            before: None,
            rounds: [Vec::new(), Vec::new()],
        }
    }

    /// What each side's rounds cost Redis.
    pub(crate) fn costs(&self, a: &Side, b: &Side) -> [Costs; 2] {
        [
            Costs::new(a, &self.rounds[0]),
            Costs::new(b, &self.rounds[1]),
        ]
    }
}

impl Probe for CommandProbe<'_> {
    async fn before(&mut self) {
        self.before = self.masters.snapshot().await;
    }

    async fn after(&mut self, side: usize, _: &Round) {
        let after = self.masters.snapshot().await;
        let delta = match (&self.before, after) {
            (Some(before), Some(after)) => Some(after.since(before)),
            _ => None,
        };
        self.rounds[side].push(delta);
    }
}

/// What one side cost Redis: medians of rounds.
pub(crate) struct Costs {
    pub(crate) server_per_sec: f64,
    pub(crate) server_per_decision: f64,
    pub(crate) server_usec_per_decision: f64,
    pub(crate) commands_per_sec: f64,
    pub(crate) client_per_sec: f64,
    pub(crate) client_per_decision: f64,
    pub(crate) attacker_per_decision: f64,
}

impl Costs {
    fn new(side: &Side, calls: &[Option<Calls>]) -> Self {
        let decisions = |i: usize| side.outcomes[i].decisions().max(1) as f64;
        let server = |f: &dyn Fn(&Calls) -> u64, per: &dyn Fn(usize) -> f64| {
            let v: Vec<f64> = calls
                .iter()
                .enumerate()
                .filter_map(|(i, c)| Some(f(c.as_ref()?) as f64 / per(i)))
                .collect();
            median(&v)
        };
        let client = |per: &dyn Fn(usize) -> f64| {
            let v: Vec<f64> = (0..side.outcomes.len())
                .map(|i| side.outcomes[i].sent() as f64 / per(i))
                .collect();
            median(&v)
        };
        let secs = |i: usize| side.secs[i];
        // The attackers: everything but the normal users, all rounds.
        let normal = side.normal.as_ref().map(|n| n.outcome).unwrap_or_default();
        let attacker_sent = side.outcome.sent() - normal.sent();
        let attacker_decisions = side.outcome.decisions() - normal.decisions();
        Costs {
            server_per_sec: server(&Calls::scripts, &secs),
            server_per_decision: server(&Calls::scripts, &decisions),
            server_usec_per_decision: server(&Calls::script_usec, &decisions),
            commands_per_sec: server(&Calls::total, &secs),
            client_per_sec: client(&secs),
            client_per_decision: client(&decisions),
            attacker_per_decision: attacker_sent as f64 / attacker_decisions.max(1) as f64,
        }
    }

    pub(crate) fn json(&self) -> serde_json::Value {
        json!({
            "server_script_runs_per_sec": self.server_per_sec,
            "server_script_runs_per_decision": self.server_per_decision,
            "server_script_usec_per_decision": self.server_usec_per_decision,
            "server_commands_per_sec": self.commands_per_sec,
            "client_script_calls_per_sec": self.client_per_sec,
            "client_script_calls_per_decision": self.client_per_decision,
            "attacker_script_calls_per_attacker_decision": self.attacker_per_decision,
        })
    }
}
