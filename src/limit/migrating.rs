//! Rate-limit checks while their subject's slot migrates.
//!
//! A check declares three keys per limit — its state, the subject's
//! override and the subject's block — so that one script reads all three
//! atomically. While a slot is being moved between masters (`CLUSTER
//! SETSLOT … MIGRATING/IMPORTING`, then `MIGRATE` key by key), Redis runs a
//! multi-key command only where **all** of its keys are: the source refuses
//! it (`TRYAGAIN`) if some are there and some are not, and the target
//! refuses it (`TRYAGAIN`, even after `ASKING`) unless every key has
//! arrived. An override or a block almost never exists, so without this
//! module every check of a migrating slot would be refused for as long as
//! the slot takes to move — hours, slot after slot, in a large reshard.
//!
//! A check refused with `TRYAGAIN` is therefore done again in steps that
//! each touch one key, which Redis serves on whichever side holds it
//! (following `ASK`):
//!
//! 1. **Read** each limit's override and block on their own (one key each,
//!    all at once).
//! 2. **Check** with the same script in *inline* mode (see
//!    `limit_prelude.lua`): its `KEYS` are the state keys only, and the
//!    override and block values travel in `ARGV`. For one limit that is one
//!    key: atomic as ever.
//! 3. A **multi-limit** whose state keys are still not on one side (some
//!    absent, or split between source and target) is checked **limit by
//!    limit**: each is peeked (nothing written); if any enforcing limit
//!    denies, so does the check; if all admit, each consumes its units on
//!    its own, and if a concurrent request of the same subject took the
//!    last units of one of them in between, the units the others took are
//!    given back (the reward of `limit_adjust.lua`) and the check is denied
//!    — still denied if giving back fails (those units then stay used), or
//!    if another limit's consume failed (its units may have been taken).
//!
//! What that costs during a migration, and only then: the override and
//! block a check applies are **at most one round trip old** (read just
//! before the check rather than inside it); a multi-limit checked limit by
//! limit never admits more than any of its limits allows, but in the race
//! above a request is denied whose units were taken and given back, and the
//! units given back are the newest (a sliding log drops its newest entries,
//! a fixed window's units go back to the window current when they are given
//! back). Calls: 2 reads per limit, then 1 check (or 2 per limit).

use std::sync::Arc;

use futures::future::join_all;

use super::adjust;
use super::algorithm;
use super::script::{Invocation, LimitSpec, REPLY_FIELDS};
use crate::cluster::Cluster;
use crate::error::{Error, Result};
use crate::keys::KeySet;

/// An override or block key's value as read on its own: `""` when absent.
type Optional = Vec<u8>;

impl Invocation {
    /// The check done one key at a time (see the module docs), after the
    /// whole check was refused with `TRYAGAIN`. Returns the reply the
    /// script would have given.
    pub(crate) async fn run_migrating(
        &self,
        cluster: &Cluster,
        specs: &[Arc<LimitSpec>],
    ) -> Result<Vec<i64>> {
        let keys = self.keys.keys();
        let optional = join_all(
            keys.chunks_exact(3)
                .flat_map(|limit| [&limit[1], &limit[2]])
                .map(|key| read_optional(cluster, key)),
        )
        .await
        .into_iter()
        .collect::<Result<Vec<Optional>>>()?;
        let states: Vec<&Vec<u8>> = keys.chunks_exact(3).map(|limit| &limit[0]).collect();
        let inline = self.inline_args(specs, &optional, 0..specs.len(), self.consumes());
        let together = KeySet::checked(states.iter().map(|k| k.to_vec()).collect())?;
        match cluster
            .eval_unless_migrating(&self.script, &together, &inline)
            .await
        {
            Err(err) if err.is_tryagain() && specs.len() > 1 => {}
            other => return other,
        }
        self.limit_by_limit(cluster, specs, &states, &optional)
            .await
    }

