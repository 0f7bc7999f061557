//! The socket under a node's connection, opened here rather than inside
//! redis-rs so that two things redis-rs does not tell become known: whether
//! a request reached the socket, and whether the connection has ended.
//!
//! A `MultiplexedConnection` hands each request over a channel to a driver
//! task, which reads the socket before it writes each request and ends at
//! the first end of stream or I/O error. So a request that meets a
//! connection the server has already closed (its idle `timeout`, `CLIENT
//! KILL`, a proxy's idle cut) is never written — yet it fails with the same
//! "broken pipe" as a request written just before the connection broke,
//! which may have run (measured: right after a `CLIENT KILL`, 11 requests
//! in 200 were handed over before the driver saw the close). Hence:
//!
//! * the driver is spawned here and its end is recorded
//!   ([`Socket::has_ended`], [`Socket::ended`]);
//! * every byte the driver hands to the socket is counted
//!   ([`Socket::written`]) by the stream between them, which over TLS
//!   also holds each flush back for one turn of the scheduler so that
//!   requests handed over together go out in one write (see `counted`).
//!
//! A request that failed on a connection whose driver has ended, and whose
//! socket took no byte after the request was handed over, was never
//! written and never will be: it may be sent again on a fresh connection.
//!
//! Opening the socket here means making the TLS session here too, with the
//! settings redis-rs would use: the CA of [`ClusterBuilder::tls_ca_pem`]
//! (else the operating system's trust store), the client certificate if
//! one is given, and the server's name checked against its certificate —
//! but not its rustls crypto provider, which redis-rs takes from (or
//! installs as) the process default: see [`crypto_provider`]. So every
//! TLS session of the crate starts here, the deny cache's pub/sub
//! connections included ([`Connector::pubsub`]).
//!
//! [`ClusterBuilder::tls_ca_pem`]: crate::cluster::ClusterBuilder::tls_ca_pem

mod counted;

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use redis::aio::{MultiplexedConnection, PubSub};
use redis::{
    AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, ErrorKind, RedisError, RedisResult,
    TlsCertificates,
};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::TcpStream;
use tokio::time::Instant;

use self::counted::{Counted, Holding, Stream};
use crate::error::{Error, Result};

