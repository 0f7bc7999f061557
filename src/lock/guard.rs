//! `LockGuard`: a held lock, its fencing token, extend and release.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::held::Held;
use super::watchdog;
use crate::backoff::millis;
use crate::error::Result;
use crate::scripts::{LOCK_RELEASE, LOCK_TTL};

/// A held lock. Returned by [`Lock::try_acquire`](crate::Lock::try_acquire)
/// and [`Lock::acquire`](crate::Lock::acquire).
///
/// Release it with [`release`](Self::release) when the work is done.
/// Dropping it never blocks and sends nothing: the lock stays taken until its
/// TTL runs out (and the watchdog, if any, stops at once).
///
/// ```no_run
/// # async fn demo(lock: shardlimit::Lock, db: &mut Vec<(u64, String)>) -> shardlimit::Result<()> {
/// use std::time::Duration;
/// if let Some(guard) = lock.try_acquire("report:2024-06").await? {
///     // Stamp every write with the fencing token; the store refuses a
///     // token lower than the highest it has seen.
///     db.push((guard.fencing_token(), "row".to_owned()));
///     if !guard.extend(Duration::from_secs(60)).await? {
///         return Ok(()); // expired meanwhile: someone else may hold it now
///     }
///     let still_ours = guard.release().await?;
///     assert!(still_ours);
/// }
/// # Ok(()) }
/// ```
#[must_use = "dropping a LockGuard leaves the lock taken until its TTL expires; call release()"]
pub struct LockGuard {
    held: Arc<Held>,
    /// Dropping this stops the watchdog at once; it also only holds a `Weak`
    /// to `held`, so it can never keep a dropped guard's lock alive.
    stop: Option<oneshot::Sender<()>>,
}

impl LockGuard {
    pub(super) fn new(held: Held) -> Self {
        LockGuard {
            held: Arc::new(held),
            stop: None,
        }
    }

    /// Starts the watchdog if the lock has it on (`runtime` was checked to
    /// exist before acquiring).
    pub(super) fn start_watchdog(mut self, runtime: Option<tokio::runtime::Handle>) -> Self {
        if let (true, Some(runtime)) = (self.held.lock.watchdog, runtime) {
            let (stop, stopped) = oneshot::channel();
            runtime.spawn(watchdog::run(Arc::downgrade(&self.held), stopped));
            self.stop = Some(stop);
        }
        self
    }

    pub(super) fn slot(&self) -> u16 {
        self.held.keys.slot()
    }

    /// The fencing token of this acquisition: larger than every token issued
    /// before for this resource (by any lock of this name and namespace).
    /// Around `1.7e15` — the server's time in microseconds — or above.
    ///
    /// ```no_run
    /// # async fn demo(lock: shardlimit::Lock) -> shardlimit::Result<()> {
    /// let guard = lock.try_acquire("nightly-export").await?.expect("free");
    /// let token: u64 = guard.fencing_token();
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn fencing_token(&self) -> u64 {
        self.held.fence
    }

    /// The resource this guard holds the lock on, as given.
    ///
    /// ```no_run
    /// # async fn demo(lock: shardlimit::Lock) -> shardlimit::Result<()> {
    /// let guard = lock.try_acquire("nightly-export").await?.expect("free");
    /// assert_eq!(guard.resource(), b"nightly-export");
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn resource(&self) -> &[u8] {
        &self.held.resource
    }

    /// Whether the lock can still be assumed held: no operation found it
    /// gone or taken, and its TTL — counted from before the last successful
    /// acquire or extend was sent, so never later than the server's — has
    /// not run out. With the watchdog on, extensions keep it true.
    ///
    /// Not a proof: between this check and your next write the lock can
    /// still expire. Fencing tokens are the proof.
    ///
    /// ```no_run
    /// # async fn demo(guard: shardlimit::lock::LockGuard) {
    /// for batch in 0..10 {
    ///     if !guard.is_held() {
    ///         break; // stop writing: someone else may hold it now
    ///     }
    ///     // ... write batch ...
    /// }
    /// # }
    /// ```
    #[must_use]
    pub fn is_held(&self) -> bool {
        self.held.is_held()
    }

