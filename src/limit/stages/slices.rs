//! Quota slices for hot subjects: the declared overshoot bound, what a
//! slice may be and which subjects are sliced. The process side (the
//! slices held, taking and returning them) is in `slices/table.rs`, which
//! subjects are hot now in `slices/hot.rs`, a check from a slice in
//! `slices/check.rs`; the script is `slice.lua`.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::limit::algorithm::Algorithm;
use crate::limit::script::LimitSpec;

mod check;
mod hot;
mod reply;
pub(crate) mod table;

/// Quota slices for subjects hotter than one master can decide (see
/// [`RateLimiterBuilder::slices`](crate::limit::RateLimiterBuilder::slices)): a
/// process takes a slice of a subject's quota from Redis in one script
/// call, decides from it locally, and gives back what it did not use.
///
/// The **declared bound** is `floor(limit × fraction)` units (of the
/// subject's quota in force: its override, if it has one): the slices of
/// one subject held at any moment, by all processes together, never sum
/// past it — Redis tracks them in a key in the subject's slot and shrinks
/// or refuses a slice that would pass it. So in any interval at most what
/// an exact check admits plus the bound is admitted: for a GCRA with a
/// drained burst, at most `limit + bound` per period.
///
/// Every subject checked is sliced (up to
/// [`max_subjects`](Self::max_subjects)), or, with
/// [`when_hot`](Self::when_hot), only the subjects this process checks
/// often, while they stay hot.
///
/// ```no_run
/// # async fn demo(cluster: shardlimit::Cluster) -> shardlimit::Result<()> {
/// use std::time::Duration;
/// use shardlimit::{Quota, RateLimiter, limit::Slices};
///
/// // 200,000 requests per second for one tenant: ten times what one master
/// // decides. At most 10% (20,000 units) is ever held in slices.
/// let tenant = RateLimiter::builder(&cluster, "tenant", Quota::per_second(200_000u32))
///     .slices(Slices::up_to(0.1).lasting(Duration::from_millis(100)))
///     .build()?;
/// let decision = tenant.check("tenant:acme").await?;
/// assert!(decision.allowed);
/// // Before shutting down: give back what is held.
/// tenant.return_slices().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[must_use]
pub struct Slices {
    fraction: f64,
    lifetime: Duration,
    max_subjects: usize,
    slicing: Slicing,
}

/// What a take asks for: a slice of up to `units`, decided from for
/// `lasting` (see [`Slices::ask`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Ask {
    pub(crate) units: u32,
    pub(crate) lasting: Duration,
}

/// Which subjects a limiter with slices slices.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Slicing {
    /// Every subject checked (up to `max_subjects`).
    Every,
    /// Only subjects hot in this process: checked at least this often
    /// (per second; `None`, the default of
    /// [`Slices::DEFAULT_UNITS_PER_SLICE`] per lifetime).
    Hot(Option<f64>),
}

impl Slices {
    /// The shortest slice lifetime.
    pub const MIN_LIFETIME: Duration = Duration::from_millis(1);
    /// The longest slice lifetime.
    pub const MAX_LIFETIME: Duration = Duration::from_secs(60);
    /// The units a slice should hold to be worth its take (a take costs
    /// Redis about two exact checks): a slice lasts at least until it
    /// would (see [`lasting`](Self::lasting)), and with
    /// [`when_hot`](Self::when_hot) the default threshold is the rate at
    /// which the longest slice
    /// ([`LONGEST_SLICE_LIFETIMES`](Self::LONGEST_SLICE_LIFETIMES)
    /// lifetimes) holds this many: `8 / (10 × lifetime)` checks per second
    /// (8 per second at the default 100 ms).
    pub const DEFAULT_UNITS_PER_SLICE: u32 = 8;
    /// With [`when_hot`](Self::when_hot), a subject's rate is counted over
    /// windows of this many lifetimes (1 s at the default 100 ms).
    pub const HOT_WINDOW_LIFETIMES: u32 = 10;
    /// The longest a slice lasts, in lifetimes: a process that used its
    /// last slice of a subject too slowly for one lifetime's worth to hold
    /// [`DEFAULT_UNITS_PER_SLICE`](Self::DEFAULT_UNITS_PER_SLICE) units
    /// takes a slice that lasts until it would, up to this many lifetimes
    /// (1 s at the default 100 ms; never past
    /// [`MAX_LIFETIME`](Self::MAX_LIFETIME)).
    pub const LONGEST_SLICE_LIFETIMES: u32 = 10;

