//! The shared cluster connection and its single-flight rebuild.
//!
//! redis-rs' `ClusterConnection` is one multiplexed connection per node behind
//! a background task. Under load it can wedge when the master owning a slot is
//! killed: its slot refresh waits on an internal lock that in-flight requests
//! never release (measured: 64 concurrent tasks on redis 1.8.1 hang forever;
//! 8–32 recover after ~5 s). It also never refreshes its slot map after
//! connection errors to a dead master, only after a `MOVED`. A fresh
//! connection from the same client works at once. So the connection is held
//! in a *generation* that can be replaced:
//!
//! * callers report transient failures (timeouts, I/O errors) of the
//!   generation they used;
//! * once `rebuild_after` failures land within `failure_window`, one caller
//!   starts a rebuild in the background (single flight: concurrent callers
//!   see it is running and return their own error at once — they do not
//!   queue behind it);
//! * rebuilds are at least `rebuild_interval` apart, so a node that stays
//!   down costs one reconnect attempt per interval, not one per request;
//! * the new connection replaces the old one atomically; in-flight requests
//!   finish (or time out) on the old one, which is dropped with its last
//!   clone.
//!
//! Successes cost nothing here: the hot path is one read lock and an `Arc`
//! clone.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;

use crate::error::{Error, Result};

/// One connection and the number that tells it apart from its successors.
/// `conn` is `None` until a lazily built handle first connects.
pub(crate) struct Generation {
    pub(crate) id: u64,
    pub(crate) conn: Option<ClusterConnection>,
}

/// Rebuild tuning, copied from the builder.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HealingConfig {
    pub(crate) connect_timeout: Duration,
    pub(crate) rebuild_after: u32,
    pub(crate) failure_window: Duration,
    pub(crate) rebuild_interval: Duration,
}

pub(crate) struct HealingConnection {
    client: ClusterClient,
    nodes: String,
    config: HealingConfig,
    current: RwLock<Arc<Generation>>,
    failures: Mutex<FailureWindow>,
    rebuild: Arc<tokio::sync::Mutex<RebuildState>>,
    rebuilds: AtomicU64,
}

struct FailureWindow {
    generation: u64,
    started: Instant,
    count: u32,
}

struct RebuildState {
    last_attempt: Option<Instant>,
}

impl HealingConnection {
    /// Connects now, or — when `lazy` — returns at once and connects in the
    /// background (calls fail as transient errors until then).
    pub(crate) async fn connect(
        client: ClusterClient,
        nodes: String,
        config: HealingConfig,
        lazy: bool,
    ) -> Result<Arc<Self>> {
        let conn = if lazy {
            None
        } else {
            Some(open(&client, &nodes, config.connect_timeout).await?)
        };
        let this = Arc::new(HealingConnection {
            client,
            nodes,
            config,
            current: RwLock::new(Arc::new(Generation { id: 0, conn })),
            failures: Mutex::new(FailureWindow {
                generation: 0,
                started: Instant::now(),
                count: 0,
            }),
            rebuild: Arc::new(tokio::sync::Mutex::new(RebuildState { last_attempt: None })),
            rebuilds: AtomicU64::new(0),
        });
        if lazy {
            this.report_failure(0, true);
        }
        Ok(this)
    }

    /// The seed nodes, for error messages.
    pub(crate) fn nodes(&self) -> &str {
        &self.nodes
    }

    /// The connection to use now.
    pub(crate) fn current(&self) -> Arc<Generation> {
        // A poisoned lock only means a panic elsewhere while swapping an Arc;
        // the Arc inside is still whole.
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Number of completed rebuilds since the cluster handle was built.
    pub(crate) fn rebuilds(&self) -> u64 {
        self.rebuilds.load(Ordering::Relaxed)
    }

    /// Records a transient failure seen on `generation`; may start a rebuild.
    /// `urgent` skips the failure count (there is no connection at all).
    pub(crate) fn report_failure(self: &Arc<Self>, generation: u64, urgent: bool) {
        if !self.count_failure(generation) && !urgent {
            return;
        }
        // Single flight: whoever gets the lock rebuilds; everyone else
        // returns immediately with the error they already have.
        let Ok(mut state) = self.rebuild.clone().try_lock_owned() else {
            return;
        };
        if self.current().id != generation {
            return; // someone rebuilt while we were counting
        }
        if let Some(last) = state.last_attempt
            && last.elapsed() < self.config.rebuild_interval
        {
            return;
        }
        state.last_attempt = Some(Instant::now());
        let weak = Arc::downgrade(self);
        let client = self.client.clone();
        let nodes = self.nodes.clone();
        let timeout = self.config.connect_timeout;
        tokio::spawn(async move {
            // Hold the rebuild lock until the attempt ends; hold only a Weak
            // to the connection so a dropped `Cluster` is not kept alive.
            let _state = state;
            let result = open(&client, &nodes, timeout).await;
            if let Some(this) = weak.upgrade() {
                this.install(generation, result);
            }
        });
    }

    /// Counts a failure in the current window; true when the window is full.
    fn count_failure(&self, generation: u64) -> bool {
        let mut window = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if window.generation != generation
            || now.duration_since(window.started) > self.config.failure_window
        {
            *window = FailureWindow {
                generation,
                started: now,
                count: 0,
            };
        }
        window.count += 1;
        window.count >= self.config.rebuild_after
    }

    fn install(&self, replaced: u64, result: Result<ClusterConnection>) {
        match result {
            Ok(conn) => {
                let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
                let id = current.id + 1;
                *current = Arc::new(Generation {
                    id,
                    conn: Some(conn),
                });
                drop(current);
                self.rebuilds.fetch_add(1, Ordering::Relaxed);
                crate::metrics::connection_rebuild(true);
                tracing::warn!(
                    replaced_generation = replaced,
                    generation = id,
                    "shardlimit: rebuilt the cluster connection after repeated transient failures"
                );
            }
            Err(err) => {
                crate::metrics::connection_rebuild(false);
                tracing::warn!(
                    generation = replaced,
                    error = %err,
                    "shardlimit: cluster connection rebuild failed; will retry on the next failures"
                );
            }
        }
    }
}

async fn open(client: &ClusterClient, nodes: &str, timeout: Duration) -> Result<ClusterConnection> {
    match tokio::time::timeout(timeout, client.get_async_connection()).await {
        Ok(Ok(conn)) => Ok(conn),
        Ok(Err(source)) => Err(Error::Connect {
            nodes: nodes.to_owned(),
            source,
        }),
        Err(_) => Err(Error::Connect {
            nodes: nodes.to_owned(),
            source: redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no connection within {timeout:?}"),
            )),
        }),
    }
}
