//! A sparse filter fills its first page: the limiters view keeps walking
//! (rounds of SCANs per master) until its page is full, the namespace is
//! walked or its time budget is spent, and says how much it walked. An
//! exact subject typed in the filter leads to the subject's page, and the
//! overview's kind/name links open a page with rows on it.

use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use fantoccini::Locator;
use shardlimit::admin::{MAX_PAGE_ROUNDS, PAGE_SCANS_PER_MASTER};
use shardlimit::{Algorithm, Quota, RateLimiter};
use shardlimit_web::WebOptions;

use super::browser::Browser;
use super::{ONE_AT_A_TIME, bulk, common, follow, limits_app, settle, texts};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sparse_filter_fills_its_first_page_and_says_how_far_it_walked() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let cluster = common::cluster("web-walk").await;
    let bulk_subjects = bulk::populate(&cluster, 20_000).await;
    let sparse = RateLimiter::builder(
        &cluster,
        "sparse",
        Quota::per_hour(NonZeroU32::new(10).unwrap()),
    )
    .algorithm(Algorithm::FixedWindow)
    .build()
    .unwrap();
    let mut expected: Vec<String> = (0..5).map(|i| format!("s{i}")).collect();
    for s in &expected {
        assert!(sparse.check(s).await.unwrap().allowed);
    }
    expected.sort();
    // SCAN walks a master's whole keyspace (MATCH filters what it
    // returns), and this cluster also holds other tests' keys: a COUNT of
    // 1,000 lets the page's 128 SCANs per master cover them all, where the
    // default 100 covers 12,800 buckets per master. The budget is the
    // bound a debug build on a machine shared with compilers needs (the
    // time is printed); the rounds' bound is what is asserted.
    let options = WebOptions::builder()
        .scan_count(1000)
        .page_budget(Duration::from_secs(3))
        .build()
        .unwrap();
    let base = limits_app(&cluster, options).await;
    let b = Browser::start().await;

    // 5 limiters among 20,005 keys: the first page holds all of them. The
    // least of a few tries bounds this page's own SCANs (other clients only
    // add to the masters' counts).
    let bound = u64::from(MAX_PAGE_ROUNDS * PAGE_SCANS_PER_MASTER);
    let mut least: Option<u64> = None;
    let mut server = Duration::MAX;
    let mut clean = 0;
    for _ in 0..5 {
        let before = bulk::scan_calls().await;
        let started = Instant::now();
        b.client
            .goto(&format!("{base}/limiters?kind=fw&name=sparse"))
            .await
            .unwrap();
        let browser = started.elapsed();
        let after = bulk::scan_calls().await;
        let most = after.iter().map(|(m, n)| n - before[m]).max().unwrap();
        least = Some(least.map_or(most, |l| l.min(most)));
        let source = b.client.source().await.unwrap();
        let mut seen = bulk::subjects_in(&source);
        seen.sort();
        let progress = texts(&b, "#progress").await;
        let cost = texts(&b, "#cost").await.remove(0);
        // A master that fails (a timeout while the other tests load the
        // cluster) stops the page, which says so: try again.
        let failed = texts(&b, ".banner.bad").await;
        if !failed.is_empty() {
            eprintln!(
                "a master failed during the page, tried again: {failed:?} {progress:?} {cost}"
            );
            continue;
        }
        clean += 1;
        assert_eq!(
            seen, expected,
            "the first page holds every match: {progress:?} {cost}"
        );
        assert_eq!(
            progress,
            ["Page 1 · walked 100% of the namespace"],
            "{cost}"
        );
        b.client.find(Locator::Css("#end")).await.unwrap();
        let took = bulk::parse_duration(cost.rsplit("; ").next().unwrap());
        server = server.min(took);
        eprintln!("sparse filter over 20,005 keys: {cost} ({browser:?} in the browser)");
    }
    assert!(clean > 0, "every try had a master fail");
    let least = least.unwrap();
    eprintln!(
        "sparse filter over 20,005 keys: at most {least} SCANs on a master (bound {bound}), {server:?} on the server at best"
    );
    assert!(least <= bound, "{least} SCANs on a master, over {bound}");
    assert!(
        server < Duration::from_secs(3),
        "{server:?} on the server for one page"
    );
    b.screenshot("limiters-sparse").await;

    // A node's address stays on one line, even in a narrow window (the
    // monospace cells break anywhere else).
    b.client.set_window_size(480, 900).await.unwrap();
    b.client.refresh().await.unwrap();
    let height = |css: &'static str| {
        let b = &b;
        async move {
            let e = b.client.find(Locator::Css(css)).await.unwrap();
            e.rectangle().await.unwrap().3
        }
    };
    let (node, line) = (height("span.node").await, height("a.subject").await);
    assert!(
        node < line * 1.5,
        "the node's address wraps: {node} px high, a line {line} px"
    );
    b.client.set_window_size(1280, 900).await.unwrap();

    // A dense filter: page numbers, and a walk that is under way.
    b.client
        .goto(&format!("{base}/limiters?kind=fw&name=bulk"))
        .await
        .unwrap();
    let first = texts(&b, "#progress").await.remove(0);
    assert!(first.starts_with("Page 1 · walked "), "{first}");
    assert!(!first.contains("100%"), "{first}");
    follow(&b, "a#next").await;
    let second = texts(&b, "#progress").await.remove(0);
    assert!(second.starts_with("Page 2 · walked "), "{second}");

    // An exact subject typed in the filter leads to its page; beside a kind
    // and name, the list offers that page.
    b.client
        .goto(&format!("{base}/limiters?subject=s3"))
        .await
        .unwrap();
    settle(&b, "#subject").await;
    let url = b.client.current_url().await.unwrap();
    assert!(url.path().ends_with("/subject"), "{url}");
    assert_eq!(texts(&b, "#subject").await, ["s3"]);
    b.client
        .goto(&format!("{base}/limiters?kind=fw&name=sparse&subject=s3"))
        .await
        .unwrap();
    follow(&b, "#exact a").await;
    assert_eq!(texts(&b, "#subject").await, ["s3"]);

    // The overview's kind/name link (once its count has walked the
    // namespace) opens a page with the rows on it.
    let link = "a[href*='name=sparse']";
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        b.client.goto(&base).await.unwrap();
        if b.client.find(Locator::Css(link)).await.is_ok() {
            break;
        }
        assert!(Instant::now() < deadline, "the overview never counted");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    follow(&b, link).await;
    let source = b.client.source().await.unwrap();
    let mut seen = bulk::subjects_in(&source);
    seen.sort();
    assert_eq!(seen, expected, "the overview's link shows the rows");

    b.close().await;
    bulk::delete(&cluster, &bulk_subjects).await;
}