/// Opens node sockets: plain TCP, or TLS with the deployment's settings.
#[derive(Clone, Default)]
pub(crate) struct Connector {
    /// Built once, not per connection: reading the OS trust store is slow.
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl Connector {
    /// The connector for `seeds` (all TLS or all plain, as the builder
    /// checked): TLS trusting `certificates`' CA, else the operating
    /// system's trust store, and presenting its client certificate if any.
    pub(crate) fn new(
        seeds: &[ConnectionInfo],
        certificates: Option<&TlsCertificates>,
    ) -> Result<Self> {
        let mut tls = false;
        for seed in seeds {
            if let ConnectionAddr::TcpTls { insecure, .. } = seed.addr() {
                if *insecure {
                    return Err(tls_config(
                        "#insecure turns off certificate checks, which shardlimit does not do; \
                         trust the server's CA with tls_ca_pem or tls_ca_file instead"
                            .to_owned(),
                    ));
                }
                tls = true;
            }
        }
        if !tls {
            return Ok(Connector::default());
        }
        Ok(Connector {
            tls: Some(Arc::new(client_config(certificates)?)),
        })
    }

    /// A connection to `info`'s address, set up (`AUTH`, `HELLO`, …) by
    /// redis-rs with `config`, and its socket.
    pub(crate) async fn open(
        &self,
        info: &ConnectionInfo,
        config: AsyncConnectionConfig,
    ) -> RedisResult<(MultiplexedConnection, Socket)> {
        let stream = self.stream(info).await?;
        let shared = Shared::new();
        let holding = match info.addr() {
            ConnectionAddr::TcpTls { .. } => Holding::TurnThenReply,
            _ => Holding::Never,
        };
        let counted = Counted::new(Box::into_pin(stream), Arc::clone(&shared), holding);
        let (conn, driver) =
            MultiplexedConnection::new_with_config(info.redis_settings(), counted, config).await?;
        let ends = Ends(Arc::clone(&shared));
        let driver = tokio::spawn(async move {
            // Set however the driver goes: done, panicked or aborted.
            let _ends = ends;
            driver.await;
        });
        Ok((
            conn,
            Socket {
                shared,
                driver: driver.abort_handle(),
            },
        ))
    }

    /// A RESP2 pub/sub connection to `info`'s address, set up by redis-rs.
    /// Not `Client::get_async_pubsub`: redis-rs would make the TLS session
    /// itself, with a rustls config built by `ClientConfig::builder()`,
    /// which installs a process-wide provider when none is (see
    /// [`crypto_provider`]).
    pub(crate) async fn pubsub(&self, info: &ConnectionInfo) -> RedisResult<PubSub> {
        let stream = self.stream(info).await?;
        PubSub::new(info.redis_settings(), Box::into_pin(stream)).await
    }

    /// The socket to `info`'s address: TCP, with a TLS session over it for
    /// a `rediss://` node.
    async fn stream(&self, info: &ConnectionInfo) -> RedisResult<Box<dyn Stream>> {
        let (host, port, tls) = match info.addr() {
            ConnectionAddr::Tcp(host, port) => (host, *port, None),
            ConnectionAddr::TcpTls { host, port, .. } => {
                let tls = self.tls.clone().ok_or_else(|| {
                    RedisError::from((
                        ErrorKind::InvalidClientConfig,
                        "a rediss:// node, but no TLS settings",
                    ))
                })?;
                (host, *port, Some(tls))
            }
            other => {
                return Err(RedisError::from((
                    ErrorKind::InvalidClientConfig,
                    "only TCP and TLS addresses can reach a node",
                    other.to_string(),
                )));
            }
        };
        let tcp = connect_tcp(host, port).await?;
        // The crate sets no TCP option but this one, which redis-rs would
        // apply from the same settings.
        tcp.set_nodelay(info.tcp_settings().nodelay())?;
        Ok(match tls {
            None => Box::new(tcp),
            Some(config) => {
                let name = ServerName::try_from(host.as_str())
                    .map_err(|err| {
                        RedisError::from((
                            ErrorKind::InvalidClientConfig,
                            "not a valid TLS server name",
                            format!("{host}: {err}"),
                        ))
                    })?
                    .to_owned();
                let session = tokio_rustls::TlsConnector::from(config)
                    .connect(name, tcp)
                    .await?;
                Box::new(session)
            }
        })
    }
}

/// A TCP connection to `host:port`: every address it resolves to is tried
/// at once and the first to accept wins, as redis-rs does.
async fn connect_tcp(host: &str, port: u16) -> io::Result<TcpStream> {
    let attempts: Vec<_> = tokio::net::lookup_host((host, port))
        .await?
        .map(|addr| Box::pin(TcpStream::connect(addr)))
        .collect();
    if attempts.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("{host} resolves to no address"),
        ));
    }
    Ok(futures::future::select_ok(attempts).await?.0)
}

fn client_config(certificates: Option<&TlsCertificates>) -> Result<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    match certificates.and_then(|c| c.root_cert.as_deref()) {
        Some(pem) => {
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|err| tls_config(format!("the CA's PEM: {err}")))?;
                roots
                    .add(cert)
                    .map_err(|err| tls_config(format!("the CA's certificate: {err}")))?;
            }
        }
        None => {
            let native = rustls_native_certs::load_native_certs();
            // As redis-rs: a trust store that cannot be read in full is an
            // error, not a silently smaller set of trusted CAs.
            if let Some(err) = native.errors.first() {
                return Err(tls_config(format!(
                    "the operating system's trust store: {err}"
                )));
            }
            roots.add_parsable_certificates(native.certs);
        }
    }
    let builder = rustls::ClientConfig::builder_with_provider(crypto_provider())
        .with_safe_default_protocol_versions()
        .map_err(|err| tls_config(format!("the rustls crypto provider: {err}")))?
        .with_root_certificates(roots);
    match certificates.and_then(|c| c.client_tls.as_ref()) {
        None => Ok(builder.with_no_client_auth()),
        Some(client) => {
            let chain = CertificateDer::pem_slice_iter(&client.client_cert)
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|err| tls_config(format!("the client certificate's PEM: {err}")))?;
            let key = PrivateKeyDer::from_pem_slice(&client.client_key)
                .map_err(|err| tls_config(format!("the client key's PEM: {err}")))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|err| tls_config(format!("the client certificate: {err}")))
        }
    }
}

