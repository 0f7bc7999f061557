//! The pipeline's plain-command stage: a consuming check of one limit
//! whose algorithm can be decided without a script (the fixed window, see
//! [`Plain`]) is sent as plain commands pipelined on the subject's slot
//! and judged here, on the client. A script costs Redis about three times
//! the commands it runs (the interpreter's call alone costs more than an
//! `INCRBY`); a deployment whose Redis is the bottleneck decides about
//! twice as many requests per second this way (docs/performance.md).
//!
//! One pipeline, one round trip: `MGET` of the subject's override and
//! block (unless the [settings cache](super::settings_cache) knows it has
//! neither), the algorithm's counting commands (`INCRBY`, `PEXPIREAT … NX`),
//! and, about once a second, `TIME` for the [server clock](clock). The
//! verdict is the algorithm's own rule on the count (`Plain::judge`), the
//! same as the script's on the same count; the reply is built in the
//! script's format, so every later step (the policy, the local mode, the
//! deny cache, the counting) is the same for both.
//!
//! What differs from the script, precisely:
//!
//! * **Units are counted before they are judged.** A denied request's
//!   units are given back (`DECRBY`) before the denial is returned, so
//!   for one round trip the count holds them: a request of another
//!   process in that round trip may be denied where the script would
//!   have admitted it. The deny cache keeps a repeated denial from
//!   counting again.
//! * **The window is told from the client's estimate of the server's
//!   clock.** A check is sent this way only when its window is certain
//!   within the estimate's error bound, plus the time its commands may
//!   take to run (the command timeout, at most a tenth of the period);
//!   otherwise — no recent sample, or too close to a window's edge — the
//!   script decides. Commands that run later than that (a master that
//!   stalled with them unread and then resumed) go uncounted: in the next
//!   window their `INCRBY` makes a key that their `PEXPIREAT` (of this
//!   window's end, `NX`) deletes — with, if another request's `INCRBY`
//!   made that key an instant before and its own `PEXPIREAT` is still to
//!   come, that request's units.
//! * **Overrides and blocks** are read in the same pipeline, but after
//!   the units are counted, so a subject that has either is decided by
//!   the script (its units given back first) unless it is an override of
//!   the limit alone (same period), which is judged here. A block or
//!   override written between the read and the count applies from the
//!   next check: at most one round trip late, as during a migration.
//! * **Units are given back by a script** that first checks the key is
//!   still the window's they were counted in, as far as the count's
//!   replies tell (its expiry), and never takes a count below zero: a
//!   give-back that lands late (a stalled master; a reset in between)
//!   takes at most its own units from a later count.
//! * **After a change of period** (an override of another period set or
//!   cleared, [`set_quota`](crate::RateLimiter::set_quota) with a new
//!   period), a subject's count is kept until the window it was counted in
//!   ends: the `PEXPIREAT` is `NX`, so no command of another window's
//!   grid shortens or lengthens an expiry. The script moves a count to its
//!   own window's end at every admission, so it drops it at the first
//!   boundary of either grid. Stricter, for at most one window of the old
//!   period (`tests/cluster/plain_commands.rs`).
//! * Keys are the script's: the same state key with the same expiry (the
//!   window's end), so peeks, multi-limits, adjustments, the scanner and
//!   the local mode read it as ever. The `PEXPIREAT` comes with the
//!   `INCRBY` in one pipeline, so the key has its expiry as soon as the
//!   commands have run.
//!
//! Only the fixed window is decided this way. The sliding window counter
//! keeps its current and previous counts and which window is current in
//! one hash: rolling a window over (the current count becoming the
//! previous one) reads before it writes, which plain commands cannot do
//! atomically. A key per window would let an `INCRBY` count the current
//! one and a `GET` read the previous (two keys of one slot), at the price
//! of a new state layout for the scripts, the scanner and the local mode:
//! not done. GCRA and the sliding log read before they write by nature.
//!
//! A migrating slot may run some of the commands (those whose key is
//! still on the source) and refuse others: the units counted, if any, are
//! given back, and the script decides.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;

