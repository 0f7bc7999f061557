//! The reply of `slice.lua` to a take, parsed.

use std::num::NonZeroU32;
use std::time::Duration;

use super::quota::Quota;
use super::script::LimitSpec;
use crate::error::{Error, Result};
use crate::scripts;

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
}

impl TakeReply {
    pub(crate) fn parse(reply: &[i64], id: &str, spec: &LimitSpec) -> Result<Self> {
        let bad = || Error::UnexpectedReply {
            op: scripts::SLICE.name().to_owned().into(),
            detail: format!("malformed reply {reply:?}"),
        };
        let &[granted, retry, limit, period, burst, flag] = reply else {
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
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::Algorithm;

    #[test]
    fn replies_read_back() {
        let spec = LimitSpec::new("api", Algorithm::Gcra, Quota::per_second(100), false).unwrap();
        let r = TakeReply::parse(&[7, -1, 100, 1_000_000, 100, 0], "ab", &spec).unwrap();
        assert_eq!(
            (r.granted, r.member.as_deref(), r.retry),
            (7, Some("ab:7"), None)
        );
        assert_eq!(
            (r.quota, r.capacity, r.overridden, r.blocked),
            (spec.quota, 100, false, false)
        );
        let r = TakeReply::parse(&[0, 2500, 10, 60_000_000, 20, 1], "ab", &spec).unwrap();
        assert_eq!(
            (r.member, r.retry),
            (None, Some(Duration::from_micros(2500)))
        );
        assert_eq!(r.quota, Quota::per_minute(10).allow_burst(20));
        assert!(r.overridden && r.capacity == 20);
        let r = TakeReply::parse(&[0, -1, 100, 1_000_000, 100, 2], "ab", &spec).unwrap();
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
