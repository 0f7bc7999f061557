//! The four rate-limit algorithms and what they cost. Each is one folder,
//! `algorithm/<name>/`, that owns everything about it: its decision in Lua
//! (`<name>.lua`: read, decide, write, adjust), from which every script
//! that decides for it is assembled (`assemble.rs`: the one-limit check, the
//! multi-limit check, the adjustments, GCRA's slices), and in `mod.rs` its
//! Rust side as one [`Rules`] value: its bounds, degraded local mode's
//! limiter (tested against the Lua on random sequences,
//! `tests/cluster/algorithms.rs`), how the admin scanner reads its state
//! and what a person reads from it. [`Algorithm::rules`] is the registry.
//!
//! Adding an algorithm is a folder, a variant (in [`Algorithm::ALL`],
//! [`Algorithm::rules`] and, `const`, [`Algorithm::key_kind`] with its key
//! [`Kind`]) and its arm in the scanner's [`Usage`]; the scripts, the
//! metrics and the checks of every entry point follow. `tests/layout.rs`
//! checks that its arithmetic stays in its folder.

use std::collections::VecDeque;
use std::fmt;
use std::num::NonZeroU32;
use std::sync::LazyLock;
use std::time::Duration;

use super::quota::Quota;
use crate::cluster::Transaction;
use crate::error::{Error, Result};
use crate::keys::Kind;
use crate::scripts::Script;
use crate::usage::Usage;

mod assemble;
mod fixed_window;
mod gcra;
mod sliding_log;
mod sliding_window;

#[cfg(feature = "slices")]
pub(crate) use assemble::SLICE;
use assemble::one_limit;
pub(crate) use assemble::{LIMIT_ADJUST, MULTI_LIMIT, all as scripts, is_one_limit};

const SLIDING_LOG_MAX: NonZeroU32 = sliding_log::MAX_LIMIT;

/// Everything about one algorithm.
pub(crate) struct Rules {
    /// Its name in words.
    pub(crate) words: &'static str,
    /// Its name in code: its folder, its Lua file's and its one-limit
    /// script's (in errors, traces and metrics).
    pub(crate) name: &'static str,
    /// Its decision in Lua (`<name>/<name>.lua`), the one place it is
    /// written: every script that decides for it is assembled from it
    /// (`assemble.rs`). It defines, as locals, with `NOW_US` the server's
    /// time and `BURSTS` (from
    /// [`bursts`](Self::bursts)) and `STRING_STATE` (its state is a string
    /// a check reads with `GET`, from [`state`](Self::state)) before it:
    ///
    /// * `decide(now_us, key, value, limit, period_us, burst, cost,
    ///   counts)`: the decision at `now_us` (the server's time: a parameter,
    ///   so that the function captures nothing, which makes it cheaper to
    ///   define) on a request of `cost` (at most the capacity); `value` is
    ///   the state key's value when `STRING_STATE` (`false` if absent or
    ///   read by an `MGET` as of another type). With `counts`, an admission
    ///   is written (with a TTL), and what it reports is after it; without,
    ///   it only reads. Returns `admits, wait, remaining, reset_us`: `wait`
    ///   is, when it denies, the time until the same request could be
    ///   admitted (at least 1 µs); when it admits, the time until more than
    ///   `remaining` is free (0: all is). Every number it would write is
    ///   checked to be an exact integer whether it writes or not, so a
    ///   multi-limit check can decide every limit before it writes any.
    ///   (It writes itself, not through a function of its own: every call
    ///   of a Lua function costs Redis about 1.4% of a check);
    /// * after a line `-- [adjust]`, which the checks leave out (with the
    ///   helpers of `numbers.lua` before it), `adjust(key, limit,
    ///   period_us, burst, delta)`: counts `delta`
    ///   units as used (a penalty, never past an empty quota) or, negative,
    ///   gives them back (a reward, never past a full one); returns whether
    ///   it wrote.
    pub(crate) lua: &'static str,
    /// The script of a check of it alone.
    pub(crate) script: &'static LazyLock<Script>,
    /// The largest limit it accepts.
    pub(crate) max_limit: NonZeroU32,
    /// Whether a burst above the limit applies: a request may then cost up
    /// to the burst.
    pub(crate) bursts: bool,
    /// Its own bounds on a quota of `period_us` microseconds, beyond the
    /// ones every algorithm has.
    pub(crate) bounds: fn(&Quota, u64) -> Result<()>,
    /// How the admin scanner reads a subject's state key.
    pub(crate) state: StateRead,
    /// Units left under `quota` given the state the scanner read and the
    /// key's TTL: `(remaining, exact)`, or `None` when the usage is not
    /// this algorithm's or cannot say.
    pub(crate) remaining: fn(&Usage, &Quota, Option<Duration>) -> Option<Remaining>,
    /// A check of `cost` at `now` (µs, the process's clock) against the
    /// local state of the degraded local mode, under `quota` (this
    /// process's share); when `consume` and admitted, the state takes it.
    pub(crate) local: fn(&mut LocalState, Local) -> LocalVerdict,
    /// How a check of it alone is decided from plain commands instead of
    /// its script, if it can be (see `limit/check/plain.rs`).
    pub(crate) plain: Option<&'static Plain>,
    /// Makes the local state say what Redis last said, in this process's
    /// share: `at.cost` units taken as of `at.now`, all free again
    /// `reset_after` µs later at the latest (Redis' `reset_after`, when
    /// it is back to full; 0: nothing is in use).
    pub(crate) seed: fn(&mut LocalState, Local, u64),
}

