//! Hashed subjects: a fixed-length stand-in for a long or secret subject,
//! unkeyed ([`HashedSubject::of`]) or keyed ([`SubjectHasher`]).

use std::fmt;

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

type HmacSha256 = Hmac<Sha256>;

/// What an unkeyed digest starts with, so the admin view says what it is.
const SHA256_PREFIX: &[u8] = b"sha256:";

/// What a keyed digest starts with.
const HMAC_PREFIX: &[u8] = b"hmac:";

/// Hex digits of a keyed digest: its first 128 bits. Each hashed subject is
/// in every key of its subject and in every throttled report, so it is kept
/// short; 128 bits make two credentials sharing a limit by collision
/// negligible at any population (about 2^64 of them for an even chance), and
/// what stops guessing is the key, not the length.
const HMAC_HEX: usize = 32;

/// Hex digits of an unkeyed digest: all of SHA-256.
const SHA256_HEX: usize = 64;

/// The longest hashed subject: `sha256:` and 64 hex digits.
const MAX_LEN: usize = SHA256_PREFIX.len() + SHA256_HEX;

// A digest must always be a valid subject.
const _: () = assert!(MAX_LEN <= super::MAX_SUBJECT_LEN);

/// The shortest subject secret accepted, in bytes
/// ([`SubjectHasher::with_secret`]): a shorter one could itself be found by
/// trying every candidate.
pub const MIN_SUBJECT_SECRET_LEN: usize = 16;

/// A subject made from a digest of some bytes, whatever their length: use
/// it as the subject of any limiter, lock, lease or counter — it is
/// `AsRef<[u8]>`. Two kinds, each telling the admin view what it is by its
/// prefix:
///
/// * **keyed**, `hmac:` and 32 lowercase hex digits (37 bytes), made by a
///   [`SubjectHasher`] — what the HTTP and gRPC layers limit credentials
///   (API keys, bearer tokens) under, and what `shardlimit show` and the
///   Limits page's find box look a raw key up by;
/// * **unkeyed**, `sha256:` and 64 lowercase hex digits (71 bytes), made by
///   [`HashedSubject::of`].
///
/// Two reasons to hash a subject:
///
/// * **Length**: a subject is at most [`MAX_SUBJECT_LEN`](super::MAX_SUBJECT_LEN)
///   bytes; a digest of a longer one (a JWT, a signed cookie) fits, and equal
///   inputs always share a limit.
/// * **Secrecy**: Redis key names are visible to anyone who can run `SCAN`,
///   `MONITOR`, or read a backup. A digest keeps API keys and bearer tokens
///   out of them.
///
/// The unkeyed digest hides only what is hard to guess: a random API key
/// stays secret, but a short key, a user id or an IP address can be found
/// again by hashing every candidate. The keyed digest resists that as long
/// as its key is secret (see [`SubjectHasher`]).
///
/// ```
/// use shardlimit::keys::HashedSubject;
///
/// let token = "eyJhbGciOiJIUzI1NiJ9.".repeat(100); // 2100 bytes
/// let subject = HashedSubject::of(&token);
/// assert_eq!(subject.as_ref().len(), 71);
/// assert!(subject.as_str().starts_with("sha256:"));
/// assert_eq!(subject, HashedSubject::of(token.as_bytes()));
/// assert!(HashedSubject::is_hashed(subject.as_ref()));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct HashedSubject {
    text: [u8; MAX_LEN],
    len: usize,
}

impl HashedSubject {
    /// The unkeyed hashed subject of `bytes`: `sha256:` and the SHA-256
    /// digest in hex.
    ///
    /// ```
    /// use shardlimit::keys::HashedSubject;
    /// assert_eq!(
    ///     HashedSubject::of("abc").as_str(),
    ///     "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
    /// );
    /// ```
    #[must_use]
    pub fn of(bytes: impl AsRef<[u8]>) -> Self {
        HashedSubject::from_digest(SHA256_PREFIX, &Sha256::digest(bytes.as_ref()))
    }

