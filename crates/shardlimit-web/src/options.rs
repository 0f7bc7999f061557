//! `WebOptions`: what the Limits page may do and how much each page costs.

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::time::Duration;

use std::sync::Arc;

use super::auth::BasicAuth;
use super::host::AllowedHosts;
use shardlimit::Quota;
use shardlimit::admin::DEFAULT_SCAN_COUNT;
use shardlimit::{Error, Result};

/// The largest page the limiters view serves (rows asked for per page).
///
/// ```
/// assert_eq!(shardlimit_web::MAX_PAGE_SIZE, 1000);
/// ```
pub const MAX_PAGE_SIZE: usize = 1000;

/// How long a limiters page keeps walking to fill itself, by default (see
/// [`WebOptionsBuilder::page_budget`]).
///
/// ```
/// assert_eq!(shardlimit_web::DEFAULT_PAGE_BUDGET.as_millis(), 250);
/// ```
pub const DEFAULT_PAGE_BUDGET: Duration = Duration::from_millis(250);

/// The longest [`WebOptionsBuilder::page_budget`].
const MAX_PAGE_BUDGET: Duration = Duration::from_secs(10);

/// Settings of [`router`](super::router), made with [`WebOptions::builder`].
///
/// ```
/// use std::time::Duration;
/// use shardlimit_web::WebOptions;
///
/// let options = WebOptions::builder()
///     .writes(true) // the reset action; off by default
///     .count_refresh(Duration::from_secs(300))
///     .build()?;
/// assert!(options.writes());
/// # Ok::<(), shardlimit::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct WebOptions {
    pub(super) writes: bool,
    pub(super) page_size: NonZeroUsize,
    pub(super) page_budget: Duration,
    pub(super) scan_count: u32,
    pub(super) count_refresh: Duration,
    pub(super) first_wait: Duration,
    pub(super) node_timeout: Duration,
    pub(super) confirm_ttl: Duration,
    pub(super) audit_list_limit: usize,
    pub(super) quotas: BTreeMap<String, Quota>,
    pub(super) hosts: AllowedHosts,
    pub(super) auth: Option<Arc<BasicAuth>>,
}

impl Default for WebOptions {
    fn default() -> Self {
        WebOptions {
            writes: false,
            page_size: NonZeroUsize::MIN.saturating_add(49),
            page_budget: DEFAULT_PAGE_BUDGET,
            scan_count: DEFAULT_SCAN_COUNT,
            count_refresh: Duration::from_secs(60),
            first_wait: Duration::from_millis(500),
            node_timeout: Duration::from_millis(500),
            confirm_ttl: Duration::from_secs(600),
            audit_list_limit: 200,
            quotas: BTreeMap::new(),
            hosts: AllowedHosts::default(),
            auth: None,
        }
    }
}

impl WebOptions {
    /// A builder starting from the defaults each setter states.
    ///
    /// ```
    /// let options = shardlimit_web::WebOptions::builder().build()?;
    /// assert!(!options.writes(), "read-only unless told otherwise");
    /// # Ok::<(), shardlimit::Error>(())
    /// ```
    pub fn builder() -> WebOptionsBuilder {
        WebOptionsBuilder {
            options: WebOptions::default(),
            hosts: Vec::new(),
            auth: None,
        }
    }

    /// Whether the reset action is enabled.
    ///
    /// ```
    /// assert!(!shardlimit_web::WebOptions::default().writes());
    /// ```
    #[must_use]
    pub fn writes(&self) -> bool {
        self.writes
    }

    /// Whether a request to `authority` (its `Host`, with or without port)
    /// is answered; see [`WebOptionsBuilder::allow_host`].
    ///
    /// ```
    /// let options = shardlimit_web::WebOptions::default();
    /// assert!(options.allows_host("localhost:8080") && options.allows_host("[::1]:8080"));
    /// assert!(!options.allows_host("evil.example:8080"), "DNS rebinding");
    /// ```
    #[must_use]
    pub fn allows_host(&self, authority: &str) -> bool {
        self.hosts.permits(authority)
    }
}

