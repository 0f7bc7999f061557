//! The page plan: what to read for each key of a `SCAN` page, in one
//! pipeline, and how to decode the replies into primitives.

use std::time::Duration;

use redis::Value;

use super::filter::Filter;
use super::reply::{int, text, ttl, unsigned};
use super::settings::{self, LimiterKeys, Role};
use crate::admin::info::{LimiterInfo, Usage};
use crate::cluster::{Cluster, NodeAddr};
use crate::error::{Error, Result};
use crate::keys::{Kind, ParsedKey, slot};

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

/// Parses one page of keys and reads what `mode` needs, in one pipeline.
pub(crate) async fn read_page(
    cluster: &Cluster,
    filter: &Filter,
    mode: Mode,
    node: &NodeAddr,
    keys: Vec<Vec<u8>>,
) -> Result<Vec<Found>> {
    let namespace = cluster.namespace();
    let mut found = Vec::new();
    let mut reads: Vec<(Vec<u8>, Plan)> = Vec::new();
    for key in keys {
        let plan = match ParsedKey::parse(&key) {
            Ok(parsed) if parsed.namespace == namespace => {
                if mode == Mode::Audit {
                    Plan::Audit
                } else if !filter.matches(&parsed) {
                    continue;
                } else if mode == Mode::Count {
                    match Plan::read(&key, &parsed) {
                        // A part counts only when its main key is gone
                        // (a free lock's fence; a rate limiter's override,
                        // and its block when the override is gone too):
                        // one EXISTS to find out.
                        Plan::Part {
                            kind, name, main, ..
                        } => Plan::CountPart {
                            kind,
                            name,
                            before: vec![main],
                        },
                        Plan::Setting {
                            kind, name, before, ..
                        } => Plan::CountPart { kind, name, before },
                        _ => {
                            found.push(Found::Counted {
                                kind: parsed.kind.to_owned(),
                                name: parsed.name.to_owned(),
                            });
                            continue;
                        }
                    }
                } else {
                    Plan::read(&key, &parsed)
                }
            }
            _ if mode == Mode::Audit => Plan::AuditUnrecognized,
            _ => {
                found.push(Found::Unrecognized(key));
                continue;
            }
        };
        reads.push((key, plan));
    }
    if reads.is_empty() {
        return Ok(found);
    }
    let mut pipe = redis::pipe();
    for (key, plan) in &reads {
        plan.queue(&mut pipe, key);
    }
    let replies = cluster.node_pipeline("scan reads", node, pipe).await?;
    let mut replies = replies.into_iter();
    'keys: for (key, plan) in reads {
        let mine: Vec<Value> = replies.by_ref().take(plan.commands()).collect();
        for (i, reply) in mine.iter().enumerate() {
            match reply {
                // A key named like ours but holding another type: not
                // ours. One stranger must not hide the rest of the node.
                // (A rate limiter's settings reads judge their own keys.)
                Value::ServerError(err) if is_wrong_type(err) && i < plan.own_commands() => {
                    found.push(Found::Unrecognized(key));
                    continue 'keys;
                }
                Value::ServerError(err) if is_wrong_type(err) => {}
                // A MOVED here means the node is no longer a master.
                Value::ServerError(err) => {
                    return Err(Error::Redis {
                        op: "scan reads".into(),
                        slot: Some(slot(&key)),
                        source: err.clone().into(),
                    });
                }
                _ => {}
            }
        }
        plan.interpret(key, node, &mine, &mut found);
    }
    Ok(found)
}

/// What to read for one key, and how to read the replies.
enum Plan {
    /// A primitive's main key: PTTL, then the state reads for its kind;
    /// for a rate limiter, then its settings reads.
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
enum StateReads {
    Get(fn(Option<i64>) -> Usage),
    Card(fn(u64) -> Usage),
    Window,
    Lock,
    Type,
}

impl Plan {
    fn read(key: &[u8], parsed: &ParsedKey<'_>) -> Plan {
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
            Some(Kind::FixedWindow) => {
                StateReads::Get(|v| Usage::FixedWindow { used: unsigned(v) })
            }
            Some(Kind::Gcra) => StateReads::Get(|v| Usage::Gcra {
                theoretical_arrival_us: unsigned(v),
            }),
            Some(Kind::Counter) => StateReads::Get(|v| Usage::Counter {
                value: v.unwrap_or(0),
            }),
            Some(Kind::SlidingLog) => StateReads::Card(|entries| Usage::SlidingLog { entries }),
            Some(Kind::Lease) => StateReads::Card(|holders| Usage::Lease { holders }),
            Some(Kind::SlidingWindow) => StateReads::Window,
            Some(Kind::Lock) => StateReads::Lock,
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
    fn commands(&self) -> usize {
        let settings = match self {
            Plan::Main {
                settings: Some(_), ..
            }
            | Plan::Setting { .. } => LimiterKeys::READS,
            _ => 0,
        };
        self.own_commands() + settings
    }

    /// Replies about the scanned key itself (a `WRONGTYPE` among them means
    /// it is not ours); a rate limiter's settings reads follow them.
    fn own_commands(&self) -> usize {
        match self {
            Plan::Main { .. } => 2,
            Plan::Part { .. } => 3,
            Plan::Setting { .. }
            | Plan::Audit
            | Plan::AuditUnrecognized
            | Plan::CountPart { .. } => 1,
        }
    }

    fn queue(&self, pipe: &mut redis::Pipeline, key: &[u8]) {
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
                    StateReads::Get(_) => pipe.cmd("GET").arg(key),
                    StateReads::Card(_) => pipe.cmd("ZCARD").arg(key),
                    StateReads::Window => pipe.cmd("HMGET").arg(key).arg("c").arg("p"),
                    StateReads::Lock => pipe.cmd("GET").arg(fence_of(key)),
                    StateReads::Type => pipe.cmd("TYPE").arg(key),
                };
                if let Some(settings) = settings {
                    settings.queue(pipe);
                }
            }
        }
    }

    /// Decodes this plan's `replies` into what it found, if anything.
    fn interpret(self, key: Vec<u8>, node: &NodeAddr, replies: &[Value], found: &mut Vec<Found>) {
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
                    StateReads::Get(f) => f(int(replies.get(1))),
                    StateReads::Card(f) => f(unsigned(int(replies.get(1)))),
                    StateReads::Window => window(replies.get(1)),
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
                let subject_settings = match settings {
                    Some(settings) => {
                        let read = settings.decode(replies.get(2..).unwrap_or_default());
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

/// `WRONGTYPE`: redis-rs has no error kind for it, so its code decides
/// (the code, not the message text, is the protocol's contract).
fn is_wrong_type(err: &redis::ServerError) -> bool {
    err.code() == "WRONGTYPE"
}

/// The sliding window counter's `c` and `p` fields: the counts of the
/// window last written and the one before it.
fn window(stored: Option<&Value>) -> Usage {
    let fields: Vec<Option<i64>> = match stored {
        Some(Value::Array(items)) => items.iter().map(|v| int(Some(v))).collect(),
        _ => Vec::new(),
    };
    let get = |i: usize| fields.get(i).copied().flatten();
    Usage::SlidingWindow {
        current: unsigned(get(0)),
        previous: unsigned(get(1)),
    }
}

/// A lock's fence key: its main key with the `fence` part.
fn fence_of(key: &[u8]) -> Vec<u8> {
    let mut fence = key.to_vec();
    fence.extend_from_slice(b":fence");
    fence
}
