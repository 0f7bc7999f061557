//! The key plan: what to read for each key of a `SCAN` page, and how to
//! decode the replies into primitives (the pipelines are
//! [`read_page`](super::read::read_page)'s).

use std::time::Duration;

use redis::Value;

use super::reply::{int, text, ttl, unsigned};
use super::settings::{self, LimiterKeys, Role};
use crate::admin::info::LimiterInfo;
use crate::cluster::NodeAddr;
use crate::keys::{Kind, ParsedKey, slot};
use crate::limit::{Algorithm, StateRead};
use crate::usage::Usage;

/// What a walk does with each page of keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Read each primitive's TTL and state.
    List,
    /// Parse only.
    Count,
    /// Read every key's TTL.
    Audit,
}

/// One page's findings.
pub(crate) enum Found {
    Limiter(LimiterInfo),
    Counted { kind: String, name: String },
    Unrecognized(Vec<u8>),
    Immortal(Vec<u8>),
}

/// What to read for one key, and how to read the replies.
pub(super) enum Plan {
    /// A primitive's main key: PTTL, then the state reads for its kind;
    /// for a rate limiter, then EXISTS of its override and block keys (and
    /// their reads in a second pipeline when one exists).
    Main {
        kind: String,
        name: String,
        subject: Vec<u8>,
        reads: StateReads,
        settings: Option<LimiterKeys>,
    },
    /// A part key (e.g. a lock's fence): reported only when its main key is
    /// gone, else the main key's report covers it. EXISTS main, PTTL, GET.
    Part {
        kind: String,
        name: String,
        subject: Vec<u8>,
        main: Vec<u8>,
    },
    /// A rate limiter's override or block key: reported, as the limiter
    /// with its settings, only when the keys that stand before it are gone
    /// (see [`LimiterKeys::before`]). EXISTS those, then the settings reads.
    Setting {
        kind: String,
        name: String,
        subject: Vec<u8>,
        before: Vec<Vec<u8>>,
        keys: LimiterKeys,
    },
    /// Counting a part key: EXISTS of the keys that stand before it.
    CountPart {
        kind: String,
        name: String,
        before: Vec<Vec<u8>>,
    },
    /// Audit: PTTL.
    Audit,
    /// Audit of a key the parser rejects: PTTL (immortal or not, it is
    /// reported as unrecognised).
    AuditUnrecognized,
}

#[derive(Clone, Copy)]
pub(super) enum StateReads {
    /// A rate limiter's (its algorithm says how), a lease set's or a
    /// counter's.
    State(StateRead),
    Lock,
    Type,
}

impl Plan {
    pub(super) fn read(key: &[u8], parsed: &ParsedKey<'_>) -> Plan {
        let (kind, name, subject) = (
            parsed.kind.to_owned(),
            parsed.name.to_owned(),
            parsed.subject.to_vec(),
        );
        let settings = match LimiterKeys::of(key, parsed) {
            Some((keys, Role::State)) => Some(keys),
            Some((keys, role)) => {
                return Plan::Setting {
                    kind,
                    name,
                    subject,
                    before: keys.before(role),
                    keys,
                };
            }
            None => None,
        };
        if let Some(part) = parsed.part {
            // The parser split the key at its colons: the main key is this
            // key without `:<part>`.
            let main = key
                .strip_suffix(part.as_bytes())
                .and_then(|k| k.strip_suffix(b":"))
                .unwrap_or_default()
                .to_vec();
            return Plan::Part {
                kind,
                name,
                subject,
                main,
            };
        }
        let reads = match Kind::parse(parsed.kind) {
            Some(Kind::Counter) => StateReads::State(StateRead::Integer(|v| Usage::Counter {
                value: v.unwrap_or(0),
            })),
            Some(Kind::Lease) => StateReads::State(StateRead::Members(|leases_held| {
                Usage::Lease { leases_held }
            })),
            Some(Kind::Lock) => StateReads::Lock,
            Some(kind) => match Algorithm::from_key_kind(kind) {
                Some(algorithm) => StateReads::State(algorithm.rules().state),
                None => StateReads::Type,
            },
            None => StateReads::Type,
        };
        Plan::Main {
            kind,
            name,
            subject,
            reads,
            settings,
        }
    }

