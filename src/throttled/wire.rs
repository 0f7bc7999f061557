//! A process's report as it is stored: plain text, one line per name and
//! one per subject, so `redis-cli GET` shows it readably.
//!
//! ```text
//! shardlimit-throttled 1
//! name <kind> <name> <window ms> <covered ms> <elapsed ms> <allowed> <denied> <cached> <bypassed> <total> <floor>
//! <count> <error> <subject, %XX-escaped outside printable ASCII>
//! ```

use std::fmt::Write as _;
use std::time::Duration;

use super::recorder::NameReport;
use super::sketch::{Entry, Summary};

const HEADER: &str = "shardlimit-throttled 1";

/// The stored form of `names`.
pub(crate) fn encode(names: &[NameReport]) -> Vec<u8> {
    let mut out = String::from(HEADER);
    out.push('\n');
    for n in names {
        let ms = |d: Duration| d.as_millis();
        let [allowed, denied, cached, bypassed] = n.counts;
        // Writing to a String cannot fail.
        let _ = writeln!(
            out,
            "name {} {} {} {} {} {allowed} {denied} {cached} {bypassed} {} {}",
            n.kind,
            n.name,
            ms(n.window),
            ms(n.covered),
            ms(n.elapsed),
            n.summary.total,
            n.summary.floor
        );
        for e in &n.summary.entries {
            let _ = write!(out, "{} {} ", e.count, e.error);
            escape(&mut out, &e.subject);
            out.push('\n');
        }
    }
    out.into_bytes()
}

/// The names of a stored report; `None` when it is not one (another
/// version's, or damaged): the caller skips it.
pub(crate) fn decode(bytes: &[u8]) -> Option<Vec<NameReport>> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut lines = text.lines();
    if lines.next()? != HEADER {
        return None;
    }
    let mut names: Vec<NameReport> = Vec::new();
    for line in lines {
        let fields: Vec<&str> = line.split(' ').collect();
        if fields[0] == "name" {
            let [_, kind, name, rest @ ..] = fields.as_slice() else {
                return None;
            };
            let nums: Vec<u64> = rest.iter().map(|f| f.parse().ok()).collect::<Option<_>>()?;
            let [
                window,
                covered,
                elapsed,
                allowed,
                denied,
                cached,
                bypassed,
                total,
                floor,
            ] = nums[..]
            else {
                return None;
            };
            names.push(NameReport {
                kind: (*kind).to_owned(),
                name: (*name).to_owned(),
                window: Duration::from_millis(window),
                covered: Duration::from_millis(covered),
                elapsed: Duration::from_millis(elapsed),
                counts: [allowed, denied, cached, bypassed],
                summary: Summary {
                    total,
                    floor,
                    entries: Vec::new(),
                },
            });
        } else {
            let [count, error, subject] = fields.as_slice() else {
                return None;
            };
            names.last_mut()?.summary.entries.push(Entry {
                subject: unescape(subject)?,
                count: count.parse().ok()?,
                error: error.parse().ok()?,
            });
        }
    }
    Some(names)
}

fn escape(out: &mut String, subject: &[u8]) {
    for &b in subject {
        if b.is_ascii_graphic() && b != b'%' {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
}

fn unescape(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_round_trips_whatever_the_subjects_bytes() {
        let names = vec![
            NameReport {
                kind: "gcra".into(),
                name: "api".into(),
                window: Duration::from_secs(60),
                covered: Duration::from_millis(42_017),
                elapsed: Duration::from_millis(5003),
                counts: [10, 4, 7, 1],
                summary: Summary {
                    total: 11,
                    floor: 0,
                    entries: vec![
                        Entry {
                            subject: b"user 42\n%{x}\xff".to_vec(),
                            count: 9,
                            error: 1,
                        },
                        Entry {
                            subject: b"a".to_vec(),
                            count: 2,
                            error: 0,
                        },
                    ],
                },
            },
            NameReport {
                kind: "fw".into(),
                name: "login".into(),
                window: Duration::from_secs(6),
                covered: Duration::ZERO,
                elapsed: Duration::ZERO,
                counts: [0; 4],
                summary: Summary::default(),
            },
        ];
        let bytes = encode(&names);
        assert_eq!(decode(&bytes), Some(names));
        assert!(
            String::from_utf8(bytes)
                .unwrap()
                .contains("9 1 user%2042%0A%25{x}%FF\n")
        );
        assert_eq!(decode(b"shardlimit-throttled 2\n"), None);
        assert_eq!(decode(b"shardlimit-throttled 1\n1 0 orphan\n"), None);
        assert_eq!(decode(b"shardlimit-throttled 1\nname a b 1\n"), None);
    }
}
