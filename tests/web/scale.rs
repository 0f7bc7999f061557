//! The Limits page at scale: 100,000 limiters paged through exactly once
//! with a subject page of at most 10 Redis calls (in the suite), and every
//! page at 1,000,000 limiters, timed, its Redis calls counted and
//! screenshotted (`#[ignore]`d: run by hand, its table goes in the README).

use std::num::{NonZeroU32, NonZeroUsize};
use std::time::{Duration, Instant};

use shardlimit::{Algorithm, Cluster, Counter, Lock, Quota, RateLimiter, lock::LockGuard};
use shardlimit_web::WebOptions;

use super::browser::Browser;
use super::cost::{self, Cost};
use super::{ONE_AT_A_TIME, bulk, common, http, limits_app};

/// The most Redis calls a subject's page may cost, at any cluster size
/// (issue 26): it reads the subject's slot, never the whole master.
const SUBJECT_PAGE_CALLS: u64 = 10;

/// The subject page of a subject with a limiter among `n` others costs at
/// most [`SUBJECT_PAGE_CALLS`], counted by the nodes themselves.
async fn assert_subject_page_bound(b: &Browser, base: &str, subject: &str) -> Cost {
    // A subject's page reads from the master owning its slot.
    let mut counter = cost::Counter::masters().await;
    let cost = counter
        .page(b, &format!("{base}/subject?subject={subject}"), 5)
        .await;
    let shown = super::texts(b, "#subject").await;
    assert_eq!(shown, [subject], "the page shows the subject");
    assert!(
        cost.calls() <= SUBJECT_PAGE_CALLS,
        "a subject page cost {} Redis calls ({})",
        cost.calls(),
        cost.by_command()
    );
    cost
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_limiters_page_through_exactly_once() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let cluster = common::cluster("web100k").await;
    let subjects = bulk::populate(&cluster, 100_000).await;
    let options = WebOptions::builder()
        .page_size(NonZeroUsize::new(1000).unwrap())
        .build()
        .unwrap();
    let base = limits_app(&cluster, options).await;
    let b = Browser::start().await;
    let report = bulk::page_through(&b, &base).await;
    bulk::assert_exactly_once(&report.seen, &subjects);
    let server = report.median_server();
    eprintln!(
        "100,000 limiters: {} pages of about 1000 rows, median page {server:?} on the server, {:?} in the browser (request to rendered table), {} SCAN calls per page at most",
        report.pages,
        report.median_page(),
        report.max_scan_calls
    );
    assert!(
        server < Duration::from_millis(500),
        "median page {server:?} on the server"
    );
    b.screenshot("limiters-100k").await;
    bulk::assert_scan_bound(&b, &base).await;
    let subject = assert_subject_page_bound(&b, &base, "b4242").await;
    eprintln!(
        "subject page at 100,000 limiters: {} Redis calls ({}), {:?} in the browser",
        subject.calls(),
        subject.by_command(),
        subject.took
    );
    b.close().await;
    bulk::delete(&cluster, &subjects).await;
}

