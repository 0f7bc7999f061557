//! [`Payload`]: what one slot-pinned operation sends — a script (`EVALSHA`,
//! `EVAL` after a `NOSCRIPT`) or a transaction — and [`Undo`], what takes
//! back an operation that may have taken something.

use std::time::Duration;

use redis::{Arg, Cmd, ToRedisArgs};

use crate::cluster::node::Lane;
use crate::cluster::transaction::Transaction;
use crate::keys::KeySet;
use crate::scripts::Script;

/// `EVALSHA sha1 numkeys keys… args…`: `script` with `KEYS` = `keys` and
/// `ARGV` = `args`.
pub(crate) fn evalsha(script: &Script, keys: &KeySet, args: impl ToRedisArgs) -> Cmd {
    // Sized once for what it holds, as near as known before writing it
    // (every check builds one; grown argument by argument, it reallocated
    // each time): the name, the SHA1, the keys, and a guess per argument.
    let count = 3 + keys.len() + args.num_of_args();
    let key_bytes: usize = keys.keys().iter().map(Vec::len).sum();
    let mut cmd = Cmd::with_capacity(count, 7 + 40 + 4 + key_bytes + 16 * args.num_of_args());
    cmd.arg("EVALSHA");
    cmd.arg(script.sha1()).arg(keys.len());
    for key in keys.keys() {
        cmd.arg(key);
    }
    cmd.arg(args);
    cmd
}

/// `EVAL body numkeys keys… args…`: the call `evalsha` (made by
/// [`evalsha`]) with `script`'s body in place of its SHA1 — for a node
/// that answered `NOSCRIPT`. Running it also caches the script there.
pub(crate) fn eval(script: &Script, evalsha: &Cmd) -> Cmd {
    let mut eval = redis::cmd("EVAL");
    eval.arg(script.code());
    // Skip "EVALSHA" and the SHA1; keep numkeys, keys and args.
    for arg in evalsha.args_iter().skip(2) {
        if let Arg::Simple(bytes) = arg {
            eval.arg(bytes);
        }
    }
    eval
}

/// What is being sent.
pub(crate) enum Payload<'a> {
    Script {
        script: &'a Script,
        /// `EVALSHA`, replaced by `EVAL` after a `NOSCRIPT`.
        cmd: Cmd,
        sent_body: bool,
        /// A command sent right behind the script on the same connection,
        /// in the same pipeline (`WAIT` after a lock's write).
        then: Option<Cmd>,
        /// Whether a `TRYAGAIN` (its keys are split by a slot migration)
        /// goes back to the caller at once instead of being retried until
        /// the migration moves them: for callers that can do the work
        /// another way meanwhile (see [`Payload::split_when_migrating`]).
        tryagain_to_caller: bool,
        /// What takes the script back if it may have run but failed
        /// (boxed: most payloads have none, and it is large).
        undo: Option<Box<Undo>>,
    },
    Transaction {
        tx: &'a Transaction,
        keys: &'a KeySet,
    },
    /// The same commands pipelined on one connection, **not** atomic:
    /// every command runs on its own (another client's may come between
    /// them), and each has its own reply. Sent again whole only when every
    /// command was refused unrun (all `MOVED`, all `ASK`, all refused while
    /// the cluster reconfigures); any other mix of replies is the caller's
    /// to judge, command by command (see `exec::send`).
    Pipeline {
        commands: &'a Transaction,
        keys: &'a KeySet,
    },
}

impl<'a> Payload<'a> {
    /// `EVALSHA` of `script` with `KEYS` = `keys` and `ARGV` = `args`.
    pub(crate) fn script(script: &'a Script, keys: &KeySet, args: impl ToRedisArgs) -> Self {
        Payload::evalsha(script, evalsha(script, keys, args))
    }

    /// `cmd`, an `EVALSHA` of `script` made by [`evalsha`].
    pub(crate) fn evalsha(script: &'a Script, cmd: Cmd) -> Self {
        Payload::Script {
            script,
            cmd,
            sent_body: false,
            then: None,
            tryagain_to_caller: false,
            undo: None,
        }
    }

    /// Returns a `TRYAGAIN` to the caller at once: a script whose optional
    /// keys (absent on both sides of a migrating slot, so Redis refuses it
    /// until the slot has moved) has a one-key form its caller falls back
    /// to. Retrying would refuse it for as long as the migration lasts.
    pub(crate) fn split_when_migrating(mut self) -> Self {
        if let Payload::Script {
            tryagain_to_caller, ..
        } = &mut self
        {
            *tryagain_to_caller = true;
        }
        self
    }

    /// Whether a `TRYAGAIN` goes back to the caller at once.
    pub(super) fn tryagain_to_caller(&self) -> bool {
        matches!(
            self,
            Payload::Script {
                tryagain_to_caller: true,
                ..
            }
        )
    }

    /// Sends `then` right behind the script, on the same connection; the
    /// reply becomes `[script reply, then reply]`.
    pub(crate) fn then(mut self, next: Cmd) -> Self {
        if let Payload::Script { then, .. } = &mut self {
            *then = Some(next);
        }
        self
    }

    /// When an attempt fails in a way that leaves it possible that the
    /// script ran, `undo` is sent behind it (see `undo`).
    pub(crate) fn undo(mut self, taken_back_by: Undo) -> Self {
        if let Payload::Script { undo, .. } = &mut self {
            *undo = Some(Box::new(taken_back_by));
        }
        self
    }

    pub(super) fn undoing(&self) -> Option<&Undo> {
        match self {
            Payload::Script { undo, .. } => undo.as_deref(),
            Payload::Transaction { .. } | Payload::Pipeline { .. } => None,
        }
    }

    /// A script followed by a command (a lock's `WAIT`) may block on the
    /// server: it gets the node's blocking connection.
    pub(super) fn lane(&self) -> Lane {
        match self {
            Payload::Script { then: Some(_), .. } => Lane::Blocking,
            _ => Lane::Shared,
        }
    }

    pub(super) fn queued_commands(&self) -> usize {
        match self {
            Payload::Script { .. } | Payload::Pipeline { .. } => 0,
            Payload::Transaction { tx, .. } => tx.len(),
        }
    }

    /// After `NOSCRIPT`: switch to `EVAL`. False if that was already done.
    pub(super) fn fall_back_to_eval(&mut self) -> bool {
        let Payload::Script {
            script,
            cmd,
            sent_body,
            ..
        } = self
        else {
            return false;
        };
        if *sent_body {
            return false;
        }
        *cmd = eval(script, cmd);
        *sent_body = true;
        true
    }
}

/// What takes back an operation that may have taken something: `script`
/// on the operation's keys, harmless if the operation never ran (a
/// compare-and-delete by the operation's random token).
#[derive(Clone, Debug)]
pub(crate) struct Undo {
    pub(super) script: &'static Script,
    cmd: Cmd,
    pub(super) slot: u16,
    /// How long what it undoes lasts at most: after that, nothing is left
    /// to undo.
    pub(super) lifetime: Duration,
}

impl Undo {
    /// `script` with `KEYS` = `keys` and `ARGV` = `args`, for an operation
    /// on `keys` whose effect expires within `lifetime`.
    pub(crate) fn new(
        script: &'static Script,
        keys: &KeySet,
        args: impl ToRedisArgs,
        lifetime: Duration,
    ) -> Self {
        Undo {
            script,
            cmd: evalsha(script, keys, args),
            slot: keys.slot(),
            lifetime,
        }
    }

    /// What is sent to undo.
    pub(super) fn payload(&self) -> Payload<'static> {
        Payload::evalsha(self.script, self.cmd.clone())
    }
}
