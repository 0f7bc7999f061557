//! Interleaved rounds of two sides (library and baseline) and the report.

use std::fmt::Write as _;
use std::future::Future;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde_json::json;

use crate::args::Args;
use crate::drive::{Class, Outcome, Reply, Round, Sampler, Shape, add, drive, new_hist};
use crate::report::{median, quantile, side_json, write_report};

/// One side of a comparison: a name, the call and how it is driven.
pub(crate) struct Contender<F> {
    pub(crate) name: &'static str,
    pub(crate) call: F,
    pub(crate) shape: Shape,
    /// Driven this long, unmeasured, right before each measured round (so
    /// state the other side's round let change settles first).
    pub(crate) settle: Duration,
}

impl<F> Contender<F> {
    /// `call` on `--concurrency` tasks, one subject per call.
    pub(crate) fn single(name: &'static str, call: F, args: &Args) -> Self {
        Contender {
            name,
            call,
            shape: Shape::single(args.concurrency),
            settle: Duration::ZERO,
        }
    }
}

/// Something measured around every measured round, outside its timing.
pub(crate) trait Probe {
    async fn before(&mut self);
    /// After a round of side 0 (the first contender) or 1.
    async fn after(&mut self, side: usize, round: &Round);
}

/// Measures nothing.
pub(crate) struct NoProbe;

impl Probe for NoProbe {
    async fn before(&mut self) {}
    async fn after(&mut self, _: usize, _: &Round) {}
}

/// Warms up, runs `a` and `b` in interleaved rounds, and reports.
pub(crate) async fn compare<A, FA, B, FB>(
    args: &Args,
    sampler: &Sampler,
    a: Contender<A>,
    b: Option<Contender<B>>,
) where
    A: Fn(&[u64]) -> FA + Clone + Send + 'static,
    FA: Future<Output = Reply> + Send + 'static,
    B: Fn(&[u64]) -> FB + Clone + Send + 'static,
    FB: Future<Output = Reply> + Send + 'static,
{
    let (a_side, b_side) = rounds(args, sampler, &a, b.as_ref(), &mut NoProbe).await;
    let b = b.as_ref().map(|b| (b.name, &b_side));
    let (table, report) = summary(args, (a.name, &a_side), b);
    print!("{table}");
    write_report(&args.kind, "load", &report);
}

/// Warms up both sides, then runs them in interleaved rounds; `probe` is
/// called around each measured round.
pub(crate) async fn rounds<A, FA, B, FB>(
    args: &Args,
    sampler: &Sampler,
    a: &Contender<A>,
    b: Option<&Contender<B>>,
    probe: &mut impl Probe,
) -> (Side, Side)
where
    A: Fn(&[u64]) -> FA + Clone + Send + 'static,
    FA: Future<Output = Reply> + Send + 'static,
    B: Fn(&[u64]) -> FB + Clone + Send + 'static,
    FB: Future<Output = Reply> + Send + 'static,
{
    let round = Duration::from_secs_f64(args.round_secs);
    let warmup = Duration::from_secs_f64(args.warmup_secs);
    let shape = |s: Shape| format!("{} tasks × {}", s.tasks, s.per_call);
    eprintln!(
        "{} on {} subjects ({}), {} rounds of {:?}: {} {}{}",
        args.kind,
        args.subjects,
        args.workload.as_deref().unwrap_or(&args.dist),
        args.rounds,
        round,
        a.name,
        shape(a.shape),
        b.map(|b| format!(", interleaved with {} {}", b.name, shape(b.shape)))
            .unwrap_or_default()
    );
    let warm = format!("warm-up {}", a.name);
    drive(&warm, warmup, None, a.shape, sampler, a.call.clone()).await;
    if let Some(b) = b {
        let warm = format!("warm-up {}", b.name);
        drive(&warm, warmup, None, b.shape, sampler, b.call.clone()).await;
    }

    let (mut a_side, mut b_side) = (Side::default(), Side::default());
    // A B B A A B …: each side goes first in half the pairs, so a slow
    // drift (an AOF rewrite, a warming cache) weighs on both alike.
    for r in 0..args.rounds {
        let a_first = r % 2 == 0;
        for turn in 0..2 {
            let label = |name| format!("round {}/{} {name}", r + 1, args.rounds);
            let (index, measured) = if (turn == 0) == a_first {
                (
                    0,
                    measure(&label(a.name), round, args, sampler, a, probe).await,
                )
            } else if let Some(b) = b {
                (
                    1,
                    measure(&label(b.name), round, args, sampler, b, probe).await,
                )
            } else {
                continue;
            };
            probe.after(index, &measured).await;
            [&mut a_side, &mut b_side][index].push(measured);
        }
    }
    eprintln!();
    (a_side, b_side)
}

