//! A limiter's stages (`src/limit/stages.rs`): one built without any
//! optional stage sends Redis its checks and nothing else — no catalog
//! publication, no report of its denials, no subscription — and each stage
//! turned on shows its own traffic (the control that the test would see
//! it). Watched with `MONITOR` on every master.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::num::NonZeroU32;
use std::time::Duration;

use futures::StreamExt;
use shardlimit::{Quota, RateLimiter};

/// What every master was sent while `work` ran, and for half a second
/// after: the `MONITOR` lines that name `namespace`.
async fn sent_under<F: std::future::Future<Output = ()>>(namespace: &str, work: F) -> Vec<String> {
    let mut streams = Vec::new();
    for master in common::masters().await {
        let client = redis::Client::open(format!("redis://{}", master.addr)).unwrap();
        let monitor = client.get_async_monitor().await.unwrap();
        streams.push(monitor.into_on_message::<String>());
    }
    let mut lines = futures::stream::select_all(streams);
    // Other tests run beside this one, so the masters are never quiet:
    // collect until the work is done and half a second more.
    let work = async {
        work.await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    tokio::pin!(work);
    let mut seen = Vec::new();
    loop {
        tokio::select! {
            () = &mut work => return seen,
            line = lines.next() => match line {
                Some(line) if line.contains(namespace) => seen.push(line),
                Some(_) => {}
                None => panic!("a master's MONITOR connection closed"),
            },
        }
    }
}

/// The lines of `sent` that are not a check of `subject`: a stage's work.
fn beside_checks<'a>(sent: &'a [String], subject: &str) -> Vec<&'a String> {
    let tag = format!("{{{subject}}}");
    sent.iter().filter(|l| !l.contains(&tag)).collect()
}

/// Ten checks of a limit of two a minute (eight denials), then as long as
/// the denials' report takes to be published (every 5 s).
async fn check_and_wait(limiter: &RateLimiter, subject: &str) {
    for _ in 0..10 {
        let _ = limiter.check(subject).await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(6)).await;
}

#[tokio::test]
async fn a_limiter_without_stages_sends_its_checks_and_nothing_else() {
    let cluster = common::cluster("stages").await;
    let namespace = cluster.namespace().to_owned();
    let quota = Quota::per_minute(NonZeroU32::new(2).unwrap());

    let sent = sent_under(&namespace, async {
        let bare = RateLimiter::builder(&cluster, "bare", quota)
            .publish_spec(false)
            .report_throttled(false)
            .build()
            .unwrap();
        check_and_wait(&bare, "bare-subject").await;
    })
    .await;
    let checks = sent.len() - beside_checks(&sent, "bare-subject").len();
    assert!(checks >= 10, "the checks were not seen: {sent:#?}");
    let beside = beside_checks(&sent, "bare-subject");
    assert!(
        beside.is_empty(),
        "a limiter without stages sent: {beside:#?}"
    );

    // The control: the defaults publish the spec to the catalog and report
    // the denials, and a deny cache subscribes to its slots' channels.
    let sent = sent_under(&namespace, async {
        let full = RateLimiter::builder(&cluster, "full", quota)
            .deny_cache_if_built()
            .build()
            .unwrap();
        check_and_wait(&full, "full-subject").await;
    })
    .await;
    let beside = beside_checks(&sent, "full-subject");
    let has = |what: &str| beside.iter().any(|l| l.to_lowercase().contains(what));
    assert!(has("catalog"), "no catalog publication: {beside:#?}");
    assert!(has("throttled"), "no throttled report: {beside:#?}");
    #[cfg(feature = "deny-cache")]
    assert!(
        has("ssubscribe"),
        "the deny cache did not subscribe: {beside:#?}"
    );
}

/// A deny cache where the crate has one (feature `deny-cache`).
trait DenyCacheIfBuilt {
    fn deny_cache_if_built(self) -> Self;
}

impl DenyCacheIfBuilt for shardlimit::limit::RateLimiterBuilder {
    fn deny_cache_if_built(self) -> Self {
        #[cfg(feature = "deny-cache")]
        return self.deny_cache(100);
        #[cfg(not(feature = "deny-cache"))]
        self
    }
}
