//! Where reports live and how they get there: one key per process with a
//! short TTL, and a small index of the processes, all in one slot, written
//! every [`PUBLISH_EVERY`] by a background task per
//! [`Cluster`](crate::Cluster) handle and read by the admin side in two
//! calls to that slot's master.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::MissedTickBehavior;

use super::recorder::{MAX_WINDOW, MIN_WINDOW, NameReport, Recorder, Reporters};
use super::wire;
use crate::cluster::Cluster;
use crate::error::{Error, Result};
use crate::keys::{KeyId, KeySet};
use crate::scripts::{NO_ARGS, THROTTLED_INDEX, THROTTLED_PUBLISH, THROTTLED_READ};

/// How often a process publishes its report.
pub(crate) const PUBLISH_EVERY: Duration = Duration::from_secs(5);

/// How long a report outlives its last publication: three missed
/// publications, and a process that stopped is gone from the view.
pub(crate) const REPORT_TTL: Duration = Duration::from_secs(15);

/// The hash tag of every report key and of the index: one slot, so the
/// index and the reports are read together, and never a key any check
/// touches (a report is written by its process every few seconds).
const SUBJECT: &str = "shardlimit:throttled";
const KIND: &str = "throttled";
const INDEX: &str = "index";

/// Process `process`'s report key and the index key.
fn keys(cluster: &Cluster, process: &str) -> Result<KeySet> {
    let ids = [KeyId::new(KIND, process)?, KeyId::new(KIND, INDEX)?];
    cluster.keys().key_set(SUBJECT, &ids)
}

/// The recorder of limiters `kind`/`name` on `cluster`, for a window of
/// `window` (validated), its publishing task started if it is the first.
pub(crate) fn recorder(
    cluster: &Cluster,
    kind: &str,
    name: &str,
    window: Duration,
) -> Result<Arc<Recorder>> {
    if !(MIN_WINDOW..=MAX_WINDOW).contains(&window) {
        return Err(Error::Config {
            field: "report_throttled",
            reason: format!("the window must be 6 s to 1 h, not {window:?}"),
        });
    }
    let outcomes = cluster.outcomes(kind, name);
    let (recorder, start) = cluster
        .extension(Reporters::default)
        .recorder(kind, name, window, outcomes);
    if start {
        self::start(cluster)?;
    }
    Ok(recorder)
}

/// Starts `cluster`'s publishing task, which runs while any recorder lives.
/// Needs a tokio runtime.
fn start(cluster: &Cluster) -> Result<()> {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        cluster.extension(Reporters::default).not_running();
        return Err(Error::Config {
            field: "report_throttled",
            reason: "publishing the throttled report needs a running tokio runtime".into(),
        });
    };
    runtime.spawn(run(cluster.clone()));
    Ok(())
}

/// Publishes every [`PUBLISH_EVERY`] (the first at once) until no
/// recorder is left. A failed publication is logged at debug level and
/// retried at the next tick: the view misses this process until then.
async fn run(cluster: Cluster) {
    let mut tick = tokio::time::interval(PUBLISH_EVERY);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(recorders) = cluster.extension(Reporters::default).live() else {
            return;
        };
        if let Err(err) = publish(&cluster, &recorders).await {
            tracing::debug!(error = %err, "shardlimit: publishing the throttled report failed");
        }
    }
}

/// One publication: this process's report and its index entry.
async fn publish(cluster: &Cluster, recorders: &[Arc<Recorder>]) -> Result<()> {
    let names: Vec<NameReport> = recorders.iter().map(|r| r.report()).collect();
    let reporters = cluster.extension(Reporters::default);
    let process = reporters.process();
    let keys = keys(cluster, process)?;
    let ttl = u64::try_from(REPORT_TTL.as_millis()).unwrap_or(u64::MAX);
    let report = wire::encode(&names);
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
