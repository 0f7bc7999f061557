//! What a limiter advertises in `RateLimit-Policy` holds: the units it
//! admits in any window of the advertised length never exceed the
//! advertised `q` — for GCRA (a burst, then the rate: `q` is the limit plus
//! the burst less one) and for the sliding log (exact), measured through
//! the layer against the six-node cluster.
//!
//! Timing: only a lower bound of what was admitted in a window is counted
//! (requests sent after the window opened whose replies came before it
//! closed), so a slow machine can make the test weaker, never fail it
//! wrongly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::convert::Infallible;
use std::time::{Duration, Instant};

use http::{Request, Response, StatusCode};
use shardlimit::tower::{HeaderKey, RateLimitLayer};
use shardlimit::{Algorithm, Quota, RateLimiter};
use tower::{Layer, ServiceExt, service_fn};

/// `q` and the window (`w`, or `shardlimit-window-ms` for a period that is
/// not whole seconds) of a one-item `RateLimit-Policy`.
fn advertised(policy: &str) -> (usize, Duration) {
    let param = |name: &str| {
        policy
            .split(';')
            .find_map(|p| p.strip_prefix(&format!("{name}=")))
            .map(|v| v.parse::<u64>().unwrap())
    };
    let window = match (param("w"), param("shardlimit-window-ms")) {
        (Some(s), _) => Duration::from_secs(s),
        (None, Some(ms)) => Duration::from_millis(ms),
        (None, None) => panic!("no window in {policy}"),
    };
    (usize::try_from(param("q").unwrap()).unwrap(), window)
}

/// The most admissions provably inside one window of `window`: for each
/// admission sent at `s`, those sent at or after `s` answered before
/// `s + window` (each was decided between its send and its reply).
fn most_in_a_window(admitted: &mut [(Instant, Instant)], window: Duration) -> usize {
    admitted.sort();
    admitted
        .iter()
        .map(|&(opened, _)| {
            admitted
                .iter()
                .filter(|&&(sent, answered)| sent >= opened && answered < opened + window)
                .count()
        })
        .max()
        .unwrap_or(0)
}

#[tokio::test]
async fn no_window_of_the_advertised_length_admits_more_than_advertised() {
    let cluster = common::cluster("hdr-policy").await;
    let period = Duration::from_millis(600);
    let cases = [
        ("gcra", Algorithm::Gcra, Quota::with_period(3, period)),
        (
            "gcra-b2",
            Algorithm::Gcra,
            Quota::with_period(4, period).allow_burst(2),
        ),
        (
            "gcra-b1",
            Algorithm::Gcra,
            Quota::with_period(3, period).allow_burst(1),
        ),
        ("slog", Algorithm::SlidingLog, Quota::with_period(3, period)),
    ];
    for (name, algorithm, quota) in cases {
        let limiter = RateLimiter::builder(&cluster, name, quota)
            .algorithm(algorithm)
            .build()
            .unwrap();
        let layer = RateLimitLayer::new(limiter, HeaderKey::from_static("x-api-key"));
        let service = layer.layer(service_fn(|_req: Request<String>| async {
            Ok::<_, Infallible>(Response::new(String::new()))
        }));
        // Two clients sharing one key, as fast as they are answered (a
        // little paced), over four periods.
        let until = Instant::now() + 4 * period;
        let mut tasks = Vec::new();
        for _ in 0..2 {
            let service = service.clone();
            tasks.push(tokio::spawn(async move {
                let mut seen = Vec::new();
                while Instant::now() < until {
                    let request = Request::builder()
                        .header("x-api-key", "k-1")
                        .body(String::new())
                        .unwrap();
                    let sent = Instant::now();
                    let response = service.clone().oneshot(request).await.unwrap();
                    let answered = Instant::now();
                    let policy = response.headers()["ratelimit-policy"].to_str().unwrap();
                    seen.push((sent, answered, response.status(), policy.to_owned()));
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                seen
            }));
        }
        let mut seen = Vec::new();
        for task in tasks {
            seen.extend(task.await.unwrap());
        }
        let (q, window) = advertised(&seen[0].3);
        assert_eq!(window, period, "{name}: {}", seen[0].3);
        let mut admitted: Vec<(Instant, Instant)> = seen
            .iter()
            .filter(|s| s.2 == StatusCode::OK)
            .map(|s| (s.0, s.1))
            .collect();
        let most = most_in_a_window(&mut admitted, window);
        assert!(
            most <= q,
            "{name} ({algorithm} {quota:?}): {most} admitted within {window:?}, advertised {}",
            seen[0].3
        );
        // The sequence reached the limit: a denial was seen.
        assert!(
            seen.iter().any(|s| s.2 == StatusCode::TOO_MANY_REQUESTS),
            "{name}: nothing denied"
        );
    }
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}
