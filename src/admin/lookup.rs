//! An operator's lookup of a subject as typed: as it is, and by the keyed
//! digest credentials are limited under — so the raw API key finds its
//! limits although Redis never holds it.

use super::info::LimiterInfo;
use super::scanner::Scanner;
use crate::cluster::Topology;
use crate::error::Result;
use crate::keys::HashedSubject;

/// What [`Scanner::lookup`] found for what an operator typed: the
/// primitives of the subject as typed, and those of its keyed digest
/// ([`Cluster::subject_hasher`](crate::Cluster::subject_hasher)) — where a
/// credential, such as an API key the HTTP layer limits, lives.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Lookup {
    /// Every primitive of the subject as typed.
    pub typed: Vec<LimiterInfo>,
    /// The keyed digest of what was typed (`hmac:…`); `None` when what was
    /// typed is a hashed subject itself (see [`HashedSubject::is_hashed`]).
    pub digest: Option<HashedSubject>,
    /// Every primitive of [`digest`](Self::digest).
    pub hashed: Vec<LimiterInfo>,
    /// Whether the digest was keyed by a subject secret; else by the
    /// namespace's default key, which only finds what services without a
    /// secret hashed.
    pub with_secret: bool,
}

impl Lookup {
    /// Whether neither the subject as typed nor its digest has anything.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.typed.is_empty() && self.hashed.is_empty()
    }

    /// What keyed the digest, in words, as
    /// [`SubjectHasher::describe_key`](crate::keys::SubjectHasher::describe_key)
    /// says it: never the key.
    #[must_use]
    pub fn describe_key(&self) -> &'static str {
        crate::keys::hashed::describe_key(self.with_secret)
    }
}

impl Scanner {
    /// Every primitive of the subject an operator typed, and of its keyed
    /// digest: two [`subject`](Self::subject) reads, at once, on the two
    /// slots. What `shardlimit show` and the Limits page's find box do, so
    /// a credential is found by its raw key (hashed here with this
    /// cluster's subject secret, which must be the services').
    ///
    /// ```no_run
    /// # async fn demo(scanner: shardlimit::admin::Scanner) -> shardlimit::Result<()> {
    /// let found = scanner.lookup("sk-live-4eC39HqLyjWD").await?;
    /// if let Some(digest) = found.digest {
    ///     println!("{} primitives under the hashed subject {digest}", found.hashed.len());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn lookup(&self, typed: impl AsRef<[u8]>) -> Result<Lookup> {
        let topology = self.cluster().topology().await?;
        self.lookup_at(&topology, typed.as_ref()).await
    }

    /// [`lookup`](Self::lookup) with the topology the caller read.
    pub async fn lookup_at(&self, topology: &Topology, typed: &[u8]) -> Result<Lookup> {
        let hasher = self.cluster().subject_hasher();
        let digest = (!HashedSubject::is_hashed(typed)).then(|| hasher.hash(typed));
        let (typed, hashed) = match &digest {
            Some(digest) => {
                let (typed, hashed) = futures::join!(
                    self.subject_at(topology, typed),
                    self.subject_at(topology, digest.as_ref())
                );
                (typed?, hashed?)
            }
            None => (self.subject_at(topology, typed).await?, Vec::new()),
        };
        Ok(Lookup {
            typed,
            digest,
            hashed,
            with_secret: hasher.has_secret(),
        })
    }
}
