//! The primitive under test and one call of it through the library.

use std::num::NonZeroU32;
use std::time::Duration;

use shardlimit::{Algorithm, Cluster, Counter, LeaseLimiter, Lock, Quota, RateLimiter};

use crate::args::Args;
use crate::drive::Reply;

/// One primitive under test, driven by the library and (where possible)
/// raw.
#[derive(Clone)]
pub(crate) enum Target {
    Limiter(RateLimiter),
    Lock(Lock),
    Lease(LeaseLimiter),
    Counter(Counter),
}

/// The HTTP layer (feature `tower`) and the limiter it wraps, as two calls.
#[cfg(feature = "tower")]
pub(crate) mod http_layer {
    use std::convert::Infallible;

    use shardlimit::RateLimiter;
    use shardlimit::tower::{HeaderKey, RateLimitLayer};
    use tower::{Layer, ServiceExt, service_fn};

    use crate::drive::Reply;

    #[allow(clippy::type_complexity)]
    pub(crate) fn calls(
        limiter: RateLimiter,
    ) -> (
        impl Fn(&[u64]) -> futures::future::BoxFuture<'static, Reply> + Clone + Send + 'static,
        impl Fn(&[u64]) -> futures::future::BoxFuture<'static, Reply> + Clone + Send + 'static,
    ) {
        let service = RateLimitLayer::new(limiter.clone(), HeaderKey::from_static("x-key")).layer(
            service_fn(|_req: http::Request<String>| async {
                Ok::<_, Infallible>(http::Response::new(String::new()))
            }),
        );
        let through_layer = move |k: &[u64]| -> futures::future::BoxFuture<'static, Reply> {
            let (service, k) = (service.clone(), k[0]);
            Box::pin(async move {
                let response = async {
                    let request = http::Request::builder()
                        .header("x-key", format!("s{k}"))
                        .body(String::new())
                        .map_err(|e| e.to_string())?;
                    let response = service.oneshot(request).await.map_err(|e| e.to_string())?;
                    match response.status().as_u16() {
                        200 | 429 => Ok(()),
                        other => Err(format!("status {other}")),
                    }
                };
                Reply::of(response.await)
            })
        };
        // Boxed too, so both sides pay the same for the harness.
        let direct = move |k: &[u64]| -> futures::future::BoxFuture<'static, Reply> {
            let (limiter, k) = (limiter.clone(), k[0]);
            Box::pin(async move { Reply::decision(limiter.check(format!("s{k}")).await.as_ref()) })
        };
        (through_layer, direct)
    }
}

/// `--limit` per `--period-secs`, within what algorithm `a` accepts.
pub(crate) fn quota(args: &Args, a: Algorithm) -> Quota {
    // The sliding log refuses limits above its maximum (128); spread over
    // the bench's many subjects that still never denies.
    Quota::with_period(
        NonZeroU32::new(args.limit).unwrap().min(a.max_limit()),
        Duration::from_secs(args.period_secs),
    )
}

pub(crate) fn target(cluster: &Cluster, args: &Args) -> Target {
    let limiter = |a: Algorithm| {
        Target::Limiter(
            RateLimiter::builder(cluster, "bench", quota(args, a))
                .algorithm(a)
                .build()
                .unwrap(),
        )
    };
    match args.kind.as_str() {
        "lock" => Target::Lock(
            Lock::builder(cluster, "bench")
                .ttl(Duration::from_secs(60))
                .build()
                .unwrap(),
        ),
        "lease" => Target::Lease(
            LeaseLimiter::builder(cluster, "bench")
                .max_leases(NonZeroU32::new(1_000_000).unwrap())
                .lease_ttl(Duration::from_secs(60))
                .build()
                .unwrap(),
        ),
        "counter" => Target::Counter(
            Counter::builder(cluster, "bench")
                .idle_ttl(Duration::from_secs(600))
                .build()
                .unwrap(),
        ),
        kind => {
            limiter(Algorithm::from_kind(kind).unwrap_or_else(|| panic!("unknown kind {kind:?}")))
        }
    }
}

/// One library operation on subject `k`.
pub(crate) async fn lib_call(target: Target, k: u64) -> Reply {
    let subject = format!("s{k}");
    match target {
        Target::Limiter(l) => Reply::decision(l.check(&subject).await.as_ref()),
        Target::Lock(l) => Reply::of(match l.try_acquire(&subject).await {
            Ok(Some(guard)) => guard.release().await,
            Ok(None) => Ok(false),
            Err(e) => Err(e),
        }),
        Target::Lease(l) => match l.try_acquire(&subject).await {
            Ok(Some(lease)) => {
                let bypassed = lease.bypassed().is_some();
                let mut reply = Reply::of(lease.release().await);
                reply.outcome.bypassed += u64::from(bypassed && reply.error.is_none());
                reply
            }
            result => Reply::of(result),
        },
        Target::Counter(c) => Reply::of(c.add(&subject, 1).await),
    }
}

/// Like `lib_call`, but leaves state behind (locks and leases are not
/// released) so the memory they take can be measured.
pub(crate) async fn lib_call_keep(target: Target, k: u64) -> Result<(), String> {
    let subject = format!("s{k}");
    match target {
        Target::Limiter(l) => l.check(&subject).await.map(drop).map_err(|e| e.to_string()),
        Target::Lock(l) => l
            .try_acquire(&subject)
            .await
            .map(drop)
            .map_err(|e| e.to_string()),
        Target::Lease(l) => l
            .try_acquire(&subject)
            .await
            .map(drop)
            .map_err(|e| e.to_string()),
        Target::Counter(c) => c
            .add(&subject, 1)
            .await
            .map(drop)
            .map_err(|e| e.to_string()),
    }
}
