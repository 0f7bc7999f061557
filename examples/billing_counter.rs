//! Seed 003's billing counter: a session adds billable seconds, a collector
//! drains them, the session stops — and its key still expires on its own.
//!
//! ```text
//! cluster-compose/up.sh && cargo run --example billing_counter
//! cargo run --example billing_counter -- 5     # idle TTL in seconds (default 3)
//! ```
//!
//! With `GETSET` as the drain (the seed's bug), the last step would never
//! finish: the drained key would have lost its TTL. Honours
//! `SHARDLIMIT_NODES`.

use std::time::{Duration, Instant};

use shardlimit::{Cluster, Counter};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let idle_secs: u64 = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(3);
    let cluster = Cluster::builder_from_env()
        .namespace("billing-demo")
        .command_timeout(Duration::from_millis(500))
        .build()
        .await?;
    let billable = Counter::builder(&cluster, "billable-seconds")
        .idle_ttl(Duration::from_secs(idle_secs))
        .build()?;
    let session = format!("session:{}", std::process::id());
    let show = |what: &str, state: Option<(i64, Duration)>| match state {
        Some((value, ttl)) => {
            println!("{what:<28} value {value:>3}, TTL {:>5} ms", ttl.as_millis())
        }
        None => println!("{what:<28} no key"),
    };

    println!("== the session adds billable seconds (INCRBY + PEXPIRE, one MULTI/EXEC)");
    for seconds in [30, 30, 15] {
        let total = billable.add(&session, seconds).await?;
        show(
            &format!("add {seconds} -> {total}"),
            billable.get_with_ttl(&session).await?,
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    println!("\n== the collector drains (GET + SET 0 KEEPTTL, one script)");
    let before = billable.get_with_ttl(&session).await?;
    show("before drain", before);
    let drained = billable.drain(&session).await?;
    println!("{:<28} {drained:?}", "drained");
    let after = billable.get_with_ttl(&session).await?;
    show("after drain", after);
    if let (Some((_, b)), Some((_, a))) = (before, after) {
        match b.checked_sub(a) {
            Some(fell) => println!(
                "{:<28} fell by {} ms: kept, not reset, not removed",
                "TTL across the drain",
                fell.as_millis()
            ),
            None => println!("TTL across the drain went up: that would be a bug"),
        }
    }

    println!("\n== the session stops: no more adds; the key must expire on its own");
    let stopped = Instant::now();
    loop {
        let state = billable.get_with_ttl(&session).await?;
        show(
            &format!("t+{:.1} s", stopped.elapsed().as_secs_f64()),
            state,
        );
        if state.is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!(
        "\nkey gone {:.1} s after the session stopped; draining the missing key: {:?} (creates nothing)",
        stopped.elapsed().as_secs_f64(),
        billable.drain(&session).await?
    );
    Ok(())
}
