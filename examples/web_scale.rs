//! How fast the Limits page answers at scale, and what a page costs: not a
//! CI test (it writes a million keys), a measurement to rerun.
//!
//! ```text
//! cluster-compose/up.sh
//! cargo run --release --example web_scale -- --limiters 1000000 --pages 25
//! ```
//!
//! Populates `--limiters` fixed-window limiters (keys from the key builder,
//! each with a 15-minute TTL) in a fresh namespace, in pipelines straight
//! to their masters; serves `shardlimit_web::router` on a free loopback
//! port; loads the first `--pages` limiters pages in order (following each
//! page's "Next page" link) over plain HTTP, timing each whole response;
//! counts each page's SCAN calls from the masters' `INFO commandstats`
//! (other clients' SCANs would add to them: run it on a quiet cluster);
//! prints the median, p90 and maximum; then deletes every key it wrote.
//! Options: `--page-size N` (default 50, the router's default),
//! `--scan-count N` (default 100), `--subject GLOB` (a subject filter, to
//! time a sparse one).

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

use clap::Parser;
use rand::Rng;
use shardlimit::Cluster;
use shardlimit::keys::{KeyId, slot};
use shardlimit_web::{WebOptions, router};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Parser)]
struct Args {
    /// Limiters to populate.
    #[arg(long, default_value_t = 1_000_000)]
    limiters: usize,
    /// Pages to load and time.
    #[arg(long, default_value_t = 25)]
    pages: usize,
    /// Rows per page.
    #[arg(long, default_value_t = 50)]
    page_size: usize,
    /// Only subjects matching this glob (a sparse filter: e.g. `s12345*`).
    #[arg(long)]
    subject: Option<String>,
    /// COUNT per SCAN call.
    #[arg(long, default_value_t = shardlimit::admin::DEFAULT_SCAN_COUNT)]
    scan_count: u32,
}

type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

/// The masters' addresses, and a connection to each.
async fn masters(cluster: &Cluster) -> AnyResult<Vec<(String, redis::aio::MultiplexedConnection)>> {
    let mut out = Vec::new();
    for shard in cluster.topology().await?.shards {
        let addr = shard.master.to_string();
        let conn = redis::Client::open(format!("redis://{addr}"))?
            .get_multiplexed_async_connection()
            .await?;
        out.push((addr, conn));
    }
    Ok(out)
}

/// Runs `queue` for every key, in pipelines of 5000 on each key's master.
async fn pipelined(
    cluster: &Cluster,
    keys: &[Vec<u8>],
    queue: fn(&mut redis::Pipeline, &[u8]),
) -> AnyResult<()> {
    let topology = cluster.topology().await?;
    let mut per_master: BTreeMap<String, Vec<&[u8]>> = BTreeMap::new();
    for key in keys {
        let owner = topology.owner(slot(key)).ok_or("a slot without a master")?;
        per_master
            .entry(owner.master.to_string())
            .or_default()
            .push(key);
    }
    let conns: BTreeMap<String, _> = masters(cluster).await?.into_iter().collect();
    let work = per_master.into_iter().map(|(addr, keys)| {
        let mut conn = conns[&addr].clone();
        async move {
            for chunk in keys.chunks(5000) {
                let mut pipe = redis::pipe();
                for key in chunk {
                    queue(&mut pipe, key);
                }
                let () = pipe.query_async(&mut conn).await?;
            }
            Ok::<_, redis::RedisError>(())
        }
    });
    for result in futures::future::join_all(work).await {
        result?;
    }
    Ok(())
}

async fn scan_calls(cluster: &Cluster) -> AnyResult<u64> {
    let mut total = 0;
    for (_, mut conn) in masters(cluster).await? {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut conn)
            .await?;
        total += info
            .lines()
            .find_map(|l| l.strip_prefix("cmdstat_scan:calls="))
            .and_then(|rest| rest.split(',').next()?.parse::<u64>().ok())
            .unwrap_or(0);
    }
    Ok(total)
}

/// GET `path` from `addr`; the body.
async fn get(addr: &str, path: &str) -> AnyResult<String> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    if !response.starts_with("HTTP/1.1 200") {
        return Err(format!("{path}: {}", response.lines().next().unwrap_or("")).into());
    }
    Ok(response)
}

fn summary(name: &str, mut values: Vec<Duration>) {
    values.sort();
    let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
    println!(
        "{name}: median {:?}, p90 {:?}, max {:?} over {} pages",
        at(0.5),
        at(0.9),
        at(1.0),
        values.len()
    );
}

#[tokio::main]
async fn main() -> AnyResult<()> {
    let args = Args::parse();
    let namespace = format!("webscale-{:08x}", rand::rng().random::<u32>());
    let cluster = Cluster::builder_from_env()
        .namespace(&namespace)
        .build()
        .await?;
    let id = KeyId::new("fw", "scale")?;
    let keys: Vec<Vec<u8>> = (0..args.limiters)
        .map(|i| cluster.keys().key(format!("s{i}"), &id))
        .collect::<Result<_, _>>()?;
    let started = Instant::now();
    pipelined(&cluster, &keys, |pipe, key| {
        pipe.cmd("SET")
            .arg(key)
            .arg(1)
            .arg("PX")
            .arg(900_000)
            .ignore();
    })
    .await?;
    println!(
        "populated {} limiters in namespace {namespace} in {:?}",
        args.limiters,
        started.elapsed()
    );

    let options = WebOptions::builder()
        .page_size(NonZeroUsize::new(args.page_size).ok_or("--page-size must be at least 1")?)
        .scan_count(args.scan_count)
        .build()?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?.to_string();
    tokio::spawn(axum::serve(listener, router(&cluster, options)).into_future());

    let outcome = async {
        let (mut times, mut calls, mut rows) = (Vec::new(), Vec::new(), 0usize);
        let mut path = "/limiters?kind=fw&name=scale".to_owned();
        if let Some(glob) = &args.subject {
            // Globs here are made of letters, digits, `*` and `?`.
            path.push_str(&format!("&subject={}", glob.replace('*', "%2A").replace('?', "%3F")));
        }
        for _ in 0..args.pages {
            let before = scan_calls(&cluster).await?;
            let started = Instant::now();
            let page = get(&addr, &path).await?;
            times.push(started.elapsed());
            calls.push(scan_calls(&cluster).await? - before);
            rows += page.matches("class=\"subject\"").count();
            let Some(at) = page.find("id=\"next\" href=\"") else { break };
            let href = &page[at + 16..];
            path = href[..href.find('"').ok_or("unterminated href")?].replace("&amp;", "&");
        }
        calls.sort();
        summary("page load (whole HTTP response)", times);
        println!(
            "rows shown: {rows}; SCAN calls per page (INFO commandstats, all masters): median {}, max {}",
            calls[calls.len() / 2],
            calls[calls.len() - 1]
        );
        Ok::<_, Box<dyn std::error::Error>>(())
    }
    .await;
    let started = Instant::now();
    pipelined(&cluster, &keys, |pipe, key| {
        pipe.cmd("DEL").arg(key).ignore();
    })
    .await?;
    println!("deleted them in {:?}", started.elapsed());
    outcome
}
