//! TTL-preserving counters: read-and-reset (a billing counter) without the
//! GETSET leak that makes a key immortal. The public documentation lives on [`Counter`].

use std::sync::Arc;
use std::time::Duration;

use redis::Value;

use crate::backoff::millis;
use crate::cluster::{Cluster, Transaction, TxCommand};
use crate::error::{Error, Result};
use crate::keys::{KeyId, KeySet, Kind};
use crate::primitive::Core;
use crate::scripts::{COUNTER_DRAIN, COUNTER_GET};

/// A named integer counter per subject that lives while it is used and
/// expires `idle_ttl` after the last [`add`](Self::add).
///
/// ```no_run
/// # async fn demo(cluster: shardlimit::Cluster) -> shardlimit::Result<()> {
/// use std::time::Duration;
/// use shardlimit::Counter;
///
/// let billable = Counter::builder(&cluster, "billing")
///     .idle_ttl(Duration::from_secs(900))
///     .build()?;
/// billable.add("session:9", 30).await?;          // the session's worker
/// if let Some(seconds) = billable.drain("session:9").await? {
///     println!("bill {seconds} s");             // the collector
/// }
/// # Ok(()) }
/// ```
///
/// # Only `add` touches the TTL
///
/// * [`add`](Self::add) is `INCRBY` + `PEXPIRE idle_ttl` in one MULTI/EXEC:
///   the value and the TTL always move together.
/// * [`drain`](Self::drain) is one script: `GET`, and only if the key exists,
///   `SET 0 KEEPTTL`. It never changes the TTL (a `GETSET` would remove it,
///   and a session that stops right after a collection would leave an
///   immortal key), and it never creates a missing key. It runs atomically
///   against concurrent adds: every unit added is drained exactly once or is
///   still in the counter.
/// * [`get`](Self::get) reads. So a session that stops being added to — a
///   "zombie" — ends with its key gone `idle_ttl` after its last add, drained
///   or not.
///
/// # At most once
///
/// Each operation runs at most once (see
/// [Timeouts and ambiguous outcomes](crate::Cluster#timeouts-and-ambiguous-outcomes)):
/// after a timeout, an `add` may or may not have counted, and a `drain` may
/// have reset the counter without its value reaching you. Counters have no
/// fail-open mode: a billing figure must not be guessed.
///
/// # When Redis does not answer
///
/// Every error comes back to the caller ([`Error::is_transient`] says
/// whether it should pass), counted as `errors` under kind `counter` in
/// [`Cluster::stats`](crate::Cluster::stats) and in the `metrics`
/// counters, and logged by the crate as a rate-limited `warn` (the first
/// at once, then at most one per 10 s per counter with the count of what
/// it hid) — so the service need not log each failure itself. What a
/// service usually does: keep the request going (the work was done) and
/// add the units to a local tally that the next successful `add` folds
/// in:
///
/// ```no_run
/// # async fn demo(billable: shardlimit::Counter, pending: std::sync::atomic::AtomicI64) {
/// use std::sync::atomic::Ordering;
/// let units = 30 + pending.swap(0, Ordering::Relaxed);
/// if let Err(err) = billable.add("session:9", units).await {
///     pending.fetch_add(units, Ordering::Relaxed); // retried with the next add
///     if !err.is_transient() {
///         eprintln!("billing counter misconfigured: {err}"); // a bug: say so
///     }
/// }
/// # }
/// ```
///
/// # Finding the subjects to drain
///
/// A collector that drains every session's counter needs the subjects,
/// and they live on every master (each subject is its own hash slot). The
/// [`Scanner`](crate::admin::Scanner) walks them: `SCAN MATCH` on each
/// master, never `KEYS`, at least once per counter that lives through the
/// walk. Its cost grows with the keys under the namespace (every
/// primitive, not only these counters): fine every minute for thousands
/// to a few million keys; beyond, keep the subjects you will drain in a
/// list of your own (e.g. a per-shard set your workers add to). The
/// stream needs `futures::StreamExt`:
///
/// ```no_run
/// # async fn demo(cluster: shardlimit::Cluster, billable: shardlimit::Counter) -> shardlimit::Result<()> {
/// use futures::StreamExt;
/// use shardlimit::admin::{ScanEvent, Scanner};
///
/// let mut counters = Box::pin(Scanner::new(&cluster).kind("counter").name("billing").scan());
/// while let Some(event) = counters.next().await {
///     if let ScanEvent::Limiter(info) = event {
///         if let Some(seconds) = billable.drain(&info.subject).await? {
///             println!("bill {seconds} s to {}", String::from_utf8_lossy(&info.subject));
///         }
///     }
/// }
/// # Ok(()) }
/// ```
///
/// [`Cluster::stats`](crate::Cluster::stats) counts, under kind `counter`,
/// each successful operation as `allowed` and each error as `errors`.
///
/// Needs Redis 7.0 or later, like the rest of the crate (`KEEPTTL`).
#[derive(Clone, Debug)]
pub struct Counter {
    inner: Arc<CounterInner>,
}

