//! The `Cluster` handle against the six-node cluster: slot calculation agrees
//! with the server, operations land on the owning master, bad input is
//! refused before anything is sent — and the behaviour suite every
//! deployment runs (`tests/behaviour`), here against the cluster.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::behaviour;
use crate::common;

behaviour::suite!(behaviour::Setup::Cluster);

use std::collections::BTreeSet;
use std::time::Duration;

use rand::{Rng, RngCore};
use shardlimit::cluster::{NO_ARGS, Script, Transaction, TxCommand};
use shardlimit::keys::{KeyBuilder, KeyId, KeySet, slot};
use shardlimit::{Cluster, Error};

fn random_bytes(rng: &mut impl RngCore, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rng.fill_bytes(&mut v);
    v
}

fn random_key(rng: &mut impl RngCore) -> Vec<u8> {
    match rng.random_range(0..4) {
        // Arbitrary bytes, braces included by chance.
        0 => {
            let len = rng.random_range(0..48);
            random_bytes(rng, len)
        }
        // A well-formed tag somewhere in the key.
        1 => {
            let (a, t, b) = (
                rng.random_range(0..8),
                rng.random_range(0..12),
                rng.random_range(0..8),
            );
            let mut key = random_bytes(rng, a);
            key.push(b'{');
            key.extend(random_bytes(rng, t));
            key.push(b'}');
            key.extend(random_bytes(rng, b));
            key
        }
        // Brace soup: the edge cases in random order.
        2 => {
            let len = rng.random_range(0..16);
            (0..len)
                .map(|_| [b'{', b'}', b'a', b'b'][rng.random_range(0..4)])
                .collect()
        }
        // Keys our own builder makes from random subjects.
        _ => {
            let len = rng.random_range(1..40);
            let subject = random_bytes(rng, len);
            KeyBuilder::new("sl")
                .unwrap()
                .key(subject, &KeyId::new("gcra", "api").unwrap())
                .unwrap()
        }
    }
}

#[tokio::test]
async fn slots_match_cluster_keyslot_for_100k_keys() {
    let mut rng = rand::rng();
    let mut keys: Vec<Vec<u8>> = [
        &b""[..],
        b"{}",
        b"{a}{b}",
        b"foo{bar",
        b"{{a}}",
        b"foo{}{bar}",
        b"foo{{bar}}zap",
        b"foo{bar}{zap}",
        b"}{",
        b"\x00\xff{\x80}",
    ]
    .iter()
    .map(|k| k.to_vec())
    .collect();
    while keys.len() < 100_000 {
        keys.push(random_key(&mut rng));
    }

    let master = &common::masters().await[0];
    let mut conn = common::node(&master.addr).await;
    let mut mismatches = Vec::new();
    for chunk in keys.chunks(2000) {
        let mut pipe = redis::pipe();
        for key in chunk {
            pipe.cmd("CLUSTER").arg("KEYSLOT").arg(key);
        }
        let server: Vec<u16> = pipe.query_async(&mut conn).await.unwrap();
        for (key, server_slot) in chunk.iter().zip(server) {
            if slot(key) != server_slot {
                mismatches.push((key.clone(), slot(key), server_slot));
            }
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} mismatches, first: {:?}",
        mismatches.len(),
        mismatches.first()
    );
}

const SET_WITH_TTL: &str =
    "redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return redis.call('GET', KEYS[1])";

