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
    /// Rebuild attempts started (successful or not).
    attempts: AtomicU64,
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
            attempts: AtomicU64::new(0),
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
        self.attempts.fetch_add(1, Ordering::Relaxed);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn unreachable_client() -> ClusterClient {
        // Nothing listens on port 1: every connection attempt is refused.
        ClusterClient::new(vec!["redis://127.0.0.1:1"]).unwrap()
    }

    fn config() -> HealingConfig {
        HealingConfig {
            connect_timeout: Duration::from_millis(500),
            rebuild_after: 3,
            failure_window: Duration::from_secs(1),
            rebuild_interval: Duration::from_secs(3600),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sixty_four_failing_callers_start_one_rebuild() {
        let conn = HealingConnection::connect(unreachable_client(), "t".into(), config(), true)
            .await
            .unwrap();
        // The lazy handle starts its first connection attempt at once.
        assert_eq!(conn.attempts.load(Ordering::Relaxed), 1);
        tokio::time::sleep(Duration::from_millis(50)).await;
        let callers: Vec<_> = (0..64)
            .map(|_| {
                let conn = conn.clone();
                tokio::spawn(async move { conn.report_failure(0, false) })
            })
            .collect();
        for caller in callers {
            caller.await.unwrap();
        }
        // 64 failures, far more than `rebuild_after`, and no second attempt:
        // the interval since the first has not passed.
        assert_eq!(conn.attempts.load(Ordering::Relaxed), 1);
        assert_eq!(conn.rebuilds(), 0, "nothing to connect to");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_burst_of_failures_starts_a_few_rebuilds_not_one_each() {
        let config = HealingConfig {
            rebuild_interval: Duration::ZERO,
            ..config()
        };
        let conn = HealingConnection::connect(unreachable_client(), "t".into(), config, true)
            .await
            .unwrap();
        // Let the lazy first attempt finish (refused at once).
        tokio::time::sleep(Duration::from_millis(200)).await;
        let before = conn.attempts.load(Ordering::Relaxed);
        let callers: Vec<_> = (0..64)
            .map(|_| {
                let conn = conn.clone();
                tokio::spawn(async move { conn.report_failure(0, false) })
            })
            .collect();
        for caller in callers {
            caller.await.unwrap();
        }
        // Single flight: while one attempt runs, the others see the lock
        // taken and return; an attempt that ended lets at most a few more
        // in. Far fewer than one per failure.
        let started = conn.attempts.load(Ordering::Relaxed) - before;
        assert!(
            (1..=8).contains(&started),
            "{started} rebuilds for 64 failures"
        );
    }

    #[test]
    fn failures_count_per_window_and_generation() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let conn = runtime
            .block_on(HealingConnection::connect(
                unreachable_client(),
                "t".into(),
                HealingConfig {
                    failure_window: Duration::from_secs(60),
                    ..config()
                },
                true,
            ))
            .unwrap();
        // Generation 5: a fresh window (the lazy start counted one on 0).
        assert!(!conn.count_failure(5));
        assert!(!conn.count_failure(5));
        assert!(conn.count_failure(5), "the third failure in the window");
        // A failure on another generation starts a new count.
        assert!(!conn.count_failure(6));
    }
}
