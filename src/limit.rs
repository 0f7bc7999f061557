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
//!   [`set_shadow`](RateLimiter::set_shadow); on by default, a
//!   [report of the subjects it throttles](RateLimiterBuilder::report_throttled);
//!   opt-in, a local [deny cache](RateLimiterBuilder::deny_cache)
//!   and [quota slices](RateLimiterBuilder::slices) ([`Slices`]) for a
//!   subject past what one master decides, with a declared overshoot bound
//!   — for every subject, or [only those hot now](Slices::when_hot).
//! * [`MultiLimiter`] — several limits on one subject, all or nothing, in
//!   one script. A `RateLimiter` is a multi-limit of one: both (and
//!   [`check_many`](RateLimiter::check_many) and the tower layer) run one
//!   check pipeline — deny cache, script, failure policy, counting — and
//!   `MultiLimiter::from(limiter)` checks exactly as the limiter does.
//! * [`Decision`] — being limited is a value, not an error.
//!
//! Every check is one Lua script on the master owning the subject's slot,
//! timed by the server's clock (`TIME`) — but a fixed window's check of
//! one limit, which is plain commands (see [Plain commands](#plain-commands));
//! a rejected request writes nothing,
//! and a check computes every decision before its first write, so a failing
//! one writes nothing either; every key written expires when its state is no
//! longer needed. Quotas are bounded when a limiter is built (see
//! [`Quota#bounds`](Quota#bounds)) so that no number a script computes
//! loses precision and no check runs long.
//!
//! Delivery: a check runs **at most once**. If it times out it may have been
//! counted on the server without the caller knowing; it is never resent.
//!
//! # Plain commands
//!
//! A Lua script costs Redis about three times the commands it runs: the
//! interpreter's call alone costs more than an `INCRBY`. So a consuming
//! check of a [`FixedWindow`](Algorithm::FixedWindow) limiter alone is
//! sent as plain commands pipelined on the subject's slot — `MGET` of its
//! override and block, `INCRBY` of its count, `PEXPIREAT … NX` at the
//! window's end, and about once a second `TIME` — and judged by this
//! process with the algorithm's own rule: the same verdict, units left and
//! key (with the same expiry) as its script. Where Redis is the bottleneck
//! that decides about twice as many requests per second
//! ([docs/performance.md](https://github.com/shardlimit/shardlimit/blob/main/docs/performance.md#against-the-peers)).
//! A [`check_many`](RateLimiter::check_many) sends its checks that way
//! too (one pipeline per master). Peeks, multi-limits and the
//! other algorithms run their script, and so does a limiter with a deny
//! cache (a denial it caches must hold until it says; a plain check's
//! count holds the units of requests being denied for a round trip); so
//! does a check whose window this
//! process cannot tell for certain from its estimate of the server's
//! clock (near a window's edge, or before the first sample), a subject
//! with a block or an override of another period, and a migrating slot.
//!
//! Where it differs, precisely: a request's units are counted before they
//! are judged, and a denial gives them back (from a small script that
//! gives them only to the window they were counted in, never below zero)
//! before it returns, so for that round trip another request may be denied
//! that the script would have admitted; a block or override written while
//! the commands are in flight applies from the next check; after a change
//! of period a count lasts until its own window ends (stricter); and
//! commands that a stalled master runs only after their window ended go
//! uncounted (the expiry of their window deletes the key they made in the
//! next one). Turn it off per
//! limiter with [`RateLimiterBuilder::plain_commands`]. The module
//! `limit/check/plain.rs` has the details.
//!
//! # Per-subject state beside the usage
//!
//! A subject's **override** of a limiter's quota (`<key>:quota`) and its
//! **block** (`<key>:block`) are keys in the subject's slot, next to its
//! state key, and are read by the check's own script: no extra round trip,
//! the same answer in every process. Both expire (an override after its
//! TTL, at most [`MAX_OVERRIDE_TTL`]; a block when it ends, at most
//! [`MAX_BLOCK`]). [`RateLimiter::penalize`] and [`RateLimiter::reward`]
//! work for all four algorithms (lease limiters and counters have no
//! quota to penalize: a lease is released, a counter is added to).
//!
//! # The catalog
//!
//! Each limiter publishes its spec (kind, name, algorithm, limit, period,
//! burst, shadow) to a small catalog key per namespace and name, so the
//! admin side ([`Scanner::catalog`](crate::admin::Scanner::catalog), the
//! CLI, the Limits page) knows every limit and can say "0 of 60 remaining,
//! at limit" without being told. It is written by a background task — when
//! the limiter is built, when [`RateLimiter::set_quota`] or
//! [`RateLimiter::set_shadow`] change it, and every [`CATALOG_REFRESH`]
//! while a handle to it lives — never by a check, and always with a TTL
//! ([`CATALOG_TTL`]). A failed publication never fails a check: it is
//! logged and counted ([`RateLimiter::catalog_publishing`]). Processes
//! that publish different specs for one name are all kept and shown
//! ("2 specs published"); the admin side then counts against the
//! strictest. One publication costs the catalog's master about 20 µs
//! (measured: [docs/admin.md, "Limits are known"](https://github.com/shardlimit/shardlimit/blob/main/docs/admin.md#limits-are-known-the-catalog)), once per limiter and
//! process every 30 s by default
//! ([`RateLimiterBuilder::catalog_refresh`]).
//!
//! # Deny cache
//!
//! [`RateLimiterBuilder::deny_cache`] (and [`MultiLimiter::with_deny_cache`])
//! keep denials in the process and answer the same or costlier requests
//! from them until the earliest time Redis could admit them. It **never
//! denies what Redis would admit** (within the scope stated in
//! [What "never" covers](#what-never-covers): clocks, one delivery latency,
//! missed invalidations):
//!
//! A check of cost `c` sent at client time `s` runs on the server at a later
//! time `T`; a denial carries `r`, the earliest server time `T + r` at which
//! the same request could be admitted if nothing but time changed. The cache
//! answers requests of cost `c' >= c` under the same quota fingerprint
//! (limiter name, algorithm, limit, period, burst, shadow mode) until
//! `s + min(r, e) <= T + min(r, e)`, where `e` is how long the subject's
//! override and block that the check read (if any) have left to live (their
//! `PTTL`, returned by the script). That holds because (1) admission is
//! monotone in the cost: admitting `c'` would admit `c` at the same moment;
//! (2) until `T + min(r, e)`, only writes that make admission harder happen
//! unannounced: other checks and penalties add usage, and the one unannounced
//! change that could make it easier, an override or block expiring, is
//! past `T + e`; (3) `r` is the earliest time, never late:
//!
//! * **fixed window**: the end of the window; before it the count cannot
//!   fall.
//! * **sliding log**: when the oldest entry that must leave the window for
//!   `c` to fit leaves it; entries only leave with time.
//! * **sliding window counter**: the solution of `cur + prev × (1 −
//!   elapsed) + c = limit`, rounded up to the microsecond (the send-to-run
//!   latency is far longer than that rounding), or a time in the next
//!   window when this window's count alone denies `c`.
//! * **GCRA**: `TAT + c × interval − tolerance − now`, exact.
//! * a **block**: its end, or later if the limit itself still denies then.
//! * a **multi-limit**: the longest wait of the limits that denied it, since
//!   all must admit.
//!
//! Whatever can make admission easier is either a new fingerprint
//! ([`RateLimiter::set_quota`] and [`RateLimiter::set_shadow`], which also
//! clear the cache; shadow mode never denies, so a limiter in it is never
//! answered from the cache, alone or in a multi-limit), or an override's
//! or block's expiry (bounded above), or is
//! published by the script that makes it — [`RateLimiter::reset`],
//! [`unblock`](RateLimiter::unblock), [`reward`](RateLimiter::reward),
//! [`set_override`](RateLimiter::set_override),
//! [`clear_override`](RateLimiter::clear_override) — with `SPUBLISH` on a
//! channel in the subject's own slot (`PUBLISH` on a standalone server or a
//! Sentinel primary), which every process with a deny cache follows; the
//! process that made the change forgets at once. A denial is cached and
//! answered only while the subscription of its subject's slot is live —
//! confirmed on the node the router names as the slot's owner now, that
//! node not held down, its connection answering a `PING` every second —
//! and only if no invalidation arrived while its check was in flight, so a
//! message racing the reply is never lost. A check made one key at a time
//! while its slot migrates reads the override and block on their own,
//! without their expiry: if either exists, its denial is not cached. Peeks
//! always ask Redis. A cached decision has [`Decision::cached`] set, and is
//! counted as `denied_cached` in [`Cluster::stats`](crate::Cluster::stats)
//! and the metrics.
//!
//! ## What "never" covers
//!
//! The argument above is exact under three assumptions; where they fail, a
//! cached denial can refuse what Redis would admit, by at most this much:
//!
//! * **Clocks.** `r` and `e` are measured by the server's clock (`TIME`,
//!   `PTTL`), and the entry runs on the client's monotonic clock from `s`.
//!   That is exact while the server's clock advances no faster than the
//!   client's. A forward step of the server's clock (an NTP step, or a
//!   failover to a replica whose clock is ahead) makes Redis admit earlier,
//!   by up to the size of the step; a server clock that runs faster by a
//!   rate `x` (drift; a few parts per million on a disciplined host) admits
//!   up to `x × r` earlier. Backward steps and a slower server clock only
//!   make the cache end early.
//! * **Delivery.** A change made in another process reaches this one one
//!   delivery latency after it took effect (the script's `SPUBLISH`, then
//!   the server's push to this process's subscription, then its handling);
//!   until then this process may answer the denial the change lifted. The
//!   process that makes a change forgets at once.
//! * **Missed invalidations.** Pub/sub delivers at most once: a message
//!   sent while a subscription is broken is lost. A slot whose subscription
//!   broke stops being answered from the cache (and every cache is cleared)
//!   as soon as this process notices: at once for a closed connection or a
//!   dropped channel (`SUNSUBSCRIBE`), at the next refresh of the router's
//!   table for a slot that moved or failed over, and within two seconds (a
//!   `PING` every second, answered within a second) for a cluster master
//!   that hangs without closing anything (a hung standalone or Sentinel
//!   primary: when the router names another one); until then, it may answer a denial a lost
//!   message would have lifted. A message lost without any of those signs
//!   (in Redis 7 only the next case: output-buffer limits close the
//!   connection) leaves a stale denial answered **at most until its entry
//!   ends**: `min(r, e)` after its check was sent.
//! * **A change while its slot migrates.** When every key a change touches
//!   has already moved to the importing master, its script runs there
//!   (following `ASK`) and its `SPUBLISH` reaches that master's shard,
//!   where no process listens: subscriptions follow the slot's owner, still
//!   the source. The message is lost without a sign, and a denial it would
//!   have lifted is answered until its entry ends or the slot's migration
//!   ends — the source then drops the slot's channels (`SUNSUBSCRIBE`) and
//!   every process clears its caches — whichever comes first. In a reshard
//!   that moves a slot's keys in seconds, the second bounds it.

mod adjust;
pub(crate) mod algorithm;
mod catalog;
mod check;
mod decision;
pub(crate) mod invalidation;
mod limiter;
mod migrating;
mod multi;
mod quota;
mod script;
mod stages;

pub(crate) use adjust::parse_override;
pub use adjust::{MAX_BLOCK, MAX_OVERRIDE_TTL, SubjectSettings};
pub use algorithm::Algorithm;
pub(crate) use algorithm::StateRead;
pub use catalog::{CATALOG_REFRESH, CATALOG_TTL, CatalogPublishing};
pub(crate) use catalog::{
    CATALOG_SUBJECT, Publication, Publishes, catalog_entry, catalog_prefix,
    decode as decode_catalog, lease_entry, start as start_publishing,
};
pub use decision::{Decision, MultiDecision};
pub use limiter::{RateLimiter, RateLimiterBuilder};
pub use multi::MultiLimiter;
pub use quota::Quota;
pub use script::Invocation;
pub use stages::local::MAX_SUBJECTS as LOCAL_MAX_SUBJECTS;
#[cfg(feature = "slices")]
#[cfg_attr(docsrs, doc(cfg(feature = "slices")))]
pub use stages::slices::Slices;
