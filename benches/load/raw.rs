//! The baseline: the same script, keys and arguments through bare redis-rs.

use shardlimit::Cluster;

use crate::drive::Reply;
use crate::target::Target;

/// The same work without shardlimit: a bare redis-rs cluster connection
/// running the script the library would send, with the same keys and args.
pub(crate) struct Raw {
    pub(crate) conn: redis::cluster_async::ClusterConnection,
    pub(crate) work: RawWork,
    /// The keys of one call, formatted per subject.
    pub(crate) keys: Vec<KeyFormat>,
}

pub(crate) enum RawWork {
    Script {
        script: redis::Script,
        args: Vec<Vec<u8>>,
    },
    CounterAdd {
        ttl_ms: u64,
    },
}

/// A key as a user of bare redis-rs writes it: `{before}{s<k>}{after}`.
pub(crate) struct KeyFormat {
    before: String,
    after: String,
}

impl KeyFormat {
    /// The format of `key`, the key of subject `s0`.
    fn of(key: &[u8]) -> Self {
        let key = String::from_utf8(key.to_vec()).unwrap();
        let (before, after) = key.split_once("{s0}").expect("a key tagged {s0}");
        KeyFormat {
            before: before.to_owned(),
            after: after.to_owned(),
        }
    }

    fn key(&self, k: u64) -> String {
        format!("{}{{s{k}}}{}", self.before, self.after)
    }
}

impl Raw {
    pub(crate) async fn new(cluster: &Cluster, target: &Target) -> Self {
        let conn = bare_connection().await;
        let (work, keys) = match target {
            Target::Limiter(l) => {
                let inv = l.invocation("s0", 1).unwrap();
                // Every key the script is given: its state, and the
                // subject's override and block (a script given fewer
                // keys checks fewer limits, here none).
                let keys: Vec<KeyFormat> =
                    inv.keys.keys().iter().map(|k| KeyFormat::of(k)).collect();
                let other = l.invocation("s12345", 1).unwrap();
                let formatted: Vec<Vec<u8>> =
                    keys.iter().map(|f| f.key(12345).into_bytes()).collect();
                assert_eq!(
                    formatted,
                    other.keys.keys(),
                    "raw keys differ from the library's"
                );
                let work = RawWork::Script {
                    script: redis::Script::new(inv.script.code()),
                    args: inv.args,
                };
                (work, keys)
            }
            Target::Counter(_) => {
                let key = format!("{}:{{s0}}:counter:bench", cluster.namespace());
                let work = RawWork::CounterAdd { ttl_ms: 600_000 };
                (work, vec![KeyFormat::of(key.as_bytes())])
            }
            _ => panic!("--baseline raw is implemented for the rate limiters and the counter"),
        };
        Raw { conn, work, keys }
    }

    pub(crate) fn call(&self, k: u64) -> impl std::future::Future<Output = Reply> + Send + use<> {
        // What a user of bare redis-rs writes: format the keys, send them.
        let keys: Vec<String> = self.keys.iter().map(|f| f.key(k)).collect();
        let mut conn = self.conn.clone();
        let work = match &self.work {
            RawWork::Script { script, args } => RawWork::Script {
                script: script.clone(),
                args: args.clone(),
            },
            RawWork::CounterAdd { ttl_ms } => RawWork::CounterAdd { ttl_ms: *ttl_ms },
        };
        async move {
            Reply::of(match work {
                RawWork::Script { script, args } => {
                    let mut inv = script.prepare_invoke();
                    for key in &keys {
                        inv.key(key);
                    }
                    for a in &args {
                        inv.arg(a);
                    }
                    inv.invoke_async::<Vec<i64>>(&mut conn).await.map(drop)
                }
                RawWork::CounterAdd { ttl_ms } => redis::pipe()
                    .atomic()
                    .cmd("INCRBY")
                    .arg(&keys[0])
                    .arg(1)
                    .cmd("PEXPIRE")
                    .arg(&keys[0])
                    .arg(ttl_ms)
                    .query_async::<(i64, i64)>(&mut conn)
                    .await
                    .map(drop),
            })
        }
    }
}

/// A bare redis-rs cluster connection to the bench's nodes.
pub(crate) async fn bare_connection() -> redis::cluster_async::ClusterConnection {
    redis::cluster::ClusterClient::new(node_urls())
        .unwrap()
        .get_async_connection()
        .await
        .unwrap()
}

pub(crate) fn node_urls() -> Vec<String> {
    shardlimit::Cluster::seeds_from_env()
        .expect("the test cluster: SHARDLIMIT_CLUSTER_PORT=7000 or SHARDLIMIT_NODES")
}
