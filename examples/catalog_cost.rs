//! What the catalog of limiter specs costs Redis: builds `limiters` rate
//! limiters that publish every `every_ms` for `seconds`, then reads the
//! catalog master's own `INFO commandstats` (reset at the start): the
//! publish script's calls and microseconds per call, and what one read of
//! the whole catalog (`Scanner::catalog`) costs there. Run it on a quiet
//! cluster: every `EVALSHA` on that master is counted.
//!
//! ```text
//! SHARDLIMIT_NODES=redis://127.0.0.1:7000 cargo run --release --example catalog_cost -- 200 100 20
//! ```

use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use shardlimit::admin::Scanner;
use shardlimit::keys::slot;
use shardlimit::{Cluster, Quota, RateLimiter};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let arg = |i: usize, default: u64| {
        std::env::args()
            .nth(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or(default)
    };
    let (limiters, every_ms, seconds) = (arg(1, 200), arg(2, 100), arg(3, 20));
    let namespace = format!("catalog-cost-{}", std::process::id());
    let cluster = Cluster::builder_from_env()
        .namespace(&namespace)
        .build()
        .await?;
    let owner = cluster
        .topology()
        .await?
        .owner(slot(b"shardlimit.catalog"))
        .ok_or("no master serves the catalog's slot")?
        .master
        .to_string();
    let client = redis::Client::open(format!("redis://{owner}"))?;
    let mut node = client.get_multiplexed_async_connection().await?;
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut node)
        .await?;

    let quota = Quota::per_minute(NonZeroU32::new(60).ok_or("zero")?);
    let built: Vec<RateLimiter> = (0..limiters)
        .map(|i| {
            RateLimiter::builder(&cluster, format!("l{i}"), quota)
                .catalog_refresh(Duration::from_millis(every_ms))
                .build()
        })
        .collect::<Result<_, _>>()?;
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let published: u64 = built.iter().map(|l| l.catalog_publishing().published).sum();
    let failed: u64 = built.iter().map(|l| l.catalog_publishing().failed).sum();
    let publish = evalsha(&mut node).await?;
    println!(
        "{limiters} limiters publishing every {every_ms} ms for {seconds} s: {published} published \
         ({failed} failed); on {owner}: EVALSHA {} calls, {:.2} us per call",
        publish.0, publish.1
    );

    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut node)
        .await?;
    drop(built);
    let started = Instant::now();
    let catalog = Scanner::new(&cluster).catalog().await?;
    let took = started.elapsed();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut node)
        .await?;
    let usec: f64 = info
        .lines()
        .filter_map(|l| l.split_once("usec="))
        .filter_map(|(_, rest)| rest.split(',').next()?.parse::<f64>().ok())
        .sum();
    println!(
        "one catalog read ({} specs): {took:?} at the client, {usec:.0} us on the master \
         (every command since the reset)",
        catalog.published().count()
    );
    Ok(())
}

/// `cmdstat_evalsha`: (calls, µs per call).
async fn evalsha(
    node: &mut redis::aio::MultiplexedConnection,
) -> Result<(u64, f64), Box<dyn std::error::Error>> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(node)
        .await?;
    let line = info
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:"))
        .unwrap_or_default();
    let field = |name: &str| {
        line.split(',')
            .find_map(|kv| kv.strip_prefix(name))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    Ok((field("calls=") as u64, field("usec_per_call=")))
}
