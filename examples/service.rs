//! One complete axum service, the shape of a first adoption (issue 28):
//!
//! * **HTTP limits**: per API key 10/s with bursts of 20, per client IP
//!   1000/h, fail-open (a Redis outage lets requests through, counted);
//!   the per-IP layer is outside, so its refusals never charge a key (why:
//!   docs/http.md, "Stacking limits").
//! * **A singleton job** under a fenced lock: one process of the fleet runs
//!   it, with a watchdog keeping the lock while it runs.
//! * **A lease cap**: at most 3 exports per tenant at once.
//! * **A billing counter** per API key, drained every `--drain-secs` by a
//!   collector that finds the keys with the scanner.
//! * **Graceful shutdown** on SIGTERM or Ctrl-C: stop accepting, finish
//!   requests in flight, release the job's lock, drain a last time.
//!
//! ```text
//! cluster-compose/up.sh
//! SHARDLIMIT_NODES=redis://127.0.0.1:7000 SHARDLIMIT_NAMESPACE=demo \
//!   cargo run --example service --features axum -- --listen 127.0.0.1:3000 --drain-secs 60
//! curl -i -H 'x-api-key: k-1' http://127.0.0.1:3000/api/items
//! curl -i -X POST 'http://127.0.0.1:3000/exports/acme?ms=5000'
//! ```
//!
//! It prints what it does on stdout (`listening on …`, `job: …`,
//! `billed …`, `shutdown complete`); `tests/http/service.rs` runs it against the
//! test cluster with real HTTP requests and a SIGTERM.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use futures::StreamExt;
use shardlimit::admin::{ScanEvent, Scanner};
use shardlimit::tower::{HeaderKey, MissingKey, PeerIp, RateLimitLayer};
use shardlimit::{Cluster, Counter, FailurePolicy, LeaseLimiter, Lock, Quota, RateLimiter};
use tokio::sync::watch;

/// What the handlers share.
#[derive(Clone)]
struct App {
    exports: LeaseLimiter,
    billing: Counter,
    /// Units whose `add` failed, folded into the next one.
    unbilled: Arc<Mutex<Vec<(String, i64)>>>,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The crate's warnings (bypasses, failed counter adds; rate-limited).
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_writer(std::io::stderr)
        .init();
    let mut listen: SocketAddr = "127.0.0.1:3000".parse()?;
    let mut drain_every = Duration::from_secs(60);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--listen" => listen = value.parse()?,
            "--drain-secs" => drain_every = Duration::from_secs_f64(value.parse()?),
            other => return Err(format!("unknown option {other}").into()),
        }
    }

    // SHARDLIMIT_NODES (required) and SHARDLIMIT_NAMESPACE.
    let cluster = Cluster::builder_from_env().build().await?;

    let per_key = RateLimiter::builder(&cluster, "key", Quota::per_second(10).allow_burst(20))
        .failure_policy(FailurePolicy::FailOpen)
        .build()?;
    let per_ip = RateLimiter::builder(&cluster, "ip", Quota::per_hour(1000))
        .failure_policy(FailurePolicy::FailOpen)
        .build()?;
    let app = App {
        exports: LeaseLimiter::builder(&cluster, "exports")
            .max_leases(3)
            .lease_ttl(Duration::from_secs(120))
            .build()?,
        billing: Counter::builder(&cluster, "billing")
            .idle_ttl(Duration::from_secs(3600))
            .build()?,
        unbilled: Arc::default(),
    };
    let routes = Router::new()
        .route("/api/items", get(items))
        // The last route_layer is the outer one: per IP, then per key.
        // An API key is a credential: limited under its keyed digest
        // (SHARDLIMIT_SUBJECT_SECRET keys it), never stored in Redis as sent.
        .route_layer(
            RateLimitLayer::builder(per_key, HeaderKey::from_static("x-api-key"))
                .missing_key(MissingKey::Reject)
                .build()?,
        )
        .route_layer(RateLimitLayer::new(per_ip, PeerIp::connect_info()))
        .route("/exports/{tenant}", post(export))
        .with_state(app.clone());

    let listener = tokio::net::TcpListener::bind(listen).await?;
    println!("listening on {}", listener.local_addr()?);

    let (stop, stopped) = watch::channel(false);
    let lock = Lock::builder(&cluster, "job")
        .ttl(Duration::from_secs(10))
        .watchdog(true)
        .build()?;
    let job = tokio::spawn(singleton_job(lock, stopped.clone()));
    let collector = tokio::spawn(collect(
        cluster.clone(),
        app.billing.clone(),
        drain_every,
        stopped.clone(),
    ));
    axum::serve(
        listener,
        routes.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(async move {
        terminated().await;
        println!("shutting down");
        let _ = stop.send(true);
    })
    .await?;
    job.await?;
    collector.await?;
    println!("shutdown complete");
    Ok(())
}

