//! One Redis node as the router sees it: its multiplexed connections and
//! whether it is believed down.
//!
//! A connection that has ended — closed by the server (its idle `timeout`,
//! `CLIENT KILL`), a proxy or the network — or that has been idle longer
//! than `max_idle` is replaced by a fresh one before the next request, so
//! nothing is sent on it. Such an end says nothing about the node.
//!
//! A node is **down** after a connection broke under a request (an I/O
//! error after the request may have been written), after a refused
//! connect, or after `down_after` timeouts within `failure_window` (a hung
//! node). While down, callers that have no connection are refused at once
//! without sending anything — a dead master must not hold its callers for
//! the whole command timeout, nor slow the healthy masters — and the node
//! probes itself in the background, one reconnect per backoff interval,
//! until one succeeds: whichever connection broke, and whether or not
//! anyone calls. The interval starts at `reconnect_min`, doubles after
//! every failed probe up to `reconnect_max`, and is jittered (half to all
//! of it), so a fleet of services does not reconnect in step.
//!
//! The hot path (node up, connected) is one read lock, a clone of the
//! connection handle, two atomic loads and a clock read.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::aio::PubSub;
use redis::{AsyncConnectionConfig, ConnectionInfo, RedisError};
use tokio::time::Instant;

use super::socket::{Connector, Socket};

/// Connection and failure-detection settings shared by every node.
#[derive(Clone)]
pub(crate) struct NodeConfig {
    /// Opens the sockets (TCP or TLS).
    pub(crate) connector: Connector,
    /// Bound on one connection attempt (TCP, TLS, `HELLO`/`AUTH`).
    pub(crate) connect_timeout: Duration,
    /// A connection unused for longer is replaced before its next request.
    pub(crate) max_idle: Duration,
    /// Timeouts within `failure_window` that mark a node down.
    pub(crate) down_after: u32,
    pub(crate) failure_window: Duration,
    /// First and largest wait between reconnect attempts to a down node.
    pub(crate) reconnect_min: Duration,
    pub(crate) reconnect_max: Duration,
}

/// What went wrong with a request, as far as the node's health goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// No reply in time: the node may be hung, or just slow.
    Timeout,
    /// The connection broke or was refused: the node is gone.
    Broken,
}

/// Why no connection could be had.
#[derive(Debug)]
pub(crate) enum Unavailable {
    /// The node is believed down; nothing was sent. `refused` is set when
    /// its last connection attempt was refused for a reason that does not
    /// go away by itself (TLS handshake, authentication): callers get that
    /// error, never a transient "down" that fail-open limiters would bypass.
    Down {
        since: Instant,
        refused: Option<RedisError>,
    },
    /// Connecting failed just now (the node is now down).
    Connect(RedisError),
}

/// Which of a node's two connections a request uses.
///
/// Redis runs one connection's commands in order, so a command that blocks
/// on the server (`WAIT` for replicas) holds up everything sent after it on
/// that connection. Such requests get a connection of their own, so a
/// lagging replica slows only the requests that wait for it — and a
/// blocked `WAIT` never looks like a hung node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lane {
    /// Everything that does not block on the server.
    Shared = 0,
    /// Requests that may block on the server (`WAIT`).
    Blocking = 1,
}

/// A connection and the number that tells it apart from its successors, so
/// a fault reported on an old connection does not drop a new one.
#[derive(Clone)]
pub(crate) struct Live {
    pub(crate) conn: MultiplexedConnection,
    /// What was written on it, whether it ended, when it was last used.
    pub(crate) socket: Arc<Socket>,
    id: u64,
    lane: Lane,
}

impl Live {
    /// Whether requests may be sent on it: it has not ended and has not
    /// been idle for longer than `max_idle` (after which a proxy or
    /// firewall may have dropped it without a word).
    fn fit(&self, max_idle: Duration) -> bool {
        !self.socket.has_ended() && self.socket.idle() <= max_idle
    }
}

/// A point-in-time view of a node, for stats and health.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeState {
    /// `host:port` as the cluster announces it.
    pub addr: String,
    /// How long the node has been believed down; `None` when it is up (or
    /// was never tried).
    pub down_for: Option<Duration>,
    /// Connections opened to it (the first one and every reconnect).
    pub connects: u64,
    /// Connection attempts that failed, probes of a down node included.
    pub connect_failures: u64,
    /// Times it was marked down.
    pub marked_down: u64,
}

