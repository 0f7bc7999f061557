//! Secrets and subjects stay out of logs: every tracing event and span a
//! lock (with its watchdog losing the lock), a lease and a counter emit is
//! captured at every level, and the subject appears only at `trace`; a
//! lease's id never appears in its `Debug`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shardlimit::keys::KeyId;
use shardlimit::{Counter, LeaseLimiter, Lock};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// Every event and every span's recorded fields, with their level, as text.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<(Level, String)>>>);

struct Text(String);

impl Visit for Text {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, " {}={value:?}", field.name());
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        let _ = write!(self.0, " {}={value}", field.name());
    }
}

impl<S> Layer<S> for Capture
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let mut text = Text(format!("event {}:", event.metadata().target()));
        event.record(&mut text);
        let level = *event.metadata().level();
        self.0.lock().unwrap().push((level, text.0));
    }
    fn on_new_span(&self, attrs: &Attributes<'_>, _: &Id, _: Context<'_, S>) {
        let mut text = Text(format!("span {}:", attrs.metadata().name()));
        attrs.record(&mut text);
        let level = *attrs.metadata().level();
        self.0.lock().unwrap().push((level, text.0));
    }
    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let level = ctx.metadata(id).map_or(Level::ERROR, |m| *m.level());
        let mut text = Text("record:".to_owned());
        values.record(&mut text);
        self.0.lock().unwrap().push((level, text.0));
    }
}

/// A lock whose watchdog finds it deleted (a WARN), a lease and a counter,
/// all on `subject`; returns everything captured at up to `max`.
async fn run_everything(prefix: &str, subject: &str, max: LevelFilter) -> Vec<(Level, String)> {
    let capture = Capture::default();
    // The current-thread test runtime runs the watchdog on this thread, so
    // a thread-local subscriber sees it too.
    let _guard = tracing::subscriber::set_default(
        tracing_subscriber::registry()
            .with(max)
            .with(capture.clone()),
    );
    let cluster = common::cluster(prefix).await;

    let lock = Lock::builder(&cluster, "job")
        .ttl(Duration::from_secs(1))
        .watchdog(true)
        .build()
        .unwrap();
    let guard = lock.try_acquire(subject).await.unwrap().unwrap();
    let key = cluster
        .keys()
        .key(subject, &KeyId::new("lock", "job").unwrap())
        .unwrap();
    let _: i64 = common::on_owner(&key, redis::cmd("DEL").arg(&key)).await;
    tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("the watchdog reports the loss");

    let exports = LeaseLimiter::builder(&cluster, "exports").build().unwrap();
    let lease = exports.try_acquire(subject).await.unwrap().unwrap();
    assert!(lease.release().await.unwrap());
    let counter = Counter::builder(&cluster, "billing").build().unwrap();
    counter.add(subject, 3).await.unwrap();
    assert_eq!(counter.drain(subject).await.unwrap(), Some(3));

    let records = capture.0.lock().unwrap().clone();
    assert!(
        records
            .iter()
            .any(|(level, text)| *level == Level::WARN && text.contains("lock=job")),
        "no watchdog warning captured: {records:#?}"
    );
    records
}

#[tokio::test]
async fn below_trace_the_subject_appears_in_no_event_or_span() {
    let subject = "tenant-7f3a9c";
    let records = run_everything("redact-debug", subject, LevelFilter::DEBUG).await;
    let leaks: Vec<_> = records
        .iter()
        .filter(|(_, t)| t.contains(subject))
        .collect();
    assert!(leaks.is_empty(), "subject logged below trace: {leaks:#?}");
}

#[tokio::test]
async fn at_trace_the_subject_is_in_trace_events_only() {
    let subject = "tenant-5be1d0";
    let records = run_everything("redact-trace", subject, LevelFilter::TRACE).await;
    assert!(
        records
            .iter()
            .any(|(level, text)| *level == Level::TRACE && text.contains(subject)),
        "the watchdog's resource is logged at trace: {records:#?}"
    );
    // Spans are `debug` and get the subject recorded only when `trace` is
    // on (the documented promise); events carry it only at `trace`.
    let leaks: Vec<_> = records
        .iter()
        .filter(|(level, text)| {
            text.starts_with("event") && *level != Level::TRACE && text.contains(subject)
        })
        .collect();
    assert!(
        leaks.is_empty(),
        "subject in an event above trace: {leaks:#?}"
    );
}

#[tokio::test]
async fn a_leases_debug_hides_its_id() {
    let cluster = common::cluster("redact-lease").await;
    let exports = LeaseLimiter::builder(&cluster, "exports").build().unwrap();
    let lease = exports.try_acquire("s").await.unwrap().unwrap();
    let key = cluster
        .keys()
        .key("s", &KeyId::new("lease", "exports").unwrap())
        .unwrap();
    let ids: Vec<String> =
        common::on_owner(&key, redis::cmd("ZRANGE").arg(&key).arg(0).arg(-1)).await;
    assert_eq!(ids.len(), 1);
    let debug = format!("{lease:?}");
    assert!(!debug.contains(&ids[0]), "{debug}");
    assert!(debug.contains("exports"), "{debug}");
    assert!(lease.release().await.unwrap());
}
