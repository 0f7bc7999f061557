//! A tour of shardlimit against the six-node cluster: keys and their slots,
//! which master owns them, one Lua script and one MULTI/EXEC — every key
//! written has a TTL.
//!
//! ```text
//! cluster-compose/up.sh && cargo run --example tour
//! ```
//!
//! Honours `SHARDLIMIT_NODES` (comma-separated `redis://host:port`).

use std::time::Duration;

use shardlimit::keys::{KeyId, ParsedKey};
use std::num::NonZeroU32;

use shardlimit::cluster::{Script, Transaction, TxCommand};
use shardlimit::{Algorithm, Cluster, FailurePolicy, MultiLimiter, Quota, RateLimiter};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cluster = Cluster::builder_from_env()
        .namespace("tour")
        .command_timeout(Duration::from_millis(500))
        .build()
        .await?;
    // Built first: its deny cache follows other processes' changes (a
    // subscription per slot), which takes about a second to set up.
    let five = NonZeroU32::MIN.saturating_add(4);
    let api = RateLimiter::builder(&cluster, "tour-api", Quota::per_hour(five))
        .deny_cache(10_000)
        .build()?;
    let topology = cluster.topology().await?;
    println!("== cluster");
    for shard in &topology.shards {
        let replicas: Vec<String> = shard.replicas.iter().map(ToString::to_string).collect();
        let slots: Vec<String> = shard
            .slots
            .iter()
            .map(|r| format!("{}-{}", r.start(), r.end()))
            .collect();
        println!(
            "master {} slots {} replicas {}",
            shard.master,
            slots.join(","),
            replicas.join(",")
        );
    }

    println!("\n== keys: the subject is the hash tag, so one subject = one slot");
    let hits = KeyId::new("demo", "hits")?;
    let log = KeyId::new("demo", "log")?;
    for subject in [
        "user:42",
        "user:7",
        "ip:10.0.0.1",
        "api-key:9c1e",
        "nightly-export",
        "weird{sub}ject%",
    ] {
        let keys = cluster.keys().key_set(subject, [&hits, &log])?;
        let owner = topology
            .owner(keys.slot())
            .map_or_else(|| "?".to_owned(), |s| s.master.to_string());
        for key in keys.keys() {
            let parsed = ParsedKey::parse(key)?;
            println!(
                "{:<44} slot {:>5} on {owner}  (subject {:?})",
                String::from_utf8_lossy(key),
                keys.slot(),
                String::from_utf8_lossy(&parsed.subject)
            );
        }
    }

    println!("\n== one Lua script: both keys of a subject, atomically, on its master");
    let script = Script::new(
        "tour_hit",
        "local n = redis.call('INCR', KEYS[1]) \
         redis.call('PEXPIRE', KEYS[1], ARGV[1]) \
         redis.call('RPUSH', KEYS[2], ARGV[2]) \
         redis.call('PEXPIRE', KEYS[2], ARGV[1]) \
         return {n, redis.call('PTTL', KEYS[1])}",
    );
    let keys = cluster.keys().key_set("user:42", [&hits, &log])?;
    for visit in ["/home", "/cart", "/checkout"] {
        let (n, pttl): (i64, i64) = cluster.eval(&script, &keys, (60_000, visit)).await?;
        println!("user:42 hit #{n} ({visit}), key expires in {pttl} ms");
    }

    println!("\n== one MULTI/EXEC: unconditional writes, same slot");
    let counter = KeyId::new("demo", "seconds")?;
    let keys = cluster.keys().key_set("session:9", [&counter])?;
    let add = Transaction::new()
        .command(TxCommand::new("INCRBY").key(0).arg(30))
        .command(TxCommand::new("PEXPIRE").key(0).arg(900_000))
        .command(TxCommand::new("PTTL").key(0));
    let (total, _, pttl): (i64, i64, i64) = cluster.transaction(&keys, &add).await?;
    println!("session:9 billed {total} s so far, key expires in {pttl} ms");

    println!("\n== rate limiters: 5 per second for one subject, every algorithm");
    for algorithm in Algorithm::ALL {
        let limiter = RateLimiter::builder(&cluster, "tour", Quota::per_second(five))
            .algorithm(algorithm)
            .failure_policy(FailurePolicy::FailOpen)
            .build()?;
        limiter.reset("user:42").await?; // so every run of the tour starts fresh
        let mut line = Vec::new();
        for _ in 0..7 {
            let d = limiter.check("user:42").await?;
            line.push(if d.allowed {
                "ok".to_owned()
            } else {
                format!(
                    "429 (retry in {} ms)",
                    d.retry_after.unwrap_or_default().as_millis()
                )
            });
        }
        println!("{:<24} {}", algorithm.to_string(), line.join(", "));
    }
    let per_second = RateLimiter::builder(&cluster, "tour-1s", Quota::per_second(five)).build()?;
    let per_hour = RateLimiter::builder(
        &cluster,
        "tour-1h",
        Quota::per_hour(NonZeroU32::MIN.saturating_add(2)),
    )
    .build()?;
    for limiter in [&per_second, &per_hour] {
        limiter.reset("api-key:9c1e").await?;
    }
    let both = MultiLimiter::new([per_second, per_hour])?;
    for i in 1..=4 {
        let d = both.check("api-key:9c1e").await?;
        println!(
            "5/s and 3/h together, request {i}: allowed {} (binding limit {})",
            d.allowed,
            d.binding().limit
        );
    }
    let stats = cluster.stats();
    if let Some(s) = stats.get("gcra", "tour") {
        println!(
            "stats for gcra/tour: {} allowed, {} denied, {} bypassed",
            s.allowed, s.denied, s.bypassed
        );
    }

    println!("\n== at scale: a block, an override, the deny cache, shadow mode");
    for subject in ["ip:203.0.113.7", "customer:acme", "user:7"] {
        api.reset(subject).await?;
        api.unblock(subject).await?;
    }
    api.block("ip:203.0.113.7", Duration::from_secs(60)).await?;
    let d = api.check("ip:203.0.113.7").await?;
    println!(
        "blocked ip: allowed {}, blocked {}, retry in {} s",
        d.allowed,
        d.blocked,
        d.retry_after.unwrap_or_default().as_secs()
    );
    let premium = Quota::per_hour(NonZeroU32::MIN.saturating_add(49));
    api.set_override("customer:acme", premium, Duration::from_secs(600))
        .await?;
    let d = api.check("customer:acme").await?;
    println!(
        "customer:acme has its own quota: limit {} (default 5), overridden {}",
        d.limit, d.overridden
    );
    api.penalize("user:7", five).await?;
    // The cache starts once it follows other processes' changes; then
    // repeated denials are answered without Redis.
    let started = std::time::Instant::now();
    let (mut checks, mut cached) = (0, 0);
    while cached < 1000 && started.elapsed() < Duration::from_secs(5) {
        let d = api.check("user:7").await?;
        checks += 1;
        if d.cached {
            cached += 1;
        } else {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    println!(
        "user:7 penalized to empty: {checks} checks denied, {cached} of them by the local deny cache"
    );
    let trial = RateLimiter::builder(&cluster, "tour-trial", Quota::per_hour(five))
        .shadow(true)
        .build()?;
    trial.reset("user:7").await?;
    let mut would = 0;
    for _ in 0..8 {
        let d = trial.check("user:7").await?;
        would += u32::from(d.would_deny);
    }
    println!("shadow limit 5/h: 8 requests, all let through, {would} would have been denied");
    for subject in ["ip:203.0.113.7", "customer:acme"] {
        api.unblock(subject).await?;
        api.clear_override(subject).await?;
    }

    println!("\n== a lock with a fencing token, and a TTL-preserving counter");
    let health = cluster.health().await?;
    for m in &health.masters {
        if let Ok(s) = &m.status {
            println!(
                "master {} aof {} connected replicas {}",
                m.master,
                if s.aof_enabled { "on" } else { "OFF" },
                s.connected_replicas
            );
        }
    }
    match health.lock_problems().as_slice() {
        [] => println!("fit for locks: AOF on and a replica everywhere"),
        problems => println!("locks are at risk: {}", problems.join("; ")),
    }
    let lock = shardlimit::Lock::builder(&cluster, "job")
        .ttl(Duration::from_secs(60))
        .build()?;
    if let Some(guard) = lock.try_acquire("nightly-export").await? {
        let rival = lock.try_acquire("nightly-export").await?;
        println!(
            "nightly-export: acquired with fencing token {}, a second try gets {:?}",
            guard.fencing_token(),
            rival.map(|g| g.fencing_token())
        );
        println!("released: {}", guard.release().await?);
    }
    let billable = shardlimit::Counter::builder(&cluster, "billable")
        .idle_ttl(Duration::from_secs(900))
        .build()?;
    billable.add("session:9", 30).await?;
    let before = billable.get_with_ttl("session:9").await?;
    let drained = billable.drain("session:9").await?;
    let after = billable.get_with_ttl("session:9").await?;
    println!("session:9 counter {before:?} -> drained {drained:?} -> {after:?} (TTL kept)");

    println!("\nevery key above lives under the namespace 'tour' and expires on its own.");
    Ok(())
}
