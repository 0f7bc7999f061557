//! Interleaved rounds of two sides (library and baseline) and the report.

use std::fmt::Write as _;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde_json::json;

use crate::args::Args;
use crate::drive::{Outcome, Sampler, add, drive};
use crate::report::{median, new_hist, quantile, side_json, write_report};

/// Warms up, then runs `a` and `b` in interleaved rounds, and reports.
pub(crate) async fn compare<A, FA, B, FB>(
    args: &Args,
    sampler: &Sampler,
    (a_name, a): (&'static str, A),
    b: Option<(&'static str, B)>,
) where
    A: Fn(u64) -> FA + Clone + Send + 'static,
    FA: std::future::Future<Output = Result<bool, String>> + Send + 'static,
    B: Fn(u64) -> FB + Clone + Send + 'static,
    FB: std::future::Future<Output = Result<bool, String>> + Send + 'static,
{
    let round = Duration::from_secs_f64(args.round_secs);
    let warmup = Duration::from_secs_f64(args.warmup_secs);
    eprintln!(
        "{} on {} subjects ({}), concurrency {}, {} rounds of {:?}{}",
        args.kind,
        args.subjects,
        args.dist,
        args.concurrency,
        args.rounds,
        round,
        b.as_ref()
            .map(|(name, _)| format!(", interleaved with {name}"))
            .unwrap_or_default()
    );
    drive(
        &format!("warm-up {a_name}"),
        warmup,
        None,
        args,
        sampler,
        a.clone(),
    )
    .await;
    if let Some((b_name, b)) = &b {
        drive(
            &format!("warm-up {b_name}"),
            warmup,
            None,
            args,
            sampler,
            b.clone(),
        )
        .await;
    }

    let (mut a_side, mut b_side) = (Side::default(), Side::default());
    // A B B A A B …: each side goes first in half the pairs, so a slow
    // drift (an AOF rewrite, a warming cache) weighs on both alike.
    for r in 0..args.rounds {
        let a_first = r % 2 == 0;
        for turn in 0..2 {
            if (turn == 0) == a_first {
                let label = format!("round {}/{} {a_name}", r + 1, args.rounds);
                a_side.push(drive(&label, round, args.requests, args, sampler, a.clone()).await);
            } else if let Some((b_name, b)) = &b {
                let label = format!("round {}/{} {b_name}", r + 1, args.rounds);
                b_side.push(drive(&label, round, args.requests, args, sampler, b.clone()).await);
            }
        }
    }
    eprintln!();

    let mut table = String::new();
    writeln!(
        table,
        "{:<7} {:>12} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8}",
        "", "decisions/s", "cpu µs/op", "p50", "p90", "p99", "p99.9", "max", "errors", "bypassed"
    )
    .unwrap();
    table.push_str(&a_side.row(a_name));
    let mut report = json!({
        "kind": args.kind,
        "subjects": args.subjects,
        "distribution": args.dist,
        "zipf_s": args.zipf_s,
        "concurrency": args.concurrency,
        "rounds": args.rounds,
        "round_secs": args.round_secs,
    });
    report[a_name] = a_side.json();
    if let Some((b_name, _)) = &b {
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
        let extra_us =
            (a_side.quantile(0.5).as_secs_f64() - b_side.quantile(0.5).as_secs_f64()) * 1e6;
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
        report[*b_name] = b_side.json();
        report["ratio_throughput"] = json!(throughput_ratio);
        report["ratio_throughput_median_of_rounds"] = json!(median(&ratios));
        report["ratio_p99"] = json!(p99_ratio);
        report["round_ratios"] = json!(ratios);
    }
    print!("{table}");
    write_report(&args.kind, "load", &report);
}

/// The rounds of one side of a comparison.
pub(crate) struct Side {
    pub(crate) rates: Vec<f64>,
    /// Process CPU time per decision in each round, microseconds.
    pub(crate) cpu_us: Vec<f64>,
    /// p99 of each round, microseconds.
    pub(crate) p99s: Vec<f64>,
    pub(crate) hist: Histogram<u64>,
    pub(crate) outcome: Outcome,
}

impl Default for Side {
    fn default() -> Self {
        Side {
            rates: Vec::new(),
            cpu_us: Vec::new(),
            p99s: Vec::new(),
            hist: new_hist(),
            outcome: Outcome::default(),
        }
    }
}

impl Side {
    pub(crate) fn push(
        &mut self,
        (rate, hist, outcome, cpu_us): (f64, Histogram<u64>, Outcome, f64),
    ) {
        self.rates.push(rate);
        self.cpu_us.push(cpu_us);
        self.p99s.push(hist.value_at_quantile(0.99) as f64);
        self.hist.add(&hist).unwrap();
        add(&mut self.outcome, outcome);
    }

    pub(crate) fn quantile(&self, q: f64) -> Duration {
        Duration::from_micros(self.hist.value_at_quantile(q))
    }

    pub(crate) fn row(&self, name: &str) -> String {
        let ms = |d: Duration| format!("{:.2}ms", d.as_secs_f64() * 1000.0);
        format!(
            "{name:<7} {:>12.0} {:>9.1} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8}\n",
            median(&self.rates),
            median(&self.cpu_us),
            ms(self.quantile(0.5)),
            ms(self.quantile(0.9)),
            ms(self.quantile(0.99)),
            ms(self.quantile(0.999)),
            ms(Duration::from_micros(self.hist.max())),
            self.outcome.errors,
            self.outcome.bypassed
        )
    }

    pub(crate) fn json(&self) -> serde_json::Value {
        let mut json = side_json(&self.rates, &self.hist, self.outcome);
        json["p99_us_rounds"] = json!(self.p99s);
        json["cpu_us_per_decision_rounds"] = json!(self.cpu_us);
        json["cpu_us_per_decision"] = json!(median(&self.cpu_us));
        json
    }
}
