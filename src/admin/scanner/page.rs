//! Paging: the walk one bounded step at a time, resumable from an opaque
//! cursor that holds one `SCAN` cursor per master.

use std::fmt;
use std::str::FromStr;

use futures::future::join_all;

use super::Scanner;
use super::plan::{Found, Mode};
use super::read::read_page;
use crate::admin::info::LimiterInfo;
use crate::cluster::{NodeAddr, Shard};
use crate::error::{Error, Result};

/// At most this many `SCAN` calls per master for one
/// [`page`](Scanner::page): a page over any number of keys costs at most
/// `PAGE_SCANS_PER_MASTER × masters` SCAN calls (and as many state-reading
/// pipelines, with a second one after each that found a rate limiter's
/// override or block), each visiting at most [`count`](Scanner::count)
/// buckets.
///
/// ```
/// assert_eq!(shardlimit::admin::PAGE_SCANS_PER_MASTER, 8);
/// ```
pub const PAGE_SCANS_PER_MASTER: u32 = 8;

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
    shards: Vec<ShardCursor>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct ShardCursor {
    /// The shard's first slot: which shard this is, across failovers.
    first_slot: u16,
    /// A fingerprint of its slot ranges: a resharded shard is walked again.
    slots: u64,
    /// The master walked; another master means a failover, so its walk
    /// starts again (SCAN cursors do not carry over between nodes).
    node_id: String,
    /// `None` once the master is walked to the end.
    scan: Option<u64>,
}

