//! The baseline: the same script, keys and arguments through bare redis-rs.

use shardlimit::Cluster;

use crate::drive::Reply;
use crate::target::Target;

/// The same work without shardlimit: a bare redis-rs cluster connection
/// running the script the library would send, with the same keys and args.
pub(crate) struct Raw {
    pub(crate) conn: redis::cluster_async::ClusterConnection,
    pub(crate) work: RawWork,
    pub(crate) namespace: String,
    pub(crate) kind: String,
    pub(crate) name: String,
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

impl Raw {
    pub(crate) async fn new(cluster: &Cluster, target: &Target) -> Self {
        let conn = bare_connection().await;
        let (work, kind, name) = match target {
            Target::Limiter(l) => {
                let inv = l.invocation("s0", 1).unwrap();
                (
                    RawWork::Script {
                        script: redis::Script::new(inv.script.code()),
                        args: inv.args,
                    },
                    l.algorithm().kind().to_owned(),
                    l.name().to_owned(),
                )
            }
            Target::Counter(_) => (
                RawWork::CounterAdd { ttl_ms: 600_000 },
                "counter".to_owned(),
                "bench".to_owned(),
            ),
            _ => panic!("--baseline raw is implemented for the rate limiters and the counter"),
        };
        Raw {
            conn,
            work,
            namespace: cluster.namespace().to_owned(),
            kind,
            name,
        }
    }

    pub(crate) fn call(&self, k: u64) -> impl std::future::Future<Output = Reply> + Send + use<> {
        // What a user of bare redis-rs writes: format the key, send it.
        let key = format!("{}:{{s{k}}}:{}:{}", self.namespace, self.kind, self.name);
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
                    let mut inv = script.key(&key);
                    for a in &args {
                        inv.arg(a);
                    }
                    inv.invoke_async::<Vec<i64>>(&mut conn).await.map(drop)
                }
                RawWork::CounterAdd { ttl_ms } => redis::pipe()
                    .atomic()
                    .cmd("INCRBY")
                    .arg(&key)
                    .arg(1)
                    .cmd("PEXPIRE")
                    .arg(&key)
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
}
