//! `Cluster::eval_many` against the real cluster: results in input order,
//! each call run once on the master owning its slot; `NOSCRIPT` answered by
//! loading the script; one call's error is that call's alone; nothing sent
//! for an empty batch. With a fake node that claims part of the slots: a
//! master that does not answer costs only its own calls (transient, never
//! resent) while the real master's calls run, those it answers `MOVED`
//! for after following the redirect; a node marked down fails its calls
//! at once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::batches;
use crate::common;
use crate::fake_node;

use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use batches::{ADD, key_sets};
use shardlimit::cluster::Script;
use shardlimit::keys::KeySet;
use shardlimit::limit::Invocation;
use shardlimit::{Cluster, Error, Quota, RateLimiter, Result};

/// A real-cluster handle; 2 s for the batches on a busy 2-core box (no
/// test here is about the real cluster's timeouts).
async fn cluster(prefix: &str) -> Cluster {
    common::builder(prefix)
        .command_timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap()
}

/// `GET key` straight from the master owning its slot (not through the
/// library): a value there proves the call ran on its owner.
async fn get_on_owner(key: &[u8]) -> Option<i64> {
    common::on_owner(key, redis::cmd("GET").arg(key)).await
}

#[tokio::test]
async fn results_are_in_input_order_and_each_call_ran_once_on_its_master() {
    let cluster = cluster("batch-order").await;
    let script = Script::new("batch_add", ADD);
    let subjects: Vec<String> = (0..90).map(|i| format!("user:{i}")).collect();
    let sets = key_sets(&cluster, &subjects);
    let masters = common::masters().await;
    for master in &masters {
        let mine = sets.iter().filter(|k| master.owns(k.slot())).count();
        assert!(mine >= 10, "{}: only {mine} of 90 calls", master.addr);
    }

    let started = Instant::now();
    let results: Vec<Result<(Vec<u8>, i64)>> =
        cluster.eval_many(&script, sets.iter().zip(1..)).await;
    let took = started.elapsed();
    assert_eq!(results.len(), sets.len());
    for ((keys, n), result) in sets.iter().zip(1..).zip(results) {
        let (key, value) = result.unwrap();
        assert_eq!(key, keys.keys()[0], "call {n} answered by another call");
        assert_eq!(value, n);
        assert_eq!(get_on_owner(&key).await, Some(n), "ran once, on its owner");
    }
    // One multiplexed connection per master served the whole batch.
    for master in &masters {
        let node = cluster.nodes().into_iter().find(|n| n.addr == master.addr);
        assert_eq!(node.map(|n| n.connects), Some(1), "{}", master.addr);
    }
    eprintln!("90 calls over {} masters in {took:?}", masters.len());

    // Again: the same calls add again, in order.
    let again: Vec<Result<(Vec<u8>, i64)>> = cluster
        .eval_many(&script, sets.iter().map(|k| (k, 1000)))
        .await;
    for (n, result) in (1..).zip(again) {
        assert_eq!(result.unwrap().1, n + 1000);
    }
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn a_script_no_master_has_cached_is_loaded_and_every_call_runs() {
    let cluster = cluster("batch-noscript").await;
    let script = batches::uncached(&cluster);
    let masters = common::masters().await;
    let cached = |addr: String| {
        let sha = script.sha1().to_owned();
        async move {
            let reply = common::cmd(&addr, &["SCRIPT", "EXISTS", &sha]).await;
            redis::from_redis_value::<Vec<i64>>(reply).unwrap() == [1]
        }
    };
    for master in &masters {
        assert!(!cached(master.addr.clone()).await, "{}", master.addr);
    }
    let sets = batches::twice_in_order(&cluster, &script, 30).await;
    for (keys, n) in sets.iter().zip(1..) {
        assert_eq!(
            get_on_owner(&keys.keys()[0]).await,
            Some(2 * n),
            "once a round"
        );
    }
    for master in &masters {
        assert!(
            cached(master.addr.clone()).await,
            "loaded on {}",
            master.addr
        );
    }
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn one_calls_error_is_that_calls_alone() {
    let cluster = cluster("batch-error").await;
    // Writes, then fails for the subject "bad": a script error after a
    // write, which must be neither resent nor spread to the other calls.
    let script = Script::new(
        "batch_fail_one",
        "redis.call('INCR', KEYS[1]) redis.call('PEXPIRE', KEYS[1], 600000) \
         if ARGV[1] == 'bad' then return redis.error_reply('ERR refused ' .. ARGV[1]) end \
         return 7",
    );
    let subjects: Vec<String> = ["a", "b", "bad", "c", "d", "e"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    let sets = key_sets(&cluster, &subjects);
    let results: Vec<Result<i64>> = cluster
        .eval_many(
            &script,
            sets.iter().zip(&subjects).map(|(k, s)| (k, s.as_str())),
        )
        .await;
    for ((subject, keys), result) in subjects.iter().zip(&sets).zip(results) {
        if subject == "bad" {
            let err = result.unwrap_err();
            assert!(matches!(err, Error::Redis { .. }), "{err}");
            assert!(err.to_string().contains("refused bad"), "{err}");
            assert!(
                !err.is_transient(),
                "a script error is no fault of the cluster"
            );
            assert_eq!(err.slot(), Some(keys.slot()));
        } else {
            assert_eq!(result.unwrap(), 7, "{subject}");
        }
        assert_eq!(get_on_owner(&keys.keys()[0]).await, Some(1), "{subject}");
    }
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn a_rate_limiters_invocations_pass_by_reference() {
    let cluster = cluster("batch-limiter").await;
    let limiter = RateLimiter::builder(
        &cluster,
        "api",
        Quota::per_minute(NonZeroU32::new(2).unwrap()),
    )
    .build()
    .unwrap();
    let subjects: Vec<String> = (0..30).map(|i| format!("client:{i}")).collect();
    let invocations: Vec<Invocation> = subjects
        .iter()
        .map(|s| limiter.invocation(s, 1).unwrap())
        .collect();
    let script = &invocations[0].script;
    // Reply (one limit, no override, no block: the compact one):
    // [2 * all admitted + allowed, remaining, retry_after_us, reset_after_us].
    for (round, admitted) in [(1, 3), (2, 3), (3, 0)] {
        let replies: Vec<Result<Vec<i64>>> = cluster
            .eval_many(script, invocations.iter().map(|i| (&i.keys, &i.args)))
            .await;
        for (subject, reply) in subjects.iter().zip(replies) {
            let reply = reply.unwrap();
            assert_eq!(reply[0], admitted, "{subject}, round {round}: {reply:?}");
        }
    }
    // The same state as the limiter's own checks see.
    for subject in &subjects {
        assert!(!limiter.peek(subject).await.unwrap().allowed, "{subject}");
    }
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn an_empty_batch_sends_nothing() {
    // A node that counts what it is sent.
    let fake = fake_node::FakeNode::start().await;
    let cluster = Cluster::builder([fake.url()]).build().await.unwrap();
    let before = fake.commands();
    let script = Script::new("batch_none", ADD);
    let none: Vec<Result<i64>> = cluster
        .eval_many(&script, std::iter::empty::<(&KeySet, i64)>())
        .await;
    assert!(none.is_empty());
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(fake.commands(), before);
}

/// Subjects, `each` of every one of `classes` classes of slots (`class`
/// gives a slot's, below `classes`).
fn subjects_by_class(
    cluster: &Cluster,
    classes: usize,
    each: usize,
    class: impl Fn(u16) -> usize,
) -> Vec<String> {
    let mut counts = vec![0; classes];
    let mut subjects = Vec::new();
    for i in 0.. {
        let subject = format!("split:{i}");
        let c = class(key_sets(cluster, std::slice::from_ref(&subject))[0].slot());
        if counts[c] < each {
            counts[c] += 1;
            subjects.push(subject);
        }
        if counts.iter().all(|&n| n == each) {
            break;
        }
    }
    subjects
}

#[tokio::test]
async fn a_silent_master_costs_only_its_own_calls_and_moved_calls_follow() {
    // The fake node claims slots 0..8192; the master owning 16383 is
    // named for the rest, so it runs the calls of its own slots and
    // answers MOVED for those of another master.
    const FIRST_REAL: u16 = 8192;
    let masters = common::masters().await;
    let named = masters.iter().find(|m| m.owns(16383)).unwrap().clone();
    let fake = fake_node::FakeNode::start_sharing(FIRST_REAL, &named.addr).await;
    let timeout = Duration::from_millis(500);
    let cluster = Cluster::builder([fake.url()])
        .namespace(common::unique_namespace("batch-split"))
        .command_timeout(timeout)
        .build()
        .await
        .unwrap();
    let (silent, direct, moved) = (0, 1, 2);
    let subjects = subjects_by_class(&cluster, 3, 8, |slot| {
        if slot < FIRST_REAL {
            silent
        } else if named.owns(slot) {
            direct
        } else {
            moved
        }
    });
    let sets = key_sets(&cluster, &subjects);
    fake.go_dark();

    let script = Script::new("batch_split", ADD);
    let started = Instant::now();
    let results: Vec<Result<(Vec<u8>, i64)>> = cluster
        .eval_many(&script, sets.iter().map(|k| (k, 1)))
        .await;
    let took = started.elapsed();
    assert!(took < timeout + Duration::from_millis(500), "{took:?}");
    let mut seen = [0; 3];
    for (keys, result) in sets.iter().zip(results) {
        let key = &keys.keys()[0];
        let slot = keys.slot();
        if slot < FIRST_REAL {
            seen[silent] += 1;
            let err = result.unwrap_err();
            assert!(matches!(err, Error::Timeout { .. }), "{err}");
            assert!(err.is_transient(), "{err}");
            assert_eq!(err.slot(), Some(slot));
            // May have run on the fake node; never resent to a real one.
            assert_eq!(get_on_owner(key).await, None);
        } else {
            seen[if named.owns(slot) { direct } else { moved }] += 1;
            assert_eq!(result.unwrap(), (key.clone(), 1));
            assert_eq!(get_on_owner(key).await, Some(1), "ran once");
        }
    }
    assert_eq!(seen, [8, 8, 8]);
    // The MOVED replies named another master, which the handle now knows.
    let known: Vec<String> = cluster.nodes().into_iter().map(|n| n.addr).collect();
    assert!(
        masters
            .iter()
            .any(|m| m.addr != named.addr && known.contains(&m.addr)),
        "{known:?}"
    );
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn a_node_marked_down_fails_its_calls_at_once() {
    let fake = fake_node::FakeNode::start().await;
    let cluster = Cluster::builder([fake.url()])
        .namespace(common::unique_namespace("batch-down"))
        .command_timeout(Duration::from_secs(1))
        .connect_timeout(Duration::from_millis(500))
        .build()
        .await
        .unwrap();
    let subjects: Vec<String> = (0..20).map(|i| format!("down:{i}")).collect();
    let sets = key_sets(&cluster, &subjects);
    let script = Script::new("batch_down", ADD);

    // Connected: the fake node answers every script with an error of its
    // own, each call's result.
    let results: Vec<Result<i64>> = cluster
        .eval_many(&script, sets.iter().map(|k| (k, 1)))
        .await;
    for result in results {
        let err = result.unwrap_err();
        assert!(!err.is_transient(), "{err}");
    }

    // Dead: the pipeline's connection breaks (transient: may have run),
    // and the node is marked down...
    fake.shut_down();
    let results: Vec<Result<i64>> = cluster
        .eval_many(&script, sets.iter().map(|k| (k, 1)))
        .await;
    for result in results {
        let err = result.unwrap_err();
        assert!(err.is_transient(), "{err}");
    }
    // ...so the next batch is refused without waiting for anything.
    let started = Instant::now();
    let results: Vec<Result<i64>> = cluster
        .eval_many(&script, sets.iter().map(|k| (k, 1)))
        .await;
    let took = started.elapsed();
    assert!(took < Duration::from_millis(300), "{took:?}");
    for (keys, result) in sets.iter().zip(results) {
        let err = result.unwrap_err();
        assert!(matches!(err, Error::NodeDown { .. }), "{err}");
        assert_eq!(err.slot(), Some(keys.slot()));
    }
}
