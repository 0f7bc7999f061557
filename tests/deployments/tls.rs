//! The TLS smoke, against the TLS-only cluster of `cluster-compose/up.sh
//! --tls` — so every test is `#[ignore]`d in the plaintext run; `.ci/run`
//! runs them with `--ignored` once that cluster is up: the behaviour suite
//! every deployment runs (`tests/behaviour`), plus what is TLS's and the
//! ACL's own: one seed reaching every master, mutual TLS, refusals that are
//! never bypassed, a missing permission named, and an application that
//! installs its own rustls provider before or after connecting (in a
//! process of its own).
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

use crate::behaviour;
use crate::common;

use common::acl;

use std::num::NonZeroU32;
use std::process::Command;
use std::time::{Duration, Instant};

use behaviour::{Setup, acl_password_file, tls_ca as ca, tls_file, tls_seed as seed};
use shardlimit::{
    Cluster, Counter, FailurePolicy, Lock, Quota, RateLimiter, cluster::ClusterBuilder,
};

behaviour::suite!(
    Setup::Tls,
    #[ignore = "needs the TLS cluster (cluster-compose/up.sh --tls)"]
);

fn namespace() -> String {
    Setup::Tls.namespace("tls")
}

/// As the ACL user, trusting only the test CA, one seed.
fn builder() -> ClusterBuilder {
    Setup::Tls.builder_in(&namespace())
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
    Setup::Tls.node(&format!("{host}:{port}")).await
}

