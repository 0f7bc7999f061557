//! The background task that follows the invalidation channels of
//! [`Invalidations`] for the deny caches of one [`Cluster`](super::Cluster)
//! handle (and its clones). Started by the first deny cache that checks;
//! ends when the handle is gone (it holds only `Weak` references).
//!
//! * A cluster: a redis-rs cluster connection speaking RESP3, subscribed
//!   with `SSUBSCRIBE` to every slot's channel. A node's connection lost
//!   (a failover) starts it over on a fresh connection, reported lost until
//!   every channel is followed again; a channel the server drops (its slot
//!   moved) is subscribed again through the new owner.
//!   Checks never go through this connection: a stall here delays
//!   invalidations, never a decision.
//! * A standalone server or Sentinel primary: one `SUBSCRIBE` to the
//!   server's channel, on the node serving the slots now; when that node
//!   changes (a Sentinel failover) or the connection ends, it subscribes
//!   again on the new one.

use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::StreamExt;
use redis::{ConnectionInfo, PushKind, Value};
use tokio::sync::mpsc;

use super::invalidation::Invalidations;
use super::router::Router;
use crate::keys::SLOT_COUNT;

/// How often a standalone subscriber checks that it follows the server
/// serving the slots now, and the task checks that its handle is alive.
const WATCH_INTERVAL: Duration = Duration::from_millis(500);
/// Subscriptions sent at once while subscribing to every slot's channel.
const SUBSCRIBE_CONCURRENCY: usize = 64;
/// The wait before subscribing again after a failure.
const RETRY_AFTER: Duration = Duration::from_millis(500);

/// What the subscriber needs to reach a cluster by itself.
#[derive(Clone)]
pub(crate) struct SubscriberConfig {
    pub(crate) seeds: Vec<ConnectionInfo>,
    pub(crate) certificates: Option<redis::TlsCertificates>,
    pub(crate) connect_timeout: Duration,
}

/// Starts following the channels, once per hub, if a runtime is running.
pub(crate) fn start(hub: &Arc<Invalidations>, router: &Arc<Router>, config: &SubscriberConfig) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    if !hub.claim_start() {
        return;
    }
    let (hub, router, config) = (Arc::downgrade(hub), Arc::downgrade(router), config.clone());
    runtime.spawn(async move {
        // A subscription that keeps failing (a missing ACL permission, say)
        // leaves the deny caches off: said, at most every few seconds.
        let warn = crate::warn::WarnLimiter::new();
        loop {
            let standalone = match router.upgrade() {
                Some(router) => router.is_standalone(),
                None => return,
            };
            let ended = if standalone {
                follow_server(&hub, &router).await
            } else {
                follow_cluster(&hub, &config).await
            };
            match hub.upgrade() {
                Some(hub) => hub.lost(),
                None => return,
            }
            if let Err(err) = ended {
                if let Some(failures) = warn.should_warn() {
                    tracing::warn!(
                        error = %err,
                        failures_since_last_warning = failures,
                        "shardlimit: deny caches cannot follow invalidations, so they cache \
                         nothing until they can; retrying"
                    );
                }
            }
            tokio::time::sleep(RETRY_AFTER).await;
        }
    });
}