    /// Slices whose sum per subject is at most `fraction` of the limit
    /// (more than 0, at most 1; checked by
    /// [`build`](crate::limit::RateLimiterBuilder::build), which also wants the
    /// bound to be at least one unit). Each slice is at most half the
    /// bound, so at least two processes can hold one.
    pub fn up_to(fraction: f64) -> Self {
        Slices {
            fraction,
            lifetime: Duration::from_millis(100),
            max_subjects: 10_000,
            slicing: Slicing::Every,
        }
    }

    /// Automatic slicing: only subjects this process checks often are
    /// sliced, and only while they stay hot; every other check is exact.
    /// Default: off (every subject is sliced, up to
    /// [`max_subjects`](Self::max_subjects)).
    ///
    /// A subject becomes sliced once this process has checked it at the
    /// [`hot_threshold`](Self::hot_threshold)'s rate since the current
    /// window of [`HOT_WINDOW_LIFETIMES`](Self::HOT_WINDOW_LIFETIMES)
    /// lifetimes began — `threshold × t` checks `t` into it, and at least
    /// 16, or the whole window's worth if that is less — so a subject hot
    /// from a window's start is sliced within its first lifetimes (counted
    /// by a Space-Saving sketch of the limiter's exact checks in this
    /// process, 1,024 counters, renewed every window: counted from a lower
    /// bound, so a subject checked less often is never sliced). It returns
    /// to exact checks once a whole window passes with fewer than **half**
    /// the window's worth of checks — the hysteresis that keeps a subject
    /// near the threshold from flapping — and its slice is then given back
    /// at once. The threshold is [`DEFAULT_UNITS_PER_SLICE`]
    /// (8) units per longest slice
    /// ([`LONGEST_SLICE_LIFETIMES`](Self::LONGEST_SLICE_LIFETIMES) (10)
    /// lifetimes), `8 / (10 × lifetime)` checks per second (8/s at the
    /// default 100 ms): at it a slice holds 8 units, serving 8 decisions
    /// for a take that costs Redis about two exact checks, and at the
    /// hysteresis floor 4; set another with
    /// [`when_hot_above`](Self::when_hot_above) (which `when_hot` called
    /// after it keeps). The rate is this process's, not the fleet's: each
    /// process decides for itself, so a subject spread over many processes
    /// may be below the threshold in each.
    ///
    /// The declared bound holds throughout, at the transitions too: an
    /// exact check and a slice's units are counted alike in Redis, and a
    /// cooled subject's slice is taken out of use before its unused units
    /// are given back (see
    /// [docs/hot-subjects.md](https://github.com/shardlimit/shardlimit/blob/main/docs/hot-subjects.md#automatic-slicing)).
    ///
    /// [`DEFAULT_UNITS_PER_SLICE`]: Self::DEFAULT_UNITS_PER_SLICE
    ///
    /// ```no_run
    /// # async fn demo(cluster: shardlimit::Cluster) -> shardlimit::Result<()> {
    /// use shardlimit::{Quota, RateLimiter, limit::Slices};
    ///
    /// // Per-tenant limits; the few tenants hot right now are sliced.
    /// let tenants = RateLimiter::builder(&cluster, "tenant", Quota::per_second(5_000u32))
    ///     .slices(Slices::up_to(0.1).when_hot())
    ///     .build()?;
    /// let decision = tenants.check("tenant:acme").await?;
    /// # let _ = decision;
    /// # Ok(()) }
    /// ```
    pub fn when_hot(mut self) -> Self {
        if self.slicing == Slicing::Every {
            self.slicing = Slicing::Hot(None);
        }
        self
    }

