//! Headless Chromium through chromedriver, for the Limits page tests.
//!
//! chromedriver runs on a free loopback port for the test's lifetime
//! (killed on drop); Chromium is headless, with `--no-sandbox` (CI runs as
//! root, where Chromium's sandbox refuses to start). Both come from
//! Debian's `chromium` and `chromium-driver` packages, which `.ci/run`
//! installs. Missing ones fail the test: a browser test that silently
//! passes without a browser tests nothing.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder};
use serde_json::json;
use tokio::process::{Child, Command};

/// A running chromedriver and one browser session on it.
pub struct Browser {
    pub client: Client,
    _driver: Child,
}

fn find(names: &[&str], env: &str) -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(env) {
        return Some(PathBuf::from(path));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| names.iter().map(move |n| dir.join(n)))
        .find(|p| p.is_file())
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session.
    pub async fn start() -> Browser {
        Browser::start_with(&[]).await
    }

    /// [`start`](Self::start), with more Chromium command-line switches.
    pub async fn start_with(switches: &[&str]) -> Browser {
        let driver = find(&["chromedriver"], "CHROMEDRIVER").unwrap_or_else(|| {
            panic!(
                "chromedriver not found (set CHROMEDRIVER or put it on PATH): \
                 install Debian's chromium and chromium-driver \
                 (`apt-get install -y chromium chromium-driver`; .ci/run does)"
            )
        });
        let chromium = find(
            &["chromium", "chromium-browser", "google-chrome"],
            "CHROMIUM",
        )
        .unwrap_or_else(|| {
            panic!("chromium not found (set CHROMIUM or install Debian's chromium)")
        });
        let port = {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            probe.local_addr().unwrap().port()
        };
        let child = Command::new(&driver)
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            // Its own process group, which Chromium joins: dropping the
            // Browser ends both, even when a failing test never closes
            // the session (killing chromedriver alone orphans Chromium).
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("could not start {}: {e}", driver.display()));
        let deadline = Instant::now() + Duration::from_secs(20);
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            assert!(
                Instant::now() < deadline,
                "chromedriver did not listen on port {port} within 20 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut caps = serde_json::Map::new();
        let mut args = vec![
            "--headless=new",
            "--no-sandbox",
            "--disable-dev-shm-usage",
            "--disable-gpu",
            "--window-size=1400,1000",
            "--no-first-run",
        ];
        args.extend_from_slice(switches);
        caps.insert(
            "goog:chromeOptions".into(),
            json!({ "binary": chromium, "args": args }),
        );
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .unwrap_or_else(|e| {
                panic!("could not open a Chromium session through chromedriver: {e}")
            });
        Browser {
            client,
            _driver: child,
        }
    }

    /// Clicks the element `css`.
    pub async fn click(&self, css: &str) {
        self.client
            .find(fantoccini::Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no {css}: {e}"))
            .click()
            .await
            .unwrap();
    }

    /// The text of the element `css`.
    pub async fn text(&self, css: &str) -> String {
        self.client
            .find(fantoccini::Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no {css}: {e}"))
            .text()
            .await
            .unwrap()
    }

    /// The JSON at `url`, as the browser shows it.
    pub async fn json(&self, url: &str) -> serde_json::Value {
        self.client.goto(url).await.unwrap();
        let body = self.text("body").await;
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{url}: {e}: {body}"))
    }

    /// Saves a screenshot of the current page as `target/web/<name>.png`.
    pub async fn screenshot(&self, name: &str) {
        let png = self.client.screenshot().await.unwrap();
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
    }

    /// Ends the session (Chromium quits; chromedriver is killed on drop).
    pub async fn close(self) {
        let _ = self.client.clone().close().await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if let Some(pid) = self._driver.id() {
            // The whole group: chromedriver and the Chromium it started.
            let _ = std::process::Command::new("kill")
                .arg("-KILL")
                .arg("--")
                .arg(format!("-{pid}"))
                .status();
        }
    }
}

/// `target/web/` (or under `CARGO_TARGET_DIR`).
pub fn screenshot_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    target.join("web")
}
