//! Support shared by the integration tests: a cluster handle under a fresh
//! namespace, direct connections to single nodes, the live topology, and the
//! "every key has a TTL" check.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

pub mod acl;
pub mod child;
pub mod http;

use std::collections::BTreeMap;

use rand::Rng;
use redis::Value;
use shardlimit::{Cluster, cluster::ClusterBuilder};

/// Seed node URLs: `SHARDLIMIT_NODES`, else the six local nodes at
/// `SHARDLIMIT_CLUSTER_PORT`, else those at 7000 (the library itself has no
/// such default: `Cluster::seeds_from_env` refuses to guess). A test that
/// starts the CLI or an example passes these on as `SHARDLIMIT_NODES`.
pub fn node_urls() -> Vec<String> {
    Cluster::seeds_from_env().unwrap_or_else(|_| {
        shardlimit::cluster::DEFAULT_NODES
            .iter()
            .map(|s| (*s).to_owned())
            .collect()
    })
}

/// A namespace no other test uses.
pub fn unique_namespace(prefix: &str) -> String {
    format!("{prefix}-{:08x}", rand::rng().random::<u32>())
}

/// A builder for the test cluster under a fresh namespace.
pub fn builder(prefix: &str) -> ClusterBuilder {
    Cluster::builder(node_urls()).namespace(unique_namespace(prefix))
}

/// A handle on a cluster that is not there: nothing listens on port 1, and
/// the lazily built handle never connects, so every call fails at once as a
/// transient connection error.
pub async fn unreachable_cluster() -> Cluster {
    Cluster::builder(["redis://127.0.0.1:1"])
        .lazy_connect(true)
        .command_timeout(std::time::Duration::from_millis(100))
        .connect_timeout(std::time::Duration::from_millis(200))
        .build()
        .await
        .unwrap()
}

/// Limiters `open` (fail-open) and `closed` (fail-closed, the default)
/// with the same quota.
pub fn open_and_closed(
    cluster: &Cluster,
    quota: shardlimit::Quota,
) -> (shardlimit::RateLimiter, shardlimit::RateLimiter) {
    let open = shardlimit::RateLimiter::builder(cluster, "open", quota)
        .failure_policy(shardlimit::FailurePolicy::FailOpen)
        .build()
        .unwrap();
    let closed = shardlimit::RateLimiter::builder(cluster, "closed", quota)
        .build()
        .unwrap();
    (open, closed)
}

/// A connected handle under a fresh namespace.
pub async fn cluster(prefix: &str) -> Cluster {
    builder(prefix)
        .build()
        .await
        .expect("the test cluster is not reachable; start it with cluster-compose/up.sh")
}

/// A handle of its own on `namespace` (as another process would have),
/// patient: its calls may take 2 s, so checks that must not fail do not
/// fail on a loaded machine.
pub async fn handle(namespace: &str) -> Cluster {
    Cluster::builder(node_urls())
        .namespace(namespace)
        .command_timeout(std::time::Duration::from_secs(2))
        .build()
        .await
        .expect("the test cluster is not reachable; start it with cluster-compose/up.sh")
}

/// A direct (non-cluster) connection to one node, e.g. `"127.0.0.1:7000"`.
///
/// Its replies may take up to 10 s: the fault tests send admin commands
/// (`CLUSTER SETSLOT`, `MIGRATE`) to nodes busy with load and recovering
/// from the previous scenario, and redis-rs' default response timeout
/// failed one in a clean CI run.
pub async fn node(addr: &str) -> redis::aio::MultiplexedConnection {
    let config = redis::AsyncConnectionConfig::new()
        .set_response_timeout(Some(std::time::Duration::from_secs(10)));
    redis::Client::open(format!("redis://{addr}"))
        .unwrap()
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap()
}

/// One master as `CLUSTER SLOTS` describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Master {
    pub addr: String,
    pub id: String,
    pub ranges: Vec<(u16, u16)>,
}