/// One page of primitives from [`Scanner::page`].
///
/// ```no_run
/// # async fn demo(scanner: shardlimit::admin::Scanner) -> shardlimit::Result<()> {
/// use shardlimit::admin::PageCursor;
/// let page = scanner.page(&PageCursor::start(), 100).await?;
/// println!("{} primitives for {} SCAN calls", page.limiters.len(), page.scan_calls);
/// for (node, err) in &page.failed {
///     eprintln!("{node} failed this page and is retried on the next: {err}");
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub struct Page {
    /// The primitives found (matching the scanner's filters), master by
    /// master in `SCAN` order.
    pub limiters: Vec<LimiterInfo>,
    /// Keys under the namespace the parser does not recognise, with their
    /// master.
    pub unrecognized: Vec<(Vec<u8>, String)>,
    /// Where the next page starts; `None` when every master is walked to
    /// the end.
    pub next: Option<PageCursor>,
    /// `SCAN` calls this page made (at most
    /// [`PAGE_SCANS_PER_MASTER`] per master).
    pub scan_calls: u32,
    /// Masters walked again from their start because the cursor was made on
    /// another master of their slots (a failover) or other slot ranges (a
    /// resharding): their primitives may repeat (at-least-once).
    pub restarted: Vec<String>,
    /// Masters that failed during this page, with the error. Their cursor
    /// stays at the last call that succeeded: the next page tries again
    /// from there, so nothing is skipped.
    pub failed: Vec<(String, Error)>,
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
fn fingerprint(shard: &Shard) -> u64 {
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

/// One master's part of a page.
struct ShardPage {
    cursor: ShardCursor,
    found: Vec<Found>,
    calls: u32,
    restarted: bool,
    error: Option<Error>,
    node: String,
}

impl Scanner {
    /// One page of the walk: about `rows` primitives matching the filters,
    /// from every master at once, and the cursor of the next page.
    ///
    /// **Bounded**: each master is asked for its share (`rows` over the
    /// masters still being walked) with at most [`PAGE_SCANS_PER_MASTER`]
    /// `SCAN` calls, the first asking for about its share of keys and each
    /// next one for what the last one's yield says is still missing (twice
    /// as many when it found nothing), up to [`count`](Self::count). So a page
    /// costs the same whatever the namespace holds; a sparse filter may
    /// answer with fewer rows (even none) and a `next` cursor. A `SCAN`
    /// call's keys are never split between pages, so a page may hold up to
    /// one call's keys more per master than its share.
    ///
    /// **Exactly once, or at least once**: paging from the start to `next ==
    /// None` reports each primitive present throughout exactly once — unless
    /// a master failed over or its slots were resharded between pages; that
    /// master's slots are then walked again from the start on their new
    /// master (see [`Page::restarted`]), as [`scan`](Self::scan) does.
    ///
    /// ```no_run
    /// # async fn demo(cluster: shardlimit::Cluster) -> shardlimit::Result<()> {
    /// use shardlimit::admin::{PageCursor, Scanner};
    ///
    /// let scanner = Scanner::new(&cluster).kind("lock");
    /// let mut cursor = PageCursor::start();
    /// loop {
    ///     let page = scanner.page(&cursor, 50).await?;
    ///     for info in &page.limiters {
    ///         println!("{} {}", info.subject_lossy(), info.usage.describe());
    ///     }
    ///     match page.next {
    ///         Some(next) => cursor = next,
    ///         None => break,
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn page(&self, cursor: &PageCursor, rows: usize) -> Result<Page> {
        let topology = self.cluster.topology().await?;
        let plans: Vec<(NodeAddr, ShardCursor, bool)> = topology
            .shards
            .iter()
            .filter_map(|shard| {
                let first_slot = *shard.slots.first()?.start();
                let fresh = ShardCursor {
                    first_slot,
                    slots: fingerprint(shard),
                    node_id: shard.master.id.clone(),
                    scan: Some(0),
                };
                let (resumed, restarted) = if cursor.shards.is_empty() {
                    (fresh, false)
                } else {
                    match cursor.shards.iter().find(|s| s.first_slot == first_slot) {
                        Some(s) if s.slots == fresh.slots && s.node_id == fresh.node_id => {
                            (s.clone(), false)
                        }
                        // Failover or resharding: from the start.
                        _ => (fresh, true),
                    }
                };
                Some((shard.master.clone(), resumed, restarted))
            })
            .collect();
        let active = plans.iter().filter(|(_, c, _)| c.scan.is_some()).count();
        let share = rows.max(1).div_ceil(active.max(1));
        let pages = join_all(
            plans
                .into_iter()
                .map(|(node, c, restarted)| self.shard_page(node, c, restarted, share)),
        )
        .await;
        let mut page = Page {
            limiters: Vec::new(),
            unrecognized: Vec::new(),
            next: None,
            scan_calls: 0,
            restarted: Vec::new(),
            failed: Vec::new(),
        };
        let mut next = PageCursor::default();
        for shard in pages {
            page.scan_calls += shard.calls;
            if shard.restarted {
                page.restarted.push(shard.node.clone());
            }
            if let Some(error) = shard.error {
                page.failed.push((shard.node.clone(), error));
            }
            for found in shard.found {
                match found {
                    Found::Limiter(info) => page.limiters.push(info),
                    Found::Unrecognized(key) => page.unrecognized.push((key, shard.node.clone())),
                    Found::Counted { .. } | Found::Immortal(_) => {}
                }
            }
            next.shards.push(shard.cursor);
        }
        if next.shards.iter().any(|s| s.scan.is_some()) {
            page.next = Some(next);
        }
        Ok(page)
    }

    /// Up to [`PAGE_SCANS_PER_MASTER`] SCAN calls on one master, stopping
    /// once `share` things are found or the master is walked.
    async fn shard_page(
        &self,
        node: NodeAddr,
        mut cursor: ShardCursor,
        restarted: bool,
        share: usize,
    ) -> ShardPage {
        let pattern = self.cluster.keys().scan_pattern();
        let mut count = u32::try_from(share)
            .unwrap_or(u32::MAX)
            .clamp(1, self.count);
        let (mut found, mut calls, mut error) = (Vec::new(), 0, None);
        while let Some(at) = cursor.scan {
            if calls >= PAGE_SCANS_PER_MASTER || found.len() >= share {
                break;
            }
            calls += 1;
            let mut scan = redis::cmd("SCAN");
            scan.arg(at)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(count);
            let step = async {
                let (next, keys): (u64, Vec<Vec<u8>>) =
                    self.cluster.node_command("scan", &node, scan).await?;
                Ok::<_, Error>((
                    next,
                    read_page(&self.cluster, &self.filter, Mode::List, &node, keys).await?,
                ))
            };
            match step.await {
                Ok((next, mut more)) => {
                    count = next_count(count, more.len(), share.saturating_sub(found.len()))
                        .min(self.count);
                    found.append(&mut more);
                    cursor.scan = (next != 0).then_some(next);
                }
                Err(err) => {
                    error = Some(err);
                    break;
                }
            }
        }
        ShardPage {
            cursor,
            found,
            calls,
            restarted,
            error,
            node: node.to_string(),
        }
    }
}

/// The `COUNT` of the next call: what the last one's yield says reaches
/// what is still `needed` (so a page overshoots its share by little), or
/// twice the last when it found nothing.
fn next_count(count: u32, got: usize, needed: usize) -> u32 {
    if got == 0 {
        return count.saturating_mul(2);
    }
    let needed = u64::try_from(needed).unwrap_or(u64::MAX);
    let got = u64::try_from(got).unwrap_or(u64::MAX);
    let next = needed.saturating_mul(u64::from(count)).div_ceil(got);
    u32::try_from(next).unwrap_or(u32::MAX).max(1)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_next_scan_asks_for_what_is_still_needed() {
        assert_eq!(next_count(17, 0, 17), 34, "nothing found: twice as far");
        assert_eq!(next_count(17, 15, 2), 3, "nearly there: a small step");
        assert_eq!(
            next_count(100, 1, 50),
            5000,
            "a sparse filter: far (capped by the caller)"
        );
        assert_eq!(next_count(10, 20, 0), 1);
    }

    use super::*;

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
