//! The command line's own value syntax, parsed by clap before anything is
//! contacted, and printed back the same way:
//!
//! * a rate limiter is `<kind>:<name>` — its algorithm's key kind (`fw`,
//!   `slog`, `swc`, `gcra`) and its name, as in its keys (`gcra:api` is
//!   `<ns>:{<subject>}:gcra:api`);
//! * a duration is one or more `<n><unit>` groups, largest unit first, with
//!   units `d`, `h`, `m`, `s`, `ms`: `30d`, `1m`, `1h30m`, `1500ms`;
//! * a quota is `<limit>/<period>`, and for GCRA optionally
//!   `:burst=<burst>`: `100/1m`, `10/1s:burst=20`.

use std::fmt;
use std::num::NonZeroU32;
use std::time::Duration;

use shardlimit::keys::KeyId;
use shardlimit::limit::MAX_OVERRIDE_TTL;
use shardlimit::{Algorithm, Quota};

/// A rate limiter as the command line names it: `<kind>:<name>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LimiterRef {
    pub(crate) algorithm: Algorithm,
    pub(crate) name: String,
}

impl fmt::Display for LimiterRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.algorithm.kind(), self.name)
    }
}

/// The kinds a rate limiter's keys can have, for error messages.
fn limiter_kinds() -> String {
    Algorithm::ALL.map(Algorithm::kind).join(", ")
}

/// `<kind>:<name>`, e.g. `gcra:api`.
pub(crate) fn limiter(text: &str) -> Result<LimiterRef, String> {
    let Some((kind, name)) = text.split_once(':') else {
        return Err(format!(
            "expected <kind>:<name>, e.g. gcra:api (kind one of {})",
            limiter_kinds()
        ));
    };
    let algorithm = Algorithm::from_kind(kind).ok_or_else(|| {
        format!(
            "unknown rate limiter kind {kind:?}: one of {}",
            limiter_kinds()
        )
    })?;
    // The library's own check of a name, so what is accepted here is what
    // a limiter can be built with.
    KeyId::new(kind, name).map_err(|err| err.to_string())?;
    Ok(LimiterRef {
        algorithm,
        name: name.to_owned(),
    })
}

/// The units of a duration, largest first.
const UNITS: [(&str, Duration); 5] = [
    ("d", Duration::from_secs(86_400)),
    ("h", Duration::from_secs(3600)),
    ("m", Duration::from_secs(60)),
    ("s", Duration::from_secs(1)),
    ("ms", Duration::from_millis(1)),
];

/// One or more `<n><unit>` groups, largest unit first: `30d`, `1h30m`,
/// `1500ms`. Zero is refused: nothing here lasts no time at all.
pub(crate) fn duration(text: &str) -> Result<Duration, String> {
    span(text).map_err(|why| {
        format!(
            "{why}; expected e.g. 30d, 1h30m, 90s or 1500ms (units d, h, m, s, ms, \
             largest first)"
        )
    })
}

/// [`duration`], with only the reason for an error.
fn span(text: &str) -> Result<Duration, String> {
    let mut rest = text;
    let mut total = Duration::ZERO;
    let mut last_unit = None;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let letters = rest[digits..]
            .bytes()
            .take_while(u8::is_ascii_alphabetic)
            .count();
        let (number, unit) = (&rest[..digits], &rest[digits..digits + letters]);
        if number.is_empty() || unit.is_empty() {
            return Err("a number without a unit, or a unit without a number".into());
        }
        let Some(at) = UNITS.iter().position(|(name, _)| *name == unit) else {
            return Err(format!("unknown unit {unit:?}"));
        };
        if last_unit.is_some_and(|last| at <= last) {
            return Err("units out of order".into());
        }
        last_unit = Some(at);
        let n: u32 = number
            .parse()
            .map_err(|_| format!("{number} is too large"))?;
        total = UNITS[at]
            .1
            .checked_mul(n)
            .and_then(|d| total.checked_add(d))
            .ok_or("too long")?;
        rest = &rest[digits + letters..];
    }
    if total.is_zero() {
        return Err("no time at all".into());
    }
    Ok(total)
}

