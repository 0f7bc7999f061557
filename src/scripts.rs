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
/// use and listed in `all()` for the tests below.
macro_rules! scripts {
    ($($ident:ident => $name:literal $([$($part:literal),+ $(,)?])?),* $(,)?) => {
        $(
            pub(crate) static $ident: LazyLock<Script> =
                LazyLock::new(|| Script::new($name, scripts!(@code $name $([$($part),+])?)));
        )*

        /// Every script's name, in declaration order (the hot path's
        /// latency histograms are indexed by it).
        #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
        pub(crate) const NAMES: &[&str] = &[$($name),*];

        #[cfg(test)]
        pub(crate) fn all() -> Vec<&'static Script> {
            vec![$(&*$ident),*]
        }
    };
    (@code $name:literal) => { include_str!(concat!("scripts/", $name, ".lua")) };
    (@code $name:literal [$($part:literal),+]) => {
        concat!($(include_str!(concat!("scripts/", $part, ".lua"))),+)
    };
}

scripts! {
    // Scripts that need the time start with the clock prelude.
    // limiters: the prelude, the algorithms used, the driver (the default
    // algorithm first: the metrics look names up in this order)
    // One limit of any algorithm: the generic check specialised (a third
    // less work for Redis), tested to agree with it
    // (tests/cluster/one_limit_checks.rs).
    GCRA => "gcra" ["clock", "one_limit", "gcra_check", "one_limit_end"],
    MULTI_LIMIT => "multi_limit" [
        "clock", "limit_prelude", "fixed_window", "sliding_log", "sliding_window", "gcra", "limit_main",
    ],
    FIXED_WINDOW => "fixed_window" ["clock", "one_limit", "fw_check", "one_limit_end"],
    SLIDING_WINDOW => "sliding_window" ["clock", "one_limit", "swc_check", "one_limit_end"],
    SLIDING_LOG => "sliding_log" ["clock", "one_limit", "slog_check", "one_limit_end"],
    LIMIT_ADJUST => "limit_adjust" [
        "clock", "limit_prelude", "fixed_window", "sliding_log", "sliding_window", "gcra", "limit_adjust",
    ],
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
    // quota slices of a hot GCRA subject (src/limit/slices.rs)
    SLICE => "slice" ["clock", "slice"],
}

/// Whether `script` is a one-limit check (`one_limit.lua` with an
/// algorithm's part): its `ARGV` leaves out the algorithm's code and
/// defaults, and its reply may be compact.
pub(crate) fn is_one_limit(script: &Script) -> bool {
    [&*GCRA, &*FIXED_WINDOW, &*SLIDING_WINDOW, &*SLIDING_LOG]
        .into_iter()
        .any(|one| one.name() == script.name())
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLOCK: &str = include_str!("scripts/clock.lua");

    #[test]
    fn names_are_unique() {
        // is_one_limit and the metrics tell scripts apart by name.
        let mut names = NAMES.to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), NAMES.len(), "{NAMES:?}");
        assert!(is_one_limit(&GCRA) && is_one_limit(&SLIDING_LOG));
        assert!(!is_one_limit(&MULTI_LIMIT) && !is_one_limit(&LIMIT_ADJUST));
    }

    #[test]
    fn the_server_clock_is_read_only_by_the_prelude() {
        for script in all() {
            let code = script.code();
            let reads = code.matches("redis.call('TIME')").count();
            let expected = usize::from(code.starts_with(CLOCK));
            assert_eq!(
                reads,
                expected,
                "{}: TIME read outside the clock prelude",
                script.name()
            );
        }
    }

    #[test]
    fn every_script_documents_keys_argv_and_reply() {
        for script in all() {
            // The clock prelude comes before the script's own header.
            let code = script.code();
            let code = code.strip_prefix(CLOCK).unwrap_or(code);
            let header: String = code
                .lines()
                .take_while(|l| l.starts_with("--"))
                .collect::<Vec<_>>()
                .join("\n");
            for section in ["KEYS", "ARGV", "Reply"] {
                assert!(
                    header.contains(section),
                    "{}.lua: header must document {section}",
                    script.name()
                );
            }
            assert!(
                !script.code().contains("KEYS[") || header.contains("KEYS["),
                "{}.lua: document each KEYS[i] it uses",
                script.name()
            );
        }
    }
}
