//! An axum API rate-limited on the six-node cluster with the `tower` layer:
//!
//! * every route, per client IP (an IPv6 client per /64): GCRA, 20 per
//!   second with bursts of 40, fail-open (an unreachable Redis must not
//!   take the site down);
//! * `/api/*`, per API key (`x-api-key`): 10 per second **and** 1000 per
//!   hour, both checked in one script, fail-closed (a paid quota); a request
//!   without a key gets 400.
//!
//! It starts with Redis down too (`lazy_connect`): until the cluster
//! answers, `/` is served (the per-IP limit is bypassed, and `/stats`
//! counts it) and `/api/*` answers 503 — each limit's failure policy, not
//! an exit at start-up.
//!
//! ```sh
//! cluster-compose/up.sh
//! cargo run --example axum_api --features axum        # listens on 127.0.0.1:3000
//! curl -i http://127.0.0.1:3000/
//! curl -i -H 'x-api-key: demo-key' http://127.0.0.1:3000/api/items
//! curl -i http://127.0.0.1:3000/stats
//! ```
//!
//! `SHARDLIMIT_NODES` picks the cluster, `DEMO_ADDR` the listening address.
//! Behind a load balancer, `DEMO_TRUSTED_PROXIES` (comma-separated
//! addresses or networks, e.g. `10.0.0.0/8`) keys by the client address the
//! balancer adds to `X-Forwarded-For`, believed only from those peers.

use std::error::Error;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use shardlimit::tower::{ForwardedIp, HeaderKey, MissingKey, PeerIp, ProxyHeader, RateLimitLayer};
use shardlimit::{Algorithm, Cluster, FailurePolicy, MultiLimiter, Quota, RateLimiter};

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    // Bypass warnings (fail-open without Redis) and 503 causes show here.
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .init();

    // Lazily: an unreachable Redis must not keep the site from starting
    // (the limits' failure policies decide what it then answers); give it
    // two seconds to be ready before serving.
    let cluster = Cluster::builder_from_env()
        .namespace("axum-demo")
        .lazy_connect(true)
        .build()
        .await?;
    if let Err(err) = cluster.wait_ready(Duration::from_secs(2)).await {
        tracing::warn!("serving without Redis for now: {err}");
    }

    let per_ip = RateLimiter::builder(
        &cluster,
        "ip",
        Quota::per_second(nz(20)).allow_burst(nz(40)),
    )
    .failure_policy(FailurePolicy::FailOpen)
    .build()?;
    // axum puts the peer address in `ConnectInfo` when served with
    // `into_make_service_with_connect_info` (below); without that, every
    // request is a 400 and the layer warns which extension it missed.
    let peer = PeerIp::connect_info();

    let key_per_second =
        RateLimiter::builder(&cluster, "key-1s", Quota::per_second(nz(10))).build()?;
    // Clock-aligned: "1000 per hour" resets on the hour.
    let key_per_hour = RateLimiter::builder(&cluster, "key-1h", Quota::per_hour(nz(1000)))
        .algorithm(Algorithm::FixedWindow)
        .build()?;
    let per_key = RateLimitLayer::builder(
        MultiLimiter::new([key_per_second, key_per_hour])?,
        HeaderKey::from_static("x-api-key"),
    )
    .missing_key(MissingKey::Reject)
    .build()?;

    let api = Router::new()
        .route("/api/items", get(|| async { "[\"apple\", \"pear\"]\n" }))
        // `route_layer`: only matched routes are checked, so a 404 costs
        // no quota.
        .route_layer(per_key);
    let routes = Router::new()
        .route("/", get(|| async { "shardlimit axum demo\n" }))
        .route("/stats", get(stats))
        .merge(api);
    // Per IP outside the per-key layer (the last layer is the outer one),
    // so its refusals never charge a key (docs/http.md, "Stacking
    // limits"). The two extractors are different types, hence two `layer`
    // calls.
    let routes = match std::env::var("DEMO_TRUSTED_PROXIES") {
        Ok(proxies) => {
            let mut client_ip = ForwardedIp::builder(peer, ProxyHeader::XForwardedFor);
            for net in proxies.split(',') {
                client_ip = client_ip.trust(net);
            }
            routes.layer(RateLimitLayer::new(per_ip, client_ip.build()?))
        }
        Err(_) => routes.layer(RateLimitLayer::new(per_ip, peer)),
    };
    let app = routes.with_state(cluster);

    let addr = std::env::var("DEMO_ADDR").unwrap_or_else(|_| "127.0.0.1:3000".to_owned());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    let addr = listener.local_addr()?;
    println!("listening on http://{addr}");
    println!("  curl -i http://{addr}/");
    println!("  curl -i -H 'x-api-key: demo-key' http://{addr}/api/items");
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}

/// Allowed / denied / bypassed / error counts per limiter.
async fn stats(State(cluster): State<Cluster>) -> String {
    let mut out = String::from("kind name allowed denied bypassed errors\n");
    for p in cluster.stats().primitives {
        out.push_str(&format!(
            "{} {} {} {} {} {}\n",
            p.kind, p.name, p.allowed, p.denied, p.bypassed, p.errors
        ));
    }
    out
}