    /// Step 3 of the module docs: peek every limit alone, then consume each
    /// alone, giving back what was taken if one of them denies.
    async fn limit_by_limit(
        &self,
        cluster: &Cluster,
        specs: &[Arc<LimitSpec>],
        states: &[&Vec<u8>],
        optional: &[Optional],
    ) -> Result<Vec<i64>> {
        let alone = |i: usize, consume: bool| {
            let args = self.inline_args(specs, optional, i..i + 1, consume);
            async move {
                let key = KeySet::checked(vec![states[i].to_vec()])?;
                let reply: Vec<i64> = cluster.eval(&self.script, &key, &args).await?;
                Limit::from_reply(&self.script, &reply)
            }
        };
        let peeks = join_all((0..specs.len()).map(|i| alone(i, false)))
            .await
            .into_iter()
            .collect::<Result<Vec<Limit>>>()?;
        if !self.consumes() || !peeks.iter().all(|p| p.all) {
            return Ok(Limit::combine(&peeks));
        }
        let consumed = join_all((0..specs.len()).map(|i| alone(i, true))).await;
        let denied = |c: &Result<Limit>| matches!(c, Ok(limit) if !limit.all);
        if !consumed.iter().any(denied) {
            // A failure leaves what the others took taken: the failed one
            // may have run too (at most once, as any check).
            let consumed = consumed.into_iter().collect::<Result<Vec<Limit>>>()?;
            return Ok(Limit::combine(&consumed));
        }
        // A concurrent request took the last units of a limit since the
        // peek: give back what the others wrote, and deny. A denial stays a
        // denial whatever else fails now — an error would be a transient
        // fault, which fail-open and local mode admit.
        let cost = self.cost();
        let wrote: Vec<usize> = (0..specs.len())
            .filter(|&i| matches!(&consumed[i], Ok(c) if c.all && c.allowed))
            .collect();
        let given_back = join_all(
            wrote
                .iter()
                .map(|&i| give_back(cluster, &specs[i], states[i], &optional[2 * i], cost)),
        )
        .await;
        for err in given_back.into_iter().filter_map(Result::err) {
            tracing::warn!(error = %err,
                "shardlimit: could not give back the units a denied check took while its \
                 slot migrates; they stay used until their limit forgets them");
        }
        let reported: Vec<Limit> = (0..specs.len())
            .map(|i| match &consumed[i] {
                Ok(limit) if !wrote.contains(&i) => limit.clone(),
                // Written and given back, or unknown: as the peek saw it.
                _ => peeks[i].clone(),
            })
            .collect();
        let mut reply = Limit::combine(&reported);
        reply[0] = 0;
        Ok(reply)
    }
}

/// One limit's part of a check's reply: `all`, then its fields.
#[derive(Clone, Debug)]
struct Limit {
    all: bool,
    allowed: bool,
    fields: [i64; REPLY_FIELDS],
}

impl Limit {
    /// The reply of a one-limit check.
    fn from_reply(script: &crate::scripts::Script, reply: &[i64]) -> Result<Self> {
        match reply {
            [all, fields @ ..] if fields.len() == REPLY_FIELDS => {
                let mut own = [0; REPLY_FIELDS];
                own.copy_from_slice(fields);
                Ok(Limit {
                    all: *all == 1,
                    allowed: fields[0] == 1,
                    fields: own,
                })
            }
            _ => Err(Error::UnexpectedReply {
                op: script.name().to_owned().into(),
                detail: format!("{} integers for one limit", reply.len()),
            }),
        }
    }

    /// The reply a check of all of `limits` at once would have given.
    fn combine(limits: &[Limit]) -> Vec<i64> {
        let all = limits.iter().all(|l| l.all);
        std::iter::once(i64::from(all))
            .chain(limits.iter().flat_map(|l| l.fields))
            .collect()
    }
}

/// `key` (an override or a block) read on its own: its value, `""` when
/// absent.
async fn read_optional(cluster: &Cluster, key: &[u8]) -> Result<Optional> {
    Ok(cluster.read_alone(key).await?.unwrap_or_default())
}

