//! Slot migration: scripts and MULTI/EXEC transactions keep working while a
//! slot is `MIGRATING`/`IMPORTING` (ASK) and after it moved (MOVED with a
//! stale slot map) — redis-rs does not follow either inside EXEC by itself.
//!
//! This binary moves a live slot, so it keeps to itself: one test, and the
//! slot is handed back to its owner even if an assertion fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{finish_move, hand_back, migrate_keys, start_move};
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
        start_move(slot, &source, &target).await;

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
    hand_back(slot, &source, &target, &all, outcome).await;

    // And back on the source, through MOVED again.
    let (n, _): (i64, i64) = cluster.transaction(&keys, &incr(1)).await.unwrap();
    assert_eq!(n, 11_113);
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

/// What the checks of one limiter and subject must see: units left (exact:
/// every check here is sequential) and the flags.
struct Expect {
    left: u32,
    overridden: bool,
    blocked: bool,
}

/// The rate limits, counter and their expected state, checked by [`round`].
struct Model {
    limiters: Vec<(shardlimit::RateLimiter, Vec<(String, Expect)>)>,
    multi: shardlimit::MultiLimiter,
    multi_left: Vec<(String, u32)>,
    counter: shardlimit::Counter,
    counted: String,
    counter_total: i64,
}

/// One round: a check of every limiter and subject, the same subjects
/// through `check_many`, the multi-limit, a counter add — each against the
/// model, with no error allowed.
async fn round(m: &mut Model, phase: &str) {
    for (l, subjects) in &mut m.limiters {
        for (subject, e) in subjects.iter_mut() {
            let d = l
                .check(&*subject)
                .await
                .unwrap_or_else(|err| panic!("{phase}: {} {subject}: {err}", l.name()));
            assert_eq!(
                d.allowed,
                e.left > 0,
                "{phase}: {} {subject}: {d:?}",
                l.name()
            );
            assert_eq!(
                d.overridden,
                e.overridden,
                "{phase}: {} {subject}",
                l.name()
            );
            assert_eq!(d.blocked, e.blocked, "{phase}: {} {subject}", l.name());
            e.left = e.left.saturating_sub(1);
        }
        let batch: Vec<(&str, u32)> = subjects.iter().map(|(s, _)| (s.as_str(), 1)).collect();
        let decided = l.check_many(&batch).await;
        for ((subject, e), d) in subjects.iter_mut().zip(decided) {
            let d =
                d.unwrap_or_else(|err| panic!("{phase}: check_many {} {subject}: {err}", l.name()));
            assert_eq!(
                d.allowed,
                e.left > 0,
                "{phase}: check_many {} {subject}",
                l.name()
            );
            e.left = e.left.saturating_sub(1);
        }
    }
    for (subject, left) in &mut m.multi_left {
        let d = m
            .multi
            .check(&*subject)
            .await
            .unwrap_or_else(|err| panic!("{phase}: multi {subject}: {err}"));
        assert_eq!(d.allowed, *left > 0, "{phase}: multi {subject}: {d:?}");
        *left = left.saturating_sub(1);
    }
    m.counter_total += 2;
    let total = m.counter.add(&m.counted, 2).await.unwrap();
    assert_eq!(total, m.counter_total, "{phase}: counter");
}

