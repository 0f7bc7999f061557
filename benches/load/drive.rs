//! The closed loop that drives calls at a fixed concurrency, and the sampler of subjects.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rand::Rng;
use rand_distr::{Distribution, Zipf};

use crate::args::Args;
use crate::report::new_hist;

#[derive(Default, Clone, Copy)]
pub(crate) struct Outcome {
    pub(crate) ok: u64,
    pub(crate) errors: u64,
    pub(crate) bypassed: u64,
}

/// Picks subjects: uniform or Zipf over `0..subjects`.
#[derive(Clone)]
pub(crate) enum Sampler {
    Uniform(u64),
    Zipf(Zipf<f64>),
}

impl Sampler {
    pub(crate) fn new(args: &Args) -> Self {
        match args.dist.as_str() {
            "uniform" => Sampler::Uniform(args.subjects),
            "zipf" => Sampler::Zipf(Zipf::new(args.subjects as f64, args.zipf_s).unwrap()),
            other => panic!("unknown distribution {other:?}"),
        }
    }

    pub(crate) fn sample(&self, rng: &mut impl Rng) -> u64 {
        match self {
            Sampler::Uniform(n) => rng.random_range(0..*n),
            Sampler::Zipf(z) => z.sample(rng) as u64 - 1,
        }
    }
}

/// Runs `call` on `concurrency` tasks for `length`, or until `requests`
/// calls completed if given; returns decisions/s, the latency histogram (µs)
/// and the outcome counts. Prints a progress line.
pub(crate) async fn drive<F, Fut>(
    label: &str,
    length: Duration,
    requests: Option<u64>,
    args: &Args,
    sampler: &Sampler,
    call: F,
) -> (f64, Histogram<u64>, Outcome, f64)
where
    F: Fn(u64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<bool, String>> + Send + 'static,
{
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let cpu_started = process_cpu();
    let tasks: Vec<_> = (0..args.concurrency)
        .map(|_| {
            let (stop, done, call, sampler) =
                (stop.clone(), done.clone(), call.clone(), sampler.clone());
            tokio::spawn(async move {
                let mut hist = new_hist();
                let mut outcome = Outcome::default();
                let mut first_error = None;
                while !stop.load(Ordering::Relaxed) {
                    let k = sampler.sample(&mut rand::rng());
                    let t = Instant::now();
                    match call(k).await {
                        Ok(bypassed) => {
                            outcome.ok += 1;
                            outcome.bypassed += u64::from(bypassed);
                        }
                        Err(e) => {
                            outcome.errors += 1;
                            first_error.get_or_insert(e);
                        }
                    }
                    hist.saturating_record(
                        u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX),
                    );
                    done.fetch_add(1, Ordering::Relaxed);
                }
                (hist, outcome, first_error)
            })
        })
        .collect();
    let finished = || match requests {
        Some(n) => done.load(Ordering::Relaxed) >= n,
        None => started.elapsed() >= length,
    };
    while !finished() {
        tokio::time::sleep(Duration::from_millis(if requests.is_some() {
            10
        } else {
            500
        }))
        .await;
        let secs = started.elapsed().as_secs_f64();
        eprint!(
            "\r{label}: {:>9.0} decisions/s   ",
            done.load(Ordering::Relaxed) as f64 / secs
        );
    }
    stop.store(true, Ordering::Relaxed);
    let mut hist = new_hist();
    let mut total = Outcome::default();
    for t in tasks {
        let (h, o, e) = t.await.unwrap();
        hist.add(&h).unwrap();
        add(&mut total, o);
        if let Some(e) = e {
            eprintln!("\n{label}: error: {e}");
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let calls = total.ok + total.errors;
    let cpu_us = (process_cpu() - cpu_started).as_secs_f64() * 1e6 / calls.max(1) as f64;
    (calls as f64 / elapsed, hist, total, cpu_us)
}

/// CPU time (user + system) this process has used, from `/proc/self/stat`
/// (clock ticks of 1/100 s, Linux's fixed user-space `USER_HZ`); zero where
/// there is no procfs.
pub(crate) fn process_cpu() -> Duration {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return Duration::ZERO;
    };
    // Fields after the command name (which may hold spaces) in parentheses:
    // state is field 3, utime field 14, stime field 15.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return Duration::ZERO;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

pub(crate) fn add(total: &mut Outcome, o: Outcome) {
    total.ok += o.ok;
    total.errors += o.errors;
    total.bypassed += o.bypassed;
}
