//! [`Cluster::eval_many`]: one script over many key sets, one pipeline per
//! master.
//!
//! The calls are grouped by the node the slot table names for their slot;
//! each group is written to that node's multiplexed connection as one plain
//! pipeline of `EVALSHA`s — not `MULTI`: every call stays its own atomic
//! script, and one call's error aborts nothing else. The groups are sent
//! concurrently, under one deadline. Then each reply is judged alone, by
//! the rules of a single call (see `exec`):
//!
//! | reply | what happens |
//! |---|---|
//! | a value, or any other error of the script or the server | the call's result |
//! | `NOSCRIPT` | not run: sent again to the same node in a second pipeline whose first call is an `EVAL` with the body, which caches the script for the `EVALSHA`s behind it (one copy of the body per node, not one per call; no `SCRIPT LOAD`, which a least-privilege user need not have) |
//! | `MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`, `LOADING`, `READONLY` | not run: handed with that reply to the single-call path (`exec::drive`), which follows it as [`Cluster::eval`] would — a `MOVED` updates the slot table — until the same deadline |
//! | the connection had ended before it wrote the pipeline (the server's idle `timeout`, `CLIENT KILL`, a proxy) | not run: the pipeline is sent once more on a fresh connection |
//! | no reply by the deadline, or the connection broke after the pipeline may have been written | **may have run**: every call of that pipeline gets the transient error and is never resent |
//! | the node is known down | nothing sent: every call of the group gets [`Error::NodeDown`] at once |
//!
//! Calls for a slot no node serves (yet) take the single-call path from
//! the start, which waits for the cluster as `eval` does.

use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use redis::aio::ConnectionLike;
use redis::{Cmd, FromRedisValue, Pipeline, RedisError, ToRedisArgs, Value};
use tokio::time::Instant;

use super::call::{Op, deliver};
use super::exec::{self, Payload, Step, eval, evalsha, next_step};
use super::node::{Lane, Node};
use super::router::Router;
use super::transaction::Transaction;
use super::{Cluster, convert};
use crate::error::{Error, Result};
use crate::keys::KeySet;
use crate::scripts::Script;

impl Cluster {
    /// Runs `script` once per call — `KEYS` = the call's key set, `ARGV` =
    /// its arguments — on the master owning that key set's slot, and
    /// converts each reply to `T`. The results are in the order of `calls`.
    ///
    /// For checking many subjects at once (a gateway's batch of requests,
    /// a batch job): the calls are grouped by master, each group is sent as
    /// one pipeline, and all masters are sent to at once, so a batch costs
    /// about one round trip to the slowest of its masters instead of one
    /// per call.
    ///
    /// * **Atomic per call, not per batch.** Each call is its own script
    ///   run (`EVALSHA` in a plain pipeline, not `MULTI`): atomic on its own
    ///   key set, as with [`eval`](Self::eval). Other clients' commands may
    ///   run between two calls, and one call's error leaves the others
    ///   alone.
    /// * **At most once**, as with `eval` (see [Timeouts and ambiguous
    ///   outcomes](Cluster#timeouts-and-ambiguous-outcomes)). A call whose
    ///   reply proves it did not run (`NOSCRIPT`, `MOVED`, `ASK`,
    ///   `TRYAGAIN`, `CLUSTERDOWN`, …) is resent, alone, by `eval`'s
    ///   machinery: redirects are followed and the slot table updated. A
    ///   pipeline the connection never wrote (it had ended, see [Idle and
    ///   closed connections](Cluster#idle-and-closed-connections)) is sent
    ///   once more on a fresh one. When a master's pipeline gets no reply
    ///   in time or its connection breaks after it may have been written,
    ///   every call sent in it gets that transient error
    ///   ([`Error::Timeout`], [`Error::Redis`]) — it may or may not have
    ///   run — and is never resent. Calls on other masters are not
    ///   affected. Calls for a master known down fail at once with
    ///   [`Error::NodeDown`].
    /// * **One deadline:** the whole batch, resends included, returns
    ///   within [`command_timeout`](crate::cluster::ClusterBuilder::command_timeout).
    /// * **Order:** the results are in the order of `calls`. On the server,
    ///   a master runs its pipeline in the order given, and a call resent
    ///   (after `NOSCRIPT` or a redirect) later; calls on different masters
    ///   run in no particular order.
    ///
    /// With one server serving every slot (a standalone server, a Sentinel
    /// primary) the batch is one pipeline. No calls: an empty `Vec`, and
    /// nothing is sent.
    ///
    /// A master's pipeline is one long write on the connection every other
    /// call to that master shares, so they wait behind it: split batches of
    /// many thousands of calls if that matters.
    ///
    /// Values that carry their key set and arguments pass by reference,
    /// e.g. checks of one rate limiter's
    /// [`Invocation`](crate::limit::Invocation)s (which share its script):
    /// `invocations.iter().map(|i| (&i.keys, &i.args))`.
    ///
    /// ```no_run
    /// # async fn demo(cluster: shardlimit::Cluster) -> shardlimit::Result<()> {
    /// use shardlimit::{cluster::Script, keys::KeyId};
    /// let script = Script::new(
    ///     "hits",
    ///     "local n = redis.call('INCR', KEYS[1]) redis.call('PEXPIRE', KEYS[1], ARGV[1]) return n",
    /// );
    /// let id = KeyId::new("demo", "hits")?;
    /// let users = ["user:1", "user:2", "user:3"];
    /// let key_sets = users
    ///     .iter()
    ///     .map(|user| cluster.keys().key_set(user, [&id]))
    ///     .collect::<shardlimit::Result<Vec<_>>>()?;
    /// let hits = cluster
    ///     .eval_many::<i64, _>(&script, key_sets.iter().map(|keys| (keys, 60_000)))
    ///     .await;
    /// for (user, hits) in users.iter().zip(hits) {
    ///     match hits {
    ///         Ok(n) => println!("{user}: {n} hits"),
    ///         // May or may not have counted: not retried.
    ///         Err(err) if err.is_transient() => println!("{user}: unknown ({err})"),
    ///         Err(err) => return Err(err),
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn eval_many<'k, T, A>(
        &self,
        script: &Script,
        calls: impl IntoIterator<Item = (&'k KeySet, A)>,
    ) -> Vec<Result<T>>
    where
        T: FromRedisValue,
        A: ToRedisArgs,
    {
        self.eval_many_with(script, calls, false).await
    }

