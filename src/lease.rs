//! The lease limiter: at most N leases per subject (Sidekiq's "concurrent"
//! limiter). The public documentation lives on [`LeaseLimiter`].

use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use crate::backoff::{millis, random_id};
use crate::cluster::{Cluster, Undo};
use crate::count::{Checked, Count};
use crate::error::{Error, Result};
use crate::keys::{KeyId, KeySet, Kind};
use crate::limit::{
    CATALOG_REFRESH, CatalogPublishing, Publication, Publishes, lease_entry, start_publishing,
};
use crate::policy::{BypassReason, FailurePolicy};
use crate::primitive::{self, Attempt, Core, RetryBackoff};
use crate::scripts::{LEASE_ACQUIRE, LEASE_EXTEND, LEASE_RELEASE};

/// At most N leases per subject: a concurrency limiter (a distributed
/// semaphore) whose leases expire, so a crashed process's lease frees itself.
///
/// The words, once: a lease limiter grants **leases**; a lease lasts
/// [`lease_ttl`](LeaseLimiterBuilder::lease_ttl), renewed by
/// [`Lease::extend`], after which it is reclaimed; at most
/// [`max_leases`](LeaseLimiterBuilder::max_leases) are held per subject.
/// Its keys, stats and metrics carry the kind `lease`.
///
/// State per subject is one sorted set `<ns>:{<subject>}:lease:<name>`:
/// member = a lease's random 128-bit id, score = its expiry in the server's
/// milliseconds. Acquire is one script that first reclaims expired leases,
/// then grants one if fewer than N are live. The key's TTL follows the
/// longest live lease, so an idle subject leaves nothing behind.
///
/// ```no_run
/// # async fn demo(cluster: shardlimit::Cluster) -> shardlimit::Result<()> {
/// use std::num::NonZeroU32;
/// use std::time::Duration;
/// use shardlimit::LeaseLimiter;
///
/// let exports = LeaseLimiter::builder(&cluster, "exports")
///     .max_leases(NonZeroU32::new(5).expect("non-zero"))
///     .lease_ttl(Duration::from_secs(120))
///     .build()?;
/// if let Some(lease) = exports.try_acquire("tenant:42").await? {
///     // ... at most 5 of these run at once for tenant:42 ...
///     lease.release().await?;
/// }
/// # Ok(()) }
/// ```
///
/// # Guarantees
///
/// * Never more than N live leases per subject: the count and the grant
///   are one atomic script on the subject's master, with expiry judged by
///   the server's clock.
/// * A process that crashes (or drops its [`Lease`] — dropping sends
///   nothing) keeps its slot only until the lease runs out; the next
///   acquisition reclaims it. Long work must [`extend`](Lease::extend) it.
/// * As with locks, a failover can lose a just-granted lease (replication is
///   asynchronous), letting N+1 run for at most one `lease_ttl`.
///
/// # Failure policy and stats
///
/// With [`FailurePolicy::FailClosed`] (the default) errors are returned.
/// With [`FailurePolicy::FailOpen`] a transient fault (timeout, connection,
/// cluster reconfiguring) yields a **bypassed** lease
/// ([`Lease::bypassed`] is `Some`): the work runs unlimited, the bypass is
/// counted and warned about. Configuration faults are always errors.
///
/// [`Cluster::stats`](crate::Cluster::stats) counts under kind `lease`:
/// granted as `allowed`, all N taken as `denied`, `bypassed`, and every error
/// returned by any lease operation as `errors`.
#[derive(Clone, Debug)]
pub struct LeaseLimiter {
    inner: Arc<LeaseInner>,
}

#[derive(Debug)]
struct LeaseInner {
    core: Core,
    max_leases: NonZeroU32,
    lease_ms: u64,
    policy: FailurePolicy,
    retry: RetryBackoff,
    /// Its publication of `max_leases` to the catalog, as a rate limiter's.
    publication: Publication,
}