/// One measured round of `side`, after its settling time.
async fn measure<F, Fut>(
    label: &str,
    length: Duration,
    args: &Args,
    sampler: &Sampler,
    side: &Contender<F>,
    probe: &mut impl Probe,
) -> Round
where
    F: Fn(&[u64]) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Reply> + Send + 'static,
{
    if !side.settle.is_zero() {
        let settling = format!("{label} (settling)");
        drive(
            &settling,
            side.settle,
            None,
            side.shape,
            sampler,
            side.call.clone(),
        )
        .await;
    }
    probe.before().await;
    let round = drive(
        label,
        length,
        args.requests,
        side.shape,
        sampler,
        side.call.clone(),
    );
    round.await
}

/// The table (rows and the a/b ratio lines) and the JSON report.
pub(crate) fn summary(
    args: &Args,
    (a_name, a_side): (&str, &Side),
    b: Option<(&str, &Side)>,
) -> (String, serde_json::Value) {
    let mut table = header();
    table.push_str(&a_side.row(a_name));
    let mut report = json!({
        "kind": args.kind,
        "subjects": args.subjects,
        "distribution": args.dist,
        "workload": args.workload,
        "zipf_s": args.zipf_s,
        "concurrency": args.concurrency,
        "batch": args.batch,
        "rounds": args.rounds,
        "round_secs": args.round_secs,
    });
    report[a_name] = a_side.json();
    let Some((b_name, b_side)) = b else {
        return (table, report);
    };
    table.push_str(&b_side.row(b_name));
    let ratios: Vec<f64> = a_side
        .rates
        .iter()
        .zip(&b_side.rates)
        .map(|(x, y)| x / y)
        .collect();
    let throughput_ratio = median(&a_side.rates) / median(&b_side.rates);
    let (q1, q3) = (quantile(&ratios, 0.25), quantile(&ratios, 0.75));
    // The p99 of all rounds pooled is at the mercy of the few rounds an
    // AOF rewrite lands in; the median of the rounds' own p99 is not.
    let p99_ratio = median(&a_side.p99s) / median(&b_side.p99s);
    let pooled_p99_ratio =
        a_side.quantile(0.99).as_secs_f64() / b_side.quantile(0.99).as_secs_f64();
    let cpu_ratio = median(&a_side.cpu_us) / median(&b_side.cpu_us);
    let extra_us = (a_side.quantile(0.5).as_secs_f64() - b_side.quantile(0.5).as_secs_f64()) * 1e6;
    writeln!(
        table,
        "{a_name}/{b_name} throughput: {throughput_ratio:.3} (ratio of the medians); per-round ratios: \
         median {:.3}, interquartile {q1:.3}..{q3:.3} over {} rounds\n\
         {a_name}/{b_name} p99: {p99_ratio:.3} (ratio of the median per-round p99s; pooled {pooled_p99_ratio:.3}); \
         p50 difference: {extra_us:+.0} µs\n\
         {a_name}/{b_name} client CPU per decision: {cpu_ratio:.3} ({:.1} / {:.1} µs, medians of rounds)",
        median(&ratios),
        ratios.len(),
        median(&a_side.cpu_us),
        median(&b_side.cpu_us),
    )
    .unwrap();
    report["ratio_cpu_per_decision"] = json!(cpu_ratio);
    report["ratio_p99_pooled"] = json!(pooled_p99_ratio);
    report[b_name] = b_side.json();
    report["ratio_throughput"] = json!(throughput_ratio);
    report["ratio_throughput_median_of_rounds"] = json!(median(&ratios));
    report["ratio_p99"] = json!(p99_ratio);
    report["round_ratios"] = json!(ratios);
    (table, report)
}

