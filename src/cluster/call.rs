//! One request to one node, without redirects: the connection (refused at
//! once while the node is down), the deadline, and what a failure tells the
//! node's health.
//!
//! Below the router (which asks nodes for the topology through it), `exec`
//! (which sends slot-pinned operations through it) and `batch` (which sends
//! a pipeline per node through it); it tells the routing layer about a node
//! going down through [`Refresh`], so it needs nothing from them.

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionLike;
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
pub(crate) enum Request<'a> {
    /// One command; a server error is returned as an error.
    Cmd(&'a Cmd),
    /// A plain (not atomic) pipeline; every reply is returned, server
    /// errors as values.
    Pipeline(&'a Pipeline),
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
    let op = op.into();
    tokio::task::coop::consume_budget().await; // see `exec::run`
    let deadline = Instant::now() + timeout;
    let live = connect(router, node, Lane::Shared, deadline, &op, None, timeout).await?;
    let mut conn = live.conn.clone();
    let sent = async {
        match request {
            Request::Cmd(cmd) => conn.req_packed_command(cmd).await?.extract_error(),
            Request::Pipeline(pipe) => conn
                .req_packed_commands(pipe, 0, pipe.len())
                .await
                .map(Value::Array),
        }
    };
    match timeout_at(deadline, sent).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(source)) => {
            if is_connection_fault(&source) {
                report(router, node, &live, Fault::Broken);
            }
            Err(Error::Redis {
                op,
                slot: None,
                source,
            })
        }
        Err(_elapsed) => {
            report(router, node, &live, Fault::Timeout);
            Err(Error::Timeout {
                op,
                slot: None,
                timeout,
            })
        }
    }
}

/// A connection to `node`, or the error that says why there is none: a node
/// known down is refused at once, without sending anything.
#[allow(clippy::ptr_arg)] // as in `exec::run`
pub(crate) async fn connect(
    router: &dyn Refresh,
    node: &Arc<Node>,
    lane: Lane,
    deadline: Instant,
    op: &Cow<'static, str>,
    slot: Option<u16>,
    timeout: Duration,
) -> Result<Live> {
    match timeout_at(deadline, node.connection(lane)).await {
        Ok(Ok(live)) => Ok(live),
        Ok(Err(Unavailable::Down {
            refused: Some(source),
            ..
        })) => Err(Error::Redis {
            op: op.clone(),
            slot,
            source,
        }),
        Ok(Err(Unavailable::Down {
            since,
            refused: None,
        })) => Err(Error::NodeDown {
            op: op.clone(),
            slot,
            node: node.addr().to_owned(),
            down_for: since.elapsed(),
        }),
        Ok(Err(Unavailable::Connect(source))) => {
            // The node just went down (or was never reachable): its slots
            // may have moved, so look for the new owner.
            router.request_refresh();
            Err(Error::Redis {
                op: op.clone(),
                slot,
                source,
            })
        }
        Err(_elapsed) => Err(Error::Timeout {
            op: op.clone(),
            slot,
            timeout,
        }),
    }
}

/// Why a request written to a node got no reply. Either way it **may have
/// run**: the caller returns the error and never resends the request.
#[derive(Debug)]
pub(crate) enum Lost {
    /// No reply by the deadline.
    TimedOut,
    /// The connection failed (I/O error, dropped, timed out in the client).
    Broken(RedisError),
}

impl Lost {
    /// The error for the caller of operation `op` on `slot`.
    #[allow(clippy::ptr_arg)] // as in `exec::run`
    pub(crate) fn into_error(
        self,
        op: &Cow<'static, str>,
        slot: Option<u16>,
        timeout: Duration,
    ) -> Error {
        match self {
            Lost::TimedOut => Error::Timeout {
                op: op.clone(),
                slot,
                timeout,
            },
            Lost::Broken(source) => Error::Redis {
                op: op.clone(),
                slot,
                source,
            },
        }
    }
}

/// Awaits `sent` (a request written on `live`, a connection to `node`) until
/// `deadline`: its reply, a server error for the caller to classify (the
/// connection is fine), or [`Lost`] — which is also reported to the node's
/// health.
pub(crate) async fn exchange<T>(
    router: &dyn Refresh,
    node: &Node,
    live: &Live,
    deadline: Instant,
    timeout: Duration,
    sent: impl Future<Output = RedisResult<T>>,
) -> Result<RedisResult<T>, Lost> {
    let sent_at = Instant::now();
    match timeout_at(deadline, sent).await {
        Ok(Ok(reply)) => Ok(Ok(reply)),
        Ok(Err(err)) if is_connection_fault(&err) => {
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
            if sent_at.elapsed() >= timeout / 2 {
                report(router, node, live, Fault::Timeout);
            }
            Err(Lost::TimedOut)
        }
    }
}

/// Tells the node about a failed request; a node that went down makes the
/// router look for a new topology (its slots may have moved).
pub(crate) fn report(router: &dyn Refresh, node: &Node, live: &Live, fault: Fault) {
    if node.report(live, fault) {
        router.request_refresh();
    }
}
