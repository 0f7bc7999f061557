//! Lua scripts: one `.lua` file per operation, loaded by SHA1.
//!
//! Each script's header documents its `KEYS`, `ARGV` and reply. The cluster
//! layer sends `EVALSHA` and falls back to `EVAL` (which also caches the
//! script) when a node answers `NOSCRIPT` — after a restart, a failover to a
//! fresh replica, or the first call on a node.

use std::borrow::Cow;
use std::fmt;

/// `ARGV` for a script that takes none: `cluster.eval(&script, &keys, NO_ARGS)`.
pub const NO_ARGS: &[&str] = &[];

/// A Lua script, hashed once.
///
/// Keep scripts in `static`s (e.g. a `LazyLock`) so the SHA1 is computed once
/// per process.
///
/// ```
/// use shardlimit::Script;
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
