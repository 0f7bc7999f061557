//! The seed's boundary burst: 60 requests at the end of one minute and 60 at
//! the start of the next, against "60 per minute".
//!
//! A fixed window admits all 120 within two seconds; a sliding log admits
//! 60; GCRA admits its burst plus what refilled; the sliding window counter
//! stays close to the limit.
//!
//! ```text
//! cargo run --example api_rate_limit              # the seed's minute (waits for the next minute boundary)
//! cargo run --example api_rate_limit -- 2         # the same with a 2-second window, quicker
//! ```

use std::num::NonZeroU32;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::future::join_all;
use shardlimit::{Algorithm, Cluster, Quota, RateLimiter};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let period_secs: u64 = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(60);
    let period = Duration::from_secs(period_secs);
    let limit = NonZeroU32::new(60).ok_or("limit")?;
    let quota = Quota::with_period(limit, period);

    let cluster = Cluster::builder_from_env()
        .namespace("example-api")
        .build()
        .await?;
    let run = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis();
    let limiters = Algorithm::ALL
        .into_iter()
        .map(|algorithm| {
            RateLimiter::builder(&cluster, format!("run{run}"), quota)
                .algorithm(algorithm)
                .build()
        })
        .collect::<Result<Vec<_>, _>>()?;

    // Wait until 1 s before a window boundary (windows are clock-aligned).
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?;
    let into_window = Duration::from_micros(
        u64::try_from(now.as_micros() % period.as_micros()).map_err(|_| "clock")?,
    );
    let mut wait = period - into_window;
    if wait < Duration::from_millis(1100) {
        wait += period;
    }
    wait -= Duration::from_secs(1);
    println!(
        "60 per {period_secs} s. Waiting {:.1} s for the end of the window...",
        wait.as_secs_f64()
    );
    tokio::time::sleep(wait).await;

    let burst = |label: &'static str| {
        let limiters = &limiters;
        async move {
            let mut counts = Vec::new();
            for limiter in limiters {
                let checks = (0..60).map(|_| limiter.check("ip:203.0.113.7"));
                let admitted = join_all(checks)
                    .await
                    .into_iter()
                    .filter(|d| d.as_ref().is_ok_and(|d| d.allowed))
                    .count();
                counts.push(admitted);
            }
            println!("{label}: {counts:?}");
            counts
        }
    };
    println!("[fixed window, sliding log, sliding window counter, GCRA] admitted:");
    let first = burst("60 requests 1 s before the boundary").await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let second = burst("60 requests just after the boundary").await;

    println!("\nwithin about two seconds:");
    for (i, algorithm) in Algorithm::ALL.into_iter().enumerate() {
        println!(
            "  {:<24} admitted {:>3} of 120",
            algorithm.to_string(),
            first[i] + second[i]
        );
    }
    println!("the fixed window let 2x the limit through; the sliding log never does.");
    Ok(())
}
