//! [`RateLimiterBuilder`]: a rate limiter's settings, checked by
//! [`build`](RateLimiterBuilder::build).

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;

use super::{Inner, RateLimiter};
use crate::cluster::Cluster;
use crate::error::Result;
use crate::limit::algorithm::Algorithm;
use crate::limit::catalog;
use crate::limit::quota::Quota;
use crate::limit::script::LimitSpec;
#[cfg(feature = "slices")]
use crate::limit::stages::slices::Slices;
use crate::limit::stages::{StageLines, Stages};
use crate::policy::FailurePolicy;
use crate::primitive::Core;

/// Builds a [`RateLimiter`]; [`build`](Self::build) validates.
#[derive(Debug)]
#[must_use]
pub struct RateLimiterBuilder {
    cluster: Cluster,
    name: String,
    quota: Quota,
    algorithm: Algorithm,
    policy: FailurePolicy,
    shadow: bool,
    /// The stages' lines, composed by [`build`](Self::build) (see
    /// `limit/stages.rs`).
    stages: StageLines,
}

impl RateLimiterBuilder {
    /// How often the limiter publishes its spec to the
    /// [catalog](crate::limit#the-catalog) again while a handle to it
    /// lives (less up to a tenth, at random). Default [`CATALOG_REFRESH`](crate::limit::CATALOG_REFRESH)
    /// (30 s); from 100 ms to a third of [`CATALOG_TTL`](crate::limit::CATALOG_TTL) (30 s), so an entry
    /// outlives two missed refreshes.
    pub fn catalog_refresh(mut self, every: Duration) -> Self {
        self.stages.catalog_refresh = every;
        self
    }

    /// Whether this limiter publishes its spec to the
    /// [catalog](crate::limit#the-catalog). Default `true`: `list`, `show`
    /// and the Limits page read a limiter's limit from there.
    ///
    /// Turn it off for a handle that acts on a limiter without running it
    /// — an admin tool setting or clearing a subject's override, which
    /// needs a quota to build the handle but does not know the limiter's
    /// own (`shardlimit override` does this): its made-up quota would
    /// otherwise be published as a second spec of the limiter.
    ///
    /// ```no_run
    /// # async fn demo(cluster: shardlimit::Cluster) -> shardlimit::Result<()> {
    /// use shardlimit::{Quota, RateLimiter};
    ///
    /// let admin = RateLimiter::builder(&cluster, "api", Quota::per_second(1))
    ///     .publish_spec(false)
    ///     .build()?;
    /// admin.clear_override("user:42").await?;
    /// # Ok(()) }
    /// ```
    pub fn publish_spec(mut self, publish: bool) -> Self {
        self.stages.publish_spec = publish;
        self
    }

    /// The algorithm. Default [`Algorithm::Gcra`].
    pub fn algorithm(mut self, algorithm: Algorithm) -> Self {
        self.algorithm = algorithm;
        self
    }

