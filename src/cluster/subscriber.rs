//! The background task that follows a set of pub/sub channels for the
//! layers above the transport — one per slot on a cluster, one per server
//! otherwise — and tells a [`ChannelSink`] what it hears and which slots it
//! follows now (the deny caches' hub, `limit/invalidation.rs`, is the one
//! sink). Started once per sink by [`Cluster::follow_channels`]; ends when
//! the handle or the sink is gone (it holds only `Weak` references).
//!
//! * A cluster: one RESP3 connection of its own per master, opened to the
//!   node that owns the slots **in the router's table now**, and on it one
//!   `SSUBSCRIBE` per slot that node owns, to the sink's channel of that
//!   slot. A slot is live (reported [`gained`](ChannelSink::gained)) only
//!   from the confirmation of its own subscription, and only while all of
//!   this holds: the router still
//!   names that node as the slot's owner, the router does not hold the
//!   node down, the server has not dropped the channel (`SUNSUBSCRIBE`: the
//!   slot moved), and the connection answers a `PING` every
//!   [`PING_INTERVAL`] within [`PING_TIMEOUT`] — a hung (stopped) master
//!   closes nothing, so only a health check notices it. A slot that stops
//!   being live is reported [`lost`](ChannelSink::lost) and is subscribed
//!   again on its owner (per
//!   the router, which a refused subscription asks to look again), retried
//!   with a backoff per node until it is confirmed.
//!   Requests never go through these connections: a stall here delays
//!   messages, never a call.
//! * A standalone server or Sentinel primary: one `SUBSCRIBE` to the
//!   sink's server channel, on the node serving the slots now; when that node
//!   changes (a Sentinel failover) or the connection ends, it subscribes
//!   again on the new one. This connection has no `PING` health check yet:
//!   a hung primary is noticed when the router names another one.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use redis::{PushInfo, PushKind, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::Cluster;
use super::node::Node;
use super::router::Router;
use crate::keys::{SLOT_COUNT, slot};

mod link;
mod server;

use self::link::{Conn, Event, health_check, subscribe};
use self::server::follow_server;

/// How often a standalone subscriber checks that it follows the server
/// serving the slots now, and the task checks that its handle is alive.
const WATCH_INTERVAL: Duration = Duration::from_millis(500);
/// How often the cluster subscriber compares what it follows with the
/// router's table and node states.
const TICK: Duration = Duration::from_millis(100);
/// How often each subscription connection is health-checked, and how long
/// its `PING` may take before the connection counts as lost.
pub(crate) const PING_INTERVAL: Duration = Duration::from_secs(1);
pub(crate) const PING_TIMEOUT: Duration = Duration::from_secs(1);
/// The first and largest wait before trying a node again after a failed
/// connection or subscription.
const RETRY_MIN: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(5);
/// The wait before following a standalone server again after a failure.
const RETRY_AFTER: Duration = Duration::from_millis(500);

/// What the subscriber follows and where what it hears goes: implemented
/// above the transport (by the deny caches' hub), so that the transport
/// names no feature. Called from the subscriber's tasks: each method must
/// be quick and must not block.
pub(crate) trait ChannelSink: Send + Sync {
    /// The shard channel followed for `slot`; it must hash to `slot`
    /// (`SSUBSCRIBE` goes to the slot's owner, and a dropped channel's slot
    /// is told by its name).
    fn slot_channel(&self, slot: u16) -> String;
    /// The one channel followed on a standalone server or Sentinel primary.
    fn server_channel(&self) -> String;
    /// A message came on a followed channel.
    fn message(&self, payload: &[u8]);
    /// `slots`' channels are no longer followed on their owners (lost, or
    /// never confirmed): their messages may be missed from now on.
    fn lost(&self, slots: &[u16]);
    /// No channel is followed any more.
    fn lost_all(&self);
    /// `slot`'s channel is followed (again): its owner confirmed it.
    fn gained(&self, slot: u16);
    /// The server's one channel is followed: every slot's messages come.
    fn gained_all(&self);
}

/// What the subscriber needs beyond the router.
#[derive(Clone)]
pub(crate) struct SubscriberConfig {
    pub(crate) connect_timeout: Duration,
}

impl Cluster {
    /// Follows `sink`'s channels in the background, as the module docs
    /// say, until this handle or the sink is gone. The caller starts it
    /// once per sink, from within a tokio runtime (without one nothing
    /// starts).
    pub(crate) fn follow_channels(&self, sink: Weak<dyn ChannelSink>) {
        start(sink, &self.inner.router, &self.inner.subscriber);
    }
}

