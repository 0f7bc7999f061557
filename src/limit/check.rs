//! The one check pipeline. A [`RateLimiter`] is a multi-limit of one: its
//! `check`, `check_n`, `peek`, `check_many` and `until_ready`, a
//! [`MultiLimiter`](super::MultiLimiter)'s, and the tower layer's all run
//! through [`Pipeline`]: the exact check (a script, or plain commands,
//! `check/plain.rs`), the failure policy and the counting are written here
//! once, and each stage of `limit/stages.rs` enters at its step — the deny
//! cache's lookup and offer, the subject-settings cache's choice of form,
//! the degraded local mode (its part in `stages/local/degraded.rs`), the
//! report of a denial. A batch (`check_many`) is `check/batch.rs`.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

// tokio's clock, so tests can pause it.
use tokio::time::Instant;
use tracing::Instrument;
use tracing::field::Empty;

use self::plain::Settings;
use super::algorithm;
use super::decision::{Decision, MultiDecision};
use super::limiter::RateLimiter;
use super::script::{Invocation, LimitSpec, parse_reply};
#[cfg(feature = "deny-cache")]
use super::stages::deny_cache::{DenyCache, Ticket, fingerprint};
use super::stages::settings_cache::{SettingsCache, one_key_form, says_none};
use crate::cluster::Cluster;
use crate::error::{Error, Result};
use crate::keys::KeySet;
use crate::policy::FailurePolicy;
use crate::scripts::Script;

mod batch;
pub(crate) mod plain;

/// Built without feature `deny-cache`, no check holds a cache's ticket.
#[cfg(not(feature = "deny-cache"))]
type Ticket = std::convert::Infallible;

/// Built without feature `deny-cache`: no check is answered from a deny
/// cache nor offered to one (with it, these steps are the cache's own, in
/// `stages/deny_cache.rs`).
#[cfg(not(feature = "deny-cache"))]
impl Round<'_> {
    fn ticket(&self) -> Option<Ticket> {
        None
    }

    fn cached(&self, _subject: &[u8], _cost: u32) -> Option<MultiDecision> {
        None
    }

    fn offer(&self, _subject: &[u8], _cost: u32, _ticket: Option<Ticket>, _: &MultiDecision) {}
}

/// What one check covers: its limits (at least one, all on one cluster),
/// the policy for a failure and the deny cache that answers denials again.
#[derive(Clone, Copy)]
pub(crate) struct Pipeline<'a> {
    pub(crate) limiters: &'a [RateLimiter],
    pub(crate) policy: FailurePolicy,
    #[cfg(feature = "deny-cache")]
    pub(crate) cache: Option<&'a DenyCache>,
}

/// One operation's view of the limits: their specs read once, the script
/// that checks them and the fingerprint a denial is cached under.
pub(crate) struct Round<'r> {
    pub(crate) pipeline: Pipeline<'r>,
    pub(crate) specs: &'r [Arc<LimitSpec>],
    script: &'static Script,
    /// 0 when nothing of this round is looked up in or offered to a cache.
    #[cfg(feature = "deny-cache")]
    pub(crate) print: u64,
    pub(crate) consume: bool,
}

/// A request before it is sent: what to send, or already its answer (a
/// cached denial, or a request refused before sending).
pub(crate) enum Prepared {
    Send(Invocation),
    Answered(Result<MultiDecision>),
}

/// What a check sent as its script sends (see [`Round::script_call`]).
enum ScriptCall<'r> {
    /// The whole check.
    Whole(Invocation),
    /// The one-key form of a subject known to have no settings: `KEYS`
    /// (the state key) and `ARGV` (with the defaults, its spec's fields).
    OneKey(KeySet, Cow<'r, [Vec<u8>]>),
}

impl ScriptCall<'_> {
    fn keys_and_args(&self) -> (&KeySet, &[Vec<u8>]) {
        match self {
            ScriptCall::Whole(invocation) => (&invocation.keys, &invocation.args),
            ScriptCall::OneKey(keys, args) => (keys, args),
        }
    }
}

