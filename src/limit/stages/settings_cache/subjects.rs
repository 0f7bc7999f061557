//! [`Subjects`]: the bounded set behind the subject-settings cache, built
//! for its one question asked on every check — is this subject in it? —
//! over many subjects at random, where each pointer followed is a cache
//! miss.
//!
//! A general cache (moka, which this replaced) finds a key through a
//! bucket pointer, the bucket, the key's own allocation and the entry
//! holding its value: four dependent misses, a third of a plain check's
//! client time in the peers' profile. Here a lookup reads a hash table's
//! control bytes and the slot that holds the subject itself (up to
//! [`INLINE`] bytes kept inline): two. Nothing is recorded on a lookup:
//! the set only needs to be bounded, not to rank its members.
//!
//! **Bounded in generations.** Each shard fills a current generation; one
//! that has grown to half the shard's room becomes the previous one, and
//! the previous one is dropped. So at most `max_entries` subjects are
//! kept, those remembered last; a subject dropped is read once more by
//! its next check (what a miss costs), and remembered again.

use std::borrow::Borrow;
use std::collections::HashSet;
use std::hash::{BuildHasher, Hash, Hasher, RandomState};
use std::sync::{PoisonError, RwLock};

/// Shards of a set with room for many subjects: a lookup takes its shard's
/// read lock, an insert or invalidation its write lock.
const SHARDS: usize = 16;

/// A bounded set of subjects.
pub(super) struct Subjects {
    shards: Box<[RwLock<Shard>]>,
    /// A shard's current generation is this large at most.
    generation: usize,
    /// Whether a full generation is kept as the previous one: not when
    /// that would keep more than `max_entries` (room for one subject).
    keep_previous: bool,
    max_entries: u64,
    hasher: RandomState,
}

#[derive(Default)]
struct Shard {
    current: HashSet<Subject>,
    previous: HashSet<Subject>,
}

impl Subjects {
    /// Room for `max_entries` subjects.
    pub(super) fn new(max_entries: u64) -> Self {
        let max = usize::try_from(max_entries).unwrap_or(usize::MAX);
        // A shard has room for two generations of at least one subject.
        let shards = (max / 2).clamp(1, SHARDS);
        let generation = (max / shards / 2).max(1);
        Subjects {
            shards: (0..shards).map(|_| RwLock::default()).collect(),
            generation,
            keep_previous: shards * 2 * generation <= max,
            max_entries,
            hasher: RandomState::new(),
        }
    }

    /// The most subjects kept.
    pub(super) fn max_entries(&self) -> u64 {
        self.max_entries
    }

    pub(super) fn contains(&self, subject: &[u8]) -> bool {
        let shard = self.shard(subject).read();
        let shard = shard.unwrap_or_else(PoisonError::into_inner);
        shard.current.contains(subject) || shard.previous.contains(subject)
    }

    pub(super) fn insert(&self, subject: &[u8]) {
        let mut shard = self
            .shard(subject)
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if shard.current.contains(subject) {
            return;
        }
        shard.previous.remove(subject);
        if shard.current.len() >= self.generation {
            let full = std::mem::take(&mut shard.current);
            shard.previous = if self.keep_previous {
                full
            } else {
                HashSet::new()
            };
        }
        shard.current.insert(Subject::from(subject));
    }

    pub(super) fn remove(&self, subject: &[u8]) {
        let mut shard = self
            .shard(subject)
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        shard.current.remove(subject);
        shard.previous.remove(subject);
    }

    pub(super) fn clear(&self) {
        for shard in &self.shards {
            let mut shard = shard.write().unwrap_or_else(PoisonError::into_inner);
            *shard = Shard::default();
        }
    }

    fn shard(&self, subject: &[u8]) -> &RwLock<Shard> {
        // The table inside hashes with its own keys: this hash only
        // spreads subjects over the shards.
        let at = self.hasher.hash_one(subject) % self.shards.len() as u64;
        &self.shards[usize::try_from(at).unwrap_or(0)]
    }
}

/// A subject as the set keeps it: up to [`INLINE`] bytes (most subjects)
/// in the table's slot itself, where a lookup compares them without
/// following one more pointer; longer ones on the heap.
#[derive(Clone)]
enum Subject {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Box<[u8]>),
}

/// The longest subject kept inline: a slot is then 32 bytes.
const INLINE: usize = 30;

impl Subject {
    fn as_bytes(&self) -> &[u8] {
        match self {
            Subject::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Subject::Heap(bytes) => bytes,
        }
    }
}

impl From<&[u8]> for Subject {
    fn from(subject: &[u8]) -> Self {
        match u8::try_from(subject.len()) {
            Ok(len) if subject.len() <= INLINE => {
                let mut bytes = [0; INLINE];
                bytes[..subject.len()].copy_from_slice(subject);
                Subject::Inline { len, bytes }
            }
            _ => Subject::Heap(subject.into()),
        }
    }
}

// Looked up by the subject's bytes: equality and hash are theirs (as
// `Borrow` requires).
impl Borrow<[u8]> for Subject {
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl PartialEq for Subject {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Subject {}

impl Hash for Subject {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subject_is_kept_inline_up_to_its_limit_and_found_by_its_bytes() {
        assert_eq!(std::mem::size_of::<Subject>(), 32);
        let state = RandomState::new();
        let long = [b'x'; INLINE + 1];
        for subject in [
            &b"u"[..],
            &b"user:42"[..],
            &long[..INLINE],
            &long[..],
            &b""[..],
        ] {
            let kept = Subject::from(subject);
            assert_eq!(
                matches!(kept, Subject::Inline { .. }),
                subject.len() <= INLINE
            );
            assert_eq!(kept.as_bytes(), subject);
            // As the table looks it up: the same hash and equality as
            // the bytes'.
            assert_eq!(state.hash_one(&kept), state.hash_one(subject));
            assert!(kept == Subject::from(subject));
        }
        assert!(Subject::from(&b"ab"[..]) != Subject::from(&b"ab\0"[..]));
    }

    #[test]
    fn subjects_are_found_until_removed_or_cleared() {
        let set = Subjects::new(1000);
        let long = [b'x'; INLINE + 5];
        set.insert(b"user:42");
        set.insert(&long);
        set.insert(b"user:42");
        assert!(set.contains(b"user:42") && set.contains(&long));
        assert!(!set.contains(b"user:4") && !set.contains(&long[1..]));
        set.remove(b"user:42");
        assert!(!set.contains(b"user:42") && set.contains(&long));
        set.clear();
        assert!(!set.contains(&long));
        assert_eq!(set.max_entries(), 1000);
    }

    #[test]
    fn at_most_max_entries_are_kept_the_last_remembered_first() {
        for max in [1, 2, 3, 10, 64, 1000] {
            let set = Subjects::new(max);
            let subject = |i: u64| format!("s{i}").into_bytes();
            for i in 0..5 * max {
                set.insert(&subject(i));
                if max <= 64 || i % 97 == 0 {
                    let kept = (0..=i).filter(|&j| set.contains(&subject(j))).count();
                    assert!(kept as u64 <= max, "max {max}: {kept} kept after {i}");
                }
                // The last one remembered is always there.
                assert!(set.contains(&subject(i)));
            }
            // Every shard keeps a generation: at least a quarter of the
            // room is in use (with room for many subjects).
            let kept = (0..5 * max).filter(|&j| set.contains(&subject(j))).count();
            assert!(max < 64 || kept as u64 >= max / 4, "max {max}: {kept} kept");
        }
    }
}
