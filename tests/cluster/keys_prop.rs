//! Property tests over the key builder and parser: arbitrary subjects
//! round-trip, every built key has one non-empty hash tag and one slot, and
//! the parser never panics, whatever the bytes. Pure: no cluster needed.
//! The case count is proptest's default (256 per property), or
//! `PROPTEST_CASES` — CI runs the default, a bounded few seconds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use shardlimit::keys::{KeyBuilder, KeyId, MAX_SUBJECT_LEN, ParsedKey, hash_tag, slot};

fn ident() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_.-]{1,64}"
}

/// Subjects biased towards the bytes that matter: braces, percent signs,
/// colons, and arbitrary binary.
fn subject() -> impl Strategy<Value = Vec<u8>> {
    let special = prop::sample::select(vec![
        b'{', b'}', b'%', b':', b'7', b'B', b'D', b'2', b'5', 0, 0xff,
    ]);
    let byte = prop_oneof![3 => any::<u8>(), 2 => special];
    prop::collection::vec(byte, 1..=MAX_SUBJECT_LEN)
}

proptest! {
    #[test]
    fn subjects_round_trip(ns in ident(), kind in ident(), name in ident(), part in proptest::option::of(ident()), subject in subject()) {
        let keys = KeyBuilder::new(&ns).unwrap();
        let mut id = KeyId::new(&kind, &name).unwrap();
        if let Some(part) = &part {
            id = id.with_part(part).unwrap();
        }
        let key = keys.key(&subject, &id).unwrap();
        let parsed = ParsedKey::parse(&key).unwrap();
        prop_assert_eq!(parsed.namespace, ns.as_str());
        prop_assert_eq!(&*parsed.subject, &subject[..]);
        prop_assert_eq!(parsed.kind, kind.as_str());
        prop_assert_eq!(parsed.name, name.as_str());
        prop_assert_eq!(parsed.part, part.as_deref());
    }

    #[test]
    fn built_keys_have_one_non_empty_tag_and_one_slot(subject in subject(), parts in prop::collection::vec(ident(), 1..5)) {
        let keys = KeyBuilder::new("sl").unwrap();
        let base = KeyId::new("k", "n").unwrap();
        let ids: Vec<KeyId> = parts.iter().map(|p| base.with_part(p).unwrap()).collect();
        let set = keys.key_set(&subject, ids.iter().chain([&base])).unwrap();
        for key in set.keys() {
            let tag = hash_tag(key);
            prop_assert!(!tag.is_empty());
            prop_assert!(tag.len() < key.len(), "the tag is a proper part of the key");
            prop_assert!(!tag.contains(&b'{') && !tag.contains(&b'}'), "no brace inside a tag");
            prop_assert_eq!(slot(key), set.slot());
        }
    }

    #[test]
    fn parser_never_panics_on_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        let _ = ParsedKey::parse(&bytes);
    }

    #[test]
    fn parser_never_panics_on_mutated_keys(subject in subject(), flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8)) {
        let mut key = KeyBuilder::new("sl").unwrap().key(&subject, &KeyId::new("gcra", "api").unwrap()).unwrap();
        for (at, byte) in flips {
            let i = at.index(key.len());
            key[i] = byte;
        }
        if let Ok(parsed) = ParsedKey::parse(&key) {
            // Whatever parses must rebuild to exactly the same key.
            let rebuilt = KeyBuilder::new(parsed.namespace).unwrap().key(&*parsed.subject, &{
                let id = KeyId::new(parsed.kind, parsed.name).unwrap();
                match parsed.part { Some(p) => id.with_part(p).unwrap(), None => id }
            }).unwrap();
            prop_assert_eq!(rebuilt, key);
        }
    }
}
