//! `examples/axum_api.rs` and `examples/grpc_service.rs` run as processes
//! with no Redis to reach (issue 42): they start, and answer as their
//! limits' failure policies say — the fail-open per-IP (per-peer) limit
//! lets requests by, the fail-closed per-key one answers 503
//! (`UNAVAILABLE`). They used to exit at start-up with `Error::Connect`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::Stdio;
use std::time::Duration;

use common::http::{http_get, http_get_with};
use tokio::io::{AsyncBufReadExt, BufReader};

/// Seeds where nothing listens (port 1): every connection is refused.
const NO_REDIS: &str = "redis://127.0.0.1:1";

fn status(reply: &str) -> &str {
    &reply[9..12]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_axum_example_starts_without_redis_and_fails_open_per_ip() {
    let exe = common::cargo_built(
        &["--all-features", "--example", "axum_api"],
        "examples/axum_api",
    );
    let mut child = tokio::process::Command::new(exe)
        .env("SHARDLIMIT_NODES", NO_REDIS)
        .env("DEMO_ADDR", "127.0.0.1:0")
        .env_remove("DEMO_TRUSTED_PROXIES")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // Its log goes to stdout too: read up to the address it listens on.
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    let addr = loop {
        let line = tokio::time::timeout(Duration::from_secs(30), stdout.next_line())
            .await
            .expect("the example printed no address in 30 s")
            .unwrap();
        let Some(line) = line else {
            let out = child.wait_with_output().await.unwrap();
            panic!(
                "the example exited ({}) before listening:\n{}\n{}",
                out.status,
                seen.join("\n"),
                String::from_utf8_lossy(&out.stderr)
            );
        };
        if let Some(addr) = line.strip_prefix("listening on http://") {
            break addr.parse().unwrap();
        }
        seen.push(line);
    };

    // Fail-open per IP: served, and counted as bypassed.
    let home = http_get(addr, "/").await;
    assert_eq!(status(&home), "200", "{home}");
    assert!(home.ends_with("shardlimit axum demo\n"), "{home}");
    // Fail-closed per key: 503, not a 200 nobody counted.
    let api = http_get_with(addr, "/api/items", &[("x-api-key", "demo-key")]).await;
    assert_eq!(status(&api), "503", "{api}");
    let stats = http_get(addr, "/stats").await;
    let ip_row = stats
        .lines()
        .find(|l| l.starts_with("gcra ip "))
        .unwrap_or_else(|| panic!("{stats}"));
    let bypassed: u64 = ip_row.split(' ').nth(4).unwrap().parse().unwrap();
    assert!(bypassed >= 2, "{stats}");
    child.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grpc_example_starts_without_redis_and_answers_unavailable_per_key() {
    let exe = common::cargo_built(
        &["--all-features", "--example", "grpc_service"],
        "examples/grpc_service",
    );
    let run = tokio::process::Command::new(exe)
        .arg("--demo")
        .env("SHARDLIMIT_NODES", NO_REDIS)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("the demo did not finish in 60 s")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // The per-peer layer (fail-open) lets each call by; the per-key one
    // (fail-closed) answers UNAVAILABLE, seven times.
    let unavailable = stdout
        .lines()
        .filter(|l| l.starts_with("call ") && l.contains("Unavailable"))
        .count();
    assert_eq!(unavailable, 7, "{stdout}");
}