    /// Whether `subject` has the shape of a hashed subject: `hmac:` and 32
    /// lowercase hex digits, or `sha256:` and 64. The admin view marks such
    /// subjects as hashed; nothing else depends on it.
    ///
    /// ```
    /// use shardlimit::keys::HashedSubject;
    /// assert!(HashedSubject::is_hashed(HashedSubject::of("k").as_ref()));
    /// assert!(!HashedSubject::is_hashed(b"user:42"));
    /// assert!(!HashedSubject::is_hashed(b"hmac:not-hex"));
    /// ```
    #[must_use]
    pub fn is_hashed(subject: &[u8]) -> bool {
        let hex = |digits: &[u8], len: usize| {
            digits.len() == len
                && digits
                    .iter()
                    .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        };
        subject
            .strip_prefix(HMAC_PREFIX)
            .is_some_and(|d| hex(d, HMAC_HEX))
            || subject
                .strip_prefix(SHA256_PREFIX)
                .is_some_and(|d| hex(d, SHA256_HEX))
    }

    /// `prefix` and as many leading bytes of `digest` as fit, in hex.
    fn from_digest(prefix: &[u8], digest: &[u8]) -> Self {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let digits = if prefix == HMAC_PREFIX {
            HMAC_HEX
        } else {
            SHA256_HEX
        };
        let mut text = [0u8; MAX_LEN];
        let (head, hex) = text.split_at_mut(prefix.len());
        head.copy_from_slice(prefix);
        for (pair, byte) in hex.chunks_exact_mut(2).take(digits / 2).zip(digest) {
            pair[0] = HEX[usize::from(byte >> 4)];
            pair[1] = HEX[usize::from(byte & 0x0f)];
        }
        HashedSubject {
            text,
            len: prefix.len() + digits,
        }
    }

    /// The subject as text.
    ///
    /// ```
    /// use shardlimit::keys::HashedSubject;
    /// println!("limited as {}", HashedSubject::of("k-7f3a").as_str());
    /// ```
    #[must_use]
    pub fn as_str(&self) -> &str {
        // Only ASCII is ever written; the fallback is unreachable.
        std::str::from_utf8(self.as_ref()).unwrap_or("")
    }
}

impl AsRef<[u8]> for HashedSubject {
    fn as_ref(&self) -> &[u8] {
        self.text.get(..self.len).unwrap_or(&self.text)
    }
}

impl fmt::Debug for HashedSubject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HashedSubject({})", self.as_str())
    }
}

impl fmt::Display for HashedSubject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Hashes subjects that are credentials — API keys, bearer tokens — under
/// a key: `hmac:` and the first 128 bits of HMAC-SHA-256(key, subject) in
/// hex (a [`HashedSubject`], 37 bytes).
///
/// Every [`Cluster`](crate::Cluster) has one,
/// [`Cluster::subject_hasher`](crate::Cluster::subject_hasher), keyed by
/// the subject secret it was built with
/// ([`ClusterBuilder::subject_secret`](crate::cluster::ClusterBuilder::subject_secret),
/// or the environment's `SHARDLIMIT_SUBJECT_SECRET` /
/// `SHARDLIMIT_SUBJECT_SECRET_FILE`), else by the namespace's default key.
/// The HTTP and gRPC layers (feature `tower`) limit credential keys under
/// it, and `shardlimit show` and the Limits page's find box hash what the
/// operator types with it — so the raw key finds its limits, and Redis
/// never holds it.
///
/// # The secret, and the default without one
///
/// With a **subject secret** (at least [`MIN_SUBJECT_SECRET_LEN`] bytes,
/// e.g. `openssl rand -hex 32`), a reader of Redis — `SCAN`, `MONITOR`, a
/// backup, the Limits page — sees digests it cannot test guesses against:
/// even a short or guessable API key stays hidden. Every process of a
/// service, and the CLI and page that look its subjects up, must be given
/// the same secret, as they are given the same namespace; a process with
/// another secret (or none) limits the same key under another digest — a
/// limit of its own. Changing the secret moves every hashed subject to a
/// new digest: their counts start afresh, and overrides and blocks set on
/// the old digests no longer apply (they expire with their TTL).
///
/// **Without a secret**, the key is derived from the namespace
/// (`shardlimit/subject/<namespace>`). That key is **not a secret**: it is
/// in this documentation. It still keeps raw keys out of every key name,
/// throttled report and page, costs no configuration, and every process of
/// the namespace agrees on it; a random API key of 128 bits or more (what
/// most issuers hand out) cannot be found from its digest. But anyone who
/// reads the digests can hash candidates with the same key, so a short or
/// guessable key can be found again, as with an unkeyed digest. Give a
/// secret where keys may be guessable or where a security review asks for
/// it; the layers log a warning the first time they hash a credential
/// without one.
///
/// ```
/// use shardlimit::keys::SubjectHasher;
///
/// let hasher = SubjectHasher::with_secret("7d9f0c2b5e1a48f3a6c0d2e4b8f1a3c5")?;
/// let subject = hasher.hash("sk-live-4eC39HqLyjWD");
/// assert!(subject.as_str().starts_with("hmac:"));
/// assert_eq!(subject.as_ref().len(), 37);
/// assert_eq!(subject, hasher.hash(b"sk-live-4eC39HqLyjWD"));
/// // Another key, another digest; the namespace's default is no secret.
/// let default = SubjectHasher::for_namespace("sl");
/// assert_ne!(subject, default.hash("sk-live-4eC39HqLyjWD"));
/// assert!(hasher.has_secret() && !default.has_secret());
/// # Ok::<(), shardlimit::Error>(())
/// ```
#[derive(Clone)]
pub struct SubjectHasher {
    /// The MAC keyed once; each digest starts from a clone of it.
    mac: HmacSha256,
    secret: bool,
}