use super::Round;
use crate::cluster::{Cluster, Transaction, TxCommand};
use crate::error::Result;
use crate::keys::KeySet;
use crate::limit::algorithm::{Local, LocalVerdict, Plain};
use crate::limit::script::LimitSpec;
use crate::limit::stages::settings_cache::SettingsCache;

pub(crate) mod clock;

use self::clock::{Estimate, ServerClock, parse_time};

/// A limiter's plain-command stage: the server clock of its
/// [`Cluster`] handle, shared by every limiter of it.
#[derive(Debug, Clone)]
pub(crate) struct PlainPath {
    clock: Arc<ServerClock>,
}

impl PlainPath {
    /// The stage for a limiter of `cluster` whose algorithm has plain
    /// rules.
    pub(crate) fn new(cluster: &Cluster) -> Self {
        PlainPath {
            clock: cluster.extension(ServerClock::default),
        }
    }

    /// Takes a first sample of the server's clock in the background, on
    /// the slot of `keys`.
    fn sample(&self, cluster: &Cluster, keys: &KeySet) {
        if !self.clock.claim_sample() {
            return;
        }
        let (cluster, keys, clock) = (cluster.clone(), keys.clone(), self.clock.clone());
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            clock.abandon();
            return;
        };
        runtime.spawn(async move {
            let time = Transaction::new().command(TxCommand::new("TIME"));
            let sent = Instant::now();
            match cluster.pipeline("server_time", &keys, &time).await {
                Ok(replies) => match replies.first().and_then(parse_time) {
                    Some(server_us) => clock.record(sent, Instant::now(), server_us),
                    None => clock.abandon(),
                },
                Err(_) => clock.abandon(),
            }
        });
    }
}

/// A check's plain commands, and what judging their replies needs.
pub(super) struct PlainPlan<'r, 's> {
    rules: &'static Plain,
    path: &'r PlainPath,
    spec: &'r LimitSpec,
    now: Estimate,
    end: u64,
    end_ms: u64,
    /// 1 if the commands start with the `MGET` of the settings, else 0.
    read: usize,
    /// They end with a `TIME` for the clock.
    sample: bool,
    settings: Settings<'s>,
    /// What is sent.
    pub(super) commands: Transaction,
}

impl PlainPlan<'_, '_> {
    /// The operation's name.
    pub(super) fn op(&self) -> &'static str {
        self.rules.op
    }
}

/// What a check knows of its subject's settings (override, block).
#[derive(Clone, Copy)]
pub(super) enum Settings<'a> {
    /// Neither exists (the settings cache says so): not read.
    KnownNone,
    /// Read with the check; what it finds is told to the cache, if any,
    /// with the cache's ticket taken before sending.
    Read {
        cache: Option<&'a SettingsCache>,
        ticket: u64,
    },
}

/// The override and block the pipeline read.
struct Optional {
    /// The override's `limit period_us burst`, when there is one.
    quota: Option<(u64, u64)>,
    blocked: bool,
}

/// What a plain check's replies decide.
pub(super) enum Judged<'r, 's> {
    /// The check's reply, as the script would reply (or the error).
    Reply(Result<Vec<i64>>),
    /// A denial: the request's units are given back before the reply is
    /// returned.
    Denied {
        reply: Vec<i64>,
        counted: Counted<'r>,
    },
    /// The script decides, after what the commands counted, if anything,
    /// is given back.
    Script {
        counted: Option<Counted<'r>>,
        settings: Settings<'s>,
    },
}

/// Units a plain check counted, to be given back: in a key whose expiry
/// was, when they were counted, between `expiry.0` and `expiry.1` ms (see
/// [`give_back`]).
pub(super) struct Counted<'r> {
    rules: &'static Plain,
    spec: &'r LimitSpec,
    expiry: (u64, u64),
}

