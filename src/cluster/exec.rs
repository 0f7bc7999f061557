//! Sending one slot-pinned operation and following the cluster's redirects.
//!
//! Every request goes to one node's multiplexed connection, chosen by the
//! router's slot table, and is bounded by one deadline. Every retry decision
//! is made here, where it is known which errors prove the operation did
//! **not** run:
//!
//! | reply | meaning | what happens |
//! |---|---|---|
//! | `MOVED slot host:port` | slot owned elsewhere; not executed | update the slot table, ask for a refresh, resend to that node |
//! | `ASK slot host:port` | slot migrating, key already moved; not executed | resend to that node as `ASKING` + op in one pipeline |
//! | `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`, `LOADING`, `READONLY`, no node for the slot | not executed | ask for a refresh, short backoff, resend by slot |
//! | `TRYAGAIN` for a script sent [`split_when_migrating`](Payload::split_when_migrating) | its keys are split by a migration; not executed | returned at once: the caller does the work on one key at a time |
//! | the node is known to be down | not sent | returned at once |
//! | `NOSCRIPT` | script not cached on that node; not executed | resend as `EVAL` with the body |
//! | the connection had ended before it wrote the request (the server's idle `timeout`, `CLIENT KILL`, a proxy) | **not written** (see `call::deliver`) | resent once on a fresh connection; says nothing about the node |
//! | timeout, I/O error | **may have run** | never resent; reported to the node's health; returned to the caller |
//! | anything else | configuration or script error | returned |
//!
//! An operation that takes something (a lock, a lease) carries an
//! [`Undo`]. After an attempt that may have run — no reply, a broken
//! connection, an error reply other than those above that prove it did
//! not — the undo is sent in the background, behind the operation on the
//! same connection (see `undo`), and the error returned as usual.
//!
//! `ASKING` must immediately precede the command it applies to, and the
//! connection is multiplexed, so it always travels in the same pipeline as
//! the operation (a pipeline is written contiguously). For a transaction the
//! flag survives `MULTI` and covers every queued command and `EXEC`.
//!
//! Transactions are sent as an atomic pipeline, so redis-rs collects the error
//! of every queued command into one `EXECABORT`. An aborted transaction
//! (which executed nothing) is resent when the causes say where:
//!
//! * every queued command got `MOVED` → update the slot table and resend to
//!   that node;
//! * every queued command got `ASK` → resend as `ASKING MULTI … EXEC` to the
//!   importing node (every key has left the source already);
//! * a mix of `ASK` and queued commands, or `TRYAGAIN` → the slot is half
//!   migrated; following `ASK` now would create keys on the target that still
//!   exist on the source, so back off until the migration moves them (the
//!   same rule Redis applies to multi-key commands and scripts).
//!
//! A batch (`batch`) makes the first attempt of many scripts itself, one
//! pipeline per node, and hands each reply that proves a script did not run
//! to [`drive`], which goes on from there by these same rules.

use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{ErrorKind, RedisError, RedisResult, ServerErrorKind, Value};
use tokio::time::Instant;

mod payload;
mod undo;

pub(crate) use self::payload::{Payload, Undo, eval, evalsha};
use self::undo::Behind;
pub(crate) use self::undo::spawn as spawn_undo;
use super::call::{Delivered, Lost, Op, deliver};
use super::router::Router;
use crate::error::{Error, Result, not_executed_yet};

/// Attempts per operation before the last error is returned (the command
/// timeout bounds the total time anyway).
const MAX_ATTEMPTS: u32 = 16;

/// Where the next attempt goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Target {
    /// The node the slot table says serves the slot.
    Slot,
    /// A node named by a redirect.
    Node {
        host: String,
        port: u16,
        asking: bool,
    },
}

/// Runs `payload` on the node serving `slot`, following redirects, within
/// the operation's deadline.
pub(crate) async fn run(
    router: &Router,
    op: &Op,
    slot: u16,
    payload: Payload<'_>,
) -> Result<Value> {
    // A call for a node known down completes in one poll without touching
    // any tokio resource, so a caller looping on it would never yield and
    // could starve its worker thread (timers included). Spend one unit of
    // the task's cooperative budget per call, as tokio's own resources do.
    tokio::task::coop::consume_budget().await;
    drive(router, op, slot, payload, None).await
}

