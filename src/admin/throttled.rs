//! "Throttled now": the subjects each limiter denied most in the last
//! minutes, merged from every process's report.

use std::collections::BTreeMap;
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
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ThrottledSubject {
    /// The subject, as checked.
    pub subject: Vec<u8>,
    /// Its denials in the window: never fewer than the true count, and at
    /// most `error` more.
    pub denials: u64,
    /// How much `denials` may over-count.
    pub error: u64,
}

impl ThrottledSubject {
    /// Its denials per second over `covered` (its name's
    /// [`covered`](ThrottledName::covered)).
    #[must_use]
    pub fn per_sec(&self, covered: Duration) -> f64 {
        rate(self.denials, covered)
    }
}

/// The subjects denied most in the last minutes, per limiter kind and
/// name, across every process whose limiters were built with
/// [`report_throttled`](crate::limit::RateLimiterBuilder::report_throttled), and
/// their allowed / denied / cached / bypassed rates.
///
/// Cost: two calls to the one master holding the reports' slot (the index
/// of live processes, then their reports: `MGET` of at most 1,000 keys),
/// whatever the number of limiters or subjects; the reply is at most 100
/// subjects per name and process. No `SCAN`, no hot key: each process
/// writes its own key every 5 s.
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
        }
    }

    #[test]
    fn processes_add_up_per_name_and_subject() {
        let a = vec![
            report("api", [50, 10, 5, 0], &[("u1", 8), ("u2", 2)]),
            report("login", [5, 0, 0, 0], &[]),
        ];
        let b = vec![report("api", [50, 10, 0, 5], &[("u2", 9), ("u3", 1)])];
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
            (20.0, 4.0, 1.0, 1.0)
        );
        let top: Vec<(&[u8], u64)> = api
            .subjects
            .iter()
            .map(|s| (s.subject.as_slice(), s.denials))
            .collect();
        assert_eq!(top, [(&b"u2"[..], 11), (b"u1", 8), (b"u3", 1)]);
        assert_eq!(api.covered, Duration::from_secs(30));
        assert!((api.subjects[0].per_sec(api.covered) - 11.0 / 30.0).abs() < 1e-9);
        assert_eq!(merged.names[1].name, "login");
        assert!(merged.names[1].subjects.is_empty());
    }
}
