//! Validated identifiers: namespace, kind, name and part.

use crate::error::{Error, Result};

/// Longest identifier allowed, in bytes.
pub const MAX_IDENT_LEN: usize = 64;

/// Checks `value` against `[A-Za-z0-9_.-]{1,64}`.
///
/// The set excludes `:` (the separator), `{`/`}` (hash tags), `*?[]` (SCAN
/// patterns) and anything that needs quoting, so a key's fixed parts can be
/// parsed back and matched without escaping.
pub(crate) fn validate(field: &'static str, value: &str) -> Result<()> {
    let reason = if value.is_empty() {
        "must not be empty"
    } else if value.len() > MAX_IDENT_LEN {
        "is longer than 64 bytes"
    } else if !value.bytes().all(is_ident_byte) {
        "may only contain A-Z, a-z, 0-9, '_', '.' and '-'"
    } else {
        return Ok(());
    };
    Err(Error::InvalidIdent {
        field,
        value: value.to_owned(),
        reason,
    })
}

/// Like [`validate`] for bytes read back from Redis; returns the text.
pub(crate) fn validate_bytes<'a>(field: &'static str, value: &'a [u8]) -> Result<&'a str> {
    match std::str::from_utf8(value) {
        Ok(text) => validate(field, text).map(|()| text),
        Err(_) => Err(Error::InvalidIdent {
            field,
            value: String::from_utf8_lossy(value).into_owned(),
            reason: "may only contain A-Z, a-z, 0-9, '_', '.' and '-'",
        }),
    }
}

pub(crate) const fn is_ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-')
}

/// Which key of a primitive: its kind (`gcra`, `lock`, …), its name (chosen by
/// the user, e.g. `api`) and an optional part for primitives with more than one
/// key (e.g. a lock's `fence`).
///
/// Validated once when built, so building keys per request costs no
/// validation of these parts.
///
/// ```
/// use shardlimit::keys::KeyId;
/// let id = KeyId::new("lock", "nightly-export")?.with_part("fence")?;
/// assert_eq!(id.kind(), "lock");
/// assert_eq!(id.name(), "nightly-export");
/// assert_eq!(id.part(), Some("fence"));
/// assert!(KeyId::new("lock", "has space").is_err());
/// # Ok::<(), shardlimit::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct KeyId {
    /// `kind:name[:part]`, exactly as it follows the tag in a key.
    suffix: Box<str>,
    kind_len: usize,
    name_len: usize,
}

impl KeyId {
    /// A key id without a part. Errors with [`Error::InvalidIdent`] unless
    /// both are `[A-Za-z0-9_.-]{1,64}`.
    pub fn new(kind: &str, name: &str) -> Result<Self> {
        validate("kind", kind)?;
        validate("name", name)?;
        Ok(KeyId {
            suffix: format!("{kind}:{name}").into_boxed_str(),
            kind_len: kind.len(),
            name_len: name.len(),
        })
    }

    /// The same id with `part` appended (replacing any existing part).
    pub fn with_part(&self, part: &str) -> Result<Self> {
        validate("part", part)?;
        let base = &self.suffix[..self.kind_len + 1 + self.name_len];
        Ok(KeyId {
            suffix: format!("{base}:{part}").into_boxed_str(),
            kind_len: self.kind_len,
            name_len: self.name_len,
        })
    }

    /// The primitive kind, e.g. `gcra`.
    #[must_use]
    pub fn kind(&self) -> &str {
        &self.suffix[..self.kind_len]
    }

    /// The user-chosen name, e.g. `api`.
    #[must_use]
    pub fn name(&self) -> &str {
        let start = self.kind_len + 1;
        &self.suffix[start..start + self.name_len]
    }

    /// The part, if any.
    #[must_use]
    pub fn part(&self) -> Option<&str> {
        self.suffix.get(self.kind_len + 1 + self.name_len + 1..)
    }

    pub(crate) fn suffix(&self) -> &[u8] {
        self.suffix.as_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_allowed_set() {
        validate("name", "A-z_0.9").unwrap();
        validate("name", &"a".repeat(64)).unwrap();
    }

    #[test]
    fn rejects_each_bad_case_with_the_field_named() {
        for (value, reason) in [
            ("", "must not be empty"),
            (&*"a".repeat(65), "is longer than 64 bytes"),
            ("a:b", "may only contain A-Z, a-z, 0-9, '_', '.' and '-'"),
            ("a{b", "may only contain A-Z, a-z, 0-9, '_', '.' and '-'"),
            ("a b", "may only contain A-Z, a-z, 0-9, '_', '.' and '-'"),
            ("a*", "may only contain A-Z, a-z, 0-9, '_', '.' and '-'"),
            ("é", "may only contain A-Z, a-z, 0-9, '_', '.' and '-'"),
        ] {
            match validate("kind", value) {
                Err(Error::InvalidIdent {
                    field: "kind",
                    value: v,
                    reason: r,
                }) => {
                    assert_eq!(v, value);
                    assert_eq!(r, reason);
                }
                other => panic!("{value:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn key_id_parts() {
        let id = KeyId::new("sw", "api").unwrap();
        assert_eq!((id.kind(), id.name(), id.part()), ("sw", "api", None));
        let with = id.with_part("prev").unwrap();
        assert_eq!(with.part(), Some("prev"));
        assert_eq!(with.with_part("cur").unwrap().part(), Some("cur"));
        assert_eq!(with.suffix(), b"sw:api:prev");
        assert!(matches!(
            KeyId::new("sw", "a:b"),
            Err(Error::InvalidIdent { field: "name", .. })
        ));
        assert!(matches!(
            id.with_part(""),
            Err(Error::InvalidIdent { field: "part", .. })
        ));
    }

    #[test]
    fn bytes_must_be_utf8_idents() {
        assert_eq!(validate_bytes("kind", b"gcra").unwrap(), "gcra");
        assert!(validate_bytes("kind", &[0xff]).is_err());
    }
}