    /// [`when_hot`](Self::when_hot) with the threshold: a subject is
    /// sliced while this process checks it at least `per_second` times a
    /// second (and until it falls below half that), a finite number above
    /// 0 (checked by [`build`](crate::limit::RateLimiterBuilder::build)).
    pub fn when_hot_above(mut self, per_second: f64) -> Self {
        self.slicing = Slicing::Hot(Some(per_second));
        self
    }

    /// With automatic slicing, the checks per second of this process above
    /// which a subject is sliced; `None` when every subject is.
    #[must_use]
    pub fn hot_threshold(&self) -> Option<f64> {
        match self.slicing {
            Slicing::Every => None,
            Slicing::Hot(Some(rate)) => Some(rate),
            Slicing::Hot(None) => Some(
                f64::from(Self::DEFAULT_UNITS_PER_SLICE)
                    / self.longest_lasting().as_secs_f64().max(1e-9),
            ),
        }
    }

    /// How long the longest slice lasts:
    /// [`LONGEST_SLICE_LIFETIMES`](Self::LONGEST_SLICE_LIFETIMES)
    /// lifetimes, at most [`MAX_LIFETIME`](Self::MAX_LIFETIME) (or the
    /// lifetime, if that is longer).
    fn longest_lasting(&self) -> Duration {
        self.lifetime
            .saturating_mul(Self::LONGEST_SLICE_LIFETIMES)
            .min(Self::MAX_LIFETIME.max(self.lifetime))
    }

    /// With automatic slicing, how long each rate is counted over:
    /// [`HOT_WINDOW_LIFETIMES`](Self::HOT_WINDOW_LIFETIMES) lifetimes.
    pub(crate) fn hot_window(&self) -> Duration {
        self.lifetime * Self::HOT_WINDOW_LIFETIMES
    }

    /// How long a process decides from a slice before it must take a new
    /// one ([`MIN_LIFETIME`](Self::MIN_LIFETIME) to
    /// [`MAX_LIFETIME`](Self::MAX_LIFETIME)), for a subject this process
    /// checks at least
    /// [`DEFAULT_UNITS_PER_SLICE`](Self::DEFAULT_UNITS_PER_SLICE) times a
    /// lifetime; a slice of a subject checked less often lasts until it
    /// would hold that many at the rate its last slice was used, up to
    /// [`LONGEST_SLICE_LIFETIMES`](Self::LONGEST_SLICE_LIFETIMES)
    /// lifetimes (each take costs Redis about two exact checks: a slice
    /// of a unit or two would cost more than it saves). Redis counts a
    /// slice against the bound until it is given back, or for twice its
    /// own lifetime if it never is (a process that died holding it loses
    /// at most that slice). Default 100 ms.
    pub fn lasting(mut self, lifetime: Duration) -> Self {
        self.lifetime = lifetime;
        self
    }

    /// The most subjects a process holds slices of at once; checks of
    /// others are exact. Default 10,000.
    pub fn max_subjects(mut self, max: usize) -> Self {
        self.max_subjects = max;
        self
    }

    /// The declared bound, as a fraction of the limit.
    #[must_use]
    pub fn fraction(&self) -> f64 {
        self.fraction
    }

    /// How long a slice is decided from.
    #[must_use]
    pub fn lifetime(&self) -> Duration {
        self.lifetime
    }

    /// The bound in parts per million of the limit, as the script takes
    /// it.
    pub(crate) fn ppm(&self) -> u32 {
        // Validated: 0 < fraction <= 1, so the product is in [0, 10^6].
        let ppm = (self.fraction * 1_000_000.0).floor();
        if (1.0..=1_000_000.0).contains(&ppm) {
            ppm as u32
        } else {
            0
        }
    }

    /// The declared bound for `limit`: `floor(limit × fraction)` units.
    #[must_use]
    pub fn bound(&self, limit: u32) -> u32 {
        let units = u64::from(limit) * u64::from(self.ppm()) / 1_000_000;
        u32::try_from(units).unwrap_or(u32::MAX)
    }

    /// The most one slice may hold under `limit`: half the bound (at
    /// least one unit).
    pub(crate) fn max_slice(&self, limit: u32) -> u32 {
        (self.bound(limit) / 2).max(1)
    }

