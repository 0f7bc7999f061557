//! One request to one node, without redirects: the connection (refused at
//! once while the node is down), the deadline, the one resend of a request
//! the connection never wrote, and what a failure tells the node's health.
//!
//! Below the router (which asks nodes for the topology through it), `exec`
//! (which sends slot-pinned operations through it) and `batch` (which sends
//! a pipeline per node through it); it tells the routing layer about a node
//! going down through [`Refresh`], so it needs nothing from them.

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{Cmd, Pipeline, RedisError, RedisResult, Value};
use tokio::time::{Instant, timeout_at};

use super::node::{Fault, Lane, Live, Node, Unavailable};
use crate::error::{Error, Result, is_connection_fault};

/// The routing layer, told when a node fails: its slots may have moved, so
/// a new topology is looked for in the background.
pub(crate) trait Refresh: Sync {
    /// Asks for a topology refresh; returns at once.
    fn request_refresh(&self);
}

/// What is sent by [`node_request`].
#[derive(Clone, Copy)]
pub(crate) enum Request<'a> {
    /// One command; a server error is returned as an error.
    Cmd(&'a Cmd),
    /// A plain (not atomic) pipeline; every reply is returned, server
    /// errors as values.
    Pipeline(&'a Pipeline),
}

/// One operation's context, passed down the transport instead of its
/// parts: its name and slot as its errors give them, and its bounds — every
/// attempt and resend ends by `deadline`, which is `timeout` after it
/// started.
#[derive(Clone, Debug)]
pub(crate) struct Op {
    pub(crate) name: Cow<'static, str>,
    pub(crate) slot: Option<u16>,
    pub(crate) deadline: Instant,
    pub(crate) timeout: Duration,
}

impl Op {
    /// `name` on `slot` (`None`: a request to a node, no slot), starting
    /// now, ending `timeout` from now.
    pub(crate) fn new(name: Cow<'static, str>, slot: Option<u16>, timeout: Duration) -> Self {
        Op::until(name, slot, Instant::now() + timeout, timeout)
    }

    /// `name` on `slot`, ending at `deadline` (a batch's, shared by its
    /// calls); `timeout` is what its errors say it was given.
    pub(crate) fn until(
        name: Cow<'static, str>,
        slot: Option<u16>,
        deadline: Instant,
        timeout: Duration,
    ) -> Self {
        Op {
            name,
            slot,
            deadline,
            timeout,
        }
    }
}

/// Sends `request` to `node`, without following redirects, within
/// `timeout`.
pub(crate) async fn node_request(
    node: &Arc<Node>,
    op: impl Into<Cow<'static, str>>,
    request: Request<'_>,
    timeout: Duration,
    router: &dyn Refresh,
) -> Result<Value> {
    tokio::task::coop::consume_budget().await; // see `exec::run`
    let op = Op::new(op.into(), None, timeout);
    let reply = deliver(router, node, Lane::Shared, &op, |mut conn| async move {
        match request {
            Request::Cmd(cmd) => conn.req_packed_command(cmd).await?.extract_error(),
            Request::Pipeline(pipe) => conn
                .req_packed_commands(pipe, 0, pipe.len())
                .await
                .map(Value::Array),
        }
    })
    .await?
    .into_reply(&op)?;
    reply.map_err(|source| Error::Redis {
        op: op.name,
        slot: None,
        source,
    })
}

/// The last attempt of a request: the connection it went on, and what
/// came of it.
pub(crate) struct Delivered<T> {
    pub(crate) live: Live,
    pub(crate) outcome: Result<RedisResult<T>, Lost>,
}

impl<T> Delivered<T> {
    /// The reply, or a server error for the caller to classify; a lost
    /// request as the error for the caller of `op`.
    pub(crate) fn into_reply(self, op: &Op) -> Result<RedisResult<T>> {
        self.outcome.map_err(|lost| lost.into_error(op))
    }
}

/// Sends a request to `node` on `lane` — `send` writes it on the
/// connection it is given — and awaits the reply until the deadline.
/// Errors only when no connection could be had: a node known down is
/// refused at once, without sending anything.
///
/// A request the connection provably never wrote is sent once more, on a
/// fresh connection: the connection had ended (the server's idle
/// `timeout`, `CLIENT KILL`, a proxy) before it took the request, which
/// says nothing about the node. Any other failure of the connection may
/// have come after the request ran: it is the outcome ([`Lost`]), it was
/// reported to the node's health, and the request is never resent.
pub(crate) async fn deliver<T, F, Fut>(
    router: &dyn Refresh,
    node: &Arc<Node>,
    lane: Lane,
    op: &Op,
    send: F,
) -> Result<Delivered<T>>
where
    F: Fn(MultiplexedConnection) -> Fut,
    Fut: Future<Output = RedisResult<T>>,
{
    let mut resent = false;
    loop {
        let live = connect(router, node, lane, op).await?;
        let outcome = exchange(router, node, &live, op, send(live.conn.clone())).await;
        match outcome {
            Err(Lost::Unsent(err)) if !resent => {
                tracing::debug!(node = node.addr(), op = %op.name, error = %err,
                    "shardlimit: the connection ended before the request was written; \
                     sending it on a fresh one");
                resent = true;
            }
            outcome => return Ok(Delivered { live, outcome }),
        }
    }
}

/// A connection to `node`, or the error that says why there is none: a node
/// known down is refused at once, without sending anything.
async fn connect(router: &dyn Refresh, node: &Arc<Node>, lane: Lane, op: &Op) -> Result<Live> {
    let (slot, name) = (op.slot, &op.name);
    match timeout_at(op.deadline, node.connection(lane)).await {
        Ok(Ok(live)) => Ok(live),
        Ok(Err(Unavailable::Down {
            refused: Some(source),
            ..
        })) => Err(Error::Redis {
            op: name.clone(),
            slot,
            source,
        }),
        Ok(Err(Unavailable::Down {
            since,
            refused: None,
        })) => Err(Error::NodeDown {
            op: name.clone(),
            slot,
            node: node.addr().to_owned(),
            down_for: since.elapsed(),
        }),
        Ok(Err(Unavailable::Connect(source))) => {
            // The node just went down (or was never reachable): its slots
            // may have moved, so look for the new owner.
            router.request_refresh();
            Err(Error::Redis {
                op: name.clone(),
                slot,
                source,
            })
        }
        Err(_elapsed) => Err(Error::Timeout {
            op: name.clone(),
            slot,
            timeout: op.timeout,
        }),
    }
}

/// Why a request handed to a connection got no reply.
#[derive(Debug)]
pub(crate) enum Lost {
    /// Never written: the connection ended before its socket took any of
    /// the request. Safe to send again.
    Unsent(RedisError),
    /// No reply by the deadline: **may have run**, never resent.
    TimedOut,
    /// The connection failed (I/O error, dropped, timed out in the client)
    /// after the request may have been written: **may have run**, never
    /// resent.
    Broken(RedisError),
}

impl Lost {
    /// The error for the caller of `op`.
    pub(crate) fn into_error(self, op: &Op) -> Error {
        match self {
            Lost::TimedOut => Error::Timeout {
                op: op.name.clone(),
                slot: op.slot,
                timeout: op.timeout,
            },
            Lost::Unsent(source) | Lost::Broken(source) => Error::Redis {
                op: op.name.clone(),
                slot: op.slot,
                source,
            },
        }
    }
}

/// Awaits `sent` (a request not yet handed to `live`, a connection to
/// `node`) until the deadline: its reply, a server error for the caller to
/// classify (the connection is fine), or [`Lost`] — which, unless the
/// request was never written, is also reported to the node's health.
pub(crate) async fn exchange<T>(
    router: &dyn Refresh,
    node: &Arc<Node>,
    live: &Live,
    op: &Op,
    sent: impl Future<Output = RedisResult<T>>,
) -> Result<RedisResult<T>, Lost> {
    // `sent` is not polled yet, so no byte of it can be on the socket.
    let written = live.socket.written();
    let sent_at = Instant::now();
    live.socket.touch();
    let outcome = timeout_at(op.deadline, sent).await;
    live.socket.touch();
    match outcome {
        Ok(Ok(reply)) => Ok(Ok(reply)),
        Ok(Err(err)) if is_connection_fault(&err) => {
            if !err.is_timeout() && never_written(live, written, op.deadline).await {
                node.discard(live);
                return Err(Lost::Unsent(err));
            }
            let fault = if err.is_timeout() {
                Fault::Timeout
            } else {
                Fault::Broken
            };
            report(router, node, live, fault);
            Err(Lost::Broken(err))
        }
        Ok(Err(err)) => Ok(Err(err)),
        Err(_elapsed) => {
            // Only a request the node left unanswered for a long time says
            // it may be hung; one cut short by the deadline (a retry after
            // CLUSTERDOWN replies, say) does not.
            if sent_at.elapsed() >= op.timeout / 2 {
                report(router, node, live, Fault::Timeout);
            }
            Err(Lost::TimedOut)
        }
    }
}

/// Whether a request that failed on `live`, handed to it when its socket
/// had taken `written` bytes, was never written: the connection has ended
/// and its socket took no byte since. Nothing is written after the end, so
/// none of the request ever will be.
async fn never_written(live: &Live, written: u64, deadline: Instant) -> bool {
    // A connection failure ends the driver in the same poll that fails the
    // request, so the end is microseconds away; a bound in case the thread
    // is descheduled. Past it the request counts as maybe written: safe.
    const ENDS_WITHIN: Duration = Duration::from_millis(100);
    let by = deadline.min(Instant::now() + ENDS_WITHIN);
    timeout_at(by, live.socket.ended()).await.is_ok() && live.socket.written() == written
}

/// Tells the node about a failed request; a node that went down makes the
/// router look for a new topology (its slots may have moved).
fn report(router: &dyn Refresh, node: &Arc<Node>, live: &Live, fault: Fault) {
    if node.report(live, fault) {
        router.request_refresh();
    }
}
