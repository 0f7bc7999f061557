//! Which namespaces have a "throttled now" report: all of them keep their
//! reports under one hash tag, so one slot's keys say.

use super::Scanner;
use super::subject::slot_master;
use crate::error::Result;
use crate::keys::{ParsedKey, slot};
use crate::throttled::publish;

/// The most keys of the reports' slot read: the index and the live reports
/// of every namespace, and whatever else hashes there.
const MAX_SLOT_KEYS: u64 = 10_000;

impl Scanner {
    /// The namespaces on this cluster with a live
    /// [throttled](crate::admin::throttled()) report, sorted — whichever
    /// namespace this scanner's cluster handle has. The reports of every
    /// namespace share one hash tag, so this is one
    /// `CLUSTER GETKEYSINSLOT` of at most 10,000 keys to that slot's master
    /// (on standalone Redis, a `SCAN` of the server for the index keys).
    ///
    /// For a tool that found no report under its own namespace, to say
    /// where there are some.
    ///
    /// ```no_run
    /// # async fn demo(cluster: shardlimit::Cluster) -> shardlimit::Result<()> {
    /// use shardlimit::admin::Scanner;
    ///
    /// for namespace in Scanner::new(&cluster).throttled_namespaces().await? {
    ///     println!("reports under {namespace}");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn throttled_namespaces(&self) -> Result<Vec<String>> {
        let index = self.cluster.keys().key(
            publish::SUBJECT,
            &crate::keys::KeyId::new(publish::KIND, publish::INDEX)?,
        )?;
        let the_slot = slot(&index);
        let topology = self.cluster.topology().await?;
        let owner = slot_master(&topology, the_slot)?;
        let keys = if self.cluster.is_standalone() {
            let pattern = format!(
                "*:{{{}}}:{}:{}",
                publish::SUBJECT,
                publish::KIND,
                publish::INDEX
            );
            self.scan_matching(&owner, pattern.as_bytes()).await?
        } else {
            self.slot_keys(&owner, the_slot, MAX_SLOT_KEYS).await?
        };
        let mut namespaces: Vec<String> = keys
            .iter()
            .filter_map(|key| ParsedKey::parse(key).ok())
            .filter(|k| publish::is_report(k) && k.name == publish::INDEX && k.part.is_none())
            .map(|k| k.namespace.to_owned())
            .collect();
        namespaces.sort();
        namespaces.dedup();
        Ok(namespaces)
    }
}
