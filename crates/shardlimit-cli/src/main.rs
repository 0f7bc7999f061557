//! `shardlimit`: the cluster-wide view of every limiter, lock, lease and
//! counter under a namespace.
//!
//! ```text
//! shardlimit list [--kind K] [--name N] [--subject GLOB] [--quota NAME=60/1m]… [--json]
//! shardlimit show <subject> [--quota NAME=60/1m]… [--json]
//! shardlimit count [--json]
//! shardlimit audit [--json]        # exit code 1 when anything is found
//! shardlimit reset <subject> [--kind K] [--name N] [--dry-run] [--force] [--yes]
//! shardlimit override set <subject> <kind>:<name> <limit>/<period>[:burst=N] [--ttl 30d] [--json]
//! shardlimit override get <subject> <kind>:<name> [--json]
//! shardlimit override clear <subject> <kind>:<name> [--json]
//! shardlimit health
//! shardlimit top [--name N] [--kind K] [--limit 20] [--watch] [--json]
//! shardlimit web [--listen 127.0.0.1:8080] [--allow-writes] [--allow-host NAME]… [--quota NAME=60/1m]…
//! ```
//!
//! Global: `--nodes` (or `SHARDLIMIT_NODES`, comma-separated
//! `redis://host:port`, `rediss://` for TLS; required — or
//! `SHARDLIMIT_CLUSTER_PORT=7000` for the six local test nodes),
//! `--deployment` (or `SHARDLIMIT_DEPLOYMENT`: `detect` by default,
//! `cluster`, `standalone` for one plain redis-server, `sentinel` with
//! `--sentinel-service` or `SHARDLIMIT_SENTINEL_SERVICE`), `--namespace`
//! (or `SHARDLIMIT_NAMESPACE`; default `sl`); credentials `--user` (or
//! `SHARDLIMIT_USER`) with the password from `SHARDLIMIT_PASSWORD` or
//! `--password-file` (never a flag: it would show in `ps`); TLS `--tls-ca`,
//! `--tls-cert`, `--tls-key` (or `SHARDLIMIT_TLS_CA`, ...); the subject
//! secret the services hash credentials with, from `SHARDLIMIT_SUBJECT_SECRET`
//! or `--subject-secret-file` (`show` hashes the raw key with it). No output ever
//! shows a password: nodes are printed as `redis://user:***@host:port`, and
//! `--help` does not print the environment's values. A progress bar goes to stderr when it is a terminal;
//! `--json` prints JSON Lines (one object per line) so output streams at
//! millions of limiters.

mod args;
mod audit;
mod count;
mod health;
mod list;
mod output;
mod overrides;
mod quotas;
mod reset;
mod syntax;
mod top;
mod web;

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use shardlimit::Cluster;
use shardlimit::admin::Scanner;

use self::args::{Cli, Command};
use self::output::AnyResult;

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

async fn run(cli: Cli) -> AnyResult<ExitCode> {
    let cluster = connect(&cli).await?;
    let scanner = Scanner::new(&cluster).count(cli.scan_count);
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let table = std::io::stdout().is_terminal();
    match cli.command {
        Command::List {
            kind,
            name,
            subject,
            json,
            quotas,
        } => {
            let filters = list::Filters {
                kind,
                name,
                subject,
            };
            list::list(scanner, &mut out, table, filters, &quotas, json).await
        }
        Command::Show {
            subject,
            json,
            quotas,
        } => list::show(&scanner, &mut out, table, &subject, &quotas, json).await,
        Command::Count { json } => count::count(scanner, &mut out, json).await,
        Command::Audit { json } => audit::audit(scanner, &mut out, json).await,
        Command::Reset(args) => reset::reset(&scanner, &mut out, args).await,
        Command::Override(command) => overrides::run(&cluster, &mut out, command).await,
        Command::Health => health::health(&cluster, &mut out).await,
        Command::Top(args) => top::top(&cluster, &mut out, args).await,
        Command::Web(args) => web::run(&cluster, cli.scan_count, args).await,
    }
}

/// The cluster handle the global options describe.
async fn connect(cli: &Cli) -> AnyResult<Cluster> {
    let nodes: Vec<String> = if cli.nodes.is_empty() {
        Cluster::seeds_from_env()?
    } else {
        cli.nodes.clone()
    };
    let mut builder = Cluster::builder(nodes)
        .namespace(&cli.namespace)
        .command_timeout(Duration::from_millis(cli.timeout_ms));
    if let Some(deployment) = cli.deployment {
        builder = builder.deployment(deployment);
    }
    if let Some(service) = &cli.sentinel_service {
        builder = builder.sentinel_service(service);
    }
    if let Some(user) = &cli.user {
        builder = builder.username(user);
    }
    // The environment's password wins over a file, as in
    // `Cluster::builder_from_env`.
    match std::env::var(shardlimit::cluster::PASSWORD_ENV) {
        Ok(password) if !password.is_empty() => builder = builder.password(password),
        _ => {
            if let Some(path) = &cli.password_file {
                builder = builder.password_file(path);
            }
        }
    }
    // Likewise the subject secret: the environment's wins over a file.
    match std::env::var(shardlimit::cluster::SUBJECT_SECRET_ENV) {
        Ok(secret) if !secret.is_empty() => builder = builder.subject_secret(secret),
        _ => {
            if let Some(path) = &cli.subject_secret_file {
                builder = builder.subject_secret_file(path);
            }
        }
    }
    if let Some(ca) = &cli.tls_ca {
        builder = builder.tls_ca_file(ca);
    }
    if let (Some(cert), Some(key)) = (&cli.tls_cert, &cli.tls_key) {
        builder = builder.tls_client_cert_files(cert, key);
    }
    Ok(builder.build().await?)
}
