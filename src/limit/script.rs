//! The protocol between rate limiters and their scripts: what one limit
//! tells a script ([`LimitSpec`]), what a check may cost, what one check
//! sends ([`Invocation`], the only encoder of a check's arguments) and how
//! its reply becomes decisions.

use std::borrow::Cow;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use super::algorithm::{self, Algorithm};
use super::decision::{Decision, Settled};
use super::quota::Quota;
use crate::cluster::Cluster;
use crate::error::{Error, Result};
use crate::keys::{KeyBuilder, KeyId, KeySet, check_subject};
use crate::scripts::Script;

/// What the scripts need to know about one limit.
#[derive(Debug)]
pub(crate) struct LimitSpec {
    pub(crate) id: KeyId,
    /// The id of the subject's override of this limit (`<id>:quota`) and of
    /// its block (`<id>:block`): read by every check, in the same slot.
    pub(crate) override_id: KeyId,
    pub(crate) block_id: KeyId,
    pub(crate) algorithm: Algorithm,
    pub(crate) quota: Quota,
    pub(crate) capacity: u32,
    /// The quota's period in microseconds, as the scripts get it.
    pub(crate) period_us: u64,
    /// Shadow mode: decisions are computed and counted, nothing is refused.
    pub(crate) shadow: bool,
    /// Identifies the quota, name and mode (enforcing or shadow) a denial
    /// was computed under: a deny cache answers only checks of the same
    /// fingerprint, so a limiter put in shadow mode (which never denies) is
    /// never answered by a denial cached before, alone or in a multi-limit.
    /// Only the deny cache reads it.
    #[cfg_attr(not(feature = "deny-cache"), allow(dead_code))]
    pub(crate) fingerprint: u64,
    /// `code, limit, period_us, burst, shadow`, formatted once, as sent:
    /// a check with the defaults sends `limit, period_us, burst` from here
    /// as they are (see [`one_limit_args`]).
    args: [Vec<u8>; 5],
}

/// The key part of a subject's override of a limit.
pub(crate) const OVERRIDE_PART: &str = "quota";
/// The key part of a subject's block of a limit.
pub(crate) const BLOCK_PART: &str = "block";

impl LimitSpec {
    /// Validates `quota` for `algorithm` (see [`Quota#bounds`](Quota#bounds)).
    pub(crate) fn new(
        name: &str,
        algorithm: Algorithm,
        quota: Quota,
        shadow: bool,
    ) -> Result<Self> {
        let period = algorithm.validate(&quota)?;
        let id = KeyId::new(algorithm.kind(), name)?;
        let args = [
            algorithm.kind().to_owned(),
            quota.limit().to_string(),
            period.to_string(),
            quota.burst().to_string(),
            u8::from(shadow).to_string(),
        ]
        .map(String::into_bytes);
        let mut hasher = std::hash::DefaultHasher::new();
        (name, &args).hash(&mut hasher);
        Ok(LimitSpec {
            override_id: id.with_part(OVERRIDE_PART)?,
            block_id: id.with_part(BLOCK_PART)?,
            id,
            algorithm,
            quota,
            capacity: algorithm.capacity(&quota),
            period_us: period,
            shadow,
            fingerprint: hasher.finish(),
            args,
        })
    }

    /// The same limit with another quota or shadow setting.
    pub(crate) fn with(&self, quota: Quota, shadow: bool) -> Result<Self> {
        LimitSpec::new(self.id.name(), self.algorithm, quota, shadow)
    }

    /// Its three keys' ids: state, override, block.
    pub(crate) fn ids(&self) -> [&KeyId; 3] {
        [&self.id, &self.override_id, &self.block_id]
    }
}

/// The most one check of `specs` may cost: the smallest capacity, and —
/// since a check writes `cost` members into every sliding log it admits —
/// no more than the sliding logs' shared budget of
/// [`Algorithm::SLIDING_LOG_MAX_LIMIT`] members, which keeps the worst
/// multi-limit check as short as the worst single one.
pub(crate) fn max_cost(specs: &[Arc<LimitSpec>]) -> u32 {
    let capacity = specs.iter().map(|s| s.capacity).min().unwrap_or(0);
    let logs = specs
        .iter()
        .filter(|s| s.algorithm == Algorithm::SlidingLog)
        .count();
    match u32::try_from(logs) {
        Ok(logs) if logs > 1 => capacity.min(Algorithm::SLIDING_LOG_MAX_LIMIT / logs),
        _ => capacity,
    }
}

