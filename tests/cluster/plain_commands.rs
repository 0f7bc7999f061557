//! A fixed window's check of one limit decided from plain commands
//! (`src/limit/check/plain.rs`) against the same check by its script, on
//! random sequences: the same verdicts and the same units left, with
//! overrides of the limit and blocks coming and going and resets; denied
//! units given back to their own window only; every key with its window's
//! expiry; and the one difference, after a change of period.

use std::num::NonZeroU32;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use shardlimit::{Algorithm, Cluster, Decision, Quota, RateLimiter};

use crate::common;

fn limiter(cluster: &Cluster, name: &str, quota: Quota, plain: bool) -> RateLimiter {
    RateLimiter::builder(cluster, name, quota)
        .algorithm(Algorithm::FixedWindow)
        .report_throttled(false)
        .plain_commands(plain)
        .build()
        .unwrap()
}

/// `INCRBY`s the master owning `key` has run so far.
async fn incrbys(key: &[u8]) -> u64 {
    let info: String = common::on_owner(key, redis::cmd("INFO").arg("commandstats")).await;
    info.lines()
        .find_map(|line| line.strip_prefix("cmdstat_incrby:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |calls| calls.parse().unwrap())
}

/// What must agree: the verdict, the units left, the capacity and the
/// flags; the times within `slack` (two checks, one after the other).
fn assert_agree(plain: &Decision, script: &Decision, what: &str) {
    assert_eq!(
        (
            plain.allowed,
            plain.remaining,
            plain.limit,
            plain.blocked,
            plain.overridden
        ),
        (
            script.allowed,
            script.remaining,
            script.limit,
            script.blocked,
            script.overridden
        ),
        "{what}: plain {plain:?}\nscript {script:?}"
    );
    let slack = Duration::from_millis(100);
    let near = |a: Duration, b: Duration| a.abs_diff(b) <= slack;
    assert!(
        near(plain.reset_after, script.reset_after),
        "{what}: {plain:?} / {script:?}"
    );
    match (plain.retry_after, script.retry_after) {
        (Some(a), Some(b)) => assert!(near(a, b), "{what}: {plain:?} / {script:?}"),
        (a, b) => assert_eq!(a.is_some(), b.is_some(), "{what}: {plain:?} / {script:?}"),
    }
}

#[tokio::test]
async fn plain_commands_decide_as_the_script_does() {
    let cluster = common::cluster("plain").await;
    let mut checks = 0u64;
    let mut first_key = None;
    let mut before = 0;
    for seed in 0..6u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let limit = rng.random_range(1..=12u32);
        let quota = Quota::per_minute(NonZeroU32::new(limit).unwrap());
        let plain = limiter(&cluster, &format!("p{seed}"), quota, true);
        let script = limiter(&cluster, &format!("s{seed}"), quota, false);
        // One subject (one master) for every seed, in limiters of their own.
        let subject = "user";
        if first_key.is_none() {
            let key = plain.key(subject).unwrap();
            before = incrbys(&key).await;
            first_key = Some(key);
        }
        for step in 0..80 {
            let what = format!("seed {seed} step {step} limit {limit}");
            match rng.random_range(0..20) {
                // (Overrides of another period: see
                // `a_period_change_keeps_a_count_until_its_window_ends`.)
                // An override of the limit alone: judged from the commands.
                0 => {
                    let other =
                        Quota::per_minute(NonZeroU32::new(rng.random_range(1..=12)).unwrap());
                    for l in [&plain, &script] {
                        l.set_override(&subject, other, Duration::from_secs(600))
                            .await
                            .unwrap();
                    }
                }
                2 => {
                    for l in [&plain, &script] {
                        l.clear_override(&subject).await.unwrap();
                    }
                }
                3 => {
                    for l in [&plain, &script] {
                        l.block(&subject, Duration::from_secs(600)).await.unwrap();
                    }
                }
                4 => {
                    for l in [&plain, &script] {
                        l.unblock(&subject).await.unwrap();
                    }
                }
                5 => {
                    for l in [&plain, &script] {
                        l.reset(&subject).await.unwrap();
                    }
                }
                _ => {
                    let cost = rng.random_range(1..=limit);
                    let p = plain.check_n(&subject, cost).await;
                    let s = script.check_n(&subject, cost).await;
                    // (An override below the cost denies for good, alike.)
                    assert_agree(&p.unwrap(), &s.unwrap(), &format!("{what} cost {cost}"));
                    checks += 1;
                    // Nothing else was taken: a peek of each agrees too.
                    let (p, s) = (
                        plain.peek(&subject).await.unwrap(),
                        script.peek(&subject).await.unwrap(),
                    );
                    assert_agree(&p, &s, &format!("{what} peek"));
                }
            }
        }
    }
    // Most checks went out as plain commands (the first of a process
    // waits for a sample of the server's clock; any too close to the
    // minute's end go to the script).
    let after = incrbys(first_key.as_ref().unwrap()).await;
    assert!(
        after - before >= checks / 2,
        "{} INCRBYs for {checks} checks",
        after - before
    );
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

#[tokio::test]
async fn a_denial_gives_back_to_its_own_window_only() {
    let cluster = common::cluster("plain-back").await;
    let quota = Quota::per_minute(NonZeroU32::new(5).unwrap());
    let plain = limiter(&cluster, "api", quota, true);
    let key = plain.key("s").unwrap();
    // Until the handle's clock is sampled, checks go to the script: warm it
    // up with another limiter's checks of the same subject (same master).
    let warm = limiter(&cluster, "warm", Quota::per_minute(NonZeroU32::MAX), true);
    let before = incrbys(&key).await;
    while incrbys(&key).await == before {
        assert!(warm.check("s").await.unwrap().allowed);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(plain.check_n("s", 3).await.unwrap().allowed);
    let denied = plain.check_n("s", 3).await.unwrap();
    assert!(!denied.allowed && denied.remaining == 2, "{denied:?}");
    // Its 3 units are back: 2 fit.
    let d = plain.check_n("s", 2).await.unwrap();
    assert!(d.allowed && d.remaining == 0, "{d:?}");
    // The key ends with its minute, as the script would have it.
    let expiry: i64 = common::on_owner(&key, redis::cmd("PEXPIRETIME").arg(&key)).await;
    assert_eq!(expiry % 60_000, 0, "{expiry}");
    // A give-back for a key of another window (one that ended) leaves the
    // count alone, and one never takes it below zero.
    let give_back = redis::Script::new(include_str!(
        "../../src/limit/algorithm/fixed_window/give_back.lua"
    ));
    let mut conn = common::owner_conn(&key).await;
    let back = |units: u32, low: i64, high: i64| {
        let mut call = give_back.key(&key);
        call.arg(units).arg(low).arg(high);
        call
    };
    let earlier = expiry - 60_000;
    let reply: Option<i64> = back(3, earlier, earlier)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(reply, None);
    let reply: Option<i64> = back(6, expiry, 0).invoke_async(&mut conn).await.unwrap();
    assert_eq!(reply, None);
    let count: i64 = common::on_owner(&key, redis::cmd("GET").arg(&key)).await;
    assert_eq!(count, 5);
    let reply: Option<i64> = back(2, expiry, expiry)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(reply, Some(3));
    // Nor to a key gone after a reset.
    plain.reset("s").await.unwrap();
    let reply: Option<i64> = back(3, expiry, 0).invoke_async(&mut conn).await.unwrap();
    assert_eq!(reply, None);
    assert_eq!(common::pttl(&key).await, -2);
}

#[tokio::test]
async fn a_period_change_keeps_a_count_until_its_window_ends() {
    // The script gives a count the expiry of its window at every
    // admission, so after a change of period it drops the count at the
    // first boundary of either grid; plain commands never shorten an
    // expiry (`NX`), so they keep it until its own window ends: stricter,
    // for at most one window of the old period.
    let cluster = common::cluster("plain-period").await;
    let minute = Quota::per_minute(NonZeroU32::new(5).unwrap());
    let hour = Quota::per_hour(NonZeroU32::new(5).unwrap());
    let (plain, script) = (
        limiter(&cluster, "p", minute, true),
        limiter(&cluster, "s", minute, false),
    );
    let warm = limiter(&cluster, "warm", Quota::per_minute(NonZeroU32::MAX), true);
    let key = plain.key("x").unwrap();
    let before = incrbys(&key).await;
    while incrbys(&key).await == before {
        assert!(warm.check("x").await.unwrap().allowed);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for l in [&plain, &script] {
        l.set_override("x", hour, Duration::from_secs(600))
            .await
            .unwrap();
        assert!(l.check_n("x", 3).await.unwrap().allowed);
        l.clear_override("x").await.unwrap();
    }
    // Under the minute again both still count the hour's 3 units.
    let (p, s) = (
        plain.check("x").await.unwrap(),
        script.check("x").await.unwrap(),
    );
    assert_agree(&p, &s, "after the override");
    let expiry = |l: &RateLimiter| {
        let k = l.key("x").unwrap();
        async move { common::on_owner::<i64>(&k, redis::cmd("PEXPIRETIME").arg(&k)).await }
    };
    // The script moved its count to the minute's end; plain commands left
    // it at the hour's.
    let (pe, se) = (expiry(&plain).await, expiry(&script).await);
    assert_eq!(se % 60_000, 0);
    assert_eq!(pe % 3_600_000, 0);
    assert!(pe >= se, "{pe} {se}");
}

/// Lines of `MONITOR` on the master owning `key` while `work` runs.
async fn monitored<F: std::future::Future<Output = ()>>(key: &[u8], work: F) -> Vec<String> {
    use futures::StreamExt;
    let slot = shardlimit::keys::slot(key);
    let master = common::owner(slot).await;
    let client = redis::Client::open(format!("redis://{}", master.addr)).unwrap();
    let monitor = client.get_async_monitor().await.unwrap();
    let mut lines = monitor.into_on_message::<String>();
    let collect = async {
        let mut seen = Vec::new();
        while let Ok(Some(line)) =
            tokio::time::timeout(Duration::from_millis(500), lines.next()).await
        {
            seen.push(line);
        }
        seen
    };
    let (seen, ()) = tokio::join!(collect, work);
    seen
}

#[tokio::test]
async fn a_subject_known_to_have_no_settings_is_checked_without_reading_them() {
    let cluster = common::cluster("plain-settings").await;
    let namespace = cluster.namespace().to_owned();
    for (algorithm, plain) in [(Algorithm::FixedWindow, true), (Algorithm::Gcra, false)] {
        let api = RateLimiter::builder(
            &cluster,
            algorithm.kind(),
            Quota::per_minute(NonZeroU32::new(1000).unwrap()),
        )
        .algorithm(algorithm)
        .report_throttled(false)
        .plain_commands(plain)
        .subject_settings_cache(1000)
        .build()
        .unwrap();
        let key = api.key("s").unwrap();
        let quota_key = format!(
            "\"{namespace}:{{s}}:{}:{}:quota\"",
            algorithm.kind(),
            algorithm.kind()
        );
        // Until the subscription of the slot is confirmed (16,384 of them:
        // a moment, longer on a loaded box), every check reads the
        // settings: check until a few in a row read none (at most 20 s).
        let warm = std::time::Instant::now();
        loop {
            let lines = monitored(&key, async {
                for _ in 0..5 {
                    assert!(api.check("s").await.unwrap().allowed);
                }
            })
            .await;
            if !lines.iter().any(|l| l.contains(&quota_key)) {
                break;
            }
            assert!(
                warm.elapsed() < Duration::from_secs(20),
                "{algorithm}: checks still read the settings after 20 s"
            );
        }
        let checks = 40;
        let lines = monitored(&key, async {
            for _ in 0..checks {
                assert!(api.check("s").await.unwrap().allowed);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        let reads = lines.iter().filter(|l| l.contains(&quota_key)).count();
        // None, but for a subscription lost meanwhile (its health check
        // times out under load here), which forgets the subject until it
        // is back.
        assert!(
            reads <= checks / 4,
            "{algorithm}: {reads} reads of the override in {checks} checks"
        );
        // Nor do batches.
        let batch: Vec<(&str, u32)> = vec![("s", 1); 8];
        let lines = monitored(&key, async {
            for _ in 0..5 {
                for d in api.check_many(&batch).await {
                    assert!(d.unwrap().allowed);
                }
            }
        })
        .await;
        let batch_reads = lines.iter().filter(|l| l.contains(&quota_key)).count();
        assert!(
            batch_reads <= 10,
            "{algorithm}: {batch_reads} reads of the override in 40 checks in batches"
        );
        // The checks were sent all the same, plain or scripts.
        let key_arg = format!("\"{}\"", String::from_utf8_lossy(&key));
        let sent = lines.iter().filter(|l| l.contains(&key_arg)).count();
        assert!(
            sent >= checks,
            "{algorithm}: {sent} commands on the state key"
        );
    }
}

#[tokio::test]
async fn a_setting_written_anywhere_reaches_a_limiter_that_knew_none() {
    let cluster = common::cluster("plain-settings-news").await;
    let other = common::handle(cluster.namespace()).await;
    let quota = Quota::per_minute(NonZeroU32::new(1000).unwrap());
    let build = |c: &Cluster| {
        RateLimiter::builder(c, "api", quota)
            .algorithm(Algorithm::FixedWindow)
            .report_throttled(false)
            .subject_settings_cache(1000)
            .build()
            .unwrap()
    };
    let (ours, theirs) = (build(&cluster), build(&other));
    // Checked until remembered (the subscription takes a moment).
    for _ in 0..50 {
        assert!(ours.check("s").await.unwrap().allowed);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // An override written by another process applies here...
    theirs
        .set_override(
            "s",
            Quota::per_minute(NonZeroU32::new(2).unwrap()),
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    let waited = std::time::Instant::now();
    let d = loop {
        let d = ours.check("s").await.unwrap();
        if d.overridden || waited.elapsed() > Duration::from_secs(5) {
            break d;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert!(d.overridden && d.limit == 2, "{d:?}");
    // ...and so does a block, once the override is gone.
    theirs.clear_override("s").await.unwrap();
    theirs.reset("s").await.unwrap();
    let waited = std::time::Instant::now();
    loop {
        let d = ours.check("s").await.unwrap();
        if !d.overridden {
            break;
        }
        assert!(waited.elapsed() < Duration::from_secs(5), "{d:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    theirs.block("s", Duration::from_secs(60)).await.unwrap();
    let waited = std::time::Instant::now();
    let d = loop {
        let d = ours.check("s").await.unwrap();
        if d.blocked || waited.elapsed() > Duration::from_secs(5) {
            break d;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert!(d.blocked && !d.allowed, "{d:?}");
}

#[tokio::test]
async fn a_batch_of_plain_checks_decides_as_single_scripts_do() {
    let cluster = common::cluster("plain-batch").await;
    let quota = Quota::per_minute(NonZeroU32::new(3).unwrap());
    let (plain, script) = (
        limiter(&cluster, "p", quota, true),
        limiter(&cluster, "s", quota, false),
    );
    let key = plain.key("user-0").unwrap();
    // The clock sampled (the first checks are scripts).
    let warm = limiter(&cluster, "warm", Quota::per_minute(NonZeroU32::MAX), true);
    let before = incrbys(&key).await;
    while incrbys(&key).await == before {
        assert!(warm.check("user-0").await.unwrap().allowed);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // 12 subjects on every master, costs 1 to 3, three batches: some
    // admitted, some denied. (A subject twice in one batch is two requests
    // at once: the second sees the first's units while they are given
    // back, as the module docs say.)
    let requests: Vec<(String, u32)> = (0..12)
        .map(|i| (format!("user-{i}"), 1 + (i % 3) as u32))
        .collect();
    let lines = monitored(&key, async {
        for round in 0..3 {
            let (p, s) = (
                plain.check_many(&requests).await,
                script.check_many(&requests).await,
            );
            for (((subject, cost), p), s) in requests.iter().zip(p).zip(s) {
                let what = format!("round {round} {subject} cost {cost}");
                assert_agree(&p.unwrap(), &s.unwrap(), &what);
            }
        }
    })
    .await;
    // The plain limiter's checks of user-0 were INCRBYs, in pipelines.
    let key_arg = format!("\"INCRBY\" \"{}\"", String::from_utf8_lossy(&key));
    assert!(
        lines.iter().any(|l| l.contains(&key_arg)),
        "no INCRBY of {key_arg}"
    );
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}
