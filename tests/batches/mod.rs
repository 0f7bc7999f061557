//! The `Cluster::eval_many` check every deployment's suite runs (cluster,
//! standalone, Sentinel): a script the server has not cached, so the first
//! batch meets `NOSCRIPT`, run twice over many subjects; every result in
//! input order, every call run once.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use shardlimit::Cluster;
use shardlimit::cluster::Script;
use shardlimit::keys::{KeyId, KeySet};

/// Adds `ARGV[1]` to `KEYS[1]` (with a TTL) and returns the key and the
/// new value, so a result shows which call it answers.
pub const ADD: &str = "local n = redis.call('INCRBY', KEYS[1], ARGV[1]) \
                       redis.call('PEXPIRE', KEYS[1], 600000) \
                       return {KEYS[1], n}";

/// One key set per subject, for one key id.
pub fn key_sets<S: AsRef<str>>(cluster: &Cluster, subjects: &[S]) -> Vec<KeySet> {
    let id = KeyId::new("batch", "hits").unwrap();
    subjects
        .iter()
        .map(|s| cluster.keys().key_set(s.as_ref(), [&id]).unwrap())
        .collect()
}

/// [`ADD`] behind a comment naming the handle's namespace: a body no
/// server has seen (the state after `SCRIPT FLUSH`, without flushing the
/// scripts of anyone else on the server).
pub fn uncached(cluster: &Cluster) -> Script {
    Script::new(
        "batch_add_fresh",
        format!("-- {}\n{ADD}", cluster.namespace()),
    )
}

/// `script` (an [`ADD`]) over `calls` subjects twice, call `n` adding `n`:
/// after both, each key holds `2 n`. Returns the key sets.
pub async fn twice_in_order(cluster: &Cluster, script: &Script, calls: usize) -> Vec<KeySet> {
    let subjects: Vec<String> = (0..calls).map(|i| format!("user:{i}")).collect();
    let sets = key_sets(cluster, &subjects);
    for round in 1..=2 {
        let results: Vec<shardlimit::Result<(Vec<u8>, i64)>> =
            cluster.eval_many(script, sets.iter().zip(1..)).await;
        assert_eq!(results.len(), calls);
        for ((keys, n), result) in sets.iter().zip(1..).zip(results) {
            let (key, value) = result.unwrap();
            assert_eq!(
                key,
                keys.keys()[0],
                "call {n} of round {round}: another's reply"
            );
            assert_eq!(value, n * round, "call {n} of round {round}");
        }
    }
    sets
}