impl Master {
    pub fn owns(&self, slot: u16) -> bool {
        self.ranges.iter().any(|&(a, b)| (a..=b).contains(&slot))
    }
}

/// The masters and their slot ranges, asked of the first reachable seed.
pub async fn masters() -> Vec<Master> {
    let mut last_err = None;
    for url in node_urls() {
        let addr = url.trim_start_matches("redis://").to_owned();
        let Ok(client) = redis::Client::open(format!("redis://{addr}")) else {
            continue;
        };
        let mut conn = match client.get_multiplexed_async_connection().await {
            Ok(conn) => conn,
            Err(err) => {
                last_err = Some(err);
                continue;
            }
        };
        let slots: Value = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async(&mut conn)
            .await
            .unwrap();
        return parse_slots(slots);
    }
    panic!("no seed node answered: {last_err:?}");
}

fn parse_slots(slots: Value) -> Vec<Master> {
    let mut by_addr: BTreeMap<String, Master> = BTreeMap::new();
    let Value::Array(ranges) = slots else {
        panic!("CLUSTER SLOTS: {slots:?}")
    };
    for range in ranges {
        let Value::Array(fields) = range else {
            panic!()
        };
        let start: u16 = redis::from_redis_value(fields[0].clone()).unwrap();
        let end: u16 = redis::from_redis_value(fields[1].clone()).unwrap();
        let Value::Array(master) = &fields[2] else {
            panic!()
        };
        let host: String = redis::from_redis_value(master[0].clone()).unwrap();
        let port: u16 = redis::from_redis_value(master[1].clone()).unwrap();
        let id: String = redis::from_redis_value(master[2].clone()).unwrap();
        let addr = format!("{host}:{port}");
        by_addr
            .entry(addr.clone())
            .or_insert_with(|| Master {
                addr,
                id,
                ranges: Vec::new(),
            })
            .ranges
            .push((start, end));
    }
    by_addr.into_values().collect()
}

/// The master that owns `slot`.
pub async fn owner(slot: u16) -> Master {
    masters()
        .await
        .into_iter()
        .find(|m| m.owns(slot))
        .unwrap_or_else(|| panic!("no master owns slot {slot}"))
}

/// A direct connection to every master. Right after a failover the seed
/// asked may still name the dead master in `CLUSTER SLOTS` (a fault test
/// saw `Connection refused` here): ask again, for up to 15 s, until every
/// master it names answers.
async fn master_connections() -> Vec<redis::aio::MultiplexedConnection> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let mut conns = Vec::new();
        let mut refused = None;
        for master in masters().await {
            let client = redis::Client::open(format!("redis://{}", master.addr)).unwrap();
            match client.get_multiplexed_async_connection().await {
                Ok(conn) => conns.push(conn),
                Err(err) => {
                    refused = Some((master.addr, err));
                    break;
                }
            }
        }
        match refused {
            None => return conns,
            Some(_) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
            Some((addr, err)) => {
                panic!("master {addr} named in CLUSTER SLOTS refused for 15 s: {err}")
            }
        }
    }
}

/// Every key under `namespace` on one node (`SCAN`, which has no key, is
/// answered even while the node says `CLUSTERDOWN`).
pub async fn scan_keys(
    conn: &mut redis::aio::MultiplexedConnection,
    namespace: &str,
) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{namespace}:*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(conn)
            .await
            .unwrap();
        out.extend(keys);
        cursor = next;
        if cursor == 0 {
            return out;
        }
    }
}

/// Every key of `namespace`'s primitives on every master, with its PTTL:
/// the catalog of limiter specs (`<ns>:{shardlimit.catalog}:…`, which every
/// rate limiter publishes to in the background) and the throttled reports
/// (`<ns>:{shardlimit:throttled}:…`, published while a rate limiter
/// denies) are left out.
pub async fn keys_with_pttl(namespace: &str) -> Vec<(Vec<u8>, i64)> {
    let catalog = format!("{namespace}:{{shardlimit.catalog}}:").into_bytes();
    let reports = format!("{namespace}:{{shardlimit:throttled}}:").into_bytes();
    let mut keys = all_keys_with_pttl(namespace).await;
    keys.retain(|(key, _)| !key.starts_with(&catalog) && !key.starts_with(&reports));
    keys
}

