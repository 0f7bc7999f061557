//! Seed 000's nightly export: every cron host runs the same job at the same
//! time, and a lock makes exactly one of them do the work.
//!
//! ```text
//! cluster-compose/up.sh
//! scripts/nightly_export_race.sh          # three "hosts" at once
//! cargo run --example nightly_export -- --host cron-01 --export-secs 5
//! ```
//!
//! Options: `--host NAME` (label in the output; default `$HOSTNAME` or the
//! pid), `--namespace NS` (default `sl`), `--export-secs N` (how long the
//! "export" takes; default 2), `--ttl-secs N` (the lock's TTL; default 3600,
//! the seed's hour). Honours `SHARDLIMIT_NODES`.
//!
//! The winner prints `acquired lock, exporting`, the lock's remaining TTL and
//! fencing token, exports, and releases; the others print `lock held
//! elsewhere, exiting` and exit 0. If Redis cannot be asked, the export is
//! skipped and the process exits 1: a lock fails closed, because running
//! twice is worse than not running.

use std::time::Duration;

use shardlimit::{Cluster, Lock};

struct Args {
    host: String,
    namespace: String,
    export: Duration,
    ttl: Duration,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        host: std::env::var("HOSTNAME").unwrap_or_else(|_| format!("pid-{}", std::process::id())),
        namespace: "sl".to_owned(),
        export: Duration::from_secs(2),
        ttl: Duration::from_secs(3600),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let secs = || {
            value
                .parse::<f64>()
                .map_err(|e| e.to_string())
                .and_then(|s| Duration::try_from_secs_f64(s).map_err(|e| e.to_string()))
                .map_err(|e| format!("{flag} {value}: {e}"))
        };
        match flag.as_str() {
            "--host" => args.host = value.clone(),
            "--namespace" => args.namespace = value.clone(),
            "--export-secs" => args.export = secs()?,
            "--ttl-secs" => args.ttl = secs()?,
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(args)
}

#[tokio::main]
async fn main() {
    let args = match parse_args() {
        Ok(args) => args,
        Err(err) => {
            eprintln!("nightly_export: {err}");
            std::process::exit(2);
        }
    };
    let host = args.host.clone();
    if let Err(err) = run(args).await {
        // Fail closed, and loudly: an alert, not a silent skip.
        println!("{host}  export skipped: lock unavailable: {err}");
        std::process::exit(1);
    }
}

async fn run(args: Args) -> shardlimit::Result<()> {
    let host = &args.host;
    let cluster = Cluster::builder_from_env()
        .namespace(&args.namespace)
        .command_timeout(Duration::from_millis(500))
        .build()
        .await?;
    let lock = Lock::builder(&cluster, "job").ttl(args.ttl).build()?;
    let Some(guard) = lock.try_acquire("nightly-export").await? else {
        println!("{host}  lock held elsewhere, exiting");
        return Ok(());
    };
    println!("{host}  acquired lock, exporting");
    let key = cluster.keys().key(
        "nightly-export",
        &shardlimit::keys::KeyId::new("lock", "job")?,
    )?;
    match guard.remaining_ttl().await? {
        Some(ttl) => println!(
            "{host}  lock {} TTL {} s, fencing token {}",
            String::from_utf8_lossy(&key),
            ttl.as_secs_f64().round(),
            guard.fencing_token()
        ),
        None => println!("{host}  lock already gone?"),
    }
    tokio::select! {
        () = tokio::time::sleep(args.export) => {
            println!("{host}  wrote 41208 rows");
        }
        () = guard.lost() => {
            // Another host may hold it now: stop writing.
            println!("{host}  lock lost, export aborted");
            return Ok(());
        }
    }
    if guard.release().await? {
        println!("{host}  released lock");
    } else {
        println!("{host}  lock had expired before the export finished");
    }
    Ok(())
}