/// The header of [`Side::row`]s.
pub(crate) fn header() -> String {
    format!(
        "{:<7} {:>12} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>9} {:>9}\n",
        "",
        "decisions/s",
        "cpu µs/dec",
        "p50",
        "p90",
        "p99",
        "p99.9",
        "max",
        "errors",
        "bypassed",
        "denied",
        "cached"
    )
}

/// The rounds of one side of a comparison.
pub(crate) struct Side {
    /// Decisions per second of each round.
    pub(crate) rates: Vec<f64>,
    pub(crate) call_rates: Vec<f64>,
    pub(crate) secs: Vec<f64>,
    /// Process CPU time per decision in each round, microseconds.
    pub(crate) cpu_us: Vec<f64>,
    /// p99 of each round, microseconds.
    pub(crate) p99s: Vec<f64>,
    pub(crate) outcomes: Vec<Outcome>,
    pub(crate) hist: Histogram<u64>,
    pub(crate) outcome: Outcome,
    /// The normal users of an attack, all rounds, and their p99 per round.
    pub(crate) normal: Option<Class>,
    pub(crate) normal_p99s: Vec<f64>,
}

impl Default for Side {
    fn default() -> Self {
        Side {
            rates: Vec::new(),
            call_rates: Vec::new(),
            secs: Vec::new(),
            cpu_us: Vec::new(),
            p99s: Vec::new(),
            outcomes: Vec::new(),
            hist: new_hist(),
            outcome: Outcome::default(),
            normal: None,
            normal_p99s: Vec::new(),
        }
    }
}

impl Side {
    pub(crate) fn push(&mut self, round: Round) {
        self.rates.push(round.rate);
        self.call_rates.push(round.call_rate);
        self.secs.push(round.secs);
        self.cpu_us.push(round.cpu_us);
        self.p99s.push(round.hist.value_at_quantile(0.99) as f64);
        self.outcomes.push(round.outcome);
        self.hist.add(&round.hist).unwrap();
        add(&mut self.outcome, round.outcome);
        if let Some(n) = round.normal {
            self.normal_p99s.push(n.hist.value_at_quantile(0.99) as f64);
            let all = self.normal.get_or_insert_with(Class::default);
            all.hist.add(&n.hist).unwrap();
            add(&mut all.outcome, n.outcome);
        }
    }

    pub(crate) fn quantile(&self, q: f64) -> Duration {
        Duration::from_micros(self.hist.value_at_quantile(q))
    }

    pub(crate) fn row(&self, name: &str) -> String {
        let ms = |d: Duration| format!("{:.2}ms", d.as_secs_f64() * 1000.0);
        let o = &self.outcome;
        format!(
            "{name:<7} {:>12.0} {:>10.1} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>9} {:>9}\n",
            median(&self.rates),
            median(&self.cpu_us),
            ms(self.quantile(0.5)),
            ms(self.quantile(0.9)),
            ms(self.quantile(0.99)),
            ms(self.quantile(0.999)),
            ms(Duration::from_micros(self.hist.max())),
            o.errors,
            o.bypassed,
            o.denied,
            o.cached,
        )
    }

    pub(crate) fn json(&self) -> serde_json::Value {
        let mut json = side_json(&self.rates, &self.hist, self.outcome);
        json["calls_per_sec_rounds"] = json!(self.call_rates);
        json["calls_per_sec_median"] = json!(median(&self.call_rates));
        json["p99_us_rounds"] = json!(self.p99s);
        json["cpu_us_per_decision_rounds"] = json!(self.cpu_us);
        json["cpu_us_per_decision"] = json!(median(&self.cpu_us));
        json
    }
}
