//! 100,000 limiters for the paging test: written in pipelines straight to
//! their masters (keys from the library's key builder, each with a TTL),
//! paged through in the browser, then deleted.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use fantoccini::Locator;
use shardlimit::Cluster;
use shardlimit::admin::{MAX_PAGE_ROUNDS, PAGE_SCANS_PER_MASTER};
use shardlimit::keys::{KeyId, slot};

use super::browser::Browser;
use super::common;

/// Keys per pipeline.
const BATCH: usize = 2000;

fn keys(cluster: &Cluster, subjects: &[String]) -> Vec<Vec<u8>> {
    let id = KeyId::new("fw", "bulk").unwrap();
    subjects
        .iter()
        .map(|s| cluster.keys().key(s, &id).unwrap())
        .collect()
}

/// Runs `queue(pipe, key)` for every key, in pipelines on each key's master.
async fn on_masters(keys: Vec<Vec<u8>>, queue: fn(&mut redis::Pipeline, &[u8])) {
    let masters = common::masters().await;
    let mut per_master: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
    for key in keys {
        let s = slot(&key);
        let owner = masters.iter().find(|m| m.owns(s)).unwrap();
        per_master.entry(owner.addr.clone()).or_default().push(key);
    }
    let tasks: Vec<_> = per_master
        .into_iter()
        .map(|(addr, keys)| {
            tokio::spawn(async move {
                let mut conn = common::node(&addr).await;
                for chunk in keys.chunks(BATCH) {
                    let mut pipe = redis::pipe();
                    for key in chunk {
                        queue(&mut pipe, key);
                    }
                    let _: () = pipe.query_async(&mut conn).await.unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
}

/// `n` fixed-window limiters (`fw bulk`, one unit used, 15 minutes to
/// live) over subjects `b0` … `b{n-1}`.
pub async fn populate(cluster: &Cluster, n: usize) -> Vec<String> {
    let subjects: Vec<String> = (0..n).map(|i| format!("b{i}")).collect();
    let started = Instant::now();
    on_masters(keys(cluster, &subjects), |pipe, key| {
        pipe.cmd("SET")
            .arg(key)
            .arg(1)
            .arg("PX")
            .arg(900_000)
            .ignore();
    })
    .await;
    eprintln!("populated {n} limiters in {:?}", started.elapsed());
    subjects
}

pub async fn delete(cluster: &Cluster, subjects: &[String]) {
    on_masters(keys(cluster, subjects), |pipe, key| {
        pipe.cmd("DEL").arg(key).ignore();
    })
    .await;
}

/// What paging through showed.
pub struct Report {
    pub seen: Vec<String>,
    pub pages: usize,
    page_times: Vec<Duration>,
    server_times: Vec<Duration>,
    pub max_scan_calls: u32,
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times.get(times.len() / 2).copied().unwrap_or_default()
}

impl Report {
    /// Median time of a page load in the browser (request to loaded DOM).
    pub fn median_page(&self) -> Duration {
        median(self.page_times.clone())
    }
    /// Median time the server took for a page (as the page says).
    pub fn median_server(&self) -> Duration {
        median(self.server_times.clone())
    }
}

/// `35 ms` or `1.2 s`, as the page's cost line says.
pub fn parse_duration(text: &str) -> Duration {
    let text = text.trim().trim_end_matches('.');
    if let Some(ms) = text.strip_suffix(" ms") {
        Duration::from_millis(ms.parse().unwrap())
    } else if let Some(s) = text.strip_suffix(" s") {
        Duration::from_secs_f64(s.parse().unwrap())
    } else {
        panic!("not a short duration: {text}")
    }
}

/// Subjects of the `a.subject` links in an HTML source.
pub fn subjects_in(source: &str) -> Vec<String> {
    source
        .split("class=\"subject\"")
        .skip(1)
        .map(|rest| {
            let text = &rest[rest.find('>').unwrap() + 1..];
            text[..text.find('<').unwrap()].to_owned()
        })
        .collect()
}

/// Opens the bulk limiters and follows "Next page" to the end of the walk.
pub async fn page_through(b: &Browser, base: &str) -> Report {
    let origin = &base[..base.find("/limits").unwrap()];
    let mut url = format!("{base}/limiters?kind=fw&name=bulk");
    let mut report = Report {
        seen: Vec::new(),
        pages: 0,
        page_times: Vec::new(),
        server_times: Vec::new(),
        max_scan_calls: 0,
    };
    loop {
        let started = Instant::now();
        b.client.goto(&url).await.unwrap();
        report.page_times.push(started.elapsed());
        report.pages += 1;
        let source = b.client.source().await.unwrap();
        report.seen.extend(subjects_in(&source));
        let cost = b
            .client
            .find(Locator::Css("#cost"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        // "N primitives on this page; K SCAN calls; T."
        let parts: Vec<&str> = cost.split("; ").collect();
        let calls: u32 = parts[1].split(' ').next().unwrap().parse().unwrap();
        report.max_scan_calls = report.max_scan_calls.max(calls);
        report.server_times.push(parse_duration(parts[2]));
        if report.pages == 2 {
            b.screenshot("limiters-page-2").await;
        }
        match b.client.find(Locator::Css("a#next")).await {
            Ok(next) => url = format!("{origin}{}", next.attr("href").await.unwrap().unwrap()),
            Err(_) => {
                b.client.find(Locator::Css("#end")).await.unwrap();
                return report;
            }
        }
        assert!(report.pages < 10_000, "the walk does not end");
    }
}

pub fn assert_exactly_once(seen: &[String], subjects: &[String]) {
    let mut counts: HashMap<&str, u32> = HashMap::new();
    for s in seen {
        *counts.entry(s).or_default() += 1;
    }
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).take(5).collect();
    assert!(twice.is_empty(), "seen more than once: {twice:?}");
    let missing: Vec<_> = subjects
        .iter()
        .filter(|s| !counts.contains_key(s.as_str()))
        .take(5)
        .collect();
    assert!(missing.is_empty(), "never seen: {missing:?}");
    assert_eq!(seen.len(), subjects.len());
}

/// `cmdstat_scan` calls per master, from `INFO commandstats`.
pub async fn scan_calls() -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for m in common::masters().await {
        let mut conn = common::node(&m.addr).await;
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut conn)
            .await
            .unwrap();
        let calls = info
            .lines()
            .find_map(|l| l.strip_prefix("cmdstat_scan:calls="))
            .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap());
        out.insert(m.addr, calls);
    }
    out
}

/// A page whose filter matches nothing keeps walking for its time budget,
/// and never past its bound of `MAX_PAGE_ROUNDS × PAGE_SCANS_PER_MASTER`
/// SCANs per master: the masters' own command counts say so. Other
/// clients' SCANs only add to those counts, so the least of a few tries is
/// an upper bound on this page's own.
pub async fn assert_scan_bound(b: &Browser, base: &str) {
    let masters = common::masters().await.len();
    let mut least: Option<BTreeMap<String, u64>> = None;
    for _ in 0..5 {
        let before = scan_calls().await;
        let page = b
            .json(&format!("{base}/api/limiters?kind=lock&name=nothing-here"))
            .await;
        let after = scan_calls().await;
        assert_eq!(page["limiters"].as_array().unwrap().len(), 0);
        assert!(
            page["next"].is_string(),
            "the walk is not over after one page"
        );
        let reported = page["scan_calls"].as_u64().unwrap();
        let rounds = page["rounds"].as_u64().unwrap();
        assert!((1..=u64::from(MAX_PAGE_ROUNDS)).contains(&rounds), "{page}");
        assert_eq!(
            reported,
            rounds * u64::from(PAGE_SCANS_PER_MASTER) * masters as u64,
            "every round spends its SCANs on a filter that matches nothing"
        );
        let delta: BTreeMap<String, u64> = after
            .iter()
            .map(|(m, n)| (m.clone(), n - before[m]))
            .collect();
        assert!(
            delta.values().sum::<u64>() >= reported,
            "{delta:?} < {reported}"
        );
        least = Some(match least {
            None => delta,
            Some(l) => l
                .into_iter()
                .map(|(m, n)| (m.clone(), n.min(delta[&m])))
                .collect(),
        });
    }
    for (master, calls) in least.unwrap() {
        assert!(
            (u64::from(PAGE_SCANS_PER_MASTER)..=u64::from(MAX_PAGE_ROUNDS * PAGE_SCANS_PER_MASTER))
                .contains(&calls),
            "{calls} SCAN calls on {master} for one page"
        );
    }
}
