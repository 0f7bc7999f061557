//! `examples/service.rs` run as a process against the six-node cluster for
//! a few seconds, with real HTTP requests and a SIGTERM (issue 28): the
//! per-key burst, the missing key, the export cap, the singleton job's
//! lock, the billing drain and the graceful shutdown that releases the
//! lock.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use shardlimit::keys::KeyId;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

/// One HTTP/1.1 request on its own connection: the status and the body.
async fn send(addr: SocketAddr, method: &str, path: &str, api_key: Option<&str>) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let key = api_key.map_or(String::new(), |k| format!("x-api-key: {k}\r\n"));
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: test\r\n{key}Content-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).await.unwrap();
    let status = reply[9..12].parse().unwrap();
    let body = reply
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_service_limits_caps_bills_and_shuts_down_cleanly() {
    let exe = common::cargo_built(
        &["--all-features", "--example", "service"],
        "examples/service",
    );
    let namespace = common::unique_namespace("service");
    let mut child = tokio::process::Command::new(exe)
        .args(["--listen", "127.0.0.1:0", "--drain-secs", "1"])
        .env("SHARDLIMIT_NODES", common::node_urls().join(","))
        .env("SHARDLIMIT_NAMESPACE", &namespace)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = stdout.next_line().await.unwrap().unwrap();
    let addr: SocketAddr = first
        .strip_prefix("listening on ")
        .unwrap()
        .parse()
        .unwrap();
    let mut lines = vec![first];

    // Per key: a burst of 20 at 10/s. 25 quick requests: the burst, at most
    // a few refilled while they run, then 429s.
    let mut admitted = 0;
    let mut refused = 0;
    for _ in 0..25 {
        match send(addr, "GET", "/api/items", Some("k-1")).await {
            (200, body) => {
                assert!(body.contains("apple"), "{body}");
                admitted += 1;
            }
            (429, _) => refused += 1,
            other => panic!("{other:?}"),
        }
    }
    assert!(
        (20..25).contains(&admitted) && refused > 0,
        "{admitted} admitted"
    );
    assert_eq!(send(addr, "GET", "/api/items", None).await.0, 400);

    // Three exports per tenant at once: of five, two are refused.
    let exports: Vec<_> = (0..5)
        .map(|_| tokio::spawn(send(addr, "POST", "/exports/acme?ms=1500", None)))
        .collect();
    let mut statuses = Vec::new();
    for export in exports {
        statuses.push(export.await.unwrap().0);
    }
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 200, 200, 429, 429]);

    // The collector drains each second; wait for the bill, then SIGTERM.
    let mut billed = 0;
    while billed < admitted {
        let line = tokio::time::timeout(Duration::from_secs(10), stdout.next_line())
            .await
            .expect("no bill within 10 s")
            .unwrap()
            .unwrap();
        if let Some(units) = line.strip_prefix("billed k-1 ") {
            billed += units.parse::<i64>().unwrap();
        }
        lines.push(line);
    }
    assert_eq!(billed, admitted, "{lines:#?}");
    let pid = child.id().unwrap().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let exit = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("no exit within 10 s of SIGTERM")
        .unwrap();
    while let Some(line) = stdout.next_line().await.unwrap() {
        lines.push(line);
    }
    assert!(exit.success(), "{exit:?}: {lines:#?}");
    let has = |text: &str| lines.iter().any(|l| l.starts_with(text));
    assert!(has("job: running with fencing token "), "{lines:#?}");
    assert!(has("job: lock released"), "{lines:#?}");
    assert_eq!(lines.last().map(String::as_str), Some("shutdown complete"));

    // Released at shutdown, not left to its TTL.
    let cluster = common::builder("service-check")
        .namespace(&namespace)
        .build()
        .await
        .unwrap();
    let lock_key = cluster
        .keys()
        .key("nightly-export", &KeyId::new("lock", "job").unwrap())
        .unwrap();
    assert_eq!(
        common::pttl(&lock_key).await,
        -2,
        "the job's lock is still held"
    );
    common::assert_every_key_has_ttl(&namespace).await;
}
