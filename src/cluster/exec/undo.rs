//! Sending an [`Undo`]: taking back what an operation may have taken (a
//! lock, a lease) after it failed, ordered after it on the wire.
//!
//! Redis runs one connection's commands in order. So the undo goes first on
//! the very connection the operation was written on — the node's blocking
//! lane when the operation carries a `WAIT` — right behind it, even if the
//! router has dropped or replaced that connection meanwhile. Sent anywhere
//! else it could overtake an operation still queued there, find nothing,
//! and leave what the operation then takes held by no one.
//!
//! This task then waits for the undo's reply for as long as what it undoes
//! can live, and at least [`MIN_REPLY_WAIT`] — not the command timeout —
//! and holds the connection open meanwhile, for two reasons. redis-rs writes nothing whose caller has
//! gone: an undo given up while it still waits in the connection's queue
//! (behind a backlog on a stalled master) is dropped unwritten. And the
//! connection's socket closes with its last holder (the node drops its own
//! when it marks the node down), taking every unwritten byte with it. An
//! undo given up early was lost both ways behind a master that stalled
//! under load, while the operation, already in the kernel's buffers, ran
//! when the master resumed (issue 39).
//!
//! | the undo on that connection | meaning | what happens |
//! |---|---|---|
//! | answered | the operation ran before it | done; a redirect, `TRYAGAIN` or `NOSCRIPT` is followed as for any call (the keys moved, or the script was not cached), anything else is the undo's result |
//! | no reply in that wait | the operation, if it runs, runs after it — unless the master stalled for longer than the wait and was not failed over meanwhile; then what it takes is held until it expires | done |
//! | connection broken | the server ran the operation or discarded it, and runs nothing more from that connection | sent again by slot on another connection, and retried while the node is down or unreachable, until what it undoes would have expired anyway |
//!
//! The last row relies on this: a connection the client finds broken was
//! closed by the server (`CLIENT KILL`, a restart, an idle timeout) or by
//! the network, and the server runs nothing more from it. A connection the
//! client closes itself is not such a proof — a hung server that resumes
//! still runs what it had received before the close, in order — so the
//! undo never leaves a connection that still works.
//!
//! An undo must be harmless when the operation never ran, or was undone
//! already: a compare-and-delete by the operation's random token.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::Instant;

use super::payload::Undo;
use super::{Step, drive, next_step, send};
use crate::backoff::Backoff;
use crate::cluster::call::{Lost, Op, Refresh, exchange};
use crate::cluster::node::{Live, Node};
use crate::cluster::router::Router;
use crate::error::{Error, Result};

/// Bounds of the jittered, growing wait between two attempts of an undo
/// sent again by slot. A node that is down is refused without sending and
/// reconnects only when its probe (once per reconnect backoff) succeeds:
/// trying more often than this gains nothing.
const RETRY_MIN: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(2);

/// The least time the undo waits for its reply on the operation's
/// connection, whatever the lifetime of what it undoes: the operation runs
/// only when the master reads it, and a master that stalls longer than its
/// `cluster-node-timeout` (15 s by default) is failed over — what it runs
/// on resuming is then discarded when it rejoins as a replica.
const MIN_REPLY_WAIT: Duration = Duration::from_secs(30);

/// The connection an operation was written on.
pub(crate) struct Behind {
    pub(super) node: Arc<Node>,
    pub(super) live: Live,
    /// The operation went as `ASKING` + operation (its slot is being
    /// imported by that node): so must the undo.
    pub(super) asking: bool,
}

/// Sends `undo` in the background: behind the operation on `behind` when
/// given, else by slot (for an operation that was answered: anything sent
/// now comes after it). Without a tokio runtime nothing is sent.
pub(crate) fn spawn(router: &Router, undo: Undo, behind: Option<Behind>, timeout: Duration) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(run(router.handle(), undo, behind, timeout));
}

/// The undo's life (see the module docs). Holds the router weakly, so it
/// ends when the cluster handle is gone — except while it waits for the
/// reply on the operation's connection, which it finishes.
async fn run(router: Weak<Router>, undo: Undo, behind: Option<Behind>, timeout: Duration) {
    // A lifetime is at most `MAX_MILLIS` (35 years), which an instant holds;
    // checked all the same, as `+` would panic.
    let give_up = Instant::now().checked_add(undo.lifetime);
    let op = undo.script.name_cow();
    let mut replied = None;
    if let Some(Behind { node, live, asking }) = behind {
        let payload = undo.payload();
        let mut conn = live.conn.clone();
        let sent = send(&mut conn, &payload, asking);
        let wait = undo.lifetime.max(MIN_REPLY_WAIT);
        let until = Instant::now()
            .checked_add(wait)
            .unwrap_or_else(|| Instant::now() + MIN_REPLY_WAIT);
        let on = Op::until(op.clone(), Some(undo.slot), until, wait);
        match exchange(&WeakRouter(&router), &node, &live, &on, sent).await {
            Ok(Ok(_)) => return finished(&undo, Ok(())),
            Ok(Err(source)) if matches!(next_step(&source, 0), Step::Fail) => {
                let slot = Some(undo.slot);
                return finished(&undo, Err(Error::Redis { op, slot, source }));
            }
            // Answered, so the operation ran before it: go on from this
            // reply on any connection.
            Ok(Err(err)) => replied = Some(err),
            Err(Lost::TimedOut) => {
                tracing::debug!(
                    script = undo.script.name(),
                    "shardlimit: no reply to the undo of a failed acquisition while what it \
                     undoes could live"
                );
                return;
            }
            // The connection ended (before the undo reached it, or under
            // it): the server runs nothing more from it.
            Err(Lost::Broken(_) | Lost::Unsent(_)) => {}
        }
    }
    let mut backoff = Backoff::new(RETRY_MIN, RETRY_MAX);
    loop {
        let Some(router) = router.upgrade() else {
            return;
        };
        let on = Op::new(op.clone(), Some(undo.slot), timeout);
        let outcome = drive(&router, &on, undo.slot, undo.payload(), replied.take()).await;
        drop(router);
        let now = Instant::now();
        match outcome {
            Err(err) if err.is_transient() && give_up.is_none_or(|end| now < end) => {
                let left = give_up.map_or(RETRY_MAX, |end| end - now);
                tokio::time::sleep(backoff.next(left)).await;
            }
            outcome => return finished(&undo, outcome.map(drop)),
        }
    }
}

/// The router as the wait on the operation's connection tells it about a
/// failed node: only while the cluster handle lives.
struct WeakRouter<'a>(&'a Weak<Router>);

impl Refresh for WeakRouter<'_> {
    fn request_refresh(&self) {
        if let Some(router) = self.0.upgrade() {
            router.request_refresh();
        }
    }
}

fn finished(undo: &Undo, outcome: Result<()>) {
    match outcome {
        Ok(()) => tracing::debug!(
            script = undo.script.name(),
            "shardlimit: sent the undo of a failed acquisition"
        ),
        Err(err) => tracing::debug!(script = undo.script.name(), error = %err,
            "shardlimit: could not undo a failed acquisition; what it took expires with its TTL"),
    }
}
