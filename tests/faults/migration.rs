//! A slot migrating under load.

use shardlimit::RateLimiter;
use shardlimit::cluster::{Transaction, TxCommand};
use shardlimit::keys::slot;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::common;
use crate::harness::*;

/// A slot moves to another master and back (`SETSLOT … MIGRATING/IMPORTING`,
/// `MIGRATE`, `SETSLOT … NODE`) while scripts and MULTI transactions run on
/// its keys: no error reaches the caller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "fault injection: run by scripts/test.sh, serially"]
async fn slot_migration_under_load() {
    restore_cluster();
    let _restore = RestoreOnDrop;
    let cluster = cluster_builder("migrate").build().await.unwrap();
    let limiter = RateLimiter::builder(&cluster, "mig", big_quota())
        .build()
        .unwrap();
    let masters = common::masters().await;
    let source = masters.iter().find(|m| m.addr == addr(0)).unwrap().clone();
    let target = masters.iter().find(|m| m.addr == addr(1)).unwrap().clone();
    // Eight subjects that share one slot of 7000.
    let the_slot = slot(b"migrating-0");
    assert!(source.owns(the_slot));
    let subjects: Arc<Vec<String>> = Arc::new(
        (0..)
            .map(|i| format!("migrating-{i}"))
            .filter(|s| slot(s.as_bytes()) == the_slot)
            .take(8)
            .collect(),
    );
    let counter = shardlimit::keys::KeyId::new("counter", "mig").unwrap();
    let t0 = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let scripts_load = {
        let (limiter, subjects) = (limiter.clone(), subjects.clone());
        load("scripts", 8, t0, stop.clone(), move |task| {
            let (limiter, subjects) = (limiter.clone(), subjects.clone());
            async move { check_outcome(limiter.check(&subjects[task]).await) }
        })
    };
    let tx_load = {
        let (cluster, subjects) = (cluster.clone(), subjects.clone());
        load("transactions", 8, t0, stop.clone(), move |task| {
            let (cluster, subjects, counter) = (cluster.clone(), subjects.clone(), counter.clone());
            async move {
                let keys = cluster.keys().key_set(&subjects[task], [&counter]).unwrap();
                let tx = Transaction::new()
                    .command(TxCommand::new("INCRBY").key(0).arg(1))
                    .command(TxCommand::new("PEXPIRE").key(0).arg(60_000));
                match cluster.transaction::<(i64, i64)>(&keys, &tx).await {
                    Ok(_) => Outcome::Decided,
                    Err(e) => Outcome::Failed(e.to_string()),
                }
            }
        })
    };

    let s = the_slot.to_string();
    for (from, to) in [(&source, &target), (&target, &source)] {
        tokio::time::sleep(Duration::from_millis(500)).await;
        common::cmd(&to.addr, &["CLUSTER", "SETSLOT", &s, "IMPORTING", &from.id]).await;
        common::cmd(&from.addr, &["CLUSTER", "SETSLOT", &s, "MIGRATING", &to.id]).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        common::migrate_keys(the_slot, from, to).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        common::finish_move(the_slot, to, &masters).await;
    }
    let moved = t0.elapsed();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    stop.store(true, Ordering::Relaxed);
    let mut samples = scripts_load.await.unwrap();
    samples.extend(tx_load.await.unwrap());
    let failures: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.outcome != Outcome::Decided)
        .collect();
    report(
        "slot_migration_under_load",
        &[format!(
            "slot {the_slot} moved 7000 -> 7001 -> 7000 under load: {} script calls, {} transactions, {} failures{}",
            samples.iter().filter(|s| s.group == "scripts").count(),
            samples.iter().filter(|s| s.group == "transactions").count(),
            failures.len(),
            failures
                .first()
                .map(|s| format!(", first: {:?}", s.outcome))
                .unwrap_or_default()
        )],
    );
    // A known limitation since checks declare their subject's optional
    // override and block keys: while the slot migrates, Redis answers
    // TRYAGAIN to a multi-key script some of whose keys exist and some not
    // (the absent ones never arrive), so checks on the migrating slot fail
    // with that transient error until the move is done (docs/failures.md,
    // "slot migrated"). Nothing else may fail, and nothing after the move.
    let unexpected: Vec<&&Sample> = failures
        .iter()
        .filter(|s| {
            let Outcome::Failed(why) = &s.outcome else {
                return true;
            };
            s.group != "scripts" || !why.contains("TryAgain") || s.ended > moved + SCHEDULING_SLACK
        })
        .collect();
    assert!(
        unexpected.is_empty(),
        "{} calls failed other than checks refused with TRYAGAIN mid-move, first: {:?}",
        unexpected.len(),
        unexpected[0]
    );
    let after = samples
        .iter()
        .filter(|s| s.group == "scripts" && s.ended > moved + SCHEDULING_SLACK)
        .count();
    assert!(after > 0, "no check ran after the move");
    assert_eq!(common::owner(the_slot).await.addr, source.addr);
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

