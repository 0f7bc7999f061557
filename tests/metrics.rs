//! Instrumentation (feature `metrics`): a `metrics` recorder sees exactly the
//! decisions of a known sequence, and tracing spans carry kind, name, slot and
//! outcome — and the subject only at `trace` level.
//!
//! `metrics` has one global recorder per process; this file is its own test
//! binary, installs metrics-util's debugging recorder once, and every metric
//! it checks carries a label (limiter name, node) or is only produced here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use shardlimit::admin::Scanner;
use shardlimit::cluster::Script;
use shardlimit::keys::KeyId;
use shardlimit::{FailurePolicy, Lock, MultiLimiter, Quota, RateLimiter};
use tracing::Subscriber;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap()
}

/// The global debugging recorder, installed before any primitive is built
/// (handles bind to the recorder present when they are registered).
fn snapshotter() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder.install().unwrap();
        shardlimit::describe_metrics();
        snapshotter
    })
}

/// What the recorder has seen, accumulated over snapshots: the debugging
/// recorder's snapshot swaps counters and gauges to 0 and drains histograms.
#[derive(Clone, Debug)]
enum Seen {
    Counter(u64),
    Gauge(f64),
    /// Number of observations.
    Histogram(usize),
}

type Labels = BTreeMap<String, String>;
/// A metric: its name and labels.
type Key = (String, Vec<(String, String)>);

#[derive(Debug)]
struct Metrics(Vec<(String, Labels, Seen)>);

impl Metrics {
    /// Takes a snapshot and returns everything seen so far.
    fn take() -> Self {
        static SEEN: Mutex<BTreeMap<Key, Seen>> = Mutex::new(BTreeMap::new());
        let mut seen = SEEN.lock().unwrap();
        for (key, _, _, value) in snapshotter().snapshot().into_vec() {
            let (_, key) = key.into_parts();
            let mut labels: Vec<(String, String)> = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            labels.sort();
            let entry = seen.entry((key.name().to_owned(), labels));
            match value {
                DebugValue::Counter(n) => {
                    let total = entry.or_insert(Seen::Counter(0));
                    if let Seen::Counter(total) = total {
                        *total += n;
                    }
                }
                // A gauge untouched since the last snapshot reads 0.
                DebugValue::Gauge(v) if v.into_inner() != 0.0 => {
                    *entry.or_insert(Seen::Gauge(0.0)) = Seen::Gauge(v.into_inner());
                }
                DebugValue::Gauge(_) => {
                    entry.or_insert(Seen::Gauge(0.0));
                }
                DebugValue::Histogram(values) => {
                    let total = entry.or_insert(Seen::Histogram(0));
                    if let Seen::Histogram(total) = total {
                        *total += values.len();
                    }
                }
            }
        }
        Metrics(
            seen.iter()
                .map(|((name, labels), v)| {
                    (name.clone(), labels.iter().cloned().collect(), v.clone())
                })
                .collect(),
        )
    }

    fn matching<'a>(
        &'a self,
        name: &'a str,
        labels: &'a [(&str, &str)],
    ) -> impl Iterator<Item = &'a Seen> + 'a {
        self.0
            .iter()
            .filter(move |(n, l, _)| {
                n == name
                    && labels
                        .iter()
                        .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|(_, _, v)| v)
    }

    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.matching(name, labels)
            .map(|v| match v {
                Seen::Counter(n) => *n,
                other => panic!("{name} {labels:?}: {other:?}"),
            })
            .sum()
    }

    fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.matching(name, labels).find_map(|v| match v {
            Seen::Gauge(g) => Some(*g),
            _ => None,
        })
    }

    fn decisions(&self, kind: &str, limiter: &str) -> [u64; 6] {
        [
            "allowed",
            "denied",
            "bypassed",
            "error",
            "denied_cached",
            "would_deny",
        ]
        .map(|outcome| {
            self.counter(
                "shardlimit_decisions_total",
                &[("kind", kind), ("name", limiter), ("outcome", outcome)],
            )
        })
    }

    fn histogram_count(&self, name: &str, labels: &[(&str, &str)]) -> usize {
        self.matching(name, labels)
            .map(|v| match v {
                Seen::Histogram(n) => *n,
                other => panic!("{name}: {other:?}"),
            })
            .sum()
    }
}

