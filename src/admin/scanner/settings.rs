//! A rate limiter's per-subject settings as the scanner reads them: the
//! override (part `quota`, `"limit period_us burst"`) and the block (part
//! `block`, the server time in µs the subject is blocked until, expiring
//! then) that [`RateLimiter::set_override`](crate::RateLimiter::set_override)
//! and [`RateLimiter::block`](crate::RateLimiter::block) keep next to the
//! subject's state key. They are read with the limiter's state and reported
//! with it, never as primitives of their own.

use std::time::Duration;

use redis::Value;

use super::reply::{int, ttl};
use crate::keys::ParsedKey;
use crate::limit::{Algorithm, SubjectSettings, parse_override};

/// The parts of a subject's override and block, as the limiters name them
/// (`OVERRIDE_PART` and `BLOCK_PART` in src/limit/script.rs, private to
/// the limiters); tests/cluster/admin.rs finds what the library wrote under them.
const OVERRIDE_PART: &str = "quota";
const BLOCK_PART: &str = "block";

/// Which of a rate limiter's keys a scanned key is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Role {
    State,
    Override,
    Block,
}

/// A rate limiter's three keys for one subject.
pub(super) struct LimiterKeys {
    pub(super) state: Vec<u8>,
    pub(super) quota: Vec<u8>,
    pub(super) block: Vec<u8>,
}

/// What the settings reads found.
pub(super) struct Read {
    pub(super) settings: SubjectSettings,
    /// The override and block keys in force, in that order.
    pub(super) present: Vec<Vec<u8>>,
    /// The first one's TTL: what a limiter with no state shows as its TTL.
    pub(super) ttl: Option<Duration>,
    /// The override key, when it holds what the check script refuses (not
    /// three integers, or not a string): the subject's checks of this
    /// limiter fail until it is fixed or expires.
    pub(super) malformed: Option<Vec<u8>>,
}

impl LimiterKeys {
    /// Replies [`queue`](Self::queue) adds to a pipeline.
    pub(super) const READS: usize = 3;

    /// For a rate limiter's state, override or block key (`key`, parsed):
    /// the limiter's three keys for the subject, and which one `key` is.
    /// `None` for other kinds and other parts.
    pub(super) fn of(key: &[u8], parsed: &ParsedKey<'_>) -> Option<(LimiterKeys, Role)> {
        Algorithm::from_kind(parsed.kind)?;
        let role = match parsed.part {
            None => Role::State,
            Some(OVERRIDE_PART) => Role::Override,
            Some(BLOCK_PART) => Role::Block,
            Some(_) => return None,
        };
        // The parser split the key at its colons and checked every field:
        // the state key is this key without `:<part>`.
        let state = match parsed.part {
            None => key,
            Some(part) => key.strip_suffix(part.as_bytes())?.strip_suffix(b":")?,
        };
        let with = |part: &str| [state, b":", part.as_bytes()].concat();
        let keys = LimiterKeys {
            quota: with(OVERRIDE_PART),
            block: with(BLOCK_PART),
            state: state.to_vec(),
        };
        Some((keys, role))
    }

    /// The keys that stand for the limiter before the one with `role`: a
    /// part key is reported (and counted) only when they are all gone, so
    /// the state key stands for the limiter, then the override, then the
    /// block.
    pub(super) fn before(&self, role: Role) -> Vec<Vec<u8>> {
        match role {
            Role::State => Vec::new(),
            Role::Override => vec![self.state.clone()],
            Role::Block => vec![self.state.clone(), self.quota.clone()],
        }
    }

    /// `GET` and `PTTL` of the override, `PTTL` of the block (it expires
    /// when the block ends: its TTL is what is left of it).
    pub(super) fn queue(&self, pipe: &mut redis::Pipeline) {
        pipe.cmd("GET")
            .arg(&self.quota)
            .cmd("PTTL")
            .arg(&self.quota)
            .cmd("PTTL")
            .arg(&self.block);
    }

