//! Changes to one subject of a [`RateLimiter`] other than checks: reset,
//! block, penalty and reward, and per-subject overrides of the quota. Each
//! is one script in the subject's slot, which also tells every process's
//! deny cache (see [`RateLimiterBuilder::deny_cache`](super::RateLimiterBuilder::deny_cache)).

use std::num::NonZeroU32;
use std::time::Duration;

use super::algorithm;
use super::invalidation::{Invalidations, publish_to};
use super::limiter::RateLimiter;
use super::quota::Quota;
use super::script::LimitSpec;
use crate::error::{Error, Result};

/// The longest an override lives before it must be set again:
/// [`Quota::MAX_PERIOD`] (366 days). Like every key shardlimit writes, an
/// override expires; setting it again renews it.
pub const MAX_OVERRIDE_TTL: Duration = Quota::MAX_PERIOD;

/// The longest block: [`Quota::MAX_PERIOD`] (366 days).
pub const MAX_BLOCK: Duration = Quota::MAX_PERIOD;

/// A subject's own settings of one limiter, as Redis holds them now
/// (`Default`: none).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SubjectSettings {
    /// The quota that replaces the limiter's default for this subject.
    pub override_quota: Option<Quota>,
    /// How long the override lives unless set again.
    pub override_ttl: Option<Duration>,
    /// How long the subject stays blocked.
    pub blocked_for: Option<Duration>,
}

/// What [`RateLimiter::adjust`] does.
#[derive(Clone, Copy)]
enum Op {
    Reset,
    Block(Duration),
    Unblock,
    Penalize(NonZeroU32),
    Reward(NonZeroU32),
    Override(Quota, Duration),
    ClearOverride,
    Read,
}

impl RateLimiter {
    /// Forgets `subject`'s usage of this limiter (its state key; a block and
    /// an override stay). Never bypassed. Every process's deny cache forgets
    /// the subject's denials of this limiter.
    pub async fn reset(&self, subject: impl AsRef<[u8]>) -> Result<()> {
        self.adjust(subject.as_ref(), Op::Reset).await.map(drop)
    }

    /// Denies every request of `subject` for `duration` (1 ms to
    /// [`MAX_BLOCK`]), whatever its usage, in every process: the block is a
    /// key in the subject's slot, read by the same script as the check, and
    /// expires when it ends. Denials then say
    /// [`blocked`](crate::Decision::blocked) and wait until the block ends.
    /// Blocking again replaces the end time.
    ///
    /// ```no_run
    /// # async fn demo(api: shardlimit::RateLimiter) -> shardlimit::Result<()> {
    /// use std::time::Duration;
    /// api.block("ip:203.0.113.7", Duration::from_secs(3600)).await?;
    /// assert!(api.check("ip:203.0.113.7").await?.blocked);
    /// # Ok(()) }
    /// ```
    pub async fn block(&self, subject: impl AsRef<[u8]>, duration: Duration) -> Result<()> {
        if duration < Duration::from_millis(1) || duration > MAX_BLOCK {
            return Err(Error::Config {
                field: "duration",
                reason: format!("a block lasts 1 ms to {MAX_BLOCK:?}, not {duration:?}"),
            });
        }
        self.adjust(subject.as_ref(), Op::Block(duration))
            .await
            .map(drop)
    }

    /// Lifts `subject`'s block, if any.
    pub async fn unblock(&self, subject: impl AsRef<[u8]>) -> Result<()> {
        self.adjust(subject.as_ref(), Op::Unblock).await.map(drop)
    }

    /// Consumes `units` of `subject`'s quota without checking, as if a
    /// request of that cost had been admitted (e.g. for a failed login),
    /// never past an empty quota. Works for every algorithm, under the
    /// subject's override if it has one: a fixed window or sliding window
    /// counter adds to the current window, a sliding log adds entries now,
    /// a GCRA moves its theoretical arrival time forward.
    pub async fn penalize(&self, subject: impl AsRef<[u8]>, units: NonZeroU32) -> Result<()> {
        self.adjust(subject.as_ref(), Op::Penalize(units))
            .await
            .map(drop)
    }

