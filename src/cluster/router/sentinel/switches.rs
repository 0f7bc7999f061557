//! Hearing the sentinels switch the primary: `+switch-master` on every
//! sentinel, and the rule that keeps a refresh from going back.
//!
//! A failover the client sees as a fault (the primary died or hung) is
//! followed by the refresh. A switch it does not see is the dangerous
//! one: after `SENTINEL FAILOVER`, or any failover whose old primary is
//! still alive, the sentinels reconfigure the old primary as a replica
//! only when they next look at it, about ten seconds later. Until then it
//! still says `master` and takes every write sent to it — writes it drops
//! when it resyncs from the new primary (counts, admissions, lock grants:
//! a lock held by no one). Measured before this listener, 3 s after a
//! `SENTINEL FAILOVER` the client still ran about 10,000 writes a second
//! on the demoted primary (`tests/deployments/sentinel/switchover.rs`).
//!
//! So every sentinel among the seeds is subscribed to `+switch-master`
//! (one connection each, as Sentinel's client guidelines describe), and a
//! switch of this service is followed at once: the refresh is woken, its
//! backoff forgotten. A sentinel that has not yet heard of the switch
//! still names the old primary; while the primary the switch promoted says
//! `master` to `ROLE`, that answer is not believed (`is_demoted`), so a
//! refresh cannot install the old primary again in the window where both
//! say `master`.

use std::sync::{PoisonError, Weak};
use std::time::Duration;

use futures::StreamExt;
use redis::ConnectionInfo;

use super::super::{Router, host_port};
use crate::backoff::Backoff;

/// The channel the sentinels announce a new primary on.
const CHANNEL: &str = "+switch-master";

/// How often a listener with nothing to hear checks that its router is
/// still in use.
const ALIVE_CHECK: Duration = Duration::from_secs(1);

/// The last switch heard: `from` demoted, `to` promoted (`host:port`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(in crate::cluster::router) struct Switch {
    pub(in crate::cluster::router) from: (String, u16),
    pub(in crate::cluster::router) to: (String, u16),
}

impl Router {
    /// Starts one `+switch-master` listener per sentinel among the seeds;
    /// each ends soon after the router is dropped.
    pub(crate) fn listen_for_switches(&self) {
        for seed in &self.seeds {
            tokio::spawn(listen(self.this.clone(), seed.clone()));
        }
    }

    /// A switch of this service was heard: remember it, and refresh now.
    fn switched(&self, switch: Switch) {
        tracing::info!(
            from = %format!("{}:{}", switch.from.0, switch.from.1),
            to = %format!("{}:{}", switch.to.0, switch.to.1),
            "shardlimit: the sentinels switched the primary"
        );
        *self.switch.lock().unwrap_or_else(PoisonError::into_inner) = Some(switch);
        self.refresh_now();
    }

    /// The last switch heard, if any.
    pub(super) fn last_switch(&self) -> Option<Switch> {
        self.switch
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// `<service> <old host> <old port> <new host> <new port>`, for `service`
/// only.
fn parse_switch(payload: &[u8], service: &str) -> Option<Switch> {
    let text = std::str::from_utf8(payload).ok()?;
    let mut words = text.split_ascii_whitespace();
    if words.next()? != service {
        return None;
    }
    let mut addr = || -> Option<(String, u16)> {
        let host = words.next()?.to_owned();
        Some((host, words.next()?.parse().ok()?))
    };
    let from = addr()?;
    let to = addr()?;
    Some(Switch { from, to })
}

/// One sentinel's listener: subscribes, follows what it hears, and
/// subscribes again (backing off) whenever the connection ends — then
/// asks for a refresh, since a switch may have come meanwhile.
async fn listen(this: Weak<Router>, seed: ConnectionInfo) {
    let mut backoff: Option<Backoff> = None;
    // A refusal is logged as a warning once, then at debug level.
    let mut warned = false;
    loop {
        let Some((node, service, connect_timeout, min, max)) = this.upgrade().and_then(|r| {
            let (host, port) = host_port(seed.addr())?;
            let node = r.node(&host, port).ok()?;
            let node_config = &r.config.node;
            Some((
                node,
                r.service.clone().unwrap_or_default(),
                node_config.connect_timeout,
                node_config.reconnect_min,
                node_config.reconnect_max,
            ))
        }) else {
            return;
        };
        let subscribed = tokio::time::timeout(connect_timeout, async {
            let mut pubsub = node.pubsub().await?;
            pubsub.subscribe(CHANNEL).await?;
            Ok::<_, redis::RedisError>(pubsub)
        })
        .await;
        let pubsub = match subscribed {
            Ok(Ok(pubsub)) => pubsub,
            failed => {
                match failed {
                    // Refused (an ACL without `+subscribe`, a password):
                    // switches go unheard until that is fixed. Said once;
                    // asked again with the backoff, in case it is.
                    Ok(Err(err)) if !crate::error::is_transient_redis(&err) && !warned => {
                        warned = true;
                        tracing::warn!(sentinel = node.addr(), error = %err,
                            "shardlimit: the sentinel refused the subscription to its \
                             switches; a switch of the primary is followed only on a fault");
                    }
                    Ok(Err(err)) => tracing::debug!(sentinel = node.addr(), error = %err,
                        "shardlimit: subscribing to the sentinel's switches failed"),
                    _ => {}
                }
                let wait = backoff
                    .get_or_insert_with(|| Backoff::new(min, max))
                    .next(max);
                tokio::time::sleep(wait).await;
                continue;
            }
        };
        if backoff.take().is_some()
            && let Some(router) = this.upgrade()
        {
            // Subscribed again after a gap in which a switch may have
            // been missed.
            router.request_refresh();
        }
        let mut messages = pubsub.into_on_message();
        loop {
            let message = tokio::select! {
                message = messages.next() => message,
                () = tokio::time::sleep(ALIVE_CHECK) => {
                    if this.strong_count() == 0 {
                        return;
                    }
                    continue;
                }
            };
            let Some(message) = message else { break };
            let Some(router) = this.upgrade() else { return };
            if let Some(switch) = parse_switch(message.get_payload_bytes(), &service) {
                router.switched(switch);
            }
        }
        // The connection ended: subscribe again after a first wait.
        let wait = backoff.insert(Backoff::new(min, max)).next(max);
        tokio::time::sleep(wait).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_switch_names_the_old_and_new_primary_of_one_service() {
        assert_eq!(
            parse_switch(b"shardlimit 127.0.0.1 6400 127.0.0.1 6401", "shardlimit"),
            Some(Switch {
                from: ("127.0.0.1".to_owned(), 6400),
                to: ("127.0.0.1".to_owned(), 6401),
            })
        );
        assert_eq!(
            parse_switch(b"other 127.0.0.1 6400 127.0.0.1 6401", "shardlimit"),
            None,
            "another service's switch"
        );
        assert_eq!(
            parse_switch(b"shardlimit 127.0.0.1 6400 127.0.0.1", "shardlimit"),
            None
        );
        assert_eq!(
            parse_switch(b"shardlimit 127.0.0.1 port 127.0.0.1 6401", "shardlimit"),
            None
        );
    }
}
