//! Reading one page of keys: each key parsed and planned
//! ([`Plan`]), the plans' reads in one pipeline — and a second one for the
//! rate limiters whose override or block exists — and the replies decoded.

use redis::Value;

use super::filter::Filter;
use super::plan::{Found, Mode, Plan};
use super::settings::LimiterKeys;
use crate::cluster::{Cluster, NodeAddr};
use crate::error::{Error, Result};
use crate::keys::{ParsedKey, slot};
use crate::limit::catalog_entry;
use crate::throttled::publish;

/// Parses one page of keys and reads what `mode` needs, in one pipeline
/// (and a second for the rate limiters with an override or a block).
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
                    // The catalog's keys too: every key must have a TTL.
                    Plan::Audit
                } else if catalog_entry(&parsed).is_some() || publish::is_report(&parsed) {
                    // The catalog and the throttled reports describe
                    // limiters; they are none.
                    continue;
                } else if !filter.matches(&parsed) {
                    continue;
                } else if mode == Mode::Count && parsed.part.is_none() {
                    found.push(Found::Counted {
                        kind: parsed.kind.to_owned(),
                        name: parsed.name.to_owned(),
                    });
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
    let mut answered = Vec::with_capacity(reads.len());
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
                Value::ServerError(err) => return Err(moved(&key, err)),
                _ => {}
            }
        }
        answered.push((key, plan, mine));
    }
    let settings = read_settings(cluster, node, &answered).await?;
    for ((key, plan, mine), settings) in answered.into_iter().zip(settings) {
        plan.interpret(key, node, &mine, settings.as_deref(), &mut found);
    }
    if mode == Mode::Audit {
        probe_immortal(cluster, node, &mut found).await?;
    }
    Ok(found)
}

/// The audit's keys without a TTL, read as the listing reads them (its
/// typed reads: `GET`, `ZCARD`, `HMGET`, …) in one more pipeline: one that
/// holds another type (a `WRONGTYPE`) is not shardlimit's, as the listing
/// says, rather than one of ours that lost its TTL. Keys without a TTL are
/// rare, so this costs nothing on a healthy namespace.
async fn probe_immortal(cluster: &Cluster, node: &NodeAddr, found: &mut [Found]) -> Result<()> {
    let mut probes: Vec<(usize, Plan)> = Vec::new();
    let mut pipe = redis::pipe();
    for (i, f) in found.iter().enumerate() {
        if let Found::Immortal(key) = f
            && let Ok(parsed) = ParsedKey::parse(key)
        {
            let plan = Plan::read(key, &parsed);
            plan.queue(&mut pipe, key);
            probes.push((i, plan));
        }
    }
    if probes.is_empty() {
        return Ok(());
    }
    let replies = cluster.node_pipeline("scan reads", node, pipe).await?;
    let mut replies = replies.into_iter();
    for (i, plan) in probes {
        let mine: Vec<Value> = replies.by_ref().take(plan.commands()).collect();
        let wrong_type = mine
            .iter()
            .take(plan.own_commands())
            .any(|reply| matches!(reply, Value::ServerError(err) if is_wrong_type(err)));
        if wrong_type && let Found::Immortal(key) = &mut found[i] {
            found[i] = Found::Unrecognized(std::mem::take(key));
        }
    }
    Ok(())
}

/// The settings reads of the rate limiters whose state key's `EXISTS`
/// found an override or a block, in a second pipeline: most subjects have
/// neither, so a state key costs one command more, not
/// [`LimiterKeys::READS`]. Aligned with `answered`.
async fn read_settings(
    cluster: &Cluster,
    node: &NodeAddr,
    answered: &[(Vec<u8>, Plan, Vec<Value>)],
) -> Result<Vec<Option<Vec<Value>>>> {
    let mut pipe = redis::pipe();
    let mut first = None;
    for (key, plan, mine) in answered {
        if let Some(settings) = plan.settings_to_read(mine) {
            settings.queue(&mut pipe);
            first.get_or_insert(key);
        }
    }
    let Some(first) = first else {
        return Ok(vec![None; answered.len()]);
    };
    let replies = cluster.node_pipeline("scan reads", node, pipe).await?;
    for reply in &replies {
        if let Value::ServerError(err) = reply
            && !is_wrong_type(err)
        {
            return Err(moved(first, err));
        }
    }
    let mut replies = replies.into_iter();
    Ok(answered
        .iter()
        .map(|(_, plan, mine)| {
            plan.settings_to_read(mine)
                .map(|_| replies.by_ref().take(LimiterKeys::READS).collect())
        })
        .collect())
}

/// A server error on a scan read: the node no longer serves the key (a
/// MOVED: it is no longer a master), or worse.
fn moved(key: &[u8], err: &redis::ServerError) -> Error {
    Error::Redis {
        op: "scan reads".into(),
        slot: Some(slot(key)),
        source: err.clone().into(),
    }
}

/// `WRONGTYPE`: redis-rs has no error kind for it, so its code decides
/// (the code, not the message text, is the protocol's contract).
fn is_wrong_type(err: &redis::ServerError) -> bool {
    err.code() == "WRONGTYPE"
}
