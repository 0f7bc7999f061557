//! Connections of a node outside its lanes: for following invalidation
//! channels and for one-off health probes. Neither waits for nor marks the
//! node's believed-down state.

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ConnectionInfo, RedisError};

use super::Node;
use crate::cluster::socket::Socket;

impl Node {
    /// A connection of its own for following invalidation channels: RESP3,
    /// every push it receives (messages, subscription confirmations and
    /// drops, its end) given to `push`. Not one of the lanes: its stalls
    /// never delay a request and its failures never mark the node down.
    /// Dropping the [`Socket`] closes it.
    pub(crate) async fn open_subscriber(
        &self,
        push: impl redis::aio::AsyncPushSender,
    ) -> Result<(MultiplexedConnection, Socket), RedisError> {
        let settings = self
            .info
            .redis_settings()
            .clone()
            .set_protocol(redis::ProtocolVersion::RESP3);
        let info = self.info.clone().set_redis_settings(settings);
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.config.connect_timeout))
            .set_response_timeout(None)
            .set_push_sender(push);
        self.connect_detached(&info, config, self.config.connect_timeout)
            .await
    }

    /// A connection of its own for one fresh look at the node (a health
    /// probe), opened within `within`: not one of the lanes, so it neither
    /// waits for nor is refused by the node's believed-down state, and its
    /// failures never mark the node down. Dropping the [`Socket`] closes
    /// it.
    pub(crate) async fn open_probe(
        &self,
        within: Duration,
    ) -> Result<(MultiplexedConnection, Socket), RedisError> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(within))
            .set_response_timeout(None);
        self.connect_detached(&self.info, config, within).await
    }

    async fn connect_detached(
        &self,
        info: &ConnectionInfo,
        config: AsyncConnectionConfig,
        within: Duration,
    ) -> Result<(MultiplexedConnection, Socket), RedisError> {
        tokio::time::timeout(within, self.config.connector.open(info, config))
            .await
            .map_err(|_| {
                RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no connection within {within:?}"),
                ))
            })?
    }
}
