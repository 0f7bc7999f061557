//! A second process for tests about what one process sees of another's
//! changes: the test binary runs itself again, one ignored test, with the
//! change described by `SHARDLIMIT_CHILD_*` variables.

use std::num::NonZeroU32;
use std::time::Duration;

use shardlimit::{Algorithm, Cluster, Quota, RateLimiter};

const PREFIX: &str = "SHARDLIMIT_CHILD_";

/// The test harness's name for the test `name` of the module `module`
/// (`module_path!()` there): its path without the crate's name, which
/// `--exact` needs, a test binary holding many modules. A bare name would
/// match no test, and a child that runs no test passes.
pub fn harness_name(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_, path)) => format!("{path}::{name}"),
        None => name.to_owned(),
    }
}

/// Runs the ignored test `test` (its harness name: see [`harness_name`])
/// of this binary in a new process with `SHARDLIMIT_CHILD_<name>=<value>`
/// for each of `vars`, and waits for it to pass.
pub async fn child_process(test: &str, vars: &[(&str, &str)]) {
    let exe = std::env::current_exe().unwrap();
    let mut command = tokio::process::Command::new(exe);
    command.args([
        test,
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ]);
    for (name, value) in vars {
        command.env(format!("{PREFIX}{name}"), value);
    }
    let out = tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .expect("the child process took over a minute")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "child {test} failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn var(name: &str) -> String {
    std::env::var(format!("{PREFIX}{name}")).unwrap_or_else(|_| panic!("{PREFIX}{name} unset"))
}

/// The child's side: one `OP` (reset, block, unblock, reward, override,
/// clear_override) on `SUBJECT` of the limiter `ALGO`/`NAME` in namespace
/// `NS`. Nothing it sends depends on the limiter's default quota.
pub async fn run_child_adjustment() {
    let cluster = Cluster::builder(super::node_urls())
        .namespace(var("NS"))
        .build()
        .await
        .unwrap();
    let algorithm = Algorithm::from_kind(&var("ALGO")).unwrap();
    let one = NonZeroU32::MIN;
    let limiter = RateLimiter::builder(&cluster, var("NAME"), Quota::per_hour(one))
        .algorithm(algorithm)
        .build()
        .unwrap();
    let subject = var("SUBJECT");
    match var("OP").as_str() {
        "reset" => limiter.reset(&subject).await.unwrap(),
        "block" => limiter
            .block(&subject, Duration::from_secs(3600))
            .await
            .unwrap(),
        "unblock" => limiter.unblock(&subject).await.unwrap(),
        "reward" => limiter.reward(&subject, NonZeroU32::MAX).await.unwrap(),
        "override" => {
            let quota = Quota::per_hour(NonZeroU32::new(100).unwrap());
            limiter
                .set_override(&subject, quota, Duration::from_secs(3600))
                .await
                .map(drop)
                .unwrap()
        }
        "clear_override" => limiter.clear_override(&subject).await.map(drop).unwrap(),
        other => panic!("unknown op {other}"),
    }
}
