//! Where reports live and how they get there: one key per process with a
//! short TTL, and a small index of the processes, all in one slot, written
//! every [`PUBLISH_EVERY`] while the process has denials to report, by a
//! background task per [`Cluster`](crate::Cluster) handle, and read by the
//! admin side in two calls to that slot's master.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::MissedTickBehavior;

use super::recorder::{MAX_WINDOW, MIN_WINDOW, NameReport, Recorder, Reporters};
use super::wire;
use crate::cluster::Cluster;
use crate::error::{Error, Result};
use crate::keys::{KeyId, KeySet, ParsedKey};
use crate::outcomes::Registry;
use crate::scripts::{NO_ARGS, THROTTLED_INDEX, THROTTLED_PUBLISH, THROTTLED_READ};

/// How often a process publishes its report.
pub(crate) const PUBLISH_EVERY: Duration = Duration::from_secs(5);

/// How long a report outlives its last publication: three missed
/// publications, and a process that stopped is gone from the view.
pub(crate) const REPORT_TTL: Duration = Duration::from_secs(15);

/// The hash tag of every report key and of the index: one slot, so the
/// index and the reports are read together, and never a key any check
/// touches (a report is written by its process every few seconds).
pub(crate) const SUBJECT: &str = "shardlimit:throttled";
pub(crate) const KIND: &str = "throttled";
pub(crate) const INDEX: &str = "index";

/// Whether `key` is a report or the index (of any namespace): the view's
/// own keys, which describe limiters and are none.
pub(crate) fn is_report(key: &ParsedKey<'_>) -> bool {
    key.kind == KIND && *key.subject == *SUBJECT.as_bytes()
}

/// Process `process`'s report key and the index key.
fn keys(cluster: &Cluster, process: &str) -> Result<KeySet> {
    let ids = [KeyId::new(KIND, process)?, KeyId::new(KIND, INDEX)?];
    cluster.keys().key_set(SUBJECT, &ids)
}

/// Refuses a window outside 6 s to 1 h.
pub(crate) fn validate_window(window: Duration) -> Result<()> {
    if (MIN_WINDOW..=MAX_WINDOW).contains(&window) {
        return Ok(());
    }
    Err(Error::Config {
        field: "throttled_window",
        reason: format!("the window must be 6 s to 1 h, not {window:?}"),
    })
}

/// The recorder of limiters `kind`/`name` on `cluster`, for a window of
/// `window` (validated first). Nothing runs until it records a denial.
pub(crate) fn recorder(
    cluster: &Cluster,
    kind: &str,
    name: &str,
    window: Duration,
) -> Arc<Recorder> {
    let outcomes = Registry::of(cluster).outcomes(kind, name);
    Reporters::recorder(&reporters(cluster), kind, name, window, outcomes)
}

/// `cluster`'s reporters (one per handle and its clones). Takes the
/// handle's extension lock: never on the check path, where a recorder
/// holds its reporters.
fn reporters(cluster: &Cluster) -> Arc<Reporters> {
    cluster.extension(Reporters::default)
}

/// After `recorder` counted a denial: starts `cluster`'s publishing task
/// unless it runs (one relaxed load when it does). Outside a tokio runtime
/// nothing starts, and the next denial tries again.
pub(crate) fn denied(cluster: &Cluster, recorder: &Recorder) {
    let reporters = recorder.reporters();
    if reporters.running() {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    if reporters.claim_start() {
        runtime.spawn(run(cluster.clone()));
    }
}

/// Publishes every [`PUBLISH_EVERY`] (the first at once) until no
/// recorder is left — but only while there is something to say: when
/// some name has denials in its window, and once more after the last has
/// aged out (so the view shows none, instead of the last denials until
/// the report's TTL). A process that denies nothing writes nothing. A
/// failed publication is retried at the next tick (the view misses this
/// process until then), logged at debug level when transient, and warned
/// about once when not (an ACL without `ZADD`, say: with reporting on by
/// default, a view left empty by configuration must not be silent).
async fn run(cluster: Cluster) {
    let mut tick = tokio::time::interval(PUBLISH_EVERY);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    // Whether the last publication listed denials.
    let mut listed = false;
    // Whether a failure that is not transient was warned about since the
    // last success.
    let mut warned = false;
    loop {
        tick.tick().await;
        let Some(recorders) = reporters(&cluster).live() else {
            return;
        };
        let names: Vec<NameReport> = recorders.iter().map(|r| r.report()).collect();
        let denials = names.iter().any(|n| n.summary.total > 0);
        if !denials && !listed {
            continue;
        }
        match publish(&cluster, &names).await {
            Ok(()) => (listed, warned) = (denials, false),
            Err(err) if err.is_transient() || warned => {
                tracing::debug!(error = %err, "shardlimit: publishing the throttled report failed");
            }
            Err(err) => {
                warned = true;
                tracing::warn!(
                    error = %err,
                    "shardlimit: publishing the throttled report failed, and will until this is fixed: \
                     this process is missing from throttled now (off per limiter: report_throttled(false))"
                );
            }
        }
    }
}

/// One publication: this process's report and its index entry.
async fn publish(cluster: &Cluster, names: &[NameReport]) -> Result<()> {
    let reporters = reporters(cluster);
    let process = reporters.process();
    let keys = keys(cluster, process)?;
    let ttl = u64::try_from(REPORT_TTL.as_millis()).unwrap_or(u64::MAX);
    let report = wire::encode(names);
    let _: i64 = cluster
        .eval(&THROTTLED_PUBLISH, &keys, (process, report, ttl))
        .await?;
    Ok(())
}

/// Every live process's report: the index, then the reports (two calls
/// to one master, whatever the size of the cluster). Reports that expired
/// in between, or that this version cannot read, are skipped.
pub(crate) async fn read(cluster: &Cluster) -> Result<Vec<Vec<NameReport>>> {
    let index = cluster
        .keys()
        .key_set(SUBJECT, [&KeyId::new(KIND, INDEX)?])?;
    let processes: Vec<String> = cluster.eval(&THROTTLED_INDEX, &index, NO_ARGS).await?;
    let ids: Vec<KeyId> = processes
        .iter()
        .filter_map(|p| KeyId::new(KIND, p).ok())
        .collect();
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let reports = cluster.keys().key_set(SUBJECT, &ids)?;
    let values: Vec<Option<Vec<u8>>> = cluster.eval(&THROTTLED_READ, &reports, NO_ARGS).await?;
    Ok(values
        .iter()
        .flatten()
        .filter_map(|v| wire::decode(v))
        .collect())
}