    /// Replies this plan reads.
    pub(super) fn commands(&self) -> usize {
        let settings = match self {
            Plan::Main {
                settings: Some(_), ..
            } => 1,
            Plan::Setting { .. } => LimiterKeys::READS,
            _ => 0,
        };
        self.own_commands() + settings
    }

    /// The override and block keys to read in the second pipeline: a rate
    /// limiter's whose state key's `EXISTS` of them found one.
    pub(super) fn settings_to_read(&self, replies: &[Value]) -> Option<&LimiterKeys> {
        match self {
            Plan::Main {
                settings: Some(settings),
                ..
            } => int(replies.get(2))
                .is_some_and(|n| n > 0)
                .then_some(settings),
            _ => None,
        }
    }

    /// Replies about the scanned key itself (a `WRONGTYPE` among them means
    /// it is not ours); a rate limiter's settings reads follow them.
    pub(super) fn own_commands(&self) -> usize {
        match self {
            Plan::Main { .. } => 2,
            Plan::Part { .. } => 3,
            Plan::Setting { .. }
            | Plan::Audit
            | Plan::AuditUnrecognized
            | Plan::CountPart { .. } => 1,
        }
    }

    pub(super) fn queue(&self, pipe: &mut redis::Pipeline, key: &[u8]) {
        match self {
            Plan::Audit | Plan::AuditUnrecognized => {
                pipe.cmd("PTTL").arg(key);
            }
            Plan::CountPart { before, .. } => {
                pipe.cmd("EXISTS").arg(before);
            }
            Plan::Part { kind, main, .. } => {
                pipe.cmd("EXISTS").arg(main).cmd("PTTL").arg(key);
                // A lock's fence holds the last fencing token; of other
                // kinds' parts only the type is known.
                if Kind::parse(kind) == Some(Kind::Lock) {
                    pipe.cmd("GET").arg(key);
                } else {
                    pipe.cmd("TYPE").arg(key);
                }
            }
            Plan::Setting { before, keys, .. } => {
                pipe.cmd("EXISTS").arg(before);
                keys.queue(pipe);
            }
            Plan::Main {
                reads, settings, ..
            } => {
                pipe.cmd("PTTL").arg(key);
                match reads {
                    StateReads::State(StateRead::Integer(_)) => pipe.cmd("GET").arg(key),
                    StateReads::State(StateRead::Members(_)) => pipe.cmd("ZCARD").arg(key),
                    StateReads::State(StateRead::Fields(fields, _)) => {
                        pipe.cmd("HMGET").arg(key).arg(*fields)
                    }
                    StateReads::Lock => pipe.cmd("GET").arg(fence_of(key)),
                    StateReads::Type => pipe.cmd("TYPE").arg(key),
                };
                if let Some(settings) = settings {
                    pipe.cmd("EXISTS").arg(&settings.quota).arg(&settings.block);
                }
            }
        }
    }

