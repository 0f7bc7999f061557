//! The one error type of the crate.
//!
//! Every fallible function returns [`Result<T>`]. Variants carry the context a
//! person needs to act on the error (the key, slot, operation, timeout) and the
//! underlying [`redis::RedisError`] as `source`. [`Error::is_transient`]
//! separates faults that go away on their own (timeouts, lost connections,
//! failovers) from configuration faults that never do (CROSSSLOT, WRONGTYPE,
//! missing permissions) — the failure policy of the limiters is built on it.

use std::borrow::Cow;
use std::time::Duration;

use redis::{ErrorKind, RedisError, ServerErrorKind};

/// `Result` with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in shardlimit.
///
/// Input errors (`Invalid*`, `EmptySubject`, `SubjectTooLong`, `CrossSlot`,
/// `EmptyKeySet`, `KeyIndex`) are returned **before anything is sent** to
/// Redis.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A namespace, kind, name or key part is not `[A-Za-z0-9_.-]{1,64}`.
    #[error("invalid {field} {value:?}: {reason}")]
    InvalidIdent {
        /// Which identifier: `"namespace"`, `"kind"`, `"name"` or `"part"`.
        field: &'static str,
        /// The rejected value (lossy UTF-8 if it was not text).
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },

    /// The subject (the hash-tag part of a key) is empty.
    #[error("empty subject: a subject must be at least one byte")]
    EmptySubject,

    /// The subject is longer than [`MAX_SUBJECT_LEN`](crate::keys::MAX_SUBJECT_LEN).
    #[error("subject is {len} bytes, the limit is {max}")]
    SubjectTooLong {
        /// Length of the rejected subject in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },

    /// The keys of one atomic operation do not share a hash slot; nothing was
    /// sent.
    #[error("keys span several hash slots, so no atomic operation can use them together: {}", describe_slots(.keys))]
    CrossSlot {
        /// Every key with its slot (keys shown as lossy UTF-8).
        keys: Vec<(String, u16)>,
    },

    /// A key set needs at least one key (the slot it is pinned to comes from
    /// its keys).
    #[error("a key set needs at least one key")]
    EmptyKeySet,

    /// A transaction command referred to a key index outside its key set.
    #[error("transaction refers to key #{index}, but the key set has {len} keys")]
    KeyIndex {
        /// The index used.
        index: usize,
        /// Number of keys in the key set.
        len: usize,
    },

    /// A request's cost is zero or more than the limiter could ever admit at
    /// once; nothing was sent.
    #[error(
        "cost {cost} is outside 1..={max}: a request costing more than the capacity can never be admitted"
    )]
    InvalidCost {
        /// The cost asked for.
        cost: u64,
        /// The most one request may cost (the limit, or a GCRA's burst).
        max: u64,
    },

    /// A key could not be parsed back into its parts.
    #[error("unparseable key {key:?}: {reason}")]
    UnparseableKey {
        /// The key (lossy UTF-8).
        key: String,
        /// What is wrong with it.
        reason: &'static str,
    },

    /// A configuration value was rejected by a builder.
    #[error("invalid configuration: {field}: {reason}")]
    Config {
        /// The setting.
        field: &'static str,
        /// Why it was rejected.
        reason: String,
    },

    /// The connection to the cluster could not be established.
    ///
    /// Transient when the nodes could not be reached (refused, timed out,
    /// dropped); not when they refused *us*: a TLS handshake failure (wrong
    /// CA, a name the certificate does not cover, TLS to a plain port),
    /// `WRONGPASS`, `NOAUTH`, `NOPERM`.
    #[error("could not connect to the cluster at {nodes}")]
    Connect {
        /// The seed nodes that were tried, passwords shown as `***`.
        nodes: String,
        /// The client's error.
        #[source]
        source: RedisError,
    },

    /// A [lazily connected](crate::cluster::ClusterBuilder::lazy_connect) handle has
    /// not read the cluster's topology yet, so nothing was sent: the
    /// cluster may be healthy and the connect still under way (or the
    /// seeds not answering yet). Transient.
    /// [`Cluster::wait_ready`](crate::Cluster::wait_ready) waits until it
    /// is read.
    #[error(
        "not connected yet: the topology of the cluster at {nodes} has not been read \
         (lazy connect; Cluster::wait_ready waits for it)"
    )]
    NotConnectedYet {
        /// The seed nodes being asked, passwords shown as `***`.
        nodes: String,
    },

    /// The operation did not complete within the command timeout. It may or
    /// may not have been executed by the server.
    #[error("{op}{} timed out after {timeout:?}", on_slot(*.slot))]
    Timeout {
        /// The operation (a script's name, `"transaction"`, or a command).
        op: Cow<'static, str>,
        /// The hash slot it was pinned to, for slot-pinned operations.
        slot: Option<u16>,
        /// The timeout that expired.
        timeout: Duration,
    },

    /// The node serving the slot is known to be down (its connection broke,
    /// or it kept timing out), so nothing was sent. Calls for its slots
    /// fail this way, at once, until it answers again or its slots move to
    /// another node.
    #[error("{op}{}: node {node} is down (for {down_for:?}); not sent", on_slot(*.slot))]
    NodeDown {
        /// The operation (a script's name, `"transaction"`, or a command).
        op: Cow<'static, str>,
        /// The hash slot it was pinned to, for slot-pinned operations.
        slot: Option<u16>,
        /// The node, `host:port`.
        node: String,
        /// How long it has been believed down.
        down_for: Duration,
    },

    /// Redis or the client returned an error.
    #[error("{op}{} failed: {source}", on_slot(*.slot))]
    Redis {
        /// The operation (a script's name, `"transaction"`, or a command).
        op: Cow<'static, str>,
        /// The hash slot it was pinned to, for slot-pinned operations.
        slot: Option<u16>,
        /// The client's error.
        #[source]
        source: RedisError,
    },

    /// An admin reset was refused, and nothing deleted, because primitives
    /// of the subject are in use (a held lock, a lease limiter with leases
    /// held, a counter with a value); forcing it deletes them anyway.
    #[error("reset refused, nothing deleted: {}; force it to delete them anyway", .in_use.join(", "))]
    ResetRefused {
        /// What is in use, e.g. `lock job is held` (without the subject).
        in_use: Vec<String>,
    },

    /// Redis answered with something the operation did not expect.
    #[error("{op}: unexpected reply: {detail}")]
    UnexpectedReply {
        /// The operation (a script's name, or `"transaction"`).
        op: Cow<'static, str>,
        /// What was wrong with the reply.
        detail: String,
    },
}

