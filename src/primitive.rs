//! The core every primitive holds — its cluster handle, key id and outcome
//! counts — and the waiting acquire loop that locks and leases share.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{FromRedisValue, ToRedisArgs};

use crate::backoff::Backoff;
use crate::cluster::{Cluster, Undo};
use crate::error::{Error, Result};
use crate::keys::{KeyId, KeySet};
use crate::outcomes::{Outcomes, Registry};
use crate::scripts::Script;

/// What a primitive (a limiter, lock, lease or counter) is made of: the
/// cluster it talks to, the key id of its main key (kind and name) and its
/// outcome counts, registered once when it is built.
#[derive(Debug)]
pub(crate) struct Core {
    cluster: Cluster,
    id: KeyId,
    outcomes: Arc<Outcomes>,
}

impl Core {
    /// The core of the primitive `id` on `cluster`; primitives of the same
    /// kind and name share their outcome counts (they share their keys too).
    pub(crate) fn new(cluster: Cluster, id: KeyId) -> Self {
        let outcomes = Registry::of(&cluster).outcomes(id.kind(), id.name());
        Core {
            cluster,
            id,
            outcomes,
        }
    }

    pub(crate) fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    pub(crate) fn id(&self) -> &KeyId {
        &self.id
    }

    pub(crate) fn name(&self) -> &str {
        self.id.name()
    }

    pub(crate) fn outcomes(&self) -> &Outcomes {
        &self.outcomes
    }

    /// The keys of `subject`: the main key, then one per id of `more` (all
    /// in the subject's slot). A bad subject is counted as an error.
    pub(crate) fn key_set<'a>(
        &'a self,
        subject: &[u8],
        more: impl IntoIterator<Item = &'a KeyId>,
    ) -> Result<KeySet> {
        let ids = std::iter::once(&self.id).chain(more);
        self.cluster
            .keys()
            .key_set(subject, ids)
            .inspect_err(|_| self.outcomes.error())
    }

    /// Runs `script` on `keys`, counting an error. For operations on what a
    /// caller already holds (extend, release, read), which are never
    /// bypassed: a failure policy applies to decisions only.
    pub(crate) async fn eval<T: FromRedisValue>(
        &self,
        script: &Script,
        keys: &KeySet,
        args: impl ToRedisArgs,
    ) -> Result<T> {
        self.cluster
            .eval(script, keys, args)
            .await
            .inspect_err(|_| self.outcomes.error())
    }
    /// Gives back what a caller holds — `release`, a compare-and-delete by
    /// the holder's token, on `keys` with `args` — counting an error.
    ///
    /// When it fails the release may not have happened (a timeout, a
    /// broken connection, a `CLUSTERDOWN` window longer than the command
    /// timeout): the same release is then sent again in the background,
    /// retried while the error is transient, for at most `lifetime` (after
    /// that what it releases has expired anyway). The caller still gets the
    /// error. Sending it twice is harmless: a second one finds nothing of
    /// this holder's, and another holder's entry is left alone.
    pub(crate) async fn release<A: ToRedisArgs + Copy>(
        &self,
        release: &'static Script,
        keys: &KeySet,
        args: A,
        lifetime: Duration,
    ) -> Result<i64> {
        self.eval(release, keys, args).await.inspect_err(|_| {
            self.cluster.undo(Undo::new(release, keys, args, lifetime));
        })
    }
}

/// One attempt of a waiting acquire.
pub(crate) enum Attempt<T> {
    Granted(T),
    /// Taken elsewhere; the server said it frees up in this long at the
    /// latest (a lock's remaining TTL, the soonest lease expiry).
    Busy(Duration),
}

/// The validated backoff between the attempts of a waiting acquire: the
/// `n`th wait is random in `[d/2, d]`, `d = min(max, min × 2^n)`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RetryBackoff {
    min: Duration,
    max: Duration,
}

impl RetryBackoff {
    /// 10 ms doubling up to 250 ms: locks' and leases' default.
    pub(crate) const DEFAULT: RetryBackoff = RetryBackoff {
        min: Duration::from_millis(10),
        max: Duration::from_millis(250),
    };