/// A decision made from plain pipelined commands (no script) and judged
/// on the client: for an algorithm whose state is a counter of the
/// current window, whose window the client can tell from the server's
/// time (`limit/check/plain.rs` estimates it, and leaves to the script
/// every check too close to a window's edge to tell).
pub(crate) struct Plain {
    /// The operation's name (errors, traces, metrics).
    pub(crate) op: &'static str,
    /// The window holding `now_us` (the server's time) under a period of
    /// `period_us`: its start and end, µs since the epoch.
    pub(crate) window: fn(u64, u64) -> (u64, u64),
    /// Appends the commands that count `cost` units on the state key (key
    /// 0 of the check's key set) in the window ending at `end_ms` (whole
    /// ms). Their first reply is the count after them, their second 1 if
    /// they gave the key its expiry (it had none), 0 if it had one; they
    /// are [`COUNT_REPLIES`](Self::COUNT_REPLIES) commands.
    pub(crate) count: fn(Transaction, u32, u64) -> Transaction,
    /// The script that gives back units counted in a window (a denial's,
    /// or a check's that turns to the script): `KEYS` the state key,
    /// `ARGV` the units and the lowest and highest expiry (ms, 0: none)
    /// the key may have for them to be its units.
    pub(crate) give_back: &'static LazyLock<Script>,
    /// The verdict, from the count after the request's units (the first
    /// reply of [`count`](Self::count)) and `ends_in` µs to the window's
    /// end: exactly what the script would decide on the count before them.
    pub(crate) judge: fn(i64, Local, u64) -> LocalVerdict,
}

impl Plain {
    /// How many commands [`count`](Self::count) appends.
    pub(crate) const COUNT_REPLIES: usize = 2;
}

/// What a local check is given.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Local {
    /// Microseconds on the process's monotonic clock.
    pub(crate) now: u64,
    pub(crate) cost: u64,
    pub(crate) limit: u64,
    /// The burst (GCRA), else the limit.
    pub(crate) capacity: u64,
    /// The period in microseconds, at least 1.
    pub(crate) period: u64,
    pub(crate) consume: bool,
}

/// Units left, and whether that is exact (`false`: a lower bound).
pub(crate) type Remaining = (u64, bool);

/// One subject's local state; each algorithm uses its own fields.
#[derive(Debug, Default)]
pub(crate) struct LocalState {
    /// Fixed window, sliding window counter: the index of the current
    /// window.
    pub(crate) window: u64,
    /// Fixed window, sliding window counter: units in the current window.
    pub(crate) count: u64,
    /// Sliding window counter: units in the previous window.
    pub(crate) previous: u64,
    /// GCRA: the theoretical arrival time, µs since the limiter's epoch.
    pub(crate) tat: u64,
    /// Sliding log: when each admitted unit was admitted, µs, oldest first.
    pub(crate) log: VecDeque<u64>,
    /// Fixed window, sliding window counter: added to the clock so that
    /// the local windows end when Redis' do (see [`Rules::seed`]).
    pub(crate) offset: u64,
}