    /// What a take asks for when this process used its last slice of the
    /// subject at `rate` units per second (0: none known), for a request
    /// of `cost` under `limit`: a slice that lasts a lifetime, or longer
    /// (up to [`LONGEST_SLICE_LIFETIMES`](Self::LONGEST_SLICE_LIFETIMES))
    /// until it would hold
    /// [`DEFAULT_UNITS_PER_SLICE`](Self::DEFAULT_UNITS_PER_SLICE) units,
    /// of the units the rate uses in that time (at least `cost`, at most
    /// the largest slice). The bound does not depend on how long a slice
    /// lasts: Redis counts it as long as the process may use it.
    pub(crate) fn ask(&self, rate: f64, limit: u32, cost: u32) -> Ask {
        let lifetime = self.lifetime.as_secs_f64();
        let longest = self.longest_lasting();
        let lasting = if rate > 0.0 {
            let worth = f64::from(Self::DEFAULT_UNITS_PER_SLICE) / rate;
            Duration::try_from_secs_f64(worth.max(lifetime)).map_or(longest, |d| d.min(longest))
        } else {
            self.lifetime
        };
        let max = self.max_slice(limit).max(cost);
        let want = (rate * lasting.as_secs_f64()).ceil();
        let units = if want >= f64::from(max) {
            max
        } else {
            // In [0, max): exact in a u32.
            (want as u32).max(cost)
        };
        Ask { units, lasting }
    }

    /// Refuses what quota slices cannot be sound for (see
    /// [`RateLimiterBuilder::slices`](crate::limit::RateLimiterBuilder::slices)).
    pub(crate) fn validate(&self, spec: &LimitSpec) -> Result<()> {
        let refuse = |reason: String| {
            Err(Error::Config {
                field: "slices",
                reason,
            })
        };
        if spec.algorithm != Algorithm::Gcra {
            return refuse(format!(
                "quota slices need Algorithm::Gcra, not {:?}: a slice's unused units can be \
                 given back without freeing more than was taken only where the state is one \
                 number (a GCRA's theoretical arrival time); windows and logs would give back \
                 units counted in another window or at another time",
                spec.algorithm
            ));
        }
        if spec.shadow {
            return refuse(
                "a limiter in shadow mode never denies: it has no use for slices".into(),
            );
        }
        if !(self.fraction > 0.0 && self.fraction <= 1.0) {
            return refuse(format!(
                "the bound is a fraction of the limit in (0, 1], not {}",
                self.fraction
            ));
        }
        if self.bound(spec.quota.limit().get()) == 0 {
            return refuse(format!(
                "a bound of {} of a limit of {} is less than one unit",
                self.fraction,
                spec.quota.limit()
            ));
        }
        if self.lifetime < Self::MIN_LIFETIME || self.lifetime > Self::MAX_LIFETIME {
            return refuse(format!(
                "a slice lasts {:?} to {:?}, not {:?}",
                Self::MIN_LIFETIME,
                Self::MAX_LIFETIME,
                self.lifetime
            ));
        }
        if self.max_subjects == 0 {
            return refuse("slices need room for at least one subject".into());
        }
        if let Slicing::Hot(Some(rate)) = self.slicing
            && !(rate.is_finite() && rate > 0.0)
        {
            return refuse(format!(
                "a subject is hot above a finite rate of more than 0 checks per second, not {rate}"
            ));
        }
        Ok(())
    }