/// Builds [`WebOptions`]; every setter states its default.
///
/// ```
/// use std::num::NonZeroUsize;
/// let options = shardlimit_web::WebOptions::builder()
///     .page_size(NonZeroUsize::new(100).unwrap())
///     .build()?;
/// # Ok::<(), shardlimit::Error>(())
/// ```
#[derive(Clone)]
#[must_use]
pub struct WebOptionsBuilder {
    options: WebOptions,
    /// [`allow_host`](Self::allow_host)'s names, checked by `build`.
    hosts: Vec<String>,
    /// [`basic_auth`](Self::basic_auth)'s user and password, checked by
    /// `build`.
    auth: Option<(String, String)>,
}

impl std::fmt::Debug for WebOptionsBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebOptionsBuilder")
            .field("options", &self.options)
            .field("hosts", &self.hosts)
            .field("user", &self.auth.as_ref().map(|(user, _)| user))
            .finish_non_exhaustive()
    }
}

impl WebOptionsBuilder {
    /// Enables the reset action (a POST with a CSRF token, after a
    /// confirmation page). Default **false**: every page is read-only and a
    /// POST is refused with `403`. Set [`basic_auth`](Self::basic_auth), or
    /// put your own authentication in front of the router, before turning
    /// this on (see [`router`](super::router)).
    ///
    /// ```
    /// let options = shardlimit_web::WebOptions::builder().writes(true).build()?;
    /// assert!(options.writes());
    /// # Ok::<(), shardlimit::Error>(())
    /// ```
    pub fn writes(mut self, writes: bool) -> Self {
        self.options.writes = writes;
        self
    }

    /// Rows the limiters view aims for per page (spread over the masters).
    /// Default 50; at most [`MAX_PAGE_SIZE`]. A page may hold fewer rows
    /// (its SCAN budget ran out on a sparse filter) or a few more (a SCAN
    /// call's keys are never split between pages); see
    /// [`Scanner::page`](shardlimit::admin::Scanner::page).
    ///
    /// ```
    /// use std::num::NonZeroUsize;
    /// let rows = NonZeroUsize::new(200).unwrap();
    /// shardlimit_web::WebOptions::builder().page_size(rows).build()?;
    /// # Ok::<(), shardlimit::Error>(())
    /// ```
    pub fn page_size(mut self, rows: NonZeroUsize) -> Self {
        self.options.page_size = rows;
        self
    }

    /// How long the limiters view keeps walking to fill a page whose filter
    /// is sparse (see
    /// [`Scanner::page_within`](shardlimit::admin::Scanner::page_within)): rounds
    /// of at most [`PAGE_SCANS_PER_MASTER`](shardlimit::admin::PAGE_SCANS_PER_MASTER)
    /// `SCAN`s per master until the page is full, the namespace walked, this
    /// budget spent or [`MAX_PAGE_ROUNDS`](shardlimit::admin::MAX_PAGE_ROUNDS)
    /// rounds made. Default [`DEFAULT_PAGE_BUDGET`] (250 ms); zero makes
    /// every page one round; at most 10 s.
    ///
    /// ```
    /// use std::time::Duration;
    /// shardlimit_web::WebOptions::builder().page_budget(Duration::from_millis(500)).build()?;
    /// # Ok::<(), shardlimit::Error>(())
    /// ```
    pub fn page_budget(mut self, budget: Duration) -> Self {
        self.options.page_budget = budget;
        self
    }

    /// `COUNT` of each SCAN call, at most (see
    /// [`Scanner::count`](shardlimit::admin::Scanner::count)). Default
    /// [`DEFAULT_SCAN_COUNT`] (100).
    ///
    /// ```
    /// shardlimit_web::WebOptions::builder().scan_count(50).build()?;
    /// # Ok::<(), shardlimit::Error>(())
    /// ```
    pub fn scan_count(mut self, count: u32) -> Self {
        self.options.scan_count = count;
        self
    }

    /// How old the overview's counts (primitives per kind and name, keys per
    /// master) and the audit may get before a page view starts a new walk in
    /// the background. Default 60 s. Those need a walk over the whole
    /// namespace — seconds at millions of keys — so no page waits for one
    /// longer than [`first_wait`](Self::first_wait): it shows the last
    /// finished result and its age. At most one walk of each runs at a time.
    ///
    /// ```
    /// use std::time::Duration;
    /// shardlimit_web::WebOptions::builder().count_refresh(Duration::from_secs(600)).build()?;
    /// # Ok::<(), shardlimit::Error>(())
    /// ```
    pub fn count_refresh(mut self, age: Duration) -> Self {
        self.options.count_refresh = age;
        self
    }