/// [`run`] from a first reply. `replied`, if given, is the error the
/// payload's first attempt got when the caller sent it itself, which must
/// prove it did not run — a redirect, a reply of the cluster reconfiguring,
/// `NOSCRIPT`. It is handled as `run` would handle it (a `MOVED` updates the
/// slot table), then the payload is resent. `None`: nothing was sent yet.
/// `op` names `slot` (`op.slot` is `Some(slot)`).
pub(super) async fn drive(
    router: &Router,
    op: &Op,
    slot: u16,
    mut payload: Payload<'_>,
    mut replied: Option<RedisError>,
) -> Result<Value> {
    let failed = |source| Error::Redis {
        op: op.name.clone(),
        slot: Some(slot),
        source,
    };
    let mut target = Target::Slot;
    let mut attempt = 0;
    loop {
        let err = match replied.take() {
            Some(err) => err,
            None => match attempt_once(router, op, slot, &target, &payload).await? {
                Ok(value) => return Ok(value),
                Err(err) => err,
            },
        };
        attempt += 1;
        if attempt >= MAX_ATTEMPTS {
            return Err(failed(cause(err)));
        }
        match next_step(&err, payload.queued_commands()) {
            // A standalone server (or Sentinel primary) serves every slot;
            // a redirect from it means it is not what it was taken for.
            Step::Redirect(_) if router.is_standalone() => return Err(failed(cause(err))),
            Step::Redirect(next) => {
                if let Target::Node {
                    host,
                    port,
                    asking: false,
                } = &next
                {
                    router.moved(slot, router.node(host, *port)?);
                }
                target = next;
            }
            Step::Backoff if payload.tryagain_to_caller() && is_tryagain(&err) => {
                return Err(failed(err));
            }
            Step::Backoff => {
                router.request_refresh();
                let wake = Instant::now() + backoff(attempt);
                if wake >= op.deadline {
                    return Err(failed(cause(err)));
                }
                tokio::time::sleep_until(wake).await;
                target = Target::Slot;
            }
            Step::Reload if payload.fall_back_to_eval() => {}
            Step::Reload | Step::Fail => return Err(failed(cause(err))),
        }
    }
}

/// One attempt at `target`: the reply, the server error to decide the next
/// step on (`Ok(Err)`), or the error that ends the operation.
async fn attempt_once(
    router: &Router,
    op: &Op,
    slot: u16,
    target: &Target,
    payload: &Payload<'_>,
) -> Result<RedisResult<Value>> {
    let node = match target {
        Target::Slot => match router.owner(slot) {
            Some(node) => node,
            None if !router.loaded() => {
                router.request_refresh();
                return Err(not_connected(router));
            }
            // Known cluster, but no node serves the slot (yet): as if the
            // cluster had said CLUSTERDOWN.
            None => {
                return Ok(Err(RedisError::from((
                    ErrorKind::Server(ServerErrorKind::ClusterDown),
                    "no node serves this slot in the slot table",
                ))));
            }
        },
        Target::Node { host, port, .. } => router.node(host, *port)?,
    };
    let asking = matches!(target, Target::Node { asking: true, .. });
    let Delivered { live, outcome } =
        deliver(router, &node, payload.lane(), op, |mut conn| async move {
            send(&mut conn, payload, asking).await
        })
        .await?;
    if let Some(undo) = payload.undoing().filter(|_| may_have_run(&outcome)) {
        let behind = Behind { node, live, asking };
        undo::spawn(router, undo.clone(), Some(behind), op.timeout);
    }
    outcome.map_err(|lost| lost.into_error(op))
}

/// Whether an attempt's outcome leaves it possible that the operation ran
/// and failed: no reply, or an error reply that does not prove it did not
/// run (see the table above). A reply that is a value is the caller's to
/// judge.
fn may_have_run(outcome: &Result<RedisResult<Value>, Lost>) -> bool {
    match outcome {
        Err(Lost::Unsent(_)) | Ok(Ok(_)) => false,
        Err(Lost::TimedOut | Lost::Broken(_)) => true,
        Ok(Err(err)) => matches!(next_step(err, 0), Step::Fail),
    }
}

/// No topology yet (a lazy connect): [`Error::NotConnectedYet`], unless
/// the seeds refused us (TLS, credentials) — then that error, which is not
/// transient.
pub(super) fn not_connected(router: &Router) -> Error {
    let nodes = router.seed_list().to_owned();
    match router.refusal() {
        Some(source) => Error::Connect { nodes, source },
        None => Error::NotConnectedYet { nodes },
    }
}

