//! `health`: cluster state, masters and replicas, AOF, memory per master.

use std::io::Write;
use std::process::ExitCode;

use shardlimit::Cluster;

use super::output::{AnyResult, human_bytes};

/// `health`: exit code 1 when the cluster is not fit for locks.
pub(crate) async fn health(cluster: &Cluster, out: &mut impl Write) -> AnyResult<ExitCode> {
    let health = cluster.health().await?;
    writeln!(
        out,
        "slots covered: {} of 16384, served: {}",
        health.covered_slots,
        health.served_slots()
    )?;
    if health.cluster_down() {
        writeln!(
            out,
            "cluster down: {} of 16384 slots are not served",
            16384 - health.served_slots()
        )?;
    }
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
