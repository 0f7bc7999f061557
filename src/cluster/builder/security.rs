//! The credential and TLS setters of [`ClusterBuilder`]: how every node is
//! authenticated and reached; and the subject secret, the key of the
//! digests credential subjects are limited under.

use std::path::PathBuf;

use super::ClusterBuilder;
use crate::cluster::access::{Pem, Secret, SecretSource, read_secret_file};
use crate::error::Result;
use crate::keys::SubjectHasher;

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
        self.security.password = Some(SecretSource::Value(Secret(password.into())));
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
        self.security.password = Some(SecretSource::File(path.into()));
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

    /// The subject secret: the key of the digests credential subjects (API
    /// keys, bearer tokens) are limited under, so that a reader of Redis
    /// cannot find a key by hashing guesses (see
    /// [`SubjectHasher`](crate::keys::SubjectHasher)). At least
    /// [`MIN_SUBJECT_SECRET_LEN`](crate::keys::MIN_SUBJECT_SECRET_LEN)
    /// bytes, checked by [`build`](Self::build); e.g. `openssl rand -hex 32`.
    /// Overrides any [`subject_secret_file`](Self::subject_secret_file).
    /// Never shown: `Debug` prints `***`.
    ///
    /// Default: none — the namespace's default key, which is **not a
    /// secret**: raw keys still stay out of Redis, but a short or guessable
    /// one can be found from its digest. Every process of a service, and
    /// the CLI and Limits page that look its subjects up
    /// (`SHARDLIMIT_SUBJECT_SECRET`), must be given the same secret.
    ///
    /// ```
    /// let builder = shardlimit::Cluster::builder(["redis://10.0.0.5:6379"])
    ///     .subject_secret("7d9f0c2b5e1a48f3a6c0d2e4b8f1a3c5");
    /// assert!(!format!("{builder:?}").contains("7d9f0c2b"));
    /// ```
    pub fn subject_secret(mut self, secret: impl Into<String>) -> Self {
        self.subject_secret = Some(SecretSource::Value(Secret(secret.into())));
        self
    }

    /// Reads the [subject secret](Self::subject_secret) from `path` in
    /// [`build`](Self::build) (one trailing newline is ignored; an empty
    /// file is an error), overriding any
    /// [`subject_secret`](Self::subject_secret). Default: none.
    ///
    /// ```no_run
    /// # async fn demo() -> shardlimit::Result<()> {
    /// let cluster = shardlimit::Cluster::builder(["redis://10.0.0.5:6379"])
    ///     .subject_secret_file("/run/secrets/shardlimit-subject-secret")
    ///     .build()
    ///     .await?;
    /// assert!(cluster.subject_hasher().has_secret());
    /// # Ok(()) }
    /// ```
    pub fn subject_secret_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.subject_secret = Some(SecretSource::File(path.into()));
        self
    }

    /// The hasher of credential subjects: the subject secret's, else the
    /// namespace's default. Reads the secret's file.
    pub(super) fn subject_hasher(&self) -> Result<SubjectHasher> {
        match &self.subject_secret {
            None => Ok(SubjectHasher::for_namespace(&self.namespace)),
            Some(SecretSource::Value(secret)) => SubjectHasher::with_secret(&secret.0),
            Some(SecretSource::File(path)) => {
                SubjectHasher::with_secret(read_secret_file("subject_secret_file", path)?)
            }
        }
    }
}