pub(super) enum Step {
    Redirect(Target),
    Backoff,
    Reload,
    Fail,
}

/// What to do after `err`; `queued` is the number of commands in a
/// transaction (0 for a script).
pub(super) fn next_step(err: &RedisError, queued: usize) -> Step {
    match err.kind() {
        ErrorKind::Server(ServerErrorKind::ExecAbort) => abort_step(err, queued),
        ErrorKind::Server(kind @ (ServerErrorKind::Moved | ServerErrorKind::Ask)) => {
            match err.redirect_node().and_then(|(addr, _)| split_addr(addr)) {
                Some((host, port)) => Step::Redirect(Target::Node {
                    host,
                    port,
                    asking: kind == ServerErrorKind::Ask,
                }),
                None => Step::Backoff,
            }
        }
        ErrorKind::Server(kind) if not_executed_yet(kind) => Step::Backoff,
        ErrorKind::ClusterConnectionNotFound => Step::Backoff,
        ErrorKind::Server(ServerErrorKind::NoScript) => Step::Reload,
        _ => Step::Fail,
    }
}

/// Decides what to do with an aborted transaction from its queued errors
/// (see the module docs).
fn abort_step(err: &RedisError, queued: usize) -> Step {
    let Some(causes) = err.clone().into_server_errors() else {
        return Step::Fail;
    };
    let Some((_, first)) = causes.first() else {
        return Step::Fail;
    };
    let all = |kind| causes.iter().all(|(_, c)| c.kind() == Some(kind));
    let target = |asking| {
        first
            .details()
            .and_then(|detail| detail.split_ascii_whitespace().nth(1))
            .and_then(split_addr)
            .map(|(host, port)| Target::Node { host, port, asking })
    };
    if all(ServerErrorKind::Moved) {
        return target(false).map_or(Step::Backoff, Step::Redirect);
    }
    if all(ServerErrorKind::Ask) && causes.len() == queued {
        return target(true).map_or(Step::Backoff, Step::Redirect);
    }
    let reconfiguring = causes.iter().any(|(_, c)| {
        c.kind().is_some_and(|k| {
            not_executed_yet(k) || matches!(k, ServerErrorKind::Ask | ServerErrorKind::Moved)
        })
    });
    if reconfiguring {
        Step::Backoff
    } else {
        Step::Fail
    }
}

/// The error to show the caller: for an aborted transaction, the queued
/// command's own error rather than "EXECABORT".
fn cause(err: RedisError) -> RedisError {
    if err.kind() != ErrorKind::Server(ServerErrorKind::ExecAbort) {
        return err;
    }
    match err.clone().into_server_errors() {
        Some(causes) if !causes.is_empty() => causes[0].1.clone().into(),
        _ => err,
    }
}

fn is_tryagain(err: &RedisError) -> bool {
    err.kind() == ErrorKind::Server(ServerErrorKind::TryAgain)
}

fn split_addr(addr: &str) -> Option<(String, u16)> {
    let (host, port) = addr.rsplit_once(':')?;
    Some((host.to_owned(), port.parse().ok()?))
}

fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(5u64 << attempt.min(4))
}