    /// Decodes the [`READS`](Self::READS) replies of [`queue`](Self::queue).
    /// A key gone or written between two of the reads counts as absent.
    pub(super) fn decode(&self, replies: &[Value]) -> Read {
        let quota_ttl = ttl(int(replies.get(1)));
        let block_ttl = ttl(int(replies.get(2)));
        let (mut override_quota, mut malformed) = (None, None);
        if quota_ttl.is_some() {
            match replies.first() {
                Some(Value::BulkString(text)) => {
                    override_quota = std::str::from_utf8(text).ok().and_then(parse_override);
                    if override_quota.is_none() {
                        malformed = Some(self.quota.clone());
                    }
                }
                Some(Value::Nil) | None => {}
                // Another type (WRONGTYPE): the check script's GET fails too.
                Some(_) => malformed = Some(self.quota.clone()),
            }
        }
        let blocked_for = block_ttl.flatten().filter(|left| !left.is_zero());
        let (mut present, mut first_ttl) = (Vec::new(), None);
        if override_quota.is_some() {
            present.push(self.quota.clone());
            first_ttl = quota_ttl.flatten();
        }
        if blocked_for.is_some() {
            present.push(self.block.clone());
            first_ttl = first_ttl.or(blocked_for);
        }
        Read {
            settings: SubjectSettings {
                override_quota,
                override_ttl: override_quota.and(quota_ttl.flatten()),
                blocked_for,
            },
            present,
            ttl: first_ttl,
            malformed,
        }
    }
}

/// No override and no block: the settings of every primitive that is not a
/// rate limiter.
pub(super) fn none() -> SubjectSettings {
    SubjectSettings {
        override_quota: None,
        override_ttl: None,
        blocked_for: None,
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use super::*;
    use crate::limit::Quota;

    fn nz(n: u32) -> NonZeroU32 {
        NonZeroU32::new(n).unwrap()
    }

    #[test]
    fn a_limiters_keys_are_found_from_any_of_them() {
        for (key, role) in [
            (&b"sl:{u:1}:gcra:api"[..], Role::State),
            (b"sl:{u:1}:gcra:api:quota", Role::Override),
            (b"sl:{u:1}:gcra:api:block", Role::Block),
        ] {
            let parsed = ParsedKey::parse(key).unwrap();
            let (keys, found) = LimiterKeys::of(key, &parsed).unwrap();
            assert_eq!(found, role);
            assert_eq!(keys.state, b"sl:{u:1}:gcra:api");
            assert_eq!(keys.quota, b"sl:{u:1}:gcra:api:quota");
            assert_eq!(keys.block, b"sl:{u:1}:gcra:api:block");
        }
        assert_eq!(
            LimiterKeys::of(
                b"sl:{u:1}:gcra:api",
                &ParsedKey::parse(b"sl:{u:1}:gcra:api").unwrap()
            )
            .unwrap()
            .0
            .before(Role::Block)
            .len(),
            2
        );
        for other in [
            &b"sl:{u:1}:lock:job:fence"[..],
            b"sl:{u:1}:gcra:api:other",
            b"sl:{u:1}:lock:job",
        ] {
            assert!(LimiterKeys::of(other, &ParsedKey::parse(other).unwrap()).is_none());
        }
    }

    #[test]
    fn settings_decode_from_the_replies() {
        let key = b"sl:{u:1}:fw:api";
        let (keys, _) = LimiterKeys::of(key, &ParsedKey::parse(key).unwrap()).unwrap();
        let found = keys.decode(&[
            Value::BulkString(b"5 3600000000 5".to_vec()),
            Value::Int(86_400_000),
            Value::Int(1500),
        ]);
        assert_eq!(found.settings.override_quota, Some(Quota::per_hour(nz(5))));
        assert_eq!(
            found.settings.override_ttl,
            Some(Duration::from_secs(86_400))
        );
        assert_eq!(
            found.settings.blocked_for,
            Some(Duration::from_millis(1500))
        );
        assert_eq!(found.present, [keys.quota.clone(), keys.block.clone()]);
        assert_eq!(found.ttl, Some(Duration::from_secs(86_400)));
        assert!(found.malformed.is_none());

        let found = keys.decode(&[Value::Nil, Value::Int(-2), Value::Int(-2)]);
        assert_eq!(found.settings, none());
        assert!(found.present.is_empty() && found.ttl.is_none());

        // Junk in the override key is flagged; the block still shows.
        let found = keys.decode(&[
            Value::BulkString(b"lots".to_vec()),
            Value::Int(1000),
            Value::Int(700),
        ]);
        assert_eq!(found.malformed.as_deref(), Some(&keys.quota[..]));
        assert_eq!(found.settings.override_quota, None);
        assert_eq!(found.present, std::slice::from_ref(&keys.block));
        assert_eq!(found.ttl, Some(Duration::from_millis(700)));
    }
}
