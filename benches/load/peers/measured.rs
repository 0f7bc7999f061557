//! What `--peers` measures of a side: its rounds' rates, and per decision
//! the commands and script runs the master ran and its microseconds, from
//! `INFO commandstats` around each round; a row of the report.

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

/// One side's rounds at one depth.
#[derive(Default)]
pub(super) struct Measured {
    pub(super) rates: Vec<f64>,
    /// Per decision: commands Redis ran (those a script calls included),
    /// script runs, the master's microseconds.
    pub(super) commands: Vec<f64>,
    pub(super) scripts: Vec<f64>,
    pub(super) usec: Vec<f64>,
    pub(super) denied: u64,
}

impl Measured {
    pub(super) fn add(&mut self, secs: f64, decisions: u64, denied: u64, calls: &Calls) {
        let per = |n: u64| n as f64 / decisions.max(1) as f64;
        self.rates.push(decisions as f64 / secs);
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
            "denied": self.m.denied,
        })
    }
}
