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
use shardlimit::{Cluster, Script, Transaction, TxCommand};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cluster = Cluster::builder_from_env()
        .namespace("tour")
        .command_timeout(Duration::from_millis(500))
        .build()
        .await?;
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

    println!("\nevery key above lives under the namespace 'tour' and expires on its own.");
    Ok(())
}