    /// Gives `units` back to `subject` (e.g. for a request that turned out
    /// free), never past a full quota: a fixed window subtracts from the
    /// current window, a sliding window counter from the current window and
    /// then the previous one, a sliding log drops its newest entries, a GCRA
    /// moves its theoretical arrival time back. Every process's deny cache
    /// forgets the subject.
    pub async fn reward(&self, subject: impl AsRef<[u8]>, units: NonZeroU32) -> Result<()> {
        self.adjust(subject.as_ref(), Op::Reward(units))
            .await
            .map(drop)
    }

    /// Gives `subject` its own `quota` for this limiter, for `ttl` (1 ms to
    /// [`MAX_OVERRIDE_TTL`]; set it again to renew or change it). The
    /// override is a key in the subject's slot, read by the check's own
    /// script — no extra round trip — in every process. The quota is
    /// validated for the limiter's algorithm like a default one. A request
    /// may still cost at most the default capacity (checked before
    /// sending); under a smaller override a costlier request is denied for
    /// good (`retry_after` `None`). Every process's deny cache forgets the
    /// subject.
    ///
    /// ```no_run
    /// # async fn demo(api: shardlimit::RateLimiter) -> shardlimit::Result<()> {
    /// use std::{num::NonZeroU32, time::Duration};
    /// use shardlimit::Quota;
    /// let premium = Quota::per_minute(NonZeroU32::new(600).unwrap());
    /// let settings = api
    ///     .set_override("customer:acme", premium, Duration::from_secs(30 * 86_400))
    ///     .await?;
    /// assert_eq!(settings.override_quota, Some(premium));
    /// # Ok(()) }
    /// ```
    pub async fn set_override(
        &self,
        subject: impl AsRef<[u8]>,
        quota: Quota,
        ttl: Duration,
    ) -> Result<SubjectSettings> {
        self.algorithm().validate(&quota)?;
        if ttl < Duration::from_millis(1) || ttl > MAX_OVERRIDE_TTL {
            return Err(Error::Config {
                field: "ttl",
                reason: format!(
                    "an override lives 1 ms to {MAX_OVERRIDE_TTL:?} (set it again to renew), \
                     not {ttl:?}"
                ),
            });
        }
        self.adjust(subject.as_ref(), Op::Override(quota, ttl))
            .await
    }

    /// Removes `subject`'s override: the default quota applies again.
    pub async fn clear_override(&self, subject: impl AsRef<[u8]>) -> Result<SubjectSettings> {
        self.adjust(subject.as_ref(), Op::ClearOverride).await
    }

    /// `subject`'s override and block of this limiter, as Redis holds them.
    pub async fn subject_settings(&self, subject: impl AsRef<[u8]>) -> Result<SubjectSettings> {
        self.adjust(subject.as_ref(), Op::Read).await
    }

    /// One run of the adjust script; then this process's caches forget the
    /// subject (other processes hear of it from the script's message).
    async fn adjust(&self, subject: &[u8], op: Op) -> Result<SubjectSettings> {
        let spec = self.spec();
        let core = self.core();
        let keys = core.key_set(subject, [&spec.override_id, &spec.block_id])?;
        let (publish, channel) = publish_to(self.cluster(), keys.slot());
        let quota = match op {
            Op::Override(quota, _) => quota,
            _ => spec.quota,
        };
        let (name, amount) = match op {
            Op::Reset => ("reset", 0),
            Op::Block(d) => ("block", micros(d)),
            Op::Unblock => ("unblock", 0),
            Op::Penalize(units) => ("penalize", u64::from(units.get())),
            Op::Reward(units) => ("reward", u64::from(units.get())),
            Op::Override(_, ttl) => ("override", millis(ttl)),
            Op::ClearOverride => ("unoverride", 0),
            Op::Read => ("read", 0),
        };
        let publish = if matches!(op, Op::Read) { "" } else { publish };
        let args = script_args(
            name,
            amount,
            &spec,
            quota,
            publish,
            channel,
            keys.keys()[0].clone(),
        );
        let reply: (String, i64, i64) = core.eval(&algorithm::LIMIT_ADJUST, &keys, args).await?;
        if !matches!(op, Op::Read) {
            Invalidations::of(self.cluster()).key_changed(&keys.keys()[0]);
        }
        parse_settings(&reply)
    }
}

