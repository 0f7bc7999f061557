//! `shardlimit`: the cluster-wide view of every limiter, lock, lease and
//! counter under a namespace (feature `cli`).
//!
//! ```text
//! shardlimit list [--kind K] [--name N] [--subject GLOB] [--json]
//! shardlimit show <subject> [--json]
//! shardlimit count [--json]
//! shardlimit audit [--json]        # exit code 1 when anything is found
//! shardlimit reset <subject> [--kind K] [--name N] [--dry-run] [--force] [--yes]
//! shardlimit health
//! ```
//!
//! Global: `--nodes` (or `SHARDLIMIT_NODES`, comma-separated
//! `redis://host:port`, `rediss://` for TLS; default the six local test
//! nodes), `--deployment` (or `SHARDLIMIT_DEPLOYMENT`: `detect` by default,
//! `cluster`, `standalone` for one plain redis-server), `--namespace`
//! (default `sl`); credentials `--user` (or
//! `SHARDLIMIT_USER`) with the password from `SHARDLIMIT_PASSWORD` or
//! `--password-file` (never a flag: it would show in `ps`); TLS `--tls-ca`,
//! `--tls-cert`, `--tls-key` (or `SHARDLIMIT_TLS_CA`, ...). No output ever
//! shows a password: nodes are printed as `redis://user:***@host:port`, and
//! `--help` does not print the environment's values. A progress bar goes to stderr when it is a terminal;
//! `--json` prints JSON Lines (one object per line) so output streams at
//! millions of limiters.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use futures::StreamExt;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value, json};
use shardlimit::Cluster;
use shardlimit::admin::{LimiterInfo, Progress, ResetPlan, ScanEvent, Scanner, Usage};

#[derive(Parser, Debug)]
#[command(
    name = "shardlimit",
    version,
    about = "See and manage every shardlimit primitive on a Redis Cluster"
)]
struct Cli {
    /// Seed nodes, comma-separated redis:// (or rediss:// for TLS) URLs.
    #[arg(
        long,
        env = "SHARDLIMIT_NODES",
        hide_env_values = true,
        value_delimiter = ',',
        global = true
    )]
    nodes: Vec<String>,
    /// What the nodes are: detect (default; standalone only when the one
    /// node given has cluster support disabled), cluster or standalone.
    #[arg(long, env = "SHARDLIMIT_DEPLOYMENT", global = true)]
    deployment: Option<shardlimit::Deployment>,
    /// ACL username for every node.
    #[arg(long, env = "SHARDLIMIT_USER", hide_env_values = true, global = true)]
    user: Option<String>,
    /// File holding the password (one trailing newline ignored). The
    /// password can also come from the environment variable
    /// SHARDLIMIT_PASSWORD; there is no flag for it, so it never shows in `ps`.
    #[arg(
        long,
        env = "SHARDLIMIT_PASSWORD_FILE",
        hide_env_values = true,
        global = true
    )]
    password_file: Option<std::path::PathBuf>,
    /// PEM file of the CA certificates to trust for rediss:// nodes
    /// (default: the system's trust store).
    #[arg(long, env = "SHARDLIMIT_TLS_CA", hide_env_values = true, global = true)]
    tls_ca: Option<std::path::PathBuf>,
    /// PEM client certificate for mutual TLS (with --tls-key).
    #[arg(
        long,
        env = "SHARDLIMIT_TLS_CERT",
        hide_env_values = true,
        requires = "tls_key",
        global = true
    )]
    tls_cert: Option<std::path::PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(
        long,
        env = "SHARDLIMIT_TLS_KEY",
        hide_env_values = true,
        requires = "tls_cert",
        global = true
    )]
    tls_key: Option<std::path::PathBuf>,
    /// The namespace the primitives were built with.
    #[arg(long, default_value = "sl", global = true)]
    namespace: String,
    /// Timeout of each command, in milliseconds.
    #[arg(long, default_value_t = 2000, global = true)]
    timeout_ms: u64,
    /// Keys asked for per SCAN call.
    #[arg(long, default_value_t = shardlimit::admin::DEFAULT_SCAN_COUNT, global = true)]
    scan_count: u32,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Every primitive, one line each.
    List {
        /// Only this kind (fw, slog, swc, gcra, lock, lease, counter, ...).
        #[arg(long)]
        kind: Option<String>,
        /// Only this name.
        #[arg(long)]
        name: Option<String>,
        /// Only subjects matching this glob (* and ?).
        #[arg(long)]
        subject: Option<String>,
        /// JSON Lines instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Every primitive of one subject.
    Show {
        subject: String,
        #[arg(long)]
        json: bool,
    },
    /// Primitives per master, kind and name.
    Count {
        #[arg(long)]
        json: bool,
    },
    /// Keys without a TTL and keys that are not shardlimit's; exit code 1 if any.
    Audit {
        #[arg(long)]
        json: bool,
    },
    /// Delete one subject's keys (all, or one kind / name) in one transaction.
    ///
    /// Refuses (exit code 1) when a lock is held, a lease has permits or a
    /// counter has a value, unless --force. Asks for confirmation when stdin
    /// is a terminal, unless --yes.
    Reset {
        subject: String,
        #[arg(long)]
        kind: Option<String>,
        #[arg(long)]
        name: Option<String>,
        /// List exactly what would be deleted, and what is in use; delete nothing.
        #[arg(long)]
        dry_run: bool,
        /// Delete held locks, leases with permits and undrained counters too.
        #[arg(long)]
        force: bool,
        /// Do not ask for confirmation.
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// Cluster state, masters and replicas, AOF, memory per master.
    Health,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(code) => code,
        Err(err) => {
            eprintln!("shardlimit: {err}");
            let mut source = std::error::Error::source(&*err);
            while let Some(cause) = source {
                eprintln!("  caused by: {cause}");
                source = cause.source();
            }
            ExitCode::from(2)
        }
    }
}

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