/// A cost every limit of `specs` can admit at once: 1 to [`max_cost`].
pub(crate) fn check_cost(specs: &[Arc<LimitSpec>], cost: u32) -> Result<()> {
    let max = max_cost(specs);
    if cost == 0 || cost > max {
        return Err(Error::InvalidCost {
            cost: u64::from(cost),
            max: u64::from(max),
        });
    }
    Ok(())
}

/// What one check sends: a script with its `KEYS` (one slot, proven; the
/// slot travels with them) and `ARGV`. See
/// [`RateLimiter::invocation`](crate::RateLimiter::invocation).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Invocation {
    /// The script.
    pub script: Script,
    /// `KEYS`.
    pub keys: KeySet,
    /// `ARGV`: `cost, consume, ` then `kind, limit, period_us, burst,
    /// shadow` per limit. `KEYS` holds three keys per limit: its state, the
    /// subject's override of it and the subject's block of it. A check of
    /// one limit sends its algorithm's own script, with `limit, period_us, burst` and then, if
    /// any is not its default, `cost, consume, shadow` (the script knows
    /// its algorithm; every argument costs Redis).
    ///
    /// The script replies with integers: `all_allowed`, then per limit
    /// `allowed, remaining, retry_after_us, reset_after_us, capacity, flags,
    /// settled_ms, override_limit, override_period_us` (the header of
    /// `src/scripts/limit_prelude.lua` says what each means; for a limit
    /// that admitted, `retry_after_us` holds when more than `remaining` is
    /// free, [`Decision::more_after`](crate::Decision::more_after)). A
    /// one-limit check of a subject with neither an override nor a block
    /// replies compactly, `2 * all_allowed + allowed, remaining,
    /// retry_after_us, reset_after_us`: every byte of a reply costs Redis.
    pub args: Vec<Vec<u8>>,
    /// Units this check takes, and whether it consumes (not a peek).
    cost: u32,
    consume: bool,
}

impl Invocation {
    /// The check of `specs` on `subject` for `cost` (`consume` false: a
    /// peek), with the keys of `keys`' namespace. Refuses a cost the limits can never admit and a bad subject
    /// before anything is sent.
    pub(crate) fn new(
        keys: &KeyBuilder,
        script: &Script,
        specs: &[Arc<LimitSpec>],
        subject: &[u8],
        cost: u32,
        consume: bool,
    ) -> Result<Self> {
        check_cost(specs, cost)?;
        // Refuses a bad subject, as `refusal` does.
        let keys = keys.key_set(subject, specs.iter().flat_map(|s| s.ids()))?;
        let args = match specs {
            [one] if algorithm::is_one_limit(script) => {
                one_limit_args(one, cost, consume).into_owned()
            }
            _ => {
                let mut args = Vec::with_capacity(2 + 5 * specs.len());
                args.push(cost.to_string().into_bytes());
                args.push(if consume { b"1" } else { b"0" }.to_vec());
                args.extend(specs.iter().flat_map(|s| s.args.iter().cloned()));
                args
            }
        };
        Ok(Invocation {
            script: script.clone(),
            keys,
            args,
            cost,
            consume,
        })
    }

    /// What [`new`](Self::new) refuses a check for, without building it:
    /// a cost the limits can never admit, a bad subject. (Its keys share
    /// the subject's hash tag, so they never span slots.)
    pub(crate) fn refusal(specs: &[Arc<LimitSpec>], subject: &[u8], cost: u32) -> Result<()> {
        check_cost(specs, cost)?;
        check_subject(subject)
    }

    /// Units this check takes.
    pub(crate) fn cost(&self) -> u32 {
        self.cost
    }

    /// Whether this check consumes (not a peek).
    pub(crate) fn consumes(&self) -> bool {
        self.consume
    }

    /// This check's `ARGV` in inline mode (see `limit_prelude.lua` and
    /// `one_limit.lua`) for `limits` (a range of `specs`, the check's
    /// limits), consuming or not: the generic check's, each limit's five
    /// fields then its override's and block's values from `optional`; a
    /// one-limit check's, all six fields then the two values, or when
    /// neither exists its `ARGV` of three keys (defaults left out: every
    /// argument costs Redis; its one key says it is inline).
    pub(crate) fn inline_args(
        &self,
        specs: &[Arc<LimitSpec>],
        optional: &[Vec<u8>],
        limits: std::ops::Range<usize>,
        consume: bool,
    ) -> Vec<Vec<u8>> {
        inline_args(&self.script, specs, self.cost, optional, limits, consume).into_owned()
    }