/// `limit_adjust.lua`'s `ARGV[1..9]`: `op` of `amount` on the limit
/// `spec` under `quota`, told to the deny caches with `publish` on
/// `channel` (`""`: not told) as `message` (the state key).
pub(crate) fn script_args(
    op: &str,
    amount: u64,
    spec: &LimitSpec,
    quota: Quota,
    publish: &str,
    channel: String,
    message: Vec<u8>,
) -> Vec<Vec<u8>> {
    vec![
        op.into(),
        amount.to_string().into(),
        spec.algorithm.kind().into(),
        quota.limit().to_string().into(),
        micros(quota.period()).to_string().into(),
        quota.burst().to_string().into(),
        publish.into(),
        channel.into(),
        message,
    ]
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The adjust script's reply: override text, its TTL (ms), blocked for (us).
fn parse_settings((text, ttl_ms, blocked_us): &(String, i64, i64)) -> Result<SubjectSettings> {
    let override_quota = if text.is_empty() {
        None
    } else {
        Some(parse_override(text).ok_or_else(|| Error::UnexpectedReply {
            op: "limit_adjust".into(),
            detail: format!("malformed override {text:?}"),
        })?)
    };
    let positive =
        |v: i64, unit: fn(u64) -> Duration| u64::try_from(v).ok().filter(|&v| v > 0).map(unit);
    Ok(SubjectSettings {
        override_quota,
        override_ttl: positive(*ttl_ms, Duration::from_millis),
        blocked_for: positive(*blocked_us, Duration::from_micros),
    })
}

/// `limit period_us burst`, as the adjust script writes an override: three
/// fields of ASCII digits and nothing else, as strict as the check script
/// (which refuses anything else, writing nothing).
pub(crate) fn parse_override(text: &str) -> Option<Quota> {
    let number = |field: &str| {
        (!field.is_empty() && field.bytes().all(|b| b.is_ascii_digit()))
            .then(|| field.parse::<u64>().ok())
            .flatten()
    };
    let fields: Vec<u64> = text.split(' ').map(number).collect::<Option<_>>()?;
    let [limit, period_us, burst] = fields[..] else {
        return None;
    };
    let limit = NonZeroU32::new(u32::try_from(limit).ok()?)?;
    let burst = NonZeroU32::new(u32::try_from(burst).ok()?)?;
    let quota = Quota::with_period(limit, Duration::from_micros(period_us));
    Some(if burst == limit {
        quota
    } else {
        quota.allow_burst(burst)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_read_back_as_quotas() {
        let nz = |n| NonZeroU32::new(n).unwrap();
        assert_eq!(
            parse_override("10 60000000 10"),
            Some(Quota::per_minute(nz(10)))
        );
        assert_eq!(
            parse_override("10 1000000 25"),
            Some(Quota::per_second(nz(10)).allow_burst(nz(25)))
        );
        for bad in [
            "",
            "10",
            "10 x 10",
            "0 1000 1",
            "5 1000 0",
            "10 1000 10 4",
            "+5 1000 5",
            "5  1000 5",
            "4294967296 1000 1",
        ] {
            assert_eq!(parse_override(bad), None, "{bad}");
        }
        let s = parse_settings(&("5 1000000 5".into(), 1500, 0)).unwrap();
        assert_eq!(s.override_ttl, Some(Duration::from_millis(1500)));
        assert_eq!(s.blocked_for, None);
        let s = parse_settings(&(String::new(), -2, 250)).unwrap();
        assert_eq!(s.override_quota, None);
        assert_eq!(s.blocked_for, Some(Duration::from_micros(250)));
        assert!(parse_settings(&("junk".into(), 1, 0)).is_err());
    }
}
