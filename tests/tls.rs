//! The TLS smoke, against the TLS-only cluster of `cluster-compose/up.sh
//! --tls` — so every test is `#[ignore]`d in the plaintext run; `.ci/run`
//! runs them with `--ignored` once that cluster is up.
//!
//! Env: `SHARDLIMIT_TLS_NODES` (default `rediss://127.0.0.1:7000`, one seed
//! only: the five other nodes are found from the topology),
//! `SHARDLIMIT_TLS_CA` (default `cluster-compose/.state/tls/ca.crt`; the
//! client certificate and the ACL password are read from beside it, as
//! up.sh writes them).
//!
//! Everything runs as the least-privilege ACL user `shardlimit` under a
//! namespace its key pattern allows (`aclsmoke-*`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::acl;

use std::num::NonZeroU32;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use futures::StreamExt;
use shardlimit::admin::{ScanEvent, Scanner};
use shardlimit::{
    Cluster, ClusterBuilder, ConcurrencyLimiter, Counter, FailurePolicy, Lock, MultiLimiter, Quota,
    RateLimiter,
};

fn seed() -> String {
    std::env::var("SHARDLIMIT_TLS_NODES").unwrap_or_else(|_| "rediss://127.0.0.1:7000".into())
}

/// The CA; the client certificate, key and ACL password are found from it.
fn ca() -> PathBuf {
    std::env::var("SHARDLIMIT_TLS_CA").map_or_else(
        |_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("cluster-compose/.state/tls/ca.crt"),
        PathBuf::from,
    )
}

fn tls_file(name: &str) -> PathBuf {
    ca().parent().unwrap().join(name)
}

fn acl_password_file() -> PathBuf {
    ca().parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("acl/password")
}

fn namespace() -> String {
    format!("aclsmoke-{:08x}", rand::random::<u32>())
}

/// As the ACL user, trusting only the test CA, one seed.
fn builder() -> ClusterBuilder {
    Cluster::builder([seed()])
        .namespace(namespace())
        .tls_ca_file(ca())
        .username(acl::USER)
        .password_file(acl_password_file())
        .command_timeout(Duration::from_secs(1))
}

/// A `redis://` URL of the same host and port as the seed.
fn plain_seed() -> String {
    seed().replacen("rediss://", "redis://", 1)
}

/// As the default (admin) user, over TLS: for what the ACL user may not do.
async fn admin(port: u16) -> redis::aio::MultiplexedConnection {
    let host = seed()
        .trim_start_matches("rediss://")
        .split(':')
        .next()
        .unwrap()
        .to_owned();
    let client = redis::Client::build_with_tls(
        format!("rediss://{host}:{port}"),
        redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(std::fs::read(ca()).unwrap()),
        },
    )
    .unwrap();
    client.get_multiplexed_async_connection().await.unwrap()
}

