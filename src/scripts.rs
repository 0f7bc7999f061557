//! Lua scripts: one `.lua` file per operation, loaded by SHA1.
//!
//! Each script's header documents its `KEYS`, `ARGV` and reply. The cluster
//! layer sends `EVALSHA` and falls back to `EVAL` (which also caches the
//! script) when a node answers `NOSCRIPT` — after a restart, a failover to a
//! fresh replica, or the first call on a node.

use std::borrow::Cow;
use std::fmt;
use std::sync::LazyLock;

/// The operation name of a transaction (MULTI/EXEC) in errors, traces and
/// metrics, beside the scripts' names.
pub(crate) const TRANSACTION_OP: &str = "transaction";

/// `ARGV` for a script that takes none: `cluster.eval(&script, &keys, NO_ARGS)`.
pub const NO_ARGS: &[&str] = &[];

/// A Lua script, hashed once.
///
/// Keep scripts in `static`s (e.g. a `LazyLock`) so the SHA1 is computed once
/// per process.
///
/// ```
/// use shardlimit::cluster::Script;
/// let script = Script::new("incr", "return redis.call('INCR', KEYS[1])");
/// assert_eq!(script.name(), "incr");
/// assert_eq!(script.sha1().len(), 40);
/// ```
#[derive(Clone)]
pub struct Script {
    name: Cow<'static, str>,
    code: Cow<'static, str>,
    sha1: String,
}

impl Script {
    /// A script named `name` (used in errors and traces) with body `code`.
    #[must_use]
    pub fn new(name: impl Into<Cow<'static, str>>, code: impl Into<Cow<'static, str>>) -> Self {
        let code = code.into();
        let sha1 = redis::Script::new(&code).get_hash().to_owned();
        Script {
            name: name.into(),
            code,
            sha1,
        }
    }

    /// The name given at construction.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The name, cheap to clone for errors.
    pub(crate) fn name_cow(&self) -> Cow<'static, str> {
        self.name.clone()
    }

    /// The Lua source.
    #[must_use]
    pub fn code(&self) -> &str {
        &self.code
    }

    /// The script's SHA1, as `EVALSHA` wants it.
    #[must_use]
    pub fn sha1(&self) -> &str {
        &self.sha1
    }
}

impl fmt::Debug for Script {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Script")
            .field("name", &self.name)
            .field("sha1", &self.sha1)
            .finish_non_exhaustive()
    }
}

/// Declares the crate's scripts: `NAME => "file"` makes a `static NAME`
/// loaded from `src/scripts/file.lua`; `NAME => "name" ["a", "b", ...]`
/// concatenates `a.lua`, `b.lua`, ... into one script. Each is hashed on first
/// use and listed in `others()`. The rate-limit scripts, assembled from each
/// algorithm's file, are made in `limit::algorithm` from the parts below.
macro_rules! scripts {
    ($($ident:ident => $name:literal $([$($part:literal),+ $(,)?])?),* $(,)?) => {
        $(
            pub(crate) static $ident: LazyLock<Script> =
                LazyLock::new(|| Script::new($name, scripts!(@code $name $([$($part),+])?)));
        )*

        /// The scripts declared here (not the rate-limit checks).
        pub(crate) fn others() -> Vec<&'static Script> {
            vec![$(&*$ident),*]
        }
    };
    (@code $name:literal) => { include_str!(concat!("scripts/", $name, ".lua")) };
    (@code $name:literal [$($part:literal),+]) => {
        concat!($(include_str!(concat!("scripts/", $part, ".lua"))),+)
    };
}

/// The server's clock, read once: first in every script that needs the time.
pub(crate) const CLOCK: &str = include_str!("scripts/clock.lua");
/// The checks of numbers written: after the clock in the scripts that
/// adjust a limit (not in the checks: each `decide` checks its own).
pub(crate) const NUMBERS: &str = include_str!("scripts/numbers.lua");
/// The one-limit check's driver, after the algorithm's file.
pub(crate) const ONE_LIMIT: &str = include_str!("scripts/one_limit.lua");
/// The generic check's helpers, before every algorithm's file.
pub(crate) const LIMIT_PRELUDE: &str = include_str!("scripts/limit_prelude.lua");
/// The generic check's driver, after every algorithm's file.
pub(crate) const LIMIT_MAIN: &str = include_str!("scripts/limit_main.lua");
/// The adjustments' driver (reset, block, override, penalize, reward, ...),
/// after every algorithm's file.
pub(crate) const LIMIT_ADJUST: &str = include_str!("scripts/limit_adjust.lua");
/// The quota slices' driver, after GCRA's file.
pub(crate) const SLICE: &str = include_str!("scripts/slice.lua");

/// The names of the scripts of the hot path, for the latency histograms
/// found without a lock (`metrics.rs`): the rate-limit checks (the
/// default algorithm first), then the rest. A script not listed is still
/// measured, through a locked map.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) const NAMES: &[&str] = &[
    "gcra",
    "multi_limit",
    "fixed_window",
    "sliding_window",
    "sliding_log",
    "limit_adjust",
    "key_read",
    "key_state",
    "key_give_ttl",
    "catalog_publish",
    "lock_acquire",
    "lock_extend",
    "lock_release",
    "lock_ttl",
    "lock_fence",
    "lease_acquire",
    "lease_extend",
    "lease_release",
    "counter_drain",
    "counter_get",
    "throttled_publish",
    "throttled_index",
    "throttled_read",
    "slice",
];

scripts! {
    // Scripts that need the time start with the clock prelude.
    KEY_READ => "key_read",
    // the Limits page's actions on one key (src/admin/scanner/actions.rs)
    KEY_STATE => "key_state",
    KEY_GIVE_TTL => "key_give_ttl",
    CATALOG_PUBLISH => "catalog_publish" ["clock", "catalog_publish"],
    // locks, leases, counters
    LOCK_ACQUIRE => "lock_acquire" ["clock", "lock_acquire"],
    LOCK_EXTEND => "lock_extend",
    LOCK_RELEASE => "lock_release",
    LOCK_TTL => "lock_ttl",
    LOCK_FENCE => "lock_fence",
    LEASE_ACQUIRE => "lease_acquire" ["clock", "lease_acquire"],
    LEASE_EXTEND => "lease_extend" ["clock", "lease_extend"],
    LEASE_RELEASE => "lease_release" ["clock", "lease_release"],
    COUNTER_DRAIN => "counter_drain",
    COUNTER_GET => "counter_get",
    // the throttled view (src/throttled/publish.rs)
    THROTTLED_PUBLISH => "throttled_publish" ["clock", "throttled_publish"],
    THROTTLED_INDEX => "throttled_index" ["clock", "throttled_index"],
    THROTTLED_READ => "throttled_read",
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique() {
        // The metrics tell scripts apart by name.
        let mut names = NAMES.to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), NAMES.len(), "{NAMES:?}");
        for script in others() {
            assert!(
                NAMES.contains(&script.name()),
                "{} is not in NAMES",
                script.name()
            );
        }
    }
}
