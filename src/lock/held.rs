//! What a lock guard and its watchdog share: the held lock's token, fence,
//! local validity and loss signal, and the extension both of them make.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::LockInner;
use crate::error::{Error, Result};
use crate::keys::KeySet;
use crate::scripts::LOCK_EXTEND;

/// What the guard and its watchdog share.
pub(super) struct Held {
    pub(super) lock: Arc<LockInner>,
    pub(super) keys: KeySet,
    pub(super) resource: Vec<u8>,
    pub(super) token: String,
    pub(super) fence: u64,
    /// Local, conservative end of validity: the send time of the last
    /// successful acquire/extend plus its TTL. A std mutex: held for a copy,
    /// never across an await.
    valid_until: Mutex<Instant>,
    /// Becomes true when Redis said the lock is not ours (any more).
    pub(super) lost: watch::Sender<bool>,
    pub(super) extensions: AtomicU64,
}

impl Held {
    pub(super) fn new(
        lock: Arc<LockInner>,
        keys: KeySet,
        resource: Vec<u8>,
        token: String,
        fence: u64,
        sent: Instant,
    ) -> Self {
        let valid_until = Mutex::new(sent + lock.ttl);
        Held {
            lock,
            keys,
            resource,
            token,
            fence,
            valid_until,
            lost: watch::Sender::new(false),
            extensions: AtomicU64::new(0),
        }
    }

    pub(super) fn is_held(&self) -> bool {
        !*self.lost.borrow() && Instant::now() < self.valid_until()
    }

    pub(super) fn valid_until(&self) -> Instant {
        *self
            .valid_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Extends to `ttl_ms` if still ours; marks the lock lost if not.
    pub(super) async fn extend(&self, ttl_ms: u64) -> Result<bool> {
        let lock = &self.lock;
        let sent = Instant::now();
        let fence_ttl_ms = lock.fence_ttl_ms.max(ttl_ms);
        let extended: i64 = lock
            .core
            .eval(
                &LOCK_EXTEND,
                &self.keys,
                (&self.token, ttl_ms, fence_ttl_ms),
            )
            .await?;
        match extended {
            1 => {
                let mut until = self
                    .valid_until
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                *until = sent + Duration::from_millis(ttl_ms);
                Ok(true)
            }
            0 => {
                if !self.lost.send_replace(true) {
                    crate::metrics::lock_lost(lock.core.name());
                }
                Ok(false)
            }
            other => Err(Error::UnexpectedReply {
                op: LOCK_EXTEND.name().to_owned().into(),
                detail: format!("{other}"),
            }),
        }
    }

    pub(super) fn resource_lossy(&self) -> String {
        String::from_utf8_lossy(&self.resource).into_owned()
    }
}