#[tokio::test]
async fn eval_and_transaction_run_on_the_owning_master() {
    let cluster = common::cluster("owner").await;
    let script = Script::new("set_with_ttl", SET_WITH_TTL);
    let id = KeyId::new("demo", "owner").unwrap();
    let masters = common::masters().await;
    let mut seen_masters = BTreeSet::new();

    for i in 0..40 {
        let subject = format!("user:{i}");
        let keys = cluster.keys().key_set(&subject, [&id]).unwrap();
        let echoed: String = cluster
            .eval(&script, &keys, (&subject, 60_000))
            .await
            .unwrap();
        assert_eq!(echoed, subject);
        let tx = Transaction::new()
            .command(TxCommand::new("APPEND").key(0).arg("!"))
            .command(TxCommand::new("PEXPIRE").key(0).arg(60_000));
        let (len, expired): (usize, i64) = cluster.transaction(&keys, &tx).await.unwrap();
        assert_eq!((len, expired), (subject.len() + 1, 1));

        // A direct, non-cluster connection answers MOVED unless it owns the
        // slot, so finding the value there proves where it was written.
        let owner = masters.iter().find(|m| m.owns(keys.slot())).unwrap();
        let mut conn = common::node(&owner.addr).await;
        let stored: String = redis::cmd("GET")
            .arg(&keys.keys()[0])
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(stored, format!("{subject}!"));
        for other in masters.iter().filter(|m| m.addr != owner.addr) {
            let mut conn = common::node(&other.addr).await;
            let err = redis::cmd("GET")
                .arg(&keys.keys()[0])
                .query_async::<Option<String>>(&mut conn)
                .await
                .unwrap_err();
            assert_eq!(
                err.kind(),
                redis::ErrorKind::Server(redis::ServerErrorKind::Moved)
            );
        }
        seen_masters.insert(owner.addr.clone());
    }
    assert_eq!(
        seen_masters.len(),
        masters.len(),
        "subjects should spread over every master"
    );
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn multi_key_script_sees_every_key_of_the_subject() {
    let cluster = common::cluster("multikey").await;
    let a = KeyId::new("demo", "multi").unwrap();
    let b = a.with_part("second").unwrap();
    let keys = cluster.keys().key_set("team:7", [&a, &b]).unwrap();
    let script = Script::new(
        "two_keys",
        "redis.call('SET', KEYS[1], 1, 'PX', 60000) redis.call('SET', KEYS[2], 2, 'PX', 60000) \
         return redis.call('GET', KEYS[1]) + redis.call('GET', KEYS[2])",
    );
    let sum: i64 = cluster.eval(&script, &keys, NO_ARGS).await.unwrap();
    assert_eq!(sum, 3);
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn mixed_slot_key_sets_are_refused_and_nothing_is_written() {
    let cluster = common::cluster("crossslot").await;
    let ns = cluster.namespace().to_owned();
    let a = format!("{ns}:{{alice}}:demo:x");
    let b = format!("{ns}:{{bob}}:demo:x");
    assert_ne!(slot(a.as_bytes()), slot(b.as_bytes()));
    match KeySet::from_keys([a.clone(), b.clone()]) {
        Err(Error::CrossSlot { keys }) => {
            assert_eq!(keys[0], (a.clone(), slot(a.as_bytes())));
            assert_eq!(keys[1], (b.clone(), slot(b.as_bytes())));
        }
        other => panic!("expected CrossSlot, got {other:?}"),
    }
    // A user-supplied set that does share a slot works.
    let ok = KeySet::from_keys([
        format!("{ns}:{{alice}}:demo:x"),
        format!("{ns}:{{alice}}:demo:y"),
    ])
    .unwrap();
    let script = Script::new("set_with_ttl", SET_WITH_TTL);
    let _: String = cluster.eval(&script, &ok, ("v", 60_000)).await.unwrap();
    let found = common::keys_with_pttl(&ns).await;
    let found: Vec<String> = found
        .into_iter()
        .map(|(k, _)| String::from_utf8(k).unwrap())
        .collect();
    assert_eq!(found, vec![a], "only the valid set's write may exist");
}

#[tokio::test]
async fn transaction_key_index_is_refused_before_sending() {
    let cluster = common::cluster("txindex").await;
    let id = KeyId::new("demo", "idx").unwrap();
    let keys = cluster.keys().key_set("u", [&id]).unwrap();
    let tx = Transaction::new()
        .command(TxCommand::new("SET").key(0).arg("x").arg("PX").arg(60_000))
        .command(TxCommand::new("SET").key(1).arg("y"));
    let err = cluster.transaction::<()>(&keys, &tx).await.unwrap_err();
    assert!(matches!(err, Error::KeyIndex { index: 1, len: 1 }), "{err}");
    assert!(common::keys_with_pttl(cluster.namespace()).await.is_empty());
}

/// `SCRIPT EXISTS` of `script` on `conn`'s node.
async fn script_exists(conn: &mut redis::aio::MultiplexedConnection, script: &Script) -> Vec<bool> {
    redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(script.sha1())
        .query_async(conn)
        .await
        .unwrap()
}

#[tokio::test]
async fn scripts_not_cached_on_the_node_are_sent_with_their_body() {
    let cluster = common::cluster("noscript").await;
    // A script text no node has seen: the first EVALSHA must get NOSCRIPT.
    let marker: u64 = rand::rng().random();
    let script = Script::new("fresh", format!("-- {marker}\nreturn ARGV[1]"));
    let id = KeyId::new("demo", "noscript").unwrap();
    let keys = cluster.keys().key_set("s", [&id]).unwrap();
    let owner = common::owner(keys.slot()).await;
    let mut conn = common::node(&owner.addr).await;
    let cached = script_exists(&mut conn, &script).await;
    assert_eq!(cached, [false]);
    let echoed: String = cluster.eval(&script, &keys, "hello").await.unwrap();
    assert_eq!(echoed, "hello");
    let cached = script_exists(&mut conn, &script).await;
    assert_eq!(
        cached,
        [true],
        "EVAL caches the script for the next EVALSHA"
    );
    let again: String = cluster.eval(&script, &keys, "again").await.unwrap();
    assert_eq!(again, "again");
}

#[tokio::test]
async fn server_errors_are_reported_and_not_transient() {
    let cluster = common::cluster("srverr").await;
    let id = KeyId::new("demo", "wrongtype").unwrap();
    let keys = cluster.keys().key_set("w", [&id]).unwrap();
    let plant = Script::new(
        "plant_list",
        "redis.call('RPUSH', KEYS[1], 'x') redis.call('PEXPIRE', KEYS[1], 60000) return 1",
    );
    let _: i64 = cluster.eval(&plant, &keys, NO_ARGS).await.unwrap();

    let incr = Script::new("incr", "return redis.call('INCR', KEYS[1])");
    let err = cluster
        .eval::<i64>(&incr, &keys, NO_ARGS)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Redis { ref op, .. } if op == "incr"),
        "{err}"
    );
    assert!(err.to_string().contains("WRONGTYPE"), "{err}");
    assert!(!err.is_transient());
    assert_eq!(err.slot(), Some(keys.slot()));

    let broken = Script::new("broken", "return redis.call('NOSUCHCOMMAND')");
    let err = cluster
        .eval::<i64>(&broken, &keys, NO_ARGS)
        .await
        .unwrap_err();
    assert!(!err.is_transient(), "{err}");

    let tx = Transaction::new().command(TxCommand::new("INCRBY").key(0));
    let err = cluster.transaction::<()>(&keys, &tx).await.unwrap_err();
    assert!(
        err.to_string().contains("wrong number of arguments"),
        "{err}"
    );
    assert!(!err.is_transient());

    let reply_mismatch = cluster
        .eval::<i64>(&Script::new("s", "return 'text'"), &keys, NO_ARGS)
        .await;
    assert!(
        matches!(reply_mismatch, Err(Error::UnexpectedReply { .. })),
        "{reply_mismatch:?}"
    );
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn builder_refuses_bad_configuration_before_connecting() {
    let empty: [&str; 0] = [];
    let cases = [
        (Cluster::builder(empty), "nodes"),
        (Cluster::builder(["not a url"]), "nodes"),
        (
            Cluster::builder(common::node_urls()).command_timeout(Duration::ZERO),
            "command_timeout",
        ),
        (
            Cluster::builder(common::node_urls()).connect_timeout(Duration::ZERO),
            "connect_timeout",
        ),
        (
            Cluster::builder(common::node_urls()).failure_window(Duration::ZERO),
            "failure_window",
        ),
        (
            Cluster::builder(common::node_urls()).node_down_after(0),
            "node_down_after",
        ),
    ];
    for (builder, field) in cases {
        match builder.build().await {
            Err(Error::Config { field: f, .. }) => assert_eq!(f, field),
            other => panic!("{field}: {other:?}"),
        }
    }
    let err = Cluster::builder(common::node_urls())
        .namespace("a:b")
        .build()
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidIdent {
                field: "namespace",
                ..
            }
        ),
        "{err}"
    );
}