async fn send(
    conn: &mut MultiplexedConnection,
    payload: &Payload<'_>,
    asking: bool,
) -> RedisResult<Value> {
    match payload {
        Payload::Script { cmd, then, .. } => {
            if !asking && then.is_none() {
                return conn.req_packed_command(cmd).await?.extract_error();
            }
            // ASKING must come right before the script, and `then` right
            // after it on this connection: one pipeline, written at once.
            let mut pipe = redis::pipe();
            if asking {
                pipe.cmd("ASKING");
            }
            pipe.add_command(cmd.clone());
            if let Some(then) = then {
                pipe.add_command(then.clone());
            }
            let skip = usize::from(asking);
            let mut replies = conn
                .req_packed_commands(&pipe, skip, pipe.len() - skip)
                .await?
                .into_iter();
            let script = replies
                .next()
                .ok_or_else(|| unexpected("no reply to the script"))?
                .extract_error()?;
            match then {
                None => Ok(script),
                Some(_) => {
                    let next = replies
                        .next()
                        .ok_or_else(|| unexpected("no reply to the command after the script"))?
                        .extract_error()?;
                    Ok(Value::Array(vec![script, next]))
                }
            }
        }
        Payload::Transaction { tx, keys } if !asking => {
            // Atomic: redis-rs collects every queued error into the abort.
            let mut pipe = redis::pipe();
            pipe.atomic();
            tx.write_commands(keys, &mut pipe);
            let mut replies = conn.req_packed_commands(&pipe, tx.len() + 1, 1).await?;
            match replies.pop() {
                Some(Value::Array(items)) => Ok(Value::Array(items)),
                other => Err(unexpected_owned(format!("EXEC replied {other:?}"))),
            }
        }
        Payload::Transaction { tx, keys } => {
            // ASKING must precede MULTI, which an atomic pipeline cannot
            // express; ask for every reply so a redirect among them is seen.
            let mut pipe = redis::pipe();
            pipe.cmd("ASKING").cmd("MULTI");
            tx.write_commands(keys, &mut pipe);
            pipe.cmd("EXEC");
            let count = pipe.len();
            let replies = conn.req_packed_commands(&pipe, 0, count).await?;
            exec_reply(replies, 1)
        }
        Payload::Pipeline { commands, keys } => {
            let mut pipe = redis::Pipeline::with_capacity(commands.len());
            commands.write_commands(keys, &mut pipe);
            if asking {
                // ASKING applies to the one command after it: one before
                // each.
                let each = std::mem::replace(&mut pipe, redis::pipe());
                for cmd in each.cmd_iter() {
                    pipe.cmd("ASKING");
                    pipe.add_command(cmd.clone());
                }
            }
            let count = pipe.len();
            let replies = conn.req_packed_commands(&pipe, 0, count).await?;
            let replies: Vec<Value> = if asking {
                replies.into_iter().skip(1).step_by(2).collect()
            } else {
                replies
            };
            pipeline_reply(replies)
        }
    }
}

/// A plain pipeline's replies, or the error to decide the next step on
/// when no command ran (see [`refused_unrun`]). Anything else, even a mix
/// of refusals (a migrating slot: the source runs the commands whose keys
/// it still holds and answers `ASK` or `TRYAGAIN` for the others), is
/// returned whole: which ran is the caller's to judge.
fn pipeline_reply(replies: Vec<Value>) -> RedisResult<Value> {
    match refused_unrun(&replies) {
        Some(err) => Err(err),
        None => Ok(Value::Array(replies)),
    }
}

/// The refusal, when a plain pipeline's replies prove none of its commands
/// ran: every reply the same refusal that says so (all `MOVED` to one
/// node, all `ASK`, all refused while the cluster reconfigures).
pub(super) fn refused_unrun(replies: &[Value]) -> Option<RedisError> {
    let Some(Value::ServerError(first)) = replies.first() else {
        return None;
    };
    let same = replies.iter().all(|reply| {
        matches!(reply, Value::ServerError(e) if e.kind() == first.kind() && e.details() == first.details())
    });
    let err: RedisError = first.clone().into();
    (same && !matches!(next_step(&err, 0), Step::Fail | Step::Reload)).then_some(err)
}

/// Picks the EXEC reply out of `[ASKING, MULTI, QUEUED…, EXEC]`; when the
/// transaction was aborted, returns the error that aborted it.
fn exec_reply(mut replies: Vec<Value>, prefix: usize) -> RedisResult<Value> {
    let exec = replies
        .pop()
        .ok_or_else(|| unexpected("no reply to EXEC"))?;
    match exec {
        Value::Array(items) => Ok(Value::Array(items)),
        Value::ServerError(abort) => {
            // The first queued error is the cause; EXECABORT only says
            // "discarded because of previous errors".
            let cause = replies
                .into_iter()
                .skip(prefix)
                .find_map(|reply| match reply {
                    Value::ServerError(err) => Some(err),
                    _ => None,
                })
                .unwrap_or(abort);
            Err(cause.into())
        }
        other => Err(unexpected_owned(format!("EXEC replied {other:?}"))),
    }
}

fn unexpected(what: &'static str) -> RedisError {
    RedisError::from((ErrorKind::UnexpectedReturnType, what))
}

fn unexpected_owned(what: String) -> RedisError {
    RedisError::from((ErrorKind::UnexpectedReturnType, "unexpected reply", what))
}

#[cfg(test)]
mod tests;
