//! The closed loop that drives calls at a fixed concurrency, and the sampler of subjects.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rand::Rng;
use rand_distr::{Distribution, Zipf};

use crate::args::Args;

/// A latency histogram, 1 µs to 60 s, 3 significant digits.
pub(crate) fn new_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).unwrap()
}

/// The attackers among `subjects` in `--workload attack`: the first 1%.
pub(crate) fn attackers(subjects: u64) -> u64 {
    (subjects / 100).max(1)
}

/// Counts over decisions (one call of a batch side makes many).
#[derive(Default, Clone, Copy)]
pub(crate) struct Outcome {
    pub(crate) ok: u64,
    pub(crate) errors: u64,
    pub(crate) bypassed: u64,
    /// Refused, by Redis or from the deny cache.
    pub(crate) denied: u64,
    /// Refused from the deny cache, without Redis (also in `denied`).
    pub(crate) cached: u64,
}

impl Outcome {
    pub(crate) fn decisions(&self) -> u64 {
        self.ok + self.errors
    }

    /// Decisions that went to Redis: all but those the deny cache answered.
    pub(crate) fn sent(&self) -> u64 {
        self.decisions() - self.cached
    }

    pub(crate) fn of(decision: &shardlimit::Decision) -> Self {
        Outcome {
            ok: 1,
            bypassed: u64::from(decision.bypassed.is_some()),
            denied: u64::from(!decision.allowed),
            cached: u64::from(decision.cached),
            ..Outcome::default()
        }
    }
}

pub(crate) fn add(total: &mut Outcome, o: Outcome) {
    total.ok += o.ok;
    total.errors += o.errors;
    total.bypassed += o.bypassed;
    total.denied += o.denied;
    total.cached += o.cached;
}

/// What one call returns: the counts of its decisions and the first error.
pub(crate) struct Reply {
    pub(crate) outcome: Outcome,
    pub(crate) error: Option<String>,
}

impl Reply {
    fn empty() -> Self {
        Reply {
            outcome: Outcome::default(),
            error: None,
        }
    }

    /// One operation (no decision to read: locks, counters, HTTP), or its
    /// error.
    pub(crate) fn of<T, E: std::fmt::Display>(result: Result<T, E>) -> Self {
        let mut reply = Reply::empty();
        match result {
            Ok(_) => reply.outcome.ok = 1,
            Err(e) => reply.fail(e),
        }
        reply
    }

    /// One decision, or its error.
    pub(crate) fn decision<E: std::fmt::Display>(result: Result<&shardlimit::Decision, E>) -> Self {
        Reply::decisions([result])
    }

    /// The decisions of one call (a batch), or their errors.
    pub(crate) fn decisions<'a, E: std::fmt::Display>(
        results: impl IntoIterator<Item = Result<&'a shardlimit::Decision, E>>,
    ) -> Self {
        let mut reply = Reply::empty();
        for result in results {
            match result {
                Ok(d) => add(&mut reply.outcome, Outcome::of(d)),
                Err(e) => reply.fail(e),
            }
        }
        reply
    }

    fn fail(&mut self, e: impl std::fmt::Display) {
        self.outcome.errors += 1;
        self.error.get_or_insert_with(|| e.to_string());
    }
}

/// How a side is driven: `tasks` loops, each call carrying `per_call`
/// subjects; closed (the next call when the last is answered) unless
/// `interval` paces each task.
#[derive(Clone, Copy)]
pub(crate) struct Shape {
    pub(crate) tasks: usize,
    pub(crate) per_call: usize,
    /// A task's calls start this far apart (a task that falls behind sends
    /// at once until it has caught up); `None`: closed loop.
    pub(crate) interval: Option<Duration>,
}

impl Shape {
    /// `tasks` closed loops of one subject per call.
    pub(crate) fn single(tasks: usize) -> Self {
        Shape {
            tasks,
            per_call: 1,
            interval: None,
        }
    }

    /// `tasks` loops of one subject per call, offering `rate` calls per
    /// second between them; `None` when the rate gives no interval a
    /// `Duration` holds (0, negative, not a number: nothing to pace).
    pub(crate) fn paced(tasks: usize, rate: f64) -> Option<Self> {
        let interval = Duration::try_from_secs_f64(tasks as f64 / rate).ok()?;
        Some(Shape {
            interval: Some(interval),
            ..Shape::single(tasks)
        })
    }
}

/// Picks subjects: uniform or Zipf over `0..subjects`, or the attack mix.
#[derive(Clone)]
pub(crate) enum Sampler {
    Uniform(u64),
    Zipf(Zipf<f64>),
    /// Subjects `0..attackers` get `share` of the requests (uniform among
    /// them); the normal users, `attackers..subjects`, the rest.
    Attack {
        attackers: u64,
        subjects: u64,
        share: f64,
    },
}