    pub(crate) fn max_subject_count(&self) -> usize {
        self.max_subjects
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::Quota;

    fn spec(algorithm: Algorithm, limit: u32) -> LimitSpec {
        LimitSpec::new("api", algorithm, Quota::per_second(limit), false).unwrap()
    }

    #[test]
    fn the_bound_is_a_fraction_of_the_limit() {
        let s = Slices::up_to(0.1);
        assert_eq!(s.bound(200_000), 20_000);
        assert_eq!(s.max_slice(200_000), 10_000);
        assert_eq!(s.bound(5), 0);
        assert_eq!(Slices::up_to(1.0).bound(u32::MAX), u32::MAX);
        assert_eq!(Slices::up_to(0.000_000_1).ppm(), 0);
        assert!(s.validate(&spec(Algorithm::Gcra, 100)).is_ok());
    }

    #[test]
    fn the_default_threshold_follows_the_lifetime() {
        assert_eq!(Slices::up_to(0.1).hot_threshold(), None);
        // 8 units per longest slice, 10 lifetimes.
        let hot = Slices::up_to(0.1).when_hot();
        assert_eq!(hot.hot_threshold(), Some(8.0));
        assert_eq!(hot.hot_window(), Duration::from_secs(1));
        // Set before or after the lifetime: the same.
        let short = hot.lasting(Duration::from_millis(10));
        assert_eq!(short.hot_threshold(), Some(80.0));
        // The longest slice lasts at most a minute.
        let long = hot.lasting(Duration::from_secs(30));
        assert_eq!(long.hot_threshold(), Some(8.0 / 60.0));
        assert_eq!(
            short,
            Slices::up_to(0.1)
                .lasting(Duration::from_millis(10))
                .when_hot()
        );
        let set = Slices::up_to(0.1).when_hot_above(5.0).when_hot();
        assert_eq!(set.hot_threshold(), Some(5.0));
        assert!(set.validate(&spec(Algorithm::Gcra, 100)).is_ok());
    }

    #[test]
    fn a_slice_lasts_until_it_would_hold_a_takes_worth() {
        let s = Slices::up_to(0.1); // 100 ms
        // (rate per second, cost) -> (units, ms): 80 a second or more, a
        // lifetime's worth, at most the largest slice (half the bound: 100
        // of 2,000); slower, until it would hold 8 units, at most 10
        // lifetimes; no rate known, the request's cost for a lifetime.
        for (rate, cost, units, ms) in [
            (80.0, 1, 8, 100),
            (500.0, 1, 50, 100),
            (5000.0, 1, 100, 100),
            (20.0, 1, 8, 400),
            (10.0, 1, 8, 800),
            (4.0, 1, 4, 1000),
            (0.0, 3, 3, 100),
        ] {
            let lasting = Duration::from_millis(ms);
            assert_eq!(s.ask(rate, 2000, cost), Ask { units, lasting }, "{rate}");
        }
        // Never past the longest lifetime a slice may have.
        let long = Slices::up_to(0.1).lasting(Slices::MAX_LIFETIME);
        assert_eq!(long.ask(0.01, 2000, 1).lasting, Slices::MAX_LIFETIME);
    }

    #[test]
    fn unsound_or_empty_settings_are_refused() {
        for algorithm in [
            Algorithm::FixedWindow,
            Algorithm::SlidingLog,
            Algorithm::SlidingWindow,
        ] {
            let err = Slices::up_to(0.1)
                .validate(&spec(algorithm, 100))
                .unwrap_err();
            assert!(err.to_string().contains("Algorithm::Gcra"), "{err}");
            // Automatic slicing is the same slices: refused alike.
            let err = Slices::up_to(0.1)
                .when_hot()
                .validate(&spec(algorithm, 100))
                .unwrap_err();
            assert!(err.to_string().contains("Algorithm::Gcra"), "{err}");
        }
        let gcra = spec(Algorithm::Gcra, 100);
        for bad in [0.0, -0.5, 1.5, f64::NAN, f64::INFINITY, 0.001] {
            assert!(Slices::up_to(bad).validate(&gcra).is_err(), "{bad}");
        }
        for lifetime in [Duration::ZERO, Duration::from_secs(61)] {
            let s = Slices::up_to(0.1).lasting(lifetime);
            assert!(s.validate(&gcra).is_err());
        }
        assert!(Slices::up_to(0.1).max_subjects(0).validate(&gcra).is_err());
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let s = Slices::up_to(0.1).when_hot_above(bad);
            assert!(s.validate(&gcra).is_err(), "{bad}");
        }
        let shadow = LimitSpec::new("api", Algorithm::Gcra, Quota::per_second(100), true).unwrap();
        assert!(Slices::up_to(0.1).validate(&shadow).is_err());
    }
}
