//! The operator's actions beyond a reset, for the Limits page: lift a
//! subject's block, clear its override, give a key without a TTL one — and
//! the reads their confirmations show.
//!
//! Blocks and overrides go through the library's own
//! [`RateLimiter::unblock`] and [`RateLimiter::clear_override`] (one key
//! layout, one script, every process's deny cache told), on a handle that
//! publishes no spec ([`publish_spec(false)`](crate::limit::RateLimiterBuilder::publish_spec)).

use std::num::NonZeroU32;
use std::time::Duration;

use super::Scanner;
use crate::Quota;
use crate::error::{Error, Result};
use crate::keys::{KeySet, ParsedKey};
use crate::limit::{Algorithm, RateLimiter, SubjectSettings};
use crate::scripts::{KEY_GIVE_TTL, KEY_STATE, NO_ARGS};

/// The shortest TTL [`Scanner::give_ttl`] gives: 1 s.
pub const MIN_GIVEN_TTL: Duration = Duration::from_secs(1);

/// The longest TTL [`Scanner::give_ttl`] gives: 366 days.
pub const MAX_GIVEN_TTL: Duration = Duration::from_secs(366 * 86_400);

/// The default quota of the handle the actions build: never applied nor
/// published. Of the quota, the adjust script's `unblock`, `unoverride` and
/// `read` use only the algorithm's kind (src/scripts/limit_adjust.lua).
const UNUSED_QUOTA: Quota = Quota::new(NonZeroU32::MIN, Duration::from_secs(1));

/// One key as [`Scanner::key_state`] finds it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyState {
    /// Its Redis type (`string`, `hash`, `zset`, …); `none` when the key
    /// does not exist.
    pub redis_type: String,
    /// Its TTL; `None` when it has none (or does not exist).
    pub ttl: Option<Duration>,
}

impl KeyState {
    /// Whether the key exists.
    pub fn exists(&self) -> bool {
        self.redis_type != "none"
    }
}

impl Scanner {
    /// `subject`'s override and block of the rate limiter `kind`/`name`.
    ///
    /// ```no_run
    /// # async fn demo(scanner: shardlimit::admin::Scanner) -> shardlimit::Result<()> {
    /// let settings = scanner.subject_settings("gcra", "api", b"user:42").await?;
    /// println!("blocked for {:?}", settings.blocked_for);
    /// # Ok(()) }
    /// ```
    pub async fn subject_settings(
        &self,
        kind: &str,
        name: &str,
        subject: &[u8],
    ) -> Result<SubjectSettings> {
        self.rate_limiter(kind, name)?
            .subject_settings(subject)
            .await
    }

    /// Lifts `subject`'s block of the rate limiter `kind`/`name`, if any;
    /// returns the settings left (its override, if any).
    pub async fn unblock(&self, kind: &str, name: &str, subject: &[u8]) -> Result<SubjectSettings> {
        let limiter = self.rate_limiter(kind, name)?;
        limiter.unblock(subject).await?;
        limiter.subject_settings(subject).await
    }

    /// Removes `subject`'s override of the rate limiter `kind`/`name`: its
    /// default quota applies again (a block stays). Returns the settings
    /// left.
    pub async fn clear_override(
        &self,
        kind: &str,
        name: &str,
        subject: &[u8],
    ) -> Result<SubjectSettings> {
        self.rate_limiter(kind, name)?.clear_override(subject).await
    }

    /// A key's Redis type and TTL: one script call on its slot. The key
    /// must be of this scanner's namespace.
    pub async fn key_state(&self, key: &[u8]) -> Result<KeyState> {
        let keys = self.own_key(key)?;
        let (redis_type, pttl): (String, i64) =
            self.cluster.eval(&KEY_STATE, &keys, NO_ARGS).await?;
        let ttl = u64::try_from(pttl).ok().map(Duration::from_millis);
        Ok(KeyState { redis_type, ttl })
    }

    /// Gives `key` — of this scanner's namespace, without a TTL (as the
    /// audit finds them) — a TTL of `ttl` (1 s to 366 days). A TTL the key
    /// has is never changed: returns `false` when it has one by now, or is
    /// gone.
    ///
    /// ```no_run
    /// # async fn demo(scanner: shardlimit::admin::Scanner) -> shardlimit::Result<()> {
    /// use std::time::Duration;
    /// for (key, _node) in scanner.audit().await?.immortal {
    ///     scanner.give_ttl(&key, Duration::from_secs(86_400)).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn give_ttl(&self, key: &[u8], ttl: Duration) -> Result<bool> {
        if !(MIN_GIVEN_TTL..=MAX_GIVEN_TTL).contains(&ttl) {
            return Err(Error::Config {
                field: "ttl",
                reason: format!(
                    "a TTL given to a key is 1 s to 366 days (longer: set it again later), not {ttl:?}"
                ),
            });
        }
        let keys = self.own_key(key)?;
        let millis = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        let given: i64 = self.cluster.eval(&KEY_GIVE_TTL, &keys, millis).await?;
        Ok(given == 1)
    }

    /// `key` alone, refused unless it is a key of this namespace's layout:
    /// the actions touch nothing else.
    fn own_key(&self, key: &[u8]) -> Result<KeySet> {
        match ParsedKey::parse(key) {
            Ok(parsed) if parsed.namespace == self.cluster.namespace() => {
                KeySet::checked(vec![key.to_vec()])
            }
            _ => Err(Error::Config {
                field: "key",
                reason: format!(
                    "{:?} is not a key of namespace {:?}",
                    String::from_utf8_lossy(key),
                    self.cluster.namespace()
                ),
            }),
        }
    }

    /// A handle on the rate limiter `kind`/`name` that publishes nothing.
    fn rate_limiter(&self, kind: &str, name: &str) -> Result<RateLimiter> {
        let algorithm = Algorithm::from_kind(kind).ok_or_else(|| Error::Config {
            field: "kind",
            reason: format!(
                "{kind:?} is not a rate limiter's kind (fw, slog, swc or gcra): only rate limiters have blocks and overrides"
            ),
        })?;
        RateLimiter::builder(&self.cluster, name, UNUSED_QUOTA)
            .algorithm(algorithm)
            .publish_spec(false)
            .build()
    }
}