    /// [`eval_many`](Self::eval_many); with `split_when_migrating`, a call
    /// refused with `TRYAGAIN` (its key set is split by a slot migration)
    /// gets that error at once, as with
    /// [`eval_unless_migrating`](Self::eval_unless_migrating).
    pub(crate) async fn eval_many_with<'k, T, A>(
        &self,
        script: &Script,
        calls: impl IntoIterator<Item = (&'k KeySet, A)>,
        split_when_migrating: bool,
    ) -> Vec<Result<T>>
    where
        T: FromRedisValue,
        A: ToRedisArgs,
    {
        let calls: Vec<Call> = calls
            .into_iter()
            .enumerate()
            .map(|(index, (keys, args))| Call {
                index,
                slot: keys.slot(),
                cmd: evalsha(script, keys, args),
            })
            .collect();
        if calls.is_empty() {
            return Vec::new();
        }
        // As in `exec::run`: a batch for nodes known down completes in one
        // poll; spend budget so a caller looping on it still yields.
        tokio::task::coop::consume_budget().await;
        let op = script.name_cow();
        let started = crate::metrics::Started::now();
        let timeout = self.command_timeout();
        let batch = Batch {
            router: &self.inner.router,
            op: &op,
            script,
            deadline: Instant::now() + timeout,
            timeout,
            split_when_migrating,
        };
        batch
            .run(calls)
            .await
            .into_iter()
            .map(|reply| {
                // Each call is counted as `eval` counts one, with the time
                // the batch took.
                self.inner.metrics.observe(&op, started, &reply);
                reply.and_then(|value| convert(op.clone(), value))
            })
            .collect()
    }
}

/// One call of a batch: its place in the input, its slot, its `EVALSHA`.
struct Call {
    index: usize,
    slot: u16,
    cmd: Cmd,
}

/// What every group of one batch shares.
struct Batch<'a> {
    router: &'a Router,
    op: &'a Cow<'static, str>,
    script: &'a Script,
    deadline: Instant,
    timeout: Duration,
    /// A `TRYAGAIN` goes back to the caller (see `Payload::split_when_migrating`).
    split_when_migrating: bool,
}

/// Results by input index.
type Done = Vec<(usize, Result<Value>)>;