/// The two tests run one after the other: tracing caches each callsite's
/// interest across threads, and a callsite first hit by the test without a
/// subscriber while the other one's thread-local subscriber is between
/// blocks can stay disabled for it.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Polls `done` for up to 10 s (for background work: connection attempts).
async fn eventually(mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "not within 10 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_recorder_sees_every_decision_of_a_known_sequence() {
    let _serial = SERIAL.lock().await;
    snapshotter();
    let cluster = common::cluster("metrics").await;

    // 3 admitted, 2 denied.
    let api = RateLimiter::builder(&cluster, "m-api", Quota::per_minute(nz(3)))
        .build()
        .unwrap();
    for _ in 0..5 {
        let _ = api.check("user:1").await.unwrap();
    }
    // A multi-limit: 2 admitted (both limits count), then the 2-per-minute
    // limit denies (only it counts a denial).
    let tight = RateLimiter::builder(&cluster, "m-tight", Quota::per_minute(nz(2)))
        .build()
        .unwrap();
    let loose = RateLimiter::builder(&cluster, "m-loose", Quota::per_hour(nz(100)))
        .build()
        .unwrap();
    let multi = MultiLimiter::new([tight, loose]).unwrap();
    for _ in 0..3 {
        let _ = multi.check("user:1").await.unwrap();
    }
    // Shadow mode: 1 admitted, 2 would have been denied.
    let trial = RateLimiter::builder(&cluster, "m-shadow", Quota::per_minute(nz(1)))
        .shadow(true)
        .build()
        .unwrap();
    for _ in 0..3 {
        assert!(trial.check("user:1").await.unwrap().allowed);
    }
    // The deny cache: 1 admitted, denied by Redis until the cache follows
    // invalidations, then 5 denied from the cache.
    let cached = RateLimiter::builder(&cluster, "m-cached", Quota::per_hour(nz(1)))
        .deny_cache(10)
        .build()
        .unwrap();
    assert!(cached.check("user:1").await.unwrap().allowed);
    let mut by_redis = 0;
    while !cached.check("user:1").await.unwrap().cached {
        by_redis += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for _ in 0..4 {
        assert!(cached.check("user:1").await.unwrap().cached);
    }
    // A lock acquired, then lost behind its holder's back.
    let lock = Lock::builder(&cluster, "m-job").build().unwrap();
    let guard = lock.try_acquire("export").await.unwrap().unwrap();
    assert!(lock.try_acquire("export").await.unwrap().is_none());
    let key = format!("{}:{{export}}:lock:m-job", cluster.namespace());
    let _: i64 = common::on_owner(key.as_bytes(), redis::cmd("DEL").arg(&key)).await;
    assert!(!guard.extend(Duration::from_secs(30)).await.unwrap());
    assert!(!guard.release().await.unwrap(), "a loss is counted once");

    // Without Redis: 2 bypassed (fail-open), 1 error (fail-closed).
    let down = common::unreachable_cluster().await;
    let open = RateLimiter::builder(&down, "m-open", Quota::per_second(nz(1)))
        .failure_policy(FailurePolicy::FailOpen)
        .build()
        .unwrap();
    let closed = RateLimiter::builder(&down, "m-closed", Quota::per_second(nz(1)))
        .build()
        .unwrap();
    for _ in 0..2 {
        assert!(open.check("s").await.unwrap().bypassed.is_some());
    }
    assert!(closed.check("s").await.is_err());

    // A lazily built handle reads the topology in the background and then
    // connects to the nodes it calls. The unreachable one's attempts fail.
    let lazy = common::builder("metrics-lazy")
        .lazy_connect(true)
        .build()
        .await
        .unwrap();
    eventually(|| lazy.stats().topology_refreshes >= 1).await;
    let before_scan = Metrics::take();
    assert!(before_scan.counter("shardlimit_topology_refreshes_total", &[("ok", "true")]) >= 1);
    assert!(before_scan.counter("shardlimit_node_connects_total", &[]) >= 1);
    eventually(|| {
        Metrics::take().counter(
            "shardlimit_node_connect_failures_total",
            &[("node", "127.0.0.1:1")],
        ) >= 1
    })
    .await;
    eventually(|| {
        Metrics::take().gauge("shardlimit_node_down", &[("node", "127.0.0.1:1")]) == Some(1.0)
    })
    .await;

    // A batch counts each of its calls as `eval` counts one.
    let batch = Script::new(
        "m-batch",
        "if ARGV[1] == 'bad' then return redis.error_reply('ERR bad') end return 1",
    );
    let id = KeyId::new("batch", "m").unwrap();
    let sets: Vec<_> = (0..6)
        .map(|i| cluster.keys().key_set(format!("user:{i}"), [&id]).unwrap())
        .collect();
    let args = ["ok", "ok", "bad", "ok", "ok", "ok"];
    let replies: Vec<shardlimit::Result<i64>> =
        cluster.eval_many(&batch, sets.iter().zip(args)).await;
    assert_eq!(replies.iter().filter(|r| r.is_err()).count(), 1);

    // The admin scanner reports its progress per master.
    let report = Scanner::new(&cluster).count_limiters().await.unwrap();
    let m = Metrics::take();

    // Decisions: the same numbers as Cluster::stats.
    assert_eq!(m.decisions("gcra", "m-api"), [3, 2, 0, 0, 0, 0]);
    assert_eq!(m.decisions("gcra", "m-tight"), [2, 1, 0, 0, 0, 0]);
    assert_eq!(m.decisions("gcra", "m-loose"), [2, 0, 0, 0, 0, 0]);
    assert_eq!(m.decisions("lock", "m-job"), [1, 1, 0, 0, 0, 0]);
    assert_eq!(m.decisions("gcra", "m-open"), [0, 0, 2, 0, 0, 0]);
    assert_eq!(m.decisions("gcra", "m-closed"), [0, 0, 0, 1, 0, 0]);
    assert_eq!(m.decisions("gcra", "m-shadow"), [1, 0, 0, 0, 0, 2]);
    assert_eq!(m.decisions("gcra", "m-cached"), [1, by_redis, 0, 0, 5, 0]);
    let stats = cluster.stats();
    let s = stats.get("gcra", "m-api").unwrap();
    assert_eq!([s.allowed, s.denied, s.bypassed, s.errors], [3, 2, 0, 0]);
    let s = stats.get("gcra", "m-cached").unwrap();
    assert_eq!([s.allowed, s.denied, s.denied_cached], [1, by_redis, 5]);
    assert_eq!(
        m.counter("shardlimit_lock_losses_total", &[("name", "m-job")]),
        1
    );

    // Latency: at least one observation per request of this test (other
    // tests of this binary add theirs).
    assert!(
        m.histogram_count(
            "shardlimit_redis_duration_seconds",
            &[("op", "gcra"), ("status", "ok")]
        ) >= 5
    );
    assert!(
        m.histogram_count(
            "shardlimit_redis_duration_seconds",
            &[("op", "multi_limit"), ("status", "ok")]
        ) >= 3
    );
    assert!(
        m.histogram_count(
            "shardlimit_redis_duration_seconds",
            &[("op", "lock_acquire")]
        ) >= 2
    );

    for (status, calls) in [("ok", 5), ("error", 1)] {
        assert_eq!(
            m.histogram_count(
                "shardlimit_redis_duration_seconds",
                &[("op", "m-batch"), ("status", status)]
            ),
            calls,
            "{status}"
        );
    }

    // Scanner: keys seen per master, and every master's walk done.
    let masters = common::masters().await;
    let scanned: u64 = masters
        .iter()
        .map(|master| m.counter("shardlimit_scan_keys_total", &[("node", &master.addr)]))
        .sum();
    assert!(scanned >= report.total(), "{scanned} < {}", report.total());
    for master in &masters {
        assert_eq!(
            m.gauge("shardlimit_scan_progress_ratio", &[("node", &master.addr)]),
            Some(1.0),
            "{}",
            master.addr
        );
    }
    common::assert_every_key_has_ttl(cluster.namespace()).await;
}

// ---- tracing -----------------------------------------------------------------

/// A closed span: its name and every field recorded on it.
#[derive(Clone, Debug)]
struct Closed {
    name: &'static str,
    fields: BTreeMap<String, String>,
}

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Closed>>>);

