//! Keys and hash slots: the one place shardlimit makes keys.
//!
//! # Why hash tags, and which tag
//!
//! Redis Cluster spreads keys over 16384 hash slots, and each slot over the
//! masters. An atomic operation — a Lua script, a MULTI/EXEC — may only touch
//! keys of **one** slot; otherwise the server answers `CROSSSLOT` and does
//! nothing. Redis hashes only the *hash tag* of a key when it has one: the
//! bytes between the first `{` and the first `}` after it, if non-empty.
//!
//! shardlimit makes the **subject** — the thing being limited, such as a user
//! id, an API key, a lock's resource — the tag:
//!
//! ```text
//! <namespace>:{<subject>}:<kind>:<name>[:<part>]
//! sl:{user:42}:gcra:api
//! sl:{nightly-export}:lock:job
//! sl:{nightly-export}:lock:job:fence
//! ```
//!
//! So every key of one subject shares a slot (several limits on one subject
//! can be checked in one script), and millions of subjects spread evenly over
//! all slots. Two tempting alternatives are both wrong: a tag per namespace or
//! per limiter name piles every subject onto one slot and one node; and an
//! empty tag `{}` is no tag at all — Redis then hashes the whole key and the
//! keys of one subject scatter.
//! The one shared tag, `{shardlimit.catalog}`, holds one small key per rate
//! limiter name — no subject's — and no check touches it: see
//! [the catalog](crate::limit#the-catalog).
//!
//! # Escaping
//!
//! A subject is arbitrary bytes (1 to [`MAX_SUBJECT_LEN`]). `{`, `}` and `%`
//! are percent-escaped (`%7B`, `%7D`, `%25`) so a subject can never close the
//! tag early or leave it empty; everything else, `:` included, is kept as is.
//! Namespace, kind, name and part are `[A-Za-z0-9_.-]{1,64}`.
//!
//! A longer subject, or one that should not appear in key names (an API
//! key, a bearer token), can be replaced by its digest: [`HashedSubject`],
//! keyed by the cluster's [`SubjectHasher`] for credentials (what the HTTP
//! and gRPC layers do by default).
//!
//! # Proof, not hope
//!
//! [`slot`] is Redis' own function (CRC16/XMODEM of the tag, mod 16384).
//! A [`KeySet`] computes the slot of every key when it is made and refuses to
//! exist if they differ; the cluster layer accepts nothing else. The
//! [`ParsedKey`] parser inverts the builder, so the admin scanner can turn any
//! key under a namespace back into its subject and primitive.

mod builder;
pub(crate) mod hashed;
mod ident;
mod keyset;
mod kind;
mod parse;
mod slot;

pub use builder::{KeyBuilder, MAX_SUBJECT_LEN};
pub(crate) use builder::{check_subject, subject_slot};
pub use hashed::{HashedSubject, MIN_SUBJECT_SECRET_LEN, SubjectHasher};
pub use ident::{KeyId, MAX_IDENT_LEN};
pub use keyset::KeySet;
pub use kind::{Kind, UnknownKind};
pub use parse::ParsedKey;
pub use slot::{SLOT_COUNT, hash_tag, slot};