#[derive(Debug)]
struct CounterInner {
    core: Core,
    idle_ms: u64,
}

impl Counter {
    /// A builder for the counter named `name` (`[A-Za-z0-9_.-]{1,64}`).
    ///
    /// ```no_run
    /// # fn demo(cluster: shardlimit::Cluster) -> shardlimit::Result<()> {
    /// use std::time::Duration;
    /// let c = shardlimit::Counter::builder(&cluster, "billing")
    ///     .idle_ttl(Duration::from_secs(900))
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn builder(cluster: &Cluster, name: impl Into<String>) -> CounterBuilder {
        CounterBuilder {
            cluster: cluster.clone(),
            name: name.into(),
            idle_ttl: Duration::from_secs(900),
        }
    }

    /// The counter's name.
    ///
    /// ```no_run
    /// # fn demo(billable: shardlimit::Counter) {
    /// assert_eq!(billable.name(), "billing");
    /// # }
    /// ```
    #[must_use]
    pub fn name(&self) -> &str {
        self.inner.core.name()
    }

    /// Adds `n` (may be negative) to the subject's counter, creating it at 0
    /// first if needed, sets its TTL to the idle TTL, and returns the new
    /// value. One MULTI/EXEC: `INCRBY`, `PEXPIRE`.
    ///
    /// Errors when Redis did not answer (the add may or may not have
    /// happened), or when the key holds something other than an integer.
    ///
    /// ```no_run
    /// # async fn demo(billable: shardlimit::Counter) -> shardlimit::Result<()> {
    /// let total = billable.add("session:9", 30).await?;
    /// # Ok(()) }
    /// ```
    pub async fn add(&self, subject: impl AsRef<[u8]>, n: i64) -> Result<i64> {
        let inner = &self.inner;
        let keys = self.keys(subject.as_ref())?;
        let tx = Transaction::new()
            .command(TxCommand::new("INCRBY").key(0).arg(n))
            .command(TxCommand::new("PEXPIRE").key(0).arg(inner.idle_ms));
        let outcome: Result<(i64, i64)> = inner.core.cluster().transaction(&keys, &tx).await;
        self.count(outcome).map(|(total, _)| total)
    }

    /// Reads the subject's counter and resets it to 0 in one script, keeping
    /// its TTL: `Some(value)` read, or `None` when there is no counter — then
    /// nothing is written.
    ///
    /// Errors when Redis did not answer (the counter may have been reset
    /// without the value reaching you), or when the key holds something
    /// other than an integer (then it is left untouched).
    ///
    /// ```no_run
    /// # async fn demo(billable: shardlimit::Counter) -> shardlimit::Result<()> {
    /// match billable.drain("session:9").await? {
    ///     Some(seconds) => println!("bill {seconds} s"),
    ///     None => println!("session gone: nothing to bill"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn drain(&self, subject: impl AsRef<[u8]>) -> Result<Option<i64>> {
        let keys = self.keys(subject.as_ref())?;
        let outcome: Result<Option<i64>> = self
            .inner
            .core
            .cluster()
            .eval(&COUNTER_DRAIN, &keys, crate::scripts::NO_ARGS)
            .await;
        self.count(outcome)
    }

    /// The subject's counter, or `None` when there is none.
    ///
    /// ```no_run
    /// # async fn demo(billable: shardlimit::Counter) -> shardlimit::Result<()> {
    /// let pending = billable.get("session:9").await?.unwrap_or(0);
    /// # Ok(()) }
    /// ```
    pub async fn get(&self, subject: impl AsRef<[u8]>) -> Result<Option<i64>> {
        Ok(self.get_with_ttl(subject).await?.map(|(value, _)| value))
    }

    /// The subject's counter and its remaining TTL, or `None` when there is
    /// none.
    ///
    /// A counter without a TTL — a leak only something outside this crate
    /// can cause — is reported as
    /// [`Error::UnexpectedReply`] rather than hidden.
    ///
    /// ```no_run
    /// # async fn demo(billable: shardlimit::Counter) -> shardlimit::Result<()> {
    /// if let Some((value, ttl)) = billable.get_with_ttl("session:9").await? {
    ///     println!("{value} pending, expires in {} s", ttl.as_secs());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn get_with_ttl(&self, subject: impl AsRef<[u8]>) -> Result<Option<(i64, Duration)>> {
        let keys = self.keys(subject.as_ref())?;
        let outcome: Result<Value> = self
            .inner
            .core
            .cluster()
            .eval(&COUNTER_GET, &keys, crate::scripts::NO_ARGS)
            .await;
        let parsed = outcome.and_then(|reply| parse_get(self.name(), &keys, reply));
        self.count(parsed)
    }

    fn keys(&self, subject: &[u8]) -> Result<KeySet> {
        self.inner.core.key_set(subject, [])
    }

    /// Counts an operation: done as allowed, failed as an error (counters
    /// have no failure policy: a count is never guessed).
    fn count<T>(&self, outcome: Result<T>) -> Result<T> {
        let outcomes = self.inner.core.outcomes();
        match &outcome {
            Ok(_) => outcomes.allowed(),
            Err(err) => {
                outcomes.error();
                // Per call the caller has the error; the log gets one line
                // per few seconds with a count, not one per failed request.
                if let Some(count) = outcomes.should_warn() {
                    tracing::warn!(kind = "counter", name = %self.name(), error = %err,
                        failed_since_last_warning = count,
                        "shardlimit: counter operation failed; the caller has the error");
                }
            }
        }
        outcome
    }
}