impl Sampler {
    pub(crate) fn new(args: &Args) -> Self {
        if args.workload.as_deref() == Some("attack") {
            return Sampler::Attack {
                attackers: attackers(args.subjects),
                subjects: args.subjects,
                share: args.attack_share,
            };
        }
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
            Sampler::Attack {
                attackers,
                subjects,
                share,
            } => {
                if rng.random_bool(*share) {
                    rng.random_range(0..*attackers)
                } else {
                    rng.random_range(*attackers..*subjects)
                }
            }
        }
    }

    /// Whether `k` is one of the normal users of an attack.
    fn is_normal(&self, k: u64) -> bool {
        matches!(self, Sampler::Attack { attackers, .. } if k >= *attackers)
    }

    /// An empty record of the normal users, if the sampler has them.
    fn normal_class(&self) -> Option<Class> {
        matches!(self, Sampler::Attack { .. }).then(Class::default)
    }
}

/// Latency and counts of one class of subjects (the normal users of an
/// attack).
pub(crate) struct Class {
    pub(crate) hist: Histogram<u64>,
    pub(crate) outcome: Outcome,
}

impl Default for Class {
    fn default() -> Self {
        Class {
            hist: new_hist(),
            outcome: Outcome::default(),
        }
    }
}

/// One side's round.
pub(crate) struct Round {
    /// Decisions per second (a batch call counts each of its decisions).
    pub(crate) rate: f64,
    /// Calls per second.
    pub(crate) call_rate: f64,
    pub(crate) secs: f64,
    /// Latency of each call, µs.
    pub(crate) hist: Histogram<u64>,
    pub(crate) outcome: Outcome,
    /// Process CPU time per decision, µs.
    pub(crate) cpu_us: f64,
    /// The normal users of an attack, when the sampler has them.
    pub(crate) normal: Option<Class>,
}

/// Runs `call` on `shape.tasks` tasks for `length`, or until `requests`
/// decisions were made if given, each call with `shape.per_call` subjects.
/// Prints a progress line.
pub(crate) async fn drive<F, Fut>(
    label: &str,
    length: Duration,
    requests: Option<u64>,
    shape: Shape,
    sampler: &Sampler,
    call: F,
) -> Round
where
    F: Fn(&[u64]) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Reply> + Send + 'static,
{
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let cpu_started = process_cpu();
    let tasks: Vec<_> = (0..shape.tasks)
        .map(|_| {
            let (stop, done, call, sampler) =
                (stop.clone(), done.clone(), call.clone(), sampler.clone());
            tokio::spawn(async move {
                let (mut hist, mut calls) = (new_hist(), 0u64);
                let mut outcome = Outcome::default();
                let mut normal = sampler.normal_class();
                let mut first_error = None;
                let mut subjects = vec![0; shape.per_call];
                // Paced tasks start at random phases of their interval.
                let mut next = tokio::time::Instant::now()
                    + shape
                        .interval
                        .unwrap_or_default()
                        .mul_f64(rand::rng().random::<f64>());
                while !stop.load(Ordering::Relaxed) {
                    if let Some(interval) = shape.interval {
                        tokio::time::sleep_until(next).await;
                        next += interval;
                    }
                    for k in &mut subjects {
                        *k = sampler.sample(&mut rand::rng());
                    }
                    let t = Instant::now();
                    let reply = call(&subjects).await;
                    let us = u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX);
                    hist.saturating_record(us);
                    calls += 1;
                    // One subject per call on an attack: the call's latency
                    // is that subject's.
                    if let Some(class) = normal.as_mut().filter(|_| sampler.is_normal(subjects[0]))
                    {
                        class.hist.saturating_record(us);
                        add(&mut class.outcome, reply.outcome);
                    }
                    add(&mut outcome, reply.outcome);
                    if let Some(e) = reply.error {
                        first_error.get_or_insert(e);
                    }
                    done.fetch_add(reply.outcome.decisions(), Ordering::Relaxed);
                }
                (hist, calls, outcome, normal, first_error)
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
    let (mut hist, mut calls) = (new_hist(), 0);
    let mut total = Outcome::default();
    let mut normal = sampler.normal_class();
    for t in tasks {
        let (h, c, o, n, e) = t.await.unwrap();
        hist.add(&h).unwrap();
        calls += c;
        add(&mut total, o);
        if let (Some(all), Some(n)) = (&mut normal, n) {
            all.hist.add(&n.hist).unwrap();
            add(&mut all.outcome, n.outcome);
        }
        if let Some(e) = e {
            eprintln!("\n{label}: error: {e}");
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let decisions = total.decisions();
    let cpu_us = (process_cpu() - cpu_started).as_secs_f64() * 1e6 / decisions.max(1) as f64;
    Round {
        rate: decisions as f64 / secs,
        call_rate: calls as f64 / secs,
        secs,
        hist,
        outcome: total,
        cpu_us,
        normal,
    }
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