    /// As a builder's setter took it; [`checked`](Self::checked) by its
    /// `build`.
    pub(crate) fn new(min: Duration, max: Duration) -> Self {
        RetryBackoff { min, max }
    }

    /// Refuses a zero `min` or a `min` over `max` as an [`Error::Config`]
    /// on `retry_backoff`.
    pub(crate) fn checked(self) -> Result<Self> {
        let RetryBackoff { min, max } = self;
        if min.is_zero() || min > max {
            return Err(Error::Config {
                field: "retry_backoff",
                reason: format!("min {min:?} must be non-zero and at most max {max:?}"),
            });
        }
        Ok(self)
    }
}

/// Tries `attempt` until it is granted or `wait` has passed, sleeping
/// between attempts with `retry` — never longer than the server's hint,
/// nor past the deadline, where one last attempt is made. `wait` zero is a
/// single attempt.
///
/// Counts a grant as allowed and giving up as denied; an error ends the
/// wait at once and is returned as is, for the caller's failure policy
/// (which counts it).
pub(crate) async fn acquire<T, Fut>(
    outcomes: &Outcomes,
    retry: RetryBackoff,
    wait: Duration,
    mut attempt: impl FnMut() -> Fut,
) -> Result<Option<T>>
where
    Fut: Future<Output = Result<Attempt<T>>>,
{
    let start = Instant::now();
    let mut backoff = Backoff::new(retry.min, retry.max);
    loop {
        let hint = match attempt().await? {
            Attempt::Granted(granted) => {
                outcomes.allowed();
                return Ok(Some(granted));
            }
            Attempt::Busy(hint) => hint,
        };
        let Some(sleep) = backoff.before_retry(start, wait, hint) else {
            outcomes.denied();
            return Ok(None);
        };
        tokio::time::sleep(sleep).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcomes::Registry;

    #[test]
    fn retry_backoff_refuses_zero_and_inverted_bounds() {
        let ms = Duration::from_millis;
        assert!(RetryBackoff::new(ms(1), ms(1)).checked().is_ok());
        assert!(RetryBackoff::DEFAULT.checked().is_ok());
        for (min, max) in [(ms(0), ms(10)), (ms(20), ms(10))] {
            assert!(matches!(
                RetryBackoff::new(min, max).checked(),
                Err(Error::Config {
                    field: "retry_backoff",
                    ..
                })
            ));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn acquire_retries_until_granted_and_counts_once() {
        let registry = Registry::default();
        let outcomes = registry.outcomes("lock", "t");
        let mut tries = 0;
        let got = acquire(
            &outcomes,
            RetryBackoff::DEFAULT,
            Duration::from_secs(5),
            || {
                tries += 1;
                let n = tries;
                async move {
                    Ok(if n < 3 {
                        Attempt::Busy(Duration::from_millis(50))
                    } else {
                        Attempt::Granted(n)
                    })
                }
            },
        )
        .await;
        assert_eq!(got.unwrap(), Some(3));
        let snap = registry.snapshot();
        assert_eq!((snap[0].allowed, snap[0].denied), (1, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_zero_wait_is_one_attempt_and_an_error_ends_the_wait() {
        let registry = Registry::default();
        let outcomes = registry.outcomes("lease", "t");
        let mut tries = 0;
        let busy = acquire(&outcomes, RetryBackoff::DEFAULT, Duration::ZERO, || {
            tries += 1;
            async { Ok(Attempt::<()>::Busy(Duration::from_secs(1))) }
        })
        .await;
        assert_eq!(busy.unwrap(), None);
        assert_eq!(tries, 1);
        let failed = acquire(
            &outcomes,
            RetryBackoff::DEFAULT,
            Duration::from_secs(9),
            || async { Err::<Attempt<()>, _>(Error::EmptySubject) },
        )
        .await;
        assert!(matches!(failed, Err(Error::EmptySubject)));
        let snap = registry.snapshot();
        // Errors are the caller's to count, with its failure policy.
        assert_eq!((snap[0].allowed, snap[0].denied, snap[0].errors), (0, 1, 0));
    }
}
