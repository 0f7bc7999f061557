//! The Limits page in a real browser: headless Chromium, driven through
//! chromedriver, against the six-node cluster, each test in its own
//! namespace. Screenshots of every page go to `target/web/`.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]

#[path = "../common/mod.rs"]
mod common;

mod actions;
mod browser;
mod bulk;
mod cli;
mod cost;
mod find;
mod headroom;
mod hosts;
mod scale;
mod settings;
mod throttled;
mod walk;
mod warning;

use std::num::NonZeroU32;
use std::time::Duration;

use fantoccini::Locator;
use shardlimit::keys::{KeyId, slot};
use shardlimit::{Algorithm, Cluster, Counter, Lock, Quota, RateLimiter};
use shardlimit_web::{WebOptions, router};

use browser::Browser;

/// The browser tests take turns: each counts SCAN calls on the masters and
/// times pages, which the other's walks would disturb.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Serves `app` on a free loopback port; returns its base URL.
async fn serve(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

/// The Limits page nested under `/limits` in an app of the test's own.
async fn limits_app(cluster: &Cluster, options: WebOptions) -> String {
    let app = axum::Router::new().nest("/limits", router(cluster, options));
    format!("{}/limits", serve(app).await)
}

/// The Limits page with its write actions on, as [`limits_app`].
async fn writable_app(cluster: &Cluster) -> String {
    limits_app(cluster, WebOptions::builder().writes(true).build().unwrap()).await
}

/// A raw HTTP request to the test server: (status, body).
async fn http(base: &str, method: &str, path: &str, form: &str) -> (u16, String) {
    http_to(base, None, method, path, form).await
}

/// [`http`] with `Host: host` (the server's address when `None`).
async fn http_to(
    base: &str,
    host: Option<&str>,
    method: &str,
    path: &str,
    form: &str,
) -> (u16, String) {
    let rest = base.trim_start_matches("http://");
    let (addr, prefix) = rest.split_once('/').map_or((rest, ""), |(h, p)| (h, p));
    let host = host.unwrap_or(addr);
    let request = format!(
        "{method} /{prefix}{path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{form}",
        form.len()
    );
    raw(addr, &request).await
}

/// Sends `request` as it is to `addr`: the whole response, headers
/// included.
async fn exchange(addr: &str, request: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response
}

/// Sends `request` as it is to `addr`: (status, body).
async fn raw(addr: &str, request: &str) -> (u16, String) {
    let response = exchange(addr, request).await;
    let status = response[9..12].parse().unwrap();
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

async fn texts(b: &Browser, css: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in b.client.find_all(Locator::Css(css)).await.unwrap() {
        out.push(e.text().await.unwrap());
    }
    out
}

/// Waits for `css` to appear: the page a click navigated to has loaded.
async fn settle(b: &Browser, css: &str) {
    b.client
        .wait()
        .at_most(Duration::from_secs(20))
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css} did not appear: {e}"));
}

/// Waits until the browser's address holds `part`: a form submitted by a
/// click, which `follow` cannot load by its address.
async fn arrive(b: &Browser, part: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let url = b.client.current_url().await.unwrap();
        if url.as_str().contains(part) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still at {url}, no {part} in it 20 s after the click"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Follows the link `css` by loading its address: `goto` returns once the
/// new page has loaded, so nothing reads the old one by mistake (a click
/// may return before the navigation it starts).
async fn follow(b: &Browser, css: &str) {
    let link = b
        .client
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("no {css}: {e}"));
    let href = link
        .attr("href")
        .await
        .unwrap()
        .expect("a link has an href");
    let here = b.client.current_url().await.unwrap();
    b.client
        .goto(here.join(&href).unwrap().as_str())
        .await
        .unwrap();
}

/// Pages from the current limiters page to the end of the walk, collecting
/// the subjects shown.
async fn page_to_the_end(b: &Browser) -> Vec<String> {
    let mut subjects = Vec::new();
    loop {
        subjects.extend(texts(b, "table#limiters a.subject").await);
        match b.client.find(Locator::Css("a#next")).await {
            Ok(_) => follow(b, "a#next").await,
            Err(_) => {
                b.client.find(Locator::Css("#end")).await.unwrap();
                return subjects;
            }
        }
    }
}

const XSS: &str = "<script>alert(1)</script>";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overview_filter_follow_reset_and_escape_in_a_browser() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let cluster = common::cluster("web").await;
    let ns = cluster.namespace().to_owned();
    let hour = Duration::from_secs(3600);
    // Fixed windows line up on multiples of the period since the epoch: an
    // hourly window ends at every full hour, and a run across one lost its
    // counts mid-test. A window of the longest period (366 days) ends
    // during a run about once in a million.
    let api_quota = Quota::with_period(
        NonZeroU32::new(10).unwrap(),
        Duration::from_secs(366 * 86_400),
    );
    let api = RateLimiter::builder(&cluster, "api", api_quota)
        .algorithm(Algorithm::FixedWindow)
        .build()
        .unwrap();
    for i in 1..=5 {
        assert!(api.check(format!("user:{i}")).await.unwrap().allowed);
    }
    let gcra = RateLimiter::builder(
        &cluster,
        "login",
        Quota::per_hour(NonZeroU32::new(10).unwrap()),
    )
    .algorithm(Algorithm::Gcra)
    .build()
    .unwrap();
    assert!(gcra.check(XSS).await.unwrap().allowed);
    let lock = Lock::builder(&cluster, "job").ttl(hour).build().unwrap();
    let guard = lock.try_acquire("user:1").await.unwrap().unwrap();
    let billing = Counter::builder(&cluster, "billing")
        .idle_ttl(hour)
        .build()
        .unwrap();
    billing.add("user:2", 30).await.unwrap();
    // A key under the namespace that is not shardlimit's, for the audit.
    let stranger = format!("{ns}:not-ours");
    let _: () = common::on_owner(
        stranger.as_bytes(),
        redis::cmd("SET")
            .arg(&stranger)
            .arg("x")
            .arg("PX")
            .arg(600_000),
    )
    .await;

    let options = WebOptions::builder()
        .writes(true)
        .quota("api", api_quota)
        .first_wait(Duration::from_secs(30))
        .build()
        .unwrap();
    let base = limits_app(&cluster, options).await;
    let b = Browser::start().await;

    // Overview: the masters, and the counts per kind and name.
    b.client.goto(&base).await.unwrap();
    assert_eq!(b.client.title().await.unwrap(), "Overview · shardlimit");
    let masters = common::masters().await;
    assert_eq!(
        texts(&b, "table#masters tbody tr").await.len(),
        masters.len()
    );
    let counts = texts(&b, "table#counts tbody tr").await;
    for row in [
        "fw api 5",
        "gcra login 1",
        "lock job 1",
        "counter billing 1",
        "Total 8",
    ] {
        assert!(
            counts
                .iter()
                .any(|r| r.split_whitespace().collect::<Vec<_>>().join(" ") == row),
            "{row} in {counts:?}"
        );
    }
    b.screenshot("overview").await;

    // Limiters, filtered by kind and name through the form.
    b.client.goto(&format!("{base}/limiters")).await.unwrap();
    b.client
        .find(Locator::Css("select[name=kind]"))
        .await
        .unwrap()
        .select_by_value("fw")
        .await
        .unwrap();
    b.client
        .find(Locator::Css("input[name=name]"))
        .await
        .unwrap()
        .send_keys("api")
        .await
        .unwrap();
    b.click("form.filters button").await;
    // The form's GET builds the URL; wait for it, then load it whole.
    arrive(&b, "kind=fw").await;
    let filtered = b.client.current_url().await.unwrap();
    b.client.goto(filtered.as_str()).await.unwrap();
    let url = b.client.current_url().await.unwrap();
    assert!(
        url.as_str().contains("kind=fw") && url.as_str().contains("name=api"),
        "{url}"
    );
    b.screenshot("limiters").await;
    let mut subjects = page_to_the_end(&b).await;
    subjects.sort();
    assert_eq!(subjects, ["user:1", "user:2", "user:3", "user:4", "user:5"]);

    // Follow a subject: its slot, its master, everything it has.
    b.client
        .goto(&format!(
            "{base}/limiters?kind=fw&name=api&subject=user%3A1"
        ))
        .await
        .unwrap();
    let mut link = None;
    while link.is_none() {
        for a in b.client.find_all(Locator::Css("a.subject")).await.unwrap() {
            if a.text().await.unwrap() == "user:1" {
                link = Some(a);
            }
        }
        if link.is_none() {
            follow(&b, "a#next").await;
        }
    }
    link.unwrap().click().await.unwrap();
    settle(&b, "#slot").await;
    let key = cluster
        .keys()
        .key("user:1", &KeyId::new("fw", "api").unwrap())
        .unwrap();
    let the_slot = slot(&key);
    assert_eq!(b.text("#slot").await, the_slot.to_string());
    assert_eq!(b.text("#node").await, common::owner(the_slot).await.addr);
    let rows = texts(&b, "table#primitives tbody tr").await;
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(
        rows.iter().any(|r| r.starts_with("fw api")
            && r.contains("9/10 remaining")
            && r.contains("1 used this window")),
        "{rows:?}"
    );
    assert!(
        rows.iter()
            .any(|r| r.starts_with("lock job") && r.contains("held, fencing token")),
        "{rows:?}"
    );
    b.screenshot("subject").await;

    // The find box on every page: straight to a subject's page.
    b.client
        .find(Locator::Css("form.find input[name=subject]"))
        .await
        .unwrap()
        .send_keys("user:2")
        .await
        .unwrap();
    b.click("form.find button").await;
    // The page it leaves has a #slot too: wait for the new address first
    // (a click returns before the navigation it starts; a clean-clone CI
    // run read user:1's page still).
    arrive(&b, "/subject?subject=user%3A2").await;
    settle(&b, "#slot").await;
    let rows = texts(&b, "table#primitives tbody tr").await;
    assert!(
        rows.len() == 2 && rows.iter().any(|r| r.contains("billing")),
        "user:2's window and counter: {rows:?}"
    );
    b.client
        .goto(&format!("{base}/subject?subject=user%3A1"))
        .await
        .unwrap();
    settle(&b, "#slot").await;

    // Reset the fixed window, through its confirmation.
    let reset_fw = b
        .client
        .find(Locator::Css(
            "table#primitives tbody tr:first-child a.reset",
        ))
        .await
        .unwrap();
    reset_fw.click().await.unwrap();
    settle(&b, "ul#keys").await;
    assert!(
        texts(&b, "ul#keys li")
            .await
            .contains(&String::from_utf8(key.clone()).unwrap())
    );
    b.screenshot("reset-confirm").await;
    b.click("form#confirm button").await;
    settle(&b, "#deleted").await;
    assert_eq!(
        b.text("#deleted").await,
        "Deleted 1 key: fw api of subject user:1."
    );
    assert_eq!(
        common::pttl(&key).await,
        -2,
        "the limiter is gone from Redis"
    );
    b.client
        .goto(&format!("{base}/subject?subject=user%3A1"))
        .await
        .unwrap();
    let rows = texts(&b, "table#primitives tbody tr").await;
    assert_eq!(rows.len(), 1, "only the lock is left: {rows:?}");

    // A held lock is refused unless forced, with its own confirmation.
    b.client
        .goto(&format!("{base}/reset?subject=user%3A1&kind=lock&name=job"))
        .await
        .unwrap();
    assert!(b.text("#in-use").await.contains("lock job is held"));
    assert!(
        b.client.find(Locator::Css("form#confirm")).await.is_err(),
        "no way to delete a held lock without forcing"
    );
    b.screenshot("reset-refused").await;
    b.click("a#force").await;
    settle(&b, "form#confirm button").await;
    b.click("form#confirm button").await;
    settle(&b, "#deleted").await;
    assert!(b.text("#deleted").await.starts_with("Deleted 2 keys"));
    drop(guard);

    // The XSS subject is text: no alert, the markup escaped.
    b.client
        .goto(&format!("{base}/limiters?subject=%3Cscript%3E*"))
        .await
        .unwrap();
    let shown = loop {
        let found = texts(&b, "table#limiters a.subject").await;
        if !found.is_empty() {
            break found;
        }
        follow(&b, "a#next").await;
    };
    assert_eq!(shown, [XSS]);
    assert!(b.client.get_alert_text().await.is_err(), "no script ran");
    assert!(
        b.client
            .source()
            .await
            .unwrap()
            .contains("&lt;script&gt;alert(1)&lt;/script&gt;")
    );
    b.screenshot("xss").await;
    b.click("a.subject").await;
    settle(&b, "#subject").await;
    assert_eq!(b.text("#subject").await, XSS);
    assert!(b.client.get_alert_text().await.is_err(), "no script ran");

    // The audit: the stranger, counted on its master; and a counter written
    // without a TTL (by hand, or with GETSET).
    let immortal = format!("{ns}:{{user:3}}:counter:legacy");
    let _: () = common::on_owner(
        immortal.as_bytes(),
        redis::cmd("SET").arg(&immortal).arg("5"),
    )
    .await;
    b.client
        .goto(&format!("{base}/audit?refresh=1"))
        .await
        .unwrap();
    settle(&b, "table#unrecognized").await;
    let unknown = texts(&b, "table#unrecognized tbody tr").await;
    let owner = common::owner(slot(stranger.as_bytes())).await.addr;
    assert_eq!(unknown, [format!("{stranger} {owner}")]);
    b.screenshot("audit").await;
    // The key without a TTL links to its subject's page (it linked nowhere).
    let without_ttl = texts(&b, "table#immortal tbody tr a.subject").await;
    assert_eq!(without_ttl, std::slice::from_ref(&immortal));
    follow(&b, "table#immortal tbody tr a.subject").await;
    settle(&b, "h1").await;
    let url = b.client.current_url().await.unwrap();
    assert!(url.as_str().contains("subject=user%3A3"), "{url}");
    let rows = texts(&b, "table tbody tr").await;
    assert!(rows.iter().any(|r| r.contains("legacy")), "{rows:?}");
    let _: i64 = common::on_owner(immortal.as_bytes(), redis::cmd("DEL").arg(&immortal)).await;

    // The JSON API says the same.
    let json = b
        .json(&format!("{base}/api/subject?subject=user%3A2"))
        .await;
    assert_eq!(json["primitives"][0]["kind"], "counter");
    assert_eq!(json["primitives"][0]["state"]["value"], 30);
    b.close().await;

    // No token, a forged token, a token for another action: refused.
    let (status, _) = http(
        &base,
        "POST",
        "/reset",
        "subject=user%3A2&kind=counter&name=billing&force=1",
    )
    .await;
    assert_eq!(status, 403);
    let (status, plan) = http(
        &base,
        "GET",
        "/api/reset?subject=user%3A2&kind=counter&name=billing",
        "",
    )
    .await;
    assert_eq!(status, 200);
    let plan: serde_json::Value = serde_json::from_str(&plan).unwrap();
    let token = plan["token"].as_str().unwrap();
    assert_eq!(plan["in_use"][0], "counter billing holds 30 (not drained)");
    let forced = format!("subject=user%3A2&kind=counter&name=billing&force=1&token={token}");
    let (status, body) = http(&base, "POST", "/api/reset", &forced).await;
    assert_eq!(
        (status, body.contains("another action")),
        (403, true),
        "{body}"
    );
    let plain = format!("subject=user%3A2&kind=counter&name=billing&token={token}");
    let (status, body) = http(&base, "POST", "/api/reset", &plain).await;
    assert_eq!(
        status, 409,
        "a counter with a value is refused unless forced: {body}"
    );
    assert_eq!(billing.get("user:2").await.unwrap(), Some(30));
    // A token is good once: the same POST again is refused as such.
    let (status, body) = http(&base, "POST", "/api/reset", &plain).await;
    assert_eq!(
        (status, body.contains("already used")),
        (403, true),
        "{body}"
    );
    // A write another site's page makes (its Origin) is refused before its
    // token is read; this page's own Origin goes on to the token.
    let (_, plan) = http(
        &base,
        "GET",
        "/api/reset?subject=user%3A2&kind=counter&name=billing",
        "",
    )
    .await;
    let plan: serde_json::Value = serde_json::from_str(&plan).unwrap();
    let fresh = format!(
        "subject=user%3A2&kind=counter&name=billing&token={}",
        plan["token"].as_str().unwrap()
    );
    let rest = base.trim_start_matches("http://");
    let (addr, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let post = |origin: &str| {
        format!(
            "POST /{prefix}/api/reset HTTP/1.1\r\nHost: {addr}\r\nOrigin: {origin}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{fresh}",
            fresh.len()
        )
    };
    for foreign in [
        "http://evil.example",
        "null",
        &format!("http://{addr}.evil.example"),
    ] {
        let (status, body) = raw(addr, &post(foreign)).await;
        assert_eq!(
            (status, body.contains("another site")),
            (403, true),
            "Origin {foreign}: {body}"
        );
    }
    let (status, body) = raw(addr, &post(&format!("http://{addr}"))).await;
    assert_eq!(status, 409, "its own Origin reaches the reset: {body}");

    // Read-only by default: no confirmation, no POST.
    let read_only = limits_app(&cluster, WebOptions::default()).await;
    assert_eq!(
        http(&read_only, "GET", "/reset?subject=user%3A2", "")
            .await
            .0,
        403
    );
    assert_eq!(http(&read_only, "POST", "/reset", &plain).await.0, 403);
    assert_eq!(http(&read_only, "GET", "/limiters", "").await.0, 200);
    // An unknown kind is refused at once, naming the kinds there are,
    // instead of a walk of the whole namespace for an empty page.
    let (status, body) = http(&read_only, "GET", "/api/limiters?kind=gcrq", "").await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("unknown kind") && body.contains("gcrq") && body.contains("gcra"),
        "{body}"
    );

    let _: () = common::on_owner(stranger.as_bytes(), redis::cmd("DEL").arg(&stranger)).await;
    common::assert_every_key_has_ttl(&ns).await;
}
