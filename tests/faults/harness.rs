//! What every fault scenario uses: node control through
//! `cluster-compose/node.sh`, a closed-loop load driver and its summaries,
//! and the report files under `target/faults/`.

use std::num::NonZeroU32;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use shardlimit::Quota;
use shardlimit::keys::slot;

use crate::common;

pub(crate) const NODE_TIMEOUT: Duration = Duration::from_secs(2);
pub(crate) const COMMAND_TIMEOUT: Duration = Duration::from_millis(250);
pub(crate) const SCHEDULING_SLACK: Duration = Duration::from_millis(250);

/// The cluster's first port: `SHARDLIMIT_CLUSTER_PORT` as `cluster-compose/`
/// reads it (default 7000), so the scenarios can run against a second
/// cluster beside the default one (with `SHARDLIMIT_NODES` pointing there).
pub(crate) fn port_base() -> u16 {
    std::env::var("SHARDLIMIT_CLUSTER_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(7000)
}

/// Port of node `i` (0–2 start as masters, 3–5 as their replicas).
pub(crate) fn port(i: u16) -> u16 {
    port_base() + i
}

/// `127.0.0.1:<port(i)>`.
pub(crate) fn addr(i: u16) -> String {
    format!("127.0.0.1:{}", port(i))
}

/// Every node's port.
pub(crate) fn ports() -> [u16; 6] {
    [0, 1, 2, 3, 4, 5].map(port)
}

// ---- cluster control ---------------------------------------------------------

pub(crate) fn node_sh(args: &[&str]) -> Result<String, String> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/cluster-compose/node.sh");
    let out = Command::new(script)
        .args(args)
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(format!(
            "node.sh {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

pub(crate) async fn node(action: &'static str, port: u16) {
    tokio::task::spawn_blocking(move || node_sh(&[action, &port.to_string()]).unwrap())
        .await
        .unwrap();
}

/// Brings every node back, waits for health and the standard layout, then
/// lets the cluster settle (a master killed again right after rejoining
/// takes noticeably longer to fail over).
pub(crate) fn restore_cluster() {
    for port in ports() {
        let port = port.to_string();
        match node_sh(&["status", &port]).as_deref() {
            Ok("paused") => node_sh(&["unpause", &port]).map(drop),
            Ok("stopped") => node_sh(&["start", &port]).map(drop),
            _ => Ok(()),
        }
        .unwrap_or_else(|e| eprintln!("restore: {e}"));
    }
    node_sh(&["wait-healthy", "90"]).unwrap();
    node_sh(&["rebalance-roles", "90"]).unwrap();
    std::thread::sleep(Duration::from_secs(5));
}

/// When a whole-cluster outage happened, since the scenario's start.
pub(crate) struct Outage {
    /// Every node killed.
    pub(crate) down_at: Duration,
    /// Every node started again.
    pub(crate) up_at: Duration,
    /// The cluster answered healthy.
    pub(crate) healthy_at: Duration,
}

/// Kills all six nodes at once (the cluster is down once the last one is:
/// a master still alive a few hundred ms into the kills keeps deciding),
/// starts them again after `down_for` and waits until the cluster is
/// healthy.
pub(crate) async fn whole_cluster_down(t0: Instant, down_for: Duration) -> Outage {
    futures::future::join_all(ports().map(|port| node("kill", port))).await;
    let down_at = t0.elapsed();
    tokio::time::sleep(down_for).await;
    let up_at = t0.elapsed();
    for port in ports() {
        node("start", port).await;
    }
    tokio::task::spawn_blocking(|| node_sh(&["wait-healthy", "90"]).unwrap())
        .await
        .unwrap();
    Outage {
        down_at,
        up_at,
        healthy_at: t0.elapsed(),
    }
}

/// Restores the cluster when the scenario ends, passed or failed.
pub(crate) struct RestoreOnDrop;

impl Drop for RestoreOnDrop {
    fn drop(&mut self) {
        restore_cluster();
    }
}

/// Whether `port` is a master now, as the node itself says.
pub(crate) async fn is_master(port: u16) -> bool {
    let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{port}")) else {
        return false;
    };
    let probe = async {
        let mut conn = client.get_multiplexed_async_connection().await.ok()?;
        let role: Vec<redis::Value> = redis::cmd("ROLE").query_async(&mut conn).await.ok()?;
        redis::from_redis_value::<String>(role.first()?.clone()).ok()
    };
    tokio::time::timeout(Duration::from_millis(500), probe)
        .await
        .ok()
        .flatten()
        .as_deref()
        == Some("master")
}

/// `n` subjects whose slots the master on `port` owns now.
pub(crate) async fn subjects_on(port: u16, n: usize) -> Vec<String> {
    let master = common::masters()
        .await
        .into_iter()
        .find(|m| m.addr == format!("127.0.0.1:{port}"))
        .unwrap();
    (0..)
        .map(|i| format!("subject-{i}"))
        .filter(|s| master.owns(slot(s.as_bytes())))
        .take(n)
        .collect()
}

// ---- load and its record -------------------------------------------------------

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Outcome {
    Decided,
    Bypassed,
    Failed(String),
}

#[derive(Clone, Debug)]
pub(crate) struct Sample {
    /// When the call ended, since the scenario's start.
    pub(crate) ended: Duration,
    pub(crate) took: Duration,
    pub(crate) group: &'static str,
    pub(crate) outcome: Outcome,
}

/// Calls `call(task)` in a loop on `tasks` tasks until `stop`, recording
/// every call. A 1 ms pause between calls keeps 100+ tasks from starving the
/// Redis containers of CPU on a 2-core machine.
pub(crate) fn load<F, Fut>(
    group: &'static str,
    tasks: usize,
    t0: Instant,
    stop: Arc<AtomicBool>,
    call: F,
) -> tokio::task::JoinHandle<Vec<Sample>>
where
    F: Fn(usize) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = Outcome> + Send,
{
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let (stop, call) = (stop.clone(), call.clone());
            tokio::spawn(async move {
                let mut samples = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    let outcome = call(task).await;
                    samples.push(Sample {
                        ended: t0.elapsed(),
                        took: started.elapsed(),
                        group,
                        outcome,
                    });
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                samples
            })
        })
        .collect();
    tokio::spawn(async move {
        let mut all = Vec::new();
        for h in handles {
            all.extend(h.await.unwrap());
        }
        all
    })
}