impl SubjectHasher {
    /// A hasher keyed by `secret`, at least [`MIN_SUBJECT_SECRET_LEN`]
    /// bytes (any bytes; as text, its UTF-8).
    ///
    /// Errors with [`Error::Config`], field `subject_secret`, for a shorter
    /// secret (the secret is never in the message).
    ///
    /// ```
    /// use shardlimit::keys::SubjectHasher;
    /// assert!(SubjectHasher::with_secret("too short").is_err());
    /// ```
    pub fn with_secret(secret: impl AsRef<[u8]>) -> Result<Self> {
        let secret = secret.as_ref();
        if secret.len() < MIN_SUBJECT_SECRET_LEN {
            return Err(Error::Config {
                field: "subject_secret",
                reason: format!(
                    "a subject secret must be at least {MIN_SUBJECT_SECRET_LEN} bytes \
                     (e.g. `openssl rand -hex 32`), not {}",
                    secret.len()
                ),
            });
        }
        let mac = <HmacSha256 as Mac>::new_from_slice(secret).map_err(|err| Error::Config {
            field: "subject_secret",
            reason: err.to_string(),
        })?;
        Ok(SubjectHasher { mac, secret: true })
    }

    /// The hasher of a cluster built without a subject secret: keyed by
    /// `shardlimit/subject/<namespace>`, which is **not a secret** (see
    /// [the type's docs](Self#the-secret-and-the-default-without-one)).
    ///
    /// ```
    /// use shardlimit::keys::SubjectHasher;
    /// let sl = SubjectHasher::for_namespace("sl");
    /// assert_eq!(sl.hash("k").as_str(), SubjectHasher::for_namespace("sl").hash("k").as_str());
    /// assert_ne!(sl.hash("k"), SubjectHasher::for_namespace("myapp").hash("k"));
    /// ```
    #[must_use]
    pub fn for_namespace(namespace: &str) -> Self {
        // HMAC zero-pads a key shorter than its block: a key given as a
        // whole block is the same key, and needs no fallible constructor.
        let mut block = hmac::digest::Key::<HmacSha256>::default();
        let label = format!("shardlimit/subject/{namespace}");
        if label.len() <= block.len() {
            for (slot, byte) in block.iter_mut().zip(label.bytes()) {
                *slot = byte;
            }
        } else {
            // HMAC hashes a key longer than its block, and so does this.
            for (slot, byte) in block.iter_mut().zip(Sha256::digest(label.as_bytes())) {
                *slot = byte;
            }
        }
        SubjectHasher {
            mac: <HmacSha256 as Mac>::new(&block),
            secret: false,
        }
    }

    /// The keyed hashed subject of `subject`.
    ///
    /// ```
    /// use shardlimit::keys::SubjectHasher;
    /// let hasher = SubjectHasher::for_namespace("sl");
    /// println!("limited as {}", hasher.hash("sk-live-4eC39HqLyjWD"));
    /// ```
    #[must_use]
    pub fn hash(&self, subject: impl AsRef<[u8]>) -> HashedSubject {
        let mut mac = self.mac.clone();
        mac.update(subject.as_ref());
        HashedSubject::from_digest(HMAC_PREFIX, &mac.finalize().into_bytes())
    }

