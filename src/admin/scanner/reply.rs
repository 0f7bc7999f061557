//! Decoding the replies of the scanner's reads: integers, text and TTLs,
//! whichever RESP type a node answers with.

use std::time::Duration;

use redis::Value;

/// `PTTL` → `Some(ttl)` (`None` inside when the key has no TTL), or `None`
/// when the key is gone.
pub(super) fn ttl(pttl: Option<i64>) -> Option<Option<Duration>> {
    match pttl {
        Some(-1) => Some(None),
        Some(ms) if ms >= 0 => Some(Some(Duration::from_millis(u64::try_from(ms).ok()?))),
        _ => None,
    }
}

pub(super) fn int(value: Option<&Value>) -> Option<i64> {
    match value? {
        Value::Int(n) => Some(*n),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        _ => None,
    }
}

pub(super) fn text(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::SimpleString(s) => Some(s.clone()),
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::Okay => Some("OK".into()),
        _ => None,
    }
}

pub(super) fn unsigned(v: Option<i64>) -> u64 {
    v.and_then(|v| u64::try_from(v).ok()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls() {
        assert_eq!(ttl(Some(-1)), Some(None));
        assert_eq!(ttl(Some(-2)), None);
        assert_eq!(ttl(Some(1500)), Some(Some(Duration::from_millis(1500))));
        assert_eq!(ttl(None), None);
    }
}