impl Publishes for LeaseInner {
    fn cluster(&self) -> &Cluster {
        self.core.cluster()
    }

    fn entry(&self) -> (KeyId, String) {
        lease_entry(self.core.id(), self.max_leases, self.lease_ms)
    }

    fn publication(&self) -> &Publication {
        &self.publication
    }
}

impl LeaseLimiter {
    /// A builder for the limiter named `name` (`[A-Za-z0-9_.-]{1,64}`).
    /// Limiters with the same name on the same namespace share their leases.
    ///
    /// ```no_run
    /// # fn demo(cluster: shardlimit::Cluster) -> shardlimit::Result<()> {
    /// use std::num::NonZeroU32;
    /// use shardlimit::{FailurePolicy, LeaseLimiter};
    /// let limiter = LeaseLimiter::builder(&cluster, "uploads")
    ///     .max_leases(NonZeroU32::new(3).expect("non-zero"))
    ///     .failure_policy(FailurePolicy::FailOpen)
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn builder(cluster: &Cluster, name: impl Into<String>) -> LeaseLimiterBuilder {
        LeaseLimiterBuilder {
            cluster: cluster.clone(),
            name: name.into(),
            max_leases: Checked::new(NonZeroU32::MIN),
            lease_ttl: Duration::from_secs(60),
            policy: FailurePolicy::default(),
            retry: RetryBackoff::DEFAULT,
        }
    }

    /// The limiter's name.
    ///
    /// ```no_run
    /// # fn demo(limiter: shardlimit::LeaseLimiter) {
    /// assert_eq!(limiter.name(), "exports");
    /// # }
    /// ```
    #[must_use]
    pub fn name(&self) -> &str {
        self.inner.core.name()
    }

    /// How its publications to the [catalog](crate::limit#the-catalog) went
    /// here (a failed one never fails an acquire).
    #[must_use]
    pub fn catalog_publishing(&self) -> CatalogPublishing {
        self.inner.publication.counts()
    }

    /// The most leases held at once per subject.
    ///
    /// ```no_run
    /// # fn demo(limiter: shardlimit::LeaseLimiter) {
    /// println!("up to {} at once", limiter.max_leases());
    /// # }
    /// ```
    #[must_use]
    pub fn max_leases(&self) -> NonZeroU32 {
        self.inner.max_leases
    }