/// A whole number of milliseconds as [`duration`] reads it: `30d`,
/// `29d23h59m58s120ms`; what is below a millisecond is dropped.
pub(crate) fn format_duration(d: Duration) -> String {
    let mut left = d.as_millis();
    let mut text = String::new();
    for (name, unit) in UNITS {
        let n = left / unit.as_millis();
        if n > 0 {
            text.push_str(&format!("{n}{name}"));
            left %= unit.as_millis();
        }
    }
    if text.is_empty() {
        text.push_str("0ms");
    }
    text
}

/// `--ttl` of an override: a [`duration`] of at most
/// [`MAX_OVERRIDE_TTL`] (366 days).
pub(crate) fn override_ttl(text: &str) -> Result<Duration, String> {
    let ttl = duration(text)?;
    if ttl > MAX_OVERRIDE_TTL {
        return Err(format!(
            "an override lives at most {} (set it again to renew it), not {}",
            format_duration(MAX_OVERRIDE_TTL),
            format_duration(ttl)
        ));
    }
    Ok(ttl)
}

/// `<limit>/<period>[:burst=<burst>]`: `100/1m`, `10/1s:burst=20`. Whether
/// the quota suits the algorithm (a sliding log's limit of 128, a burst only
/// for GCRA) is the library's check, made when the limiter is built.
pub(crate) fn quota(text: &str) -> Result<Quota, String> {
    let bad = |why: String| {
        format!("{why}; expected <limit>/<period>[:burst=<n>], e.g. 100/1m or 10/1s:burst=20")
    };
    let (rate, burst) = match text.split_once(':') {
        Some((rate, extra)) => {
            let burst = extra
                .strip_prefix("burst=")
                .ok_or_else(|| bad(format!("unknown option {extra:?}")))?;
            (
                rate,
                Some(count(burst).map_err(|e| bad(format!("burst {e}")))?),
            )
        }
        None => (text, None),
    };
    let (limit, period) = rate
        .split_once('/')
        .ok_or_else(|| bad("no '/'".to_owned()))?;
    let limit = count(limit).map_err(|e| bad(format!("limit {e}")))?;
    let period = span(period).map_err(|e| bad(format!("period {period:?}: {e}")))?;
    if period > Quota::MAX_PERIOD {
        return Err(bad(format!(
            "a period over {}",
            format_duration(Quota::MAX_PERIOD)
        )));
    }
    let quota = Quota::with_period(limit, period);
    Ok(match burst {
        Some(burst) if burst != limit => quota.allow_burst(burst),
        _ => quota,
    })
}

/// `--quota <name>=<quota>`: the quota of every rate limiter named
/// `name`, e.g. `api=60/1m`, which wins over the catalog.
pub(crate) fn given_quota(text: &str) -> Result<(String, Quota), String> {
    let (name, rest) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?}: expected <name>=<limit>/<period>, e.g. api=60/1m"))?;
    shardlimit::keys::KeyId::new("fw", name).map_err(|err| err.to_string())?;
    Ok((name.to_owned(), quota(rest)?))
}

/// `1` to `4294967295`.
fn count(text: &str) -> Result<NonZeroU32, String> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{text:?} is not a whole number"));
    }
    text.parse::<NonZeroU32>()
        .map_err(|_| format!("{text} is not between 1 and {}", u32::MAX))
}

