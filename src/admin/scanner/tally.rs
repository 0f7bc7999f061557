//! Adding up a walk per shard, so that each key counts once: a shard whose
//! walk failed and started again (on its new owner after a failover)
//! counts only its last attempt — before, the keys the failed attempt had
//! given were counted a second time, and a count of 6,000 limiters said
//! 6,304 with nothing marked incomplete.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::mpsc;

use super::plan::Found;
use super::walk::Event;
use crate::cluster::NodeAddr;

/// What one shard's last attempt found.
pub(super) struct ShardTally<T> {
    /// The master that attempt walked.
    pub(super) node: Arc<NodeAddr>,
    pub(super) found: T,
    /// Keys it scanned; 0 until it finished.
    pub(super) scanned: u64,
}

/// A whole walk, added up.
pub(super) struct Tally<T> {
    /// By the shard's first slot.
    pub(super) shards: BTreeMap<u16, ShardTally<T>>,
    /// Masters not fully walked, with the last error.
    pub(super) incomplete: Vec<(String, String)>,
    /// Why the result may be off though every master was walked.
    pub(super) approximate: Vec<String>,
}

/// Receives the walk's events until it ends, adding each shard's finds
/// with `add`.
pub(super) async fn tally<T: Default>(
    mut events: mpsc::Receiver<Event>,
    mut add: impl FnMut(&mut T, Found),
) -> Tally<T> {
    let mut t = Tally {
        shards: BTreeMap::new(),
        incomplete: Vec::new(),
        approximate: Vec::new(),
    };
    while let Some(event) = events.recv().await {
        match event {
            Event::NodeFound { shard, node, found } => add(&mut t.shard(shard, node).found, found),
            Event::NodeDone {
                shard,
                node,
                scanned,
            } => t.shard(shard, node).scanned = scanned,
            Event::Restart { shard } => {
                t.shards.remove(&shard);
            }
            Event::Approximate(why) => t.approximate.push(why),
            Event::Incomplete { node, error } => t.incomplete.push((node, error.to_string())),
        }
    }
    t
}

impl<T: Default> Tally<T> {
    fn shard(&mut self, shard: u16, node: Arc<NodeAddr>) -> &mut ShardTally<T> {
        self.shards.entry(shard).or_insert_with(|| ShardTally {
            node,
            found: T::default(),
            scanned: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    fn node(port: u16, id: &str) -> Arc<NodeAddr> {
        Arc::new(NodeAddr {
            host: "127.0.0.1".into(),
            port,
            id: id.into(),
        })
    }

    fn counted() -> Found {
        Found::Counted {
            kind: "gcra".into(),
            name: "api".into(),
        }
    }

    async fn run(events: Vec<Event>) -> Tally<u64> {
        let (tx, rx) = mpsc::channel(events.len().max(1));
        for event in events {
            tx.send(event).await.unwrap();
        }
        drop(tx);
        tally(rx, |n: &mut u64, _| *n += 1).await
    }

    #[tokio::test]
    async fn a_shard_walked_again_counts_only_its_last_attempt() {
        let (old, new, other) = (node(7000, "a"), node(7003, "d"), node(7001, "b"));
        let found = |shard, node: &Arc<NodeAddr>| Event::NodeFound {
            shard,
            node: node.clone(),
            found: counted(),
        };
        let done = |shard, node: &Arc<NodeAddr>, scanned| Event::NodeDone {
            shard,
            node: node.clone(),
            scanned,
        };
        let t = run(vec![
            found(0, &old),
            found(5461, &other),
            found(0, &old),
            Event::Restart { shard: 0 },
            Event::Approximate("7000 failed mid-walk".into()),
            found(0, &new),
            done(5461, &other, 1),
            found(0, &new),
            found(0, &new),
            done(0, &new, 3),
        ])
        .await;
        assert_eq!(t.shards.len(), 2);
        let first = &t.shards[&0];
        assert_eq!(
            (first.node.id.as_str(), first.found, first.scanned),
            ("d", 3, 3)
        );
        let second = &t.shards[&5461];
        assert_eq!(
            (second.node.id.as_str(), second.found, second.scanned),
            ("b", 1, 1)
        );
        assert_eq!(t.approximate, ["7000 failed mid-walk"]);
        assert!(t.incomplete.is_empty());
    }

    #[tokio::test]
    async fn a_master_never_walked_whole_keeps_what_it_gave_and_says_why() {
        let t = run(vec![
            Event::NodeFound {
                shard: 0,
                node: node(7000, "a"),
                found: counted(),
            },
            Event::Incomplete {
                node: "127.0.0.1:7000".into(),
                error: Error::UnexpectedReply {
                    op: "scan".into(),
                    detail: "refused".into(),
                },
            },
        ])
        .await;
        assert_eq!(t.shards[&0].found, 1);
        assert_eq!(t.shards[&0].scanned, 0, "never finished");
        assert_eq!(t.incomplete.len(), 1);
        assert_eq!(t.incomplete[0].0, "127.0.0.1:7000");
        assert!(t.incomplete[0].1.contains("refused"), "{:?}", t.incomplete);
    }
}
