//! One master's subscription connection: what it reports to the follower,
//! its `SSUBSCRIBE`s and its health check.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use redis::aio::MultiplexedConnection;
use redis::{PushInfo, PushKind, Value};
use tokio::sync::mpsc;

use super::{PING_INTERVAL, PING_TIMEOUT, timed_out};
use crate::cluster::socket::Socket;

/// How long one `SSUBSCRIBE` may take to be confirmed.
pub(super) const SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Subscriptions sent at once on one connection.
const SUBSCRIBE_CONCURRENCY: usize = 64;

/// What the connections and their tasks report to the follower.
pub(super) enum Event {
    Push(u64, PushInfo),
    Opened(u64, redis::RedisResult<(MultiplexedConnection, Socket)>),
    /// The connection failed a health check, or answered out of turn.
    Dead(u64),
    Subscribed(u64, u16, redis::RedisResult<()>),
}

/// One node's subscription connection.
pub(super) struct Conn {
    pub(super) id: u64,
    /// `None` while it opens.
    pub(super) open: Option<(MultiplexedConnection, Arc<Socket>)>,
    pub(super) pinger: Option<tokio::task::AbortHandle>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let Some(pinger) = self.pinger.take() {
            pinger.abort();
        }
    }
}

/// Subscribes `channels` (slot, channel) on connection `id`, reporting
/// each confirmation or failure. A reply that is not the confirmation of
/// this very channel (a drop the connection took for a reply) makes the
/// connection untrusted.
pub(super) async fn subscribe(
    conn: MultiplexedConnection,
    id: u64,
    channels: Vec<(u16, String)>,
    events: mpsc::UnboundedSender<Event>,
) {
    futures::stream::iter(channels)
        .for_each_concurrent(SUBSCRIBE_CONCURRENCY, |(slot, channel)| {
            let mut conn = conn.clone();
            let events = events.clone();
            async move {
                let reply = tokio::time::timeout(
                    SUBSCRIBE_TIMEOUT,
                    redis::cmd("SSUBSCRIBE")
                        .arg(&channel)
                        .query_async::<Value>(&mut conn),
                )
                .await;
                let outcome = match reply {
                    Err(_) => Err(timed_out("a deny-cache subscription was not confirmed")),
                    Ok(Err(err)) => Err(err),
                    Ok(Ok(Value::Push {
                        kind: PushKind::SSubscribe,
                        data,
                    })) if matches!(data.first(), Some(Value::BulkString(c)) if *c == channel.as_bytes()) => {
                        Ok(())
                    }
                    Ok(Ok(_)) => {
                        let _ = events.send(Event::Dead(id));
                        Err(timed_out("a deny-cache subscription got another reply"))
                    }
                };
                let _ = events.send(Event::Subscribed(id, slot, outcome));
            }
        })
        .await;
}

/// Pings the connection every [`PING_INTERVAL`]; reports it dead when it
/// ends, or a `PING` is not answered `PONG` within [`PING_TIMEOUT`] (a hung
/// server closes nothing).
pub(super) async fn health_check(
    mut conn: MultiplexedConnection,
    socket: Arc<Socket>,
    id: u64,
    events: mpsc::UnboundedSender<Event>,
) {
    loop {
        tokio::select! {
            () = socket.ended() => break,
            () = tokio::time::sleep(PING_INTERVAL) => {}
        }
        let reply = tokio::time::timeout(
            PING_TIMEOUT,
            redis::cmd("PING").query_async::<Value>(&mut conn),
        )
        .await;
        if !matches!(reply, Ok(Ok(Value::SimpleString(ref pong))) if pong == "PONG") {
            break;
        }
    }
    let _ = events.send(Event::Dead(id));
}
