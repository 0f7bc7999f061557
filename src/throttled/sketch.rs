//! Space-Saving (Metwally, Agrawal, El Abbadi, 2005): the heavy hitters of
//! a stream in bounded memory, and the merge of several such summaries.
//!
//! A [`SpaceSaving`] of capacity `k` keeps at most `k` counters. A subject
//! it holds has its counter incremented; a new subject, when all `k` are
//! taken, replaces the subject with the smallest count and inherits that
//! count (plus one), remembering it as its `error`. Hence, with `N` items
//! offered:
//!
//! * every count over-estimates: `count - error <= true count <= count`;
//! * the counts sum to `N`, so the smallest (the [`floor`](Summary::floor))
//!   is at most `N / k`, and a subject that is not held was seen at most
//!   `floor` times: **any subject seen more than `N / k` times is held**.
//!
//! [`Summary::merge`] keeps both properties for a sum of streams (the
//! sub-windows of one process, then the processes): a subject's count is
//! the sum of its counts where held plus the floor of each summary that
//! does not hold it (an upper bound), its error grows by those floors, and
//! the floor of the merge is the sum of the floors, or the largest count
//! cut off when the result is trimmed to its capacity, whichever is more.

use std::collections::HashMap;

/// One held subject: its count (an upper bound) and how much of it may be
/// inherited from subjects it replaced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) subject: Vec<u8>,
    pub(crate) count: u64,
    pub(crate) error: u64,
}

/// Space-Saving over subjects: at most `capacity` counters.
#[derive(Debug)]
pub(crate) struct SpaceSaving {
    capacity: usize,
    total: u64,
    /// The counters.
    slots: Vec<Entry>,
    /// Subject → its slot.
    index: HashMap<Vec<u8>, usize>,
    /// Slots whose count was the smallest, `min`, at the last scan: the
    /// next to give their place (one counted since is skipped). Counts only
    /// grow, so one still at `min` is a smallest; a scan of every counter
    /// is needed only once these are used up — about once per `capacity`
    /// evictions when many subjects are new.
    smallest: Vec<usize>,
    min: u64,
}

impl SpaceSaving {
    /// An empty sketch of `capacity` counters (at least one).
    pub(crate) fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        SpaceSaving {
            capacity,
            total: 0,
            slots: Vec::with_capacity(capacity),
            index: HashMap::with_capacity(capacity),
            smallest: Vec::new(),
            min: 0,
        }
    }

    /// Counts one occurrence of `subject`, and returns how many times it
    /// was certainly seen (`count - error`: a lower bound, counted since it
    /// last took a place). A held subject costs a hash lookup; a new one,
    /// when the sketch is full, takes the place of a smallest counter
    /// (reusing its buffers: no allocation unless the new subject is
    /// longer).
    pub(crate) fn offer(&mut self, subject: &[u8]) -> u64 {
        self.total += 1;
        if let Some(&i) = self.index.get(subject) {
            let slot = &mut self.slots[i];
            slot.count += 1;
            return slot.count - slot.error;
        }
        if self.slots.len() < self.capacity {
            self.index.insert(subject.to_vec(), self.slots.len());
            self.slots.push(Entry {
                subject: subject.to_vec(),
                count: 1,
                error: 0,
            });
            return 1;
        }
        // Full: a smallest counter's subject gives its place (and count).
        let i = self.next_smallest();
        let slot = &mut self.slots[i];
        if let Some((mut key, _)) = self.index.remove_entry(slot.subject.as_slice()) {
            key.clear();
            key.extend_from_slice(subject);
            self.index.insert(key, i);
        }
        slot.subject.clear();
        slot.subject.extend_from_slice(subject);
        slot.error = slot.count;
        slot.count += 1;
        1
    }

    /// The slot of a smallest counter (the sketch is full).
    fn next_smallest(&mut self) -> usize {
        loop {
            while let Some(i) = self.smallest.pop() {
                if self.slots[i].count == self.min {
                    return i;
                }
            }
            self.min = self.slots.iter().map(|e| e.count).min().unwrap_or(0);
            let min = self.min;
            self.smallest
                .extend((0..self.slots.len()).filter(|&i| self.slots[i].count == min));
        }
    }

    /// What this sketch holds, as a summary.
    pub(crate) fn summary(&self) -> Summary {
        let floor = if self.slots.len() < self.capacity {
            0
        } else {
            self.slots.iter().map(|e| e.count).min().unwrap_or(0)
        };
        let mut entries = self.slots.clone();
        sort(&mut entries);
        Summary {
            total: self.total,
            floor,
            entries,
        }
    }
}