/// Polls the JSON page `path` until `ready` holds (a background walk has
/// finished), for at most `bound`.
async fn until_ready(
    base: &str,
    path: &str,
    bound: Duration,
    ready: fn(&serde_json::Value) -> bool,
) {
    let started = Instant::now();
    loop {
        let (status, body) = http(base, "GET", path, "").await;
        assert_eq!(status, 200, "{body}");
        let json: serde_json::Value = serde_json::from_str(&body).unwrap();
        if ready(&json) {
            return;
        }
        assert!(started.elapsed() < bound, "{path} not ready: {body}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A namespace as an incident finds it: a million fixed-window limiters,
/// a throttled subject, an override and a block, a held lock, a counter,
/// a key without a TTL. Returns what must be cleaned up, and the lock's
/// guard.
async fn incident(cluster: &Cluster) -> (Vec<String>, Vec<u8>, LockGuard) {
    let subjects = bulk::populate(cluster, 1_000_000).await;
    let api = RateLimiter::builder(cluster, "api", Quota::per_hour(NonZeroU32::new(5).unwrap()))
        .algorithm(Algorithm::Gcra)
        .throttled_window(Duration::from_secs(300))
        .build()
        .unwrap();
    for _ in 0..20 {
        let _ = api.check("b4242").await.unwrap();
    }
    api.set_override(
        "b4242",
        Quota::per_hour(NonZeroU32::new(50).unwrap()),
        Duration::from_secs(3600),
    )
    .await
    .unwrap();
    api.block("b777", Duration::from_secs(3600)).await.unwrap();
    let lock = Lock::builder(cluster, "export")
        .ttl(Duration::from_secs(3600))
        .build()
        .unwrap();
    let guard = lock.try_acquire("nightly").await.unwrap().unwrap();
    let billing = Counter::builder(cluster, "billing")
        .idle_ttl(Duration::from_secs(3600))
        .build()
        .unwrap();
    billing.add("b4242", 30).await.unwrap();
    let immortal = format!("{}:{{b9}}:fw:legacy", cluster.namespace()).into_bytes();
    let _: () = common::on_owner(&immortal, redis::cmd("SET").arg(&immortal).arg(1)).await;
    // The throttled view reads what the limiter published.
    tokio::time::sleep(Duration::from_secs(6)).await;
    (subjects, immortal, guard)
}

/// Every page at 1,000,000 limiters: its time on the server (a raw HTTP
/// request, median of 5) and in the browser (median of 3), the Redis
/// commands it cost (the least of 3, from the nodes' own
/// counts), and a screenshot as `target/web/1m-<page>.png`. Prints the
/// table the README's Limits page section gives. The million keys are
/// deleted also when the test fails.
///
/// ```text
/// cargo test --all-features --test web -- --ignored --nocapture every_page_at_a_million_limiters
/// ```
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a million limiters take minutes: run by hand for the README's table"]
async fn every_page_at_a_million_limiters() {
    use futures::FutureExt;
    let _turn = ONE_AT_A_TIME.lock().await;
    let cluster = common::cluster("web1m").await;
    let (subjects, immortal, guard) = incident(&cluster).await;
    let run = std::panic::AssertUnwindSafe(every_page(&cluster, &immortal))
        .catch_unwind()
        .await;
    guard.release().await.unwrap();
    let _: () = common::on_owner(&immortal, redis::cmd("DEL").arg(&immortal)).await;
    bulk::delete(&cluster, &subjects).await;
    if let Err(panic) = run {
        std::panic::resume_unwind(panic);
    }
}

async fn every_page(cluster: &Cluster, immortal: &[u8]) {
    let options = WebOptions::builder()
        .writes(true)
        .first_wait(Duration::from_millis(100))
        .count_refresh(Duration::from_secs(3600))
        .build()
        .unwrap();
    let base = limits_app(cluster, options).await;
    let b = Browser::start().await;

    // The overview's counts and the audit are background walks: started
    // by a first view, timed here, and shown from then on.
    let walk = Instant::now();
    until_ready(&base, "/api/overview", Duration::from_secs(300), |j| {
        j["counts"]["total"].is_u64()
    })
    .await;
    let count_walk = walk.elapsed();
    let walk = Instant::now();
    until_ready(&base, "/api/audit", Duration::from_secs(300), |j| {
        j["audit"]["scanned"].is_u64()
    })
    .await;
    let audit_walk = walk.elapsed();

    let pages = [
        // The overview answers at the mount point itself.
        ("overview", String::new()),
        ("limiters", "/limiters".to_owned()),
        (
            "limiters-filtered",
            "/limiters?kind=fw&name=bulk".to_owned(),
        ),
        (
            "limiters-rare-name",
            "/limiters?kind=lock&name=export".to_owned(),
        ),
        ("subject", "/subject?subject=b123456".to_owned()),
        ("subject-busy", "/subject?subject=b4242".to_owned()),
        ("subject-blocked", "/subject?subject=b777".to_owned()),
        ("throttled", "/throttled".to_owned()),
        (
            "limiters-sparse",
            "/limiters?kind=gcra&name=api&subject=b4*".to_owned(),
        ),
        ("audit", "/audit".to_owned()),
        ("reset-confirm", "/reset?subject=b4242".to_owned()),
        (
            "unblock-confirm",
            "/unblock?subject=b777&kind=gcra&name=api".to_owned(),
        ),
        (
            "clear-override-confirm",
            "/clear-override?subject=b4242&kind=gcra&name=api".to_owned(),
        ),
        (
            "give-ttl-confirm",
            format!(
                "/give-ttl?key_hex={}",
                immortal
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>()
            ),
        ),
    ];
    let mut counter = cost::Counter::new().await;
    let mut table = vec![
        "| Page | Server (median of 5) | Browser (median of 3) | Redis calls (least of 3) | Commands |"
            .to_owned(),
        "|---|---|---|---|---|".to_owned(),
    ];
    for (name, path) in &pages {
        let url = format!("{base}{path}");
        // The server's own time: the page over a raw HTTP request, without
        // the browser's navigation and layout.
        let mut server = Vec::new();
        for _ in 0..5 {
            let sent = Instant::now();
            let (status, _) = http(&base, "GET", path, "").await;
            server.push(sent.elapsed());
            assert_eq!(status, 200, "{url}");
        }
        server.sort();
        let cost = counter.page(&b, &url, 3).await;
        let title = b.client.title().await.unwrap();
        assert!(title.ends_with("· shardlimit"), "{url}: {title:?}");
        b.screenshot(&format!("1m-{name}")).await;
        table.push(format!(
            "| `{}` | {:.1} ms | {:.1} ms | {} | {} |",
            if path.is_empty() { "/" } else { path },
            server[2].as_secs_f64() * 1000.0,
            cost.took.as_secs_f64() * 1000.0,
            cost.calls(),
            cost.by_command()
        ));
        if *name == "overview" {
            // A million with its separators, as an operator reads it.
            let source = b.client.source().await.unwrap();
            assert!(source.contains("1,000,000"), "no 1,000,000 on the overview");
        }
        if *name == "subject" {
            // One limiter among a million: the page reads its slot only.
            assert!(cost.calls() <= SUBJECT_PAGE_CALLS, "{}", cost.by_command());
        }
    }
    eprintln!(
        "1,000,000 limiters; background walks: count {count_walk:?}, audit {audit_walk:?}\n{}",
        table.join("\n")
    );
    b.close().await;
}