/// Every primitive keeps deciding while its subject's slot migrates — with
/// the slot only flagged, with its keys moved one at a time, and with all
/// of them moved but the migration not finished — with 0 errors and exactly
/// the decisions a stable slot gives: subjects with and without state, an
/// override, a block, a multi-limit whose limits' keys partly exist (so no
/// one script can hold them all on either side), a lease, a counter and a
/// held lock.
///
/// Before the one-key fallback (src/limit/migrating.rs) every rate-limit
/// check here failed with TRYAGAIN after its whole timeout.
#[tokio::test]
async fn every_check_decides_while_its_slot_migrates() {
    use std::num::NonZeroU32;
    use std::time::Duration;

    use shardlimit::{Algorithm, Counter, LeaseLimiter, Lock, MultiLimiter, Quota, RateLimiter};

    let cluster = common::builder("migrating")
        .command_timeout(Duration::from_millis(500))
        .build()
        .await
        .unwrap();
    let ns = cluster.namespace().to_owned();
    // Subjects sharing one slot (the subject is the hash tag).
    let slot = shardlimit::keys::slot(format!("m-{ns}-0").as_bytes());
    let mut subjects = (0..)
        .map(|i| format!("m-{ns}-{i}"))
        .filter(|s| shardlimit::keys::slot(s.as_bytes()) == slot);
    let mut next = || subjects.next().unwrap();
    let all = common::masters().await;
    let source = all.iter().find(|m| m.owns(slot)).unwrap().clone();
    let target = all.iter().find(|m| m.addr != source.addr).unwrap().clone();

    // Five a day: no window boundary falls inside the test (but midnight
    // UTC for the fixed window, which a run would have to span).
    let day = Duration::from_secs(86_400);
    let quota = Quota::with_period(NonZeroU32::new(5).unwrap(), day);
    let limiter = |name: String, a: Algorithm| {
        RateLimiter::builder(&cluster, name, quota)
            .algorithm(a)
            .build()
            .unwrap()
    };
    let (fresh, used, over, blocked) = (next(), next(), next(), next());
    let mut limiters = Vec::new();
    for a in Algorithm::ALL {
        let l = limiter(format!("m-{}", a.kind()), a);
        assert!(l.check_n(&used, 2).await.unwrap().allowed);
        let two = Quota::with_period(NonZeroU32::new(2).unwrap(), day);
        l.set_override(&over, two, Duration::from_secs(600))
            .await
            .unwrap();
        l.block(&blocked, Duration::from_secs(600)).await.unwrap();
        let expect = |left, overridden, blocked| Expect {
            left,
            overridden,
            blocked,
        };
        let subjects = vec![
            (fresh.clone(), expect(5, false, false)),
            (used.clone(), expect(3, false, false)),
            (over.clone(), expect(2, true, false)),
            (blocked.clone(), expect(0, false, true)),
        ];
        limiters.push((l, subjects));
    }
    // A multi-limit of a GCRA and a sliding log of their own, whose first
    // subject has state in the log only: its keys are never all on one
    // side, and neither are a fresh subject's (none exists).
    let (mixed, multi_fresh) = (next(), next());
    let log = limiter("mm-slog".into(), Algorithm::SlidingLog);
    assert!(log.check(&mixed).await.unwrap().allowed);
    let multi = MultiLimiter::new([limiter("mm-gcra".into(), Algorithm::Gcra), log]).unwrap();
    let counter = Counter::builder(&cluster, "m-count").build().unwrap();
    let counted = next();
    counter.add(&counted, 5).await.unwrap();
    let mut model = Model {
        limiters,
        multi,
        multi_left: vec![(mixed, 4), (multi_fresh, 5)],
        counter,
        counted,
        counter_total: 5,
    };

    let leases = LeaseLimiter::builder(&cluster, "m-lease")
        .max_leases(NonZeroU32::new(3).unwrap())
        .build()
        .unwrap();
    let lease_subject = next();
    let mut taken = vec![
        leases.try_acquire(&lease_subject).await.unwrap().unwrap(),
        leases.try_acquire(&lease_subject).await.unwrap().unwrap(),
    ];
    let lock = Lock::builder(&cluster, "m-lock")
        .ttl(Duration::from_secs(60))
        .build()
        .unwrap();
    let resource = next();
    let held = lock.try_acquire(&resource).await.unwrap().unwrap();
    let first_fence = held.fencing_token();

    let result = async {
        start_move(slot, &source, &target).await;

        // Flagged, nothing moved yet.
        round(&mut model, "flagged").await;
        assert!(
            lock.try_acquire(&resource).await.unwrap().is_none(),
            "the lock is held"
        );
        taken.push(leases.try_acquire(&lease_subject).await.unwrap().unwrap());
        assert!(leases.try_acquire(&lease_subject).await.unwrap().is_none());

        // Keys moved one at a time, a round after every few.
        let keys = common::keys_in_slot(&source.addr, slot).await;
        assert!(keys.len() > 10, "{} keys in the slot", keys.len());
        for (n, key) in keys.iter().enumerate() {
            common::migrate(&source.addr, &target.addr, std::slice::from_ref(key)).await;
            if n % 6 == 5 {
                round(&mut model, "half moved").await;
            }
        }
        // What the rounds wrote since the listing, on the source: moved too.
        migrate_keys(slot, &source, &target).await;

        // Everything on the target, the migration not finished.
        round(&mut model, "moved").await;
        let drained = model.counter.drain(&model.counted).await.unwrap();
        assert_eq!(drained, Some(model.counter_total), "drain while migrating");
        model.counter_total = 0;
        taken.pop().unwrap().release().await.unwrap();
        taken.push(leases.try_acquire(&lease_subject).await.unwrap().unwrap());
        held.release().await.unwrap();
        let again = lock.try_acquire(&resource).await.unwrap().unwrap();
        assert!(
            again.fencing_token() > first_fence,
            "fencing tokens only grow"
        );
        again.release().await.unwrap();

        finish_move(slot, &target, &all).await;
        round(&mut model, "finished").await;
        // The counts above were exact to the unit: everything is used up.
        for (l, subjects) in &model.limiters {
            for (subject, e) in subjects {
                assert_eq!(e.left, 0, "{} {subject} has {} left", l.name(), e.left);
            }
        }
        assert!(model.multi_left.iter().all(|(_, left)| *left == 0));
        for lease in taken.drain(..) {
            lease.release().await.unwrap();
        }
    };
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(result)).await;
    hand_back(slot, &source, &target, &all, outcome).await;
    common::assert_every_key_has_ttl(&ns).await;
}
