//! The Redis Cluster key → slot function.

/// Number of hash slots in a Redis Cluster.
pub const SLOT_COUNT: u16 = 16384;

/// The part of `key` that Redis hashes: the hash tag if the key has a usable
/// one, else the whole key.
///
/// Redis' rule (cluster spec, "Hash tags"): find the first `{`; find the first
/// `}` after it; if that exists and the bytes between them are non-empty, they
/// are the tag. Otherwise — no `{`, no closing `}`, or an empty `{}` — the whole
/// key is hashed. The empty-tag case is the classic bug: `user:{}:a` and
/// `user:{}:b` land in different slots.
pub fn hash_tag(key: &[u8]) -> &[u8] {
    let Some(open) = key.iter().position(|&b| b == b'{') else {
        return key;
    };
    let after = &key[open + 1..];
    match after.iter().position(|&b| b == b'}') {
        Some(0) | None => key,
        Some(close) => &after[..close],
    }
}

/// The hash slot Redis Cluster assigns to `key`: CRC16/XMODEM of its hash tag
/// (see [`hash_tag`]) modulo 16384.
///
/// Redis-rs computes this internally but does not expose it; shardlimit needs
/// it to prove, before anything is sent, that every key of an atomic operation
/// lives in one slot.
///
/// ```
/// use shardlimit::keys::slot;
/// assert_eq!(slot(b"foo"), 12182);
/// // Only the tag is hashed, so these share a slot:
/// assert_eq!(slot(b"sl:{user:42}:gcra:api"), slot(b"user:42"));
/// ```
#[must_use]
pub fn slot(key: &[u8]) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(hash_tag(key)) % SLOT_COUNT
}

#[cfg(test)]
mod tests {
    use super::*;

    // Reference values are what `CLUSTER KEYSLOT` returns on Redis 7; the
    // integration test `slots_match_server` checks 100,000 more live.
    #[test]
    fn plain_keys() {
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"bar"), 5061);
        assert_eq!(slot(b"123456789"), 0x31c3 % SLOT_COUNT);
    }

    #[test]
    fn empty_key_hashes_to_zero() {
        assert_eq!(hash_tag(b""), b"");
        assert_eq!(slot(b""), 0);
    }

    #[test]
    fn empty_tag_hashes_whole_key() {
        assert_eq!(hash_tag(b"{}"), b"{}");
        assert_eq!(slot(b"{}"), slot(b"{}"));
        assert_ne!(slot(b"user:{}:a"), slot(b"user:{}:b"));
    }

    #[test]
    fn first_tag_wins() {
        assert_eq!(hash_tag(b"{a}{b}"), b"a");
        assert_eq!(slot(b"{a}{b}"), slot(b"a"));
    }

    #[test]
    fn unclosed_brace_hashes_whole_key() {
        assert_eq!(hash_tag(b"foo{bar"), b"foo{bar");
    }

    #[test]
    fn nested_open_brace_is_part_of_tag() {
        // First `{` at 0, first `}` after it at 3: the tag is "{a".
        assert_eq!(hash_tag(b"{{a}}"), b"{a");
        assert_eq!(hash_tag(b"foo{{bar}}zap"), b"{bar");
    }

    #[test]
    fn empty_first_tag_is_not_skipped() {
        // `foo{}{bar}`: the first `{` is followed immediately by `}`, so the
        // whole key is hashed; Redis does not look for a second tag.
        assert_eq!(hash_tag(b"foo{}{bar}"), b"foo{}{bar}");
        assert_ne!(slot(b"foo{}{bar}"), slot(b"bar"));
    }

    #[test]
    fn close_before_open_is_ignored() {
        assert_eq!(hash_tag(b"a}b{c}"), b"c");
    }

    #[test]
    fn binary_keys() {
        let key = [0u8, 0xff, b'{', 0x80, 0x00, b'}', 0xfe];
        assert_eq!(hash_tag(&key), &[0x80, 0x00]);
        assert_eq!(slot(&key), slot(&[0x80, 0x00]));
        assert!(slot(&[0xff; 64]) < SLOT_COUNT);
    }
}
