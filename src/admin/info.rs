//! What the scanner reports about one primitive of one subject.

use std::time::Duration;

use crate::limit::SubjectSettings;
use crate::usage::Usage;

/// One primitive (rate limiter, lock, lease, counter, …) of one subject, as
/// found on the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LimiterInfo {
    /// The primitive's kind (`fw`, `slog`, `swc`, `gcra`, `lock`, `lease`,
    /// `counter`, or whatever kind a user's own keys use).
    pub kind: String,
    /// Its name.
    pub name: String,
    /// The subject, unescaped.
    pub subject: Vec<u8>,
    /// The hash slot of its keys.
    pub slot: u16,
    /// The master it was read from (`host:port`).
    pub node: String,
    /// Time to live of its main key; `None` when the key has **no TTL**
    /// (which [`Scanner::audit`](super::Scanner::audit) reports). When the
    /// main key is gone and a part key stands for the primitive, that key's:
    /// a free lock's fence, or a rate limiter's override (else its block)
    /// for a subject with no state ([`Usage::Unused`]).
    pub ttl: Option<Duration>,
    /// Its current state.
    pub usage: Usage,
    /// For a rate limiter (`fw`, `slog`, `swc`, `gcra`): the subject's own
    /// override of the quota, with its TTL, and its block — read from the
    /// limiter's `quota` and `block` part keys, which are reported here and
    /// never as primitives of their own. All `None` for other kinds and for
    /// subjects with neither.
    pub settings: SubjectSettings,
    /// The keys read for it: the main key (unless it is gone and a part key
    /// stands for the primitive), then a rate limiter's override and block
    /// keys, those that exist.
    pub keys: Vec<Vec<u8>>,
}

impl LimiterInfo {
    /// A primitive `kind`/`name` of `subject` in the state `usage`, as
    /// tools that render one build it (the scanner fills every field from
    /// the cluster): the subject's slot as the key builder tags it, no node,
    /// no TTL, no settings, no keys — each field is public to set.
    ///
    /// ```
    /// use shardlimit::admin::{LimiterInfo, Usage};
    /// let mut info = LimiterInfo::new("fw", "api", "user:42", Usage::FixedWindow { used: 7 });
    /// info.ttl = Some(std::time::Duration::from_secs(12));
    /// // Every key of the subject is in this slot ({user:42} is its tag).
    /// assert_eq!(info.slot, shardlimit::keys::slot(b"{user:42}"));
    /// ```
    #[must_use]
    pub fn new(
        kind: impl Into<String>,
        name: impl Into<String>,
        subject: impl Into<Vec<u8>>,
        usage: Usage,
    ) -> Self {
        let subject = subject.into();
        Self {
            kind: kind.into(),
            name: name.into(),
            slot: crate::keys::subject_slot(&subject),
            subject,
            node: String::new(),
            ttl: None,
            usage,
            settings: SubjectSettings::default(),
            keys: Vec::new(),
        }
    }

    /// The subject as text (lossy for binary subjects).
    #[must_use]
    pub fn subject_lossy(&self) -> String {
        String::from_utf8_lossy(&self.subject).into_owned()
    }
}

/// Progress of a scan on one master.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Progress {
    /// The master (`host:port`).
    pub node: String,
    /// Keys returned by SCAN so far (all keys of the namespace, matching the
    /// filters or not).
    pub scanned: u64,
    /// The node's `DBSIZE` when its scan started (every key, any
    /// namespace): an upper bound for `scanned`.
    pub dbsize: u64,
    /// Whether the node's scan is complete.
    pub done: bool,
}
