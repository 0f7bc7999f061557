//! `LockBuilder`: a lock's settings, validated before anything is sent.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use super::{Lock, LockInner, ReplicaAck, WAIT_LATENESS};
use crate::backoff::millis;
use crate::cluster::Cluster;
use crate::count::{Checked, Count};
use crate::error::{Error, Result};
use crate::keys::{KeyId, Kind};
use crate::primitive::{Core, RetryBackoff};

/// Configures a [`Lock`]. Every setter states its default;
/// [`build`](Self::build) validates everything and contacts nothing.
///
/// ```no_run
/// # fn demo(cluster: shardlimit::Cluster) -> shardlimit::Result<()> {
/// use std::num::NonZeroU32;
/// use std::time::Duration;
/// let lock = shardlimit::Lock::builder(&cluster, "job")
///     .ttl(Duration::from_secs(3600))         // default 30 s
///     .watchdog(false)                        // default off
///     .replica_ack(Duration::from_millis(50)) // default off
///     .replica_ack_count(NonZeroU32::MIN)     // default 1
///     .fence_ttl(Duration::from_secs(600))    // default 60 s
///     .retry_backoff(Duration::from_millis(10), Duration::from_millis(250))
///     .build()?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
#[must_use]
pub struct LockBuilder {
    cluster: Cluster,
    name: String,
    ttl: Duration,
    watchdog: bool,
    replica_ack: Option<Duration>,
    replica_ack_count: Checked,
    fence_ttl: Duration,
    retry: RetryBackoff,
}

impl LockBuilder {
    /// The defaults every setter documents.
    pub(super) fn new(cluster: Cluster, name: String) -> Self {
        LockBuilder {
            cluster,
            name,
            ttl: Duration::from_secs(30),
            watchdog: false,
            replica_ack: None,
            replica_ack_count: Checked::new(NonZeroU32::MIN),
            fence_ttl: Duration::from_secs(60),
            retry: RetryBackoff::DEFAULT,
        }
    }

    /// How long an acquisition holds the lock unless extended. Default 30 s.
    /// At least 1 ms (whole milliseconds; the rest is dropped); with the
    /// [watchdog](Self::watchdog), at least 3× the cluster's command timeout,
    /// so a failed extension can be retried before the lock expires.
    ///
    /// Must exceed the longest plausible hold (forty minutes of work
    /// under a thirty-minute lock means two exports), or turn the
    /// watchdog on.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Whether each guard runs a background task that extends its lock to
    /// the full TTL every TTL/3 while the guard lives. Default off.
    ///
    /// It stops when the guard is released or dropped (it holds only a weak
    /// reference), and when an extension finds the lock gone or taken — then
    /// [`LockGuard::is_held`](super::LockGuard::is_held) turns false and [`LockGuard::lost`](super::LockGuard::lost) resolves.
    /// Failed extensions (timeouts) are retried; if they keep failing, the
    /// lock is presumed lost once its TTL runs out locally.
    pub fn watchdog(mut self, on: bool) -> Self {
        self.watchdog = on;
        self
    }

    /// After each acquisition, wait up to `timeout` for
    /// [`replica_ack_count`](Self::replica_ack_count) replicas of the owning
    /// master to confirm the write (`WAIT`), and fail the acquisition —
    /// releasing the lock — if they do not. Default off.
    ///
    /// Without it, a failover right after an acquisition can promote a
    /// replica that never saw the lock, and a second holder gets it.
    ///
    /// `WAIT` is sent right behind the acquisition, in one pipeline on the
    /// same connection (it only counts that connection's writes). It blocks
    /// the connection it runs on, so acquisitions with replica
    /// acknowledgement use a second connection to the master, apart from
    /// every other call: while replicas lag, only such acquisitions queue
    /// behind one another (each failing closed at the command timeout), and
    /// the rest of the traffic to that master is not held up. Keep `timeout`
    /// short (a healthy replica confirms in about a millisecond).
    ///
    /// At least 1 ms, and at least 100 ms shorter than the cluster's
    /// [command timeout](crate::cluster::ClusterBuilder::command_timeout), which bounds
    /// the `WAIT` reply: Redis answers a `WAIT` that timed out on its next
    /// server-cron tick, up to 100 ms late at the default `hz 10`. With the
    /// default 250 ms command timeout, at most 149 ms.
    pub fn replica_ack(mut self, timeout: Duration) -> Self {
        self.replica_ack = Some(timeout);
        self
    }