impl Error {
    /// Whether the fault is expected to go away on its own: a timeout, a lost
    /// or refused connection, or the cluster being reconfigured (CLUSTERDOWN,
    /// TRYAGAIN, MASTERDOWN, LOADING, READONLY during a failover, a redirect
    /// that could not be followed in time).
    ///
    /// Configuration faults — CROSSSLOT, WRONGTYPE, NOSCRIPT, missing
    /// permissions, unknown commands, bad input — are never transient: retrying
    /// or bypassing them would hide a bug.
    #[must_use]
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Timeout { .. } | Error::NodeDown { .. } | Error::NotConnectedYet { .. } => true,
            Error::Connect { source, .. } => is_transient_redis(source),
            Error::Redis { source, .. } => is_transient_redis(source),
            _ => false,
        }
    }

    /// Whether Redis refused the operation with `TRYAGAIN`: its keys are
    /// split by a slot migration (it did not run).
    pub(crate) fn is_tryagain(&self) -> bool {
        matches!(self, Error::Redis { source, .. }
            if source.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::TryAgain))
    }

    /// The hash slot the failed operation was pinned to, if it got that far.
    #[must_use]
    pub fn slot(&self) -> Option<u16> {
        match self {
            Error::Timeout { slot, .. }
            | Error::Redis { slot, .. }
            | Error::NodeDown { slot, .. } => *slot,
            _ => None,
        }
    }
}

/// Classifies a client error with the client's own helpers rather than by
/// matching message text: a connection fault or a cluster being
/// reconfigured.
pub(crate) fn is_transient_redis(err: &RedisError) -> bool {
    is_connection_fault(err) || is_reconfiguring(err)
}

/// The connection (not the cluster's configuration) is in trouble: I/O
/// error, timeout, dropped or refused connection. A failed TLS handshake is
/// an I/O error to the client, but a configuration fault to us: it does not
/// go away by itself.
pub(crate) fn is_connection_fault(err: &RedisError) -> bool {
    (err.is_io_error()
        || err.is_timeout()
        || err.is_connection_dropped()
        || err.is_connection_refusal())
        && !is_tls_failure(err)
}

/// Whether a rustls error (a certificate not trusted or not for this name,
/// a peer that does not speak TLS) is behind `err`. Found by type, not by
/// message text.
pub(crate) fn is_tls_failure(err: &RedisError) -> bool {
    std::error::Error::source(err).is_some_and(holds_tls_error)
}

