//! "Throttled now": the subjects each limiter denied most in the last
//! minutes, merged from every process's report.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use crate::cluster::Cluster;
use crate::error::Result;
use crate::throttled::publish;
use crate::throttled::recorder::{CAPACITY, NameReport};
use crate::throttled::sketch::Summary;

/// What every process reporting throttled subjects published, merged: see
/// [`throttled`].
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct Throttled {
    /// The processes whose reports were read (one per
    /// [`Cluster`] handle with a reporting limiter).
    pub processes: usize,
    /// One entry per limiter kind and name, by kind then name.
    pub names: Vec<ThrottledName>,
}

/// One limiter kind and name in [`Throttled`].
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct ThrottledName {
    /// The limiter's kind (`gcra`, `fw`, ...).
    pub kind: String,
    /// Its name.
    pub name: String,
    /// The processes reporting it.
    pub processes: usize,
    /// The window the denial counts cover (the longest any process
    /// reported: each counts between five sixths of its window and all of
    /// it).
    pub window: Duration,
    /// How long the denial counts cover: since the oldest sketch of any
    /// process started, at most `window` (less while the processes have
    /// reported for less than a window).
    pub covered: Duration,
    /// How long the per-second rates cover: each process's last
    /// publication interval (about 5 s; the longest of them).
    pub interval: Duration,
    /// Admitted requests per second, summed over the processes (each
    /// measured over its last publication interval, about 5 s).
    pub allowed_per_sec: f64,
    /// Requests Redis denied per second.
    pub denied_per_sec: f64,
    /// Requests the deny cache denied per second.
    pub cached_per_sec: f64,
    /// Requests admitted without Redis (fail-open, local policy) per second.
    pub bypassed_per_sec: f64,
    /// Denials in the window, every subject together.
    pub denials: u64,
    /// A subject not listed was denied at most this many times in the
    /// window (at most `denials / 100` for one process).
    pub floor: u64,
    /// The most denied subjects, most first, at most 100.
    pub subjects: Vec<ThrottledSubject>,
}

/// One subject of a [`ThrottledName`].
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct ThrottledSubject {
    /// The subject, as checked.
    pub subject: Vec<u8>,
    /// Its denials in the window: never fewer than the true count, and at
    /// most `error` more.
    pub denials: u64,
    /// How much `denials` may over-count.
    pub error: u64,
    /// Its denials per second now: over each process's last publication
    /// interval (its name's [`interval`](ThrottledName::interval), about
    /// 5 s), summed over the processes. Not the window's average, which
    /// reads a subject denied 20 times a second for the last 5 s of a
    /// minute as under 2 a second. Exact while a process denies at most
    /// 100 subjects of the name in an interval; past that, over-counted
    /// like `denials`, and 0 from a process whose interval sketch dropped
    /// the subject (it then had at most its share of that interval's
    /// denials).
    pub denials_per_sec: f64,
}

/// The subjects denied most in the last minutes, per limiter kind and
/// name, across every process of this namespace that denied anything in
/// its limiters' windows (rate limiters report by default; see
/// [`report_throttled`](crate::limit::RateLimiterBuilder::report_throttled)
/// for what it costs and how to turn it off), their denials per second
/// over the last seconds, and each name's allowed / denied / cached /
/// bypassed rates. Nothing under this namespace? [`Scanner::throttled_namespaces`](crate::admin::Scanner::throttled_namespaces)
/// says which namespaces have reports.
///
/// Cost: two calls to the one master holding the reports' slot (the index
/// of live processes, then their reports: `MGET` of at most 1,000 keys),
/// whatever the number of limiters or subjects; the reply is at most 100
/// subjects per name and process. No `SCAN`, no hot key: each process
/// writes its own key every 5 s while it denies.
///
/// The merge sums each subject's counts over the processes, adding, where
/// a process does not list it, that process's floor (the most it can have
/// there), then keeps the 100 largest. So counts never under-estimate, each
/// is at most its `error` over, and a subject not listed was denied at most
/// `floor` times — Space-Saving's guarantee, kept through the merge.
///
/// ```no_run
/// # async fn demo(cluster: shardlimit::Cluster) -> shardlimit::Result<()> {
/// let now = shardlimit::admin::throttled(&cluster).await?;
/// for name in &now.names {
///     for s in name.subjects.iter().take(5) {
///         println!("{} {} {} denials", name.name, String::from_utf8_lossy(&s.subject), s.denials);
///     }
/// }
/// # Ok(()) }
/// ```
pub async fn throttled(cluster: &Cluster) -> Result<Throttled> {
    let reports = publish::read(cluster).await?;
    Ok(merge(&reports))
}