    /// How many replicas must confirm when
    /// [`replica_ack`](Self::replica_ack) is on: a plain integer or a
    /// [`NonZeroU32`], from 1 to `u32::MAX` (checked by
    /// [`build`](Self::build), field `replica_ack_count`). Default 1.
    pub fn replica_ack_count(mut self, replicas: impl Count) -> Self {
        self.replica_ack_count = Checked::new(replicas);
        self
    }

    /// The least lifetime of the fence key, which remembers the last fencing
    /// token; its TTL is `max(ttl, fence_ttl)` and is raised by extensions,
    /// never lowered. Default 60 s. At least 1 ms.
    ///
    /// Tokens keep increasing after the fence key expires, because they
    /// follow the server's clock in microseconds; the key only has to bridge
    /// a clock that steps back (NTP, a failover to a node with a slower
    /// clock). Longer is safer and costs one small key per resource for that
    /// long.
    pub fn fence_ttl(mut self, fence_ttl: Duration) -> Self {
        self.fence_ttl = fence_ttl;
        self
    }

    /// Backoff between attempts of [`Lock::acquire`]: the `n`th wait is
    /// random in `[d/2, d]`, `d = min(max, min × 2^n)`. Default 10 ms and
    /// 250 ms. `min` must be non-zero and at most `max`.
    pub fn retry_backoff(mut self, min: Duration, max: Duration) -> Self {
        self.retry = RetryBackoff::new(min, max);
        self
    }

    /// Validates the configuration. Nothing is sent to Redis.
    ///
    /// Errors with [`Error::InvalidIdent`] for a bad name and
    /// [`Error::Config`] naming the setting otherwise.
    pub fn build(self) -> Result<Lock> {
        let id = KeyId::new(Kind::Lock.as_str(), &self.name)?;
        let fence = id.with_part("fence")?;
        let ttl_ms = millis("ttl", self.ttl)?;
        let fence_ttl_ms = millis("fence_ttl", self.fence_ttl)?;
        let replica_ack_count = self.replica_ack_count.get("replica_ack_count")?;
        let replica_ack = match self.replica_ack {
            Some(timeout) => {
                let timeout_ms = millis("replica_ack", timeout)?;
                let command_timeout = self.cluster.command_timeout();
                if timeout.saturating_add(WAIT_LATENESS) >= command_timeout {
                    return Err(Error::Config {
                        field: "replica_ack",
                        reason: format!(
                            "{timeout:?} leaves no room in the command timeout \
                             ({command_timeout:?}), which bounds the WAIT reply: Redis \
                             answers a timed-out WAIT up to {WAIT_LATENESS:?} late"
                        ),
                    });
                }
                Some(ReplicaAck {
                    timeout,
                    timeout_ms,
                    replicas: replica_ack_count,
                })
            }
            None => None,
        };
        if self.watchdog {
            let least = self.cluster.command_timeout().saturating_mul(3);
            if self.ttl < least {
                return Err(Error::Config {
                    field: "ttl",
                    reason: format!(
                        "{:?} is too short for the watchdog: at least 3x the command timeout \
                         ({least:?}), so a failed extension can be retried before the lock expires",
                        self.ttl
                    ),
                });
            }
        }
        let retry = self.retry.checked()?;
        Ok(Lock {
            inner: Arc::new(LockInner {
                core: Core::new(self.cluster, id),
                fence,
                // What the server applies: whole milliseconds.
                ttl: Duration::from_millis(ttl_ms),
                ttl_ms,
                fence_ttl_ms,
                watchdog: self.watchdog,
                replica_ack,
                retry,
            }),
        })
    }
}
