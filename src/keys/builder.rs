//! Building keys: `<namespace>:{<subject>}:<kind>:<name>[:<part>]`.

use std::sync::Arc;

use super::ident::{KeyId, validate};
use super::keyset::KeySet;
use crate::error::{Error, Result};

/// Longest subject accepted, in bytes, before escaping.
pub const MAX_SUBJECT_LEN: usize = 1024;

/// Makes every key shardlimit writes, so every key has the same shape and the
/// keys of one subject always share a hash slot.
///
/// Cheap to clone (the namespace is shared).
///
/// ```
/// use shardlimit::keys::{KeyBuilder, KeyId, slot};
/// let keys = KeyBuilder::new("sl")?;
/// let lock = KeyId::new("lock", "job")?;
/// let fence = lock.with_part("fence")?;
/// let set = keys.key_set(b"nightly-export", [&lock, &fence])?;
/// assert_eq!(set.keys()[0], b"sl:{nightly-export}:lock:job");
/// assert_eq!(set.keys()[1], b"sl:{nightly-export}:lock:job:fence");
/// assert_eq!(set.slot(), slot(b"nightly-export"));
/// # Ok::<(), shardlimit::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyBuilder {
    namespace: Arc<str>,
}

impl KeyBuilder {
    /// A builder for keys under `namespace` (`[A-Za-z0-9_.-]{1,64}`).
    pub fn new(namespace: &str) -> Result<Self> {
        validate("namespace", namespace)?;
        Ok(KeyBuilder {
            namespace: Arc::from(namespace),
        })
    }

    /// The namespace every key starts with.
    #[must_use]
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The one key `id` names for `subject`.
    ///
    /// Errors with [`Error::EmptySubject`] or [`Error::SubjectTooLong`].
    pub fn key(&self, subject: impl AsRef<[u8]>, id: &KeyId) -> Result<Vec<u8>> {
        let prefix = self.subject_prefix(subject.as_ref())?;
        Ok(join(&prefix, id))
    }

    /// All keys one operation touches for `subject`, checked to share a slot.
    ///
    /// Errors with [`Error::EmptySubject`], [`Error::SubjectTooLong`] or
    /// [`Error::EmptyKeySet`] when `ids` is empty.
    pub fn key_set<'a>(
        &self,
        subject: impl AsRef<[u8]>,
        ids: impl IntoIterator<Item = &'a KeyId>,
    ) -> Result<KeySet> {
        let prefix = self.subject_prefix(subject.as_ref())?;
        KeySet::checked(ids.into_iter().map(|id| join(&prefix, id)).collect())
    }

    /// The `SCAN MATCH` pattern covering every key of this namespace.
    #[must_use]
    pub fn scan_pattern(&self) -> String {
        format!("{}:*", self.namespace)
    }

    /// `<namespace>:{<escaped subject>}:` — everything before the key id.
    fn subject_prefix(&self, subject: &[u8]) -> Result<Vec<u8>> {
        check_subject(subject)?;
        let mut out = Vec::with_capacity(self.namespace.len() + subject.len() + 4 + 24);
        out.extend_from_slice(self.namespace.as_bytes());
        out.extend_from_slice(b":{");
        escape_into(&mut out, subject);
        out.extend_from_slice(b"}:");
        Ok(out)
    }
}

fn join(prefix: &[u8], id: &KeyId) -> Vec<u8> {
    let mut key = Vec::with_capacity(prefix.len() + id.suffix().len());
    key.extend_from_slice(prefix);
    key.extend_from_slice(id.suffix());
    key
}

/// The slot of every key of `subject` (the slot of its escaped form, which
/// is the keys' hash tag).
pub(crate) fn subject_slot(subject: &[u8]) -> u16 {
    let mut tag = Vec::with_capacity(subject.len() + 8);
    escape_into(&mut tag, subject);
    super::slot(&tag)
}

pub(crate) fn check_subject(subject: &[u8]) -> Result<()> {
    if subject.is_empty() {
        return Err(Error::EmptySubject);
    }
    if subject.len() > MAX_SUBJECT_LEN {
        return Err(Error::SubjectTooLong {
            len: subject.len(),
            max: MAX_SUBJECT_LEN,
        });
    }
    Ok(())
}

