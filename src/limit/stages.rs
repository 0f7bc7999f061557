//! A rate limiter's stages: what a check may do beside the exact check in
//! Redis, each turned on by one line of the
//! [`RateLimiterBuilder`](super::RateLimiterBuilder), each in a module of
//! its own here, and all composed in this one place ([`Stages::compose`]).
//!
//! | stage | builder line | where | its work |
//! |---|---|---|---|
//! | deny cache | `deny_cache(max)`, feature `deny-cache` | `stages/deny_cache.rs` | answers a denial again before sending; keeps the denials Redis gives |
//! | subject-settings cache | `subject_settings_cache(max)` | `stages/settings_cache.rs` | skips the override and block of a subject known to have neither |
//! | local fallback | `failure_policy(FailurePolicy::Local { .. })` | `stages/local.rs`, `stages/local/` | learns from each reply; decides when Redis cannot, and settles that before Redis decides again |
//! | quota slices | `slices(..)`, feature `slices` | `stages/slices.rs`, `stages/slices/` | decides a hot subject's checks from a slice this process holds |
//! | throttled reporting | `report_throttled(true)` (the default) | `src/throttled/` | records each denial, published for "throttled now" |
//! | catalog publishing | `publish_spec(true)` (the default) | `limit/catalog.rs` | a background task keeps the limiter's spec in the catalog |
//!
//! The exact check itself is `limit/check.rs`: a script, or for a fixed
//! window [plain commands](crate::limit#plain-commands) (`check/plain.rs`,
//! `plain_commands(true)`, the default) — how the exact check is sent, not
//! a stage around it. Shadow mode (`shadow(true)`) is not a stage either:
//! it is part of the limit's spec, and every algorithm's script decides
//! with it, inside the one atomic decision.
//!
//! **In a check** (`limit/check.rs` runs it, in this order): the slices
//! answer first if they can (`stages/slices/check.rs`); a request is
//! validated and the deny cache asked; the local fallback settles what it
//! admitted alone; the settings cache picks the form of the exact check;
//! the reply teaches the local fallback, is counted, a denial is reported
//! ([`Stages::denied`]) and offered to the deny cache; a failure goes to
//! the failure policy, where the local fallback decides.
//!
//! **A stage a limiter was built without is `None` here**, and the check
//! does none of its work: no lookup, no hashing, no background task, no
//! subscription. The two heaviest — the deny cache (with the invalidation
//! subscriptions it needs) and quota slices (with automatic slicing's
//! sketch and the slice scripts) — are also cargo features, on by default:
//! a service that needs neither builds without them
//! (`default-features = false`).
//!
//! **Adding a stage** is a module here, a field of [`Stages`] and
//! [`StageLines`], its builder line, and its call in `check.rs` at the
//! step where it acts.

use std::sync::Arc;
use std::time::Duration;

use super::catalog::{CATALOG_REFRESH, CATALOG_TTL, Publication};
use super::check::plain::PlainPath;
use super::script::LimitSpec;
use crate::cluster::Cluster;
use crate::error::{Error, Result};
use crate::outcomes::Outcomes;
use crate::policy::FailurePolicy;
use crate::throttled::publish;
use crate::throttled::recorder::{DEFAULT_WINDOW, Recorder};

#[cfg(feature = "deny-cache")]
pub(crate) mod deny_cache;
pub(crate) mod local;
pub(crate) mod settings_cache;
#[cfg(feature = "slices")]
pub(crate) mod slices;

#[cfg(feature = "deny-cache")]
use self::deny_cache::DenyCache;
use self::local::LocalLimits;
use self::settings_cache::SettingsCache;
#[cfg(feature = "slices")]
use self::slices::{Slices, table::SliceTable};

/// What the builder's lines say of the stages, before they are built.
#[derive(Debug, Clone)]
pub(crate) struct StageLines {
    #[cfg(feature = "deny-cache")]
    pub(crate) deny_cache: Option<u64>,
    pub(crate) settings_cache: Option<u64>,
    pub(crate) plain_commands: bool,
    #[cfg(feature = "slices")]
    pub(crate) slices: Option<Slices>,
    pub(crate) report_throttled: bool,
    pub(crate) throttled_window: Duration,
    pub(crate) publish_spec: bool,
    pub(crate) catalog_refresh: Duration,
}

impl Default for StageLines {
    /// A limiter's defaults: exact checks on plain commands where the
    /// algorithm has them, denials reported, the spec published.
    fn default() -> Self {
        StageLines {
            #[cfg(feature = "deny-cache")]
            deny_cache: None,
            settings_cache: None,
            plain_commands: true,
            #[cfg(feature = "slices")]
            slices: None,
            report_throttled: true,
            throttled_window: DEFAULT_WINDOW,
            publish_spec: true,
            catalog_refresh: CATALOG_REFRESH,
        }
    }
}