    /// What to do when Redis cannot answer: return the error, admit, or
    /// decide from this process's share of the quota
    /// ([`FailurePolicy::Local`]; its share must be a valid quota, checked
    /// by [`build`](Self::build) and [`RateLimiter::set_quota`]). Default
    /// [`FailurePolicy::FailClosed`].
    pub fn failure_policy(mut self, policy: FailurePolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Shadow mode: every check is computed by Redis and counted (a denial
    /// as [`would_deny`](crate::cluster::PrimitiveStats::would_deny), and on the
    /// decision as [`Decision::would_deny`](crate::Decision::would_deny)), and nothing is refused:
    /// `allowed` is always `true`. What a shadow limiter admits is counted
    /// as usual, so its state is what the limiter would have if it were
    /// enforced; use it to try a new limit on live traffic. Default off;
    /// see also [`RateLimiter::set_shadow`].
    pub fn shadow(mut self, shadow: bool) -> Self {
        self.shadow = shadow;
        self
    }

    /// Keeps up to `max_entries` subjects' denials in this process and
    /// answers the same or costlier requests from them, without Redis,
    /// until the earliest time Redis could admit them (the denial's
    /// `retry_after`, counted from when the check was sent). Such decisions
    /// have [`Decision::cached`](crate::Decision::cached) set and are counted as
    /// [`denied_cached`](crate::cluster::PrimitiveStats::denied_cached).
    ///
    /// It never denies what Redis would admit: see
    /// [the deny cache](crate::limit#deny-cache) for the argument per
    /// algorithm, and [its scope](crate::limit#what-never-covers) (a
    /// forward step of the server's clock; one delivery latency of a change
    /// made elsewhere; a subscription broken and not yet noticed, at most
    /// two seconds for a hung server). Resets, unblocks, rewards and
    /// override changes made anywhere are published on the subject's slot
    /// and forgotten by every process's cache; an entry also ends when the
    /// subject's override or block expires. Peeks always ask Redis.
    /// Default: no cache; a limit of 0 is a configuration error.
    #[cfg(feature = "deny-cache")]
    #[cfg_attr(docsrs, doc(cfg(feature = "deny-cache")))]
    pub fn deny_cache(mut self, max_entries: u64) -> Self {
        self.stages.deny_cache = Some(max_entries);
        self
    }

    /// Quota slices, for a subject hotter than one master can decide (one
    /// subject's limit lives in one slot, so one master decides all its
    /// checks): [`check`](RateLimiter::check) and
    /// [`check_n`](RateLimiter::check_n) take a slice of the subject's
    /// quota from Redis in one script call — sized from this process's
    /// recent rate for the subject, at most half the declared bound, and
    /// lasting a [lifetime](Slices::lasting), or longer for a subject
    /// checked too slowly for that to hold a take's worth —
    /// decide from it locally, and give back what they did not use when
    /// the slice ends (one call, combined with the next take). The slices
    /// of a subject held by all processes never sum past the declared
    /// bound, `floor(limit × fraction)` units, tracked in Redis in the
    /// subject's slot: at most what an exact check admits **plus the
    /// bound** is admitted in any interval. When no slice can be had (the
    /// bound is taken, the subject blocked or overridden smaller) the check
    /// is exact; when the limit is spent the request is denied until the
    /// earliest time Redis could admit it, and for a pause of at least a
    /// sixteenth of the lifetime, longer if this process's share of what
    /// comes back would not make a slice worth a take by then: a spent
    /// limit is asked again once per pause, not per request, and the units
    /// that come back meanwhile wait in Redis for the next take
    /// ([`sliced`](crate::Decision#structfield.sliced) set).
    ///
    /// Only [`Algorithm::Gcra`] (the default): its state is one number, so
    /// a slice of `n` is `n` cells consumed and giving back `n` is a
    /// [`reward`](RateLimiter::reward), exact whenever it happens. A
    /// window's or a log's units belong to a time: given back later they
    /// would free what another window or time counted. [`build`](Self::build)
    /// refuses slices for other algorithms, and in shadow mode. Resets,
    /// blocks and override changes revoke every process's slice of the
    /// subject through the deny caches' invalidation channel (within one
    /// delivery latency); the failure policy applies to the take. A
    /// process that dies holding a slice loses at most that slice, which
    /// Redis forgets after twice its lifetime. Peeks, `check_many`,
    /// `until_ready` and multi-limiters stay exact.
    ///
    /// **Which subjects**: every subject checked (up to
    /// [`Slices::max_subjects`]), or, with [`Slices::when_hot`]
    /// (automatic slicing), only those this process checks above a
    /// threshold (default 8 units per longest slice, 10 lifetimes: 8 checks
    /// a second with 100 ms slices), each only while it stays above half
    /// of it — nobody
    /// needs to know beforehand which subjects are hot. With automatic
    /// slicing every other check is exact and counted in a sketch of this
    /// limiter's checks (a mutex and a hash lookup on a check that goes to
    /// Redis anyway); a limiter without it counts nothing. The bound holds
    /// in both modes and across a subject's transitions. The argument for
    /// the bound and the measurements:
    /// [docs/hot-subjects.md](https://github.com/shardlimit/shardlimit/blob/main/docs/hot-subjects.md).
    /// Default: no slices.
    #[cfg(feature = "slices")]
    #[cfg_attr(docsrs, doc(cfg(feature = "slices")))]
    pub fn slices(mut self, slices: Slices) -> Self {
        self.stages.slices = Some(slices);
        self
    }

    /// Whether this limiter reports the subjects it denies most to the
    /// "throttled now" view ([`admin::throttled`](crate::admin::throttled()),
    /// `shardlimit top`, the Limits page). **Default `true`.**
    ///
    /// Every denial, by Redis, by the deny cache or from a quota slice,
    /// from [`check`](RateLimiter::check), a
    /// [`MultiLimiter`](crate::MultiLimiter),
    /// [`check_many`](RateLimiter::check_many) or the tower and tonic
    /// layers, is counted in Space-Saving sketches of this process (the
    /// top 100 subjects per kind and name): one covering the last
    /// [`throttled_window`](Self::throttled_window), one the last
    /// publication interval (each subject's denials per second over the
    /// last 5 s). A background task, started at the first denial, publishes
    /// them with this name's allowed/denied/cached/bypassed counts every
    /// 5 s to one key per process with a 15 s TTL — only while this
    /// process has denials in its window, and once after: a process that
    /// denies nothing sends nothing. See
    /// [the admin docs](crate::admin::throttled()) for what is read.
    ///
    /// What it costs:
    ///
    /// * an admitted request: nothing;
    /// * a denial: one uncontended mutex, a clock read and two sketch
    ///   updates, under 1 µs on this project's 2-core test machine
    ///   ([docs/observability.md](https://github.com/shardlimit/shardlimit/blob/main/docs/observability.md#throttled-now-what-a-process-publishes)
    ///   has the bench and numbers) — against a denial's round trip to
    ///   Redis of 100 µs and more;
    /// * on Redis, while a process is denying: one script call every 5 s
    ///   (a `SET` of the report, at most 100 subjects per name, and a
    ///   `ZADD` to the index), all processes of a namespace on the one
    ///   master of the `{shardlimit:throttled}` slot — 1,000 processes
    ///   denying at once are 200 calls a second there; the view reads at
    ///   most 1,000 processes;
    /// * memory: two sketches of 100 subjects per kind and name, plus the
    ///   window's six slices.
    ///
    /// Turn it off (`false`) where none of that is wanted — a limiter
    /// whose subjects must not be shown to operators (a credential is
    /// shown as the keyed digest the HTTP and gRPC layers limit), or a fleet
    /// of more than 1,000 processes denying at once; off, a denial costs
    /// one `Option` test. A shadow limiter denies nothing, so it reports
    /// nothing. A failed publication is tried again 5 s later, logged at
    /// `debug` when transient and warned about once when not (an ACL
    /// without `ZADD`, say), so a view left empty by configuration is not
    /// silent.
    ///
    /// ```no_run
    /// # async fn demo(cluster: shardlimit::Cluster) -> shardlimit::Result<()> {
    /// use std::num::NonZeroU32;
    /// use shardlimit::{Quota, RateLimiter};
    ///
    /// let api = RateLimiter::builder(&cluster, "api", Quota::per_minute(NonZeroU32::new(60).unwrap()))
    ///     .build()?; // reports: the default
    /// let quiet = RateLimiter::builder(&cluster, "internal", Quota::per_second(NonZeroU32::new(100).unwrap()))
    ///     .report_throttled(false)
    ///     .build()?;
    /// // Any process, a few seconds after a denial:
    /// for name in shardlimit::admin::throttled(&cluster).await?.names {
    ///     println!("{} {}: {} denials", name.kind, name.name, name.denials);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn report_throttled(mut self, report: bool) -> Self {
        self.stages.report_throttled = report;
        self
    }

    /// Whether a check of this limiter alone may be decided from plain
    /// commands instead of a script, where its algorithm allows it (the
    /// fixed window): about twice the decisions per second where Redis is
    /// the bottleneck, with the differences the
    /// [crate docs](crate::limit#plain-commands) state. Default: `true`.
    /// A limiter with a [deny cache](Self::deny_cache) runs its script
    /// (a plain check's count holds other requests' units for a round
    /// trip while they are denied and given back, which a cached denial
    /// could outlive). A [`check_many`](RateLimiter::check_many) of such
    /// a limiter sends its checks as plain commands too, one pipeline per
    /// master. Peeks, multi-limits and the other algorithms always run
    /// their script.
    pub fn plain_commands(mut self, plain: bool) -> Self {
        self.stages.plain_commands = plain;
        self
    }

    /// Remembers up to `max_subjects` subjects found to have no settings
    /// of this limiter — neither an [override](RateLimiter::set_override)
    /// nor a [block](RateLimiter::block), as almost none have — so that
    /// their checks do not read those two keys: the script reads one key
    /// instead of three, and a check made of
    /// [plain commands](crate::limit#plain-commands) sends two commands
    /// instead of three, in [`check_many`](RateLimiter::check_many) too;
    /// a multi-limit still reads them. Default: off.
    ///
    /// Every write of a setting is announced on the subject's slot
    /// channel by the script that makes it, and every process with such a
    /// cache follows those channels (as a deny cache does: one connection
    /// per master, `SSUBSCRIBE` to each slot's channel; `SUBSCRIBE` on a
    /// standalone server or Sentinel primary), forgetting the subject it
    /// hears of; a lost subscription forgets the subjects of its slots and
    /// remembers none of them until it is back. A setting written while a
    /// check is in flight applies from the next check, at most one round
    /// trip late. Errors in `build` if `max_subjects` is 0.
    ///
    /// ```no_run
    /// # async fn demo(cluster: shardlimit::Cluster) -> shardlimit::Result<()> {
    /// use std::num::NonZeroU32;
    /// use shardlimit::{Algorithm, Quota, RateLimiter};
    ///
    /// let api = RateLimiter::builder(&cluster, "api", Quota::per_minute(NonZeroU32::new(600).unwrap()))
    ///     .algorithm(Algorithm::FixedWindow)
    ///     .subject_settings_cache(100_000)
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn subject_settings_cache(mut self, max_subjects: u64) -> Self {
        self.stages.settings_cache = Some(max_subjects);
        self
    }

    /// How far back the "throttled now" view counts this limiter's
    /// denials ([`report_throttled`](Self::report_throttled)): 6 s to 1 h.
    /// Default 60 s. Six sketches of a sixth each, the oldest dropped as a
    /// new one starts, so a subject leaves the view at most `window` after
    /// its last denial. Limiters of one kind and name in a process share
    /// one sketch; the first one built sets the window.
    pub fn throttled_window(mut self, window: Duration) -> Self {
        self.stages.throttled_window = window;
        self
    }

    /// Validates the name (`[A-Za-z0-9_.-]{1,64}`) and the quota for the
    /// algorithm (see [`Quota#bounds`](Quota#bounds): period whole
    /// milliseconds, 1 ms to 366 days; limit up to
    /// [`Algorithm::max_limit`]; a burst only for GCRA, refilling within 366
    /// days). A quota out of bounds is an
    /// [`Error::Config`](crate::Error::Config) naming the field.
    ///
    /// Waits for nothing: the limiter's spec is published to the
    /// [catalog](crate::limit#the-catalog) by a background task (started
    /// here, or at the first check when built outside a tokio runtime).
    pub fn build(self) -> Result<RateLimiter> {
        let spec = LimitSpec::new(&self.name, self.algorithm, self.quota, self.shadow)?;
        let stages = Stages::compose(&self.cluster, &spec, self.policy, self.stages)?;
        let inner = Arc::new(Inner {
            core: Core::new(self.cluster, spec.id.clone()),
            spec: ArcSwap::from_pointee(spec),
            policy: self.policy,
            stages,
        });
        catalog::start(&inner);
        Ok(RateLimiter { inner })
    }
}

impl RateLimiter {
    /// A builder for a limiter named `name` enforcing `quota`.
    pub fn builder(cluster: &Cluster, name: impl Into<String>, quota: Quota) -> RateLimiterBuilder {
        RateLimiterBuilder {
            cluster: cluster.clone(),
            name: name.into(),
            quota,
            algorithm: Algorithm::default(),
            policy: FailurePolicy::default(),
            shadow: false,
            stages: StageLines::default(),
        }
    }
}