    /// Whether it is keyed by a subject secret, rather than by the
    /// namespace's default key (which is no secret).
    #[must_use]
    pub fn has_secret(&self) -> bool {
        self.secret
    }

    /// What keys it, in words, for the CLI and the page: never the key.
    ///
    /// ```
    /// use shardlimit::keys::SubjectHasher;
    /// assert_eq!(
    ///     SubjectHasher::for_namespace("sl").describe_key(),
    ///     "the namespace's default key, which is no secret"
    /// );
    /// ```
    #[must_use]
    pub fn describe_key(&self) -> &'static str {
        describe_key(self.secret)
    }
}

/// What keys a hasher, in words: [`SubjectHasher::describe_key`].
pub(crate) fn describe_key(secret: bool) -> &'static str {
    if secret {
        "the subject secret"
    } else {
        "the namespace's default key, which is no secret"
    }
}

impl fmt::Debug for SubjectHasher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SubjectHasher")
            .field("key", &self.describe_key())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::{KeyBuilder, KeyId};

    #[test]
    fn any_length_becomes_a_valid_fixed_length_subject() {
        let id = KeyId::new("gcra", "api").unwrap();
        let keys = KeyBuilder::new("sl").unwrap();
        let hasher = SubjectHasher::for_namespace("sl");
        for len in [1, 1024, 1025, 100_000] {
            let subject = HashedSubject::of(vec![b'{'; len]);
            assert_eq!(subject.as_ref().len(), MAX_LEN);
            keys.key(subject, &id).unwrap();
            let keyed = hasher.hash(vec![b'{'; len]);
            assert_eq!(keyed.as_ref().len(), HMAC_PREFIX.len() + HMAC_HEX);
            assert!(HashedSubject::is_hashed(keyed.as_ref()));
            keys.key(keyed, &id).unwrap();
        }
        assert_ne!(HashedSubject::of("a"), HashedSubject::of("b"));
        // The empty input too: a digest is never an empty subject.
        assert_eq!(
            HashedSubject::of("").as_str(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    /// RFC 4231 test case 2 (key "Jefe"), truncated to 128 bits: the digest
    /// is HMAC-SHA-256 itself, not a look-alike.
    #[test]
    fn the_keyed_digest_is_hmac_sha256() {
        let block_key = |key: &[u8]| {
            let mut block = hmac::digest::Key::<HmacSha256>::default();
            for (slot, byte) in block.iter_mut().zip(key) {
                *slot = *byte;
            }
            SubjectHasher {
                mac: <HmacSha256 as Mac>::new(&block),
                secret: true,
            }
        };
        assert_eq!(
            block_key(b"Jefe")
                .hash("what do ya want for nothing?")
                .as_str(),
            "hmac:5bdcc146bf60754e6a042426089575c7"
        );
        // The namespace default is that same construction, on its label.
        assert_eq!(
            SubjectHasher::for_namespace("sl").hash("k"),
            block_key(b"shardlimit/subject/sl").hash("k")
        );
        // A label past the block is hashed, as HMAC does with such a key.
        let long = "n".repeat(64);
        let hashed = SubjectHasher::with_secret(format!("shardlimit/subject/{long}")).unwrap();
        assert_eq!(
            SubjectHasher::for_namespace(&long).hash("k"),
            hashed.hash("k")
        );
    }

    #[test]
    fn a_secret_is_long_and_never_shown() {
        let err = SubjectHasher::with_secret("short-secret").unwrap_err();
        assert!(err.to_string().contains("at least 16 bytes"), "{err}");
        assert!(!err.to_string().contains("short-secret"), "{err}");
        let secret = "0123456789abcdef-very-secret";
        let hasher = SubjectHasher::with_secret(secret).unwrap();
        assert!(!format!("{hasher:?}").contains(secret));
        assert_ne!(
            hasher.hash("k"),
            SubjectHasher::with_secret("0123456789abcdef-other")
                .unwrap()
                .hash("k")
        );
    }
}