pub(crate) struct Node {
    addr: String,
    /// The node's address and settings, which `config.connector` opens.
    info: ConnectionInfo,
    config: NodeConfig,
    /// One connection per [`Lane`].
    live: [RwLock<Option<Live>>; 2],
    /// Held while connecting, so concurrent first callers open one
    /// connection, not one each.
    connecting: tokio::sync::Mutex<()>,
    /// Told when whoever held `connecting` lets it go, so every caller
    /// waiting for it looks again at once: see [`Node::connection`].
    attempt_ended: tokio::sync::Notify,
    health: Mutex<Health>,
    next_id: AtomicU64,
    connects: AtomicU64,
    connect_failures: AtomicU64,
    marked_down: AtomicU64,
}

#[derive(Default)]
struct Health {
    down: Option<Down>,
    /// The last connection attempt failed with a refusal (see `Unavailable`).
    refused: Option<RedisError>,
    timeouts: u32,
    window_started: Option<Instant>,
}

struct Down {
    since: Instant,
    backoff: Duration,
    next_probe: Instant,
}

impl Node {
    pub(crate) fn new(addr: String, info: ConnectionInfo, config: NodeConfig) -> Self {
        Node {
            addr,
            info,
            config,
            live: [RwLock::new(None), RwLock::new(None)],
            connecting: tokio::sync::Mutex::new(()),
            attempt_ended: tokio::sync::Notify::new(),
            health: Mutex::new(Health::default()),
            next_id: AtomicU64::new(0),
            connects: AtomicU64::new(0),
            connect_failures: AtomicU64::new(0),
            marked_down: AtomicU64::new(0),
        }
    }

    /// A pub/sub connection of its own to this node (the deny cache's
    /// invalidations on a standalone server or Sentinel primary), opened
    /// as its other connections are.
    pub(crate) async fn pubsub(&self) -> Result<PubSub, RedisError> {
        self.config.connector.pubsub(&self.info).await
    }

    /// `host:port`.
    pub(crate) fn addr(&self) -> &str {
        &self.addr
    }

    pub(crate) fn is_down(&self) -> bool {
        self.health().down.is_some()
    }

    pub(crate) fn state(&self) -> NodeState {
        NodeState {
            addr: self.addr.clone(),
            down_for: self.health().down.as_ref().map(|d| d.since.elapsed()),
            connects: self.connects.load(Ordering::Relaxed),
            connect_failures: self.connect_failures.load(Ordering::Relaxed),
            marked_down: self.marked_down.load(Ordering::Relaxed),
        }
    }

    /// The connection to use now: the open one, unless it has ended or
    /// been idle too long; else, for a node that is not down, a new one
    /// (concurrent callers share the attempt). A down node is refused at
    /// once.
    ///
    /// Callers that find an attempt under way wait for its end, all
    /// together, and then look again: a connection it opened is theirs, a
    /// node it marked down refuses them. They do not take the attempt's
    /// lock in turn to find that out: the lock is fair, so each would wait
    /// for the one before it to be scheduled, run and let go — with a
    /// node going down under load, the last of a few dozen callers was
    /// refused 50 ms after the node was marked down, not at once
    /// (`a_node_going_down_refuses_every_waiting_caller_at_once`).
    pub(crate) async fn connection(self: &Arc<Self>, lane: Lane) -> Result<Live, Unavailable> {
        if let Some(live) = self.usable(lane) {
            return Ok(live);
        }
        self.refuse_if_down()?;
        // Boxed: opening a connection (TCP, TLS, the handshake) is a large
        // future, which every call's future would otherwise carry — and a
        // caller allocates when it boxes or spawns its call: a
        // `RateLimiter::check` future was 5,224 bytes with it inline,
        // 4,224 without (release build, rustc 1.95).
        Box::pin(self.connect_anew(lane)).await
    }

