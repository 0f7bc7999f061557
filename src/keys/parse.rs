//! Parsing keys back into their parts — the inverse of the builder.

use std::borrow::Cow;

use super::builder::{check_subject, unescape};
use super::ident::validate_bytes;
use crate::error::{Error, Result};

/// A key taken apart: `<namespace>:{<subject>}:<kind>:<name>[:<part>]`.
///
/// ```
/// use shardlimit::keys::ParsedKey;
/// let key = ParsedKey::parse(b"sl:{user%7B1%7D}:gcra:api")?;
/// assert_eq!(key.namespace, "sl");
/// assert_eq!(&*key.subject, b"user{1}");
/// assert_eq!((key.kind, key.name, key.part), ("gcra", "api", None));
/// # Ok::<(), shardlimit::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedKey<'a> {
    /// The namespace.
    pub namespace: &'a str,
    /// The subject, unescaped (borrowed when it needed no unescaping).
    pub subject: Cow<'a, [u8]>,
    /// The primitive kind.
    pub kind: &'a str,
    /// The primitive's name.
    pub name: &'a str,
    /// The part, for primitives with several keys.
    pub part: Option<&'a str>,
}

impl<'a> ParsedKey<'a> {
    /// Parses a key the [`KeyBuilder`](super::KeyBuilder) made.
    ///
    /// Strict: anything the builder cannot have written — a missing or empty
    /// tag, an unknown escape, an identifier outside `[A-Za-z0-9_.-]{1,64}`,
    /// more than three parts after the tag — is an
    /// [`Error::UnparseableKey`]. Never panics, whatever the bytes.
    pub fn parse(key: &'a [u8]) -> Result<Self> {
        let fail = |reason| Error::UnparseableKey {
            key: String::from_utf8_lossy(key).into_owned(),
            reason,
        };
        let colon = key
            .iter()
            .position(|&b| b == b':')
            .ok_or_else(|| fail("no ':' after the namespace"))?;
        let namespace =
            validate_bytes("namespace", &key[..colon]).map_err(|_| fail("invalid namespace"))?;
        let rest = key[colon + 1..]
            .strip_prefix(b"{")
            .ok_or_else(|| fail("no '{' after the namespace"))?;
        let close = rest
            .iter()
            .position(|&b| b == b'}')
            .ok_or_else(|| fail("hash tag is not closed"))?;
        let escaped = &rest[..close];
        let subject = if escaped.contains(&b'%') {
            Cow::Owned(unescape(escaped).ok_or_else(|| fail("invalid escape in subject"))?)
        } else if escaped.contains(&b'{') {
            return Err(fail("unescaped '{' in subject"));
        } else {
            Cow::Borrowed(escaped)
        };
        check_subject(&subject).map_err(|_| fail("subject is empty or too long"))?;
        let tail = rest[close + 1..]
            .strip_prefix(b":")
            .ok_or_else(|| fail("no ':' after the hash tag"))?;

        let mut fields = tail.split(|&b| b == b':');
        let mut next = |field| match fields.next() {
            Some(bytes) => validate_bytes(field, bytes)
                .map(Some)
                .map_err(|_| fail("invalid kind, name or part")),
            None => Ok(None),
        };
        let kind = next("kind")?.ok_or_else(|| fail("no kind"))?;
        let name = next("name")?.ok_or_else(|| fail("no name"))?;
        let part = next("part")?;
        if next("part")?.is_some() {
            return Err(fail("more than kind, name and part after the hash tag"));
        }
        Ok(ParsedKey {
            namespace,
            subject,
            kind,
            name,
            part,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::{KeyBuilder, KeyId};

    fn round_trip(subject: &[u8], part: Option<&str>) {
        let keys = KeyBuilder::new("ns-1").unwrap();
        let mut id = KeyId::new("sw", "api.v2").unwrap();
        if let Some(part) = part {
            id = id.with_part(part).unwrap();
        }
        let key = keys.key(subject, &id).unwrap();
        let parsed = ParsedKey::parse(&key).unwrap();
        assert_eq!(parsed.namespace, "ns-1");
        assert_eq!(&*parsed.subject, subject);
        assert_eq!(parsed.kind, "sw");
        assert_eq!(parsed.name, "api.v2");
        assert_eq!(parsed.part, part);
    }

    #[test]
    fn round_trips() {
        for subject in [
            &b"user:42"[..],
            b"{",
            b"}",
            b"{}",
            b"a{b}c",
            b"%",
            b"%7B",
            b"100%",
            b":::",
            "ユーザー🦀".as_bytes(),
            b"\x00\xff\xfe\x80",
            b" ",
        ] {
            round_trip(subject, None);
            round_trip(subject, Some("prev"));
        }
        let every_byte: Vec<u8> = (0..=255).collect();
        round_trip(&every_byte, Some("fence"));
    }

    #[test]
    fn rejects_what_the_builder_never_writes() {
        for key in [
            &b""[..],
            b"sl",
            b"sl:",
            b"sl:user:gcra:api",
            b"sl:{}:gcra:api",
            b"sl:{a:gcra:api",
            b"sl:{a}gcra:api",
            b"sl:{a}:gcra",
            b"sl:{a}:gcra:",
            b"sl:{a}:gcra:api:p:q",
            b"sl:{a%7b}:gcra:api",
            b"sl:{a%}:gcra:api",
            b"sl:{a{b}:gcra:api",
            b"s l:{a}:gcra:api",
            b"sl:{a}:gc ra:api",
            b"sl:{a}:gcra:api:\xff",
        ] {
            assert!(
                matches!(ParsedKey::parse(key), Err(Error::UnparseableKey { .. })),
                "{:?}",
                String::from_utf8_lossy(key)
            );
        }
    }

    #[test]
    fn borrowed_when_nothing_to_unescape() {
        let parsed = ParsedKey::parse(b"sl:{plain}:fw:api").unwrap();
        assert!(matches!(parsed.subject, Cow::Borrowed(b"plain")));
    }
}