impl Batch<'_> {
    /// Every call's reply, in input order.
    async fn run(&self, calls: Vec<Call>) -> Vec<Result<Value>> {
        let count = calls.len();
        let (groups, unrouted) = by_owner(
            calls,
            |call| self.router.owner(call.slot),
            |node| Arc::as_ptr(node).addr(),
        );
        let pipelined = join_all(
            groups
                .into_iter()
                .map(|(node, calls)| self.on_node(node, calls)),
        );
        let alone = join_all(unrouted.into_iter().map(|call| self.resend(call, None)));
        let (pipelined, alone) = futures::join!(pipelined, alone);
        let mut results: Vec<Option<Result<Value>>> = (0..count).map(|_| None).collect();
        for (index, result) in pipelined.into_iter().flatten().chain(alone) {
            if let Some(slot) = results.get_mut(index) {
                *slot = Some(result);
            }
        }
        results
            .into_iter()
            .map(|result| {
                // Every call is answered above; this only keeps a bug from
                // becoming a panic.
                result.unwrap_or_else(|| {
                    Err(Error::UnexpectedReply {
                        op: self.op.clone(),
                        detail: "the batch lost this call".to_owned(),
                    })
                })
            })
            .collect()
    }

    /// One node's calls: one pipeline; the `NOSCRIPT`s again, the first
    /// with the body; what did not run, alone through the single-call path.
    async fn on_node(&self, node: Arc<Node>, calls: Vec<Call>) -> Done {
        let Round {
            mut done,
            reload,
            mut resend,
        } = self.round(&node, calls, false).await;
        if !reload.is_empty() {
            // A `NOSCRIPT` now (the cache flushed again, or the `EVAL`
            // refused before it ran) takes the single path, which sends
            // `EVAL`.
            let second = self.round(&node, reload, true).await;
            done.extend(second.done);
            resend.extend(second.resend);
        }
        let resent = join_all(
            resend
                .into_iter()
                .map(|(call, replied)| self.resend(call, Some(replied))),
        )
        .await;
        done.extend(resent);
        done
    }

    /// Sends `calls` to `node` as one pipeline (the first as `EVAL` with
    /// the body if `load`) and sorts the replies.
    async fn round(&self, node: &Arc<Node>, calls: Vec<Call>, load: bool) -> Round {
        let mut pipe = redis::pipe();
        let mut sent = Vec::with_capacity(calls.len());
        // The `EVALSHA` of the call sent as `EVAL`, should it be sent again.
        let mut first_evalsha = None;
        for call in calls {
            if load && first_evalsha.is_none() {
                // Redis caches a script `EVAL` runs, so the `EVALSHA`s
                // behind it on this connection find it: no `SCRIPT LOAD`
                // (docs/production.md: the least-privilege ACL has no `SCRIPT`).
                pipe.add_command(eval(self.script, &call.cmd));
                first_evalsha = Some(call.cmd);
            } else {
                // The pipeline owns the commands; the few sent again are
                // copied back out of it.
                pipe.add_command(call.cmd);
            }
            sent.push((call.index, call.slot));
        }
        let mut round = Round::default();
        let replies = match self.send(node, &pipe).await {
            Ok(replies) => replies,
            Err(err) => {
                round.done = sent
                    .into_iter()
                    .map(|(index, slot)| (index, Err(for_slot(&err, slot))))
                    .collect();
                return round;
            }
        };
        let cmds = pipe.cmd_iter();
        for (((index, slot), cmd), reply) in sent.into_iter().zip(cmds).zip(replies) {
            // `Some` for the first call only: the one sent as `EVAL`.
            let evalsha = first_evalsha.take();
            let again = || Call {
                index,
                slot,
                cmd: evalsha.unwrap_or_else(|| cmd.clone()),
            };
            match judge(reply, load) {
                Verdict::Done(result) => {
                    let result = result.map_err(|source| Error::Redis {
                        op: self.op.clone(),
                        slot: Some(slot),
                        source,
                    });
                    round.done.push((index, result));
                }
                Verdict::Reload => round.reload.push(again()),
                Verdict::Resend(replied) => round.resend.push((again(), replied)),
            }
        }
        round
    }

    /// Writes `pipe` to `node` and returns its replies (server errors as
    /// values), or why there are none.
    async fn send(&self, node: &Arc<Node>, pipe: &Pipeline) -> Result<Vec<Value>> {
        send_pipeline(
            self.router,
            node,
            self.op,
            pipe,
            self.deadline,
            self.timeout,
        )
        .await
    }

    /// `call` through the single-call path until the batch's deadline;
    /// `replied` is the reply of its first attempt, which proved it did not
    /// run (`None`: not sent yet).
    async fn resend(&self, call: Call, replied: Option<RedisError>) -> (usize, Result<Value>) {
        let mut payload = Payload::evalsha(self.script, call.cmd);
        if self.split_when_migrating {
            payload = payload.split_when_migrating();
        }
        let op = Op::until(
            self.op.clone(),
            Some(call.slot),
            self.deadline,
            self.timeout,
        );
        let result = exec::drive(self.router, &op, call.slot, payload, replied).await;
        (call.index, result)
    }
}