    /// [`connection`](Self::connection) when there is none to use: waits
    /// for an attempt under way, or makes one.
    async fn connect_anew(self: &Arc<Self>, lane: Lane) -> Result<Live, Unavailable> {
        let _attempt = loop {
            // Registered before looking, so an attempt that ends between
            // the look and the wait still wakes this caller.
            let ended = self.attempt_ended.notified();
            if let Some(live) = self.usable(lane) {
                return Ok(live);
            }
            self.refuse_if_down()?;
            tokio::select! {
                biased;
                () = ended => {}
                attempt = self.attempt() => break attempt,
            }
        };
        // Whoever had the lock before may have connected, or failed, after
        // our look.
        if let Some(live) = self.usable(lane) {
            return Ok(live);
        }
        self.refuse_if_down()?;
        match self.open(lane, self.config.connect_timeout).await {
            Ok(live) => Ok(live),
            Err(err) => {
                self.health().refused =
                    (!crate::error::is_transient_redis(&err)).then(|| err.clone());
                self.mark_down(&err.to_string());
                Err(Unavailable::Connect(err))
            }
        }
    }

    /// The right to connect, held until the [`Attempt`] is dropped.
    async fn attempt(&self) -> Attempt<'_> {
        Attempt {
            _connecting: self.connecting.lock().await,
            ended: &self.attempt_ended,
        }
    }

    fn current(&self, lane: Lane) -> Option<Live> {
        self.live[lane as usize]
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The lane's connection if it is [fit](Live::fit); one that is not is
    /// dropped, and nothing more is sent on it.
    fn usable(&self, lane: Lane) -> Option<Live> {
        let live = self.current(lane)?;
        if live.fit(self.config.max_idle) {
            return Some(live);
        }
        self.discard(&live);
        None
    }

    /// Drops `live` from its lane, passing no judgement on the node; false
    /// if another connection (a reconnect) has replaced it already.
    pub(crate) fn discard(&self, live: &Live) -> bool {
        let mut current = self.live[live.lane as usize]
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if current.as_ref().is_some_and(|c| c.id == live.id) {
            *current = None;
            true
        } else {
            false
        }
    }

    fn health(&self) -> std::sync::MutexGuard<'_, Health> {
        self.health.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn refuse_if_down(&self) -> Result<(), Unavailable> {
        let health = self.health();
        match health.down.as_ref() {
            None => Ok(()),
            Some(down) => Err(Unavailable::Down {
                since: down.since,
                refused: health.refused.clone(),
            }),
        }
    }

    /// One reconnect attempt to a down node; true if it is up again.
    async fn probe(&self) -> bool {
        let _attempt = self.attempt().await;
        // The lane that broke has no connection: reconnect that one, so a
        // node whose shared connection still works is not left down
        // because its blocking one broke.
        let lane = [Lane::Shared, Lane::Blocking]
            .into_iter()
            .find(|&lane| self.usable(lane).is_none())
            .unwrap_or(Lane::Shared);
        let result = self.open(lane, self.config.connect_timeout).await;
        let mut health = self.health();
        match result {
            Ok(_) => {
                let since = health.down.take().map(|d| d.since);
                health.timeouts = 0;
                health.refused = None;
                drop(health);
                crate::metrics::node_down(&self.addr, false);
                tracing::warn!(
                    node = %self.addr,
                    down_for = ?since.map(|s| s.elapsed()),
                    "shardlimit: node reachable again"
                );
                true
            }
            Err(err) => {
                health.refused = (!crate::error::is_transient_redis(&err)).then(|| err.clone());
                if let Some(down) = health.down.as_mut() {
                    down.backoff = (down.backoff * 2).min(self.config.reconnect_max);
                    down.next_probe = Instant::now() + jittered(down.backoff);
                }
                drop(health);
                tracing::debug!(node = %self.addr, error = %err,
                    "shardlimit: reconnect to a down node failed");
                false
            }
        }
    }

    /// Opens the shared lane's connection ahead of the first request, if
    /// there is none and the node is not down, within `within` (`build`
    /// gives what is left of its connect timeout: no request is waiting,
    /// so a slow connect need not fit a command timeout). A failure
    /// passes no judgement on the node: the first request tries again, with
    /// the usual consequences.
    pub(crate) async fn warm(&self, within: Duration) {
        let _attempt = self.attempt().await;
        if self.is_down() || self.usable(Lane::Shared).is_some() {
            return;
        }
        if let Err(err) = self.open(Lane::Shared, within).await {
            tracing::debug!(node = %self.addr, error = %err,
                "shardlimit: no connection ahead of the first request; it will try again");
        }
    }

    /// Opens a connection within `within` and installs it. The caller holds
    /// `connecting`.
    async fn open(&self, lane: Lane, within: Duration) -> Result<Live, RedisError> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(within))
            // Every request is bounded by the caller's deadline instead, so
            // the router knows which node and request timed out.
            .set_response_timeout(None);
        let attempt =
            tokio::time::timeout(within, self.config.connector.open(&self.info, config)).await;
        let (conn, socket) = match attempt {
            Ok(Ok(opened)) => opened,
            Ok(Err(err)) => {
                self.connect_failures.fetch_add(1, Ordering::Relaxed);
                crate::metrics::node_connect(&self.addr, false);
                return Err(err);
            }
            Err(_) => {
                self.connect_failures.fetch_add(1, Ordering::Relaxed);
                crate::metrics::node_connect(&self.addr, false);
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no connection within {within:?}"),
                )
                .into());
            }
        };
        self.connects.fetch_add(1, Ordering::Relaxed);
        crate::metrics::node_connect(&self.addr, true);
        let live = Live {
            conn,
            socket: Arc::new(socket),
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            lane,
        };
        *self.live[lane as usize]
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Some(live.clone());
        Ok(live)
    }

    /// Records a failed request on `live` (one that may have been written).
    /// Returns true when this marked the node down (the caller then looks
    /// for a new topology).
    pub(crate) fn report(self: &Arc<Self>, live: &Live, fault: Fault) -> bool {
        let down = match (fault, live.lane) {
            (Fault::Broken, _) => true,
            // A `WAIT` may block for its whole timeout by design.
            (Fault::Timeout, Lane::Blocking) => false,
            (Fault::Timeout, Lane::Shared) => self.count_timeout(),
        };
        // Mark down only if the connection is still the one that failed: a
        // reconnect may have replaced it already.
        if !down || !self.discard(live) {
            return false;
        }
        self.mark_down(match fault {
            Fault::Broken => "connection broken",
            Fault::Timeout => "repeated timeouts",
        })
    }

    fn count_timeout(&self) -> bool {
        let mut health = self.health();
        let now = Instant::now();
        match health.window_started {
            Some(started) if now.duration_since(started) <= self.config.failure_window => {}
            _ => {
                health.window_started = Some(now);
                health.timeouts = 0;
            }
        }
        health.timeouts += 1;
        health.timeouts >= self.config.down_after
    }

    /// Marks the node down (if it is not already) and starts probing it;
    /// true if it was up.
    fn mark_down(self: &Arc<Self>, why: &str) -> bool {
        let mut health = self.health();
        if health.down.is_some() {
            return false;
        }
        let now = Instant::now();
        health.down = Some(Down {
            since: now,
            backoff: self.config.reconnect_min,
            next_probe: now + jittered(self.config.reconnect_min),
        });
        health.timeouts = 0;
        drop(health);
        tokio::spawn(probe_until_up(Arc::downgrade(self)));
        self.marked_down.fetch_add(1, Ordering::Relaxed);
        crate::metrics::node_down(&self.addr, true);
        tracing::warn!(node = %self.addr, reason = why,
            "shardlimit: node marked down; its calls fail fast until it answers again or its slots move");
        true
    }
}