impl<'a> Pipeline<'a> {
    pub(crate) fn cluster(&self) -> &'a Cluster {
        self.limiters[0].cluster()
    }

    /// The limiters' current specs, read once per operation.
    fn specs(&self) -> Vec<Arc<LimitSpec>> {
        self.limiters.iter().map(RateLimiter::spec).collect()
    }

    /// The span of one check: `shardlimit.check` for one limit,
    /// `shardlimit.multi_check` for several (named `a+b`).
    fn span(&self, consume: bool) -> tracing::Span {
        match self.limiters {
            [one] => tracing::debug_span!(
                "shardlimit.check",
                kind = one.core().id().kind(),
                name = one.name(),
                consume,
                slot = Empty,
                outcome = Empty,
                subject = Empty
            ),
            many => tracing::debug_span!("shardlimit.multi_check",
                kind = "multi", name = %Names(many), consume,
                slot = Empty, outcome = Empty, subject = Empty),
        }
    }

    /// Checks `subject` for `cost` (`consume` false: a peek, never answered
    /// from the cache nor counted as a decision).
    pub(crate) async fn run(
        &self,
        subject: &[u8],
        cost: u32,
        consume: bool,
    ) -> Result<MultiDecision> {
        let span = self.span(consume);
        let check = async {
            crate::metrics::span_subject(subject);
            // One limit, the usual case, reads its spec without a
            // collection on the heap.
            let (one, many);
            let specs: &[Arc<LimitSpec>] = if let [limiter] = self.limiters {
                one = [limiter.spec()];
                &one
            } else {
                many = self.specs();
                &many
            };
            let round = Round::new(*self, specs, consume);
            if let Some(answer) = round.screen(subject, cost) {
                return answer;
            }
            if let Some(answer) = round.before_sending(subject, cost).await {
                return answer;
            }
            let ticket = round.ticket();
            let settings = round.settings(subject);
            let reply = round.send(subject, cost, settings).await;
            round.conclude(subject, cost, ticket, reply)
        };
        // As `#[tracing::instrument]` does: no span entered on every poll
        // when no subscriber records it.
        if span.is_disabled() {
            check.await
        } else {
            check.instrument(span).await
        }
    }

    /// Checks until admitted by every limit, or until the next admission
    /// would come after `max_wait` ([`Duration::MAX`]: however long it
    /// takes), sleeping the binding wait (plus jitter) between checks.
    pub(crate) async fn until_ready(
        &self,
        subject: &[u8],
        cost: u32,
        max_wait: Duration,
    ) -> Result<MultiDecision> {
        let deadline = deadline_after(max_wait);
        loop {
            let decision = self.run(subject, cost, true).await?;
            match wait_for(decision.binding(), deadline) {
                Some(wait) if !decision.allowed => tokio::time::sleep(wait).await,
                _ => return Ok(decision),
            }
        }
    }

    /// A failure of a call made on behalf of a check of `subject` for
    /// `cost` (taking a quota slice), under the policy, exactly as the
    /// check's own failure would be met.
    #[cfg(feature = "slices")]
    pub(crate) fn fail(&self, err: Error, subject: &[u8], cost: u32) -> Result<MultiDecision> {
        let specs = self.specs();
        Round::new(*self, &specs, true).fail(err, subject, cost)
    }

    /// Exactly what a check of `subject` for `cost` sends.
    pub(crate) fn invocation(&self, subject: &[u8], cost: u32) -> Result<Invocation> {
        let specs = self.specs();
        Round::new(*self, &specs, true).invocation(subject, cost)
    }
}

impl RateLimiter {
    /// The one check pipeline over this limiter alone, with its policy
    /// and deny cache.
    pub(crate) fn pipeline(&self) -> Pipeline<'_> {
        Pipeline {
            limiters: std::slice::from_ref(self),
            policy: self.failure_policy(),
            #[cfg(feature = "deny-cache")]
            cache: self.deny_cache().map(|cache| &**cache),
        }
    }
}

impl<'r> Round<'r> {
    /// One limit is checked by its algorithm's own script, several by the
    /// multi-limit script.
    pub(crate) fn new(pipeline: Pipeline<'r>, specs: &'r [Arc<LimitSpec>], consume: bool) -> Self {
        let script = match specs {
            [one] => one.algorithm.script(),
            _ => &algorithm::MULTI_LIMIT,
        };
        Round {
            pipeline,
            specs,
            script,
            // Only a check that may be cached needs it: none is hashed on
            // the path of a limiter without a deny cache.
            #[cfg(feature = "deny-cache")]
            print: if consume && pipeline.cache.is_some() {
                fingerprint(specs)
            } else {
                0
            },
            consume,
        }
    }