/// Follows a cluster's slot channels until the hub is gone (`Ok`) or the
/// subscription cannot be made (`Err`).
async fn follow_cluster(
    hub: &Weak<Invalidations>,
    config: &SubscriberConfig,
) -> redis::RedisResult<()> {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut builder = redis::cluster::ClusterClientBuilder::new(config.seeds.clone())
        .use_protocol(redis::ProtocolVersion::RESP3)
        .connection_timeout(config.connect_timeout)
        .push_sender(tx);
    if let Some(certificates) = &config.certificates {
        builder = builder.certs(certificates.clone());
    }
    let client = builder.build()?;
    let started = std::time::Instant::now();
    let connection = tokio::time::timeout(config.connect_timeout, client.get_async_connection())
        .await
        .map_err(|_| timed_out("connecting the invalidation subscriber"))??;
    let channels: Vec<String> = match hub.upgrade() {
        Some(hub) => (0..SLOT_COUNT).map(|s| hub.slot_channel(s)).collect(),
        None => return Ok(()),
    };
    let subscribed = futures::stream::iter(channels)
        .map(|channel| {
            let mut connection = connection.clone();
            async move { connection.ssubscribe(channel).await }
        })
        .buffer_unordered(SUBSCRIBE_CONCURRENCY)
        .collect::<Vec<_>>()
        .await;
    subscribed
        .into_iter()
        .collect::<redis::RedisResult<Vec<()>>>()?;
    tracing::debug!(
        channels = SLOT_COUNT,
        took = ?started.elapsed(),
        "shardlimit: deny-cache invalidations followed"
    );
    match hub.upgrade() {
        Some(hub) => hub.gained(),
        None => return Ok(()),
    }
    loop {
        let push = tokio::select! {
            push = rx.recv() => push,
            () = tokio::time::sleep(WATCH_INTERVAL) => {
                if hub.strong_count() == 0 {
                    return Ok(());
                }
                continue;
            }
        };
        let Some(push) = push else {
            return Err(timed_out("the invalidation subscriber's connection ended"));
        };
        let Some(hub) = hub.upgrade() else {
            return Ok(());
        };
        match push.kind {
            PushKind::SMessage => {
                if let Some(Value::BulkString(message)) = push.data.get(1) {
                    hub.key_changed(message);
                }
            }
            // A node's connection closed (a failover, say): redis-rs would
            // resubscribe its channels, but gives no sign of when that is
            // done, so start over with a fresh connection and know.
            PushKind::Disconnection => {
                return Err(timed_out("a node's invalidation subscription was lost"));
            }
            // The server dropped a channel (its slot moved): subscribe
            // again, through the new owner; live again once that is done.
            PushKind::SUnsubscribe => {
                hub.lost();
                if let Some(Value::BulkString(channel)) = push.data.first() {
                    let mut connection = connection.clone();
                    let (channel, hub) = (channel.clone(), Arc::downgrade(&hub));
                    tokio::spawn(async move {
                        tokio::time::sleep(RETRY_AFTER).await;
                        if connection.ssubscribe(channel).await.is_ok()
                            && let Some(hub) = hub.upgrade()
                        {
                            hub.gained();
                        }
                    });
                }
            }
            _ => {}
        }
    }
}

/// Follows the one channel of a standalone server or Sentinel primary,
/// until that server changes or the connection ends.
async fn follow_server(hub: &Weak<Invalidations>, router: &Weak<Router>) -> redis::RedisResult<()> {
    let Some(node) = router.upgrade().and_then(|r| r.owner(0)) else {
        return Err(timed_out("no server serves the slots yet"));
    };
    let Some(channel) = hub.upgrade().map(|h| h.server_channel()) else {
        return Ok(());
    };
    let mut pubsub = tokio::time::timeout(WATCH_INTERVAL * 4, node.client().get_async_pubsub())
        .await
        .map_err(|_| timed_out("connecting the invalidation subscriber"))??;
    pubsub.subscribe(&channel).await?;
    match hub.upgrade() {
        Some(hub) => hub.gained(),
        None => return Ok(()),
    }
    let mut messages = pubsub.into_on_message();
    loop {
        let message = tokio::select! {
            message = messages.next() => message,
            () = tokio::time::sleep(WATCH_INTERVAL) => {
                let moved = router
                    .upgrade()
                    .and_then(|r| r.owner(0))
                    .is_none_or(|now| !Arc::ptr_eq(&now, &node));
                if moved || hub.strong_count() == 0 {
                    return Ok(());
                }
                continue;
            }
        };
        let Some(message) = message else {
            return Err(timed_out("the invalidation subscriber's connection ended"));
        };
        match hub.upgrade() {
            Some(hub) => hub.key_changed(message.get_payload_bytes()),
            None => return Ok(()),
        }
    }
}

fn timed_out(what: &'static str) -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(std::io::ErrorKind::TimedOut, what))
}