/// Gives `cost` units back to the limit `spec` whose state key is `state`,
/// under the subject's override `override_value` (`""`: none).
async fn give_back(
    cluster: &Cluster,
    spec: &LimitSpec,
    state: &[u8],
    override_value: &[u8],
    cost: u32,
) -> Result<()> {
    let keys = KeySet::checked(vec![state.to_vec()])?;
    // No invalidation: the units were taken one round trip ago by this
    // very check.
    let mut args = adjust::script_args(
        "reward",
        u64::from(cost),
        spec,
        spec.quota,
        "",
        String::new(),
        state.to_vec(),
    );
    args.push(override_value.to_vec());
    let _settings: (Vec<u8>, i64, i64) =
        cluster.eval(&algorithm::LIMIT_ADJUST, &keys, args).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use super::*;
    use crate::limit::{Algorithm, Quota};
    use crate::scripts::Script;

    fn spec(name: &str, limit: u32) -> Arc<LimitSpec> {
        let quota = Quota::per_second(NonZeroU32::new(limit).unwrap());
        Arc::new(LimitSpec::new(name, Algorithm::Gcra, quota, false).unwrap())
    }

    fn invocation(specs: &[Arc<LimitSpec>], consume: bool) -> Invocation {
        let keys = crate::keys::KeyBuilder::new("t").unwrap();
        Invocation::new(
            &keys,
            &crate::limit::algorithm::MULTI_LIMIT,
            specs,
            b"user",
            2,
            consume,
        )
        .unwrap()
    }

    #[test]
    fn inline_args_carry_each_limits_override_and_block() {
        let (a, b) = (spec("a", 10), spec("b", 20));
        let call = invocation(&[a.clone(), b.clone()], true);
        let optional: Vec<Optional> = vec![b"5 1000000 5".to_vec(), vec![], vec![], b"99".to_vec()];
        let text = |args: Vec<Vec<u8>>| {
            args.into_iter()
                .map(|a| String::from_utf8(a).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            text(call.inline_args(&[a.clone(), b.clone()], &optional, 0..2, true)),
            [
                "2",
                "i1",
                "gcra",
                "10",
                "1000000",
                "10",
                "0",
                "5 1000000 5",
                "",
                "gcra",
                "20",
                "1000000",
                "20",
                "0",
                "",
                "99",
            ]
        );
        assert_eq!(
            text(call.inline_args(&[a.clone(), b.clone()], &optional, 1..2, false)),
            ["2", "i0", "gcra", "20", "1000000", "20", "0", "", "99"]
        );
        assert!(call.consumes());
        assert_eq!(call.cost(), 2);
        assert!(!invocation(std::slice::from_ref(&a), false).consumes());
    }

    #[test]
    fn a_one_limit_check_sends_no_default_and_no_algorithm_code() {
        let a = spec("a", 10);
        let keys = crate::keys::KeyBuilder::new("t").unwrap();
        let text = |args: Vec<Vec<u8>>| {
            args.into_iter()
                .map(|a| String::from_utf8(a).unwrap())
                .collect::<Vec<_>>()
        };
        let one = |cost: u32, consume: bool| {
            Invocation::new(
                &keys,
                Algorithm::Gcra.script(),
                std::slice::from_ref(&a),
                b"user",
                cost,
                consume,
            )
            .unwrap()
        };
        assert_eq!(text(one(1, true).args), ["10", "1000000", "10"]);
        assert_eq!(
            text(one(2, true).args),
            ["10", "1000000", "10", "2", "1", "0"]
        );
        assert_eq!(
            text(one(1, false).args),
            ["10", "1000000", "10", "1", "0", "0"]
        );
        let shadow = Arc::new(a.with(a.quota, true).unwrap());
        let call = Invocation::new(
            &keys,
            Algorithm::Gcra.script(),
            std::slice::from_ref(&shadow),
            b"user",
            1,
            true,
        )
        .unwrap();
        assert_eq!(text(call.args), ["10", "1000000", "10", "1", "1", "1"]);
        // Inline mode: all six, then the override's and block's values.
        let optional: Vec<Optional> = vec![b"5 1000000 5".to_vec(), vec![]];
        assert_eq!(
            text(one(2, true).inline_args(std::slice::from_ref(&a), &optional, 0..1, true)),
            ["10", "1000000", "10", "2", "i1", "0", "5 1000000 5", ""]
        );
        // With neither: the ARGV of three keys (its one key says inline).
        let neither: Vec<Optional> = vec![vec![], vec![]];
        assert_eq!(
            text(one(2, true).inline_args(std::slice::from_ref(&a), &neither, 0..1, false)),
            ["10", "1000000", "10", "2", "0", "0"]
        );
        assert_eq!(
            text(one(1, true).inline_args(std::slice::from_ref(&a), &neither, 0..1, true)),
            ["10", "1000000", "10"]
        );
        // The generic script of one limit keeps the generic layout.
        assert_eq!(
            text(invocation(std::slice::from_ref(&a), true).args)[..3],
            ["2", "1", "gcra"]
        );
    }

    #[test]
    fn limits_checked_alone_combine_into_one_reply() {
        let script = Script::new("t", "");
        let admit = Limit::from_reply(&script, &[1, 1, 4, -1, 10, 5, 0, -1, 0, 0]).unwrap();
        let deny = Limit::from_reply(&script, &[0, 0, 0, 300, 10, 5, 3, -2, 5, 9]).unwrap();
        assert!(admit.all && admit.allowed && !deny.all);
        assert_eq!(
            Limit::combine(&[admit.clone(), deny]),
            [
                0, 1, 4, -1, 10, 5, 0, -1, 0, 0, 0, 0, 300, 10, 5, 3, -2, 5, 9
            ]
        );
        assert_eq!(Limit::combine(&[admit])[0], 1);
        assert!(Limit::from_reply(&script, &[1, 1, 4]).is_err());
    }
}