    /// Sends the check (at most once); a check refused because its slot is
    /// migrating is done one key at a time. The script's reply, for
    /// [`parse_reply`].
    pub(crate) async fn send(
        &self,
        cluster: &Cluster,
        specs: &[Arc<LimitSpec>],
    ) -> Result<Vec<i64>> {
        match cluster
            .eval_unless_migrating(&self.script, &self.keys, &self.args)
            .await
        {
            Err(err) if err.is_tryagain() => self.run_migrating(cluster, specs).await,
            other => other,
        }
    }
}

/// A one-limit check's `ARGV` (see `one_limit.lua`): `limit, period_us,
/// burst`, then `cost, mode, shadow` unless all three are their defaults
/// (1, consume, not shadow), which are not sent: every argument costs Redis.
/// With the defaults (almost every check), the spec's own three fields,
/// borrowed: nothing is built per check.
fn one_limit_args(one: &LimitSpec, cost: u32, consume: bool) -> Cow<'_, [Vec<u8>]> {
    let fields = &one.args[1..4];
    if cost == 1 && consume && !one.shadow {
        return Cow::Borrowed(fields);
    }
    let mode: &[u8] = if consume { b"1" } else { b"0" };
    let mut args = Vec::with_capacity(6);
    args.extend_from_slice(fields);
    args.extend([
        cost.to_string().into_bytes(),
        mode.to_vec(),
        one.args[4].clone(),
    ]);
    Cow::Owned(args)
}

/// The `ARGV` in inline mode of a check of `specs` by `script` for
/// `cost` (see [`Invocation::inline_args`]).
pub(crate) fn inline_args<'s>(
    script: &Script,
    specs: &'s [Arc<LimitSpec>],
    cost: u32,
    optional: &[Vec<u8>],
    limits: std::ops::Range<usize>,
    consume: bool,
) -> Cow<'s, [Vec<u8>]> {
    let values = |i: usize| [optional[2 * i].clone(), optional[2 * i + 1].clone()];
    if let [one] = specs
        && algorithm::is_one_limit(script)
    {
        if optional[..2].iter().all(Vec::is_empty) {
            return one_limit_args(one, cost, consume);
        }
        let mode = if consume { b"i1" } else { b"i0" }.to_vec();
        let mut args: Vec<Vec<u8>> = Vec::with_capacity(8);
        args.extend_from_slice(&one.args[1..4]);
        args.extend([cost.to_string().into_bytes(), mode, one.args[4].clone()]);
        args.extend(values(0));
        return Cow::Owned(args);
    }
    let mut args = Vec::with_capacity(2 + 7 * limits.len());
    args.push(cost.to_string().into_bytes());
    args.push(if consume { b"i1" } else { b"i0" }.to_vec());
    for i in limits {
        args.extend(specs[i].args.iter().cloned());
        args.extend(values(i));
    }
    Cow::Owned(args)
}

/// Values per limit in a check's reply.
pub(crate) const REPLY_FIELDS: usize = 9;
/// Reply flag: the subject is blocked.
const FLAG_BLOCKED: i64 = 1;
/// Reply flag: the subject's override applied.
const FLAG_OVERRIDDEN: i64 = 2;

/// `[all, then allowed, remaining, retry_after_us, reset_after_us,
/// capacity, flags, settled_ms, override_limit, override_period_us per
/// limit]` into decisions. A limit in shadow mode that
/// denied is reported admitted, with [`Decision::would_deny`] set.
pub(crate) fn parse_reply(
    script: &Script,
    specs: &[Arc<LimitSpec>],
    reply: &[i64],
) -> Result<(bool, Vec<Decision>)> {
    let bad = || Error::UnexpectedReply {
        op: script.name().to_owned().into(),
        detail: format!("{} integers for {} limits", reply.len(), specs.len()),
    };
    let expanded;
    let reply = match (specs, reply) {
        ([spec], &[verdict, remaining, retry, reset]) => {
            expanded = expand_compact(spec, verdict, [remaining, retry, reset]);
            &expanded[..]
        }
        _ => reply,
    };
    let (&all, rest) = reply.split_first().ok_or_else(bad)?;
    if rest.len() != specs.len() * REPLY_FIELDS {
        return Err(bad());
    }
    let micros = |v: i64| u64::try_from(v).ok().map(Duration::from_micros);
    let count = |v: i64| u32::try_from(v.max(0)).unwrap_or(u32::MAX);
    let decisions = specs
        .iter()
        .zip(rest.chunks_exact(REPLY_FIELDS))
        .map(|(spec, f)| {
            let admitted = f[0] == 1;
            let (retry, reset) = (micros(f[2]), micros(f[3]).unwrap_or_default());
            let overridden = f[5] & FLAG_OVERRIDDEN != 0;
            let quota = if overridden {
                applied_quota(f[7], f[8], count(f[4])).ok_or_else(bad)?
            } else {
                spec.quota
            };
            Ok(Decision {
                quota,
                allowed: admitted || spec.shadow,
                limit: count(f[4]),
                remaining: count(f[1]),
                // The script's retry slot holds, for a limit that
                // admitted, when more than `remaining` is free.
                retry_after: if admitted { None } else { retry },
                reset_after: reset,
                more_after: if admitted {
                    retry.unwrap_or_default()
                } else {
                    retry.unwrap_or(reset)
                },
                bypassed: None,
                local: false,
                cached: false,
                would_deny: !admitted && spec.shadow,
                blocked: f[5] & FLAG_BLOCKED != 0,
                overridden,
                sliced: false,
                settled: Settled::from_reply(f[6]),
            })
        })
        .collect::<Result<_>>()?;
    Ok((all == 1, decisions))
}

