//! The least-privilege ACL user `cluster-compose/up.sh` creates on every
//! node (docs/production.md, "A least-privilege ACL user"), and what its ACL
//! refused.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::PathBuf;

use redis::Value;

/// The user's name.
pub const USER: &str = "shardlimit";

/// Its password file on the plaintext cluster of `SHARDLIMIT_CLUSTER_PORT`
/// (up.sh's state directory: `.state` for port base 7000, `.state-<base>`
/// for any other).
pub fn password_file() -> PathBuf {
    let base = std::env::var("SHARDLIMIT_CLUSTER_PORT").unwrap_or_else(|_| "7000".into());
    let state = if base == "7000" {
        ".state".to_owned()
    } else {
        format!(".state-{base}")
    };
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("cluster-compose")
        .join(state)
        .join("acl/password")
}

/// How many times the ACLs of the nodes behind `admins` (connections as
/// the default user) have refused `USER` a `SCRIPT LOAD`, from `ACL LOG`:
/// the sum of the matching entries' counts (Redis folds repeats into one
/// entry). Read it before and after: the logs are the nodes', not the
/// test's.
pub async fn script_load_refusals(admins: &mut [redis::aio::MultiplexedConnection]) -> i64 {
    let mut refused = 0;
    for admin in admins {
        let entries: Vec<HashMap<String, Value>> = redis::cmd("ACL")
            .arg("LOG")
            // The whole log (Redis keeps `acllog-max-len`, 128 by default).
            .arg(1000)
            .query_async(admin)
            .await
            .unwrap();
        let text = |entry: &HashMap<String, Value>, field: &str| {
            entry
                .get(field)
                .map(|v| redis::from_redis_value::<String>(v.clone()).unwrap())
        };
        refused += entries
            .iter()
            .filter(|e| text(e, "username").as_deref() == Some(USER))
            .filter(|e| text(e, "object").as_deref() == Some("script|load"))
            .map(|e| redis::from_redis_value::<i64>(e["count"].clone()).unwrap())
            .sum::<i64>();
    }
    refused
}

/// `SCRIPT FLUSH` on each node behind `admins`: the next `EVALSHA` of every
/// script gets `NOSCRIPT`.
pub async fn flush_scripts(admins: &mut [redis::aio::MultiplexedConnection]) {
    for admin in admins {
        let () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(admin)
            .await
            .unwrap();
    }
}
