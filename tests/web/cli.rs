//! `shardlimit web`: local by default, read-only by default, credentials
//! from the environment required when writes are on.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::common;

/// Starts `shardlimit web` on a free port with `args` and `env`; returns
/// the child and the address it printed.
async fn start(ns: &str, args: &[&str], env: &[(&str, &str)]) -> (Child, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_shardlimit"));
    command
        .args(["--namespace", ns, "web", "--listen", "127.0.0.1:0"])
        .args(args)
        .env("SHARDLIMIT_NODES", crate::common::node_urls().join(","))
        .env_remove("SHARDLIMIT_WEB_TOKEN")
        .env_remove("SHARDLIMIT_WEB_USER")
        .env_remove("SHARDLIMIT_WEB_PASSWORD")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command.spawn().unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
        .await
        .expect("shardlimit web did not start within 20 s")
        .unwrap()
        .unwrap();
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_owned();
    (child, addr)
}

/// GET `path` with an optional `Authorization` header: (status, body).
async fn get(addr: &str, path: &str, auth: Option<&str>) -> (u16, String) {
    get_as(addr, addr, path, auth).await
}

/// [`get`] with `Host: host`.
async fn get_as(addr: &str, host: &str, path: &str, auth: Option<&str>) -> (u16, String) {
    let auth = auth.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{auth}Connection: close\r\n\r\n");
    super::raw(addr, &request).await
}

#[tokio::test]
async fn read_only_on_loopback_by_default() {
    let ns = common::unique_namespace("webcli");
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_shardlimit"))
        .args(["web", "--help"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&help.stdout).contains("[default: 127.0.0.1:8080]"));
    let (_child, addr) = start(&ns, &[], &[]).await;
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");
    let (status, body) = get(&addr, "/api/overview", None).await;
    assert_eq!(status, 200, "{body}");
    let overview: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (overview["namespace"].as_str(), overview["writes"].as_bool()),
        (Some(ns.as_str()), Some(false))
    );
    assert_eq!(get(&addr, "/reset?subject=x", None).await.0, 403);
}

#[tokio::test]
async fn writes_need_credentials_and_then_every_page_does() {
    let ns = common::unique_namespace("webcli");
    let refused = Command::new(env!("CARGO_BIN_EXE_shardlimit"))
        .args([
            "--namespace",
            &ns,
            "web",
            "--listen",
            "127.0.0.1:0",
            "--allow-writes",
        ])
        .env_remove("SHARDLIMIT_WEB_TOKEN")
        .env_remove("SHARDLIMIT_WEB_USER")
        .env_remove("SHARDLIMIT_WEB_PASSWORD")
        .output()
        .await
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--allow-writes needs credentials"));

    let (_bearer, addr) = start(
        &ns,
        &["--allow-writes"],
        &[("SHARDLIMIT_WEB_TOKEN", "s3cret-token")],
    )
    .await;
    assert_eq!(get(&addr, "/", None).await.0, 401);
    assert_eq!(get(&addr, "/", Some("Bearer wrong")).await.0, 401);
    let (status, body) = get(&addr, "/api/overview", Some("Bearer s3cret-token")).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"writes\":true"), "{body}");

    let basic = [
        ("SHARDLIMIT_WEB_USER", "ops"),
        ("SHARDLIMIT_WEB_PASSWORD", "s3cret"),
    ];
    let (_basic, addr) = start(&ns, &["--allow-writes"], &basic).await;
    assert_eq!(get(&addr, "/limiters", None).await.0, 401);
    assert_eq!(get(&addr, "/throttled", None).await.0, 401);
    // base64("ops:s3cret")
    assert_eq!(
        get(&addr, "/limiters", Some("Basic b3BzOnMzY3JldA=="))
            .await
            .0,
        200
    );
}

#[tokio::test]
async fn answers_loopback_names_and_allowed_hosts_only() {
    let ns = common::unique_namespace("webcli");
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_shardlimit"))
        .args(["web", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("--allow-host <NAME>") && help.contains("DNS rebinding"),
        "{help}"
    );
    let (_child, addr) = start(&ns, &["--allow-host", "limits.internal"], &[]).await;
    let port = addr.rsplit(':').next().unwrap();
    for host in [
        addr.clone(),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
        format!("limits.internal:{port}"),
    ] {
        let (status, body) = get_as(&addr, &host, "/api/overview", None).await;
        assert_eq!(status, 200, "{host}: {body}");
    }
    for host in [format!("evil.example:{port}"), "other.internal".to_owned()] {
        let (status, body) = get_as(&addr, &host, "/api/overview", None).await;
        assert_eq!(status, 421, "{host}: {body}");
        assert!(body.contains("--allow-host"), "{body}");
    }
}