/// Starts following the channels, if a runtime is running.
fn start(sink: Weak<dyn ChannelSink>, router: &Arc<Router>, config: &SubscriberConfig) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let (router, config) = (Arc::downgrade(router), config.clone());
    runtime.spawn(async move {
        // A subscription that keeps failing (a missing ACL permission, say)
        // leaves the deny caches off: said, at most every few seconds.
        let warn = crate::warn::WarnLimiter::new();
        loop {
            let standalone = match router.upgrade() {
                Some(router) => router.is_standalone(),
                None => return,
            };
            let ended = if standalone {
                follow_server(&sink, &router, &config).await
            } else {
                follow_cluster(&sink, &router, &warn).await;
                Ok(())
            };
            match sink.upgrade() {
                Some(sink) => sink.lost_all(),
                None => return,
            }
            if let Err(err) = ended {
                warn_failure(&warn, &err);
            }
            tokio::time::sleep(RETRY_AFTER).await;
        }
    });
}

fn warn_failure(warn: &crate::warn::WarnLimiter, err: &redis::RedisError) {
    if let Some(failures) = warn.should_warn() {
        tracing::warn!(
            error = %err,
            failures_since_last_warning = failures,
            "shardlimit: deny caches cannot follow some invalidations, so they cache \
             nothing for the slots concerned until they can; retrying"
        );
    }
}

/// What a slot's subscription is now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlotState {
    /// Not subscribed (or no longer trusted).
    Off,
    /// `SSUBSCRIBE` sent on connection `id`, not confirmed yet.
    Pending(u64),
    /// Confirmed on connection `id`, which is still healthy.
    Live(u64),
}

/// When a node may be tried again.
struct Retry {
    backoff: Duration,
    not_before: Instant,
}

/// The cluster subscriber's state, driven by one task.
struct Follower<'a> {
    sink: &'a Weak<dyn ChannelSink>,
    router: &'a Weak<Router>,
    warn: &'a crate::warn::WarnLimiter,
    events: mpsc::UnboundedSender<Event>,
    /// By node address.
    conns: HashMap<String, Conn>,
    slots: Vec<SlotState>,
    retry: HashMap<String, Retry>,
    next_id: u64,
    all_live: bool,
    /// What the last full comparison saw: the table's version, and each
    /// owner with whether it was down. While neither changed, no event
    /// came and every slot was live, a tick has nothing to do.
    compared: Option<u64>,
    nodes: Vec<(Arc<Node>, bool)>,
    dirty: bool,
}

/// Follows a cluster's slot channels until the sink or the router is gone,
/// or the deployment turns out to be no cluster.
async fn follow_cluster(
    sink: &Weak<dyn ChannelSink>,
    router: &Weak<Router>,
    warn: &crate::warn::WarnLimiter,
) {
    let (events, mut rx) = mpsc::unbounded_channel();
    let mut follower = Follower {
        sink,
        router,
        warn,
        events,
        conns: HashMap::new(),
        slots: vec![SlotState::Off; usize::from(SLOT_COUNT)],
        retry: HashMap::new(),
        next_id: 0,
        all_live: false,
        compared: None,
        nodes: Vec::new(),
        dirty: true,
    };
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let going = tokio::select! {
            event = rx.recv() => match event {
                Some(event) => follower.handle(event),
                None => false,
            },
            _ = tick.tick() => follower.tick(),
        };
        if !going {
            return;
        }
    }
}