#[tokio::test]
async fn unreachable_cluster_is_a_transient_connect_error() {
    let err = Cluster::builder(["redis://127.0.0.1:1"])
        .connect_timeout(Duration::from_millis(500))
        .build()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Connect { .. }), "{err}");
    assert!(err.is_transient());
}

#[tokio::test]
async fn bad_subjects_are_refused_before_any_io() {
    let cluster = common::cluster("badinput").await;
    let id = KeyId::new("demo", "x").unwrap();
    assert!(matches!(
        cluster.keys().key_set("", [&id]),
        Err(Error::EmptySubject)
    ));
    let long = vec![b'x'; 1025];
    assert!(matches!(
        cluster.keys().key_set(&long, [&id]),
        Err(Error::SubjectTooLong {
            len: 1025,
            max: 1024
        })
    ));
    for (kind, name, field) in [
        ("", "x", "kind"),
        ("k", "a b", "name"),
        ("k{", "x", "kind"),
        ("k", &*"n".repeat(65), "name"),
    ] {
        match KeyId::new(kind, name) {
            Err(Error::InvalidIdent { field: f, .. }) => assert_eq!(f, field),
            other => panic!("{kind:?}/{name:?}: {other:?}"),
        }
    }
    assert!(matches!(
        cluster.keys().key_set("s", std::iter::empty::<&KeyId>()),
        Err(Error::EmptyKeySet)
    ));
    assert!(common::keys_with_pttl(cluster.namespace()).await.is_empty());
}

