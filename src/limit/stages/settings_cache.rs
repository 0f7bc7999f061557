//! The pipeline's subject-settings cache
//! ([`RateLimiterBuilder::subject_settings_cache`](crate::RateLimiterBuilder::subject_settings_cache)):
//! the subjects known to have no settings of a limiter — neither an
//! override nor a block — so that their checks need not read those keys.
//!
//! Almost no subject has either, yet every check reads both: the script
//! reads three keys instead of one, and a check made of
//! [plain commands](crate::limit#plain-commands) sends an `MGET` beside
//! its count — one command in three. A subject is remembered when a check
//! found neither; from then on its script check is sent in the one-key
//! form a migrating slot uses (`KEYS` the state key alone, and neither
//! value sent: the check's `ARGV` of three keys, its one key saying it is
//! inline), and its plain check without the `MGET`.
//!
//! Every write of an override or a block (and every reset, unblock,
//! penalty, reward) is announced on the subject's slot channel by the
//! script that makes it, as for the deny cache (`limit/invalidation.rs`):
//! hearing it, the subject is forgotten. A subject is remembered only
//! while its slot's subscription is live and if nothing was announced
//! while its check was in flight, and answered only while the slot is
//! live; a lost subscription forgets everything. Nothing else can make a
//! setting appear: overrides and blocks are only written by those scripts
//! (and an expiry only ever removes one). So a remembered subject reads as
//! the check would have read it, but for a setting written while its check
//! is in flight, which applies from the next check — at most one round
//! trip late.

use std::borrow::Cow;
use std::sync::Arc;

use crate::cluster::Cluster;
use crate::error::Result;
use crate::keys::{KeyBuilder, KeySet, subject_slot};
use crate::limit::invalidation::{Invalidations, Listener};
use crate::limit::script::{LimitSpec, inline_args};
use crate::scripts::Script;

mod subjects;

use self::subjects::Subjects;

/// The subjects of one limit known to have no settings.
struct Known {
    subjects: Subjects,
    kind: String,
    name: String,
}

impl Listener for Known {
    fn invalidate(&self, kind: &str, name: &str, subject: &[u8]) {
        if kind == self.kind && name == self.name {
            self.subjects.remove(subject);
        }
    }

    fn invalidate_all(&self) {
        self.subjects.clear();
    }
}

/// A bounded cache of the subjects of one limit that have no settings.
pub(crate) struct SettingsCache {
    known: Arc<Known>,
    hub: Arc<Invalidations>,
    cluster: Cluster,
}

impl SettingsCache {
    /// Room for `max_entries` subjects of the limit `kind`/`name`,
    /// following `cluster`'s announcements.
    pub(crate) fn new(cluster: &Cluster, max_entries: u64, kind: &str, name: &str) -> Self {
        let known = Arc::new(Known {
            subjects: Subjects::new(max_entries),
            kind: kind.to_owned(),
            name: name.to_owned(),
        });
        let hub = Invalidations::listen(cluster, known.clone());
        SettingsCache {
            known,
            hub,
            cluster: cluster.clone(),
        }
    }

    /// Whether `subject` is known to have no settings now.
    pub(crate) fn has_none(&self, subject: &[u8]) -> bool {
        self.hub.follow(&self.cluster);
        self.known.subjects.contains(subject) && self.hub.is_live(subject_slot(subject))
    }

    /// Taken just before a check that reads the settings is sent.
    pub(crate) fn ticket(&self) -> u64 {
        self.hub.epoch()
    }

    /// A check sent at `ticket` found that `subject` has no settings.
    pub(crate) fn found_none(&self, subject: &[u8], ticket: u64) {
        let subjects = &self.known.subjects;
        self.hub.keep_unless_announced(
            ticket,
            subject_slot(subject),
            || subjects.insert(subject),
            || subjects.remove(subject),
        );
    }
}

impl std::fmt::Debug for SettingsCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SettingsCache")
            .field("max_entries", &self.known.subjects.max_entries())
            .finish_non_exhaustive()
    }
}

/// The one-key form of a check of one limit (`specs`) by `script` of
/// `subject` for `cost`, for a subject known to have no settings: its
/// `KEYS` (the state key alone) and `ARGV`, with neither the override's
/// nor the block's value (see `Invocation::inline_args`) — with the
/// defaults, the limit's own fields, borrowed from its spec. Built without
/// the whole check's three keys.
pub(crate) fn one_key_form<'s>(
    keys: &KeyBuilder,
    script: &Script,
    specs: &'s [Arc<LimitSpec>],
    subject: &[u8],
    cost: u32,
    consume: bool,
) -> Result<(KeySet, Cow<'s, [Vec<u8>]>)> {
    let state = keys.key_set(subject, specs.iter().take(1).map(|s| &s.id))?;
    let none = [Vec::new(), Vec::new()];
    let args = inline_args(script, specs, cost, &none, 0..1, consume);
    Ok((state, args))
}

/// Whether a one-limit script's reply says its subject has no settings:
/// it is the compact reply, which the script gives only then.
pub(crate) fn says_none(reply: &Result<Vec<i64>>) -> bool {
    matches!(reply, Ok(reply) if reply.len() == 4)
}