    /// What this check knows of `subject`'s settings: none (the cache
    /// says so), or to be read, and told to the cache if any.
    fn settings(&self, subject: &[u8]) -> Settings<'r> {
        match self.settings_cache() {
            Some(cache) if cache.has_none(subject) => Settings::KnownNone,
            cache => Settings::Read {
                cache,
                ticket: cache.map_or(0, SettingsCache::ticket),
            },
        }
    }

    /// The check of `subject` for `cost` sent: as plain commands when it
    /// may be (see `check/plain.rs`), else as its script. Only what is
    /// sent is built: a plain check's keys (the state key alone for a
    /// subject known to have no settings), a script's keys and `ARGV`.
    async fn send(&self, subject: &[u8], cost: u32, settings: Settings<'r>) -> Result<Vec<i64>> {
        if let Some(keys) = self.plain_keys(subject, settings) {
            let keys = keys?;
            if let Some(plan) = self.plan(cost, &keys, settings) {
                let judged = self.plain(subject, cost, &keys, plan).await;
                return self.finish(subject, cost, &keys, judged).await;
            }
        }
        self.script(subject, cost, settings).await
    }

    /// The check of `subject` for `cost` sent as its script: in its
    /// one-key form if the subject is known to have no settings; else
    /// whole, and what its reply says of them told to the cache.
    async fn script(&self, subject: &[u8], cost: u32, settings: Settings<'r>) -> Result<Vec<i64>> {
        let cluster = self.pipeline.cluster();
        match self.script_call(subject, cost, settings)? {
            ScriptCall::OneKey(state, args) => cluster.eval(self.script, &state, &args).await,
            ScriptCall::Whole(invocation) => {
                let reply = invocation.send(cluster, self.specs).await;
                if let Settings::Read {
                    cache: Some(cache),
                    ticket,
                } = settings
                    && says_none(&reply)
                {
                    cache.found_none(subject, ticket);
                }
                reply
            }
        }
    }

    /// What the script check of `subject` for `cost` sends: its one-key
    /// form if the subject is known to have no settings (see
    /// `stages/settings_cache.rs`), else the whole check.
    fn script_call(
        &self,
        subject: &[u8],
        cost: u32,
        settings: Settings<'r>,
    ) -> Result<ScriptCall<'r>> {
        let keys = self.pipeline.cluster().keys();
        Ok(match settings {
            Settings::KnownNone => {
                let (state, args) =
                    one_key_form(keys, self.script, self.specs, subject, cost, self.consume)?;
                ScriptCall::OneKey(state, args)
            }
            Settings::Read { .. } => ScriptCall::Whole(self.invocation(subject, cost)?),
        })
    }

    /// The check of `subject` for `cost` that `call` sent, refused because
    /// its slot is migrating: again, one key at a time (`limit::migrating`).
    async fn run_migrating(
        &self,
        subject: &[u8],
        cost: u32,
        call: &ScriptCall<'_>,
    ) -> Result<Vec<i64>> {
        let cluster = self.pipeline.cluster();
        match call {
            ScriptCall::Whole(invocation) => invocation.run_migrating(cluster, self.specs).await,
            ScriptCall::OneKey(..) => {
                let invocation = self.invocation(subject, cost)?;
                invocation.run_migrating(cluster, self.specs).await
            }
        }
    }

    /// The whole check of `subject` for `cost`: its script, three keys per
    /// limit and `ARGV`.
    fn invocation(&self, subject: &[u8], cost: u32) -> Result<Invocation> {
        Invocation::new(
            self.pipeline.cluster().keys(),
            self.script,
            self.specs,
            subject,
            cost,
            self.consume,
        )
    }

    /// The subject-settings cache of a check of one limit that has one.
    fn settings_cache(&self) -> Option<&'r SettingsCache> {
        match self.pipeline.limiters {
            [limiter] => limiter.settings_cache(),
            _ => None,
        }
    }

    /// Refuses a bad request before sending (counted, through the policy,
    /// as an error), or answers a denial from the cache: `Some`, the
    /// answer; `None`, the check is to be sent.
    fn screen(&self, subject: &[u8], cost: u32) -> Option<Result<MultiDecision>> {
        if let Err(err) = Invocation::refusal(self.specs, subject, cost) {
            return Some(self.fail(err, subject, cost));
        }
        let cached = self.cached(subject, cost)?;
        for (limiter, d) in self.pipeline.limiters.iter().zip(&cached.decisions) {
            if !d.allowed {
                limiter.denied(subject, true);
            }
        }
        Some(Ok(cached))
    }

    /// [`screen`](Self::screen)s the request, and builds the whole check
    /// of one that is to be sent.
    pub(crate) fn prepare(&self, subject: &[u8], cost: u32) -> Prepared {
        if let Some(answer) = self.screen(subject, cost) {
            return Prepared::Answered(answer);
        }
        match self.invocation(subject, cost) {
            Ok(invocation) => Prepared::Send(invocation),
            Err(err) => Prepared::Answered(self.fail(err, subject, cost)),
        }
    }

    /// The decision from Redis' reply, counted and offered to the cache,
    /// or the failure through the policy.
    pub(crate) fn conclude(
        &self,
        subject: &[u8],
        cost: u32,
        ticket: Option<Ticket>,
        reply: Result<Vec<i64>>,
    ) -> Result<MultiDecision> {
        let (allowed, decisions) =
            match reply.and_then(|reply| parse_reply(self.script, self.specs, &reply)) {
                Ok(parsed) => parsed,
                Err(err) => return self.fail(err, subject, cost),
            };
        self.learn(subject, cost, allowed, &decisions);
        if self.consume {
            for (limiter, d) in self.pipeline.limiters.iter().zip(&decisions) {
                let outcomes = limiter.outcomes();
                if allowed {
                    outcomes.decided(true, d.would_deny);
                } else if !d.allowed {
                    limiter.denied(subject, false);
                } else if d.would_deny {
                    outcomes.would_deny();
                }
            }
        }
        let decision = MultiDecision { allowed, decisions };
        self.offer(subject, cost, ticket, &decision);
        Ok(decision)
    }

    /// A failure under the policy: every limit sees it; fail-open admits
    /// with every limit bypassed, local decides from this process's share.
    pub(crate) fn fail(&self, err: Error, subject: &[u8], cost: u32) -> Result<MultiDecision> {
        let limiters = self.pipeline.limiters;
        let outcomes: Vec<_> = limiters.iter().map(RateLimiter::outcomes).collect();
        self.pipeline.policy.apply(err, &outcomes, |reason| {
            if matches!(self.pipeline.policy, FailurePolicy::Local { .. }) {
                self.decide_locally(subject, cost, reason)
            } else {
                MultiDecision {
                    allowed: true,
                    decisions: self
                        .specs
                        .iter()
                        .map(|s| Decision::bypass(s.quota, s.capacity, reason))
                        .collect(),
                }
            }
        })
    }
}

