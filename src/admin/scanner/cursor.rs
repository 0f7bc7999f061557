//! Where a paged walk stands: one `SCAN` cursor per master, tied to the
//! master and its slots, and how much of the namespace that is.

use std::fmt;
use std::str::FromStr;

use crate::cluster::Shard;
use crate::error::{Error, Result};

/// Where a paged walk stands: a `SCAN` cursor per master, tied to the
/// master's node id and slot ranges. Opaque: pass
/// [`to_string`](ToString::to_string) to a client and
/// [`parse`](str::parse) it back.
///
/// ```
/// use shardlimit::admin::PageCursor;
/// let start = PageCursor::start();
/// let text = start.to_string();
/// assert_eq!(text.parse::<PageCursor>()?, start);
/// assert!("garbage".parse::<PageCursor>().is_err());
/// # Ok::<(), shardlimit::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct PageCursor {
    pub(super) shards: Vec<ShardCursor>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ShardCursor {
    /// The shard's first slot: which shard this is, across failovers.
    pub(super) first_slot: u16,
    /// A fingerprint of its slot ranges: a resharded shard is walked again.
    pub(super) slots: u64,
    /// The master walked; another master means a failover, so its walk
    /// starts again (SCAN cursors do not carry over between nodes).
    pub(super) node_id: String,
    /// `None` once the master is walked to the end.
    pub(super) scan: Option<u64>,
}

impl PageCursor {
    /// The start of a walk.
    ///
    /// ```
    /// assert_eq!(shardlimit::admin::PageCursor::start().to_string(), "1");
    /// ```
    pub fn start() -> Self {
        PageCursor::default()
    }
}

impl PageCursor {
    /// How much of the namespace a walk at this cursor has covered, from 0
    /// (the start) to 1 (every master walked to the end): the mean over the
    /// masters of each one's share.
    ///
    /// An estimate. `SCAN` walks a hash table's buckets in reverse-binary
    /// order, so a cursor's bits reversed, over 2⁶⁴, are the share of the
    /// table's buckets it has passed: exact for the single table of Redis up
    /// to 7.2 (a master's keys are spread evenly over its buckets), close
    /// while the table is rehashing; Redis 7.4 and later keep a table per
    /// slot, and the share is then only a rough one. Masters count alike,
    /// whatever they hold.
    ///
    /// ```
    /// assert_eq!(shardlimit::admin::PageCursor::start().walked(), 0.0);
    /// ```
    pub fn walked(&self) -> f64 {
        if self.shards.is_empty() {
            return 0.0;
        }
        let total: f64 = self.shards.iter().map(ShardCursor::walked).sum();
        // At most a few hundred masters: exact in an f64.
        total / f64::from(u32::try_from(self.shards.len()).unwrap_or(u32::MAX))
    }
}

impl ShardCursor {
    /// This master's share walked (see [`PageCursor::walked`]).
    fn walked(&self) -> f64 {
        match self.scan {
            None => 1.0,
            // Reversed bits as a fraction of 2⁶⁴; the rounding to 53 bits
            // is far below what a percentage shows.
            #[allow(clippy::cast_precision_loss)]
            Some(cursor) => cursor.reverse_bits() as f64 / 18_446_744_073_709_551_616.0,
        }
    }
}

impl fmt::Display for PageCursor {
    /// `1` then, per master, `.first_slot-slots-scan-node_id` (scan `x`
    /// when done): URL-safe, no percent-encoding needed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("1")?;
        for s in &self.shards {
            write!(f, ".{}-{:x}-", s.first_slot, s.slots)?;
            match s.scan {
                Some(c) => write!(f, "{c:x}")?,
                None => f.write_str("x")?,
            }
            write!(f, "-{}", s.node_id)?;
        }
        Ok(())
    }
}

impl FromStr for PageCursor {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        let bad = |reason: &str| Error::Config {
            field: "page cursor",
            reason: format!("{reason} (a cursor is only ever one a page returned)"),
        };
        let mut parts = text.split('.');
        if parts.next() != Some("1") {
            return Err(bad("unknown cursor version"));
        }
        let shards = parts
            .map(|part| {
                let mut fields = part.splitn(4, '-');
                let mut next = || fields.next().ok_or_else(|| bad("too few fields"));
                let first_slot = next()?.parse().map_err(|_| bad("bad slot"))?;
                let slots = u64::from_str_radix(next()?, 16).map_err(|_| bad("bad slots"))?;
                let scan = match next()? {
                    "x" => None,
                    c => Some(u64::from_str_radix(c, 16).map_err(|_| bad("bad scan cursor"))?),
                };
                let node_id = next()?;
                if !node_id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_')
                {
                    return Err(bad("bad node id"));
                }
                Ok(ShardCursor {
                    first_slot,
                    slots,
                    node_id: node_id.to_owned(),
                    scan,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(PageCursor { shards })
    }
}

/// FNV-1a over the shard's slot ranges: equal ranges, equal fingerprints.
pub(super) fn fingerprint(shard: &Shard) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for range in &shard.slots {
        for byte in range
            .start()
            .to_be_bytes()
            .into_iter()
            .chain(range.end().to_be_bytes())
        {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walked_is_the_reversed_cursor_over_the_table() {
        let shard = |scan| ShardCursor {
            first_slot: 0,
            slots: 0,
            node_id: "a".into(),
            scan,
        };
        // A table of 8 buckets is walked 0, 4, 2, 6, 1, 5, 3, 7: the
        // cursor 6 comes after buckets 0, 4 and 2, 3 of 8.
        let at = |scan| PageCursor {
            shards: vec![shard(scan)],
        };
        assert_eq!(at(Some(4)).walked(), 0.125);
        assert_eq!(at(Some(6)).walked(), 0.375);
        assert_eq!(at(Some(0b011)).walked(), 0.75);
        assert_eq!(at(Some(0b001)).walked(), 0.5);
        assert_eq!(at(Some(0)).walked(), 0.0);
        assert_eq!(at(None).walked(), 1.0);
        let two = PageCursor {
            shards: vec![shard(None), shard(Some(0b01))],
        };
        assert_eq!(two.walked(), 0.75);
    }

    #[test]
    fn cursors_round_trip_and_reject_garbage() {
        let cursor = PageCursor {
            shards: vec![
                ShardCursor {
                    first_slot: 0,
                    slots: 0xdead_beef,
                    node_id: "07c37dfeb235213a872192d90877d0cd55635b91".into(),
                    scan: Some(12345),
                },
                ShardCursor {
                    first_slot: 5461,
                    slots: 1,
                    node_id: String::new(),
                    scan: None,
                },
            ],
        };
        let text = cursor.to_string();
        assert!(
            text.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        );
        assert_eq!(text.parse::<PageCursor>().unwrap(), cursor);
        assert_eq!("1".parse::<PageCursor>().unwrap(), PageCursor::start());
        for bad in [
            "",
            "2",
            "1.",
            "1.x-1-0-a",
            "1.0-zz-0-a",
            "1.0-1-q-a",
            "1.0-1-0-a<b",
            "1.0-1",
        ] {
            let err = bad.parse::<PageCursor>().unwrap_err();
            assert!(err.to_string().contains("page cursor"), "{bad}: {err}");
        }
    }
}
