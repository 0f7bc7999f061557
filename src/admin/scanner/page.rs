//! Paging: the walk one bounded step at a time, resumable from an opaque
//! cursor that holds one `SCAN` cursor per master ([`PageCursor`]); a page
//! made of several such steps within a time budget
//! ([`Scanner::page_within`]).

use std::time::{Duration, Instant};

use futures::future::join_all;

use super::Scanner;
use super::cursor::{PageCursor, ShardCursor, fingerprint};
use super::plan::{Found, Mode};
use super::read::read_page;
use crate::admin::info::LimiterInfo;
use crate::cluster::NodeAddr;
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

/// At most this many rounds of [`page`](Scanner::page) for one
/// [`page_within`](Scanner::page_within): a page within a budget costs at
/// most `MAX_PAGE_ROUNDS × PAGE_SCANS_PER_MASTER` (128) `SCAN` calls per
/// master, however sparse its filter.
///
/// ```
/// assert_eq!(shardlimit::admin::MAX_PAGE_ROUNDS, 16);
/// ```
pub const MAX_PAGE_ROUNDS: u32 = 16;

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
    /// [`PAGE_SCANS_PER_MASTER`] per master and round).
    pub scan_calls: u32,
    /// Rounds of [`page`](Scanner::page) this page took: 1, or up to
    /// [`MAX_PAGE_ROUNDS`] for [`page_within`](Scanner::page_within).
    pub rounds: u32,
    /// How much of the namespace the walk has covered once this page is
    /// read, from 0 to 1: the mean over the masters of the share of its
    /// keyspace its `SCAN` cursor has passed (1 for a master walked to the
    /// end). See [`PageCursor::walked`].
    pub walked: f64,
    /// Masters walked again from their start because the cursor was made on
    /// another master of their slots (a failover) or other slot ranges (a
    /// resharding): their primitives may repeat (at-least-once).
    pub restarted: Vec<String>,
    /// Masters that failed during this page, with the error. Their cursor
    /// stays at the last call that succeeded: the next page tries again
    /// from there, so nothing is skipped.
    pub failed: Vec<(String, Error)>,
}

impl Page {
    /// Appends the next round's rows; its cursor, progress and failures are
    /// the page's from now on.
    fn absorb(&mut self, more: Page) {
        self.limiters.extend(more.limiters);
        self.unrecognized.extend(more.unrecognized);
        self.scan_calls += more.scan_calls;
        self.rounds += more.rounds;
        self.restarted.extend(more.restarted);
        self.failed.extend(more.failed);
        self.next = more.next;
        self.walked = more.walked;
    }
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
        self.round(cursor, rows, false).await
    }

    /// One round of a page: [`page`](Self::page), whose SCANs start at the
    /// largest `COUNT` when `sparse` (an earlier round of the same page
    /// came back short).
    async fn round(&self, cursor: &PageCursor, rows: usize, sparse: bool) -> Result<Page> {
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
                .map(|(node, c, restarted)| self.shard_page(node, c, restarted, share, sparse)),
        )
        .await;
        let mut page = Page {
            limiters: Vec::new(),
            unrecognized: Vec::new(),
            next: None,
            scan_calls: 0,
            rounds: 1,
            walked: 0.0,
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
        page.walked = next.walked();
        if next.shards.iter().any(|s| s.scan.is_some()) {
            page.next = Some(next);
        }
        Ok(page)
    }

    /// A page that keeps walking until it is full: rounds of
    /// [`page`](Self::page) (each at most [`PAGE_SCANS_PER_MASTER`] `SCAN`s
    /// per master) until `rows` primitives are found, the namespace is
    /// walked, `budget` is spent, a master fails, or [`MAX_PAGE_ROUNDS`]
    /// rounds are made — so a sparse filter (one kind and name among
    /// millions of keys, a subject glob) fills its page in one request
    /// rather than showing empty pages, and the page still costs at most
    /// `MAX_PAGE_ROUNDS × PAGE_SCANS_PER_MASTER` `SCAN`s per master, each
    /// visiting at most [`count`](Self::count) buckets (a round after a
    /// short one asks for that many at once), and about `budget` (a round
    /// started is finished). [`Page::walked`] says how far the walk got.
    ///
    /// ```no_run
    /// # async fn demo(cluster: shardlimit::Cluster) -> shardlimit::Result<()> {
    /// use std::time::Duration;
    /// use shardlimit::admin::{PageCursor, Scanner};
    ///
    /// let scanner = Scanner::new(&cluster).kind("lock").name("job");
    /// let page = scanner.page_within(&PageCursor::start(), 50, Duration::from_millis(250)).await?;
    /// println!(
    ///     "{} locks; walked {:.0}% of the namespace in {} rounds",
    ///     page.limiters.len(),
    ///     page.walked * 100.0,
    ///     page.rounds
    /// );
    /// # Ok(()) }
    /// ```
    pub async fn page_within(
        &self,
        cursor: &PageCursor,
        rows: usize,
        budget: Duration,
    ) -> Result<Page> {
        let started = Instant::now();
        let mut page = self.page(cursor, rows).await?;
        while page.limiters.len() < rows
            && page.rounds < MAX_PAGE_ROUNDS
            && page.failed.is_empty()
            && started.elapsed() < budget
        {
            let Some(at) = page.next.take() else {
                break;
            };
            let more = self.round(&at, rows - page.limiters.len(), true).await?;
            page.absorb(more);
        }
        Ok(page)
    }

    /// Up to [`PAGE_SCANS_PER_MASTER`] SCAN calls on one master, stopping
    /// once `share` things are found or the master is walked; the first
    /// asks for `share` keys, or for the most when the filter is known to
    /// be `sparse`.
    async fn shard_page(
        &self,
        node: NodeAddr,
        mut cursor: ShardCursor,
        restarted: bool,
        share: usize,
        sparse: bool,
    ) -> ShardPage {
        let pattern = self.cluster.keys().scan_pattern();
        let mut count = if sparse {
            self.count
        } else {
            u32::try_from(share)
                .unwrap_or(u32::MAX)
                .clamp(1, self.count)
        };
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
    use super::*;

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
}
