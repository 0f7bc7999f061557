//! The deny cache's steps in a check: `limit/check.rs` takes them at
//! their places, as it takes the local fallback's.

use super::{DenyCache, Ticket};
use crate::limit::check::Round;
use crate::limit::decision::MultiDecision;

/// A ticket when a check is sent, the lookup before, the offer after.
impl Round<'_> {
    /// The cache this round looks up and offers to: none for a peek.
    fn cache(&self) -> Option<&DenyCache> {
        self.pipeline.cache.filter(|_| self.consume)
    }

    /// The cache's ticket for a check sent now, if there is a cache.
    pub(crate) fn ticket(&self) -> Option<Ticket> {
        self.cache().map(DenyCache::ticket)
    }

    /// A denial the cache answers `subject`'s request for `cost` with.
    pub(crate) fn cached(&self, subject: &[u8], cost: u32) -> Option<MultiDecision> {
        self.cache()
            .and_then(|cache| cache.lookup(subject, self.print, cost))
    }

    /// Offers Redis' `decision` on a check sent with `ticket` to the cache.
    pub(crate) fn offer(
        &self,
        subject: &[u8],
        cost: u32,
        ticket: Option<Ticket>,
        decision: &MultiDecision,
    ) {
        if let (Some(cache), Some(ticket)) = (self.cache(), ticket) {
            cache.offer(subject, self.print, cost, ticket, decision);
        }
    }
}
