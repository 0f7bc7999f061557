//! A password never shows: every path that can print a node — the
//! builder's `Debug`, a bad URL, an unreachable cluster, `WRONGPASS`,
//! `NOAUTH`, the tracing events of a failing reconnect and topology refresh
//! (captured at TRACE), the fail-open bypass warning, the tower layer's 503
//! warning, and the CLI's `--help`, errors and `--json` output — is driven
//! with a unique password, and the text searched for it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use crate::fake_node;

use std::fmt::Write as _;
use std::num::NonZeroU32;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fake_node::FakeNode;
use shardlimit::tower::{HeaderKey, RateLimitLayer};
use shardlimit::{Cluster, Error, Quota, RateLimiter};
use tower::{Layer, ServiceExt};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::{Context, SubscriberExt};

fn secret() -> String {
    format!("s3cret-{:016x}", rand::random::<u64>())
}

/// Every form of an error a program might print.
fn all_forms(err: &Error) -> String {
    let mut text = format!("{err}\n{err:?}\n");
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        let _ = writeln!(text, "{cause}\n{cause:?}");
        source = cause.source();
    }
    text
}

fn assert_hidden(what: &str, text: &str, password: &str) {
    assert!(
        !text.contains(password),
        "{what} shows the password: {text}"
    );
}

/// Every event, with its fields, as text.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<String>>);

struct Text<'a>(&'a mut String);

impl Visit for Text<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, " {}={value:?}", field.name());
    }
}

impl<S: Subscriber> tracing_subscriber::Layer<S> for Capture {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let mut text = self.0.lock().unwrap();
        let _ = write!(
            text,
            "\n{} {}:",
            event.metadata().level(),
            event.metadata().target()
        );
        event.record(&mut Text(&mut text));
    }
}

#[tokio::test]
async fn builder_debug_and_config_errors_hide_the_password() {
    crate::cli_built();
    let password = secret();
    let builder = Cluster::builder([format!("redis://app:{password}@127.0.0.1:1")])
        .username("app")
        .password(&password)
        .tls_client_cert_pem(b"cert".to_vec(), password.as_bytes().to_vec());
    let debug = format!("{builder:?}");
    assert_hidden("builder Debug", &debug, &password);
    assert!(debug.contains("redis://app:***@127.0.0.1:1"), "{debug}");

    for bad in [
        format!("redis://app:{password}@127.0.0.1:notaport"),
        format!("app:{password}@127.0.0.1:1"),
        format!("unix://app:{password}@/tmp/x"),
    ] {
        let err = Cluster::builder([bad.clone()]).build().await.unwrap_err();
        assert!(matches!(err, Error::Config { .. }), "{bad}: {err}");
        assert_hidden("bad URL error", &all_forms(&err), &password);
    }

    // Unencoded delimiters (and an `@`) in the password: the URL does not
    // parse, or parses with the password's head as the port (`1234`).
    for (bad, parts) in delimited_passwords() {
        let debug = format!("{:?}", Cluster::builder([bad.clone()]));
        for part in &parts {
            assert_hidden("builder Debug", &debug, part);
        }
        assert!(debug.contains("redis://app:***@127.0.0.1:1"), "{debug}");
        // A bare `@` parses (the userinfo ends at the last one), and
        // building would connect: the CLI test does that in its own
        // process. (Here it would log "node marked down" while the logs
        // test captures events, and tracing's per-callsite interest cache
        // then loses that test's event under load.)
        if refused(&bad) {
            let err = Cluster::builder([bad.clone()]).build().await.unwrap_err();
            assert!(matches!(err, Error::Config { .. }), "{bad}: {err}");
            for part in &parts {
                assert_hidden("bad URL error", &all_forms(&err), part);
            }
        }
    }
}

/// Whether a URL of [`delimited_passwords`] must be refused before anything
/// is sent: a `/`, `?` or `#` before its last `@` makes where the host
/// starts ambiguous.
fn refused(url: &str) -> bool {
    let (userinfo, _host) = url
        .strip_prefix("redis://")
        .unwrap()
        .rsplit_once('@')
        .unwrap();
    userinfo.contains(['/', '?', '#'])
}