    /// Decodes this plan's `replies` (and a rate limiter's `settings`
    /// reads from the second pipeline) into what it found, if anything.
    pub(super) fn interpret(
        self,
        key: Vec<u8>,
        node: &NodeAddr,
        replies: &[Value],
        settings_read: Option<&[Value]>,
        found: &mut Vec<Found>,
    ) {
        let id = |kind, name, subject| Id {
            kind,
            name,
            subject,
            slot: slot(&key),
            node: node.to_string(),
        };
        match self {
            Plan::Audit => {
                if int(replies.first()) == Some(-1) {
                    found.push(Found::Immortal(key));
                }
            }
            Plan::AuditUnrecognized => found.push(Found::Unrecognized(key)),
            Plan::CountPart { kind, name, .. } => {
                if int(replies.first()) == Some(0) {
                    found.push(Found::Counted { kind, name });
                }
            }
            Plan::Part {
                kind,
                name,
                subject,
                ..
            } => {
                if int(replies.first()) == Some(1) {
                    return; // reported with its main key
                }
                let Some(ttl) = ttl(int(replies.get(1))) else {
                    return;
                };
                let usage = match Kind::parse(&kind) {
                    Some(Kind::Lock) => Usage::Lock {
                        held: false,
                        fencing_token: int(replies.get(2)).and_then(|v| u64::try_from(v).ok()),
                    },
                    _ => Usage::Other {
                        redis_type: text(replies.get(2)).unwrap_or_default(),
                    },
                };
                let keys = vec![key.clone()];
                found.push(id(kind, name, subject).info(ttl, usage, settings::none(), keys));
            }
            Plan::Setting {
                kind,
                name,
                subject,
                keys,
                ..
            } => {
                if int(replies.first()) != Some(0) {
                    return; // reported with the key that stands before it
                }
                let read = keys.decode(replies.get(1..).unwrap_or_default());
                found.extend(read.malformed.map(Found::Unrecognized));
                if !read.present.is_empty() {
                    found.push(id(kind, name, subject).info(
                        read.ttl,
                        Usage::Unused,
                        read.settings,
                        read.present,
                    ));
                }
            }
            Plan::Main {
                kind,
                name,
                subject,
                reads,
                settings,
            } => {
                let Some(ttl) = ttl(int(replies.first())) else {
                    return;
                };
                let usage = match reads {
                    StateReads::State(StateRead::Integer(f)) => f(int(replies.get(1))),
                    StateReads::State(StateRead::Members(f)) => f(unsigned(int(replies.get(1)))),
                    StateReads::State(StateRead::Fields(_, f)) => f(&fields(replies.get(1))),
                    StateReads::Lock => Usage::Lock {
                        held: true,
                        fencing_token: int(replies.get(1)).and_then(|v| u64::try_from(v).ok()),
                    },
                    StateReads::Type => Usage::Other {
                        redis_type: text(replies.get(1)).unwrap_or_default(),
                    },
                };
                let mut keys = vec![key.clone()];
                if matches!(reads, StateReads::Lock) {
                    keys.push(fence_of(&key));
                }
                let subject_settings = match settings.zip(settings_read) {
                    Some((settings, replies)) => {
                        let read = settings.decode(replies);
                        found.extend(read.malformed.map(Found::Unrecognized));
                        keys.extend(read.present);
                        read.settings
                    }
                    None => settings::none(),
                };
                found.push(id(kind, name, subject).info(ttl, usage, subject_settings, keys));
            }
        }
    }
}

/// Which primitive of which subject, and where it was read.
struct Id {
    kind: String,
    name: String,
    subject: Vec<u8>,
    slot: u16,
    node: String,
}

impl Id {
    fn info(
        self,
        ttl: Option<Duration>,
        usage: Usage,
        settings: crate::limit::SubjectSettings,
        keys: Vec<Vec<u8>>,
    ) -> Found {
        Found::Limiter(LimiterInfo {
            kind: self.kind,
            name: self.name,
            subject: self.subject,
            slot: self.slot,
            node: self.node,
            ttl,
            usage,
            settings,
            keys,
        })
    }
}

/// A hash's fields read by `HMGET`, as integers.
fn fields(stored: Option<&Value>) -> Vec<Option<i64>> {
    match stored {
        Some(Value::Array(items)) => items.iter().map(|v| int(Some(v))).collect(),
        _ => Vec::new(),
    }
}

/// A lock's fence key: its main key with the `fence` part.
fn fence_of(key: &[u8]) -> Vec<u8> {
    let mut fence = key.to_vec();
    fence.extend_from_slice(b":fence");
    fence
}
