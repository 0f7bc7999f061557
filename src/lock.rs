//! Locks with fencing tokens: one holder per resource at a time (the one
//! cron host of three that runs the nightly export), correct on a cluster. The public documentation lives on [`Lock`].

mod builder;
mod guard;
mod held;
mod watchdog;

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::ToRedisArgs;

pub use self::builder::LockBuilder;
pub use self::guard::LockGuard;
use self::held::Held;
use crate::backoff::random_id;
use crate::cluster::{Cluster, Undo};
use crate::error::{Error, Result};
use crate::keys::{KeyId, KeySet, Kind};
use crate::primitive::{self, Attempt, Core, RetryBackoff};
use crate::scripts::{LOCK_ACQUIRE, LOCK_FENCE, LOCK_RELEASE};

/// How late Redis may answer a `WAIT` that timed out: it notices expired
/// blocking timeouts on its server cron, every 1/hz seconds (hz 10 by
/// default). Measured against Redis 7.0: `WAIT 2 200` with one replica
/// answers after 220–300 ms.
const WAIT_LATENESS: Duration = Duration::from_millis(100);

/// A named lock definition, applied per resource: at most one holder per
/// resource at a time, proven by a random token, with a fencing token that
/// only ever grows.
///
/// Build it once; it is cheap to clone and shares its cluster connection.
///
/// ```no_run
/// # async fn demo(cluster: shardlimit::Cluster) -> shardlimit::Result<()> {
/// use std::time::Duration;
/// use shardlimit::Lock;
///
/// let lock = Lock::builder(&cluster, "job")
///     .ttl(Duration::from_secs(3600))
///     .build()?;
/// match lock.try_acquire("nightly-export").await? {
///     Some(guard) => {
///         // Pass the fencing token to whatever the job writes to, so a
///         // stale holder's late writes can be refused there.
///         println!("exporting with fencing token {}", guard.fencing_token());
///         guard.release().await?;
///     }
///     None => println!("lock held elsewhere, exiting"),
/// }
/// # Ok(()) }
/// ```
///
/// # What it guarantees
///
/// * **Acquire** is one Lua script on the master owning the resource's slot:
///   `SET <lock> <token> NX PX <ttl>` with a fresh 128-bit random token, and,
///   only if that succeeded, a new **fencing token**
///   `max(previous + 1, server time in µs)` stored in the `:fence` key. Tokens
///   strictly increase per resource, even after the fence key expired (it has
///   a TTL of `max(ttl, fence_ttl)`; nothing here is immortal) or was lost in
///   a failover — as long as the masters' clocks do not step back by more
///   than the fence key's lifetime.
/// * **Release and extend** compare the token and act in one script, so a
///   holder whose lock expired can never delete or prolong the next
///   holder's lock; they report `false` instead.
/// * **Every lock expires.** A crashed holder's lock frees itself after the
///   TTL; a dropped [`LockGuard`] does not block and does not release — its
///   lock simply expires. The TTL must exceed the longest plausible hold, or
///   use the [watchdog](LockBuilder::watchdog).
/// * **Locks always fail closed**: an error is never "acquired", and what a
///   failed acquisition may have taken does not stay held. After any error
///   that leaves it possible that the script ran — a timeout or broken
///   connection after it was sent (see
///   [at-most-once](crate::Cluster#timeouts-and-ambiguous-outcomes)), an
///   error reply such as a `WAIT` the ACL refuses — a compare-and-delete
///   with the unused token is sent in the background, on the same connection
///   right behind the acquisition, so it cannot overtake an acquisition
///   still queued there. It waits there for its reply as long as the lock
///   could live (at least 30 s), holding the connection open even if the
///   node is marked down meanwhile, so a backlog behind a stalled master
///   cannot drop it unwritten. If that connection broke (the server then
///   runs nothing more from it), the release goes on a new connection once
///   the node answers, until the lock would have expired anyway.
///
/// Time decisions (expiry, fencing) use the server's clock; the client only
/// uses its monotonic clock for the conservative local view behind
/// [`LockGuard::is_held`].
///
/// # Why persistence and replication matter
///
/// A lock lives in one master's memory. Two things can hand it to a second
/// holder while the first still works:
///
/// * **A restart without AOF** loses every lock at once, and the holders do
///   not find out. Run lock masters with `appendonly yes`
///   (`appendfsync everysec` can still lose the last second).
/// * **A failover** promotes a replica, and replication is asynchronous: a
///   lock acquired just before the master died may never have reached the
///   replica. [`replica_ack`](LockBuilder::replica_ack) closes that window:
///   after acquiring, `WAIT` for a replica to confirm, and fail the
///   acquisition (releasing it) if none does.
///
/// [`Cluster::health`](crate::Cluster::health) reports AOF and connected
/// replicas per master. Even then, a lock is a lease, not a proof: pass the
/// [fencing token](LockGuard::fencing_token) to the resource you protect and
/// have it refuse tokens lower than one it has seen.
///
/// # Stats
///
/// [`Cluster::stats`](crate::Cluster::stats) counts, under kind `lock`:
/// acquired as `allowed`, held elsewhere as `denied`, and every error
/// returned by any lock operation as `errors`. Nothing is ever `bypassed`.
#[derive(Clone, Debug)]
pub struct Lock {
    inner: Arc<LockInner>,
}