/// `redis://app:<password>@127.0.0.1:1` with a password that holds an
/// unencoded `/`, `?`, `#` or `@`, with the password's parts (each of
/// which must stay hidden).
fn delimited_passwords() -> Vec<(String, Vec<String>)> {
    let mut urls = Vec::new();
    for delimiter in ["/", "?", "#", "@", "/?#@"] {
        let (head, tail) = (secret(), secret());
        urls.push((
            format!("redis://app:{head}{delimiter}{tail}@127.0.0.1:1"),
            vec![head, tail],
        ));
    }
    let tail = secret();
    urls.push((
        format!("redis://app:1234#{tail}@127.0.0.1:1"),
        vec![format!("1234#{tail}"), tail],
    ));
    urls
}

#[tokio::test]
async fn unreachable_wrongpass_and_noauth_errors_hide_the_password() {
    crate::cli_built();
    let password = secret();
    // Unreachable: nothing listens on port 1.
    let err = Cluster::builder([format!("redis://app:{password}@127.0.0.1:1")])
        .build()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Connect { .. }));
    assert!(err.is_transient());
    let text = all_forms(&err);
    assert_hidden("unreachable", &text, &password);
    assert!(text.contains("redis://app:***@127.0.0.1:1"), "{text}");

    // WRONGPASS: not transient, and named.
    let node = FakeNode::start_with_password(Some("the-right-one")).await;
    let err = Cluster::builder([node.url()])
        .username("app")
        .password(&password)
        .build()
        .await
        .unwrap_err();
    let text = all_forms(&err);
    assert_hidden("WRONGPASS", &text, &password);
    // redis-rs turns WRONGPASS into its AuthenticationFailed kind.
    assert!(text.contains("AuthenticationFailed"), "{text}");
    assert!(!err.is_transient(), "{text}");

    // NOAUTH: no password given to a node that wants one.
    let err = Cluster::builder([node.url()])
        .username("app")
        .build()
        .await
        .unwrap_err();
    let text = all_forms(&err);
    assert!(
        text.contains("NOAUTH") || text.contains("Authentication required"),
        "{text}"
    );
    assert_hidden("NOAUTH", &text, node.password().unwrap());
    assert!(!err.is_transient(), "{text}");
}

#[tokio::test]
async fn logs_of_a_failing_reconnect_bypasses_and_503s_hide_the_password() {
    crate::cli_built();
    let password = secret();
    let capture = Capture::default();
    let _guard = tracing::subscriber::set_default(
        tracing_subscriber::registry()
            .with(LevelFilter::TRACE)
            .with(capture.clone()),
    );
    // The fake node takes any AUTH, so the password is really sent.
    let node = FakeNode::start().await;
    let cluster = Cluster::builder([format!("redis://app:{password}@{}", node.addr())])
        .command_timeout(Duration::from_millis(100))
        .refresh_interval(Duration::from_millis(20))
        .reconnect_backoff(Duration::from_millis(20), Duration::from_millis(40))
        .build()
        .await
        .unwrap();
    let quota = Quota::per_second(NonZeroU32::new(5).unwrap());
    let (open, closed) = common::open_and_closed(&cluster, quota);
    let service = RateLimitLayer::new(closed, HeaderKey::from_static("x-key")).layer(
        tower::service_fn(|_req: http::Request<String>| async {
            Ok::<_, std::convert::Infallible>(http::Response::new(String::from("ok")))
        }),
    );

    node.shut_down();
    // Calls while the node is gone: bypasses, 503s, then reconnect probes
    // and topology refreshes failing in the background.
    for _ in 0..20 {
        let decision = open.check("s").await.unwrap();
        assert!(decision.bypassed.is_some());
        let request = http::Request::builder()
            .header("x-key", "k")
            .body(String::new())
            .unwrap();
        let response = service.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status(), http::StatusCode::SERVICE_UNAVAILABLE);
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    let logs = capture.0.lock().unwrap().clone();
    for expected in [
        "bypass",
        "answering 503",
        "node marked down",
        "reconnect to a down node failed",
        "topology refresh failed",
    ] {
        assert!(logs.contains(expected), "no {expected:?} event: {logs}");
    }
    assert_hidden("tracing events", &logs, &password);
    assert!(logs.contains("redis://app:***@"), "{logs}");
}

