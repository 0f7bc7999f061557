//! Unit tests of the metrics hooks (a debugging recorder, no cluster).

use super::*;

#[test]
fn outcome_labels_follow_the_array_order() {
    for (i, outcome) in Outcome::ALL.into_iter().enumerate() {
        assert_eq!(outcome as usize, i);
    }
    assert_eq!(Outcome::Bypassed.as_str(), "bypassed");
}

#[test]
fn hooks_are_harmless_without_a_recorder_or_subscriber() {
    let m = DecisionMetrics::new("gcra", "api");
    m.record(Outcome::Allowed);
    ClusterMetrics::default().observe::<()>(&"gcra".into(), Started::now(), &Ok(()));
    span_slot(Some(7));
    span_subject(b"user:42");
    node_connect("127.0.0.1:7000", true);
    node_down("127.0.0.1:7000", false);
    topology_refresh(true);
    lock_lost("job");
}

/// What the hooks cost per operation, in nanoseconds. Prints, asserts
/// nothing (a timing assertion would flake on a busy machine); run it
/// with and without `--features metrics`:
///
/// `cargo test --release --lib metrics::tests::hook_costs -- --ignored --nocapture`
#[test]
#[ignore = "a micro-benchmark, run by hand"]
fn hook_costs() {
    use std::hint::black_box;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};
    use std::time::Instant;

    use tracing_subscriber::layer::SubscriberExt;

    const N: u32 = 2_000_000;
    fn per_op(f: impl Fn()) -> f64 {
        // The best of five rounds: the least disturbed by the machine.
        (0..5)
            .map(|_| {
                let t = Instant::now();
                for _ in 0..N {
                    f();
                }
                t.elapsed().as_nanos() as f64 / f64::from(N)
            })
            .fold(f64::INFINITY, f64::min)
    }
    fn poll_once<F: std::future::Future>(f: F) -> F::Output {
        let mut cx = Context::from_waker(Waker::noop());
        match pin!(f).poll(&mut cx) {
            Poll::Ready(v) => v,
            Poll::Pending => unreachable!(),
        }
    }
    // What `#[instrument]` adds to a primitive's operation: a span with
    // the same fields, entered on every poll, and the subject hook.
    #[tracing::instrument(name = "shardlimit.check", level = "debug", skip_all,
        fields(kind = kind, name = name, slot, outcome, subject))]
    async fn instrumented(kind: &str, name: &str, subject: &[u8]) -> usize {
        span_subject(subject);
        black_box(kind.len() + name.len())
    }
    async fn plain(kind: &str, name: &str, subject: &[u8]) -> usize {
        black_box(subject);
        black_box(kind.len() + name.len())
    }

    let run = |label: &str| {
        let decisions = DecisionMetrics::new("gcra", "bench");
        let cluster = ClusterMetrics::default();
        let op: std::borrow::Cow<'static, str> = "gcra".into();
        let ok: crate::Result<()> = Ok(());
        let plain_ns = per_op(|| {
            black_box(poll_once(plain("gcra", "bench", b"user:42")));
        });
        let span_ns = per_op(|| {
            black_box(poll_once(instrumented("gcra", "bench", b"user:42")));
        });
        let decision_ns = per_op(|| decisions.record(black_box(Outcome::Allowed)));
        let latency_ns = per_op(|| {
            let started = Started::now();
            cluster.observe(&op, started, &ok);
            span_slot(black_box(Some(7)));
        });
        println!(
            "{label:<44} span {:>5.1} ns  decision {:>5.1} ns  latency+slot {:>5.1} ns",
            span_ns - plain_ns,
            decision_ns,
            latency_ns
        );
    };
    let features = if cfg!(feature = "metrics") {
        "metrics on"
    } else {
        "metrics off"
    };
    run(&format!("{features}, no subscriber, no recorder"));
    let info = tracing_subscriber::registry()
        .with(tracing_subscriber::filter::LevelFilter::INFO)
        .with(tracing_subscriber::fmt::layer().with_writer(std::io::sink));
    tracing::subscriber::with_default(info, || {
        run(&format!("{features}, subscriber at info"));
    });
    #[cfg(feature = "metrics")]
    {
        let recorder = metrics_util::debugging::DebuggingRecorder::new();
        metrics::with_local_recorder(&recorder, || {
            run(&format!("{features}, debugging recorder"));
        });
    }
    let debug = tracing_subscriber::registry()
        .with(tracing_subscriber::filter::LevelFilter::DEBUG)
        .with(tracing_subscriber::fmt::layer().with_writer(std::io::sink));
    tracing::subscriber::with_default(debug, || {
        run(&format!("{features}, subscriber at debug (spans on)"));
    });
}
