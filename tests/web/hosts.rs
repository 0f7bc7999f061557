//! DNS rebinding: a web page the operator visits can rebind its own name
//! to 127.0.0.1, and the browser then sends that name in `Host`. The Limits
//! page answers only to `localhost`, loopback addresses and the names it is
//! given, at any port; any other name gets `421` on every page, with a body
//! saying why — in a forged request and in a browser that resolves a
//! foreign name to this machine.

use shardlimit_web::WebOptions;

use super::browser::Browser;
use super::{ONE_AT_A_TIME, common, http_to, limits_app, raw, serve, texts};

/// The port of a test server's base URL.
fn port_of(base: &str) -> u16 {
    let addr = base
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap();
    addr.rsplit(':').next().unwrap().parse().unwrap()
}

fn assert_refused(host: &str, (status, body): (u16, String)) {
    assert_eq!(status, 421, "{host}: {body}");
    assert!(
        body.contains("does not answer to the host") && body.contains("--allow-host"),
        "{host}: {body}"
    );
}

#[tokio::test]
async fn only_loopback_names_and_allowed_hosts_are_answered() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let cluster = common::cluster("web-hosts").await;
    let options = WebOptions::builder()
        .writes(true)
        .allow_host("limits.internal")
        .build()
        .unwrap();
    let base = limits_app(&cluster, options).await;
    let port = port_of(&base);

    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
        format!("LocalHost:{port}"),
        "localhost".to_owned(),
        format!("limits.internal:{port}"),
        "limits.internal".to_owned(),
    ] {
        let (status, body) = http_to(&base, Some(&host), "GET", "/api/overview", "").await;
        assert_eq!(status, 200, "{host}: {body}");
        let overview: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(overview["namespace"], cluster.namespace(), "{host}");
    }

    for host in [
        format!("evil.example:{port}"),
        "evil.example".to_owned(),
        format!("localhost.evil.example:{port}"),
        format!("127.0.0.1.nip.io:{port}"),
        format!("other.internal:{port}"),
        format!("[::1]x:{port}"),
    ] {
        for path in [
            "",
            "/api/overview",
            "/limiters",
            "/api/subject?subject=user%3A1",
            "/audit",
            "/throttled",
            "/api/throttled",
            "/reset?subject=user%3A1",
            "/style.css",
        ] {
            assert_refused(&host, http_to(&base, Some(&host), "GET", path, "").await);
        }
        // A write is refused for the name before its token is looked at.
        let (status, body) = http_to(
            &base,
            Some(&host),
            "POST",
            "/api/reset",
            "subject=x&token=x",
        )
        .await;
        assert_refused(&host, (status, body));
    }
    // The name is said as it came: the body is plain text.
    let (_, body) = http_to(&base, Some("<b>evil</b>.example"), "GET", "", "").await;
    assert!(body.contains("\"<b>evil</b>.example\""), "{body}");

    // No name at all (HTTP/1.0 may omit it): refused too.
    let addr = format!("127.0.0.1:{port}");
    assert_refused(
        "no Host",
        raw(&addr, "GET /limits/api/overview HTTP/1.0\r\n\r\n").await,
    );

    // By default only the loopback names.
    let default = limits_app(&cluster, WebOptions::default()).await;
    let port = port_of(&default);
    assert_refused(
        "limits.internal",
        http_to(&default, Some("limits.internal"), "GET", "", "").await,
    );
    let (status, _) = http_to(&default, Some(&format!("[::1]:{port}")), "GET", "", "").await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_on_a_rebound_name_reads_nothing() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let cluster = common::cluster("web-rebind").await;
    let base = limits_app(&cluster, WebOptions::default()).await;
    let port = port_of(&base);
    // What a rebinding attacker arranges: their name resolves to this
    // machine, so the browser connects here and sends their name.
    let b = Browser::start_with(&["--host-resolver-rules=MAP evil.example 127.0.0.1"]).await;
    b.client
        .goto(&format!("http://evil.example:{port}/limits/api/overview"))
        .await
        .unwrap();
    let text = texts(&b, "body").await.concat();
    assert!(
        text.contains(&format!(
            "does not answer to the host \"evil.example:{port}\""
        )),
        "{text}"
    );
    assert!(!text.contains(cluster.namespace()), "{text}");
    b.screenshot("rebound-host").await;
    b.client
        .goto(&format!("http://localhost:{port}/limits"))
        .await
        .unwrap();
    assert_eq!(b.client.title().await.unwrap(), "Overview · shardlimit");
    b.close().await;
}

/// Cross-site request forgery from a real browser: a page on another origin
/// (another port of this machine, as any site the operator visits) holds a
/// form that posts a reset to the Limits page. The browser sends that
/// page's `Origin`, and the write is refused for it before its (missing)
/// token is even read; the same form on the Limits page's own origin only
/// lacks a token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_form_on_another_sites_page_cannot_post_a_reset() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let cluster = common::cluster("web-csrf").await;
    let options = WebOptions::builder().writes(true).build().unwrap();
    let base = limits_app(&cluster, options).await;
    let form = format!(
        "<!doctype html><title>cute cats</title>\
         <form id=f method=post action=\"{base}/reset\">\
         <input type=hidden name=subject value=\"user:1\">\
         <button>see the cats</button></form>"
    );
    let evil = serve(axum::Router::new().route(
        "/",
        axum::routing::get(move || {
            let form = form.clone();
            async move { axum::response::Html(form) }
        }),
    ))
    .await;
    let b = Browser::start().await;
    b.client.goto(&evil).await.unwrap();
    b.client
        .find(fantoccini::Locator::Css("form#f button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    // The refusal is plain text, which the browser shows in a <pre>: wait
    // for the navigation the click started.
    let text = b
        .client
        .wait()
        .for_element(fantoccini::Locator::Css("pre"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(text.contains("another site"), "{text}");
    b.screenshot("cross-site-post").await;
    // The same form served by the Limits page's own origin gets past the
    // Origin check, to the token it lacks.
    let rest = base.trim_start_matches("http://");
    let (addr, _) = rest.split_once('/').unwrap();
    let request = format!(
        "POST /limits/reset HTTP/1.1\r\nHost: {addr}\r\nOrigin: http://{addr}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 14\r\nConnection: close\r\n\r\nsubject=user:1"
    );
    let (status, body) = raw(addr, &request).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("token is missing"), "{body}");
    b.close().await;
}