/// Names of a multi-limiter's limits joined by `+`, formatted only if a span
/// records them.
struct Names<'a>(&'a [RateLimiter]);

impl fmt::Display for Names<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, limiter) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("+")?;
            }
            f.write_str(limiter.name())?;
        }
        Ok(())
    }
}

/// The deadline `max_wait` from now; `None` (no deadline) when that is
/// beyond what the clock can represent, so "wait forever" means it.
pub(crate) fn deadline_after(max_wait: Duration) -> Option<Instant> {
    Instant::now().checked_add(max_wait)
}

/// How long to sleep before retrying after `decision`, or `None` to stop:
/// admitted, never admissible, or admissible only after `deadline` (`None`:
/// no deadline).
pub(crate) fn wait_for(decision: &Decision, deadline: Option<Instant>) -> Option<Duration> {
    if decision.allowed {
        return None;
    }
    let wait = decision.retry_after?;
    // Up to 10% (at most 50 ms) later, so a crowd of waiters spreads out.
    let wait = crate::backoff::jitter(wait, (wait / 10).min(Duration::from_millis(50)));
    match deadline {
        None => Some(wait),
        Some(deadline) => Instant::now()
            .checked_add(wait)
            .is_some_and(|ready| ready <= deadline)
            .then_some(wait),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::Quota;

    #[tokio::test(start_paused = true)]
    async fn waiting_stops_when_allowed_or_past_the_deadline() {
        let mut d = Decision::bypass(
            Quota::per_second(1),
            1,
            crate::policy::BypassReason::Timeout,
        );
        let later = deadline_after(Duration::from_secs(10));
        assert_eq!(wait_for(&d, later), None);
        d.allowed = false;
        d.retry_after = Some(Duration::from_millis(100));
        let wait = wait_for(&d, later).unwrap();
        assert!(wait >= Duration::from_millis(100) && wait <= Duration::from_millis(110));
        assert_eq!(
            wait_for(&d, deadline_after(Duration::from_millis(50))),
            None
        );
        // Time passes: 9.95 s later the same wait no longer fits.
        tokio::time::advance(Duration::from_millis(9950)).await;
        assert_eq!(wait_for(&d, later), None);
        d.retry_after = None;
        assert_eq!(wait_for(&d, later), None);
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_forever_has_no_deadline() {
        assert_eq!(deadline_after(Duration::MAX), None);
        let mut d = Decision::bypass(
            Quota::per_second(1),
            1,
            crate::policy::BypassReason::Timeout,
        );
        d.allowed = false;
        // Even a wait the clock cannot represent is waited for, not refused.
        for retry in [Duration::from_secs(3600), Duration::MAX] {
            d.retry_after = Some(retry);
            assert!(wait_for(&d, None).unwrap() >= retry);
        }
        tokio::time::advance(Duration::from_secs(1_000_000)).await;
        d.retry_after = Some(Duration::from_secs(1));
        assert!(wait_for(&d, deadline_after(Duration::MAX)).is_some());
    }
}