#[derive(Debug)]
struct LockInner {
    core: Core,
    fence: KeyId,
    ttl: Duration,
    ttl_ms: u64,
    /// The fence key's least lifetime; its TTL is `max(ttl, this)`.
    fence_ttl_ms: u64,
    watchdog: bool,
    replica_ack: Option<ReplicaAck>,
    retry: RetryBackoff,
}

#[derive(Clone, Copy, Debug)]
struct ReplicaAck {
    timeout: Duration,
    timeout_ms: u64,
    replicas: NonZeroU32,
}

impl Lock {
    /// A builder for the lock named `name` (`[A-Za-z0-9_.-]{1,64}`) on
    /// `cluster`. Locks with the same name on the same namespace are the same
    /// lock.
    ///
    /// ```no_run
    /// # fn demo(cluster: shardlimit::Cluster) -> shardlimit::Result<()> {
    /// use std::time::Duration;
    /// let lock = shardlimit::Lock::builder(&cluster, "job")
    ///     .ttl(Duration::from_secs(10))
    ///     .watchdog(true)
    ///     .replica_ack(Duration::from_millis(100))
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn builder(cluster: &Cluster, name: impl Into<String>) -> LockBuilder {
        LockBuilder::new(cluster.clone(), name.into())
    }

    /// The lock's name.
    ///
    /// ```no_run
    /// # fn demo(lock: shardlimit::Lock) {
    /// assert_eq!(lock.name(), "job");
    /// # }
    /// ```
    #[must_use]
    pub fn name(&self) -> &str {
        self.inner.core.name()
    }

    /// The TTL each acquisition (and each watchdog extension) sets, in whole
    /// milliseconds.
    ///
    /// ```no_run
    /// # fn demo(lock: shardlimit::Lock) {
    /// println!("a crashed holder blocks this lock for at most {:?}", lock.ttl());
    /// # }
    /// ```
    #[must_use]
    pub fn ttl(&self) -> Duration {
        self.inner.ttl
    }