/// A connection attempt under way: whoever holds it alone may open one of
/// the node's connections. Dropping it (done, failed or cancelled) wakes
/// every caller waiting in [`Node::connection`].
struct Attempt<'a> {
    _connecting: tokio::sync::MutexGuard<'a, ()>,
    ended: &'a tokio::sync::Notify,
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        // Before the lock is let go (fields drop after this): what the
        // attempt did is in place by now, and a woken caller that finds
        // nothing settled waits for the lock again.
        self.ended.notify_waiters();
    }
}

/// Probes a down node when each probe is due until one succeeds; ends
/// early when the node is gone (its router dropped).
async fn probe_until_up(weak: Weak<Node>) {
    loop {
        let Some(node) = weak.upgrade() else { return };
        let Some(due) = node.health().down.as_ref().map(|down| down.next_probe) else {
            return;
        };
        // Only a `Weak` while waiting: the probes end with the node.
        drop(node);
        tokio::time::sleep_until(due).await;
        let Some(node) = weak.upgrade() else { return };
        if node.probe().await {
            return;
        }
    }
}

/// Half to all of `interval`, at random.
fn jittered(interval: Duration) -> Duration {
    let half = interval / 2;
    crate::backoff::jitter(half, interval - half)
}

mod detached;
#[cfg(test)]
mod tests;
