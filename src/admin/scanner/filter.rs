//! `Filter`: which primitives a scan reports (kind, name, subject glob), and
//! the byte globs it matches with.

use std::fmt;

use crate::keys::ParsedKey;

/// The kind, name and subject-glob filters of a [`Scanner`](super::Scanner).
/// An empty filter matches every primitive.
#[derive(Clone, Default, PartialEq, Eq)]
pub(crate) struct Filter {
    pub(crate) kind: Option<String>,
    pub(crate) name: Option<String>,
    pub(crate) subject_glob: Option<Vec<u8>>,
}

impl Filter {
    /// Whether the primitive behind `parsed` passes every filter set.
    pub(crate) fn matches(&self, parsed: &ParsedKey<'_>) -> bool {
        self.kind.as_deref().is_none_or(|k| parsed.kind == k)
            && self.name.as_deref().is_none_or(|n| parsed.name == n)
            && self
                .subject_glob
                .as_deref()
                .is_none_or(|g| glob_match(g, &parsed.subject))
    }
}

impl fmt::Debug for Filter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Filter")
            .field("kind", &self.kind)
            .field("name", &self.name)
            .field(
                "subject_glob",
                &self.subject_glob.as_deref().map(String::from_utf8_lossy),
            )
            .finish()
    }
}

/// `prefix` followed by `*`, with the bytes SCAN's glob treats specially
/// escaped, so the pattern matches exactly the keys starting with `prefix`.
pub(crate) fn glob_escape(prefix: &[u8]) -> Vec<u8> {
    let mut pattern = Vec::with_capacity(prefix.len() + 8);
    for &b in prefix {
        if matches!(b, b'*' | b'?' | b'[' | b']' | b'\\') {
            pattern.push(b'\\');
        }
        pattern.push(b);
    }
    pattern.push(b'*');
    pattern
}

/// Glob match over bytes: `*` any run, `?` one byte, `\` escapes.
pub(crate) fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let (mut star_p, mut star_t) = (None, 0);
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star_p = Some(p);
                star_t = t;
                p += 1;
            }
            Some(b'?') => {
                p += 1;
                t += 1;
            }
            Some(b'\\') if pattern.get(p + 1) == Some(&text[t]) => {
                p += 2;
                t += 1;
            }
            Some(&c) if c != b'\\' && c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star_p {
                Some(sp) => {
                    p = sp + 1;
                    star_t += 1;
                    t = star_t;
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        for (p, t, m) in [
            ("*", "", true),
            ("user:*", "user:42", true),
            ("user:*", "users:42", false),
            ("u?er:4*", "user:42", true),
            ("*:42", "user:42", true),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxbyy", false),
            ("\\*", "*", true),
            ("\\*", "a", false),
            ("ab", "abc", false),
        ] {
            assert_eq!(glob_match(p.as_bytes(), t.as_bytes()), m, "{p} ~ {t}");
        }
    }

    #[test]
    fn escaped_globs_match_exactly_the_prefix() {
        for prefix in [&b"sl:{a*b?}:"[..], b"sl:{[x]\\}:", b"sl:{plain}:"] {
            let pattern = glob_escape(prefix);
            let mut key = prefix.to_vec();
            key.extend_from_slice(b"gcra:api");
            assert!(glob_match(&pattern, &key), "{pattern:?}");
            assert!(glob_match(&pattern, prefix));
            assert!(!glob_match(&pattern, b"sl:{axxb?}:gcra:api"));
            assert!(!glob_match(&pattern, b"sl:{x]\\}:gcra:api"));
        }
    }

    #[test]
    fn filters_match_kind_name_and_subject() {
        let key = b"sl:{user:42}:gcra:api";
        let parsed = ParsedKey::parse(key).unwrap();
        assert!(Filter::default().matches(&parsed));
        let by = |kind: Option<&str>, name: Option<&str>, glob: Option<&[u8]>| Filter {
            kind: kind.map(str::to_owned),
            name: name.map(str::to_owned),
            subject_glob: glob.map(<[u8]>::to_vec),
        };
        assert!(by(Some("gcra"), Some("api"), Some(b"user:*")).matches(&parsed));
        assert!(!by(Some("lock"), None, None).matches(&parsed));
        assert!(!by(None, Some("web"), None).matches(&parsed));
        assert!(!by(None, None, Some(b"team:*")).matches(&parsed));
    }
}