impl<'r> Round<'r> {
    /// The stage, rules and spec of a check that may be made of plain
    /// commands: a consuming check of one limit whose limiter takes this
    /// path and whose algorithm has plain rules (see the module docs).
    fn plain_rules(&self) -> Option<(&'r PlainPath, &'static Plain, &'r LimitSpec)> {
        let ([limiter], [spec]) = (self.pipeline.limiters, self.specs) else {
            return None;
        };
        let path = limiter.plain().filter(|_| self.consume)?;
        Some((path, spec.algorithm.rules().plain?, spec))
    }

    /// The keys a plain check of `subject` touches, if it may be one: the
    /// state key, then the override's and block's when they are read
    /// (not the script's arguments: most plain checks never need them).
    pub(super) fn plain_keys(
        &self,
        subject: &[u8],
        settings: Settings<'_>,
    ) -> Option<Result<KeySet>> {
        let (_, _, spec) = self.plain_rules()?;
        let keys = self.pipeline.cluster().keys();
        Some(match settings {
            Settings::KnownNone => keys.key_set(subject, [&spec.id]),
            Settings::Read { .. } => keys.key_set(subject, spec.ids()),
        })
    }

    /// The check for `cost` made from plain commands: its `plan` (of the
    /// key set `keys`, the subject's: see [`plain_keys`](Self::plain_keys))
    /// sent as one pipeline and judged.
    pub(super) async fn plain<'s>(
        &self,
        subject: &[u8],
        cost: u32,
        keys: &KeySet,
        plan: PlainPlan<'r, 's>,
    ) -> Judged<'r, 's> {
        let sent = Instant::now();
        let replies = self
            .pipeline
            .cluster()
            .pipeline(plan.rules.op, keys, &plan.commands)
            .await;
        self.judge(subject, cost, plan, sent, replies)
    }

    /// What a check for `cost` sends as plain commands, or `None` when the
    /// script must decide (see the module docs).
    pub(super) fn plan<'s>(
        &self,
        cost: u32,
        keys: &KeySet,
        settings: Settings<'s>,
    ) -> Option<PlainPlan<'r, 's>> {
        let (path, rules, spec) = self.plain_rules()?;
        let cluster = self.pipeline.cluster();
        let Some(now) = path.clock.now() else {
            path.sample(cluster, keys);
            return None;
        };
        let period = spec.period_us;
        let (start, end) = (rules.window)(now.now_us, period);
        // The commands run within the command timeout of now, or fail.
        let runs_within = micros(cluster.command_timeout()).min(period / 10);
        if now.now_us.saturating_sub(now.error_us) < start
            || now.now_us + now.error_us + runs_within >= end
        {
            return None;
        }
        let end_ms = end / 1000;
        let sample = path.clock.claim_sample();
        // The override and block are read unless the subject is known to
        // have neither (see `settings_cache.rs`).
        let mut commands = Transaction::new();
        let read = match settings {
            Settings::KnownNone => 0,
            Settings::Read { .. } => {
                commands = commands.command(TxCommand::new("MGET").key(1).key(2));
                1
            }
        };
        commands = (rules.count)(commands, cost, end_ms);
        if sample {
            commands = commands.command(TxCommand::new("TIME"));
        }
        Some(PlainPlan {
            rules,
            path,
            spec,
            now,
            end,
            end_ms,
            read,
            sample,
            settings,
            commands,
        })
    }

    /// What its plan's commands' `replies` (sent at `sent`) decide of a
    /// check of `subject` for `cost`: the reply, as the script would
    /// reply, or what is still to do (a denial's give-back, the script).
    /// Nothing here waits: a batch judges all its checks at once and
    /// awaits only those with something left to do.
    pub(super) fn judge<'s>(
        &self,
        subject: &[u8],
        cost: u32,
        plan: PlainPlan<'r, 's>,
        sent: Instant,
        replies: Result<Vec<Value>>,
    ) -> Judged<'r, 's> {
        let PlainPlan {
            rules,
            path,
            spec,
            now,
            end,
            end_ms,
            read,
            sample,
            settings,
            ..
        } = plan;
        let period = spec.period_us;
        let replies = match replies {
            Ok(replies) => replies,
            Err(err) => {
                if sample {
                    path.clock.abandon();
                }
                return Judged::Reply(Err(err));
            }
        };
        if sample {
            match replies
                .get(read + Plain::COUNT_REPLIES)
                .and_then(parse_time)
            {
                Some(server_us) => path.clock.record(sent, Instant::now(), server_us),
                None => path.clock.abandon(),
            }
        }
        let counted = |expiry| Counted {
            rules,
            spec,
            expiry,
        };
        let script = |counted| Judged::Script { counted, settings };
        let after = match replies.get(read) {
            Some(Value::Int(after)) => *after,
            // Not counted: refused (a migrating slot) or an error the
            // script will meet as well and report.
            _ => return script(None),
        };
        let optional = match settings {
            Settings::KnownNone => Ok(Optional {
                quota: None,
                blocked: false,
            }),
            Settings::Read { .. } => replies.first().map_or(Err(()), read_optional),
        };
        let optional = match optional {
            Ok(optional) => optional,
            // The override and block could not be read with the count (a
            // migrating slot): the script reads them its own way.
            _ => return script(Some(counted((end_ms, 0)))),
        };
        // Where the units went: a key whose expiry the count gave it ends
        // with this window; one that had an expiry ends then or later (an
        // override's longer window) — see give_back.lua.
        let expiry = match replies.get(read + 1) {
            Some(Value::Int(1)) => (end_ms, end_ms),
            _ => (end_ms, 0),
        };
        if let (
            Settings::Read {
                cache: Some(cache),
                ticket,
            },
            Optional {
                quota: None,
                blocked: false,
            },
        ) = (settings, &optional)
        {
            cache.found_none(subject, ticket);
        }
        let limit = match optional {
            Optional {
                blocked: false,
                quota: None,
            } => u64::from(spec.quota.limit().get()),
            Optional {
                blocked: false,
                quota: Some((limit, p)),
            } if p == period => limit,
            _ => return script(Some(counted(expiry))),
        };
        let at = Local {
            now: now.now_us,
            cost: u64::from(cost),
            limit,
            capacity: limit,
            period,
            consume: true,
        };
        let verdict = (rules.judge)(after, at, end - now.now_us);
        let reply = reply(spec, &verdict, optional.quota);
        if verdict.allowed {
            Judged::Reply(Ok(reply))
        } else {
            Judged::Denied {
                reply,
                counted: counted(expiry),
            }
        }
    }

    /// The check's reply once what its judgement left to do is done: a
    /// denial's units given back (failing that, they stay counted until
    /// the window ends: stricter, never looser); or the units counted
    /// given back, then the script's check (an error if they could not
    /// be: the script's check would count them twice).
    pub(super) async fn finish(
        &self,
        subject: &[u8],
        cost: u32,
        keys: &KeySet,
        judged: Judged<'r, '_>,
    ) -> Result<Vec<i64>> {
        let cluster = self.pipeline.cluster();
        match judged {
            Judged::Reply(reply) => reply,
            Judged::Denied { reply, counted } => {
                if let Err(err) = counted.give_back(cluster, keys, cost).await {
                    tracing::warn!(
                        limiter = %counted.spec.id.name(),
                        error = %err,
                        "shardlimit: a denied request's units could not be given back"
                    );
                }
                Ok(reply)
            }
            Judged::Script { counted, settings } => {
                if let Some(counted) = counted {
                    counted.give_back(cluster, keys, cost).await?;
                }
                self.script(subject, cost, settings).await
            }
        }
    }
}

