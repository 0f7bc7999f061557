//! `KeySet`: the keys of one atomic operation, proven to share a slot.

use std::fmt;

use super::slot::slot;
use crate::error::{Error, Result};

/// All keys one operation touches, with the one hash slot they share.
///
/// A `KeySet` can only exist if every key hashes to the same slot: it is made
/// by [`KeyBuilder::key_set`](super::KeyBuilder::key_set) or by
/// [`KeySet::from_keys`], and both compute every key's slot and refuse
/// otherwise. [`Cluster::eval`](crate::Cluster::eval) and
/// [`Cluster::transaction`](crate::Cluster::transaction) take nothing else, so
/// a CROSSSLOT error cannot reach the server.
#[derive(Clone, PartialEq, Eq)]
pub struct KeySet {
    keys: Vec<Vec<u8>>,
    slot: u16,
}

impl KeySet {
    /// A key set from keys you built yourself (for your own scripts).
    ///
    /// Errors with [`Error::CrossSlot`] naming every key and its slot when
    /// they do not share one, and [`Error::EmptyKeySet`] when there are none.
    /// Nothing is sent either way.
    ///
    /// ```
    /// use shardlimit::{Error, keys::KeySet};
    /// let ok = KeySet::from_keys(["{user:1}:a", "{user:1}:b"])?;
    /// assert_eq!(ok.len(), 2);
    /// assert!(matches!(KeySet::from_keys(["a", "b"]), Err(Error::CrossSlot { .. })));
    /// # Ok::<(), shardlimit::Error>(())
    /// ```
    pub fn from_keys<K: Into<Vec<u8>>>(keys: impl IntoIterator<Item = K>) -> Result<Self> {
        Self::checked(keys.into_iter().map(Into::into).collect())
    }

    pub(crate) fn checked(keys: Vec<Vec<u8>>) -> Result<Self> {
        let first = slot(keys.first().ok_or(Error::EmptyKeySet)?);
        if keys[1..].iter().all(|key| slot(key) == first) {
            return Ok(KeySet { keys, slot: first });
        }
        Err(Error::CrossSlot {
            keys: keys
                .iter()
                .map(|key| (String::from_utf8_lossy(key).into_owned(), slot(key)))
                .collect(),
        })
    }

    /// The hash slot every key hashes to.
    #[must_use]
    pub fn slot(&self) -> u16 {
        self.slot
    }

    /// The keys, in the order they were given (`KEYS[1]` is `keys()[0]`).
    #[must_use]
    pub fn keys(&self) -> &[Vec<u8>] {
        &self.keys
    }

    /// Number of keys (at least one).
    #[must_use]
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Always `false`: a key set has at least one key.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

impl fmt::Debug for KeySet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeySet")
            .field("slot", &self.slot)
            .field(
                "keys",
                &self
                    .keys
                    .iter()
                    .map(|k| String::from_utf8_lossy(k))
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_tag_is_accepted() {
        let set = KeySet::from_keys(["{x}:1", "{x}:2", "x"]).unwrap();
        assert_eq!(set.slot(), slot(b"x"));
        assert_eq!(set.len(), 3);
        assert!(!set.is_empty());
    }

    #[test]
    fn mixed_slots_name_every_key() {
        match KeySet::from_keys(["{a}:1", "{b}:1"]) {
            Err(Error::CrossSlot { keys }) => {
                assert_eq!(
                    keys,
                    vec![
                        ("{a}:1".to_owned(), slot(b"a")),
                        ("{b}:1".to_owned(), slot(b"b"))
                    ]
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn empty_tag_keys_do_not_share_a_slot() {
        assert!(matches!(
            KeySet::from_keys(["user:{}:a", "user:{}:b"]),
            Err(Error::CrossSlot { .. })
        ));
    }

    #[test]
    fn no_keys_is_an_error() {
        assert!(matches!(
            KeySet::from_keys(Vec::<Vec<u8>>::new()),
            Err(Error::EmptyKeySet)
        ));
    }
}