fn cli(envs: &[(&str, &str)], args: &[&str]) -> Output {
    let mut cmd = Command::new(crate::common::cli_exe());
    cmd.env_remove("SHARDLIMIT_NODES")
        .env_remove("SHARDLIMIT_PASSWORD");
    cmd.envs(envs.iter().copied()).args(args).output().unwrap()
}

fn all_output(out: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test]
async fn the_cli_never_prints_the_password() {
    crate::cli_built();
    let password = secret();
    let url = format!("redis://app:{password}@127.0.0.1:1");
    let dir = std::env::temp_dir().join(format!("sl-secrets-{:08x}", rand::random::<u32>()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("password");
    std::fs::write(&file, format!("{password}\n")).unwrap();
    let file = file.to_str().unwrap();

    let help = cli(
        &[
            ("SHARDLIMIT_NODES", &url),
            ("SHARDLIMIT_PASSWORD", &password),
            ("SHARDLIMIT_PASSWORD_FILE", file),
        ],
        &["--help"],
    );
    assert!(help.status.success());
    assert_hidden("--help", &all_output(&help), &password);
    assert!(
        !all_output(&help).contains("127.0.0.1:1"),
        "env values shown"
    );

    // Errors: unreachable (URL, env password, password file), bad URL.
    for (envs, args) in [
        (vec![("SHARDLIMIT_NODES", url.as_str())], vec!["health"]),
        (
            vec![("SHARDLIMIT_PASSWORD", password.as_str())],
            vec!["--nodes", "redis://127.0.0.1:1", "--user", "app", "count"],
        ),
        (
            vec![],
            vec![
                "--nodes",
                "redis://127.0.0.1:1",
                "--password-file",
                file,
                "list",
            ],
        ),
        (
            vec![],
            vec!["--nodes", &format!("redis://app:{password}@h:nope"), "list"],
        ),
    ] {
        let out = cli(&envs, &args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", all_output(&out));
        assert_hidden("CLI error", &all_output(&out), &password);
    }
    for (bad, parts) in delimited_passwords() {
        for out in [
            cli(&[], &["--nodes", &bad, "list"]),
            cli(&[("SHARDLIMIT_NODES", &bad)], &["health"]),
        ] {
            for part in &parts {
                assert_hidden("CLI error", &all_output(&out), part);
            }
            assert_eq!(out.status.code(), Some(2), "{}", all_output(&out));
            assert_eq!(
                all_output(&out).contains("percent-encode"),
                refused(&bad),
                "{}",
                all_output(&out)
            );
        }
    }

    // --json output, connected: the test cluster's default user has no
    // password, so Redis accepts any with `AUTH default <password>`.
    let cluster = common::cluster("secrets").await;
    let limiter = RateLimiter::builder(&cluster, "api", Quota::per_hour(NonZeroU32::MIN))
        .build()
        .unwrap();
    assert!(limiter.check("user:1").await.unwrap().allowed);
    let seed =
        common::node_urls()[0].replacen("redis://", &format!("redis://default:{password}@"), 1);
    // (health's exit code says whether the shared cluster is fit for
    // locks, which fault tests change; only its text matters here.)
    for args in [
        vec!["--namespace", cluster.namespace(), "list", "--json"],
        vec!["--namespace", cluster.namespace(), "count", "--json"],
        vec![
            "--namespace",
            cluster.namespace(),
            "show",
            "user:1",
            "--json",
        ],
    ] {
        let out = cli(
            &[
                ("SHARDLIMIT_NODES", &seed),
                ("SHARDLIMIT_PASSWORD", &password),
            ],
            &args,
        );
        assert!(out.status.success(), "{args:?}: {}", all_output(&out));
        assert_hidden("CLI output", &all_output(&out), &password);
    }
    let health = cli(
        &[
            ("SHARDLIMIT_NODES", &seed),
            ("SHARDLIMIT_PASSWORD", &password),
        ],
        &["health"],
    );
    assert!(
        all_output(&health).contains("cluster_state"),
        "{}",
        all_output(&health)
    );
    assert_hidden("CLI health", &all_output(&health), &password);
    let list = cli(
        &[("SHARDLIMIT_NODES", &seed)],
        &["--namespace", cluster.namespace(), "list", "--json"],
    );
    assert!(String::from_utf8_lossy(&list.stdout).contains("user:1"));
    std::fs::remove_dir_all(&dir).unwrap();
}