    /// One attempt: a lease if fewer than N are held on `subject`, `None`
    /// if all are.
    ///
    /// Errors with [`Error::EmptySubject`] / [`Error::SubjectTooLong`]
    /// before sending, and when Redis did not answer under
    /// [`FailurePolicy::FailClosed`], or refused (say, a command of the
    /// script the ACL does not allow). After any error that leaves it
    /// possible that the script granted the lease — a timeout after
    /// sending, a broken connection, a script that failed midway — a
    /// release of it is sent in the background, on the same connection
    /// right behind the acquisition (on a new one once the node answers, if
    /// that one broke), so the lease does not stay taken for its TTL.
    ///
    /// ```no_run
    /// # async fn demo(limiter: shardlimit::LeaseLimiter) -> shardlimit::Result<()> {
    /// match limiter.try_acquire("tenant:42").await? {
    ///     Some(lease) => { lease.release().await?; }
    ///     None => println!("5 already running, try later"),
    /// }
    /// # Ok(()) }
    /// ```
    #[tracing::instrument(name = "shardlimit.lease.try_acquire", level = "debug", skip_all,
        fields(kind = Kind::Lease.as_str(), name = self.name(), slot, outcome, subject))]
    pub async fn try_acquire(&self, subject: impl AsRef<[u8]>) -> Result<Option<Lease>> {
        self.acquire_within(subject.as_ref(), Duration::ZERO).await
    }

    /// Tries until a lease on `subject` is granted or `wait` has passed;
    /// `Ok(None)` means all N stayed taken until the deadline.
    ///
    /// Between attempts it sleeps with jittered exponential backoff
    /// ([`retry_backoff`](LeaseLimiterBuilder::retry_backoff)), never
    /// past the soonest lease expiry the server reported, nor past the
    /// deadline, where one last attempt is made. An error ends the wait at
    /// once (and is handled by the failure policy).
    ///
    /// ```no_run
    /// # async fn demo(limiter: shardlimit::LeaseLimiter) -> shardlimit::Result<()> {
    /// use std::time::Duration;
    /// if let Some(lease) = limiter.acquire("tenant:42", Duration::from_secs(2)).await? {
    ///     lease.release().await?;
    /// }
    /// # Ok(()) }
    /// ```
    #[tracing::instrument(name = "shardlimit.lease.acquire", level = "debug", skip_all,
        fields(kind = Kind::Lease.as_str(), name = self.name(), slot, outcome, subject))]
    pub async fn acquire(
        &self,
        subject: impl AsRef<[u8]>,
        wait: Duration,
    ) -> Result<Option<Lease>> {
        self.acquire_within(subject.as_ref(), wait).await
    }

    async fn acquire_within(&self, subject: &[u8], wait: Duration) -> Result<Option<Lease>> {
        let inner = &self.inner;
        if !inner.publication.started() {
            start_publishing(inner);
        }
        let acquired = primitive::acquire(inner.core.outcomes(), inner.retry, wait, || {
            self.attempt(subject)
        })
        .await;
        acquired.or_else(|err| {
            inner.policy.apply(err, &[inner.core.outcomes()], |reason| {
                Some(Lease {
                    state: LeaseState::Bypassed(reason),
                    subject: subject.to_vec(),
                })
            })
        })
    }

    /// One attempt: a lease, or how long until the soonest lease expires.
    async fn attempt(&self, subject: &[u8]) -> Result<Attempt<Lease>> {
        crate::metrics::span_subject(subject);
        let inner = &self.inner;
        let cluster = inner.core.cluster();
        let keys = cluster.keys().key_set(subject, [inner.core.id()])?;
        let id = random_id();
        let args = (&id, inner.max_leases.get(), inner.lease_ms);
        // Whatever this acquisition may have taken is given back after any
        // error, behind it on its connection (see `Cluster::eval_or_undo`).
        let lease = Duration::from_millis(inner.lease_ms);
        let undo = Undo::new(&LEASE_RELEASE, &keys, &id, lease);
        let reply: Vec<i64> = cluster
            .eval_or_undo(&LEASE_ACQUIRE, &keys, args, None, undo.clone())
            .await?;
        match reply.as_slice() {
            [1, _, _] => Ok(Attempt::Granted(Lease {
                state: LeaseState::Live {
                    limiter: Arc::clone(inner),
                    keys,
                    id,
                },
                subject: subject.to_vec(),
            })),
            [0, _, soonest_ms] => Ok(Attempt::Busy(Duration::from_millis(
                u64::try_from(*soonest_ms).unwrap_or(0),
            ))),
            _ => {
                cluster.undo(undo);
                Err(Error::UnexpectedReply {
                    op: LEASE_ACQUIRE.name().to_owned().into(),
                    detail: format!("{reply:?}"),
                })
            }
        }
    }
}

/// One of the at most N leases held on a subject, from
/// [`LeaseLimiter::try_acquire`] or [`LeaseLimiter::acquire`].
///
/// Return it with [`release`](Self::release). Dropping it sends nothing:
/// its slot stays taken until the lease expires — exactly what happens when
/// its process crashes.
///
/// ```no_run
/// # async fn demo(limiter: shardlimit::LeaseLimiter) -> shardlimit::Result<()> {
/// use std::time::Duration;
/// if let Some(lease) = limiter.try_acquire("tenant:42").await? {
///     if lease.bypassed().is_some() {
///         eprintln!("running without the limit: Redis is unavailable");
///     }
///     lease.extend(Duration::from_secs(120)).await?;
///     lease.release().await?;
/// }
/// # Ok(()) }
/// ```
#[must_use = "dropping a Lease keeps its slot taken until the lease expires; call release()"]
pub struct Lease {
    state: LeaseState,
    subject: Vec<u8>,
}

