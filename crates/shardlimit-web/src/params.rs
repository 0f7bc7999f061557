//! What the pages take from their URLs and forms, and how links name a
//! subject.
//!
//! Subjects are bytes. A UTF-8 subject travels as `subject=<text>`
//! (percent-encoded); any other as `subject_hex=<hex>`, so every subject
//! has a link, and no link mangles one.

use serde::Deserialize;

use super::base::Base;

/// Which subject a page is about.
#[derive(Clone, Debug, Default, Deserialize)]
pub(super) struct SubjectQuery {
    pub(super) subject: Option<String>,
    pub(super) subject_hex: Option<String>,
}

impl SubjectQuery {
    /// The subject's bytes, or why the query names none.
    pub(super) fn bytes(&self) -> Result<Vec<u8>, String> {
        match (non_empty(&self.subject), non_empty(&self.subject_hex)) {
            (Some(text), None) => Ok(text.as_bytes().to_vec()),
            (None, Some(h)) => hex::decode(h)
                .map_err(|_| format!("subject_hex {h:?} is not an even number of hex digits")),
            (Some(_), Some(_)) => Err("give subject or subject_hex, not both".into()),
            (None, None) => Err("no subject given (subject=… or subject_hex=…)".into()),
        }
    }
}

/// The limiters view's filters and position.
#[derive(Clone, Debug, Default, Deserialize)]
pub(super) struct Filters {
    pub(super) kind: Option<String>,
    pub(super) name: Option<String>,
    /// A subject glob: `*`, `?`, `\` escapes.
    pub(super) subject: Option<String>,
    pub(super) cursor: Option<String>,
    /// The page's number in the walk, for people (the cursor says where).
    pub(super) page: Option<String>,
}

impl Filters {
    pub(super) fn kind(&self) -> Option<&str> {
        non_empty(&self.kind)
    }
    pub(super) fn name(&self) -> Option<&str> {
        non_empty(&self.name)
    }
    pub(super) fn subject(&self) -> Option<&str> {
        non_empty(&self.subject)
    }
    pub(super) fn cursor(&self) -> Option<&str> {
        non_empty(&self.cursor)
    }
    /// 1 on the first page (or a number that is none).
    pub(super) fn page(&self) -> u64 {
        match self.cursor() {
            None => 1,
            Some(_) => non_empty(&self.page)
                .and_then(|p| p.parse().ok())
                .filter(|&p| p > 1)
                .unwrap_or(2),
        }
    }
    /// The subject filter when it names one subject (no glob character).
    pub(super) fn exact_subject(&self) -> Option<&str> {
        self.subject().filter(|s| !s.contains(['*', '?', '\\']))
    }

    /// This view's URL query at the next page's cursor (`None`: the first
    /// page).
    pub(super) fn query_at(&self, cursor: Option<&str>) -> String {
        let page = cursor.map(|_| self.page().saturating_add(1).to_string());
        let mut parts = Vec::new();
        for (key, value) in [
            ("kind", self.kind()),
            ("name", self.name()),
            ("subject", self.subject()),
            ("cursor", cursor),
            ("page", page.as_deref()),
        ] {
            if let Some(value) = value {
                parts.push(format!("{key}={}", percent(value.as_bytes())));
            }
        }
        parts.join("&")
    }
}

/// A reset: what, and whether forced.
#[derive(Clone, Debug, Default, Deserialize)]
pub(super) struct ResetQuery {
    #[serde(flatten)]
    pub(super) subject: SubjectQuery,
    pub(super) kind: Option<String>,
    pub(super) name: Option<String>,
    /// `1`, `true` or `on`.
    pub(super) force: Option<String>,
    /// The CSRF token (on the POST only).
    pub(super) token: Option<String>,
}

impl ResetQuery {
    pub(super) fn kind(&self) -> Option<&str> {
        non_empty(&self.kind)
    }
    pub(super) fn name(&self) -> Option<&str> {
        non_empty(&self.name)
    }
    pub(super) fn force(&self) -> bool {
        matches!(non_empty(&self.force), Some("1" | "true" | "on" | "yes"))
    }
}

/// `?refresh=1` on the overview and audit pages.
#[derive(Clone, Debug, Default, Deserialize)]
pub(super) struct Refresh {
    pub(super) refresh: Option<String>,
}

impl Refresh {
    pub(super) fn forced(&self) -> bool {
        non_empty(&self.refresh).is_some()
    }
}

fn non_empty(value: &Option<String>) -> Option<&str> {
    value.as_deref().filter(|v| !v.is_empty())
}

/// The query naming `subject`: `subject=…` when it is UTF-8, else
/// `subject_hex=…`.
pub(super) fn subject_query(subject: &[u8]) -> String {
    match std::str::from_utf8(subject) {
        Ok(text) => format!("subject={}", percent(text.as_bytes())),
        Err(_) => format!("subject_hex={}", hex::encode(subject)),
    }
}