impl Counted<'_> {
    /// Gives the `cost` units back (see [`give_back`]).
    async fn give_back(&self, cluster: &Cluster, keys: &KeySet, cost: u32) -> Result<()> {
        give_back(cluster, self.rules, keys, cost, self.expiry).await
    }
}

/// Runs the algorithm's give-back of `cost` units on the state key (key 0
/// of `keys`), whose expiry was, when they were counted, between
/// `expiry.0` and `expiry.1` ms (0: no upper bound).
async fn give_back(
    cluster: &Cluster,
    rules: &Plain,
    keys: &KeySet,
    cost: u32,
    expiry: (u64, u64),
) -> Result<()> {
    let state = KeySet::checked(vec![keys.keys()[0].clone()])?;
    let _: Value = cluster
        .eval(rules.give_back, &state, (cost, expiry.0, expiry.1))
        .await?;
    Ok(())
}

/// The `MGET` of the override and block: what exists.
fn read_optional(reply: &Value) -> std::result::Result<Optional, ()> {
    let Value::Array(values) = reply else {
        return Err(());
    };
    let [quota, block] = values.as_slice() else {
        return Err(());
    };
    let quota = match quota {
        Value::Nil => None,
        Value::BulkString(bytes) => Some(parse_override(bytes).ok_or(())?),
        _ => return Err(()),
    };
    let blocked = match block {
        Value::Nil => false,
        Value::BulkString(_) => true,
        _ => return Err(()),
    };
    Ok(Optional { quota, blocked })
}

