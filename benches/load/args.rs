//! The command line of the load harness.

use clap::Parser;

#[derive(Parser, Debug, Clone)]
#[command(about = "shardlimit load harness")]
pub(crate) struct Args {
    /// fw | slog | swc | gcra | lock | lease | counter; or `tower` (needs
    /// `--features tower`): the HTTP layer around a GCRA limiter against the
    /// limiter called directly.
    #[arg(long, default_value = "gcra")]
    pub(crate) kind: String,
    /// Distinct subjects.
    #[arg(long, default_value_t = 1_000_000)]
    pub(crate) subjects: u64,
    /// uniform | zipf
    #[arg(long, default_value = "uniform")]
    pub(crate) dist: String,
    /// Zipf exponent (with --dist zipf).
    #[arg(long, default_value_t = 1.1)]
    pub(crate) zipf_s: f64,
    /// Requests in flight.
    #[arg(long, default_value_t = 64)]
    pub(crate) concurrency: usize,
    /// Measured rounds per side.
    #[arg(long, default_value_t = 10)]
    pub(crate) rounds: usize,
    /// Length of one round, seconds.
    #[arg(long, default_value_t = 3.0, value_parser = non_negative)]
    pub(crate) round_secs: f64,
    /// Requests per round instead of a duration (`--round-secs` is then
    /// ignored for the measured rounds).
    #[arg(long)]
    pub(crate) requests: Option<u64>,
    /// Warm-up before measuring, seconds (both sides).
    #[arg(long, default_value_t = 2.0, value_parser = non_negative)]
    pub(crate) warmup_secs: f64,
    /// `raw`: interleave rounds of bare redis-rs running the same script.
    /// `plain`: interleave rounds of the library against `--plain-nodes`.
    /// `nocache`: with `--workload attack`, the same limiter without a deny
    /// cache (the default there). `single`: with `--batch`, single checks
    /// (the default there).
    #[arg(long)]
    pub(crate) baseline: Option<String>,
    /// `attack`: 1% of the subjects send `--attack-share` of the requests at
    /// `--overload` times their limit; the library with a deny cache against
    /// the same limiter without one (see attack.rs). `hot`: one subject
    /// past one master's rate, quota slices against exact checks (see
    /// hot.rs). `skewed`: Zipf subjects, a few hot, automatic slicing
    /// against exact checks (see skewed.rs).
    #[arg(long)]
    pub(crate) workload: Option<String>,
    /// With `--workload hot`: the hot subject's limit per second.
    #[arg(long, default_value_t = 200_000)]
    pub(crate) hot_limit: u32,
    /// With `--workload hot`: the declared bound of the quota slices, as a
    /// fraction of the limit.
    #[arg(long, default_value_t = 0.1)]
    pub(crate) hot_bound: f64,
    /// With `--workload hot`: separate `Cluster` handles the tasks are
    /// spread over.
    #[arg(long, default_value_t = 4)]
    pub(crate) hot_handles: usize,
    /// With `--workload skewed`: subjects, picked by Zipf (`--zipf-s`).
    #[arg(long, default_value_t = 10_000)]
    pub(crate) skewed_subjects: usize,
    /// With `--workload skewed`: each subject's limit per second.
    #[arg(long, default_value_t = 2_000)]
    pub(crate) skewed_limit: u32,
    /// With `--workload skewed`: the declared bound of the automatic
    /// slices, as a fraction of the limit.
    #[arg(long, default_value_t = 0.1)]
    pub(crate) skewed_bound: f64,
    /// With `--workload skewed`: separate `Cluster` handles the tasks are
    /// spread over.
    #[arg(long, default_value_t = 4)]
    pub(crate) skewed_handles: usize,
    /// With `--workload skewed`: how long a slice lasts, ms (the default
    /// threshold is 8 units per longest slice, 10 lifetimes).
    #[arg(long, default_value_t = 100)]
    pub(crate) skewed_lifetime_ms: u64,
    /// With `--workload skewed`: the hot threshold, checks per second per
    /// process (default: the library's, 8 units per longest slice, 10
    /// lifetimes).
    #[arg(long)]
    pub(crate) skewed_threshold: Option<f64>,
    /// With `--workload attack`: the attackers' share of the requests.
    #[arg(long, default_value_t = 0.9)]
    pub(crate) attack_share: f64,
    /// With `--workload attack`: how many times their limit the attackers
    /// send at the uncached side's throughput.
    #[arg(long, default_value_t = 10.0)]
    pub(crate) overload: f64,
    /// With `--workload attack`: after the closed-loop rounds, paced rounds
    /// offering both sides this share of the uncached side's calibrated
    /// throughput, on 4 × `--concurrency` tasks (0: none).
    #[arg(long, default_value_t = 0.5, value_parser = non_negative)]
    pub(crate) paced_share: f64,
    /// With `--workload attack`: the deny cache's entries; default
    /// max(10000, subjects / 50), room for every attacker.
    #[arg(long)]
    pub(crate) deny_cache: Option<u64>,
    /// `check_many` with this many subjects per call, against single checks
    /// at the same decisions in flight: `--concurrency / batch` tasks of
    /// one batch each against `--concurrency` tasks of one check each (see
    /// batch.rs).
    #[arg(long)]
    pub(crate) batch: Option<usize>,
    /// Seed URLs (comma-separated) of the plaintext cluster for
    /// `--baseline plain`.
    #[arg(long)]
    pub(crate) plain_nodes: Option<String>,
    /// Instead of a load run: what one check costs Redis, on one master,
    /// against a minimal one-key GCRA script and a bare INCR, at pipeline
    /// depth 1 and 16 (see server_cost.rs).
    #[arg(long)]
    pub(crate) server_cost: bool,
    /// Instead of a load run: shardlimit against its peers on one master
    /// (envoy ratelimit's fixed window, go-redis/redis_rate's GCRA) and the
    /// plain-command shapes of a fixed window, at pipeline depth 1 and 16
    /// (see peers.rs). Its own defaults: 5 rounds of 1.5 s unless
    /// `--rounds` / `--round-secs` are given.
    #[arg(long)]
    pub(crate) peers: bool,
    /// With `--peers`: which of its sets to run, comma-separated among
    /// `fixed-window` (against envoy), `gcra` (against redis_rate) and
    /// `plain` (the plain-command shapes). All three by default.
    #[arg(long, value_delimiter = ',', default_value = "fixed-window,gcra,plain",
          value_parser = ["fixed-window", "gcra", "plain"])]
    pub(crate) peers_sets: Vec<String>,
    /// Instead of a load run: print the Lua of the crate's script of this
    /// name as the crate sends it (`gcra`, `multi_limit`, ...), for
    /// benches/script_cost.sh.
    #[arg(long)]
    pub(crate) print_script: Option<String>,
    /// Instead of a load run: create this many limiters and measure memory.
    #[arg(long)]
    pub(crate) populate: Option<u64>,
    /// Quota of the rate limiters: this many per `--period-secs`. The
    /// default never denies at bench load and keeps every key short-lived;
    /// for `--populate`, a low limit keeps GCRA keys alive (a GCRA key lives
    /// until its bucket is full again): `--limit 1 --period-secs 3600`. A
    /// sliding log uses at most its maximum limit, 128.
    #[arg(long, default_value_t = 1_000_000)]
    pub(crate) limit: u32,
    /// Period of the quota, seconds.
    #[arg(long, default_value_t = 60)]
    pub(crate) period_secs: u64,
    /// Namespace (a fresh one per run by default).
    #[arg(long)]
    pub(crate) namespace: Option<String>,
    /// Whether `--rounds` was given (modes with defaults of their own use
    /// theirs otherwise).
    #[arg(skip)]
    pub(crate) rounds_given: bool,
    /// Whether `--round-secs` was given.
    #[arg(skip)]
    pub(crate) round_secs_given: bool,
    /// Ignored (cargo bench passes it).
    #[arg(long, hide = true)]
    pub(crate) bench: bool,
}

/// A share or a length in seconds: 0 or more, and a number. clap
/// refuses anything else with this message instead of a panic deep in the
/// run, where each becomes a `Duration` (which cannot hold a negative, NaN
/// or infinite number of seconds).
fn non_negative(arg: &str) -> Result<f64, String> {
    match arg.parse::<f64>() {
        Ok(value) if value.is_finite() && value >= 0.0 => Ok(value),
        Ok(_) => Err(format!("{arg} is not a finite number >= 0")),
        Err(e) => Err(format!("{arg}: {e}")),
    }
}
