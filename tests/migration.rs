//! Slot migration: scripts and MULTI/EXEC transactions keep working while a
//! slot is `MIGRATING`/`IMPORTING` (ASK) and after it moved (MOVED with a
//! stale slot map) — redis-rs does not follow either inside EXEC by itself.
//!
//! This binary moves a live slot, so it keeps to itself: one test, and the
//! slot is handed back to its owner even if an assertion fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{cmd, finish_move, migrate_keys, move_slot};
use redis::Value;
use shardlimit::Error;
use shardlimit::cluster::{Script, Transaction, TxCommand};
use shardlimit::keys::KeyId;

const INCR_SCRIPT: &str = "local n = redis.call('INCRBY', KEYS[1], ARGV[1]) redis.call('PEXPIRE', KEYS[1], 600000) return n";

/// Reads `key` on `addr` with ASKING, as the importing node would serve it.
async fn get_asking(addr: &str, key: &[u8]) -> Option<i64> {
    let mut conn = common::node(addr).await;
    let mut pipe = redis::pipe();
    pipe.cmd("ASKING").ignore().cmd("GET").arg(key);
    let (v,): (Option<i64>,) = pipe.query_async(&mut conn).await.unwrap();
    v
}

#[tokio::test]
async fn transactions_and_scripts_follow_ask_and_moved() {
    let cluster = common::cluster("migrate").await;
    let id = KeyId::new("counter", "mig").unwrap();
    let fence = id.with_part("other").unwrap();
    let subject = format!("migrating-{}", cluster.namespace());
    let keys = cluster.keys().key_set(&subject, [&id, &fence]).unwrap();
    let one_key = cluster.keys().key_set(&subject, [&id]).unwrap();
    let slot = keys.slot();
    let all = common::masters().await;
    let source = all.iter().find(|m| m.owns(slot)).unwrap().clone();
    let target = all.iter().find(|m| m.addr != source.addr).unwrap().clone();

    let incr = |n: i64| {
        Transaction::new()
            .command(TxCommand::new("INCRBY").key(0).arg(n))
            .command(TxCommand::new("PEXPIRE").key(0).arg(600_000))
    };
    let script = Script::new("incr_by", INCR_SCRIPT);
    let (n, _): (i64, i64) = cluster.transaction(&keys, &incr(1)).await.unwrap();
    assert_eq!(n, 1);

    let result = async {
        let s = slot.to_string();
        cmd(
            &target.addr,
            &["CLUSTER", "SETSLOT", &s, "IMPORTING", &source.id],
        )
        .await;
        cmd(
            &source.addr,
            &["CLUSTER", "SETSLOT", &s, "MIGRATING", &target.id],
        )
        .await;

        // Migrating, keys still on the source: served there as usual.
        let (n, _): (i64, i64) = cluster.transaction(&keys, &incr(1)).await.unwrap();
        assert_eq!(n, 2);

        // Keys moved to the importing node: the source answers ASK to every
        // queued command; the transaction is resent with ASKING.
        migrate_keys(slot, &source, &target).await;
        let (n, _): (i64, i64) = cluster.transaction(&keys, &incr(10)).await.unwrap();
        assert_eq!(n, 12, "transaction after ASK");
        let n: i64 = cluster.eval(&script, &one_key, 100).await.unwrap();
        assert_eq!(n, 112, "script after ASK");
        assert_eq!(get_asking(&target.addr, &keys.keys()[0]).await, Some(112));

        // A two-key script whose second key exists nowhere yet: Redis itself
        // refuses it on the importing node (TRYAGAIN: not all keys are there)
        // until the migration ends. It is retried until the timeout, then
        // reported as transient (a timeout, or the last TRYAGAIN) — and
        // nothing ran.
        let err = cluster.eval::<i64>(&script, &keys, 1).await.unwrap_err();
        assert!(err.is_transient(), "{err}");
        assert!(
            matches!(err, Error::Timeout { .. }) || err.to_string().contains("TryAgain"),
            "{err}"
        );
        assert_eq!(get_asking(&target.addr, &keys.keys()[0]).await, Some(112));

        // A transaction on that key alone: ASK, and it is created on the
        // importing node; now both keys are there and the script runs.
        let tx = Transaction::new().command(
            TxCommand::new("SET")
                .key(1)
                .arg("fresh")
                .arg("PX")
                .arg(600_000),
        );
        let _: Value = cluster.transaction(&keys, &tx).await.unwrap();
        let n: i64 = cluster.eval(&script, &keys, 0).await.unwrap();
        assert_eq!(n, 112, "two-key script after ASK");

        // Migration finished; the client's slot map still names the source,
        // which now answers MOVED inside EXEC.
        finish_move(slot, &target, &all).await;
        let (n, _): (i64, i64) = cluster.transaction(&keys, &incr(1000)).await.unwrap();
        assert_eq!(n, 1112, "transaction after MOVED");
        let n: i64 = cluster.eval(&script, &keys, 10_000).await.unwrap();
        assert_eq!(n, 11_112, "script after MOVED");
        let mut direct = common::node(&target.addr).await;
        let stored: Vec<Option<String>> = redis::cmd("MGET")
            .arg(&keys.keys()[0])
            .arg(&keys.keys()[1])
            .query_async(&mut direct)
            .await
            .unwrap();
        assert_eq!(stored, [Some("11112".to_owned()), Some("fresh".to_owned())]);
    };
    // Hand the slot back whatever happened above.
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(result)).await;
    let now = common::owner(slot).await;
    if now.addr != source.addr {
        move_slot(slot, &now, &source, &all).await;
    } else {
        // Only the migration flags may be set: clear them.
        let s = slot.to_string();
        cmd(&source.addr, &["CLUSTER", "SETSLOT", &s, "STABLE"]).await;
        cmd(&target.addr, &["CLUSTER", "SETSLOT", &s, "STABLE"]).await;
    }
    assert_eq!(common::owner(slot).await.addr, source.addr);
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }

    // And back on the source, through MOVED again.
    let (n, _): (i64, i64) = cluster.transaction(&keys, &incr(1)).await.unwrap();
    assert_eq!(n, 11_113);
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}