impl Follower<'_> {
    /// Compares what is followed with the router's table and node states,
    /// drops what no longer holds and subscribes what is missing. False
    /// when the task should end.
    fn tick(&mut self) -> bool {
        let (Some(sink), Some(router)) = (self.sink.upgrade(), self.router.upgrade()) else {
            return false;
        };
        if router.is_standalone() {
            return false;
        }
        let unchanged = !self.dirty
            && self.compared == Some(router.table_version())
            && self
                .nodes
                .iter()
                .all(|(node, down)| node.is_down() == *down);
        if unchanged {
            return true;
        }
        let now = Instant::now();
        let mut lost = Vec::new();
        let mut owners: HashMap<String, (Arc<Node>, Vec<u16>)> = HashMap::new();
        // Per distinct node (a handful): whether it is up, and the id of
        // its open subscription connection.
        let mut seen: Vec<(Arc<Node>, bool, Option<u64>)> = Vec::new();
        let (version, table) = router.owners();
        for (slot, owner) in (0..SLOT_COUNT).zip(table) {
            let (owner, open) = match owner {
                None => (None, None),
                Some(node) => {
                    let known = seen.iter().position(|(n, ..)| Arc::ptr_eq(n, &node));
                    let i = known.unwrap_or_else(|| {
                        let open = self
                            .conns
                            .get(node.addr())
                            .filter(|c| c.open.is_some())
                            .map(|c| c.id);
                        seen.push((node.clone(), !node.is_down(), open));
                        seen.len() - 1
                    });
                    let (_, up, open) = seen[i];
                    if up { (Some(node), open) } else { (None, None) }
                }
            };
            let state = &mut self.slots[usize::from(slot)];
            let wanted = match *state {
                SlotState::Live(id) | SlotState::Pending(id) if Some(id) == open => false,
                SlotState::Live(_) => {
                    lost.push(slot);
                    *state = SlotState::Off;
                    true
                }
                SlotState::Pending(_) | SlotState::Off => {
                    *state = SlotState::Off;
                    true
                }
            };
            if let Some(node) = owner {
                let entry = owners
                    .entry(node.addr().to_owned())
                    .or_insert_with(|| (node, Vec::new()));
                if wanted {
                    entry.1.push(slot);
                }
            }
        }
        sink.lost(&lost);
        // Connections to nodes that own nothing now (a failed-over master,
        // a node whose slots all moved) are closed.
        self.conns.retain(|addr, _| owners.contains_key(addr));
        for (addr, (node, slots)) in owners {
            if slots.is_empty() || self.retry.get(&addr).is_some_and(|r| r.not_before > now) {
                continue;
            }
            match self.conns.get(&addr) {
                None => self.open(&addr, node),
                Some(Conn { open: None, .. }) => {}
                Some(Conn {
                    id,
                    open: Some((conn, _)),
                    ..
                }) => {
                    let (id, conn) = (*id, conn.clone());
                    for &slot in &slots {
                        self.slots[usize::from(slot)] = SlotState::Pending(id);
                    }
                    let channels: Vec<(u16, String)> = slots
                        .into_iter()
                        .map(|s| (s, sink.slot_channel(s)))
                        .collect();
                    tokio::spawn(subscribe(conn, id, channels, self.events.clone()));
                }
            }
        }
        self.compared = Some(version);
        self.nodes = seen.into_iter().map(|(node, up, _)| (node, !up)).collect();
        // Anything not live yet (pending, refused, waiting for a retry, or
        // without an owner) is looked at again next tick.
        let all_live = self
            .slots
            .iter()
            .all(|state| matches!(state, SlotState::Live(_)));
        self.report_all_live(all_live);
        self.dirty = !all_live;
        true
    }

    /// Opens a subscription connection to `node` in the background.
    fn open(&mut self, addr: &str, node: Arc<Node>) {
        let id = self.next_id;
        self.next_id += 1;
        self.conns.insert(
            addr.to_owned(),
            Conn {
                id,
                open: None,
                pinger: None,
            },
        );
        let events = self.events.clone();
        let sink = self.sink.clone();
        tokio::spawn(async move {
            let pushes = events.clone();
            // A message is applied where it is read, by the connection's
            // own task: never behind the follower's other work.
            let push = move |push: PushInfo| {
                if push.kind == PushKind::SMessage {
                    if let (Some(sink), Some(Value::BulkString(message))) =
                        (sink.upgrade(), push.data.get(1))
                    {
                        sink.message(message);
                    }
                    return Ok(());
                }
                pushes.send(Event::Push(id, push)).map_err(drop)
            };
            let opened = node.open_subscriber(push).await;
            let _ = events.send(Event::Opened(id, opened));
        });
    }

    /// The address of connection `id`, if it is still one of ours.
    fn addr_of(&self, id: u64) -> Option<String> {
        self.conns
            .iter()
            .find(|(_, c)| c.id == id)
            .map(|(addr, _)| addr.clone())
    }

    /// Connection `id` failed: closed, its slots lost, its node retried
    /// after a backoff.
    fn drop_conn(&mut self, id: u64, sink: &dyn ChannelSink) {
        if let Some(addr) = self.addr_of(id) {
            self.conns.remove(&addr);
            self.back_off(&addr);
        }
        let mut lost = Vec::new();
        for (slot, state) in (0..SLOT_COUNT).zip(self.slots.iter_mut()) {
            match *state {
                SlotState::Live(on) if on == id => {
                    lost.push(slot);
                    *state = SlotState::Off;
                }
                SlotState::Pending(on) if on == id => *state = SlotState::Off,
                _ => {}
            }
        }
        sink.lost(&lost);
    }

    fn back_off(&mut self, addr: &str) {
        let retry = self.retry.entry(addr.to_owned()).or_insert(Retry {
            backoff: RETRY_MIN / 2,
            not_before: Instant::now(),
        });
        retry.backoff = (retry.backoff * 2).clamp(RETRY_MIN, RETRY_MAX);
        retry.not_before = Instant::now() + retry.backoff;
    }

    /// False when the task should end.
    fn handle(&mut self, event: Event) -> bool {
        let Some(sink) = self.sink.upgrade() else {
            return false;
        };
        // Whatever happened, the next tick compares again.
        self.dirty = true;
        match event {
            Event::Push(id, push) => match push.kind {
                // The server dropped a channel (its slot moved away): not
                // followed until subscribed again, on the new owner.
                PushKind::SUnsubscribe => {
                    if let Some(Value::BulkString(channel)) = push.data.first() {
                        let slot = slot(channel);
                        let state = &mut self.slots[usize::from(slot)];
                        if matches!(*state, SlotState::Live(on) | SlotState::Pending(on) if on == id)
                        {
                            *state = SlotState::Off;
                            sink.lost(&[slot]);
                            if let Some(router) = self.router.upgrade() {
                                router.request_refresh();
                            }
                        }
                    }
                }
                PushKind::Disconnection => self.drop_conn(id, &*sink),
                _ => {}
            },
            Event::Opened(id, opened) => {
                let Some(addr) = self.addr_of(id) else {
                    return true;
                };
                match opened {
                    Ok((conn, socket)) => {
                        let socket = Arc::new(socket);
                        let pinger = tokio::spawn(health_check(
                            conn.clone(),
                            socket.clone(),
                            id,
                            self.events.clone(),
                        ));
                        if let Some(c) = self.conns.get_mut(&addr) {
                            c.open = Some((conn, socket));
                            c.pinger = Some(pinger.abort_handle());
                        }
                    }
                    Err(err) => {
                        warn_failure(self.warn, &err);
                        self.conns.remove(&addr);
                        self.back_off(&addr);
                    }
                }
            }
            Event::Dead(id) => self.drop_conn(id, &*sink),
            Event::Subscribed(id, slot, outcome) => {
                let state = &mut self.slots[usize::from(slot)];
                if *state != SlotState::Pending(id) {
                    return true;
                }
                match outcome {
                    Ok(()) => {
                        *state = SlotState::Live(id);
                        sink.gained(slot);
                        if let Some(addr) = self.addr_of(id) {
                            self.retry.remove(&addr);
                        }
                    }
                    Err(err) => {
                        *state = SlotState::Off;
                        // A slot that just moved is refused by its old
                        // owner until the table is read again: expected
                        // while slots move, not worth a warning.
                        let moving = matches!(
                            err.kind(),
                            redis::ErrorKind::Server(
                                redis::ServerErrorKind::Moved
                                    | redis::ServerErrorKind::Ask
                                    | redis::ServerErrorKind::TryAgain
                            )
                        );
                        if moving {
                            tracing::debug!(slot, error = %err,
                                "shardlimit: deny-cache subscription redirected");
                        } else {
                            warn_failure(self.warn, &err);
                        }
                        if let Some(addr) = self.addr_of(id) {
                            self.back_off(&addr);
                        }
                        // MOVED, say: the table may be stale.
                        if let Some(router) = self.router.upgrade() {
                            router.request_refresh();
                        }
                    }
                }
            }
        }
        true
    }

    /// Says so when every slot has just become live: at the first tick
    /// after the last confirmation, which compares every slot anyway.
    fn report_all_live(&mut self, all: bool) {
        if all && !self.all_live {
            tracing::debug!(
                channels = SLOT_COUNT,
                connections = self.conns.len(),
                "shardlimit: deny-cache invalidations followed on every slot"
            );
        }
        self.all_live = all;
    }
}

pub(super) fn timed_out(what: &'static str) -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(std::io::ErrorKind::TimedOut, what))
}
