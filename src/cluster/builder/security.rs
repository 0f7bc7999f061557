//! The credential and TLS setters of [`ClusterBuilder`]: how every node is
//! authenticated and reached.

use std::path::PathBuf;

use super::ClusterBuilder;
use crate::cluster::access::{PasswordSource, Pem, Secret};

impl ClusterBuilder {
    /// The ACL username every node is authenticated as, overriding any in
    /// the URLs. Default: the URL's, else none (Redis' `default` user).
    ///
    /// ```no_run
    /// # async fn demo(password: String) -> shardlimit::Result<()> {
    /// let cluster = shardlimit::Cluster::builder(["rediss://10.0.0.5:6379"])
    ///     .username("shardlimit")
    ///     .password(password)
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn username(mut self, username: impl Into<String>) -> Self {
        self.security.username = Some(username.into());
        self
    }

    /// The password every node is authenticated with, overriding any in the
    /// URLs (and any [`password_file`](Self::password_file)). Default: the
    /// URL's, else none. Never shown: `Debug`, errors and logs print `***`.
    ///
    /// ```
    /// let builder = shardlimit::Cluster::builder(["redis://10.0.0.5:6379"])
    ///     .username("shardlimit")
    ///     .password("s3cret");
    /// assert!(!format!("{builder:?}").contains("s3cret"));
    /// ```
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.security.password = Some(PasswordSource::Value(Secret(password.into())));
        self
    }

    /// Reads the password from `path` in [`build`](Self::build) (one
    /// trailing newline is ignored; an empty file is an error), overriding
    /// any in the URLs (and any [`password`](Self::password)). Default:
    /// none. For secrets mounted as files (Kubernetes, systemd
    /// credentials).
    ///
    /// ```no_run
    /// # async fn demo() -> shardlimit::Result<()> {
    /// let cluster = shardlimit::Cluster::builder(["redis://10.0.0.5:6379"])
    ///     .username("shardlimit")
    ///     .password_file("/run/secrets/redis-password")
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn password_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.security.password = Some(PasswordSource::File(path.into()));
        self
    }

    /// Trust only the CA certificates in this PEM data for `rediss://`
    /// nodes. Default: the operating system's trust store. The server's
    /// name (the host of each node's address, DNS name or IP) is always
    /// checked against its certificate. Needs `rediss://` URLs.
    ///
    /// ```no_run
    /// # async fn demo(ca_pem: Vec<u8>) -> shardlimit::Result<()> {
    /// let cluster = shardlimit::Cluster::builder(["rediss://10.0.0.5:6379"])
    ///     .tls_ca_pem(ca_pem)
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn tls_ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.security.tls_ca = Some(Pem::Bytes(pem.into()));
        self
    }

    /// Like [`tls_ca_pem`](Self::tls_ca_pem), with the PEM read from `path`
    /// in [`build`](Self::build). Default: the operating system's trust
    /// store.
    ///
    /// ```no_run
    /// # async fn demo() -> shardlimit::Result<()> {
    /// let cluster = shardlimit::Cluster::builder(["rediss://127.0.0.1:7000"])
    ///     .tls_ca_file("cluster-compose/.state/tls/ca.crt")
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn tls_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.security.tls_ca = Some(Pem::File(path.into()));
        self
    }

    /// A client certificate (chain) and its private key, both PEM, for
    /// mutual TLS. Default: none (no client certificate is presented).
    /// Needs `rediss://` URLs. The key is never shown by `Debug`.
    ///
    /// ```no_run
    /// # async fn demo(cert: Vec<u8>, key: Vec<u8>) -> shardlimit::Result<()> {
    /// let cluster = shardlimit::Cluster::builder(["rediss://10.0.0.5:6379"])
    ///     .tls_client_cert_pem(cert, key)
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn tls_client_cert_pem(
        mut self,
        cert: impl Into<Vec<u8>>,
        key: impl Into<Vec<u8>>,
    ) -> Self {
        self.security.tls_cert = Some(Pem::Bytes(cert.into()));
        self.security.tls_key = Some(Pem::Bytes(key.into()));
        self
    }

    /// Like [`tls_client_cert_pem`](Self::tls_client_cert_pem), with both
    /// read from files in [`build`](Self::build). Default: none.
    ///
    /// ```no_run
    /// # async fn demo() -> shardlimit::Result<()> {
    /// let cluster = shardlimit::Cluster::builder(["rediss://10.0.0.5:6379"])
    ///     .tls_client_cert_files("/etc/shardlimit/client.crt", "/etc/shardlimit/client.key")
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn tls_client_cert_files(
        mut self,
        cert: impl Into<PathBuf>,
        key: impl Into<PathBuf>,
    ) -> Self {
        self.security.tls_cert = Some(Pem::File(cert.into()));
        self.security.tls_key = Some(Pem::File(key.into()));
        self
    }
}
