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
//! **One hash per lookup.** A subject is hashed once (SipHash, keyed per
//! set: subjects are chosen by clients, and a keyed hash keeps them from
//! piling into one bucket), and that hash picks the shard and finds the
//! subject in both generations' tables (`hashbrown::HashTable`, the table
//! behind std's `HashSet`, which takes the hash from its caller). Three
//! `HashSet`s hashed it three times, for the shard and each generation: a
//! tenth of a GCRA check's client time in the peers' profile.
//!
//! **Bounded in generations.** Each shard fills a current generation; one
//! that has grown to half the shard's room becomes the previous one, and
//! the previous one is dropped. So at most `max_entries` subjects are
//! kept, those remembered last; a subject dropped is read once more by
//! its next check (what a miss costs), and remembered again.

use std::hash::{BuildHasher, RandomState};
use std::sync::{PoisonError, RwLock, RwLockWriteGuard};

use hashbrown::HashTable;

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
    current: HashTable<Subject>,
    previous: HashTable<Subject>,
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
        let hash = self.hash(subject);
        let shard = self.shard(hash).read();
        let shard = shard.unwrap_or_else(PoisonError::into_inner);
        let is = is(subject);
        shard.current.find(hash, is).is_some() || shard.previous.find(hash, is).is_some()
    }

    pub(super) fn insert(&self, subject: &[u8]) {
        let (hash, mut shard) = self.write(subject);
        if shard.current.find(hash, is(subject)).is_some() {
            return;
        }
        if let Ok(kept) = shard.previous.find_entry(hash, is(subject)) {
            kept.remove();
        }
        if shard.current.len() >= self.generation {
            let full = std::mem::take(&mut shard.current);
            shard.previous = if self.keep_previous {
                full
            } else {
                HashTable::new()
            };
        }
        // A table that grows hashes its subjects again, with the same key.
        shard
            .current
            .insert_unique(hash, Subject::from(subject), |kept| {
                self.hash(kept.as_bytes())
            });
    }

    pub(super) fn remove(&self, subject: &[u8]) {
        let (hash, mut shard) = self.write(subject);
        if let Ok(kept) = shard.current.find_entry(hash, is(subject)) {
            kept.remove();
        }
        if let Ok(kept) = shard.previous.find_entry(hash, is(subject)) {
            kept.remove();
        }
    }

    pub(super) fn clear(&self) {
        for shard in &self.shards {
            let mut shard = shard.write().unwrap_or_else(PoisonError::into_inner);
            *shard = Shard::default();
        }
    }

    /// `subject`'s hash, and its shard locked for writing.
    fn write(&self, subject: &[u8]) -> (u64, RwLockWriteGuard<'_, Shard>) {
        let hash = self.hash(subject);
        let shard = self
            .shard(hash)
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        (hash, shard)
    }

    fn hash(&self, subject: &[u8]) -> u64 {
        self.hasher.hash_one(subject)
    }

    /// The shard of a subject of `hash`: from bits the tables use for
    /// neither their buckets (the low bits) nor their control bytes (the
    /// top seven), so that a shard's subjects still spread over its table.
    fn shard(&self, hash: u64) -> &RwLock<Shard> {
        let at = (hash >> 32) % self.shards.len() as u64;
        &self.shards[usize::try_from(at).unwrap_or(0)]
    }
}

/// Whether a subject kept is `subject`.
fn is(subject: &[u8]) -> impl Fn(&Subject) -> bool + Copy + '_ {
    move |kept| kept.as_bytes() == subject
}

/// A subject as the set keeps it: up to [`INLINE`] bytes (most subjects)
/// in the table's slot itself, where a lookup compares them without
/// following one more pointer; longer ones on the heap.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subject_is_kept_inline_up_to_its_limit_and_found_by_its_bytes() {
        assert_eq!(std::mem::size_of::<Subject>(), 32);
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
            assert!(is(subject)(&kept));
        }
        assert!(!is(b"ab\0")(&Subject::from(&b"ab"[..])));
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
    fn subjects_spread_over_every_shard() {
        let set = Subjects::new(100_000);
        for i in 0..1000 {
            set.insert(format!("s{i}").as_bytes());
        }
        for shard in &set.shards {
            let shard = shard.read().unwrap();
            let kept = shard.current.len() + shard.previous.len();
            assert!((20..=110).contains(&kept), "{kept} of 1000 in one of 16");
        }
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
