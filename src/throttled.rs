//! "Throttled now": the subjects each limiter denies most, across every
//! process, without a key any check touches.
//!
//! A limiter built with
//! [`report_throttled`](crate::limit::RateLimiterBuilder::report_throttled) feeds
//! each denial (by Redis or by the deny cache, from every entry point of the
//! one check pipeline) to a [`Recorder`](recorder::Recorder) of its kind and
//! name: a window of Space-Saving sketches ([`sketch`]), top
//! [`CAPACITY`](recorder::CAPACITY) subjects each. A background task per
//! [`Cluster`](crate::Cluster) handle publishes every name's summary and
//! outcome counts every [`PUBLISH_EVERY`](publish::PUBLISH_EVERY) to one key
//! per process with a short TTL ([`publish`]); the admin side reads them all
//! and merges ([`admin::throttled`](crate::admin::throttled())).

pub(crate) mod publish;
pub(crate) mod recorder;
pub(crate) mod sketch;
pub(crate) mod wire;