/// Every key under `namespace` on every master, the catalog's too, with
/// its PTTL.
pub async fn all_keys_with_pttl(namespace: &str) -> Vec<(Vec<u8>, i64)> {
    let mut out = Vec::new();
    for mut conn in master_connections().await {
        for key in scan_keys(&mut conn, namespace).await {
            let pttl: i64 = redis::cmd("PTTL")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .unwrap();
            // -2: expired between SCAN and PTTL, which is fine.
            if pttl != -2 {
                out.push((key, pttl));
            }
        }
    }
    out
}

/// Fails the test if any key under `namespace` (the catalog's too) has no
/// TTL.
pub async fn assert_every_key_has_ttl(namespace: &str) {
    let immortal: Vec<String> = all_keys_with_pttl(namespace)
        .await
        .into_iter()
        .filter(|(_, pttl)| *pttl < 0)
        .map(|(key, _)| String::from_utf8_lossy(&key).into_owned())
        .collect();
    assert!(immortal.is_empty(), "keys without TTL: {immortal:?}");
}

/// `DUMP` of `key` on its master (None if absent): equal dumps mean the
/// value was not written.
pub async fn dump(key: &[u8]) -> Option<Vec<u8>> {
    let owner = owner(shardlimit::keys::slot(key)).await;
    let mut conn = node(&owner.addr).await;
    redis::cmd("DUMP")
        .arg(key)
        .query_async(&mut conn)
        .await
        .unwrap()
}

/// A direct connection to the master owning `key`: an independent view, not
/// through the library under test.
pub async fn owner_conn(key: &[u8]) -> redis::aio::MultiplexedConnection {
    node(&owner(shardlimit::keys::slot(key)).await.addr).await
}

/// `PTTL` of `key` on its master (-2 absent, -1 no TTL).
pub async fn pttl(key: &[u8]) -> i64 {
    let owner = owner(shardlimit::keys::slot(key)).await;
    let mut conn = node(&owner.addr).await;
    redis::cmd("PTTL")
        .arg(key)
        .query_async(&mut conn)
        .await
        .unwrap()
}

/// Runs `cmd` with `key` on the key's master (for planting test state).
pub async fn on_owner<T: redis::FromRedisValue>(key: &[u8], cmd: &mut redis::Cmd) -> T {
    let owner = owner(shardlimit::keys::slot(key)).await;
    let mut conn = node(&owner.addr).await;
    cmd.query_async(&mut conn).await.unwrap()
}