/// Merges the processes' reports.
fn merge(reports: &[Vec<NameReport>]) -> Throttled {
    let mut by_name: BTreeMap<(&str, &str), Vec<&NameReport>> = BTreeMap::new();
    for report in reports {
        for name in report {
            by_name
                .entry((&name.kind, &name.name))
                .or_default()
                .push(name);
        }
    }
    let names = by_name
        .into_iter()
        .map(|((kind, name), parts)| {
            let summary = Summary::merge(parts.iter().map(|p| &p.summary), CAPACITY);
            let recent = recent_rates(&parts);
            let per_sec = |i: usize| -> f64 {
                parts
                    .iter()
                    .map(|p| rate(p.counts[i], p.elapsed))
                    .sum::<f64>()
            };
            ThrottledName {
                kind: kind.to_owned(),
                name: name.to_owned(),
                processes: parts.len(),
                window: parts.iter().map(|p| p.window).max().unwrap_or_default(),
                covered: parts.iter().map(|p| p.covered).max().unwrap_or_default(),
                interval: parts.iter().map(|p| p.elapsed).max().unwrap_or_default(),
                allowed_per_sec: per_sec(0),
                denied_per_sec: per_sec(1),
                cached_per_sec: per_sec(2),
                bypassed_per_sec: per_sec(3),
                denials: summary.total,
                floor: summary.floor,
                subjects: summary
                    .entries
                    .into_iter()
                    .map(|e| ThrottledSubject {
                        denials_per_sec: recent.get(e.subject.as_slice()).copied().unwrap_or(0.0),
                        subject: e.subject,
                        denials: e.count,
                        error: e.error,
                    })
                    .collect(),
            }
        })
        .collect();
    Throttled {
        processes: reports.len(),
        names,
    }
}

/// Each subject's denials per second over the last interval, summed over
/// the processes (each over its own interval).
fn recent_rates<'a>(parts: &[&'a NameReport]) -> HashMap<&'a [u8], f64> {
    let mut rates: HashMap<&[u8], f64> = HashMap::new();
    for part in parts {
        for e in &part.recent.entries {
            *rates.entry(e.subject.as_slice()).or_default() += rate(e.count, part.elapsed);
        }
    }
    rates
}

/// `count` per second over `over` (0 over no time).
#[allow(clippy::cast_precision_loss)] // counts are far below 2^52
fn rate(count: u64, over: Duration) -> f64 {
    let secs = over.as_secs_f64();
    if secs > 0.0 { count as f64 / secs } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(name: &str, counts: [u64; 4], entries: &[(&str, u64)]) -> NameReport {
        NameReport {
            kind: "gcra".into(),
            name: name.into(),
            window: Duration::from_secs(60),
            covered: Duration::from_secs(30),
            elapsed: Duration::from_secs(5),
            counts,
            summary: Summary::exact(entries, 0),
            recent: Summary::default(),
        }
    }

    #[test]
    fn processes_add_up_per_name_and_subject() {
        let mut a = vec![
            report("api", [50, 10, 5, 0], &[("u1", 8), ("u2", 2)]),
            report("login", [5, 0, 0, 0], &[]),
        ];
        let mut b = vec![report("api", [50, 10, 0, 5], &[("u2", 9), ("u3", 1)])];
        // u2: all 9 of b's denials in its last 5 s, 20 of them in a's 4 s
        // (a subject's recent rate: per process over its interval, summed).
        b[0].recent = Summary::exact(&[("u2", 9)], 0);
        a[0].recent = Summary::exact(&[("u2", 2)], 0);
        a[0].elapsed = Duration::from_secs(4);
        let merged = merge(&[a, b]);
        assert_eq!(merged.processes, 2);
        let api = &merged.names[0];
        assert_eq!(
            (api.name.as_str(), api.processes, api.denials),
            ("api", 2, 20)
        );
        assert_eq!(
            (
                api.allowed_per_sec,
                api.denied_per_sec,
                api.cached_per_sec,
                api.bypassed_per_sec
            ),
            (22.5, 4.5, 1.25, 1.0)
        );
        assert_eq!(api.interval, Duration::from_secs(5));
        let top: Vec<(&[u8], u64)> = api
            .subjects
            .iter()
            .map(|s| (s.subject.as_slice(), s.denials))
            .collect();
        assert_eq!(top, [(&b"u2"[..], 11), (b"u1", 8), (b"u3", 1)]);
        assert_eq!(api.covered, Duration::from_secs(30));
        assert!((api.subjects[0].denials_per_sec - (2.0 / 4.0 + 9.0 / 5.0)).abs() < 1e-9);
        assert_eq!(api.subjects[1].denials_per_sec, 0.0, "u1: none lately");
        assert_eq!(merged.names[1].name, "login");
        assert!(merged.names[1].subjects.is_empty());
    }
}
