//! Rate limiters: fixed window, sliding log, sliding window counter and GCRA,
//! with costs, server time, multi-limit checks and an explicit failure
//! policy.
//!
//! * [`Quota`] — how much per how long (and a burst, for GCRA).
//! * [`Algorithm`] — how it is counted; see its table for memory and
//!   exactness.
//! * [`RateLimiter`] — a definition, built once, checked per subject:
//!   [`check`](RateLimiter::check), [`check_n`](RateLimiter::check_n),
//!   [`peek`](RateLimiter::peek), [`reset`](RateLimiter::reset),
//!   [`until_ready`](RateLimiter::until_ready); per subject,
//!   [`block`](RateLimiter::block), [`penalize`](RateLimiter::penalize),
//!   [`reward`](RateLimiter::reward) and
//!   [`set_override`](RateLimiter::set_override); live,
//!   [`set_quota`](RateLimiter::set_quota) and
//!   [`set_shadow`](RateLimiter::set_shadow); opt-in, a local
//!   [deny cache](RateLimiterBuilder::deny_cache).
//! * [`MultiLimiter`] — several limits on one subject, all or nothing, in
//!   one script.
//! * [`Decision`] — being limited is a value, not an error.
//!
//! Every check is one Lua script on the master owning the subject's slot,
//! timed by the server's clock (`TIME`); a rejected request writes nothing,
//! and a check computes every decision before its first write, so a failing
//! one writes nothing either; every key written expires when its state is no
//! longer needed. Quotas are bounded when a limiter is built (see
//! [`Quota#bounds`](Quota#bounds)) so that no number a script computes
//! loses precision and no check runs long.
//!
//! Delivery: a check runs **at most once**. If it times out it may have been
//! counted on the server without the caller knowing; it is never resent.

mod adjust;
mod algorithm;
mod decision;
mod deny_cache;
mod limiter;
mod multi;
mod quota;
mod script;

pub use adjust::{MAX_BLOCK, MAX_OVERRIDE_TTL, SubjectSettings};
pub use algorithm::Algorithm;
pub use decision::{Decision, MultiDecision};
pub use limiter::{RateLimiter, RateLimiterBuilder};
pub use multi::MultiLimiter;
pub use quota::Quota;
pub use script::Invocation;
