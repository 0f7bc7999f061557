//! The page plan: what to read for each key of a `SCAN` page, in one
//! pipeline, and how to decode the replies into primitives.

use std::time::Duration;

use redis::Value;

use super::filter::Filter;
use crate::admin::info::{LimiterInfo, Usage};
use crate::cluster::{Cluster, NodeAddr};
use crate::error::{Error, Result};
use crate::keys::{KeyId, Kind, ParsedKey, slot};

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
                    match Plan::read(&parsed) {
                        // A part counts only when its main key is gone
                        // (a free lock's fence): one EXISTS to find out.
                        Plan::Part {
                            kind, name, main, ..
                        } => Plan::CountPart { kind, name, main },
                        _ => {
                            found.push(Found::Counted {
                                kind: parsed.kind.to_owned(),
                                name: parsed.name.to_owned(),
                            });
                            continue;
                        }
                    }
                } else {
                    Plan::read(&parsed)
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
        for reply in &mine {
            match reply {
                // A key named like ours but holding another type: not
                // ours. One stranger must not hide the rest of the node.
                Value::ServerError(err) if is_wrong_type(err) => {
                    found.push(Found::Unrecognized(key));
                    continue 'keys;
                }
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
        if let Some(f) = plan.interpret(key, node, &mine) {
            found.push(f);
        }
    }
    Ok(found)
}

/// What to read for one key, and how to read the replies.
enum Plan {
    /// A primitive's main key: PTTL, then the state reads for its kind.
    Main {
        kind: String,
        name: String,
        subject: Vec<u8>,
        reads: StateReads,
    },
    /// A part key (e.g. a lock's fence): reported only when its main key is
    /// gone, else the main key's report covers it. EXISTS main, PTTL, GET.
    Part {
        kind: String,
        name: String,
        subject: Vec<u8>,
        main: Vec<u8>,
    },
    /// Counting a part key: EXISTS main.
    CountPart {
        kind: String,
        name: String,
        main: Vec<u8>,
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
    fn read(parsed: &ParsedKey<'_>) -> Plan {
        let (kind, name, subject) = (
            parsed.kind.to_owned(),
            parsed.name.to_owned(),
            parsed.subject.to_vec(),
        );
        if parsed.part.is_some() {
            let main_id = KeyId::new(parsed.kind, parsed.name);
            let main = main_id
                .ok()
                .and_then(|id| {
                    crate::keys::KeyBuilder::new(parsed.namespace)
                        .ok()?
                        .key(&subject, &id)
                        .ok()
                })
                .unwrap_or_default();
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
        }
    }

    fn commands(&self) -> usize {
        match self {
            Plan::Main { .. } => 2,
            Plan::Part { .. } => 3,
            Plan::Audit | Plan::AuditUnrecognized | Plan::CountPart { .. } => 1,
        }
    }

    fn queue(&self, pipe: &mut redis::Pipeline, key: &[u8]) {
        match self {
            Plan::Audit | Plan::AuditUnrecognized => {
                pipe.cmd("PTTL").arg(key);
            }
            Plan::CountPart { main, .. } => {
                pipe.cmd("EXISTS").arg(main);
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
            Plan::Main { reads, .. } => {
                pipe.cmd("PTTL").arg(key);
                match reads {
                    StateReads::Get(_) => pipe.cmd("GET").arg(key),
                    StateReads::Card(_) => pipe.cmd("ZCARD").arg(key),
                    StateReads::Window => pipe.cmd("HMGET").arg(key).arg("c").arg("p"),
                    StateReads::Lock => pipe.cmd("GET").arg(fence_of(key)),
                    StateReads::Type => pipe.cmd("TYPE").arg(key),
                };
            }
        }
    }

    fn interpret(self, key: Vec<u8>, node: &NodeAddr, replies: &[Value]) -> Option<Found> {
        match self {
            Plan::Audit => match int(replies.first()) {
                Some(-1) => Some(Found::Immortal(key)),
                _ => None,
            },
            Plan::AuditUnrecognized => Some(Found::Unrecognized(key)),
            Plan::CountPart { kind, name, .. } => {
                (int(replies.first()) == Some(0)).then_some(Found::Counted { kind, name })
            }
            Plan::Part {
                kind,
                name,
                subject,
                ..
            } => {
                if int(replies.first()) == Some(1) {
                    return None; // reported with its main key
                }
                let ttl = ttl(int(replies.get(1)))?;
                let usage = match Kind::parse(&kind) {
                    Some(Kind::Lock) => Usage::Lock {
                        held: false,
                        fencing_token: int(replies.get(2)).and_then(|v| u64::try_from(v).ok()),
                    },
                    _ => Usage::Other {
                        redis_type: text(replies.get(2)).unwrap_or_default(),
                    },
                };
                Some(info(
                    kind,
                    name,
                    subject,
                    &key,
                    node,
                    ttl,
                    usage,
                    vec![key.clone()],
                ))
            }
            Plan::Main {
                kind,
                name,
                subject,
                reads,
            } => {
                let ttl = ttl(int(replies.first()))?;
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
                Some(info(kind, name, subject, &key, node, ttl, usage, keys))
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn info(
    kind: String,
    name: String,
    subject: Vec<u8>,
    key: &[u8],
    node: &NodeAddr,
    ttl: Option<Duration>,
    usage: Usage,
    keys: Vec<Vec<u8>>,
) -> Found {
    Found::Limiter(LimiterInfo {
        kind,
        name,
        subject,
        slot: slot(key),
        node: node.to_string(),
        ttl,
        usage,
        keys,
    })
}

/// `WRONGTYPE`: redis-rs has no error kind for it, so its code decides
/// (the code, not the message text, is the protocol's contract).
fn is_wrong_type(err: &redis::ServerError) -> bool {
    err.code() == "WRONGTYPE"
}

/// `PTTL` → `Some(ttl)` (`None` inside when the key has no TTL), or `None`
/// when the key is gone.
fn ttl(pttl: Option<i64>) -> Option<Option<Duration>> {
    match pttl {
        Some(-1) => Some(None),
        Some(ms) if ms >= 0 => Some(Some(Duration::from_millis(u64::try_from(ms).ok()?))),
        _ => None,
    }
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

fn int(value: Option<&Value>) -> Option<i64> {
    match value? {
        Value::Int(n) => Some(*n),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        _ => None,
    }
}

fn text(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::SimpleString(s) => Some(s.clone()),
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::Okay => Some("OK".into()),
        _ => None,
    }
}

fn unsigned(v: Option<i64>) -> u64 {
    v.and_then(|v| u64::try_from(v).ok()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls() {
        assert_eq!(ttl(Some(-1)), Some(None));
        assert_eq!(ttl(Some(-2)), None);
        assert_eq!(ttl(Some(1500)), Some(Some(Duration::from_millis(1500))));
        assert_eq!(ttl(None), None);
    }
}