    /// How long the overview and audit pages wait for a walk they started
    /// before rendering without it ("counting…"). Default 500 ms: a small
    /// namespace shows its counts on the first view.
    ///
    /// ```
    /// use std::time::Duration;
    /// shardlimit_web::WebOptions::builder().first_wait(Duration::from_secs(2)).build()?;
    /// # Ok::<(), shardlimit::Error>(())
    /// ```
    pub fn first_wait(mut self, wait: Duration) -> Self {
        self.options.first_wait = wait;
        self
    }

    /// How long the overview waits for each master's health (`INFO`,
    /// `CLUSTER INFO`, `DBSIZE` on a connection of its own, connecting
    /// included) before showing it as not answering. Default 500 ms: a hung
    /// master costs the page at most this, however many calls to it time
    /// out, and a master back from an outage reads healthy on the next view.
    ///
    /// ```
    /// use std::time::Duration;
    /// shardlimit_web::WebOptions::builder().node_timeout(Duration::from_secs(1)).build()?;
    /// # Ok::<(), shardlimit::Error>(())
    /// ```
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.options.node_timeout = timeout;
        self
    }

    /// How long a reset's confirmation (its CSRF token) stays valid.
    /// Default 10 minutes.
    ///
    /// ```
    /// use std::time::Duration;
    /// shardlimit_web::WebOptions::builder().confirm_ttl(Duration::from_secs(120)).build()?;
    /// # Ok::<(), shardlimit::Error>(())
    /// ```
    pub fn confirm_ttl(mut self, ttl: Duration) -> Self {
        self.options.confirm_ttl = ttl;
        self
    }

    /// Keys listed per problem on the audit page (all are counted). Default
    /// 200.
    ///
    /// ```
    /// shardlimit_web::WebOptions::builder().audit_list_limit(1000).build()?;
    /// # Ok::<(), shardlimit::Error>(())
    /// ```
    pub fn audit_list_limit(mut self, keys: usize) -> Self {
        self.options.audit_list_limit = keys;
        self
    }

    /// The quota of your rate limiters named `name` (any algorithm),
    /// which wins over what they publish to the
    /// [catalog](shardlimit::limit#the-catalog): for limiters of versions that
    /// do not publish theirs. Default: none given; every limiter that
    /// publishes is known without it. Rows then say how many units remain
    /// of the limit, whether the subject is at it, and when it is full
    /// again (see [`Catalog::headroom`](shardlimit::admin::Catalog::headroom):
    /// a lower bound for a sliding log and a sliding window counter).
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use shardlimit::Quota;
    /// use shardlimit_web::WebOptions;
    ///
    /// let options = WebOptions::builder()
    ///     .quota("api", Quota::per_minute(NonZeroU32::new(100).unwrap()))
    ///     .build()?;
    /// # Ok::<(), shardlimit::Error>(())
    /// ```
    pub fn quota(mut self, name: impl Into<String>, quota: Quota) -> Self {
        self.options.quotas.insert(name.into(), quota);
        self
    }

    /// Also answers requests to `name` — a host name or an IP address,
    /// without port (any port goes); repeat for more. Default: only
    /// `localhost` and loopback addresses (`127.0.0.0/8`, `[::1]`); any
    /// other `Host` gets `421 Misdirected Request`. That keeps a web page
    /// the operator visits from rebinding its own name to this machine and
    /// reading every subject (DNS rebinding). Add the address the page
    /// listens on (`shardlimit web` adds its `--listen` address) and every
    /// name it is reached by — behind a reverse proxy, the `Host` the proxy
    /// passes on.
    ///
    /// ```
    /// let options = shardlimit_web::WebOptions::builder()
    ///     .allow_host("limits.internal")
    ///     .allow_host("10.0.0.7")
    ///     .build()?;
    /// assert!(options.allows_host("limits.internal:8080"));
    /// assert!(options.allows_host("10.0.0.7:8080"));
    /// assert!(!options.allows_host("evil.example"));
    /// # Ok::<(), shardlimit::Error>(())
    /// ```
    pub fn allow_host(mut self, name: impl Into<String>) -> Self {
        self.hosts.push(name.into());
        self
    }

    /// Requires HTTP basic authentication, `user` and `password`, on every
    /// page and API call (a `401` with a challenge, which a browser answers
    /// with its login prompt, otherwise). Default: none — put your own
    /// authentication in front of the router, or set this, before turning
    /// [`writes`](Self::writes) on or serving beyond this machine.
    ///
    /// Errors at [`build`](Self::build) for an empty user or password, a
    /// `:` in the user or a control character. The password is never
    /// printed (`Debug` shows `<redacted>`).
    ///
    /// ```
    /// let options = shardlimit_web::WebOptions::builder()
    ///     .writes(true)
    ///     .basic_auth("ops", "correct horse battery staple")
    ///     .build()?;
    /// assert!(!format!("{options:?}").contains("horse"));
    /// # Ok::<(), shardlimit::Error>(())
    /// ```
    pub fn basic_auth(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.auth = Some((user.into(), password.into()));
        self
    }

    /// Checks the settings.
    ///
    /// Errors with [`Error::Config`] for a page size above
    /// [`MAX_PAGE_SIZE`], a zero SCAN count, a zero confirmation time, an
    /// allowed host that is not a host name or an IP address, or basic
    /// credentials a browser could not send.
    ///
    /// ```
    /// let err = shardlimit_web::WebOptions::builder().scan_count(0).build().unwrap_err();
    /// assert!(err.to_string().contains("scan_count"));
    /// # Ok::<(), shardlimit::Error>(())
    /// ```
    pub fn build(mut self) -> Result<WebOptions> {
        for name in &self.hosts {
            self.options
                .hosts
                .add(name)
                .map_err(|reason| Error::Config {
                    field: "allow_host",
                    reason,
                })?;
        }
        if let Some((user, password)) = &self.auth {
            let auth = BasicAuth::new(user, password).map_err(|reason| Error::Config {
                field: "basic_auth",
                reason,
            })?;
            self.options.auth = Some(Arc::new(auth));
        }
        let o = &self.options;
        if o.page_size.get() > MAX_PAGE_SIZE {
            return Err(Error::Config {
                field: "page_size",
                reason: format!("{} is above the maximum {MAX_PAGE_SIZE}", o.page_size),
            });
        }
        if o.page_budget > MAX_PAGE_BUDGET {
            return Err(Error::Config {
                field: "page_budget",
                reason: format!(
                    "{:?} is above the maximum {MAX_PAGE_BUDGET:?} (a page view would hold the request that long)",
                    o.page_budget
                ),
            });
        }
        if o.scan_count == 0 {
            return Err(Error::Config {
                field: "scan_count",
                reason: "must be at least 1".into(),
            });
        }
        if o.node_timeout.is_zero() {
            return Err(Error::Config {
                field: "node_timeout",
                reason: "must be above zero".into(),
            });
        }
        if o.confirm_ttl < Duration::from_secs(1) {
            return Err(Error::Config {
                field: "confirm_ttl",
                reason: "must be at least one second".into(),
            });
        }
        Ok(self.options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_read_only_and_bounded() {
        let o = WebOptions::builder().build().unwrap();
        assert!(!o.writes());
        assert_eq!(o.page_size.get(), 50);
        assert_eq!(o.page_budget, Duration::from_millis(250));
        assert_eq!(o.scan_count, DEFAULT_SCAN_COUNT);
    }

    #[test]
    fn build_refuses_what_cannot_work() {
        let too_big = NonZeroUsize::new(MAX_PAGE_SIZE + 1).unwrap();
        for builder in [
            WebOptions::builder().page_size(too_big),
            WebOptions::builder().scan_count(0),
            WebOptions::builder().page_budget(Duration::from_secs(11)),
            WebOptions::builder().confirm_ttl(Duration::ZERO),
            WebOptions::builder().node_timeout(Duration::ZERO),
            WebOptions::builder().allow_host("limits.internal:8080"),
            WebOptions::builder().basic_auth("a:b", "secret"),
            WebOptions::builder().basic_auth("ops", ""),
        ] {
            let err = builder.build().unwrap_err();
            assert!(matches!(err, Error::Config { .. }), "{err}");
        }
    }
}
