//! `Count`: the integers a quota or a builder takes, checked when it is built.

use std::num::{NonZeroU32, NonZeroU64, NonZeroUsize};

use crate::error::{Error, Result};

/// A number of units, leases or replicas: a plain integer (`10`, `n_u64`)
/// or a [`NonZeroU32`].
///
/// Quotas and builders take any `Count`, so `Quota::per_second(10)` and
/// `Quota::per_second(NonZeroU32::new(10).unwrap())` are the same quota. The
/// value is checked where the builder checks everything else — in
/// [`RateLimiterBuilder::build`](crate::limit::RateLimiterBuilder::build),
/// [`LeaseLimiterBuilder::build`](crate::lease::LeaseLimiterBuilder::build),
/// [`LockBuilder::build`](crate::lock::LockBuilder::build) and the calls that
/// take a quota — before anything is sent: 0, a negative number or one
/// above `u32::MAX` is [`Error::Config`] naming the setting
/// (`quota.limit`, `quota.burst`, `max_leases`, `replica_ack_count`).
///
/// ```
/// # fn demo(cluster: shardlimit::Cluster) {
/// use shardlimit::{Error, Quota, RateLimiter};
///
/// let quota = Quota::per_second(10).allow_burst(20);
/// assert_eq!((quota.limit().get(), quota.burst().get()), (10, 20));
///
/// let err = RateLimiter::builder(&cluster, "api", Quota::per_second(0)).build().unwrap_err();
/// assert!(matches!(err, Error::Config { field: "quota.limit", .. }));
/// # }
/// ```
///
/// Sealed: implemented for the integer types and the non-zero ones.
pub trait Count: Copy + sealed::Sealed {
    /// The value, widened so that every implementing type fits.
    #[doc(hidden)]
    fn wide(self) -> i128;
}

mod sealed {
    // Public in a private module so that no other crate can implement
    // `Count`: the crate relies on `wide` being the plain value.
    #[allow(unreachable_pub)]
    pub trait Sealed {}
}

macro_rules! count {
    ($($ty:ty => |$v:ident| $wide:expr),* $(,)?) => {$(
        impl sealed::Sealed for $ty {}
        impl Count for $ty {
            fn wide(self) -> i128 {
                let $v = self;
                $wide
            }
        }
    )*};
}

count! {
    u8 => |v| i128::from(v),
    u16 => |v| i128::from(v),
    u32 => |v| i128::from(v),
    u64 => |v| i128::from(v),
    i32 => |v| i128::from(v),
    i64 => |v| i128::from(v),
    // usize is at most 64 bits on every target Rust supports.
    usize => |v| i128::try_from(v).unwrap_or(i128::MAX),
    NonZeroU32 => |v| i128::from(v.get()),
    NonZeroU64 => |v| i128::from(v.get()),
    NonZeroUsize => |v| i128::try_from(v.get()).unwrap_or(i128::MAX),
}

/// A [`Count`] as the builders keep it until they are built: the non-zero
/// value, or what was wrong with the one given.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Checked {
    Valid(NonZeroU32),
    Invalid(Fault),
}

/// What is wrong with a count. Kept small (not the value itself): a
/// `Quota` holds one, and quotas travel inside the scanner's records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Fault {
    Zero,
    Negative,
    TooLarge,
}

impl Checked {
    pub(crate) fn new(count: impl Count) -> Self {
        let wide = count.wide();
        match u32::try_from(wide).ok().and_then(NonZeroU32::new) {
            Some(n) => Checked::Valid(n),
            None if wide == 0 => Checked::Invalid(Fault::Zero),
            None if wide < 0 => Checked::Invalid(Fault::Negative),
            None => Checked::Invalid(Fault::TooLarge),
        }
    }

    /// The value, or 1 for an invalid one (which `get` refuses).
    pub(crate) fn or_min(self) -> NonZeroU32 {
        match self {
            Checked::Valid(n) => n,
            Checked::Invalid(_) => NonZeroU32::MIN,
        }
    }

    /// The value, or [`Error::Config`] naming `field`.
    pub(crate) fn get(self, field: &'static str) -> Result<NonZeroU32> {
        let given = match self {
            Checked::Valid(n) => return Ok(n),
            Checked::Invalid(Fault::Zero) => "0",
            Checked::Invalid(Fault::Negative) => "a negative number",
            Checked::Invalid(Fault::TooLarge) => "a number over u32::MAX",
        };
        Err(Error::Config {
            field,
            reason: format!("{given} given: must be from 1 to {}", u32::MAX),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_and_non_zero_agree() {
        let ten = NonZeroU32::new(10).unwrap();
        for checked in [
            Checked::new(10),
            Checked::new(10_u64),
            Checked::new(10_usize),
            Checked::new(ten),
        ] {
            assert_eq!(checked.get("x").unwrap(), ten);
        }
        assert_eq!(Checked::new(u32::MAX).get("x").unwrap(), NonZeroU32::MAX);
    }

    #[test]
    fn zero_negative_and_too_big_name_the_field() {
        for bad in [
            Checked::new(0),
            Checked::new(-3),
            Checked::new(u64::from(u32::MAX) + 1),
        ] {
            assert_eq!(bad.or_min(), NonZeroU32::MIN);
            match bad.get("quota.limit") {
                Err(Error::Config { field, reason }) => {
                    assert_eq!(field, "quota.limit");
                    assert!(reason.contains("must be from 1"), "{reason}");
                }
                other => panic!("{other:?}"),
            }
        }
    }
}