#[tokio::test]
#[ignore = "needs the TLS cluster (cluster-compose/up.sh --tls)"]
async fn one_seed_reaches_every_master_as_the_acl_user_without_script_load() {
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
    assert!(shardlimit::policy::BypassReason::of(&err).is_none());

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

/// The CLI over TLS with everything from the environment and mutual TLS
/// (the suite's CLI test gives it flags).
#[tokio::test]
#[ignore = "needs the TLS cluster (cluster-compose/up.sh --tls)"]
async fn the_cli_counts_over_mutual_tls_from_the_environment() {
    let cluster = builder().build().await.unwrap();
    let ns = cluster.namespace().to_owned();
    let limiter = RateLimiter::builder(&cluster, "api", Quota::per_hour(NonZeroU32::MIN))
        .build()
        .unwrap();
    assert!(limiter.check("user:1").await.unwrap().allowed);
    let out = Command::new(crate::common::cli_exe())
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

/// An application that installs its own rustls provider — `install_default`,
/// which refuses a second one — after shardlimit connected over TLS: the
/// library must not have installed one (issue 42, item 8). In a process of
/// its own, as the process default is set once per process.
#[tokio::test]
#[ignore = "needs the TLS cluster (cluster-compose/up.sh --tls)"]
async fn an_application_installs_its_crypto_provider_after_connecting() {
    provider_child("after").await;
}

/// The same application installing its provider first: shardlimit's TLS
/// sessions use it, not a provider of the library's choosing.
#[tokio::test]
#[ignore = "needs the TLS cluster (cluster-compose/up.sh --tls)"]
async fn an_application_installs_its_crypto_provider_before_connecting() {
    provider_child("before").await;
}

async fn provider_child(when: &str) {
    // At the binary's root (main.rs), outside this module.
    let test = common::child::harness_name("deployments", "child_installs_a_crypto_provider");
    common::child::child_process(&test, &[("PROVIDER", when)]).await;
}

/// Random draws made through the application's provider: a TLS handshake
/// makes some (its `ClientHello` random).
static APP_DRAWS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The application's provider's randomness: *ring*'s, counted.
#[derive(Debug)]
struct CountedRandom;

impl rustls::crypto::SecureRandom for CountedRandom {
    fn fill(&self, buf: &mut [u8]) -> Result<(), rustls::crypto::GetRandomFailed> {
        APP_DRAWS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        ring_provider().secure_random.fill(buf)
    }
}

// Deprecated in rustls 0.23.48 (no post-quantum key exchange); aws-lc-rs,
// the other built-in provider, needs a C toolchain and cmake to build,
// and which provider it is does not matter here: that it is the
// application's own instance does.
#[allow(deprecated)]
fn ring_provider() -> rustls::crypto::CryptoProvider {
    rustls::crypto::ring::default_provider()
}

/// A provider of the application's own: *ring* with its draws counted.
fn app_provider() -> rustls::crypto::CryptoProvider {
    rustls::crypto::CryptoProvider {
        secure_random: &CountedRandom,
        ..ring_provider()
    }
}

/// One check on subjects of every master: a TLS session to each.
async fn check_every_master(cluster: &Cluster) {
    let limiter = RateLimiter::builder(cluster, "api", Quota::per_hour(NonZeroU32::MAX))
        .build()
        .unwrap();
    for i in 0..30 {
        assert!(limiter.check(&format!("user:{i}")).await.unwrap().allowed);
    }
}

/// The child's side of the provider tests: `SHARDLIMIT_CHILD_PROVIDER` is
/// `after` (connect, then install) or `before` (install, then connect).
pub(crate) async fn run_provider_child() {
    let draws = || APP_DRAWS.load(std::sync::atomic::Ordering::Relaxed);
    match std::env::var("SHARDLIMIT_CHILD_PROVIDER").as_deref() {
        Ok("after") => {
            let first = builder().build().await.unwrap();
            check_every_master(&first).await;
            app_provider()
                .install_default()
                .expect("the application installs its rustls provider after shardlimit connected");
            // A handle built now uses it; the first one goes on working.
            let second = builder().build().await.unwrap();
            check_every_master(&second).await;
            assert!(
                draws() > 0,
                "the second handle ignored the installed provider"
            );
            check_every_master(&first).await;
        }
        Ok("before") => {
            app_provider()
                .install_default()
                .expect("the application installs its rustls provider first");
            let cluster = builder().build().await.unwrap();
            check_every_master(&cluster).await;
            assert!(draws() > 0, "shardlimit's TLS ignored the process default");
        }
        other => panic!("SHARDLIMIT_CHILD_PROVIDER is {other:?}, not after or before"),
    }
}

/// tonic's TLS server puts `TcpConnectInfo` in the requests beside
/// `TlsConnectInfo<TcpConnectInfo>`, so `PeerIp::tonic_connect_info()`
/// limits calls by the peer's address over TLS as well (docs/grpc.md).
#[cfg(feature = "tonic")]
#[tokio::test]
#[ignore = "needs the TLS cluster (cluster-compose/up.sh --tls)"]
async fn a_tonic_server_over_tls_limits_calls_by_peer_address() {
    use shardlimit::tower::{PeerIp, RateLimitLayer};
    use tonic::transport::server::TcpIncoming;
    use tonic::transport::{
        Certificate, Channel, ClientTlsConfig, Identity, Server, ServerTlsConfig,
    };
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_client::HealthClient;

    let cluster = builder().build().await.unwrap();
    let limiter = RateLimiter::builder(&cluster, "peer", Quota::per_minute(1))
        .build()
        .unwrap();
    let layer = RateLimitLayer::builder(limiter.clone(), PeerIp::tonic_connect_info())
        .grpc()
        .build()
        .unwrap();
    let read = |name: &str| std::fs::read(tls_file(name)).unwrap();
    let identity = Identity::from_pem(read("node.crt"), read("node.key"));
    let incoming = TcpIncoming::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let port = incoming.local_addr().unwrap().port();
    let (_reporter, health) = tonic_health::server::health_reporter();
    let server = Server::builder()
        .tls_config(ServerTlsConfig::new().identity(identity))
        .unwrap()
        .layer(layer)
        .add_service(health);
    tokio::spawn(server.serve_with_incoming(incoming));

    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(std::fs::read(ca()).unwrap()))
        .domain_name("localhost");
    let channel = Channel::from_shared(format!("https://127.0.0.1:{port}"))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = HealthClient::new(channel);
    let call = || {
        tonic::Request::new(HealthCheckRequest {
            service: String::new(),
        })
    };
    client.check(call()).await.unwrap();
    let status = client.check(call()).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    // Keyed by the peer's address, as the layer found it.
    assert_eq!(limiter.peek("127.0.0.1").await.unwrap().remaining, 0);
}