/// Polls until none of `keys` exists (read on their masters directly, not
/// through the library); after `bound`, fails with each one left and its
/// PTTL.
pub async fn wait_until_all_gone(keys: &[Vec<u8>], bound: std::time::Duration) {
    let start = std::time::Instant::now();
    loop {
        let mut left = Vec::new();
        for key in keys {
            let pttl = pttl(key).await;
            if pttl != -2 {
                left.push(format!("{} (PTTL {pttl} ms)", String::from_utf8_lossy(key)));
            }
        }
        if left.is_empty() {
            return;
        }
        assert!(
            start.elapsed() < bound,
            "still there after {bound:?}: {}",
            left.join(", ")
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

// ---- ACL users ----------------------------------------------------------------

/// The least-privilege `shardlimit` user's rule (created by
/// `cluster-compose/up.sh`) as a node reports it, without its password.
/// (`ACL GETUSER` would be shaped differently per version; `ACL LIST` is
/// one line.)
pub async fn acl_rule_of(conn: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
    let list: Vec<String> = redis::cmd("ACL")
        .arg("LIST")
        .query_async(conn)
        .await
        .unwrap();
    let line = list
        .iter()
        .find(|l| l.starts_with("user shardlimit "))
        .expect("up.sh created the shardlimit user");
    line.split_whitespace()
        .skip(3) // user shardlimit on
        .filter(|p| !p.starts_with('#') && !p.starts_with('>'))
        .map(str::to_owned)
        .collect()
}

/// Creates (or resets) `user` with `password` on the node behind `conn`
/// (an admin connection), with the `shardlimit` user's rule minus
/// `missing` (e.g. `"+wait"`).
pub async fn acl_set_user_without(
    conn: &mut redis::aio::MultiplexedConnection,
    user: &str,
    password: &str,
    missing: &str,
) {
    let mut cmd = redis::cmd("ACL");
    cmd.arg("SETUSER").arg(user).arg("reset").arg("on");
    cmd.arg(format!(">{password}"));
    for part in acl_rule_of(conn).await {
        if part != missing {
            cmd.arg(part);
        }
    }
    let () = cmd.query_async(conn).await.unwrap();
}

/// A user like the least-privilege `shardlimit` one but lacking one
/// permission, on every node of the cluster; deleted from them again when
/// dropped, whether the test passed or not. Its keys and channels are the
/// rule's: [`AclUser::builder`] gives a namespace it may use.
pub struct AclUser {
    pub name: String,
    pub password: String,
    nodes: Vec<String>,
}

impl AclUser {
    pub async fn without(missing: &str) -> AclUser {
        let topology = cluster("acl").await.topology().await.unwrap();
        let nodes: Vec<String> = topology
            .shards
            .iter()
            .flat_map(|s| std::iter::once(&s.master).chain(&s.replicas))
            .map(ToString::to_string)
            .collect();
        let name = format!("noperm-{:08x}", rand::rng().random::<u32>());
        let password = format!("pw-{:016x}", rand::rng().random::<u64>());
        for addr in &nodes {
            acl_set_user_without(&mut node(addr).await, &name, &password, missing).await;
        }
        AclUser {
            name,
            password,
            nodes,
        }
    }

    /// A builder logged in as this user, under a fresh namespace its key
    /// pattern (`~aclsmoke-*`) allows.
    pub fn builder(&self) -> ClusterBuilder {
        Cluster::builder(node_urls())
            .namespace(unique_namespace("aclsmoke"))
            .username(&self.name)
            .password(&self.password)
    }
}

impl Drop for AclUser {
    fn drop(&mut self) {
        for addr in &self.nodes {
            if let Err(err) = cmd_blocking(addr, &["ACL", "DELUSER", &self.name]) {
                eprintln!("could not delete ACL user {} on {addr}: {err}", self.name);
            }
        }
    }
}

// ---- slot migration ---------------------------------------------------------

/// `args` as one command.
fn words(args: &[&str]) -> redis::Cmd {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    c
}

/// Runs a command given as words on one node.
pub async fn cmd(addr: &str, args: &[&str]) -> Value {
    let mut conn = node(addr).await;
    words(args).query_async(&mut conn).await.unwrap()
}

/// [`cmd`] on a synchronous connection, for `Drop` impls (there is no
/// async drop; it blocks whatever runtime drops it), errors returned.
pub fn cmd_blocking(addr: &str, args: &[&str]) -> redis::RedisResult<Value> {
    let mut conn = redis::Client::open(format!("redis://{addr}"))?.get_connection()?;
    words(args).query(&mut conn)
}

/// Moves `slot` and its keys from `from` to `to`, then tells every master.
pub async fn move_slot(slot: u16, from: &Master, to: &Master, all: &[Master]) {
    start_move(slot, from, to).await;
    migrate_keys(slot, from, to).await;
    finish_move(slot, to, all).await;
}

/// Up to 1000 keys of `slot` that the node at `addr` holds.
pub async fn keys_in_slot(addr: &str, slot: u16) -> Vec<Vec<u8>> {
    let mut conn = node(addr).await;
    redis::cmd("CLUSTER")
        .arg("GETKEYSINSLOT")
        .arg(slot)
        .arg(1000)
        .query_async(&mut conn)
        .await
        .unwrap()
}

/// Flags `slot` importing on `to` and migrating on `from`: its keys stay
/// where they are until moved.
pub async fn start_move(slot: u16, from: &Master, to: &Master) {
    let s = slot.to_string();
    cmd(&to.addr, &["CLUSTER", "SETSLOT", &s, "IMPORTING", &from.id]).await;
    cmd(&from.addr, &["CLUSTER", "SETSLOT", &s, "MIGRATING", &to.id]).await;
}

/// Moves every key of `slot` from `from` to `to` in one `MIGRATE`.
pub async fn migrate_keys(slot: u16, from: &Master, to: &Master) {
    let keys = keys_in_slot(&from.addr, slot).await;
    migrate(&from.addr, &to.addr, &keys).await;
}

/// Moves `keys` from node `from` to node `to` in one `MIGRATE ... KEYS`.
pub async fn migrate(from: &str, to: &str, keys: &[Vec<u8>]) {
    if keys.is_empty() {
        return;
    }
    let (host, port) = to.rsplit_once(':').unwrap();
    let mut conn = node(from).await;
    let mut migrate = redis::cmd("MIGRATE");
    migrate
        .arg(host)
        .arg(port)
        .arg("")
        .arg(0)
        .arg(5000)
        .arg("KEYS");
    for key in keys {
        migrate.arg(key);
    }
    let _: Value = migrate.query_async(&mut conn).await.unwrap();
}

/// Ends a test that moved `slot` away from `source` (or only flagged it
/// migrating): the slot goes back to `source` with its keys, or its flags
/// are cleared; then the test's own panic, if any, carries on.
pub async fn hand_back(
    slot: u16,
    source: &Master,
    target: &Master,
    all: &[Master],
    outcome: std::thread::Result<()>,
) {
    let now = owner(slot).await;
    if now.addr != source.addr {
        move_slot(slot, &now, source, all).await;
    } else {
        let s = slot.to_string();
        cmd(&source.addr, &["CLUSTER", "SETSLOT", &s, "STABLE"]).await;
        cmd(&target.addr, &["CLUSTER", "SETSLOT", &s, "STABLE"]).await;
    }
    assert_eq!(owner(slot).await.addr, source.addr);
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

pub async fn finish_move(slot: u16, to: &Master, all: &[Master]) {
    let s = slot.to_string();
    // The new owner first, so the slot is never without one.
    cmd(&to.addr, &["CLUSTER", "SETSLOT", &s, "NODE", &to.id]).await;
    for m in all.iter().filter(|m| m.addr != to.addr) {
        cmd(&m.addr, &["CLUSTER", "SETSLOT", &s, "NODE", &to.id]).await;
    }
}

/// Log lines written while a thread-local subscriber is set
/// (`tracing::subscriber::set_default` with `fmt().with_writer(…)`).
#[derive(Clone, Default)]
pub struct LogLines(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogLines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl LogLines {
    /// Captures this thread's log lines (plain text, every level from
    /// `INFO`) until the guard is dropped.
    pub fn capture() -> (Self, tracing::subscriber::DefaultGuard) {
        let logs = LogLines::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        (logs, tracing::subscriber::set_default(subscriber))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// The lines captured so far that contain `needle`.
    pub fn lines_with(&self, needle: &str) -> Vec<String> {
        self.text()
            .lines()
            .filter(|l| l.contains(needle))
            .map(str::to_owned)
            .collect()
    }
}

/// Waits until `limiter` has published its spec to the catalog `n` times
/// in all (a background task does it; see `shardlimit::limit`'s catalog).
pub async fn catalog_published(limiter: &shardlimit::RateLimiter, n: u64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while limiter.catalog_publishing().published < n {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            limiter.catalog_publishing()
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Waits, if need be, until the fixed window of `period` now current has at
/// least `needed` left. Fixed windows start at multiples of their period
/// since the Unix epoch by the server's clock (this machine's, the cluster
/// being local), so a test that expects one window's denials to last — an
/// hour's override, a one-per-hour limit — would see them end at once if it
/// ran across a boundary: a stop's CI run failed so, 15 ms after a whole
/// hour (`tests/faults/deny_cache.rs`).
pub async fn clear_of_window_end(period: std::time::Duration, needed: std::time::Duration) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros();
    let left = period.as_micros() - now % period.as_micros();
    if left < needed.as_micros() {
        // Past the boundary, with a margin for the server's clock read.
        let wait = u64::try_from(left).unwrap() + 50_000;
        tokio::time::sleep(std::time::Duration::from_micros(wait)).await;
    }
}

/// Runs `cargo build <args>` in the workspace (this build's target
/// directory) and returns the path of `exe` under its `debug/`: the
/// examples and the `shardlimit` binary, which the test harness does not
/// build for this package's tests. A second build finds them fresh.
///
/// The build runs in the environment the test was started from, without the
/// variables cargo sets for the test itself (`CARGO_MANIFEST_DIR`,
/// `CARGO_PKG_*`, `OUT_DIR`, …): build scripts watch some of them (`ring`'s
/// watches `CARGO_MANIFEST_DIR`), so with them set this build found `ring`
/// "dirty" and compiled it, `rustls`, `redis` and the library again — over
/// a minute on 2 cores, in the middle of the tests, although
/// `scripts/test.sh` had built the very same thing before them (and the
/// next `cargo test` then compiled them back).
///
/// Under `scripts/test.sh` (which sets `SHARDLIMIT_PREBUILT`), compiling
/// anything here fails the test: the script built it first so that no test
/// builds while others time their checks.
pub fn cargo_built(args: &[&str], exe: &str) -> std::path::PathBuf {
    let root = env!("CARGO_MANIFEST_DIR");
    let mut command = std::process::Command::new(env!("CARGO"));
    command.arg("build").args(args).current_dir(root);
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(set_by_cargo_for_tests) {
            command.env_remove(name);
        }
    }
    let out = command.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "cargo build {args:?} failed:\n{stderr}"
    );
    let compiled: Vec<&str> = stderr
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("Compiling "))
        .collect();
    assert!(
        compiled.is_empty() || std::env::var_os("SHARDLIMIT_PREBUILT").is_none(),
        "cargo build {args:?} compiled {compiled:?} although scripts/test.sh built it before \
         the tests: this build's environment differs from the script's in a variable a \
         build script watches (`cargo build -v` says which: \"Dirty …: the env variable … \
         changed\")"
    );
    let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| format!("{root}/target"));
    std::path::Path::new(&target).join("debug").join(exe)
}

/// Variables cargo sets for the test process (and the crates it compiles),
/// never in the environment cargo itself was started from.
fn set_by_cargo_for_tests(name: &str) -> bool {
    matches!(
        name,
        "CARGO_MANIFEST_DIR"
            | "CARGO_MANIFEST_PATH"
            | "CARGO_MANIFEST_LINKS"
            | "CARGO_CRATE_NAME"
            | "CARGO_BIN_NAME"
            | "CARGO_PRIMARY_PACKAGE"
            | "CARGO_TARGET_TMPDIR"
            | "CARGO_RUSTC_CURRENT_DIR"
            | "OUT_DIR"
    ) || name.starts_with("CARGO_PKG_")
        || name.starts_with("CARGO_BIN_EXE_")
}

/// The `shardlimit` command-line tool (`crates/shardlimit-cli`), built once
/// per test process: it is a crate of its own, so no `CARGO_BIN_EXE_` names
/// it here.
pub fn cli_exe() -> &'static std::path::Path {
    static EXE: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    EXE.get_or_init(|| cargo_built(&["-p", "shardlimit-cli"], "shardlimit"))
}
