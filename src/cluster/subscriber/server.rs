//! Following a standalone server or Sentinel primary: its one channel.

use std::sync::{Arc, Weak};

use futures::StreamExt;

use super::{ChannelSink, SubscriberConfig, WATCH_INTERVAL, timed_out};
use crate::cluster::router::Router;

/// Follows the one channel of a standalone server or Sentinel primary,
/// until that server changes or the connection ends.
pub(super) async fn follow_server(
    sink: &Weak<dyn ChannelSink>,
    router: &Weak<Router>,
    config: &SubscriberConfig,
) -> redis::RedisResult<()> {
    let Some(node) = router.upgrade().and_then(|r| r.owner(0)) else {
        return Err(timed_out("no server serves the slots yet"));
    };
    let Some(channel) = sink.upgrade().map(|s| s.server_channel()) else {
        return Ok(());
    };
    let mut pubsub = tokio::time::timeout(config.connect_timeout, node.pubsub())
        .await
        .map_err(|_| timed_out("connecting the invalidation subscriber"))??;
    pubsub.subscribe(&channel).await?;
    match sink.upgrade() {
        Some(sink) => sink.gained_all(),
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
                if moved || sink.strong_count() == 0 {
                    return Ok(());
                }
                continue;
            }
        };
        let Some(message) = message else {
            return Err(timed_out("the invalidation subscriber's connection ended"));
        };
        match sink.upgrade() {
            Some(sink) => sink.message(message.get_payload_bytes()),
            None => return Ok(()),
        }
    }
}