/// Parses `[]` or `[value, pttl]`.
fn parse_get(name: &str, keys: &KeySet, reply: Value) -> Result<Option<(i64, Duration)>> {
    let bad = |detail: String| Error::UnexpectedReply {
        op: COUNTER_GET.name().to_owned().into(),
        detail,
    };
    let (value, pttl): (i64, i64) = match reply {
        Value::Array(items) if items.is_empty() => return Ok(None),
        other => redis::from_redis_value(other).map_err(|err| bad(err.to_string()))?,
    };
    match u64::try_from(pttl) {
        Ok(ms) => Ok(Some((value, Duration::from_millis(ms)))),
        // Named by its counter name and slot, not its key: the key holds the
        // subject, which is only ever logged at `trace` (errors end up in
        // logs). `shardlimit audit` lists the key itself.
        Err(_) => Err(bad(format!(
            "a counter {name} in slot {slot} has no TTL (PTTL {pttl}): something outside shardlimit wrote it",
            slot = keys.slot()
        ))),
    }
}

/// Configures a [`Counter`]. Every setter states its default;
/// [`build`](Self::build) validates everything and contacts nothing.
///
/// ```no_run
/// # fn demo(cluster: shardlimit::Cluster) -> shardlimit::Result<()> {
/// use std::time::Duration;
/// let billable = shardlimit::Counter::builder(&cluster, "billing")
///     .idle_ttl(Duration::from_secs(900)) // default 15 min
///     .build()?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
#[must_use]
pub struct CounterBuilder {
    cluster: Cluster,
    name: String,
    idle_ttl: Duration,
}

impl CounterBuilder {
    /// How long a counter lives after its last [`add`](Counter::add).
    /// Default 15 minutes (a typical session TTL). At least 1 ms (whole
    /// milliseconds).
    pub fn idle_ttl(mut self, ttl: Duration) -> Self {
        self.idle_ttl = ttl;
        self
    }

    /// Validates the configuration. Nothing is sent to Redis.
    ///
    /// Errors with [`Error::InvalidIdent`] for a bad name and
    /// [`Error::Config`] for a bad idle TTL.
    pub fn build(self) -> Result<Counter> {
        let id = KeyId::new(Kind::Counter.as_str(), &self.name)?;
        let idle_ms = millis("idle_ttl", self.idle_ttl)?;
        Ok(Counter {
            inner: Arc::new(CounterInner {
                core: Core::new(self.cluster, id),
                idle_ms,
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> KeySet {
        KeySet::from_keys(["sl:{session:9}:counter:c"]).unwrap()
    }

    #[test]
    fn get_reply_parses_value_and_ttl() {
        assert_eq!(parse_get("c", &keys(), Value::Array(vec![])).unwrap(), None);
        let reply = Value::Array(vec![Value::BulkString(b"-42".to_vec()), Value::Int(1500)]);
        assert_eq!(
            parse_get("c", &keys(), reply).unwrap(),
            Some((-42, Duration::from_millis(1500)))
        );
        // i64::MAX survives: the script returns the value as a string.
        let big = Value::Array(vec![
            Value::BulkString(i64::MAX.to_string().into_bytes()),
            Value::Int(1),
        ]);
        assert_eq!(parse_get("c", &keys(), big).unwrap().unwrap().0, i64::MAX);
    }

    #[test]
    fn a_counter_without_ttl_is_an_error_not_a_value() {
        let reply = Value::Array(vec![Value::BulkString(b"7".to_vec()), Value::Int(-1)]);
        let err = parse_get("c", &keys(), reply).unwrap_err();
        assert!(err.to_string().contains("has no TTL"), "{err}");
        // The subject is only ever logged at `trace`; errors get logged.
        assert!(!format!("{err} {err:?}").contains("session:9"), "{err:?}");
    }
}