/// A one-limit check's compact reply (`one_limit.lua`: no override and no
/// block exist) `{verdict, remaining, retry_after_us, reset_after_us}`,
/// with `verdict = 2 * all_allowed + allowed`, as the full one: the
/// capacity is the spec's own, no flags, no settled bound.
fn expand_compact(
    spec: &LimitSpec,
    verdict: i64,
    [remaining, retry, reset]: [i64; 3],
) -> [i64; 1 + REPLY_FIELDS] {
    [
        verdict >> 1 & 1,
        verdict & 1,
        remaining,
        retry,
        reset,
        i64::from(spec.capacity),
        0,
        -1,
        0,
        0,
    ]
}

/// An override's quota from a check's reply: its limit, its period and,
/// as its burst, the capacity (which is the limit for all but GCRA).
fn applied_quota(limit: i64, period_us: i64, capacity: u32) -> Option<Quota> {
    let limit = u32::try_from(limit).ok()?;
    let period = Duration::from_micros(u64::try_from(period_us).ok()?);
    let quota = Quota::with_period(limit, period);
    let quota = if capacity == limit {
        quota
    } else {
        quota.allow_burst(capacity)
    };
    quota.check_counts().ok().map(|()| quota)
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;
    use std::slice::from_ref as one;

    use super::*;

    fn spec(capacity: u32) -> Arc<LimitSpec> {
        let quota = Quota::per_second(NonZeroU32::new(capacity).unwrap());
        Arc::new(LimitSpec::new("api", Algorithm::Gcra, quota, false).unwrap())
    }

    #[test]
    fn spec_args_are_what_the_script_reads() {
        let s = spec(10);
        assert_eq!(
            s.args,
            ["gcra", "10", "1000000", "10", "0"].map(|a| a.as_bytes().to_vec())
        );
        assert_eq!(s.id.kind(), "gcra");
        assert_eq!(s.override_id.part(), Some("quota"));
        assert_eq!(s.block_id.part(), Some("block"));
        // Another quota is another fingerprint, and so is shadow mode.
        assert_ne!(s.fingerprint, spec(11).fingerprint);
        let shadow = s.with(s.quota, true).unwrap();
        assert_ne!(shadow.fingerprint, s.fingerprint);
        assert_eq!(s.with(s.quota, false).unwrap().fingerprint, s.fingerprint);
        assert_eq!(shadow.args[4], b"1");
    }

    #[test]
    fn a_check_with_the_defaults_sends_its_specs_fields_unbuilt() {
        let s = spec(10);
        let text = |args: &[Vec<u8>]| -> Vec<String> {
            args.iter()
                .map(|a| String::from_utf8_lossy(a).into())
                .collect()
        };
        let defaults = one_limit_args(&s, 1, true);
        assert!(matches!(defaults, Cow::Borrowed(_)));
        assert_eq!(text(&defaults), ["10", "1000000", "10"]);
        // Any other cost, a peek or shadow mode sends all six.
        assert_eq!(
            text(&one_limit_args(&s, 2, true)),
            ["10", "1000000", "10", "2", "1", "0"]
        );
        assert_eq!(
            text(&one_limit_args(&s, 1, false)),
            ["10", "1000000", "10", "1", "0", "0"]
        );
        let shadow = s.with(s.quota, true).unwrap();
        assert_eq!(
            text(&one_limit_args(&shadow, 1, true)),
            ["10", "1000000", "10", "1", "1", "1"]
        );
    }

    #[test]
    fn costs_are_bounded_by_every_capacity_and_the_shared_log_budget() {
        let log = |limit| {
            let quota = Quota::per_second(NonZeroU32::new(limit).unwrap());
            Arc::new(LimitSpec::new("log", Algorithm::SlidingLog, quota, false).unwrap())
        };
        let (big, small) = (spec(1000), spec(10));
        let max = |specs: &[Arc<LimitSpec>]| match check_cost(specs, u32::MAX) {
            Err(Error::InvalidCost { max, .. }) => max,
            other => panic!("{other:?}"),
        };
        assert_eq!(max(&[big.clone(), small.clone()]), 10);
        let (a, b, c) = (log(128), log(128), log(30));
        assert_eq!(max(one(&a)), 128);
        assert_eq!(max(&[a.clone(), big.clone()]), 128);
        // Two logs share 128 members per check; three, and one is smaller.
        assert_eq!(max(&[a.clone(), b.clone()]), 64);
        assert_eq!(max(&[a.clone(), b.clone(), c.clone()]), 30);
        assert!(check_cost(&[a.clone(), b.clone()], 64).is_ok());
        assert!(check_cost(&[a.clone(), b.clone()], 0).is_err());
    }

    #[test]
    fn replies_become_decisions() {
        let s = spec(10);
        let script = Script::new("gcra", "");
        let (all, d) = parse_reply(
            &script,
            one(&s),
            &[0, 0, 3, 250_000, 1_000_000, 10, 0, -1, 0, 0],
        )
        .unwrap();
        assert!(!all);
        assert!(!d[0].allowed && !d[0].would_deny && !d[0].blocked);
        assert_eq!(d[0].remaining, 3);
        assert_eq!(d[0].retry_after, Some(Duration::from_millis(250)));
        assert_eq!(d[0].reset_after, Duration::from_secs(1));
        assert_eq!(d[0].quota, s.quota);
        let reply = [1, 1, 9, -1, 100, 20, 2, 5000, 5, 60_000_000];
        let (all, d) = parse_reply(&script, one(&s), &reply).unwrap();
        assert!(all && d[0].allowed && d[0].retry_after.is_none());
        // The capacity and the quota are the reply's: an override's.
        assert_eq!(d[0].limit, 20);
        assert_eq!(d[0].quota, Quota::per_minute(5).allow_burst(20));
        assert!(d[0].overridden && !d[0].blocked);
        assert_eq!(d[0].settled, Settled::For(Duration::from_secs(5)));
        let (_, d) =
            parse_reply(&script, one(&s), &[0, 0, 0, 5, 0, 10, 3, -2, 10, 1_000_000]).unwrap();
        assert!(d[0].blocked && d[0].overridden);
        assert_eq!(d[0].settled, Settled::Unknown);
        assert_eq!(d[0].quota, Quota::per_second(10));
        assert!(parse_reply(&script, one(&s), &[1, 1, 9, -1, 100, 20, 0]).is_err());
        // The compact reply of a check with no override and no block is
        // its full reply with the spec's capacity.
        for (compact, full) in [
            ([3, 9, -1, 100], [1, 1, 9, -1, 100, 10, 0, -1, 0, 0]),
            ([0, 0, 5, 7], [0, 0, 0, 5, 7, 10, 0, -1, 0, 0]),
            ([2, 0, 5, 7], [1, 0, 0, 5, 7, 10, 0, -1, 0, 0]),
        ] {
            assert_eq!(
                parse_reply(&script, one(&s), &compact).unwrap(),
                parse_reply(&script, one(&s), &full).unwrap(),
                "{compact:?}"
            );
        }
        // Compact is for one limit only.
        assert!(parse_reply(&script, &[s.clone(), s.clone()], &[3, 9, -1, 100]).is_err());
        // An override flagged without a quota is a malformed reply.
        assert!(parse_reply(&script, one(&s), &[1, 1, 9, -1, 100, 20, 2, -1, 0, 0]).is_err());
    }

    #[test]
    fn a_shadow_limit_refuses_nothing_but_says_it_would() {
        let s = spec(10)
            .with(Quota::per_second(NonZeroU32::new(10).unwrap()), true)
            .unwrap();
        let script = Script::new("gcra", "");
        let (all, d) =
            parse_reply(&script, &[Arc::new(s)], &[1, 0, 0, 50, 60, 10, 0, -1, 0, 0]).unwrap();
        assert!(all && d[0].allowed && d[0].would_deny);
        assert_eq!(d[0].retry_after, Some(Duration::from_micros(50)));
    }
}
