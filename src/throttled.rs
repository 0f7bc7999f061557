//! "Throttled now": the subjects each limiter denies most, across every
//! process, without a key any check touches.
//!
//! A rate limiter (unless built with
//! [`report_throttled(false)`](crate::limit::RateLimiterBuilder::report_throttled))
//! feeds each denial (by Redis, by the deny cache or from a quota slice,
//! from every entry point of the one check pipeline) to a
//! [`Recorder`](recorder::Recorder) of its kind and name: a window of
//! Space-Saving sketches ([`sketch`]) and one of the denials since the last
//! publication, top [`CAPACITY`](recorder::CAPACITY) subjects each. A
//! background task per [`Cluster`](crate::Cluster) handle, started at its
//! first denial, publishes every name's summaries and outcome counts every
//! [`PUBLISH_EVERY`](publish::PUBLISH_EVERY) while there are denials in a
//! window, to one key per process with a short TTL ([`publish`]); the admin
//! side reads them all and merges
//! ([`admin::throttled`](crate::admin::throttled())).

pub(crate) mod publish;
pub(crate) mod recorder;
pub(crate) mod sketch;
pub(crate) mod wire;