enum LeaseState {
    Live {
        limiter: Arc<LeaseInner>,
        keys: KeySet,
        id: String,
    },
    /// Granted without Redis under fail-open: nothing is held anywhere.
    Bypassed(BypassReason),
}

impl Lease {
    /// `Some(reason)` when this lease was granted without Redis under
    /// [`FailurePolicy::FailOpen`]; it then holds nothing, and
    /// [`extend`](Self::extend) and [`release`](Self::release) send nothing
    /// and return `Ok(true)` — there is nothing to lose.
    ///
    /// ```no_run
    /// # fn demo(lease: &shardlimit::lease::Lease) {
    /// if let Some(reason) = lease.bypassed() {
    ///     eprintln!("lease limit bypassed: {reason}");
    /// }
    /// # }
    /// ```
    #[must_use]
    pub fn bypassed(&self) -> Option<BypassReason> {
        match self.state {
            LeaseState::Bypassed(reason) => Some(reason),
            LeaseState::Live { .. } => None,
        }
    }

    /// The subject the lease was granted on, as given.
    ///
    /// ```no_run
    /// # fn demo(lease: &shardlimit::lease::Lease) {
    /// assert_eq!(lease.subject(), b"tenant:42");
    /// # }
    /// ```
    #[must_use]
    pub fn subject(&self) -> &[u8] {
        &self.subject
    }

    /// Sets the lease to expire `ttl` from now, if it is still live:
    /// `Ok(false)` means it had expired (and its slot may have been taken
    /// by another lease). The subject key's TTL is raised to cover it.
    ///
    /// Errors with [`Error::Config`] for a `ttl` under 1 ms (nothing sent),
    /// or when Redis did not answer (never bypassed: the lease exists).
    ///
    /// ```no_run
    /// # async fn demo(lease: shardlimit::lease::Lease) -> shardlimit::Result<()> {
    /// use std::time::Duration;
    /// if !lease.extend(Duration::from_secs(60)).await? {
    ///     eprintln!("lease expired: another worker may have taken the slot");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn extend(&self, ttl: Duration) -> Result<bool> {
        let ttl_ms = millis("ttl", ttl)?;
        let LeaseState::Live { limiter, keys, id } = &self.state else {
            return Ok(true);
        };
        let extended: i64 = limiter.core.eval(&LEASE_EXTEND, keys, (id, ttl_ms)).await?;
        Ok(extended == 1)
    }

    /// Returns the lease: `Ok(true)` when it was still live, `Ok(false)`
    /// when it had expired before (its entry is removed either way).
    /// Removing the last lease of a subject deletes its key.
    ///
    /// An error means Redis did not answer: the release may or may not have
    /// happened. It is then sent again in the background while Redis
    /// refuses it for a transient reason (a `CLUSTERDOWN` window, a failover,
    /// a broken connection), until it is answered or the lease would have
    /// run out anyway.
    ///
    /// ```no_run
    /// # async fn demo(lease: shardlimit::lease::Lease) -> shardlimit::Result<()> {
    /// if !lease.release().await? {
    ///     eprintln!("the work overran its lease");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn release(self) -> Result<bool> {
        let LeaseState::Live { limiter, keys, id } = &self.state else {
            return Ok(true);
        };
        let lease = Duration::from_millis(limiter.lease_ms);
        let released = limiter
            .core
            .release(&LEASE_RELEASE, keys, id, lease)
            .await?;
        Ok(released == 1)
    }
}

