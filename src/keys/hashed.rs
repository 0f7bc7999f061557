//! Hashed subjects: a fixed-length stand-in for a long or secret subject.

use std::fmt;

use sha2::{Digest, Sha256};

/// What every hashed subject starts with, so the admin view says what it is.
const PREFIX: &[u8] = b"sha256:";

/// Length of a hashed subject: the prefix and 64 hex digits.
const LEN: usize = PREFIX.len() + 64;

// A digest must always be a valid subject.
const _: () = assert!(LEN <= super::MAX_SUBJECT_LEN);

/// A subject made from the SHA-256 digest of some bytes: `sha256:` and 64
/// lowercase hex digits (71 bytes), whatever the input's length. Use it as
/// the subject of any limiter, lock, lease or counter — it is `AsRef<[u8]>`
/// — and the HTTP layer can apply it to every key
/// (`RateLimitLayerBuilder::hash_keys`, feature `tower`).
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
/// The trade-off: the admin view (`shardlimit list`/`show`) shows digests,
/// not the original subjects — to look one up, hash it the same way
/// (`shardlimit show` takes the digest). The digest is unkeyed, so it hides
/// only what is hard to guess: a random API key stays secret, but a user id
/// or an IP address can be found again by hashing every candidate.
///
/// ```
/// use shardlimit::keys::HashedSubject;
///
/// let token = "eyJhbGciOiJIUzI1NiJ9.".repeat(100); // 2100 bytes
/// let subject = HashedSubject::of(&token);
/// assert_eq!(subject.as_ref().len(), 71);
/// assert!(subject.as_str().starts_with("sha256:"));
/// assert_eq!(subject, HashedSubject::of(token.as_bytes()));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct HashedSubject {
    text: [u8; LEN],
}

impl HashedSubject {
    /// The hashed subject of `bytes`.
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
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let digest = Sha256::digest(bytes.as_ref());
        let mut text = [0u8; LEN];
        let (prefix, hex) = text.split_at_mut(PREFIX.len());
        prefix.copy_from_slice(PREFIX);
        for (pair, byte) in hex.chunks_exact_mut(2).zip(digest) {
            pair[0] = HEX[usize::from(byte >> 4)];
            pair[1] = HEX[usize::from(byte & 0x0f)];
        }
        HashedSubject { text }
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
        std::str::from_utf8(&self.text).unwrap_or("sha256:")
    }
}

impl AsRef<[u8]> for HashedSubject {
    fn as_ref(&self) -> &[u8] {
        &self.text
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::{KeyBuilder, KeyId};

    #[test]
    fn any_length_becomes_a_valid_fixed_length_subject() {
        let id = KeyId::new("gcra", "api").unwrap();
        let keys = KeyBuilder::new("sl").unwrap();
        for len in [1, 1024, 1025, 100_000] {
            let subject = HashedSubject::of(vec![b'{'; len]);
            assert_eq!(subject.as_ref().len(), LEN);
            keys.key(subject, &id).unwrap();
        }
        assert_ne!(HashedSubject::of("a"), HashedSubject::of("b"));
        // The empty input too: a digest is never an empty subject.
        assert_eq!(
            HashedSubject::of("").as_str(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