    /// Resolves once [`is_held`](Self::is_held) turns false: an extension
    /// (yours or the watchdog's) found the lock gone or taken, or the TTL
    /// ran out without one. Never resolves while the watchdog keeps
    /// extending. Cancel-safe.
    ///
    /// ```no_run
    /// # async fn demo(guard: shardlimit::lock::LockGuard) {
    /// # async fn export() {}
    /// tokio::select! {
    ///     () = export() => {}
    ///     () = guard.lost() => eprintln!("lock lost; export aborted"),
    /// }
    /// # }
    /// ```
    pub async fn lost(&self) {
        let mut changes = self.held.lost.subscribe();
        loop {
            if *changes.borrow_and_update() {
                return;
            }
            let until = self.held.valid_until();
            if Instant::now() >= until {
                return;
            }
            tokio::select! {
                changed = changes.changed() => {
                    // The sender lives as long as `self`; an error cannot
                    // happen, but would mean nobody can report loss any more.
                    if changed.is_err() {
                        return;
                    }
                }
                // Then look again: an extension may have moved the deadline.
                () = tokio::time::sleep_until(until.into()) => {}
            }
        }
    }

    /// Sets the lock's remaining TTL to `ttl` from now, if it is still ours:
    /// `Ok(false)` means it expired or another holder has it (nothing was
    /// changed, and [`is_held`](Self::is_held) is false from now on).
    ///
    /// Errors with [`Error::Config`](crate::Error::Config) for a `ttl` under 1 ms (nothing sent),
    /// or when Redis did not answer — the extension may or may not have
    /// happened then, and the guard's local validity is left as it was.
    ///
    /// ```no_run
    /// # async fn demo(guard: shardlimit::lock::LockGuard) -> shardlimit::Result<()> {
    /// use std::time::Duration;
    /// if !guard.extend(Duration::from_secs(30)).await? {
    ///     eprintln!("lost the lock");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn extend(&self, ttl: Duration) -> Result<bool> {
        let ttl_ms = millis("ttl", ttl)?;
        self.held.extend(ttl_ms).await
    }

    /// The lock's remaining TTL as the server sees it, or `None` if it is not
    /// ours any more.
    ///
    /// ```no_run
    /// # async fn demo(guard: shardlimit::lock::LockGuard) -> shardlimit::Result<()> {
    /// if let Some(left) = guard.remaining_ttl().await? {
    ///     println!("lock TTL {} s", left.as_secs());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn remaining_ttl(&self) -> Result<Option<Duration>> {
        let held = &self.held;
        let pttl: i64 = held
            .lock
            .core
            .eval(&LOCK_TTL, &held.keys, &held.token)
            .await?;
        Ok(u64::try_from(pttl).ok().map(Duration::from_millis))
    }

    /// How many times the watchdog has extended this lock.
    ///
    /// ```no_run
    /// # fn demo(guard: shardlimit::lock::LockGuard) {
    /// println!("watchdog extended the lock {} times", guard.watchdog_extensions());
    /// # }
    /// ```
    #[must_use]
    pub fn watchdog_extensions(&self) -> u64 {
        self.held.extensions.load(Ordering::Relaxed)
    }

    /// Releases the lock if it is still ours, in one compare-and-delete
    /// script: `Ok(false)` means it had expired or another holder has it, and
    /// that holder's lock was left alone. Stops the watchdog first.
    ///
    /// An error means Redis did not answer: the release may or may not have
    /// happened. It is then sent again in the background while Redis
    /// refuses it for a transient reason (a `CLUSTERDOWN` window, a failover,
    /// a broken connection), until it is answered or the lock would have
    /// expired anyway — so a lock is never left held by no one for longer
    /// than the outage.
    ///
    /// ```no_run
    /// # async fn demo(guard: shardlimit::lock::LockGuard) -> shardlimit::Result<()> {
    /// if !guard.release().await? {
    ///     eprintln!("the lock had expired before the work finished");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn release(mut self) -> Result<bool> {
        drop(self.stop.take());
        let held = &self.held;
        let lock = &held.lock;
        // How long a failed release is retried: the lock lasts at most its
        // TTL from the last extension, which may have asked for more.
        let left = held.valid_until().saturating_duration_since(Instant::now());
        let lifetime = lock.ttl.max(left);
        let released = lock
            .core
            .release(&LOCK_RELEASE, &held.keys, &held.token, lifetime)
            .await?;
        if !held.lost.send_replace(true) && released != 1 {
            crate::metrics::lock_lost(held.lock.core.name());
        }
        Ok(released == 1)
    }
}

impl fmt::Debug for LockGuard {
    // The token is the proof of ownership: keep it out of logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("lock", &self.held.lock.core.name())
            .field("resource", &self.held.resource_lossy())
            .field("fencing_token", &self.held.fence)
            .field("is_held", &self.is_held())
            .field("watchdog", &self.stop.is_some())
            .finish_non_exhaustive()
    }
}
