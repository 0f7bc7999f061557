//! What a process holds of a subject's slices, the reply of `slice.lua`
//! to a take, parsed, and the decisions a process makes from slices.

use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use super::hot::Heat;
use crate::error::{Error, Result};
use crate::limit::algorithm;
use crate::limit::decision::Decision;
use crate::limit::quota::Quota;
use crate::limit::script::LimitSpec;

/// A slice held: `left` of its `granted` units may still be admitted here
/// until `until` (counted from when its take was sent, so it ends no later
/// than Redis' own count of it starts its grace), taken (its reply
/// received) at `taken`.
pub(crate) struct Slice {
    pub(crate) member: String,
    pub(crate) granted: u32,
    pub(crate) left: u32,
    pub(crate) taken: Instant,
    pub(crate) until: Instant,
    pub(crate) quota: Quota,
    pub(crate) capacity: u32,
    pub(crate) overridden: bool,
}

/// Denied without Redis until `until`: a take found fewer free units than
/// the request's cost, and would admit it no sooner, or found the limit
/// spent (a pause, for any cost once the slice is used).
pub(crate) struct Denial {
    pub(crate) until: Instant,
    pub(crate) cost: u32,
    pub(crate) quota: Quota,
    pub(crate) capacity: u32,
}

#[derive(Default)]
pub(crate) struct Held {
    pub(crate) slice: Option<Slice>,
    pub(crate) denial: Option<Denial>,
    /// No take before then: the bound or a block refused the last one.
    pub(crate) exact_until: Option<Instant>,
    /// Moved by every revocation: a take in flight across one is not used.
    pub(crate) generation: u64,
    /// Units per second this process used of its previous slice.
    pub(crate) rate: f64,
    /// Takes completed.
    pub(crate) takes: u64,
    /// When the last take that found the limit spent was sent, and the
    /// units taken since (by takes sent after it): this process's share
    /// of what came back.
    pub(crate) since_spent: Option<(Instant, u32)>,
    /// The last take found the limit spent (no free unit left after it),
    /// under this quota and capacity.
    pub(crate) spent: Option<(Quota, u32)>,
    /// Its checks in this window, with automatic slicing: whether it is
    /// still hot.
    pub(crate) heat: Heat,
}

impl Held {
    /// Takes the slice out of use (to give back), keeping the rate it was
    /// used at, which sizes the next one: whether the next take or the
    /// sweep ends it (a slowly checked subject's slice often ends before
    /// its next check, and the sweep gives it back).
    pub(crate) fn retire(&mut self, now: Instant) -> Option<Slice> {
        let slice = self.slice.take()?;
        let used = f64::from(slice.granted - slice.left);
        let age = now.duration_since(slice.taken).as_secs_f64().max(1e-4);
        self.rate = used / age;
        Some(slice)
    }
}

/// `slice.lua`'s reply to a take.
pub(crate) struct TakeReply {
    pub(crate) granted: u32,
    /// The new slice's member, if any was granted.
    pub(crate) member: Option<String>,
    pub(crate) retry: Option<Duration>,
    pub(crate) quota: Quota,
    pub(crate) capacity: u32,
    pub(crate) overridden: bool,
    pub(crate) blocked: bool,
    /// The limit had fewer free units than wanted: none is left after
    /// this take.
    pub(crate) spent: bool,
}

impl TakeReply {
    pub(crate) fn parse(reply: &[i64], id: &str, spec: &LimitSpec) -> Result<Self> {
        let bad = || Error::UnexpectedReply {
            op: algorithm::SLICE.name().to_owned().into(),
            detail: format!("malformed reply {reply:?}"),
        };
        let &[granted, retry, limit, period, burst, flag, spent] = reply else {
            return Err(bad());
        };
        let granted = u32::try_from(granted).map_err(|_| bad())?;
        let overridden = flag == 1;
        let quota = if overridden {
            let limit = u32::try_from(limit).ok().and_then(NonZeroU32::new);
            let burst = u32::try_from(burst).ok().and_then(NonZeroU32::new);
            let period = u64::try_from(period).map(Duration::from_micros);
            match (limit, burst, period) {
                (Some(l), Some(b), Ok(p)) if l == b => Quota::with_period(l, p),
                (Some(l), Some(b), Ok(p)) => Quota::with_period(l, p).allow_burst(b),
                _ => return Err(bad()),
            }
        } else {
            spec.quota
        };
        Ok(TakeReply {
            granted,
            member: (granted > 0).then(|| format!("{id}:{granted}")),
            retry: u64::try_from(retry).ok().map(Duration::from_micros),
            capacity: quota.burst().get(),
            quota,
            overridden,
            blocked: flag == 2,
            spent: spent == 1,
        })
    }
}