/// The link to the reset of `subject` (of one limiter `kind`/`name`, or
/// everything of it): its confirmation page.
pub(super) fn reset_link(base: &Base, subject: &[u8], kind_name: Option<(&str, &str)>) -> String {
    action_link(base, "/reset", subject, kind_name)
}

/// The link to the action at `path` (its confirmation page) on `subject`,
/// of one limiter `kind`/`name` or all of them.
pub(super) fn action_link(
    base: &Base,
    path: &str,
    subject: &[u8],
    kind_name: Option<(&str, &str)>,
) -> String {
    let mut url = format!("{path}?{}", subject_query(subject));
    if let Some((kind, name)) = kind_name {
        url.push_str(&format!(
            "&kind={}&name={}",
            percent(kind.as_bytes()),
            percent(name.as_bytes())
        ));
    }
    base.to(&url)
}

/// The form fields naming `subject`, as (name, value).
pub(super) fn subject_field(subject: &[u8]) -> (&'static str, String) {
    match std::str::from_utf8(subject) {
        Ok(text) => ("subject", text.to_owned()),
        Err(_) => ("subject_hex", hex::encode(subject)),
    }
}

/// A subject as a person reads it: the text, or for bytes that are not
/// UTF-8, the lossy text followed by the hex.
pub(super) fn subject_display(subject: &[u8]) -> String {
    match std::str::from_utf8(subject) {
        Ok(text) => text.to_owned(),
        Err(_) => format!(
            "{} (hex {})",
            String::from_utf8_lossy(subject),
            hex::encode(subject)
        ),
    }
}

/// Percent-encodes every byte but the URL-unreserved ones.
pub(super) fn percent(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_survive_the_round_trip_through_a_link() {
        for subject in [
            &b"user:42"[..],
            b"<script>alert(1)</script>",
            b"a&b=c d",
            b"\xff\x00{%}",
        ] {
            let query = subject_query(subject);
            let (key, value) = query.split_once('=').unwrap();
            let decoded: Vec<(String, String)> = serde_urlencoded_pairs(&format!("{key}={value}"));
            let q = SubjectQuery {
                subject: (decoded[0].0 == "subject").then(|| decoded[0].1.clone()),
                subject_hex: (decoded[0].0 == "subject_hex").then(|| decoded[0].1.clone()),
            };
            assert_eq!(q.bytes().unwrap(), subject);
        }
    }

    /// A minimal x-www-form-urlencoded decoder for the test: `%XX` only.
    fn serde_urlencoded_pairs(query: &str) -> Vec<(String, String)> {
        query
            .split('&')
            .map(|pair| {
                let (k, v) = pair.split_once('=').unwrap();
                let mut bytes = Vec::new();
                let raw = v.as_bytes();
                let mut i = 0;
                while i < raw.len() {
                    if raw[i] == b'%' {
                        bytes.push(u8::from_str_radix(&v[i + 1..i + 3], 16).unwrap());
                        i += 3;
                    } else {
                        bytes.push(raw[i]);
                        i += 1;
                    }
                }
                (k.to_owned(), String::from_utf8(bytes).unwrap())
            })
            .collect()
    }

    #[test]
    fn a_query_names_exactly_one_subject() {
        let q = |s: Option<&str>, h: Option<&str>| SubjectQuery {
            subject: s.map(Into::into),
            subject_hex: h.map(Into::into),
        };
        assert!(q(None, None).bytes().is_err());
        assert!(q(Some(""), Some("")).bytes().is_err());
        assert!(q(Some("a"), Some("61")).bytes().is_err());
        assert!(q(None, Some("6")).bytes().is_err());
        assert_eq!(q(None, Some("ff00")).bytes().unwrap(), b"\xff\x00");
    }

    #[test]
    fn filters_keep_the_others_when_paging() {
        let f = Filters {
            kind: Some("gcra".into()),
            name: Some(String::new()),
            subject: Some("user:*".into()),
            cursor: Some("1.0-1-2-a".into()),
            page: Some("7".into()),
        };
        assert_eq!(
            f.query_at(Some("1.x")),
            "kind=gcra&subject=user%3A%2A&cursor=1.x&page=8"
        );
        assert_eq!(f.query_at(None), "kind=gcra&subject=user%3A%2A");
        assert_eq!(f.exact_subject(), None);
        let first = Filters {
            subject: Some("user:42".into()),
            ..Filters::default()
        };
        assert_eq!(first.page(), 1);
        assert_eq!(first.exact_subject(), Some("user:42"));
        assert_eq!(
            first.query_at(Some("1.x")),
            "subject=user%3A42&cursor=1.x&page=2"
        );
    }
}
