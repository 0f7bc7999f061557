//! One subject's primitives, read from its slot on its master: no walk.

use super::Scanner;
use super::filter::{Filter, glob_escape};
use super::plan::{Found, Mode};
use super::read::read_page;
use crate::admin::info::LimiterInfo;
use crate::cluster::{NodeAddr, Topology};
use crate::error::{Error, Result};
use crate::keys::{KeyId, ParsedKey, slot};
use crate::limit::catalog_entry;

/// The most keys of one slot read with one `CLUSTER GETKEYSINSLOT`: a few
/// milliseconds of the node's time at most (its cost is linear in the keys
/// returned). A slot holds about `keys / 16384` keys — 6,100 at 100 million
/// — so a subject's slot is read in one call at any realistic size, instead
/// of a `SCAN` of its whole master (thousands of calls at a million keys).
const MAX_SLOT_READ: u64 = 50_000;

/// Keys of a slot asked for first, without counting them: a slot holds
/// about `keys / 16384` (61 at a million keys), so one call answers; a
/// fuller reply means a big slot, counted before it is read whole.
const FIRST_SLOT_READ: u64 = 1_000;

/// The master serving `the_slot` in `topology`.
pub(super) fn slot_master(topology: &Topology, the_slot: u16) -> Result<NodeAddr> {
    Ok(topology
        .owner(the_slot)
        .ok_or_else(|| Error::UnexpectedReply {
            op: "cluster slots".into(),
            detail: format!("no master serves slot {the_slot}"),
        })?
        .master
        .clone())
}

impl Scanner {
    /// One subject's keys (of `kind` and `name`, if given), sorted, and the
    /// primitives they hold.
    pub(crate) async fn subject_primitives(
        &self,
        topology: &Topology,
        subject: &[u8],
        kind: Option<&str>,
        name: Option<&str>,
    ) -> Result<(Vec<Vec<u8>>, Vec<LimiterInfo>)> {
        let (owner, mut keys) = self
            .subject_keys(topology, subject, kind, name, false)
            .await?;
        keys.sort();
        let found = read_page(
            &self.cluster,
            &Filter::default(),
            Mode::List,
            &owner,
            keys.clone(),
        )
        .await?;
        let primitives = found
            .into_iter()
            .filter_map(|f| match f {
                Found::Limiter(info) => Some(info),
                _ => None,
            })
            .collect();
        Ok((keys, primitives))
    }

    /// The master serving `subject`'s slot and the subject's keys there (of
    /// `kind` and `name`, if given): its primitives' keys, or with
    /// `catalog` the catalog's keys (whose tag is a subject of its own).
    pub(super) async fn subject_keys(
        &self,
        topology: &Topology,
        subject: &[u8],
        kind: Option<&str>,
        name: Option<&str>,
        catalog: bool,
    ) -> Result<(NodeAddr, Vec<Vec<u8>>)> {
        let probe = self
            .cluster
            .keys()
            .key(subject, &KeyId::new("probe", "probe")?)?;
        let the_slot = slot(&probe);
        let owner = slot_master(topology, the_slot)?;
        let tag_end = probe.len() - b"probe:probe".len();
        if self.cluster.is_standalone() {
            // No CLUSTER …KEYSINSLOT on a standalone server: SCAN for
            // exactly this subject's keys.
            let keys = self
                .scan_matching(&owner, &glob_escape(&probe[..tag_end]))
                .await?;
            return Ok((
                owner,
                self.subjects_own(keys, subject, (kind, name), catalog),
            ));
        }
        let keys = self.slot_keys(&owner, the_slot, FIRST_SLOT_READ).await?;
        let keys = if (keys.len() as u64) < FIRST_SLOT_READ {
            keys
        } else {
            let mut count_cmd = redis::cmd("CLUSTER");
            count_cmd.arg("COUNTKEYSINSLOT").arg(the_slot);
            let in_slot: u64 = self
                .cluster
                .node_command("cluster countkeysinslot", &owner, count_cmd)
                .await?;
            if in_slot <= MAX_SLOT_READ {
                self.slot_keys(&owner, the_slot, in_slot).await?
            } else {
                // GETKEYSINSLOT has no cursor: asking for a slot of millions
                // of keys at once would block the node for the whole slot.
                // SCAN for exactly this subject's keys instead, `count` per
                // call.
                self.scan_matching(&owner, &glob_escape(&probe[..tag_end]))
                    .await?
            }
        };
        Ok((
            owner,
            self.subjects_own(keys, subject, (kind, name), catalog),
        ))
    }

    /// Up to `n` keys of `the_slot` on `owner`: one `CLUSTER GETKEYSINSLOT`.
    pub(super) async fn slot_keys(
        &self,
        owner: &NodeAddr,
        the_slot: u16,
        n: u64,
    ) -> Result<Vec<Vec<u8>>> {
        let mut list = redis::cmd("CLUSTER");
        list.arg("GETKEYSINSLOT").arg(the_slot).arg(n);
        self.cluster
            .node_command("cluster getkeysinslot", owner, list)
            .await
    }

    /// The keys of `subject` (of `kind` and `name`, if given) among `keys`:
    /// the catalog's keys only with `catalog`, else never.
    fn subjects_own(
        &self,
        keys: Vec<Vec<u8>>,
        subject: &[u8],
        (kind, name): (Option<&str>, Option<&str>),
        catalog: bool,
    ) -> Vec<Vec<u8>> {
        let namespace = self.cluster.namespace();
        keys.into_iter()
            .filter(|key| {
                ParsedKey::parse(key).is_ok_and(|p| {
                    p.namespace == namespace
                        && catalog_entry(&p).is_some() == catalog
                        && *p.subject == *subject
                        && kind.is_none_or(|k| p.kind == k)
                        && name.is_none_or(|n| p.name == n)
                })
            })
            .collect()
    }
}
