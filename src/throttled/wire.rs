//! A process's report as it is stored: plain text, one line per name and
//! one per subject, so `redis-cli GET` shows it readably.
//!
//! ```text
//! shardlimit-throttled 2
//! name <kind> <name> <window ms> <covered ms> <elapsed ms> <allowed> <denied> <cached> <bypassed> <total> <floor> <recent total> <recent floor>
//! <count> <error> <subject, %XX-escaped outside printable ASCII>
//! recent <count> <error> <subject>
//! ```
//!
//! The plain subject lines are the window's summary, the `recent` ones
//! the denials of the last `elapsed` (version 1 had no `recent`: a reader
//! of this version skips version 1's reports, as it skips any other).

use std::fmt::Write as _;
use std::time::Duration;

use super::recorder::NameReport;
use super::sketch::{Entry, Summary};

const HEADER: &str = "shardlimit-throttled 2";

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
            "name {} {} {} {} {} {allowed} {denied} {cached} {bypassed} {} {} {} {}",
            n.kind,
            n.name,
            ms(n.window),
            ms(n.covered),
            ms(n.elapsed),
            n.summary.total,
            n.summary.floor,
            n.recent.total,
            n.recent.floor
        );
        for (prefix, summary) in [("", &n.summary), ("recent ", &n.recent)] {
            for e in &summary.entries {
                let _ = write!(out, "{prefix}{} {} ", e.count, e.error);
                escape(&mut out, &e.subject);
                out.push('\n');
            }
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
                recent_total,
                recent_floor,
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
                recent: Summary {
                    total: recent_total,
                    floor: recent_floor,
                    entries: Vec::new(),
                },
            });
        } else {
            let (fields, recent) = match fields.as_slice() {
                ["recent", rest @ ..] => (rest, true),
                all => (all, false),
            };
            let [count, error, subject] = fields else {
                return None;
            };
            let name = names.last_mut()?;
            let summary = if recent {
                &mut name.recent
            } else {
                &mut name.summary
            };
            summary.entries.push(Entry {
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
                recent: Summary {
                    total: 3,
                    floor: 0,
                    entries: vec![Entry {
                        subject: b"user 42\n%{x}\xff".to_vec(),
                        count: 3,
                        error: 0,
                    }],
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
                recent: Summary::default(),
            },
        ];
        let bytes = encode(&names);
        assert_eq!(decode(&bytes), Some(names));
        let text = String::from_utf8(bytes).unwrap();
        assert!(
            text.contains("9 1 user%2042%0A%25{x}%FF\n2 0 a\n"),
            "{text}"
        );
        assert!(
            text.ends_with(
                "\nrecent 3 0 user%2042%0A%25{x}%FF\nname fw login 6000 0 0 0 0 0 0 0 0 0 0\n"
            ),
            "{text}"
        );
        assert_eq!(decode(b"shardlimit-throttled 1\n"), None);
        assert_eq!(decode(b"shardlimit-throttled 2\n1 0 orphan\n"), None);
        assert_eq!(decode(b"shardlimit-throttled 2\nname a b 1\n"), None);
        assert_eq!(decode(b"shardlimit-throttled 2\nrecent 1 0\n"), None);
    }
}