impl fmt::Debug for Lease {
    // The lease id is the proof of holding (whoever knows it can extend or
    // release the lease): kept out of logs, like a lock guard's token.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("Lease");
        s.field("subject", &String::from_utf8_lossy(&self.subject));
        match &self.state {
            LeaseState::Live { limiter, .. } => s.field("limiter", &limiter.core.name()),
            LeaseState::Bypassed(reason) => s.field("bypassed", reason),
        };
        s.finish_non_exhaustive()
    }
}

/// Configures a [`LeaseLimiter`]. Every setter states its default;
/// [`build`](Self::build) validates everything and contacts nothing.
///
/// ```no_run
/// # fn demo(cluster: shardlimit::Cluster) -> shardlimit::Result<()> {
/// use std::num::NonZeroU32;
/// use std::time::Duration;
/// use shardlimit::{FailurePolicy, LeaseLimiter};
/// let limiter = LeaseLimiter::builder(&cluster, "exports")
///     .max_leases(NonZeroU32::new(5).expect("non-zero")) // default 1
///     .lease_ttl(Duration::from_secs(120))                 // default 60 s
///     .failure_policy(FailurePolicy::FailClosed)           // the default
///     .retry_backoff(Duration::from_millis(10), Duration::from_millis(250))
///     .build()?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
#[must_use]
pub struct LeaseLimiterBuilder {
    cluster: Cluster,
    name: String,
    max_leases: Checked,
    lease_ttl: Duration,
    policy: FailurePolicy,
    retry: RetryBackoff,
}

impl LeaseLimiterBuilder {
    /// The most leases held at once per subject: a plain integer or a
    /// [`NonZeroU32`], from 1 to `u32::MAX` (checked by
    /// [`build`](Self::build), field `max_leases`). Default 1 (a mutex that
    /// fails over to its lease expiry).
    pub fn max_leases(mut self, n: impl Count) -> Self {
        self.max_leases = Checked::new(n);
        self
    }

    /// How long a lease lasts unless extended; a crashed process's slot is
    /// free again after this. Default 60 s. At least 1 ms (whole
    /// milliseconds).
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = ttl;
        self
    }

    /// What a transient Redis fault does: return the error
    /// ([`FailurePolicy::FailClosed`], the default) or grant a bypassed
    /// lease ([`FailurePolicy::FailOpen`]). [`FailurePolicy::Local`] is a
    /// configuration error at [`build`](Self::build): leases cannot be
    /// split into local shares.
    pub fn failure_policy(mut self, policy: FailurePolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Backoff between attempts of [`LeaseLimiter::acquire`]: the
    /// `n`th wait is random in `[d/2, d]`, `d = min(max, min × 2^n)`.
    /// Default 10 ms and 250 ms. `min` must be non-zero and at most `max`.
    pub fn retry_backoff(mut self, min: Duration, max: Duration) -> Self {
        self.retry = RetryBackoff::new(min, max);
        self
    }

    /// Validates the configuration. Its `max_leases` and `lease_ttl` go to the
    /// [catalog](crate::limit#the-catalog) from a background task.
    ///
    /// Errors with [`Error::InvalidIdent`] for a bad name and
    /// [`Error::Config`] naming the setting otherwise.
    pub fn build(self) -> Result<LeaseLimiter> {
        let id = KeyId::new(Kind::Lease.as_str(), &self.name)?;
        let max_leases = self.max_leases.get("max_leases")?;
        let lease_ms = millis("lease_ttl", self.lease_ttl)?;
        let retry = self.retry.checked()?;
        if let FailurePolicy::Local { .. } = self.policy {
            return Err(Error::Config {
                field: "failure_policy",
                reason: "the leases are shared by every process and cannot be split \
                         into local shares: use FailOpen or FailClosed"
                    .into(),
            });
        }
        let inner = Arc::new(LeaseInner {
            core: Core::new(self.cluster, id),
            max_leases,
            lease_ms,
            policy: self.policy,
            retry,
            publication: Publication::new(CATALOG_REFRESH),
        });
        start_publishing(&inner);
        Ok(LeaseLimiter { inner })
    }
}