/// A quota as [`quota`] reads it.
pub(crate) fn format_quota(quota: &Quota) -> String {
    let mut text = format!("{}/{}", quota.limit(), format_duration(quota.period()));
    if quota.burst() != quota.limit() {
        text.push_str(&format!(":burst={}", quota.burst()));
    }
    text
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn nz(n: u32) -> NonZeroU32 {
        NonZeroU32::new(n).unwrap()
    }

    #[test]
    fn limiters_are_kind_colon_name() {
        let api = limiter("gcra:api").unwrap();
        assert_eq!((api.algorithm, api.name.as_str()), (Algorithm::Gcra, "api"));
        assert_eq!(api.to_string(), "gcra:api");
        assert_eq!(
            limiter("slog:login.v2").unwrap().algorithm,
            Algorithm::SlidingLog
        );
        for (bad, says) in [
            ("api", "expected <kind>:<name>"),
            (
                "leaky:api",
                "unknown rate limiter kind \"leaky\": one of fw, slog, swc, gcra",
            ),
            ("lock:job", "unknown rate limiter kind"),
            ("gcra:", "name"),
            ("gcra:a:b", "name"),
            ("gcra:sp ace", "name"),
        ] {
            let err = limiter(bad).unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }

    #[test]
    fn durations_read_and_print_the_same_way() {
        for (text, d) in [
            ("30d", Duration::from_secs(30 * 86_400)),
            ("1m", Duration::from_secs(60)),
            ("1h30m", Duration::from_secs(5400)),
            ("1500ms", Duration::from_millis(1500)),
            ("2d3h4m5s6ms", Duration::from_millis(183_845_006)),
        ] {
            assert_eq!(duration(text).unwrap(), d, "{text}");
        }
        assert_eq!(format_duration(Duration::from_millis(1500)), "1s500ms");
        assert_eq!(format_duration(Duration::from_secs(5400)), "1h30m");
        assert_eq!(format_duration(Duration::from_micros(999)), "0ms");
        for ms in [1, 999, 60_000, 86_399_999, 31_622_400_000] {
            let d = Duration::from_millis(ms);
            assert_eq!(duration(&format_duration(d)).unwrap(), d);
        }
        for bad in [
            "",
            "30",
            "d",
            "1x",
            "1m1h",
            "1s1s",
            "0s",
            "1 s",
            "-1s",
            "99999999999d",
            "1.5s",
        ] {
            assert!(duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn override_ttls_stop_at_the_librarys_maximum() {
        assert_eq!(override_ttl("366d").unwrap(), MAX_OVERRIDE_TTL);
        let err = override_ttl("367d").unwrap_err();
        assert_eq!(
            err,
            "an override lives at most 366d (set it again to renew it), not 367d"
        );
    }

    #[test]
    fn given_quotas_name_a_limiter() {
        let (name, quota) = given_quota("api=60/1m").unwrap();
        assert_eq!(
            (name.as_str(), format_quota(&quota)),
            ("api", "60/1m".to_owned())
        );
        assert!(given_quota("60/1m").is_err());
        assert!(given_quota("a pi=60/1m").is_err());
        assert!(given_quota("api=60").is_err());
    }

    #[test]
    fn quotas_read_and_print_the_same_way() {
        assert_eq!(quota("100/1m").unwrap(), Quota::per_minute(nz(100)));
        assert_eq!(
            quota("10/1s:burst=20").unwrap(),
            Quota::per_second(nz(10)).allow_burst(nz(20))
        );
        // A burst equal to the limit is no burst.
        assert_eq!(quota("10/1s:burst=10").unwrap(), Quota::per_second(nz(10)));
        for text in ["5/1h", "10/1s:burst=20", "7/1h30m", "1/366d"] {
            assert_eq!(format_quota(&quota(text).unwrap()), text);
        }
        for (bad, says) in [
            ("100", "no '/'"),
            ("0/1s", "limit 0 is not between 1 and 4294967295"),
            ("x/1s", "limit \"x\" is not a whole number"),
            ("100/1", "a number without a unit"),
            ("100/1s:bust=2", "unknown option \"bust=2\""),
            ("100/1s:burst=0", "burst 0 is not between"),
            ("1/367d", "a period over 366d"),
            (
                "4294967296/1s",
                "limit 4294967296 is not between 1 and 4294967295",
            ),
        ] {
            let err = quota(bad).unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
            assert!(err.contains("e.g. 100/1m"), "{bad}: {err}");
        }
    }
}