struct Fields(BTreeMap<String, String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(
            field.name().to_owned(),
            format!("{value:?}").trim_matches('"').to_owned(),
        );
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> tracing_subscriber::Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields(BTreeMap::new());
        attrs.record(&mut fields);
        ctx.span(id).unwrap().extensions_mut().insert(fields);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let span = ctx.span(id).unwrap();
        let mut ext = span.extensions_mut();
        values.record(ext.get_mut::<Fields>().unwrap());
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let span = ctx.span(&id).unwrap();
        let fields = span.extensions_mut().remove::<Fields>().unwrap().0;
        self.0.lock().unwrap().push(Closed {
            name: span.name(),
            fields,
        });
    }
}

impl Capture {
    fn spans(&self, name: &str) -> Vec<Closed> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.name == name)
            .cloned()
            .collect()
    }
}

/// `#[tokio::test]` runs on this thread only, so a thread-local subscriber
/// sees every span of the operations awaited here.
#[tokio::test]
async fn spans_carry_kind_name_slot_outcome_and_the_subject_only_at_trace() {
    let _serial = SERIAL.lock().await;
    let cluster = common::cluster("spans").await;
    let api = RateLimiter::builder(&cluster, "t-api", Quota::per_minute(nz(1)))
        .build()
        .unwrap();
    let slot = shardlimit::keys::slot(&api.key("user:42").unwrap());

    // At debug: kind, name, slot and outcome; no subject.
    let debug = Capture::default();
    {
        let subscriber = tracing_subscriber::registry()
            .with(LevelFilter::DEBUG)
            .with(debug.clone());
        let _guard = tracing::subscriber::set_default(subscriber);
        let _ = api.check("user:42").await.unwrap();
        let _ = api.check("user:42").await.unwrap();
    }
    let spans = debug.spans("shardlimit.check");
    assert_eq!(spans.len(), 2, "{spans:?}");
    for (span, outcome) in spans.iter().zip(["allowed", "denied"]) {
        assert_eq!(span.fields["kind"], "gcra");
        assert_eq!(span.fields["name"], "t-api");
        assert_eq!(span.fields["slot"], slot.to_string());
        assert_eq!(span.fields["outcome"], outcome);
        assert!(!span.fields.contains_key("subject"), "{span:?}");
    }

    // At trace: the subject too; a multi-limit names all its limits.
    let trace = Capture::default();
    let other = RateLimiter::builder(&cluster, "t-other", Quota::per_minute(nz(5)))
        .build()
        .unwrap();
    let multi = MultiLimiter::new([api.clone(), other]).unwrap();
    let lock = Lock::builder(&cluster, "t-job").build().unwrap();
    {
        let subscriber = tracing_subscriber::registry()
            .with(LevelFilter::TRACE)
            .with(trace.clone());
        let _guard = tracing::subscriber::set_default(subscriber);
        let _ = api.check("user:7").await.unwrap();
        let _ = multi.check("user:8").await.unwrap();
        let guard = lock.try_acquire("report").await.unwrap().unwrap();
        guard.release().await.unwrap();
    }
    let check = &trace.spans("shardlimit.check")[0];
    assert_eq!(check.fields["subject"], "user:7");
    assert_eq!(check.fields["outcome"], "allowed");
    let multi = &trace.spans("shardlimit.multi_check")[0];
    assert_eq!(multi.fields["name"], "t-api+t-other");
    assert_eq!(multi.fields["consume"], "true");
    assert_eq!(multi.fields["subject"], "user:8");
    assert_eq!(multi.fields["outcome"], "allowed");
    let acquire = &trace.spans("shardlimit.lock.try_acquire")[0];
    assert_eq!(acquire.fields["kind"], "lock");
    assert_eq!(acquire.fields["outcome"], "allowed");
    assert_eq!(acquire.fields["subject"], "report");

    common::assert_every_key_has_ttl(cluster.namespace()).await;
}