/// The heavy hitters of a stream: its held subjects, largest count first,
/// how many items the stream had, and the most any subject not held can
/// have been seen.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Summary {
    pub(crate) total: u64,
    /// A subject not in `entries` was seen at most this many times.
    pub(crate) floor: u64,
    pub(crate) entries: Vec<Entry>,
}

impl Summary {
    /// The summary of the streams of `parts` together, trimmed to the
    /// `capacity` largest counts.
    pub(crate) fn merge<'a>(parts: impl IntoIterator<Item = &'a Summary>, capacity: usize) -> Self {
        let parts: Vec<&Summary> = parts.into_iter().collect();
        let floors: u64 = parts.iter().map(|p| p.floor).sum();
        // Subject → (sum of counts where held, sum of errors where held,
        // sum of floors where held).
        let mut merged: HashMap<&[u8], (u64, u64, u64)> = HashMap::new();
        for part in &parts {
            for e in &part.entries {
                let slot = merged.entry(&e.subject).or_default();
                slot.0 += e.count;
                slot.1 += e.error;
                slot.2 += part.floor;
            }
        }
        let mut entries: Vec<Entry> = merged
            .into_iter()
            .map(|(subject, (count, error, held_floors))| {
                // Where it is not held it may have been seen up to that
                // summary's floor: counted, as uncertainty.
                let absent = floors - held_floors;
                Entry {
                    subject: subject.to_vec(),
                    count: count + absent,
                    error: error + absent,
                }
            })
            .collect();
        sort(&mut entries);
        let mut floor = floors;
        if entries.len() > capacity {
            floor = floor.max(entries[capacity].count);
            entries.truncate(capacity);
        }
        Summary {
            total: parts.iter().map(|p| p.total).sum(),
            floor,
            entries,
        }
    }
}

#[cfg(test)]
impl Summary {
    /// A summary holding `entries` with no error, for tests.
    pub(crate) fn exact(entries: &[(&str, u64)], floor: u64) -> Self {
        Summary {
            total: entries.iter().map(|(_, c)| c).sum(),
            floor,
            entries: entries
                .iter()
                .map(|(s, c)| Entry {
                    subject: s.as_bytes().to_vec(),
                    count: *c,
                    error: 0,
                })
                .collect(),
        }
    }
}