async fn run(cli: Cli) -> AnyResult<ExitCode> {
    let nodes: Vec<String> = if cli.nodes.is_empty() {
        Cluster::seeds_from_env()
    } else {
        cli.nodes.clone()
    };
    let mut builder = Cluster::builder(nodes)
        .namespace(&cli.namespace)
        .command_timeout(Duration::from_millis(cli.timeout_ms));
    if let Some(deployment) = cli.deployment {
        builder = builder.deployment(deployment);
    }
    if let Some(user) = &cli.user {
        builder = builder.username(user);
    }
    // The environment's password wins over a file, as in
    // `Cluster::builder_from_env`.
    match std::env::var(shardlimit::PASSWORD_ENV) {
        Ok(password) if !password.is_empty() => builder = builder.password(password),
        _ => {
            if let Some(path) = &cli.password_file {
                builder = builder.password_file(path);
            }
        }
    }
    if let Some(ca) = &cli.tls_ca {
        builder = builder.tls_ca_file(ca);
    }
    if let (Some(cert), Some(key)) = (&cli.tls_cert, &cli.tls_key) {
        builder = builder.tls_client_cert_files(cert, key);
    }
    let cluster = builder.build().await?;
    let scanner = Scanner::new(&cluster).count(cli.scan_count);
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let table = std::io::stdout().is_terminal();
    match cli.command {
        Command::List {
            kind,
            name,
            subject,
            json,
        } => {
            let mut scanner = scanner;
            if let Some(kind) = kind {
                scanner = scanner.kind(kind);
            }
            if let Some(name) = name {
                scanner = scanner.name(name);
            }
            if let Some(glob) = subject {
                scanner = scanner.subject_glob(glob);
            }
            let (scanner, bar) = with_progress(scanner);
            let mut events = Box::pin(scanner.scan());
            let mut incomplete = false;
            if !json {
                header(&mut out, table)?;
            }
            while let Some(event) = events.next().await {
                match event {
                    ScanEvent::Limiter(info) if json => writeln!(out, "{}", info_json(&info))?,
                    ScanEvent::Limiter(info) => row(&mut out, table, &info)?,
                    ScanEvent::Unrecognized { key, node } => {
                        bar.suspend(|| {
                            eprintln!(
                                "not a shardlimit key on {node}: {}",
                                String::from_utf8_lossy(&key)
                            )
                        });
                    }
                    ScanEvent::Incomplete { node, error } => {
                        incomplete = true;
                        bar.suspend(|| eprintln!("{node}: scan incomplete: {error}"));
                    }
                    other => bar.suspend(|| eprintln!("{other:?}")),
                }
            }
            bar.finish_and_clear();
            out.flush()?;
            Ok(if incomplete {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            })
        }
        Command::Show { subject, json } => {
            let found = scanner.subject(&subject).await?;
            if !json {
                header(&mut out, table)?;
            }
            for info in &found {
                if json {
                    writeln!(out, "{}", info_json(info))?;
                } else {
                    row(&mut out, table, info)?;
                }
            }
            out.flush()?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Count { json } => {
            let (scanner, bar) = with_progress(scanner);
            let report = scanner.count_limiters().await?;
            bar.finish_and_clear();
            for ((node, kind, name), n) in &report.counts {
                if json {
                    writeln!(
                        out,
                        "{}",
                        json!({"node": node, "kind": kind, "name": name, "count": n})
                    )?;
                } else {
                    writeln!(out, "{node}\t{kind}\t{name}\t{n}")?;
                }
            }
            if json {
                writeln!(
                    out,
                    "{}",
                    json!({"total": report.total(), "unrecognized": report.unrecognized, "incomplete": report.incomplete})
                )?;
            } else {
                writeln!(out, "total\t{}", report.total())?;
                if report.unrecognized > 0 {
                    writeln!(out, "unrecognized keys\t{}", report.unrecognized)?;
                }
            }
            out.flush()?;
            for node in &report.incomplete {
                eprintln!("{node}: scan incomplete");
            }
            Ok(if report.incomplete.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            })
        }
        Command::Audit { json } => {
            let (scanner, bar) = with_progress(scanner);
            let report = scanner.audit().await?;
            bar.finish_and_clear();
            for (key, node) in &report.immortal {
                let key = String::from_utf8_lossy(key);
                if json {
                    writeln!(
                        out,
                        "{}",
                        json!({"problem": "no_ttl", "key": key, "node": node})
                    )?;
                } else {
                    writeln!(out, "no TTL (never expires)\t{node}\t{key}")?;
                }
            }
            for (key, node) in &report.unrecognized {
                let key = String::from_utf8_lossy(key);
                if json {
                    writeln!(
                        out,
                        "{}",
                        json!({"problem": "unrecognized", "key": key, "node": node})
                    )?;
                } else {
                    writeln!(out, "not a shardlimit key\t{node}\t{key}")?;
                }
            }
            for node in &report.incomplete {
                if json {
                    writeln!(out, "{}", json!({"problem": "incomplete", "node": node}))?;
                } else {
                    writeln!(out, "scan incomplete\t{node}")?;
                }
            }
            if !json {
                writeln!(
                    out,
                    "{} keys scanned: {} without TTL, {} unrecognized",
                    report.scanned,
                    report.immortal.len(),
                    report.unrecognized.len()
                )?;
            }
            out.flush()?;
            Ok(if report.is_clean() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Reset {
            subject,
            kind,
            name,
            dry_run,
            force,
            yes,
        } => {
            let plan = scanner
                .plan_reset(&subject, kind.as_deref(), name.as_deref())
                .await?;
            if dry_run {
                for key in plan.keys() {
                    writeln!(out, "would delete\t{}", String::from_utf8_lossy(key))?;
                }
                for info in plan.primitives() {
                    writeln!(
                        out,
                        "state\t{} {}\t{}",
                        info.kind,
                        info.name,
                        info.usage.describe()
                    )?;
                }
                for reason in plan.in_use() {
                    writeln!(out, "in use (needs --force)\t{reason}")?;
                }
                writeln!(
                    out,
                    "{} keys of subject {subject:?}; nothing deleted (dry run)",
                    plan.keys().len()
                )?;
                out.flush()?;
                return Ok(ExitCode::SUCCESS);
            }
            if !force && !plan.in_use().is_empty() {
                for reason in plan.in_use() {
                    eprintln!("in use: {reason}");
                }
                eprintln!(
                    "refused: nothing deleted; --dry-run lists the keys, --force deletes them anyway"
                );
                return Ok(ExitCode::from(1));
            }
            if !yes && std::io::stdin().is_terminal() && !confirm(&subject, &plan)? {
                eprintln!("aborted: nothing deleted");
                return Ok(ExitCode::from(1));
            }
            let deleted = plan.execute(&scanner, force).await?;
            writeln!(out, "deleted {deleted} keys of subject {subject:?}")?;
            out.flush()?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Health => {
            let health = cluster.health().await?;
            writeln!(out, "slots covered: {} of 16384", health.covered_slots)?;
            for m in &health.masters {
                match &m.status {
                    Ok(s) => writeln!(
                        out,
                        "master {}\trole {}\treplicas {} known, {} connected\tAOF {}\tcluster_state {}\tused memory {}",
                        m.master,
                        s.role,
                        m.known_replicas,
                        s.connected_replicas,
                        if s.aof_enabled { "on" } else { "OFF" },
                        if s.cluster_state_ok { "ok" } else { "FAIL" },
                        human_bytes(s.used_memory),
                    )?,
                    Err(err) => writeln!(out, "master {}\tdid not answer: {err}", m.master)?,
                }
            }
            let problems = health.lock_problems();
            if problems.is_empty() {
                writeln!(out, "fit for locks: yes")?;
            } else {
                for p in &problems {
                    writeln!(out, "lock safety: {p}")?;
                }
            }
            out.flush()?;
            Ok(if problems.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
    }
}

/// Shows what a reset deletes and asks on stderr; true on `y` or `yes`.
fn confirm(subject: &str, plan: &ResetPlan) -> std::io::Result<bool> {
    let mut err = std::io::stderr().lock();
    for key in plan.keys() {
        writeln!(err, "will delete\t{}", String::from_utf8_lossy(key))?;
    }
    for reason in plan.in_use() {
        writeln!(err, "in use (forced)\t{reason}")?;
    }
    write!(
        err,
        "delete {} keys of subject {subject:?}? [y/N] ",
        plan.keys().len()
    )?;
    err.flush()?;
    let mut answer = String::new();
    std::io::stdin().read_line(&mut answer)?;
    Ok(matches!(
        answer.trim().to_ascii_lowercase().as_str(),
        "y" | "yes"
    ))
}

/// A progress bar on stderr (hidden unless stderr is a terminal), fed by
/// the scanner: keys scanned over the masters' DBSIZE.
fn with_progress(scanner: Scanner) -> (Scanner, ProgressBar) {
    let bar = if std::io::stderr().is_terminal() {
        ProgressBar::new(0)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("{spinner} scanned {pos}/{len} keys ({per_sec}) {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let per_node = Arc::new(std::sync::Mutex::new(std::collections::BTreeMap::<
        String,
        Progress,
    >::new()));
    let feed = bar.clone();
    let scanner = scanner.on_progress(move |p| {
        let mut nodes = per_node
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        nodes.insert(p.node.clone(), p.clone());
        feed.set_length(nodes.values().map(|p| p.dbsize.max(p.scanned)).sum());
        feed.set_position(nodes.values().map(|p| p.scanned).sum());
        let done = nodes.values().filter(|p| p.done).count();
        feed.set_message(format!("{done}/{} masters done", nodes.len()));
    });
    (scanner, bar)
}

const COLUMNS: [&str; 7] = ["KIND", "NAME", "SUBJECT", "SLOT", "NODE", "TTL", "STATE"];

fn header(out: &mut impl Write, table: bool) -> std::io::Result<()> {
    if table {
        writeln!(
            out,
            "{:<8} {:<16} {:<32} {:>5} {:<16} {:>10} {}",
            COLUMNS[0], COLUMNS[1], COLUMNS[2], COLUMNS[3], COLUMNS[4], COLUMNS[5], COLUMNS[6]
        )
    } else {
        writeln!(out, "{}", COLUMNS.join("\t"))
    }
}

fn row(out: &mut impl Write, table: bool, info: &LimiterInfo) -> std::io::Result<()> {
    let ttl = match info.ttl {
        Some(ttl) => format!("{}ms", ttl.as_millis()),
        None => "NONE".to_owned(),
    };
    let subject = info.subject_lossy();
    let state = info.usage.describe();
    if table {
        writeln!(
            out,
            "{:<8} {:<16} {:<32} {:>5} {:<16} {:>10} {}",
            info.kind, info.name, subject, info.slot, info.node, ttl, state
        )
    } else {
        writeln!(
            out,
            "{}\t{}\t{}\t{}\t{}\t{}\t{}",
            info.kind, info.name, subject, info.slot, info.node, ttl, state
        )
    }
}

fn info_json(info: &LimiterInfo) -> Value {
    let subject = match std::str::from_utf8(&info.subject) {
        Ok(text) => json!(text),
        Err(_) => {
            json!({ "hex": info.subject.iter().map(|b| format!("{b:02x}")).collect::<String>() })
        }
    };
    let usage = match &info.usage {
        Usage::FixedWindow { used } => json!({"used": used}),
        Usage::SlidingLog { entries } => json!({"entries": entries}),
        Usage::SlidingWindow { current, previous } => {
            json!({"current": current, "previous": previous})
        }
        Usage::Gcra {
            theoretical_arrival_us,
        } => json!({"theoretical_arrival_us": theoretical_arrival_us}),
        Usage::Lease { holders } => json!({"holders": holders}),
        Usage::Lock {
            held,
            fencing_token,
        } => json!({"held": held, "fencing_token": fencing_token}),
        Usage::Counter { value } => json!({"value": value}),
        Usage::Other { redis_type } => json!({"redis_type": redis_type}),
        other => json!({"state": other.describe()}),
    };
    json!({
        "kind": info.kind,
        "name": info.name,
        "subject": subject,
        "slot": info.slot,
        "node": info.node,
        "ttl_ms": info.ttl.map(|t| t.as_millis()),
        "state": usage,
    })
}

fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}
