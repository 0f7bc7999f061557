//! `shardlimit web`: local by default, read-only by default, credentials
//! from the environment required when writes are on.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::common;

/// `shardlimit web --listen <listen> <args>` on the test cluster, with no
/// credentials in its environment but those of `env`.
fn web(ns: &str, listen: &str, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(crate::common::cli_exe());
    command
        .args(["--namespace", ns, "web", "--listen", listen])
        .args(args)
        .env("SHARDLIMIT_NODES", crate::common::node_urls().join(","))
        .env_remove("SHARDLIMIT_WEB_TOKEN")
        .env_remove("SHARDLIMIT_WEB_USER")
        .env_remove("SHARDLIMIT_WEB_PASSWORD")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// Runs `command`, which must refuse to start (exit code 2): its stderr.
async fn refused(mut command: Command) -> String {
    let output = command.output().await.unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    stderr
}

/// Starts `shardlimit web` on a free port with `args` and `env`; returns
/// the child and the address it printed.
async fn start(ns: &str, args: &[&str], env: &[(&str, &str)]) -> (Child, String) {
    let mut command = web(ns, "127.0.0.1:0", args, env);
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
    let help = std::process::Command::new(crate::common::cli_exe())
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
    let stderr = refused(web(&ns, "127.0.0.1:0", &["--allow-writes"], &[])).await;
    assert!(
        stderr.contains("--allow-writes needs credentials"),
        "{stderr}"
    );

    // A bearer token (earlier versions) is refused, saying what to set.
    let token = [("SHARDLIMIT_WEB_TOKEN", "s3cret-token")];
    let stderr = refused(web(&ns, "127.0.0.1:0", &[], &token)).await;
    assert!(
        stderr.contains("SHARDLIMIT_WEB_TOKEN is no longer read")
            && stderr.contains("SHARDLIMIT_WEB_USER"),
        "{stderr}"
    );

    let basic = [
        ("SHARDLIMIT_WEB_USER", "ops"),
        ("SHARDLIMIT_WEB_PASSWORD", "s3cret"),
    ];
    let (_basic, addr) = start(&ns, &["--allow-writes"], &basic).await;
    assert_eq!(get(&addr, "/limiters", None).await.0, 401);
    // The 401 carries the challenge and the security headers too.
    let unauthorised = super::exchange(
        &addr,
        &format!("GET /limiters HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"),
    )
    .await
    .to_ascii_lowercase();
    for header in [
        "www-authenticate: basic realm=\"shardlimit\"",
        "content-security-policy: default-src 'none'",
        "x-frame-options: deny",
        "cache-control: no-store",
    ] {
        assert!(unauthorised.contains(header), "{header}: {unauthorised}");
    }
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
async fn beyond_loopback_needs_credentials_or_an_explicit_flag() {
    let ns = common::unique_namespace("webcli");
    let stderr = refused(web(&ns, "0.0.0.0:0", &[], &[])).await;
    assert!(
        stderr.contains("reachable from other machines") && stderr.contains("--allow-anonymous"),
        "{stderr}"
    );
    // With the flag it serves, anonymously, still to loopback names only.
    let mut command = web(&ns, "0.0.0.0:0", &["--allow-anonymous"], &[]);
    let mut child = command.spawn().unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut port = None;
    while port.is_none() {
        let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .expect("shardlimit web did not start within 20 s")
            .unwrap()
            .expect("shardlimit web exited");
        port = line
            .split("http://0.0.0.0:")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .map(str::to_owned);
    }
    let addr = format!("127.0.0.1:{}", port.unwrap());
    assert_eq!(get(&addr, "/api/overview", None).await.0, 200);
}

#[tokio::test]
async fn answers_loopback_names_and_allowed_hosts_only() {
    let ns = common::unique_namespace("webcli");
    let help = std::process::Command::new(crate::common::cli_exe())
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