/// One limiter's stages, as built: `None` for each it was built without.
#[derive(Debug)]
pub(crate) struct Stages {
    /// Shared with the [`MultiLimiter`](super::MultiLimiter) made from
    /// this limiter alone, which checks exactly as it does.
    #[cfg(feature = "deny-cache")]
    pub(crate) deny_cache: Option<Arc<DenyCache>>,
    pub(crate) settings: Option<SettingsCache>,
    /// How its exact checks are sent when plain commands can decide them.
    pub(crate) plain: Option<PlainPath>,
    /// The local limiters of [`FailurePolicy::Local`].
    pub(crate) local: Option<LocalLimits>,
    #[cfg(feature = "slices")]
    pub(crate) slices: Option<Arc<SliceTable>>,
    /// Where its denials go, when it reports what it throttles.
    pub(crate) throttled: Option<Arc<Recorder>>,
    /// Its spec's publication to the catalog (see `limit/catalog.rs`);
    /// never started when it does not publish.
    pub(crate) publication: Publication,
}

impl Stages {
    /// Builds the stages `lines` ask for around `spec`, validating each
    /// line against the spec and the others; nothing is sent and no task
    /// is started (the catalog's starts with the limiter).
    pub(crate) fn compose(
        cluster: &Cluster,
        spec: &LimitSpec,
        policy: FailurePolicy,
        lines: StageLines,
    ) -> Result<Stages> {
        let most = CATALOG_TTL / 3;
        if !(Duration::from_millis(100)..=most).contains(&lines.catalog_refresh) {
            return Err(Error::Config {
                field: "catalog_refresh",
                reason: format!(
                    "{:?} is outside 100ms..={most:?} (a third of the catalog's TTL)",
                    lines.catalog_refresh
                ),
            });
        }
        #[cfg(feature = "deny-cache")]
        let deny_cache = match lines.deny_cache {
            None => None,
            Some(max) => Some(Arc::new(DenyCache::new(
                cluster,
                deny_cache::room(max)?,
                vec![(spec.id.kind().to_owned(), spec.id.name().to_owned())],
            ))),
        };
        publish::validate_window(lines.throttled_window)?;
        let throttled = lines.report_throttled.then(|| {
            publish::recorder(
                cluster,
                spec.id.kind(),
                spec.id.name(),
                lines.throttled_window,
            )
        });
        let local = match policy {
            FailurePolicy::Local { instances } => {
                let local = LocalLimits::new(instances);
                local.validate(spec)?;
                Some(local)
            }
            _ => None,
        };
        #[cfg(feature = "slices")]
        let slices = match lines.slices {
            Some(slices) => {
                slices.validate(spec)?;
                Some(SliceTable::new(cluster, spec, slices)?)
            }
            None => None,
        };
        // A deny cache keeps a denial until the request could pass; a plain
        // check's count holds other requests' units for a round trip while
        // they are denied and given back, unannounced, so a denial it made
        // could be kept past that: a limiter with a deny cache runs its
        // script.
        #[cfg(feature = "deny-cache")]
        let plain_allowed = deny_cache.is_none();
        #[cfg(not(feature = "deny-cache"))]
        let plain_allowed = true;
        let plain =
            (lines.plain_commands && plain_allowed && spec.algorithm.rules().plain.is_some())
                .then(|| PlainPath::new(cluster));
        let settings = match lines.settings_cache {
            None => None,
            Some(max) => Some(SettingsCache::new(
                cluster,
                at_least_one(
                    max,
                    "subject_settings_cache",
                    "a subject-settings cache needs room for at least one subject",
                )?,
                spec.id.kind(),
                spec.id.name(),
            )),
        };
        Ok(Stages {
            #[cfg(feature = "deny-cache")]
            deny_cache,
            settings,
            plain,
            local,
            #[cfg(feature = "slices")]
            slices,
            throttled,
            publication: if lines.publish_spec {
                Publication::new(lines.catalog_refresh)
            } else {
                Publication::never(lines.catalog_refresh)
            },
        })
    }

    /// Errors if a stage cannot work under `next` (the local fallback
    /// decides only what it can count), before it replaces the spec.
    pub(crate) fn validate_spec(&self, next: &LimitSpec) -> Result<()> {
        match &self.local {
            Some(local) => local.validate(next),
            None => Ok(()),
        }
    }

    /// A new spec has just replaced the limiter's: nothing decided under
    /// the one before (a cached denial, a slice taken) answers a check,
    /// and the catalog hears of it.
    pub(crate) fn replaced(&self) {
        #[cfg(feature = "deny-cache")]
        if let Some(cache) = &self.deny_cache {
            cache.clear();
        }
        #[cfg(feature = "slices")]
        if let Some(slices) = &self.slices {
            slices.revoke_all();
        }
        self.publication.changed();
    }

    /// Counts a denial of `subject` (`cached`: answered by the deny cache)
    /// and reports it to the "throttled now" view if the limiter reports
    /// there — every path that denies (Redis' reply, the deny cache, a
    /// quota slice) comes through here.
    pub(crate) fn denied(
        &self,
        cluster: &Cluster,
        outcomes: &Outcomes,
        subject: &[u8],
        cached: bool,
    ) {
        if cached {
            outcomes.denied_cached();
        } else {
            outcomes.denied();
        }
        if let Some(throttled) = self.throttled.as_deref() {
            throttled.denied(subject);
            publish::denied(cluster, throttled);
        }
    }
}

/// `max`, refused as `field`'s error (`reason`) when 0.
fn at_least_one(max: u64, field: &'static str, reason: &str) -> Result<u64> {
    if max == 0 {
        return Err(Error::Config {
            field,
            reason: reason.into(),
        });
    }
    Ok(max)
}