/// SIGTERM (what an orchestrator sends) or Ctrl-C.
async fn terminated() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// An admitted API request: one billable unit for its key.
async fn items(State(app): State<App>, headers: HeaderMap) -> &'static str {
    let key = headers
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let earlier: i64 = {
        let mut unbilled = app.unbilled.lock().unwrap_or_else(|p| p.into_inner());
        let (mine, others): (Vec<_>, Vec<_>) = unbilled.drain(..).partition(|(k, _)| *k == key);
        *unbilled = others;
        mine.iter().map(|(_, n)| n).sum()
    };
    if let Err(err) = app.billing.add(&key, 1 + earlier).await {
        // The work is done: keep serving, bill it with the next add. The
        // crate logs the failure (rate-limited); a misconfiguration is ours
        // to shout about.
        if !err.is_transient() {
            eprintln!("billing counter misconfigured: {err}");
        }
        app.unbilled
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((key, 1 + earlier));
    }
    "[\"apple\", \"pear\"]\n"
}

/// At most 3 exports per tenant at once; the lease is held while it runs.
async fn export(
    State(app): State<App>,
    Path(tenant): Path<String>,
    RawQuery(query): RawQuery,
) -> (StatusCode, String) {
    // `?ms=N`: how long the "export" takes.
    let ms = query
        .as_deref()
        .and_then(|q| q.strip_prefix("ms="))
        .and_then(|ms| ms.parse().ok())
        .unwrap_or(0);
    match app.exports.try_acquire(format!("tenant:{tenant}")).await {
        Ok(Some(lease)) => {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            let _ = lease.release().await;
            (StatusCode::OK, format!("exported {tenant}\n"))
        }
        Ok(None) => (
            StatusCode::TOO_MANY_REQUESTS,
            "3 exports already running\n".into(),
        ),
        // Leases fail closed by default: no export without a lease.
        Err(err) => (StatusCode::SERVICE_UNAVAILABLE, format!("{err}\n")),
    }
}

/// One process of the fleet runs the job: the lock's watchdog extends it
/// while it runs, and shutdown releases it at once rather than at its TTL.
async fn singleton_job(lock: Lock, mut stopped: watch::Receiver<bool>) {
    loop {
        match lock.try_acquire("nightly-export").await {
            Ok(Some(guard)) => {
                // The fencing token goes with every write the job makes, so
                // the store can refuse a stale holder.
                println!("job: running with fencing token {}", guard.fencing_token());
                let _ = stopped.wait_for(|stop| *stop).await;
                match guard.release().await {
                    Ok(_) => println!("job: lock released"),
                    Err(err) => {
                        eprintln!("job: release failed, the lock frees itself at its TTL: {err}")
                    }
                }
                return;
            }
            Ok(None) => println!("job: held by another process"),
            Err(err) => eprintln!("job: cannot ask for the lock: {err}"),
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(5)) => {}
            _ = stopped.wait_for(|stop| *stop) => return,
        }
    }
}

/// Every `every`, and once more at shutdown: drain each key's billing
/// counter (found by the scanner) and "bill" it.
async fn collect(
    cluster: Cluster,
    billing: Counter,
    every: Duration,
    mut stopped: watch::Receiver<bool>,
) {
    loop {
        let stop = tokio::select! {
            _ = tokio::time::sleep(every) => false,
            _ = stopped.wait_for(|stop| *stop) => true,
        };
        let mut counters = Box::pin(
            Scanner::new(&cluster)
                .kind("counter")
                .name("billing")
                .scan(),
        );
        while let Some(event) = counters.next().await {
            match event {
                ScanEvent::Limiter(info) => match billing.drain(&info.subject).await {
                    Ok(Some(units)) if units > 0 => {
                        println!("billed {} {units}", String::from_utf8_lossy(&info.subject));
                    }
                    Ok(_) => {}
                    Err(err) => eprintln!("drain failed, billed next time: {err}"),
                },
                ScanEvent::Incomplete { node, error } => {
                    eprintln!("scan of {node} incomplete: {error}")
                }
                _ => {}
            }
        }
        if stop {
            return;
        }
    }
}