#[tokio::test]
#[ignore = "needs the TLS cluster (cluster-compose/up.sh --tls)"]
async fn every_primitive_works_over_tls_as_the_acl_user_from_one_seed() {
    let cluster = builder()
        .build()
        .await
        .expect("TLS cluster as the ACL user");
    let topology = cluster.topology().await.unwrap();
    assert_eq!(topology.shards.len(), 3);

    let quota = Quota::per_hour(NonZeroU32::new(2).unwrap());
    let hour = RateLimiter::builder(&cluster, "api", quota)
        .build()
        .unwrap();
    let second = RateLimiter::builder(
        &cluster,
        "burst",
        Quota::per_second(NonZeroU32::new(5).unwrap()),
    )
    .build()
    .unwrap();
    // Subjects on every master, so every master is reached over TLS.
    for i in 0..30 {
        let subject = format!("user:{i}");
        assert!(hour.check(&subject).await.unwrap().allowed);
    }
    // A batch after `SCRIPT FLUSH` on every master: its `NOSCRIPT`s are
    // answered without `SCRIPT LOAD`, which this user may not send.
    let flushed = RateLimiter::builder(&cluster, "flushed", quota)
        .build()
        .unwrap();
    let batch: Vec<(String, u32)> = (0..30).map(|i| (format!("user:{i}"), 1)).collect();
    for d in flushed.check_many(&batch).await {
        assert!(d.unwrap().allowed);
    }
    let mut admins = Vec::new();
    for shard in &topology.shards {
        let addr = shard.master.to_string();
        admins.push(admin(addr.rsplit(':').next().unwrap().parse().unwrap()).await);
    }
    let refused_before = acl::script_load_refusals(&mut admins).await;
    acl::flush_scripts(&mut admins).await;
    for d in flushed.check_many(&batch).await {
        let d = d.unwrap();
        assert!(d.allowed && d.remaining == 0, "{d:?}");
    }
    assert_eq!(
        acl::script_load_refusals(&mut admins).await - refused_before,
        0,
        "the batch sent SCRIPT LOAD, which this user may not (docs/production.md)"
    );

    let both = MultiLimiter::new([hour.clone(), second]).unwrap();
    assert!(both.check("user:0").await.unwrap().allowed);
    assert!(!both.check("user:0").await.unwrap().allowed, "3rd of 2/h");

    let lock = Lock::builder(&cluster, "job")
        .replica_ack(Duration::from_millis(500))
        .build()
        .unwrap();
    let guard = lock.try_acquire("nightly").await.unwrap().expect("free");
    assert!(lock.try_acquire("nightly").await.unwrap().is_none());
    guard.release().await.unwrap();

    let lease = ConcurrencyLimiter::builder(&cluster, "exports")
        .build()
        .unwrap();
    let permit = lease
        .try_acquire("tenant")
        .await
        .unwrap()
        .expect("a permit");
    assert!(permit.release().await.unwrap());

    let counter = Counter::builder(&cluster, "billing").build().unwrap();
    counter.add("session", 30).await.unwrap();
    assert_eq!(counter.drain("session").await.unwrap(), Some(30));

    let scanner = Scanner::new(&cluster);
    let mut events = Box::pin(scanner.name("api").scan());
    let mut found = 0;
    while let Some(event) = events.next().await {
        match event {
            ScanEvent::Limiter(_) => found += 1,
            ScanEvent::Incomplete { node, error } => panic!("{node}: {error}"),
            _ => {}
        }
    }
    assert_eq!(found, 30);

    // The deny cache's subscription and a reset's publication, as the
    // least-privilege user over TLS: a cached denial, lifted by a reset.
    let cached = RateLimiter::builder(&cluster, "cached", quota)
        .deny_cache(100)
        .build()
        .unwrap();
    for _ in 0..2 {
        assert!(cached.check("user:0").await.unwrap().allowed);
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !cached.check("user:0").await.unwrap().cached {
        assert!(std::time::Instant::now() < deadline, "no denial was cached");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cached.reset("user:0").await.unwrap();
    assert!(cached.check("user:0").await.unwrap().allowed);
    cached
        .block("user:1", Duration::from_secs(5))
        .await
        .unwrap();
    assert!(cached.check("user:1").await.unwrap().blocked);
    cached.reward("user:1", NonZeroU32::MIN).await.unwrap();

    let health = cluster.health().await.unwrap();
    assert_eq!(health.masters.len(), 3);
    assert!(health.fit_for_locks(), "{:?}", health.lock_problems());

    // Only one seed was given: the other masters were discovered and
    // reached with the seed's TLS settings (CA, credentials).
    let nodes = cluster.nodes();
    for shard in &topology.shards {
        let addr = shard.master.to_string();
        let node = nodes.iter().find(|n| n.addr == addr).expect("master known");
        assert!(node.connects > 0 && node.connect_failures == 0, "{node:?}");
    }
}

#[tokio::test]
#[ignore = "needs the TLS cluster (cluster-compose/up.sh --tls)"]
async fn a_client_certificate_is_presented_for_mutual_tls() {
    let cluster = builder()
        .tls_client_cert_files(tls_file("client.crt"), tls_file("client.key"))
        .build()
        .await
        .expect("mutual TLS");
    let counter = Counter::builder(&cluster, "billing").build().unwrap();
    assert_eq!(counter.add("s", 1).await.unwrap(), 1);
    // A key the CA did not sign for the certificate is refused.
    let err = builder()
        .tls_client_cert_files(tls_file("client.crt"), tls_file("node.key"))
        .build()
        .await
        .unwrap_err();
    assert!(!err.is_transient(), "{err}");
}

#[tokio::test]
#[ignore = "needs the TLS cluster (cluster-compose/up.sh --tls)"]
async fn wrong_ca_and_wrong_scheme_fail_fast_and_never_bypass() {
    // A CA that did not sign the nodes: the client certificate is a PEM
    // certificate, but no CA of the nodes'.
    let started = Instant::now();
    let err = builder()
        .tls_ca_file(tls_file("client.crt"))
        .connect_timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(
        !err.is_transient(),
        "wrong CA must not look transient: {err}"
    );
    assert!(shardlimit::BypassReason::of(&err).is_none());

    // Lazily: calls fail with the refusal, never a bypass, even fail-open.
    let cluster = builder()
        .tls_ca_file(tls_file("client.crt"))
        .lazy_connect(true)
        .build()
        .await
        .unwrap();
    let limiter = RateLimiter::builder(&cluster, "api", Quota::per_hour(NonZeroU32::MIN))
        .failure_policy(FailurePolicy::FailOpen)
        .build()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    for _ in 0..5 {
        match limiter.check("s").await {
            Err(err) => assert!(!err.is_transient(), "{err}"),
            Ok(d) => panic!("a TLS refusal was bypassed: {d:?}"),
        }
    }

    // Plain redis:// to a TLS-only port: an error within the timeout.
    let started = Instant::now();
    let err = Cluster::builder([plain_seed()])
        .connect_timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(3), "{err}");
}

#[tokio::test]
#[ignore = "needs the TLS cluster (cluster-compose/up.sh --tls)"]
async fn tls_to_a_plaintext_port_is_a_clear_refusal() {
    // A plaintext "server": answers anything with a RESP error, as Redis
    // does to a TLS ClientHello on its plain port.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        while let Ok((mut sock, _)) = listener.accept().await {
            let mut buf = [0u8; 512];
            let _ = sock.read(&mut buf).await;
            let _ = sock.write_all(b"-ERR unknown command\r\n").await;
        }
    });
    let started = Instant::now();
    let err = Cluster::builder([format!("rediss://127.0.0.1:{port}")])
        .tls_ca_file(ca())
        .connect_timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(!err.is_transient(), "{err}");
}