    /// One attempt: the guard if the lock on `resource` was free, `None` if
    /// it is held elsewhere.
    ///
    /// Errors (never a guard) with [`Error::EmptySubject`] /
    /// [`Error::SubjectTooLong`] before sending, or when Redis did not
    /// answer or refused (say, a `WAIT` the ACL does not allow), or — with
    /// [`replica_ack`](LockBuilder::replica_ack) — when the replicas did not
    /// confirm in time: then the error is an [`Error::Timeout`] whose `op`
    /// says how many replicas acknowledged. In every case a lock the attempt
    /// may have taken is released again, ordered after it (see [What it
    /// guarantees](Lock#what-it-guarantees)).
    ///
    /// Not cancel-safe: dropping the future after the script ran (e.g. under
    /// a `select!` or an outer timeout) leaves the lock taken, with nobody
    /// holding its token, until its TTL expires.
    ///
    /// ```no_run
    /// # async fn demo(lock: shardlimit::Lock) -> shardlimit::Result<()> {
    /// if let Some(guard) = lock.try_acquire("nightly-export").await? {
    ///     // ... the work ...
    ///     guard.release().await?;
    /// }
    /// # Ok(()) }
    /// ```
    #[tracing::instrument(name = "shardlimit.lock.try_acquire", level = "debug", skip_all,
        fields(kind = Kind::Lock.as_str(), name = self.name(), slot, outcome, subject))]
    pub async fn try_acquire(&self, resource: impl AsRef<[u8]>) -> Result<Option<LockGuard>> {
        self.acquire_within(resource.as_ref(), Duration::ZERO).await
    }

    /// Tries until the lock on `resource` is acquired or `wait` has passed:
    /// `Ok(None)` means the deadline passed with the lock still held
    /// elsewhere (not an error: waiting out a busy lock is normal).
    ///
    /// Between attempts it sleeps with jittered exponential backoff
    /// ([`retry_backoff`](LockBuilder::retry_backoff)), never longer than the
    /// holder's remaining TTL as the server reported it, nor past the
    /// deadline, where one last attempt is made. An error ends the wait at
    /// once (fail closed; see [`try_acquire`](Self::try_acquire)).
    ///
    /// ```no_run
    /// # async fn demo(lock: shardlimit::Lock) -> shardlimit::Result<()> {
    /// use std::time::Duration;
    /// match lock.acquire("invoice:7", Duration::from_secs(5)).await? {
    ///     Some(guard) => { guard.release().await?; }
    ///     None => println!("still busy after 5 s"),
    /// }
    /// # Ok(()) }
    /// ```
    #[tracing::instrument(name = "shardlimit.lock.acquire", level = "debug", skip_all,
        fields(kind = Kind::Lock.as_str(), name = self.name(), slot, outcome, subject))]
    pub async fn acquire(
        &self,
        resource: impl AsRef<[u8]>,
        wait: Duration,
    ) -> Result<Option<LockGuard>> {
        self.acquire_within(resource.as_ref(), wait).await
    }

    async fn acquire_within(&self, resource: &[u8], wait: Duration) -> Result<Option<LockGuard>> {
        let core = &self.inner.core;
        // Locks always fail closed: an error is counted and returned.
        primitive::acquire(core.outcomes(), self.inner.retry, wait, || {
            self.attempt(resource)
        })
        .await
        .inspect_err(|_| core.outcomes().error())
    }

    /// One attempt: the guard, or how long the holder's lock has left.
    async fn attempt(&self, resource: &[u8]) -> Result<Attempt<LockGuard>> {
        crate::metrics::span_subject(resource);
        let inner = &self.inner;
        let keys = inner
            .core
            .cluster()
            .keys()
            .key_set(resource, [inner.core.id(), &inner.fence])?;
        // The watchdog is a task: refuse before acquiring rather than panic
        // after, when there is no runtime to spawn it on.
        let runtime = tokio::runtime::Handle::try_current().ok();
        if inner.watchdog && runtime.is_none() {
            return Err(Error::Config {
                field: "watchdog",
                reason: "the watchdog needs a tokio runtime".to_owned(),
            });
        }
        let token = random_id();
        // Taken before sending: the server's TTL starts later than this, so
        // the local view of the lock's validity is conservative.
        let sent = Instant::now();
        let fence_ttl_ms = inner.fence_ttl_ms.max(inner.ttl_ms);
        let args = (&token, inner.ttl_ms, fence_ttl_ms);
        let cluster = inner.core.cluster();
        // Whatever this acquisition may have taken is released again after
        // any error, behind it on its connection (see `Cluster::eval_or_undo`).
        let undo = Undo::new(&LOCK_RELEASE, &keys, &token, inner.ttl);
        let (reply, acked, undo) = match self.send_acquire(&keys, args, undo.clone()).await {
            // The slot is migrating: the same acquisition, one key at a time.
            Err(err) if err.is_tryagain() => self.acquire_migrating(&keys, args).await?,
            other => {
                let (reply, acked) = other?;
                (reply, acked, undo)
            }
        };
        match reply.as_slice() {
            [1, fence] => {
                let Ok(fence) = u64::try_from(*fence) else {
                    cluster.undo(undo);
                    return Err(unexpected(&reply));
                };
                let held = Held::new(
                    Arc::clone(&self.inner),
                    keys,
                    resource.to_vec(),
                    token,
                    fence,
                    sent,
                );
                let guard = LockGuard::new(held);
                let guard = self.confirm_replicas(guard, acked, undo).await?;
                Ok(Attempt::Granted(guard.start_watchdog(runtime)))
            }
            // Held elsewhere: wake when the holder's lock expires at the latest.
            [0, pttl] => Ok(Attempt::Busy(Duration::from_millis(
                u64::try_from(*pttl).unwrap_or(0),
            ))),
            _ => {
                cluster.undo(undo);
                Err(unexpected(&reply))
            }
        }
    }

    /// Sends the acquisition script on `keys` (the lock key and the fence
    /// key, or — while the slot migrates — the lock key alone, with the
    /// fence's value as a fourth argument), followed by `WAIT` when replica
    /// acknowledgement is on. Its reply, and `WAIT`'s. Whatever it may have
    /// taken is released by `undo` after any error, behind it on its
    /// connection (see `Cluster::eval_or_undo`).
    async fn send_acquire(
        &self,
        keys: &KeySet,
        args: impl ToRedisArgs,
        undo: Undo,
    ) -> Result<(Vec<i64>, Option<i64>)> {
        let cluster = self.inner.core.cluster();
        // With replica acknowledgement, WAIT travels right behind the script
        // in one pipeline on the same connection to the same node: WAIT only
        // counts the writes made earlier on its own connection, so sent
        // anywhere else it would "confirm" a write it never saw.
        match self.inner.replica_ack {
            None => cluster
                .eval_or_undo(&LOCK_ACQUIRE, keys, args, None, undo)
                .await
                .map(|reply| (reply, None)),
            Some(ack) => {
                let mut wait = redis::cmd("WAIT");
                wait.arg(ack.replicas.get()).arg(ack.timeout_ms);
                cluster
                    .eval_or_undo(&LOCK_ACQUIRE, keys, args, Some(wait), undo)
                    .await
                    .map(|(reply, acked)| (reply, Some(acked)))
            }
        }
    }

    /// The acquisition while the resource's slot migrates, after Redis
    /// refused the two-key script (`TRYAGAIN`: the fence key exists and the
    /// lock key does not, so no one node holds both): the fence key is
    /// read on its own, the lock taken on the lock key alone with that
    /// value (the same token rule), and the fence key raised to the new
    /// token afterwards. Every step touches one key, which Redis serves on
    /// whichever side holds it.
    ///
    /// A token is handed out only once the fence key records it: if the
    /// raise fails, the lock is released again and the error returned
    /// (locks fail closed). Kept without the raise, the next token would
    /// rest on the server time alone — taken on the other side of the
    /// migration, on another master's clock, which may be behind this
    /// one's: fencing tokens could go backwards.
    async fn acquire_migrating(
        &self,
        keys: &KeySet,
        (token, ttl_ms, fence_ttl_ms): (&String, u64, u64),
    ) -> Result<(Vec<i64>, Option<i64>, Undo)> {
        let cluster = self.inner.core.cluster();
        let [lock_key, fence_key] = keys.keys() else {
            return Err(unexpected(&[]));
        };
        let previous = cluster.read_alone(fence_key).await?.unwrap_or_default();
        let lock_alone = KeySet::checked(vec![lock_key.clone()])?;
        let fence_alone = KeySet::checked(vec![fence_key.clone()])?;
        // The release reads the lock key alone, so it can go where that is.
        let undo = Undo::new(&LOCK_RELEASE, &lock_alone, token, self.inner.ttl);
        let args = (token, ttl_ms, fence_ttl_ms, previous);
        let (reply, acked) = self.send_acquire(&lock_alone, args, undo.clone()).await?;
        if let [1, fence] = reply[..] {
            let raised: Result<i64> = cluster
                .eval(&LOCK_FENCE, &fence_alone, (fence, fence_ttl_ms))
                .await;
            if let Err(err) = raised {
                // Answered, so anything sent now comes after the acquisition.
                cluster.undo(undo);
                return Err(err);
            }
        }
        Ok((reply, acked, undo))
    }

    /// With replica acknowledgement on: keeps the lock only if `acked` — the
    /// reply of the `WAIT` sent behind the acquisition — says enough
    /// replicas confirmed it; otherwise releases it again and errors (fail
    /// closed: a lock a failover could hand to someone else is not held),
    /// leaving the release to `undo` in the background if it fails.
    async fn confirm_replicas(
        &self,
        guard: LockGuard,
        acked: Option<i64>,
        undo: Undo,
    ) -> Result<LockGuard> {
        let Some(ack) = self.inner.replica_ack else {
            return Ok(guard);
        };
        let needed = u64::from(ack.replicas.get());
        let confirmed = acked.and_then(|n| u64::try_from(n).ok()).unwrap_or(0);
        if confirmed >= needed {
            return Ok(guard);
        }
        let failure = Error::Timeout {
            op: format!(
                "replica ack for lock {} ({confirmed} of {} replicas acknowledged)",
                self.name(),
                ack.replicas
            )
            .into(),
            slot: Some(guard.slot()),
            timeout: ack.timeout,
        };
        if let Err(err) = guard.release().await {
            tracing::warn!(lock = %self.name(), error = %err,
                "shardlimit: could not release an unconfirmed lock; retrying in the background");
            self.inner.core.cluster().undo(undo);
        }
        Err(failure)
    }
}

fn unexpected(reply: &[i64]) -> Error {
    Error::UnexpectedReply {
        op: LOCK_ACQUIRE.name().to_owned().into(),
        detail: format!("{reply:?}"),
    }
}