/// An override's value, `limit period_us burst`: its limit and period. A
/// malformed one is the script's to report.
fn parse_override(bytes: &[u8]) -> Option<(u64, u64)> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut fields = text.split(' ').map(|f| f.parse::<u64>().ok());
    match (fields.next(), fields.next(), fields.next(), fields.next()) {
        (Some(Some(limit)), Some(Some(period)), Some(Some(_burst)), None) => Some((limit, period)),
        _ => None,
    }
}

/// The script's reply for `verdict` (see `one_limit.lua`): compact unless
/// an override applied; then in full, its quota in it, and how long it
/// stays unknown (-2: no `PTTL` was read).
fn reply(spec: &LimitSpec, verdict: &LocalVerdict, applied: Option<(u64, u64)>) -> Vec<i64> {
    let int = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let ok = verdict.allowed;
    let all_ok = ok || spec.shadow;
    let wait = if ok {
        int(verdict.more_after_us)
    } else {
        verdict.retry_after_us.map_or(-1, int)
    };
    let (remaining, reset) = (int(verdict.remaining), int(verdict.reset_after_us));
    match applied {
        None => vec![
            2 * i64::from(all_ok) + i64::from(ok),
            remaining,
            wait,
            reset,
        ],
        Some((limit, period)) => vec![
            i64::from(all_ok),
            i64::from(ok),
            remaining.min(int(limit)),
            wait,
            reset,
            int(limit),
            2,
            -2,
            int(limit),
            int(period),
        ],
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_and_blocks_are_read_from_the_mget() {
        let some = |b: &[u8]| Value::BulkString(b.to_vec());
        let both = |q, b| Value::Array(vec![q, b]);
        let none = read_optional(&both(Value::Nil, Value::Nil)).unwrap();
        assert!(none.quota.is_none() && !none.blocked);
        let o = read_optional(&both(some(b"5 60000000 5"), Value::Nil)).unwrap();
        assert_eq!(o.quota, Some((5, 60_000_000)));
        assert!(
            read_optional(&both(Value::Nil, some(b"123")))
                .unwrap()
                .blocked
        );
        // Malformed, or not the MGET's reply: the script's to judge.
        assert!(read_optional(&both(some(b"5 x 5"), Value::Nil)).is_err());
        assert!(read_optional(&both(some(b"5 6 7 8"), Value::Nil)).is_err());
        assert!(read_optional(&Value::Int(1)).is_err());
    }
}