/// Percent-escapes `{`, `}` and `%` so the subject can never close the hash
/// tag early (`}`), never open a confusing second one (`{`), and the escape
/// stays reversible (`%`). Every other byte is kept as is: colons, spaces,
/// unicode and binary data are all fine inside a tag.
pub(crate) fn escape_into(out: &mut Vec<u8>, subject: &[u8]) {
    for &b in subject {
        match b {
            b'{' => out.extend_from_slice(b"%7B"),
            b'}' => out.extend_from_slice(b"%7D"),
            b'%' => out.extend_from_slice(b"%25"),
            _ => out.push(b),
        }
    }
}

/// Inverse of [`escape_into`]; `None` when `escaped` is not something the
/// builder can have written (a raw brace, or `%` not followed by one of the
/// three escapes, uppercase).
pub(crate) fn unescape(escaped: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(escaped.len());
    let mut rest = escaped;
    while let Some((&b, tail)) = rest.split_first() {
        match b {
            b'%' => {
                let decoded = match tail.get(..2)? {
                    b"7B" => b'{',
                    b"7D" => b'}',
                    b"25" => b'%',
                    _ => return None,
                };
                out.push(decoded);
                rest = &tail[2..];
            }
            b'{' | b'}' => return None,
            _ => {
                out.push(b);
                rest = tail;
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::slot;

    fn id() -> KeyId {
        KeyId::new("gcra", "api").unwrap()
    }

    #[test]
    fn key_shape() {
        let keys = KeyBuilder::new("sl").unwrap();
        assert_eq!(
            keys.key("user:42", &id()).unwrap(),
            b"sl:{user:42}:gcra:api"
        );
        assert_eq!(keys.scan_pattern(), "sl:*");
    }

    #[test]
    fn braces_and_percent_are_escaped() {
        let keys = KeyBuilder::new("sl").unwrap();
        let key = keys.key("a}b{c%d", &id()).unwrap();
        assert_eq!(key, b"sl:{a%7Db%7Bc%25d}:gcra:api");
        // The tag is the whole escaped subject, never cut short.
        assert_eq!(slot(&key), slot(b"a%7Db%7Bc%25d"));
    }

    #[test]
    fn a_subject_of_only_braces_still_has_a_non_empty_tag() {
        let keys = KeyBuilder::new("sl").unwrap();
        for subject in ["}", "{", "{}", "}}{{"] {
            let key = keys.key(subject, &id()).unwrap();
            assert_ne!(crate::keys::hash_tag(&key), &key[..], "{subject}");
        }
    }

    #[test]
    fn bad_subjects_are_refused() {
        let keys = KeyBuilder::new("sl").unwrap();
        assert!(matches!(keys.key("", &id()), Err(Error::EmptySubject)));
        let long = vec![b'x'; MAX_SUBJECT_LEN + 1];
        assert!(matches!(
            keys.key(&long, &id()),
            Err(Error::SubjectTooLong {
                len: 1025,
                max: 1024
            })
        ));
        keys.key(&long[..MAX_SUBJECT_LEN], &id()).unwrap();
    }

    #[test]
    fn bad_namespaces_are_refused() {
        for ns in ["", "a:b", "a{b}", "has space", &"n".repeat(65)] {
            assert!(
                matches!(
                    KeyBuilder::new(ns),
                    Err(Error::InvalidIdent {
                        field: "namespace",
                        ..
                    })
                ),
                "{ns:?}"
            );
        }
    }

    #[test]
    fn unescape_inverts_escape_and_refuses_foreign_text() {
        let subject = b"%{}%7B\x00\xff";
        let mut escaped = Vec::new();
        escape_into(&mut escaped, subject);
        assert_eq!(unescape(&escaped).unwrap(), subject);
        assert_eq!(unescape(b"%7b"), None, "lowercase is never written");
        assert_eq!(unescape(b"%2"), None);
        assert_eq!(unescape(b"a{b"), None);
    }
}