/// Writes `pipe` to `node` and returns its replies (server errors as
/// values), or why there are none. (`op` a `Cow`: errors take it by
/// cloning, which copies nothing for the crate's `'static` names.)
#[allow(clippy::ptr_arg)]
async fn send_pipeline(
    router: &Router,
    node: &Arc<Node>,
    op: &Cow<'static, str>,
    pipe: &Pipeline,
    deadline: Instant,
    timeout: Duration,
) -> Result<Vec<Value>> {
    let call = Op::until(op.clone(), None, deadline, timeout);
    let count = pipe.len();
    let sent = deliver(router, node, Lane::Shared, &call, |mut conn| async move {
        conn.req_packed_commands(pipe, 0, count).await
    });
    match sent.await?.into_reply(&call)? {
        Ok(replies) if replies.len() == count => Ok(replies),
        Ok(replies) => Err(Error::UnexpectedReply {
            op: op.clone(),
            detail: format!("{} replies to a pipeline of {count} calls", replies.len()),
        }),
        // A plain pipeline's server errors are values: this is the
        // client failing to read the replies, so they may have run.
        Err(source) => Err(Error::Redis {
            op: op.clone(),
            slot: None,
            source,
        }),
    }
}

impl Cluster {
    /// Many [`pipeline`](Self::pipeline)s at once, one per key set (each
    /// its own slot): grouped by the master owning each slot, every
    /// master's groups written as **one** pipeline, all masters at once,
    /// under one deadline; one result per call, in order. A call whose
    /// every command was refused unrun (`MOVED`, `ASK`, a cluster
    /// reconfiguring) is sent again alone by [`pipeline`](Self::pipeline);
    /// a master's pipeline that got no reply in time, or whose connection
    /// broke, gives each of its calls that error (they may have run); any
    /// other mix of replies is the call's to judge, as with `pipeline`.
    pub(crate) async fn pipeline_many(
        &self,
        op: &'static str,
        calls: &[(&KeySet, &Transaction)],
    ) -> Vec<Result<Vec<Value>>> {
        let mut results: Vec<Option<Result<Vec<Value>>>> = (0..calls.len()).map(|_| None).collect();
        let mut valid = Vec::with_capacity(calls.len());
        for (i, (keys, commands)) in calls.iter().enumerate() {
            match commands.validate(keys) {
                Ok(()) => valid.push(i),
                Err(err) => results[i] = Some(Err(err)),
            }
        }
        tokio::task::coop::consume_budget().await;
        let name = Cow::Borrowed(op);
        let started = crate::metrics::Started::now();
        let timeout = self.command_timeout();
        let deadline = Instant::now() + timeout;
        let router = &self.inner.router;
        let (groups, unrouted) = by_owner(
            valid,
            |&i| router.owner(calls[i].0.slot()),
            |node| Arc::as_ptr(node).addr(),
        );
        let on_node = |node: Arc<Node>, members: Vec<usize>| {
            let name = name.clone();
            async move {
                let count = members.iter().map(|&i| calls[i].1.len()).sum();
                let mut pipe = redis::Pipeline::with_capacity(count);
                for &i in &members {
                    calls[i].1.write_commands(calls[i].0, &mut pipe);
                }
                match send_pipeline(router, &node, &name, &pipe, deadline, timeout).await {
                    Ok(replies) => {
                        let mut replies = replies.into_iter();
                        let mut out = Vec::with_capacity(members.len());
                        for i in members {
                            let own: Vec<Value> = replies.by_ref().take(calls[i].1.len()).collect();
                            out.push((i, own));
                        }
                        Ok(out)
                    }
                    Err(err) => Err((members, err)),
                }
            }
        };
        let sent = join_all(
            groups
                .into_iter()
                .map(|(node, members)| on_node(node, members)),
        )
        .await;
        let mut again = unrouted;
        for group in sent {
            match group {
                Ok(answered) => {
                    for (i, replies) in answered {
                        if exec::refused_unrun(&replies).is_some() {
                            again.push(i);
                        } else {
                            results[i] = Some(Ok(replies));
                        }
                    }
                }
                Err((members, err)) => {
                    for i in members {
                        results[i] = Some(Err(for_slot(&err, calls[i].0.slot())));
                    }
                }
            }
        }
        let resent = join_all(
            again
                .iter()
                .map(|&i| self.pipeline(op, calls[i].0, calls[i].1)),
        )
        .await;
        for (i, result) in again.into_iter().zip(resent) {
            results[i] = Some(result);
        }
        results
            .into_iter()
            .map(|result| {
                let result = result.unwrap_or_else(|| {
                    Err(Error::UnexpectedReply {
                        op: name.clone(),
                        detail: "the batch lost this call".to_owned(),
                    })
                });
                self.inner.metrics.observe(&name, started, &result);
                result
            })
            .collect()
    }
}