/// The rustls crypto provider of our TLS sessions: the process default if
/// the application installed one (its choice: aws-lc-rs, FIPS, …), else
/// *ring*, given to this config alone.
///
/// Never installed as the process default: that is the application's to
/// do, once, and `install_default` refuses a second provider — an
/// application that installed its own after a library had installed one
/// would fail (or panic on its `expect`). Nor `ClientConfig::builder()`,
/// which installs the provider named by rustls' crate features when none
/// is installed, and panics when the features name two (an application
/// with aws-lc-rs beside our *ring*). Read when the connector is built
/// (`ClusterBuilder::build`), so a default installed later serves the
/// handles built after it.
fn crypto_provider() -> Arc<CryptoProvider> {
    match CryptoProvider::get_default() {
        Some(installed) => Arc::clone(installed),
        None => Arc::new(ring_provider()),
    }
}

/// rustls' *ring* provider. rustls 0.23.48 deprecates this function (*ring*
/// has no post-quantum key exchange) without a replacement for *ring*; it
/// stays our fallback because it builds with no C toolchain, and an
/// application that wants post-quantum key exchange installs aws-lc-rs as
/// the process default, which is then what we use.
#[allow(deprecated)]
fn ring_provider() -> CryptoProvider {
    rustls::crypto::ring::default_provider()
}

fn tls_config(reason: String) -> Error {
    Error::Config {
        field: "tls",
        reason,
    }
}

/// What the code holding a connection knows of its socket. Dropping it
/// stops the connection's driver (and closes the socket).
pub(crate) struct Socket {
    shared: Arc<Shared>,
    driver: tokio::task::AbortHandle,
}

/// Shared by the [`Socket`], the counting stream and the driver task.
struct Shared {
    /// Bytes the socket (the TLS session, for `rediss://`) accepted.
    written: AtomicU64,
    /// Set when the driver ends: nothing is written after that. The flag
    /// is what the hot path reads; the channel is for waiting.
    ended_flag: AtomicBool,
    ended: tokio::sync::watch::Sender<bool>,
    /// When the connection was last used, in ms after `origin`.
    used_ms: AtomicU64,
    origin: Instant,
}

impl Shared {
    /// The state of a connection just opened: nothing written, not ended.
    fn new() -> Arc<Self> {
        Arc::new(Shared {
            written: AtomicU64::new(0),
            ended_flag: AtomicBool::new(false),
            ended: tokio::sync::watch::Sender::new(false),
            used_ms: AtomicU64::new(0),
            origin: Instant::now(),
        })
    }
}

impl Socket {
    /// Bytes written so far. After [`ended`](Self::ended) returned, every
    /// write is counted here.
    pub(crate) fn written(&self) -> u64 {
        self.shared.written.load(Ordering::Relaxed)
    }

    /// Whether the connection has ended (its driver stopped): nothing sent
    /// on it now is written.
    pub(crate) fn has_ended(&self) -> bool {
        self.shared.ended_flag.load(Ordering::Acquire)
    }

    /// Waits until the connection has ended.
    pub(crate) async fn ended(&self) {
        // The sender lives as long as `self`, so this only returns once set.
        let _ = self.shared.ended.subscribe().wait_for(|ended| *ended).await;
    }

    /// Records a use now (a request handed over or answered).
    pub(crate) fn touch(&self) {
        let ms = u64::try_from(self.shared.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.shared.used_ms.store(ms, Ordering::Relaxed);
    }

    /// Time since the last [`touch`](Self::touch) (or the connect).
    pub(crate) fn idle(&self) -> Duration {
        let used = Duration::from_millis(self.shared.used_ms.load(Ordering::Relaxed));
        self.shared.origin.elapsed().saturating_sub(used)
    }
}

impl Drop for Socket {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// Records the end of a connection's driver when dropped, after the last
/// write it made.
struct Ends(Arc<Shared>);

impl Drop for Ends {
    fn drop(&mut self) {
        self.0.ended_flag.store(true, Ordering::Release);
        self.0.ended.send_replace(true);
    }
}

#[cfg(test)]
mod tests;
