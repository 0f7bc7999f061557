//! The kinds of primitive, as the `kind` part of their keys: the one list
//! the primitives, the scanner and the CLI share.

use std::fmt;
use std::str::FromStr;

/// What a key belongs to: one of the crate's primitives. Its
/// [`as_str`](Self::as_str) is the `<kind>` part of the key layout
/// `<namespace>:{<subject>}:<kind>:<name>[:<part>]`, short because it is in
/// every key.
///
/// ```
/// use shardlimit::keys::Kind;
/// assert_eq!(Kind::Gcra.as_str(), "gcra");
/// assert_eq!("lease".parse::<Kind>(), Ok(Kind::Lease));
/// assert_eq!(Kind::ALL.len(), 7);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Kind {
    /// A fixed-window rate limiter (`fw`).
    FixedWindow,
    /// A sliding-log rate limiter (`slog`).
    SlidingLog,
    /// A sliding-window-counter rate limiter (`swc`).
    SlidingWindow,
    /// A GCRA rate limiter (`gcra`).
    Gcra,
    /// A fenced lock (`lock`, and its `lock:<name>:fence` part).
    Lock,
    /// A lease limiter's leases (`lease`).
    Lease,
    /// A TTL-preserving counter (`counter`).
    Counter,
}

impl Kind {
    /// Every kind, rate limiters first.
    pub const ALL: [Kind; 7] = [
        Kind::FixedWindow,
        Kind::SlidingLog,
        Kind::SlidingWindow,
        Kind::Gcra,
        Kind::Lock,
        Kind::Lease,
        Kind::Counter,
    ];

    /// The `kind` part of the keys.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Kind::FixedWindow => "fw",
            Kind::SlidingLog => "slog",
            Kind::SlidingWindow => "swc",
            Kind::Gcra => "gcra",
            Kind::Lock => "lock",
            Kind::Lease => "lease",
            Kind::Counter => "counter",
        }
    }

    /// The kind whose keys carry `kind`, if it is one of the crate's.
    #[must_use]
    pub fn parse(kind: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == kind)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `kind` that is none of the crate's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownKind(pub String);

impl fmt::Display for UnknownKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let known: Vec<&str> = Kind::ALL.iter().map(|k| k.as_str()).collect();
        write!(f, "unknown kind {:?}; one of {}", self.0, known.join(", "))
    }
}

impl std::error::Error for UnknownKind {}

impl FromStr for Kind {
    type Err = UnknownKind;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Kind::parse(s).ok_or_else(|| UnknownKind(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_and_are_distinct_valid_idents() {
        for kind in Kind::ALL {
            assert_eq!(Kind::parse(kind.as_str()), Some(kind));
            assert!(crate::keys::KeyId::new(kind.as_str(), "n").is_ok());
        }
        let mut names: Vec<&str> = Kind::ALL.iter().map(|k| k.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Kind::ALL.len());
        let err = "sw".parse::<Kind>().unwrap_err();
        assert!(err.to_string().contains("fw, slog"), "{err}");
    }
}