/// A call that fails at once (here: no topology yet, from an unreachable
/// seed) must still yield to the scheduler now and then, or a caller that
/// loops on it starves every other task on its thread — timers included.
/// On a single-threaded runtime (its own thread, so a starved runtime fails
/// this test instead of hanging it), a busy loop of failing checks must let
/// a 50 ms sleep elsewhere finish.
#[test]
fn calls_that_fail_at_once_do_not_starve_the_runtime() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let failures = runtime.block_on(async {
            let cluster = Cluster::builder(["redis://127.0.0.1:1"])
                .lazy_connect(true)
                .build()
                .await
                .unwrap();
            let limiter = shardlimit::RateLimiter::builder(
                &cluster,
                "starve",
                shardlimit::Quota::per_second(std::num::NonZeroU32::new(5).unwrap()),
            )
            .build()
            .unwrap();
            let done = Arc::new(AtomicBool::new(false));
            let spinner = {
                let done = done.clone();
                tokio::spawn(async move {
                    let mut failures = 0u64;
                    while !done.load(Ordering::Relaxed) {
                        assert!(limiter.check("s").await.is_err());
                        failures += 1;
                    }
                    failures
                })
            };
            tokio::time::sleep(Duration::from_millis(50)).await;
            done.store(true, Ordering::Relaxed);
            spinner.await.unwrap()
        });
        let _ = tx.send(failures);
    });
    let failures = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the sleep never woke: the failing calls starved the runtime");
    assert!(failures > 0);
}