fn holds_tls_error(cause: &(dyn std::error::Error + 'static)) -> bool {
    type Shared = std::sync::Arc<dyn std::error::Error + Send + Sync>;
    if cause.is::<rustls::Error>() {
        return true;
    }
    // redis-rs keeps the I/O error in an Arc and hands out the Arc.
    if let Some(shared) = cause.downcast_ref::<Shared>() {
        return holds_tls_error(&**shared);
    }
    // io::Error::source skips the error it wraps; look at it.
    if let Some(inner) = cause
        .downcast_ref::<std::io::Error>()
        .and_then(std::io::Error::get_ref)
    {
        return holds_tls_error(inner);
    }
    cause.source().is_some_and(holds_tls_error)
}

/// The cluster is failing over, migrating or loading: CLUSTERDOWN, TRYAGAIN,
/// MASTERDOWN, LOADING, READONLY, or a redirect that could not be followed
/// in time.
pub(crate) fn is_reconfiguring(err: &RedisError) -> bool {
    match err.kind() {
        ErrorKind::Server(kind) => {
            not_executed_yet(kind) || matches!(kind, ServerErrorKind::Moved | ServerErrorKind::Ask)
        }
        _ => false,
    }
}

/// Server replies that mean "the cluster is being reconfigured; nothing
/// ran": safe to send again after a pause (redirects aside, which say
/// where to send it).
pub(crate) fn not_executed_yet(kind: ServerErrorKind) -> bool {
    matches!(
        kind,
        ServerErrorKind::TryAgain
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::MasterDown
            | ServerErrorKind::BusyLoading
            | ServerErrorKind::ReadOnly
    )
}

fn on_slot(slot: Option<u16>) -> String {
    slot.map(|s| format!(" on slot {s}")).unwrap_or_default()
}

fn describe_slots(keys: &[(String, u16)]) -> String {
    keys.iter()
        .map(|(key, slot)| format!("{key:?} (slot {slot})"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cross_slot_message_names_every_key_and_slot() {
        let err = Error::CrossSlot {
            keys: vec![("a".into(), 15495), ("b".into(), 3300)],
        };
        assert_eq!(
            err.to_string(),
            "keys span several hash slots, so no atomic operation can use them together: \
             \"a\" (slot 15495), \"b\" (slot 3300)"
        );
        assert!(!err.is_transient());
    }

    #[test]
    fn timeouts_and_cluster_reconfiguration_are_transient() {
        let timeout = Error::Timeout {
            op: "eval".into(),
            slot: Some(1),
            timeout: Duration::from_millis(250),
        };
        assert!(timeout.is_transient());
        assert_eq!(timeout.to_string(), "eval on slot 1 timed out after 250ms");
        assert_eq!(timeout.slot(), Some(1));
        let down = RedisError::from((ErrorKind::Server(ServerErrorKind::ClusterDown), "down"));
        assert!(is_transient_redis(&down));
        let io = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(is_transient_redis(&io));
    }

    #[test]
    fn configuration_faults_are_not_transient() {
        let cross = RedisError::from((ErrorKind::Server(ServerErrorKind::CrossSlot), "x"));
        assert!(!is_transient_redis(&cross));
        let noscript = RedisError::from((ErrorKind::Server(ServerErrorKind::NoScript), "x"));
        assert!(!is_transient_redis(&noscript));
        let wrongtype = redis::make_extension_error("WRONGTYPE".into(), None);
        assert!(!is_transient_redis(&wrongtype));
        assert!(!Error::EmptySubject.is_transient());
        let noperm = RedisError::from((ErrorKind::Server(ServerErrorKind::NoPerm), "x"));
        assert!(!is_transient_redis(&noperm));
        let wrongpass = RedisError::from((ErrorKind::AuthenticationFailed, "x"));
        let connect = Error::Connect {
            nodes: "redis://h:1".into(),
            source: wrongpass,
        };
        assert!(!connect.is_transient());
    }

    #[test]
    fn a_tls_handshake_failure_is_a_refusal_not_a_connection_fault() {
        let tls = RedisError::from(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
        ));
        assert!(tls.is_io_error());
        assert!(is_tls_failure(&tls));
        assert!(!is_transient_redis(&tls));
        let connect = Error::Connect {
            nodes: "rediss://h:1".into(),
            source: tls,
        };
        assert!(!connect.is_transient());
        let refused = Error::Connect {
            nodes: "redis://h:1".into(),
            source: std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into(),
        };
        assert!(refused.is_transient());
    }
}