/// Creates `user` on every node (as admin) with the test user's rule minus
/// `missing`, and returns its password.
async fn user_without(user: &str, missing: &str) -> String {
    let password = format!("pw-{:016x}", rand::random::<u64>());
    let base: u16 = seed().rsplit(':').next().unwrap().parse().unwrap();
    for port in base..base + 6 {
        common::acl_set_user_without(&mut admin(port).await, user, &password, missing).await;
    }
    password
}

#[tokio::test]
#[ignore = "needs the TLS cluster (cluster-compose/up.sh --tls)"]
async fn a_missing_permission_is_named_and_never_bypassed() {
    let user = format!("noperm-{:08x}", rand::random::<u32>());
    let password = user_without(&user, "+wait").await;
    let cluster = Cluster::builder([seed()])
        .namespace(namespace())
        .tls_ca_file(ca())
        .username(&user)
        .password(&password)
        .command_timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    let lock = Lock::builder(&cluster, "job")
        .replica_ack(Duration::from_millis(200))
        .build()
        .unwrap();
    let err = lock.try_acquire("x").await.unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("no permissions") && text.contains("'wait'"),
        "{text}"
    );
    assert!(!err.is_transient());
    assert!(!text.contains(&password));

    // Keys outside the user's pattern: NOPERM too, and a fail-open limiter
    // returns it instead of bypassing.
    let outside = Cluster::builder([seed()])
        .namespace(format!("other-{:08x}", rand::random::<u32>()))
        .tls_ca_file(ca())
        .username("shardlimit")
        .password_file(acl_password_file())
        .build()
        .await
        .unwrap();
    let limiter = RateLimiter::builder(&outside, "api", Quota::per_hour(NonZeroU32::MIN))
        .failure_policy(FailurePolicy::FailOpen)
        .build()
        .unwrap();
    let err = limiter.check("s").await.unwrap_err();
    assert!(err.to_string().contains("no permissions"), "{err}");
    assert!(!err.is_transient());

    let base: u16 = seed().rsplit(':').next().unwrap().parse().unwrap();
    for port in base..base + 6 {
        let mut conn = admin(port).await;
        let _: i64 = redis::cmd("ACL")
            .arg("DELUSER")
            .arg(&user)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
}

#[cfg(feature = "cli")]
#[tokio::test]
#[ignore = "needs the TLS cluster (cluster-compose/up.sh --tls)"]
async fn the_cli_lists_and_checks_health_over_tls() {
    let cluster = builder().build().await.unwrap();
    let ns = cluster.namespace().to_owned();
    let limiter = RateLimiter::builder(&cluster, "api", Quota::per_hour(NonZeroU32::MIN))
        .build()
        .unwrap();
    assert!(limiter.check("user:1").await.unwrap().allowed);
    let cli = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_shardlimit"))
            .args([
                "--nodes",
                &seed(),
                "--namespace",
                &ns,
                "--user",
                "shardlimit",
            ])
            .arg("--password-file")
            .arg(acl_password_file())
            .arg("--tls-ca")
            .arg(ca())
            .args(args)
            .output()
            .unwrap()
    };
    let out = cli(&["list", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = String::from_utf8(out.stdout).unwrap();
    assert_eq!(rows.lines().count(), 1, "{rows}");
    assert!(rows.contains("\"user:1\""), "{rows}");
    let out = cli(&["health"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // With the CA in the environment and mutual TLS.
    let out = Command::new(env!("CARGO_BIN_EXE_shardlimit"))
        .env("SHARDLIMIT_NODES", seed())
        .env("SHARDLIMIT_TLS_CA", ca())
        .env("SHARDLIMIT_TLS_CERT", tls_file("client.crt"))
        .env("SHARDLIMIT_TLS_KEY", tls_file("client.key"))
        .args(["--namespace", &ns, "count"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("total\t1"));
}