/// Admitted from a slice with `left` units left.
pub(crate) fn admitted(quota: Quota, capacity: u32, left: u32, overridden: bool) -> Decision {
    let mut d = Decision::sliced(quota, capacity);
    d.remaining = left;
    d.overridden = overridden;
    d
}

/// Denied from a slice's take: admissible in `wait` at the earliest.
pub(crate) fn denied(quota: Quota, capacity: u32, wait: Duration) -> Decision {
    let mut d = Decision::sliced(quota, capacity);
    d.allowed = false;
    d.retry_after = Some(wait);
    d.reset_after = wait;
    d.more_after = wait;
    d
}

/// A request that waited for a take that found the limit spent: denied,
/// admissible again in about the time `cost` units take to refill.
pub(crate) fn spent(quota: Quota, capacity: u32, cost: u32) -> Decision {
    denied(quota, capacity, quota.period() / quota.limit().get() * cost)
}

/// A subject's slice ends now (given back by the next take or the sweep),
/// and what it was denied or refused is asked again.
pub(crate) fn revoke(held: &mut Held) {
    let now = Instant::now();
    if let Some(slice) = &mut held.slice {
        slice.until = slice.until.min(now);
    }
    held.denial = None;
    held.exact_until = None;
    held.spent = None;
    // What came back before a reset, block or quota change says nothing of
    // what comes back after.
    held.since_spent = None;
    held.generation += 1;
}

/// The decision the held state gives without Redis, if any: admitted from
/// the slice, or denied while a denial holds (and the slot's invalidations
/// are followed: a missed give-back could lift it).
pub(crate) fn local(held: &mut Held, cost: u32, live: impl Fn() -> bool) -> Option<Decision> {
    let now = Instant::now();
    if let Some(slice) = &mut held.slice
        && now < slice.until
        && slice.left >= cost
    {
        slice.left -= cost;
        return Some(admitted(
            slice.quota,
            slice.capacity,
            slice.left,
            slice.overridden,
        ));
    }
    match &held.denial {
        Some(d) if now < d.until && cost >= d.cost && live() => Some(denied(
            d.quota,
            d.capacity,
            d.until.saturating_duration_since(now),
        )),
        Some(d) if now >= d.until => {
            held.denial = None;
            None
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::Algorithm;

    #[test]
    fn replies_read_back() {
        let spec = LimitSpec::new("api", Algorithm::Gcra, Quota::per_second(100), false).unwrap();
        let r = TakeReply::parse(&[7, -1, 100, 1_000_000, 100, 0, 0], "ab", &spec).unwrap();
        assert_eq!(
            (r.granted, r.member.as_deref(), r.retry),
            (7, Some("ab:7"), None)
        );
        assert_eq!(
            (r.quota, r.capacity, r.overridden, r.blocked),
            (spec.quota, 100, false, false)
        );
        let r = TakeReply::parse(&[0, 2500, 10, 60_000_000, 20, 1, 1], "ab", &spec).unwrap();
        assert_eq!(
            (r.member, r.retry),
            (None, Some(Duration::from_micros(2500)))
        );
        assert_eq!(r.quota, Quota::per_minute(10).allow_burst(20));
        assert!(r.overridden && r.capacity == 20 && r.spent);
        let r = TakeReply::parse(&[0, -1, 100, 1_000_000, 100, 2, 0], "ab", &spec).unwrap();
        assert!(r.blocked && !r.overridden);
        for bad in [
            &[1, 2, 3][..],
            &[-1, -1, 100, 1_000_000, 100, 0],
            &[0, -1, 0, 1, 1, 1],
        ] {
            assert!(TakeReply::parse(bad, "ab", &spec).is_err(), "{bad:?}");
        }
    }
}
