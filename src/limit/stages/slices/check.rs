//! A check of a limiter with quota slices: the slice table decides, or
//! says to check exactly (with automatic slicing, for every subject that
//! is not hot); a failed take meets the failure policy as the check itself
//! would. Outcomes are counted here, like the pipeline's.

use std::sync::Arc;

use super::table::{Fast, Next, SliceTable};
use crate::error::Result;
use crate::limit::decision::Decision;
use crate::limit::limiter::{RateLimiter, only};

impl RateLimiter {
    /// [`check_n`](RateLimiter::check_n) of a limiter with quota slices.
    pub(crate) async fn check_sliced(
        &self,
        table: &Arc<SliceTable>,
        subject: &[u8],
        cost: u32,
    ) -> Result<Decision> {
        let decided = match table.fast(subject, cost) {
            Fast::Decided(d) => Ok(Next::Decided(d)),
            Fast::Unsliced if !table.admits(subject) => Ok(Next::Exact),
            Fast::Sliced | Fast::Unsliced => table.decide(&self.spec(), subject, cost).await,
        };
        match decided {
            Ok(Next::Decided(d)) => {
                if d.allowed {
                    self.outcomes().allowed();
                } else {
                    self.denied(subject, false);
                }
                Ok(d)
            }
            Ok(Next::Exact) => Ok(only(self.pipeline().run(subject, cost, true).await?)),
            Err(err) => Ok(only(self.pipeline().fail(err, subject, cost)?)),
        }
    }
}