/// What a local check found: `(allowed, remaining, retry_after_us,
/// reset_after_us, more_after_us)`, the last three after this request's
/// units when it was admitted and consumed (as the Lua's `decide` reports
/// with `counts`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LocalVerdict {
    pub(crate) allowed: bool,
    pub(crate) remaining: u64,
    pub(crate) retry_after_us: Option<u64>,
    pub(crate) reset_after_us: u64,
    /// For an admission, when more than `remaining` is free
    /// ([`Decision::more_after`](super::Decision::more_after)); never
    /// shorter than that (the sliding window counter states its reset).
    pub(crate) more_after_us: u64,
}

impl Local {
    /// Units left with `used` in use, and this request's units if
    /// `counted` (admitted and consumed: a peek reports what is left
    /// without them, as the Lua does).
    fn left_after(&self, used: u64, counted: bool) -> u64 {
        self.limit
            .saturating_sub(used + if counted { self.cost } else { 0 })
    }
}

/// How the admin scanner reads a state key, and what the reply means.
#[derive(Clone, Copy)]
pub(crate) enum StateRead {
    /// A string holding an integer (`GET`).
    Integer(fn(Option<i64>) -> Usage),
    /// A sorted set (`ZCARD`): its members.
    Members(fn(u64) -> Usage),
    /// A hash (`HMGET` of these fields): their integer values, in order.
    Fields(&'static [&'static str], fn(&[Option<i64>]) -> Usage),
}

/// An integer read by the scanner as a count: missing or negative is 0.
fn count(v: Option<i64>) -> u64 {
    v.and_then(|v| u64::try_from(v).ok()).unwrap_or(0)
}

/// The offset that makes windows of `period` end `ends_in` µs after `now`.
fn aligned(now: u64, ends_in: u64, period: u64) -> u64 {
    (period - now.saturating_add(ends_in) % period) % period
}

/// A window-based seed: the windows made to end when Redis' current one
/// does, `ends_in` µs from now (kept when nothing is in use: then Redis
/// does not say), and `at.cost` units counted in the current one.
fn seed_window(state: &mut LocalState, at: Local, ends_in: u64) {
    if ends_in > 0 {
        state.offset = aligned(at.now, ends_in.min(at.period), at.period);
    }
    state.window = (at.now + state.offset) / at.period;
    state.count = at.cost;
    state.previous = 0;
}

/// No bounds beyond the ones every algorithm has.
fn no_bounds(_: &Quota, _: u64) -> Result<()> {
    Ok(())
}

/// How a [`RateLimiter`](super::RateLimiter) counts.
///
/// | algorithm | state per subject | most admitted in one period's worst window | use when |
/// |---|---|---|---|
/// | [`FixedWindow`](Self::FixedWindow) | 1 integer key | the limit per clock-aligned window; up to 2× the limit across a boundary | quotas that reset on the clock ("1000 per hour") |
/// | [`SlidingLog`](Self::SlidingLog) | sorted set, one entry per admitted unit (limit ≤ 128) | the limit, in every window (exact) | "N per window" where the boundary matters (APIs, logins) |
/// | [`SlidingWindow`](Self::SlidingWindow) | 1 small hash | the limit by its estimate (weighted previous window); worst case 2× | large limits, cheap memory, smooth behaviour |
/// | [`Gcra`](Self::Gcra) | 1 key: theoretical arrival time | limit + burst − 1: a full burst, then the rate | the default: smooth rate + burst, least memory — not "N per window" |
///
/// What a limiter advertises per period is
/// [`policy_limit`](Self::policy_limit).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Algorithm {
    /// Clock-aligned fixed window: one counter key whose TTL ends with the
    /// window (like Sidekiq's "bucket" limiter).
    FixedWindow,
    /// Sliding log: a sorted set of admitted units, exact; memory grows with
    /// the limit, which is at most
    /// [`SLIDING_LOG_MAX_LIMIT`](Self::SLIDING_LOG_MAX_LIMIT).
    SlidingLog,
    /// Sliding window counter: current and previous window counts, weighted.
    SlidingWindow,
    /// GCRA (token / leaky bucket): rate plus burst in one number.
    #[default]
    Gcra,
}