/// Largest count first; ties by subject, so the order is stable.
fn sort(entries: &mut [Entry]) {
    entries.sort_unstable_by(|a, b| b.count.cmp(&a.count).then(a.subject.cmp(&b.subject)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;
    use std::collections::HashMap;

    /// A skewed stream: a few heavy subjects among many light ones.
    fn stream(len: usize, seed: u64) -> Vec<Vec<u8>> {
        use rand::SeedableRng;
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        (0..len)
            .map(|_| {
                let r: f64 = rng.random();
                let id = if r < 0.3 {
                    rng.random_range(0..5)
                } else {
                    rng.random_range(5..5000)
                };
                format!("user:{id}").into_bytes()
            })
            .collect()
    }

    fn truth(items: &[Vec<u8>]) -> HashMap<Vec<u8>, u64> {
        let mut counts = HashMap::new();
        for i in items {
            *counts.entry(i.clone()).or_default() += 1;
        }
        counts
    }

    /// The Space-Saving guarantees of `summary` for the stream `truth`.
    fn assert_guarantees(summary: &Summary, truth: &HashMap<Vec<u8>, u64>, k: usize) {
        let n: u64 = truth.values().sum();
        assert_eq!(summary.total, n);
        assert!(summary.entries.len() <= k);
        let held: HashMap<&[u8], &Entry> = summary
            .entries
            .iter()
            .map(|e| (e.subject.as_slice(), e))
            .collect();
        for (subject, &real) in truth {
            match held.get(subject.as_slice()) {
                Some(e) => {
                    assert!(e.count >= real, "under-estimated");
                    assert!(e.count - e.error <= real, "error bound broken");
                }
                None => {
                    assert!(
                        real <= summary.floor,
                        "a subject above the floor is missing"
                    );
                    // More than N/k: always held.
                    assert!(real * k as u64 <= n, "a heavy hitter is missing");
                }
            }
        }
    }

    #[test]
    fn any_subject_above_n_over_k_is_held_and_counts_overestimate_within_the_error() {
        for seed in 0..20 {
            let items = stream(20_000, seed);
            let mut sketch = SpaceSaving::new(100);
            for i in &items {
                sketch.offer(i);
            }
            // Every counter is found by its subject, and only by it.
            assert_eq!(sketch.index.len(), sketch.slots.len());
            for (i, e) in sketch.slots.iter().enumerate() {
                assert_eq!(sketch.index[&e.subject], i);
            }
            let summary = sketch.summary();
            assert_eq!(summary.entries.iter().map(|e| e.count).sum::<u64>(), 20_000);
            assert_guarantees(&summary, &truth(&items), 100);
            // The five heavy subjects (about 6% each) lead.
            let top: Vec<&[u8]> = summary.entries[..5]
                .iter()
                .map(|e| e.subject.as_slice())
                .collect();
            for id in 0..5 {
                assert!(top.contains(&format!("user:{id}").as_bytes()), "{seed}");
            }
        }
    }

    #[test]
    fn offer_returns_a_lower_bound_of_the_true_count() {
        for seed in 0..5 {
            let items = stream(20_000, seed);
            let mut sketch = SpaceSaving::new(50);
            let mut seen: HashMap<Vec<u8>, u64> = HashMap::new();
            let mut most = 0;
            for i in &items {
                let real = seen.entry(i.clone()).or_default();
                *real += 1;
                let certain = sketch.offer(i);
                assert!(certain >= 1 && certain <= *real, "{certain} > {real}");
                most = most.max(certain);
            }
            // The heavy subjects' lower bounds grow with them.
            assert!(most > 1000, "{most}");
        }
    }

    #[test]
    fn a_sketch_with_room_is_exact() {
        let mut sketch = SpaceSaving::new(10);
        for s in ["a", "b", "a", "c", "a"] {
            sketch.offer(s.as_bytes());
        }
        let summary = sketch.summary();
        assert_eq!(summary.floor, 0);
        assert_eq!(
            summary.entries[0],
            Entry {
                subject: b"a".to_vec(),
                count: 3,
                error: 0
            }
        );
        assert_eq!(summary.entries.len(), 3);
    }

    #[test]
    fn merged_summaries_keep_the_guarantees_of_the_whole_stream() {
        for seed in 0..10 {
            let items = stream(30_000, seed);
            // Three processes (or sub-windows), each with its own sketch.
            let parts: Vec<Summary> = items
                .chunks(10_000)
                .map(|chunk| {
                    let mut sketch = SpaceSaving::new(100);
                    chunk.iter().for_each(|i| {
                        sketch.offer(i);
                    });
                    sketch.summary()
                })
                .collect();
            let merged = Summary::merge(&parts, 100);
            assert_guarantees(&merged, &truth(&items), 100);
            // Merging again (sub-windows, then processes) keeps them too.
            let twice = Summary::merge([&merged, &Summary::default()], 50);
            assert_guarantees(&twice, &truth(&items), 50);
        }
    }

    #[test]
    fn a_subject_missing_from_one_part_carries_that_floor_as_error() {
        let a = Summary::exact(&[("x", 10), ("y", 4)], 4);
        let b = Summary::exact(&[("y", 7), ("z", 2)], 2);
        let merged = Summary::merge([&a, &b], 2);
        // x: 10 in a, at most b's floor (2) in b.
        assert_eq!(merged.entries[0].subject, b"x");
        assert_eq!((merged.entries[0].count, merged.entries[0].error), (12, 2));
        assert_eq!(merged.entries[1].subject, b"y");
        assert_eq!((merged.entries[1].count, merged.entries[1].error), (11, 0));
        // z (2 + a's floor 4 = 6) was cut: the floor is at least that.
        assert_eq!(merged.floor, 6);
    }
}