/// Puts a master out of memory for writes (`maxmemory` 1 byte, the default
/// `noeviction`): reads are served, every write fails with `OOM`. Back to
/// no limit on drop.
struct OutOfMemory(String);

impl OutOfMemory {
    async fn start(addr: &str) -> Self {
        common::cmd(addr, &["CONFIG", "SET", "maxmemory", "1"]).await;
        OutOfMemory(addr.to_owned())
    }
}

impl Drop for OutOfMemory {
    fn drop(&mut self) {
        if let Err(err) = common::cmd_blocking(&self.0, &["CONFIG", "SET", "maxmemory", "0"]) {
            eprintln!("could not lift maxmemory on {}: {err}", self.0);
        }
    }
}

/// A lock acquired while its resource's slot migrates — the fence key
/// still on the source, the lock taken on the target, one key at a time —
/// is handed out only once the fence key records its token (issue 39, item
/// 9). Here the source refuses writes (out of memory), so the fence raise
/// fails after the lock was taken on the target: the acquisition must fail
/// and release what it took. Before the fix the failed raise was ignored:
/// the lock was granted with a token the fence key never saw, and the next
/// token would have rested on the other master's clock alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "fault injection: run by scripts/test.sh, serially"]
async fn a_lock_whose_fence_cannot_be_raised_while_migrating_is_not_granted() {
    use shardlimit::Lock;
    use shardlimit::keys::KeyId;

    restore_cluster();
    let _restore = RestoreOnDrop;
    let cluster = cluster_builder("fencemig").build().await.unwrap();
    let lock = Lock::builder(&cluster, "job")
        .ttl(Duration::from_secs(60))
        .build()
        .unwrap();
    let resource = subjects_on(port(0), 1).await.pop().unwrap();
    let the_slot = slot(resource.as_bytes());
    let id = KeyId::new("lock", "job").unwrap();
    let lock_key = cluster.keys().key(&resource, &id).unwrap();
    let fence_key = cluster
        .keys()
        .key(&resource, &id.with_part("fence").unwrap())
        .unwrap();
    // The fence key exists and the lock key does not: once the slot
    // migrates, the two-key acquisition is refused (TRYAGAIN).
    let first = lock.try_acquire(&resource).await.unwrap().unwrap();
    let first_fence = first.fencing_token();
    assert!(first.release().await.unwrap());

    let masters = common::masters().await;
    let source = masters.iter().find(|m| m.addr == addr(0)).unwrap().clone();
    let target = masters.iter().find(|m| m.addr == addr(1)).unwrap().clone();
    let result = async {
        common::start_move(the_slot, &source, &target).await;
        let full = OutOfMemory::start(&source.addr).await;
        let outcome = lock.try_acquire(&resource).await;
        drop(full);
        let recorded: Option<u64> = redis::cmd("GET")
            .arg(&fence_key)
            .query_async(&mut common::node(&source.addr).await)
            .await
            .unwrap();
        match &outcome {
            Ok(Some(guard)) => panic!(
                "granted fencing token {} while the fence key records {recorded:?} \
                 (the previous token was {first_fence})",
                guard.fencing_token()
            ),
            Ok(None) => panic!("the lock was not free"),
            Err(err) => assert!(err.to_string().contains("OOM"), "{err}"),
        }
        assert_eq!(recorded, Some(first_fence), "the fence key was not raised");
        // What the failed acquisition took on the target is released.
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let mut pipe = redis::pipe();
            pipe.cmd("ASKING").ignore().cmd("EXISTS").arg(&lock_key);
            let (exists,): (i64,) = pipe
                .query_async(&mut common::node(&target.addr).await)
                .await
                .unwrap();
            if exists == 0 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the lock taken on the target is still held"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(result)).await;
    common::hand_back(the_slot, &source, &target, &masters, outcome).await;
    let again = lock.try_acquire(&resource).await.unwrap().unwrap();
    assert!(
        again.fencing_token() > first_fence,
        "fencing tokens only grow"
    );
    assert!(again.release().await.unwrap());
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

/// How many times the ACL of the node at `addr` refused `user` an `EVAL`
/// (from `ACL LOG`, whose entries fold repeats into a count).
async fn eval_refusals(addr: &str, user: &str) -> i64 {
    let entries: Vec<std::collections::HashMap<String, redis::Value>> = redis::cmd("ACL")
        .arg("LOG")
        .arg(1000)
        .query_async(&mut common::node(addr).await)
        .await
        .unwrap();
    let text = |entry: &std::collections::HashMap<String, redis::Value>, field: &str| {
        entry
            .get(field)
            .map(|v| redis::from_redis_value::<String>(v.clone()).unwrap())
    };
    entries
        .iter()
        .filter(|e| text(e, "username").as_deref() == Some(user))
        .filter(|e| text(e, "object").as_deref() == Some("eval"))
        .map(|e| redis::from_redis_value::<i64>(e["count"].clone()).unwrap())
        .sum()
}

/// A multi-limit checked limit by limit while its slot migrates (one
/// limit's state moved to the target, the other's still on the source) is
/// denied when a concurrent check took the other limit's last unit between
/// its peek and its consume — and stays denied when giving back the units
/// it took fails (issue 39, item 6). The give-back fails here because the
/// handle's ACL user may not `EVAL` and the give-back's script is not
/// cached on the target (`SCRIPT FLUSH`, then every other script warmed by
/// an admin handle): `NOSCRIPT`, then `NOPERM`. Before the fix that error
/// replaced the denial (a timeout would have been a transient error, which
/// fail-open and local mode admit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "fault injection: run by scripts/test.sh, serially"]
async fn a_multi_limit_denied_while_migrating_stays_denied_when_its_give_back_fails() {
    use std::num::NonZeroU32;

    use futures::future::join_all;
    use shardlimit::keys::KeyId;
    use shardlimit::{Algorithm, MultiLimiter, Quota};

    const RACERS: usize = 64;
    restore_cluster();
    let _restore = RestoreOnDrop;
    let user = common::AclUser::without("+eval").await;
    let limited = user
        .builder()
        .command_timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    let ns = limited.namespace().to_owned();
    let admin = common::handle(&ns).await;
    let day = Duration::from_secs(86_400);
    let multi = |cluster: &shardlimit::Cluster| {
        let limiter = |name: &str, limit: u32| {
            let quota = Quota::with_period(NonZeroU32::new(limit).unwrap(), day);
            RateLimiter::builder(cluster, name, quota)
                .algorithm(Algorithm::SlidingLog)
                .build()
                .unwrap()
        };
        MultiLimiter::new([limiter("wide", 100), limiter("narrow", 2)]).unwrap()
    };
    let (checked, seeding) = (multi(&limited), multi(&admin));
    let masters = common::masters().await;
    let source = masters.iter().find(|m| m.addr == addr(0)).unwrap().clone();
    let target = masters.iter().find(|m| m.addr == addr(1)).unwrap().clone();
    let first = subjects_on(port(0), 1).await.pop().unwrap();
    let the_slot = slot(first.as_bytes());
    let mut subjects = (0..)
        .map(|i| format!("{first}-{i}"))
        .filter(|s| slot(s.as_bytes()) == the_slot);
    let wide = KeyId::new(Algorithm::SlidingLog.kind(), "wide").unwrap();

    // Each round's subject and the warm-up's, their state made on the
    // source before the slot migrates: then one key moves at a time.
    let warm = subjects.next().unwrap();
    let rounds: Vec<String> = (0..20).map(|_| subjects.next().unwrap()).collect();
    for subject in rounds.iter().chain([&warm]) {
        assert!(seeding.check(subject).await.unwrap().allowed);
    }
    let move_wide = |subject: &str| {
        let key = admin.keys().key(subject, &wide).unwrap();
        let (from, to) = (source.addr.clone(), target.addr.clone());
        async move { common::migrate(&from, &to, &[key]).await }
    };
    let result = async {
        common::start_move(the_slot, &source, &target).await;
        // The scripts of a check, cached where it runs them; the give-back's
        // is not, on the target.
        common::cmd(&target.addr, &["SCRIPT", "FLUSH"]).await;
        move_wide(&warm).await;
        assert!(seeding.check(&warm).await.unwrap().allowed);
        // Each round: a subject whose "wide" state is on the target and
        // whose "narrow" one, with 1 unit left, is on the source.
        let mut seen = Vec::new();
        for (round, subject) in rounds.iter().enumerate() {
            move_wide(subject).await;
            let refused = eval_refusals(&target.addr, &user.name).await;
            let outcomes = join_all((0..RACERS).map(|_| checked.check(subject))).await;
            let gave_back = eval_refusals(&target.addr, &user.name).await - refused;
            let errors: Vec<String> = outcomes
                .iter()
                .filter_map(|o| o.as_ref().err().map(ToString::to_string))
                .collect();
            let admitted = outcomes
                .iter()
                .filter(|o| o.as_ref().is_ok_and(|d| d.allowed))
                .count();
            seen.push(format!(
                "round {round}: {RACERS} concurrent checks, {admitted} admitted, \
                 {gave_back} give-backs refused, errors: {errors:?}"
            ));
            assert!(errors.is_empty(), "{seen:#?}");
            assert_eq!(admitted, 1, "{seen:#?}");
            if gave_back > 0 {
                return seen;
            }
        }
        panic!("no check raced another between its peek and its consume: {seen:#?}");
    };
    let outcome = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(result)).await;
    let rounds = outcome.as_ref().ok().cloned().unwrap_or_default();
    // Every key of the slot goes to the target with it, then back.
    common::migrate_keys(the_slot, &source, &target).await;
    common::finish_move(the_slot, &target, &masters).await;
    common::hand_back(the_slot, &source, &target, &masters, outcome.map(drop)).await;
    report(
        "a_multi_limit_denied_while_migrating_stays_denied_when_its_give_back_fails",
        &rounds,
    );
}