impl Algorithm {
    /// The largest sliding-log limit (and so cost): 128. A sliding log keeps
    /// one sorted-set member per admitted unit, so a check may trim and add
    /// up to this many members; 128 keeps the worst check well under a
    /// millisecond and the set in Redis' compact encoding (about 4 KB per
    /// subject). Larger limits want [`SlidingWindow`](Self::SlidingWindow)
    /// or [`Gcra`](Self::Gcra), whose state and work do not grow with the
    /// limit.
    pub const SLIDING_LOG_MAX_LIMIT: u32 = SLIDING_LOG_MAX.get();

    /// Every algorithm, for code that wants to try them all.
    pub const ALL: [Algorithm; 4] = [
        Algorithm::FixedWindow,
        Algorithm::SlidingLog,
        Algorithm::SlidingWindow,
        Algorithm::Gcra,
    ];

    /// The `kind` part of its keys (short: it is in every key).
    #[must_use]
    pub const fn kind(self) -> &'static str {
        self.key_kind().as_str()
    }

    /// Everything about it: the one place that matches on the algorithm.
    pub(crate) fn rules(self) -> &'static Rules {
        match self {
            Algorithm::FixedWindow => &fixed_window::RULES,
            Algorithm::SlidingLog => &sliding_log::RULES,
            Algorithm::SlidingWindow => &sliding_window::RULES,
            Algorithm::Gcra => &gcra::RULES,
        }
    }

    /// The algorithm whose keys have this kind.
    pub(crate) fn from_key_kind(kind: Kind) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.key_kind() == kind)
    }

    /// Its [`Kind`] (`const`, so it repeats the registry for the kind).
    #[must_use]
    pub const fn key_kind(self) -> Kind {
        match self {
            Algorithm::FixedWindow => Kind::FixedWindow,
            Algorithm::SlidingLog => Kind::SlidingLog,
            Algorithm::SlidingWindow => Kind::SlidingWindow,
            Algorithm::Gcra => Kind::Gcra,
        }
    }

    /// The algorithm whose keys have this kind.
    #[must_use]
    pub fn from_kind(kind: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.kind() == kind)
    }

    pub(crate) fn script(self) -> &'static Script {
        self.rules().script
    }

    /// The largest limit this algorithm accepts: `u32::MAX` for all but the
    /// sliding log, whose state (and the work of one check) grows with the
    /// limit; see [`SLIDING_LOG_MAX_LIMIT`](Self::SLIDING_LOG_MAX_LIMIT).
    ///
    /// ```
    /// use shardlimit::Algorithm;
    /// assert_eq!(Algorithm::SlidingLog.max_limit().get(), Algorithm::SLIDING_LOG_MAX_LIMIT);
    /// assert_eq!(Algorithm::Gcra.max_limit().get(), u32::MAX);
    /// ```
    #[must_use]
    pub fn max_limit(self) -> NonZeroU32 {
        self.rules().max_limit
    }

    /// The quota this algorithm advertises per period under `quota` — the
    /// HTTP `RateLimit-Policy`'s `q` (with `w` the period), gRPC's
    /// `QuotaViolation::quota_value`, the Limits page and the CLI's `list`
    /// — chosen so that it holds:
    ///
    /// * [`SlidingLog`](Self::SlidingLog): the limit, in any window of one
    ///   period;
    /// * [`Gcra`](Self::Gcra): the limit plus the burst, less one, in any
    ///   window of one period: a full burst at once, then one unit every
    ///   `period / limit`. With the default burst (the limit), "5 per 10 s"
    ///   admits 9 in some window of 10 s; the rate it sustains is the
    ///   limit per period;
    /// * [`FixedWindow`](Self::FixedWindow): the limit per clock-aligned
    ///   window (any window of one period may hold up to twice it, across a
    ///   boundary);
    /// * [`SlidingWindow`](Self::SlidingWindow): the limit as its estimate
    ///   counts, which assumes the previous window's units evenly spread;
    ///   any window of one period may hold up to twice it when they were
    ///   not.
    ///
    /// ```
    /// use std::time::Duration;
    /// use shardlimit::{Algorithm, Quota};
    /// let q = Quota::with_period(5, Duration::from_secs(10));
    /// assert_eq!(Algorithm::Gcra.policy_limit(&q), 9);
    /// assert_eq!(Algorithm::Gcra.policy_limit(&q.allow_burst(1)), 5);
    /// assert_eq!(Algorithm::SlidingLog.policy_limit(&q), 5);
    /// ```
    #[must_use]
    pub fn policy_limit(self, quota: &Quota) -> u64 {
        let limit = u64::from(quota.limit().get());
        if self.rules().bursts {
            limit + u64::from(quota.burst().get()) - 1
        } else {
            limit
        }
    }

    /// The most one request may cost under `quota`.
    pub(crate) fn capacity(self, quota: &Quota) -> u32 {
        self.capacity_of(quota.limit().get(), quota.burst().get())
    }

    /// The most one request may cost with `limit` and `burst`: the burst
    /// if this algorithm bursts, else the limit.
    pub(crate) fn capacity_of<N>(self, limit: N, burst: N) -> N {
        if self.rules().bursts { burst } else { limit }
    }

    /// Checks that `quota` makes sense for this algorithm and stays within
    /// the bounds that keep every number a script computes exact (see
    /// [`Quota#bounds`](Quota#bounds)); returns the period in microseconds.
    pub(crate) fn validate(self, quota: &Quota) -> Result<u64> {
        quota.check_counts()?;
        let period = quota.period_micros()?;
        let rules = self.rules();
        if !rules.bursts && quota.has_custom_burst() {
            return Err(Error::Config {
                field: "quota.burst",
                reason: format!("a burst only applies to GCRA, not to {self}"),
            });
        }
        let max = rules.max_limit;
        if quota.limit() > max {
            return Err(Error::Config {
                field: "quota.limit",
                reason: format!(
                    "{} is over the {self} maximum of {max}: its state and the work of one \
                     check grow with the limit",
                    quota.limit()
                ),
            });
        }
        (rules.bounds)(quota, period)?;
        Ok(period)
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.rules().words)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip() {
        for a in Algorithm::ALL {
            assert_eq!(Algorithm::from_kind(a.kind()), Some(a));
        }
        assert_eq!(Algorithm::from_kind("lock"), None);
    }

    fn nz(n: u32) -> NonZeroU32 {
        NonZeroU32::new(n).unwrap()
    }

    fn field(algorithm: Algorithm, quota: Quota) -> Option<&'static str> {
        match algorithm.validate(&quota) {
            Ok(_) => None,
            Err(Error::Config { field, .. }) => Some(field),
            Err(other) => panic!("{other:?}"),
        }
    }

    #[test]
    fn quotas_stay_within_their_bounds() {
        let year = Quota::MAX_PERIOD;
        // The largest of everything that is allowed.
        for a in [Algorithm::FixedWindow, Algorithm::SlidingWindow] {
            assert_eq!(field(a, Quota::with_period(nz(u32::MAX), year)), None);
        }
        let log_max = Algorithm::SlidingLog.max_limit();
        assert_eq!(
            field(Algorithm::SlidingLog, Quota::with_period(log_max, year)),
            None
        );
        assert_eq!(
            field(
                Algorithm::SlidingLog,
                Quota::with_period(log_max.saturating_add(1), year)
            ),
            Some("quota.limit")
        );
        // GCRA: burst x period / limit up to a year.
        assert_eq!(
            field(Algorithm::Gcra, Quota::with_period(nz(1), year)),
            None
        );
        let day = Duration::from_secs(24 * 3600);
        assert_eq!(
            field(
                Algorithm::Gcra,
                Quota::with_period(nz(1), day).allow_burst(nz(366))
            ),
            None
        );
        assert_eq!(
            field(
                Algorithm::Gcra,
                Quota::with_period(nz(1), day).allow_burst(nz(367))
            ),
            Some("quota.burst")
        );
        assert_eq!(
            field(
                Algorithm::Gcra,
                Quota::with_period(nz(1), year).allow_burst(nz(u32::MAX))
            ),
            Some("quota.burst")
        );
        assert_eq!(
            field(
                Algorithm::Gcra,
                Quota::with_period(nz(u32::MAX), Duration::from_millis(1))
                    .allow_burst(nz(u32::MAX))
            ),
            None
        );
    }

    #[test]
    fn burst_only_for_gcra() {
        let q = Quota::per_second(NonZeroU32::new(10).unwrap())
            .allow_burst(NonZeroU32::new(20).unwrap());
        assert_eq!(Algorithm::Gcra.capacity(&q), 20);
        Algorithm::Gcra.validate(&q).unwrap();
        assert!(Algorithm::FixedWindow.validate(&q).is_err());
        assert_eq!(Algorithm::SlidingLog.capacity(&q), 10);
    }
}
