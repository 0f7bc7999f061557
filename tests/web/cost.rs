//! What a page costs Redis, from the nodes' own counts: every command every
//! node ran while the page was served (`INFO commandstats` before and
//! after, on all six nodes), the least over a few tries — other clients'
//! commands only add to the counts, so the least is an upper bound on the
//! page's own.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::browser::Browser;
use super::common;

/// Open connections to every node, made once: a connection's own
/// handshake (`HELLO`, `CLIENT SETINFO`) would count otherwise.
pub struct Counter {
    nodes: Vec<(String, redis::aio::MultiplexedConnection)>,
}

/// What one page view cost: commands per `node command`, and its time in
/// the browser (request to loaded page).
#[derive(Debug, Clone)]
pub struct Cost {
    pub commands: BTreeMap<String, u64>,
    pub took: Duration,
}

impl Cost {
    /// Commands over every node.
    pub fn calls(&self) -> u64 {
        self.commands.values().sum()
    }

    /// `GETKEYSINSLOT 1, MGET 2, …`: the commands by name, over every node.
    pub fn by_command(&self) -> String {
        let mut per: BTreeMap<&str, u64> = BTreeMap::new();
        for (key, n) in &self.commands {
            let command = key.split_once(' ').map_or(key.as_str(), |(_, c)| c);
            *per.entry(command).or_default() += n;
        }
        // `cluster|slots` is `CLUSTER SLOTS`: no `|` in a markdown cell.
        per.iter()
            .map(|(c, n)| format!("{} {n}", c.replace('|', " ")))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl Counter {
    /// Counts on every node.
    pub async fn new() -> Counter {
        let mut nodes = Vec::new();
        for url in common::node_urls() {
            let addr = url.trim_start_matches("redis://").to_owned();
            let conn = common::node(&addr).await;
            nodes.push((addr, conn));
        }
        Counter { nodes }
    }

    /// Counts on the masters only: for a page whose every call goes to a
    /// master. A replica runs its master's key expiries as `DEL`s, which
    /// no page sends (a full suite's keys expiring put 7 in a subject
    /// page's count, over five tries).
    pub async fn masters() -> Counter {
        let mut nodes = Vec::new();
        for master in common::masters().await {
            let conn = common::node(&master.addr).await;
            nodes.push((master.addr, conn));
        }
        Counter { nodes }
    }

    /// `node command` → calls so far.
    async fn snapshot(&mut self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for (addr, conn) in &mut self.nodes {
            let info: String = redis::cmd("INFO")
                .arg("commandstats")
                .query_async(conn)
                .await
                .unwrap();
            for line in info.lines() {
                let Some((name, rest)) = line
                    .strip_prefix("cmdstat_")
                    .and_then(|l| l.split_once(":calls="))
                else {
                    continue;
                };
                let calls: u64 = rest.split(',').next().unwrap().parse().unwrap();
                out.insert(format!("{addr} {name}"), calls);
            }
        }
        out
    }

    /// The commands the nodes ran while the browser loaded `url`, the
    /// least of `tries` loads (by total), with the median load time.
    pub async fn page(&mut self, b: &Browser, url: &str, tries: usize) -> Cost {
        let mut least: Option<BTreeMap<String, u64>> = None;
        let mut times = Vec::new();
        for _ in 0..tries {
            let before = self.snapshot().await;
            let started = Instant::now();
            b.client.goto(url).await.unwrap();
            times.push(started.elapsed());
            let after = self.snapshot().await;
            let mut delta: BTreeMap<String, u64> = after
                .iter()
                .map(|(k, n)| (k.clone(), n - before.get(k).copied().unwrap_or(0)))
                .filter(|(_, n)| *n > 0)
                .collect();
            // The `before` snapshot's own INFO, one per node, is counted
            // in `after`.
            for (addr, _) in &self.nodes {
                let key = format!("{addr} info");
                if let Some(n) = delta.get_mut(&key) {
                    *n -= 1;
                    if *n == 0 {
                        delta.remove(&key);
                    }
                }
            }
            let total: u64 = delta.values().sum();
            if least
                .as_ref()
                .is_none_or(|l| total < l.values().sum::<u64>())
            {
                least = Some(delta);
            }
        }
        times.sort();
        Cost {
            commands: least.unwrap_or_default(),
            took: times[times.len() / 2],
        }
    }
}