pub(crate) fn check_outcome(result: shardlimit::Result<shardlimit::Decision>) -> Outcome {
    match result {
        Ok(d) if d.bypassed.is_some() => Outcome::Bypassed,
        Ok(_) => Outcome::Decided,
        Err(e) => Outcome::Failed(e.to_string()),
    }
}

/// What a run of one group looked like around a fault at `fault`.
#[derive(Debug)]
#[allow(dead_code)] // read through Debug in the reports
pub(crate) struct Summary {
    pub(crate) calls: usize,
    pub(crate) failures: usize,
    pub(crate) bypasses: usize,
    pub(crate) slowest: Duration,
    /// End of the last call that was not a decision, since the fault.
    pub(crate) last_trouble_after_fault: Option<Duration>,
    /// Decisions made after the last trouble.
    pub(crate) decisions_after: usize,
    /// Each distinct failure with when it first and last happened.
    pub(crate) troubles: Vec<(String, Duration, Duration, usize)>,
}

pub(crate) fn summarize(samples: &[Sample], group: &str, fault: Duration) -> Summary {
    let mine: Vec<&Sample> = samples.iter().filter(|s| s.group == group).collect();
    let trouble = |s: &&&Sample| s.outcome != Outcome::Decided;
    let last_trouble = mine.iter().filter(trouble).map(|s| s.ended).max();
    Summary {
        calls: mine.len(),
        failures: mine
            .iter()
            .filter(|s| matches!(s.outcome, Outcome::Failed(_)))
            .count(),
        bypasses: mine
            .iter()
            .filter(|s| s.outcome == Outcome::Bypassed)
            .count(),
        slowest: mine.iter().map(|s| s.took).max().unwrap_or_default(),
        last_trouble_after_fault: last_trouble.map(|t| t.saturating_sub(fault)),
        decisions_after: mine
            .iter()
            .filter(|s| last_trouble.is_none_or(|t| s.ended > t))
            .count(),
        troubles: {
            let mut seen: Vec<(String, Duration, Duration, usize)> = Vec::new();
            for s in mine.iter().filter(trouble) {
                let what = match &s.outcome {
                    Outcome::Failed(e) => e.clone(),
                    other => format!("{other:?}"),
                };
                let at = s.ended.saturating_sub(fault);
                match seen.iter_mut().find(|t| t.0 == what) {
                    Some(t) => {
                        t.2 = at;
                        t.3 += 1;
                    }
                    None => seen.push((what, at, at, 1)),
                }
            }
            seen
        },
    }
}

pub(crate) fn report(scenario: &str, lines: &[String]) {
    let text = lines.join("\n");
    println!("== {scenario}\n{text}");
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/target/faults");
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(format!("{dir}/{scenario}.txt"), text + "\n").unwrap();
}

pub(crate) fn cluster_builder(prefix: &str) -> shardlimit::cluster::ClusterBuilder {
    common::builder(prefix).command_timeout(COMMAND_TIMEOUT)
}

pub(crate) fn big_quota() -> Quota {
    // Never denies under test load: every call is a decision when Redis answers.
    Quota::per_second(NonZeroU32::new(1_000_000).unwrap())
}