/// The calls of one pipeline, sorted by their replies.
#[derive(Default)]
struct Round {
    done: Done,
    /// `NOSCRIPT` in the first round.
    reload: Vec<Call>,
    /// Did not run; for the single-call path, with the reply.
    resend: Vec<(Call, RedisError)>,
}

/// What one reply in a pipeline means for its call.
#[derive(Debug)]
enum Verdict {
    /// The call's result: it ran (or failed in a way resending cannot fix).
    Done(Result<Value, RedisError>),
    /// `NOSCRIPT` in a first round: send it again, after the body.
    Reload,
    /// Proven not run: resend through the single-call path with this reply.
    Resend(RedisError),
}

/// Judges one reply by `exec`'s rules for a single call; `reloaded`: the
/// script's body was just sent to that node, ahead of this call.
fn judge(reply: Value, reloaded: bool) -> Verdict {
    let err = match reply.extract_error() {
        Ok(value) => return Verdict::Done(Ok(value)),
        Err(err) => err,
    };
    match next_step(&err, 0) {
        Step::Reload if !reloaded => Verdict::Reload,
        Step::Reload | Step::Redirect(_) | Step::Backoff => Verdict::Resend(err),
        Step::Fail => Verdict::Done(Err(err)),
    }
}

/// `items` grouped by `owner` (groups told apart by `id`), in the order
/// each owner is first met, items in input order; and the items no owner
/// serves.
fn by_owner<I, N, K: Hash + Eq>(
    items: impl IntoIterator<Item = I>,
    owner: impl Fn(&I) -> Option<N>,
    id: impl Fn(&N) -> K,
) -> (Vec<(N, Vec<I>)>, Vec<I>) {
    let mut groups: Vec<(N, Vec<I>)> = Vec::new();
    let mut index: HashMap<K, usize> = HashMap::new();
    let mut unowned = Vec::new();
    for item in items {
        let Some(node) = owner(&item) else {
            unowned.push(item);
            continue;
        };
        let at = *index.entry(id(&node)).or_insert_with(|| {
            groups.push((node, Vec::new()));
            groups.len() - 1
        });
        if let Some((_, group)) = groups.get_mut(at) {
            group.push(item);
        }
    }
    (groups, unowned)
}

/// A whole pipeline's error (`connect`'s or the send's), for one of its
/// calls.
fn for_slot(err: &Error, slot: u16) -> Error {
    let slot = Some(slot);
    match err {
        Error::Timeout { op, timeout, .. } => Error::Timeout {
            op: op.clone(),
            slot,
            timeout: *timeout,
        },
        Error::NodeDown {
            op, node, down_for, ..
        } => Error::NodeDown {
            op: op.clone(),
            slot,
            node: node.clone(),
            down_for: *down_for,
        },
        Error::Redis { op, source, .. } => Error::Redis {
            op: op.clone(),
            slot,
            source: source.clone(),
        },
        Error::UnexpectedReply { op, detail } => Error::UnexpectedReply {
            op: op.clone(),
            detail: detail.clone(),
        },
        // `connect` and `send` fail in no other way.
        other => Error::UnexpectedReply {
            op: Cow::Borrowed("eval_many"),
            detail: other.to_string(),
        },
    }
}

#[cfg(test)]
mod tests;
