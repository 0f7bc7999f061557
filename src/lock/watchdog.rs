//! The watchdog: extends a held lock every TTL/3 while its guard lives.

use std::sync::Weak;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::held::Held;

/// Extends the lock behind `held` to its full TTL every TTL/3 until
///
/// * `stop` fires or its sender is dropped (the guard was released or
///   dropped) — checked while sleeping, so the task ends at once;
/// * the guard's state is gone (`held` no longer upgrades);
/// * an extension finds the lock gone or taken (then `Held::extend` has
///   already marked it lost).
///
/// A failed extension (timeout, connection) is retried after TTL/12: the
/// builder requires TTL ≥ 3 × command timeout, so there is time for a retry
/// before the lock expires. If extensions keep failing, the guard's local
/// validity runs out and it reports the lock lost; the watchdog keeps trying
/// regardless, since a later success proves the lock was ours throughout
/// (the token is still in the key).
///
/// The strong reference is taken only for one extension, so the task never
/// keeps the lock alive on its own.
pub(super) async fn run(held: Weak<Held>, mut stop: oneshot::Receiver<()>) {
    let (ttl, ttl_ms, name) = match held.upgrade() {
        Some(h) => (h.lock.ttl, h.lock.ttl_ms, h.lock.core.name().to_owned()),
        None => return,
    };
    let period = ttl / 3;
    let retry = (ttl / 12).max(Duration::from_millis(1));
    let mut next = Instant::now() + period;
    loop {
        tokio::select! {
            // Stop wins a tie: a released guard must not be extended.
            biased;
            _ = &mut stop => return,
            () = tokio::time::sleep_until(next) => {}
        }
        let Some(held) = held.upgrade() else { return };
        match held.extend(ttl_ms).await {
            Ok(true) => {
                held.extensions.fetch_add(1, Ordering::Relaxed);
                next = Instant::now() + period;
            }
            Ok(false) => {
                // The resource names a subject (possibly personal data):
                // only ever logged at `trace`, in an event of its own.
                tracing::warn!(lock = %name,
                    "shardlimit: watchdog found the lock expired or taken; it is lost");
                tracing::trace!(lock = %name, resource = %held.resource_lossy(),
                    "shardlimit: the lost lock's resource");
                return;
            }
            Err(err) => {
                tracing::warn!(lock = %name, error = %err, still_valid = held.is_held(),
                    "shardlimit: watchdog could not extend the lock; retrying");
                tracing::trace!(lock = %name, resource = %held.resource_lossy(),
                    "shardlimit: the resource of the lock the watchdog could not extend");
                next = Instant::now() + retry;
            }
        }
    }
}
