//! Access to the nodes: seed URLs to connection settings — credentials
//! given apart from the URLs, TLS (a custom CA, a client certificate) — and
//! how a node is shown without its password.
//!
//! A password must never be printed. Everything that shows a node — the
//! builder's `Debug`, [`Error::Config`], [`Error::Connect`], the router's
//! and the CLI's messages — goes through [`redact_url`] or [`show`], which
//! print `redis://user:***@host:port`, even for a URL that does not parse
//! (a password's unencoded `/`, `?` or `#` is refused before parsing, since
//! a parser would take the password's head for the host and port). The
//! password itself lives only in [`Secret`] (whose `Debug` is `***`) and in
//! redis-rs' `ConnectionInfo` (whose `Debug` redacts it too).
//!
//! The settings of the *first* seed become the template for every node the
//! topology reveals (see `router`), so the CA, client certificate and
//! credentials applied here reach all of them.

use std::fmt;
use std::path::PathBuf;

use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo};

use crate::error::{Error, Result};

/// A password or a subject secret: shown as `***` by `Debug`.
#[derive(Clone)]
pub(crate) struct Secret(pub(crate) String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// The secret in the file at `path` (a password, a subject secret): its
/// text without one trailing newline; an empty one is an error of `field`.
pub(crate) fn read_secret_file(field: &'static str, path: &std::path::Path) -> Result<String> {
    let text = std::fs::read_to_string(path).map_err(|err| Error::Config {
        field,
        reason: format!("cannot read {}: {err}", path.display()),
    })?;
    let text = text.strip_suffix('\n').unwrap_or(&text);
    let text = text.strip_suffix('\r').unwrap_or(text);
    if text.is_empty() {
        return Err(Error::Config {
            field,
            reason: format!("{} is empty", path.display()),
        });
    }
    Ok(text.to_owned())
}

/// PEM data, given inline or as a file read by `build()`.
#[derive(Clone)]
pub(crate) enum Pem {
    Bytes(Vec<u8>),
    File(PathBuf),
}

impl Pem {
    fn read(&self, field: &'static str) -> Result<Vec<u8>> {
        match self {
            Pem::Bytes(bytes) => Ok(bytes.clone()),
            Pem::File(path) => std::fs::read(path).map_err(|err| Error::Config {
                field,
                reason: format!("cannot read {}: {err}", path.display()),
            }),
        }
    }
}

impl fmt::Debug for Pem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pem::Bytes(bytes) => write!(f, "<{} bytes of PEM>", bytes.len()),
            Pem::File(path) => write!(f, "{}", path.display()),
        }
    }
}

/// Where a secret (the password, the subject secret) comes from.
#[derive(Clone, Debug)]
pub(crate) enum SecretSource {
    Value(Secret),
    /// A file holding it; one trailing newline is ignored.
    File(PathBuf),
}

/// Everything a node connection needs besides its address.
#[derive(Clone, Debug, Default)]
pub(crate) struct Security {
    pub(crate) username: Option<String>,
    pub(crate) password: Option<SecretSource>,
    pub(crate) tls_ca: Option<Pem>,
    pub(crate) tls_cert: Option<Pem>,
    /// The client key; its `Debug` shows only where it comes from.
    pub(crate) tls_key: Option<Pem>,
}

impl Security {
    fn uses_tls_files(&self) -> bool {
        self.tls_ca.is_some() || self.tls_cert.is_some() || self.tls_key.is_some()
    }

    fn password(&self) -> Result<Option<String>> {
        match &self.password {
            None => Ok(None),
            Some(SecretSource::Value(secret)) => Ok(Some(secret.0.clone())),
            Some(SecretSource::File(path)) => read_secret_file("password_file", path).map(Some),
        }
    }

    /// Parses `nodes` and applies the credentials and TLS settings to each.
    /// Reads the PEM and password files; contacts nothing.
    pub(crate) fn apply(&self, nodes: &[String]) -> Result<Vec<ConnectionInfo>> {
        let password = self.password()?;
        let certificates = self.certificates()?;
        let mut seeds = Vec::with_capacity(nodes.len());
        for node in nodes {
            if split_userinfo(node)
                .1
                .is_some_and(|userinfo| userinfo.contains(URL_DELIMITERS))
            {
                // A URL parser would end the host at that character and
                // read the rest of the password as a port or a path: a
                // connection to the wrong place, or the password in an
                // error. Nothing a Redis URL means has an `@` there.
                return Err(config(
                    "nodes",
                    format!(
                        "{}: a '/', '?' or '#' before the last '@': percent-encode it in a user name or password (%2F, %3F, %23), or give the password apart from the URL",
                        redact_url(node)
                    ),
                ));
            }
            let mut info = node
                .as_str()
                .into_connection_info()
                .map_err(|err| config("nodes", format!("{}: {err}", redact_url(node))))?;
            let tls = matches!(info.addr(), ConnectionAddr::TcpTls { .. });
            if !matches!(
                info.addr(),
                ConnectionAddr::Tcp(..) | ConnectionAddr::TcpTls { .. }
            ) {
                return Err(config(
                    "nodes",
                    format!(
                        "{}: only redis:// and rediss:// URLs can reach a cluster",
                        redact_url(node)
                    ),
                ));
            }
            if let Some(first) = seeds.first() {
                if is_tls(first) != tls {
                    return Err(config(
                        "nodes",
                        "mixing redis:// and rediss:// seeds: a cluster is all TLS or all plain",
                    ));
                }
            }
            if !tls && self.uses_tls_files() {
                return Err(config(
                    "tls",
                    format!(
                        "a TLS CA or client certificate is set, but {} is not a rediss:// URL",
                        redact_url(node)
                    ),
                ));
            }
            let mut redis = info.redis_settings().clone();
            if let Some(user) = &self.username {
                redis = redis.set_username(user);
            }
            if let Some(password) = &password {
                redis = redis.set_password(password);
            }
            info = info.set_redis_settings(redis);
            if let Some(certificates) = &certificates {
                info = redis::Client::build_with_tls(info, certificates.clone())
                    .map_err(|err| config("tls", err.to_string()))?
                    .get_connection_info()
                    .clone();
            }
            seeds.push(info);
        }
        Ok(seeds)
    }

    pub(crate) fn certificates(&self) -> Result<Option<redis::TlsCertificates>> {
        if !self.uses_tls_files() {
            return Ok(None);
        }
        let client_tls = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
                client_cert: cert.read("tls_client_cert")?,
                client_key: key.read("tls_client_cert")?,
            }),
            (None, None) => None,
            _ => {
                return Err(config(
                    "tls_client_cert",
                    "a client certificate needs both the certificate and its key",
                ));
            }
        };
        let root_cert = self
            .tls_ca
            .as_ref()
            .map(|ca| ca.read("tls_ca"))
            .transpose()?;
        if root_cert.as_ref().is_some_and(|pem| !looks_like_pem(pem)) {
            return Err(config("tls_ca", "not a PEM certificate (no BEGIN line)"));
        }
        Ok(Some(redis::TlsCertificates {
            client_tls,
            root_cert,
        }))
    }
}

fn looks_like_pem(bytes: &[u8]) -> bool {
    bytes.windows(11).any(|w| w == b"-----BEGIN ")
}

fn is_tls(info: &ConnectionInfo) -> bool {
    matches!(info.addr(), ConnectionAddr::TcpTls { .. })
}

/// A node as shown to people: `redis[s]://[user[:***]@]host:port`.
pub(crate) fn show(info: &ConnectionInfo) -> String {
    let (scheme, host, port) = match info.addr() {
        ConnectionAddr::TcpTls { host, port, .. } => ("rediss", host.as_str(), *port),
        ConnectionAddr::Tcp(host, port) => ("redis", host.as_str(), *port),
        other => return other.to_string(),
    };
    let redis = info.redis_settings();
    let user = match (redis.username(), redis.password()) {
        (Some(user), Some(_)) => format!("{user}:***@"),
        (None, Some(_)) => ":***@".to_owned(),
        (Some(user), None) => format!("{user}@"),
        (None, None) => String::new(),
    };
    format!("{scheme}://{user}{host}:{port}")
}

/// The characters that end a URL's authority: in a password they must be
/// percent-encoded.
const URL_DELIMITERS: [char; 3] = ['/', '?', '#'];

/// `url` as (scheme with its `://`, or "" without one; the userinfo, if
/// any; the rest), for text that may not parse. The userinfo ends at the
/// *last* `@`: a password may hold an unencoded `@`, `/`, `?` or `#`, and
/// everything before that `@` may be part of it.
fn split_userinfo(url: &str) -> (&str, Option<&str>, &str) {
    let (scheme, rest) = match url.find("://") {
        Some(at)
            if url[..at]
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c)) =>
        {
            url.split_at(at + 3)
        }
        _ => ("", url),
    };
    match rest.rsplit_once('@') {
        Some((userinfo, host)) => (scheme, Some(userinfo), host),
        None => (scheme, None, rest),
    }
}

/// `url` with any password replaced by `***`, for text that may not even
/// parse: `scheme://user:pass@host` becomes `scheme://user:***@host`
/// whatever the password holds; a user name that is not one (a `/`, `?`
/// or `#` in it) and text without a scheme lose everything before the
/// last `@`. Text without an `@` has no userinfo and is shown as it is.
pub(crate) fn redact_url(url: &str) -> String {
    let (scheme, Some(userinfo), host) = split_userinfo(url) else {
        return url.to_owned();
    };
    let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
    if scheme.is_empty() || user.contains(URL_DELIMITERS) {
        return format!("{scheme}***@{host}");
    }
    if user.len() == userinfo.len() {
        format!("{scheme}{user}@{host}")
    } else {
        format!("{scheme}{user}:***@{host}")
    }
}

fn config(field: &'static str, reason: impl Into<String>) -> Error {
    Error::Config {
        field,
        reason: reason.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_url_hides_passwords_in_any_shape() {
        for (url, shown) in [
            ("redis://app:s3cret@h:1", "redis://app:***@h:1"),
            ("redis://:s3cret@h:1/0", "redis://:***@h:1/0"),
            ("rediss://app:s3:cr@et@h:1", "rediss://app:***@h:1"),
            ("redis://app@h:1", "redis://app@h:1"),
            ("redis://h:1", "redis://h:1"),
            ("app:s3cret@h:1", "***@h:1"),
            (
                "redis://app:s3cret@h:notaport",
                "redis://app:***@h:notaport",
            ),
            // Unencoded delimiters in the password: the URL does not
            // parse, or parses as something else.
            ("redis://app:s3/cr3t@h:1", "redis://app:***@h:1"),
            ("redis://app:s3?cr3t@h:1/0", "redis://app:***@h:1/0"),
            ("redis://app:6379#s3cret@h:1", "redis://app:***@h:1"),
            ("redis://app:s3@/?#cr@t@h:1", "redis://app:***@h:1"),
            ("redis://:s3/cr3t@h:1", "redis://:***@h:1"),
            ("redis://s3/cr3t@h:1", "redis://***@h:1"),
            ("app:s3://cr3t@h:1", "***@h:1"),
            ("app:s3:/cr3t@h:1", "***@h:1"),
            ("redis://h:1/?x=a@b", "redis://h:***@b"),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
            assert!(!shown.contains("s3") && !shown.contains("cr"), "{shown}");
        }
    }

    #[test]
    fn an_unencoded_delimiter_before_the_last_at_is_refused_unprinted() {
        for url in [
            "redis://app:s3/cr3t@h:1",
            "redis://app:s3?cr3t@h:1",
            // Parses: as host `app`, port 6379, fragment `s3cr3t@h:1`.
            "redis://app:6379#s3cr3t@h:1",
            "redis://app:6379/s3cr3t@h:1",
            "redis://h:1/?x=a@b",
        ] {
            let err = Security::default().apply(&[url.to_owned()]).unwrap_err();
            let text = format!("{err}\n{err:?}");
            assert!(
                matches!(err, Error::Config { field: "nodes", .. }),
                "{text}"
            );
            assert!(text.contains("percent-encode"), "{text}");
            assert!(!text.contains("s3") && !text.contains("6379"), "{text}");
        }
        let seeds = Security::default()
            .apply(&["redis://app:s3%2Fcr3t@h:1".to_owned()])
            .unwrap();
        assert_eq!(seeds[0].redis_settings().password(), Some("s3/cr3t"));
    }

    #[test]
    fn show_hides_the_password_and_keeps_the_rest() {
        let security = Security {
            username: Some("app".into()),
            password: Some(SecretSource::Value(Secret("s3cret".into()))),
            ..Security::default()
        };
        let seeds = security.apply(&["redis://h:7000".to_owned()]).unwrap();
        assert_eq!(show(&seeds[0]), "redis://app:***@h:7000");
        assert_eq!(seeds[0].redis_settings().password(), Some("s3cret"));
        assert!(!format!("{security:?}").contains("s3cret"));
        let seeds = Security::default()
            .apply(&["rediss://:pw@h:7000".to_owned()])
            .unwrap();
        assert_eq!(show(&seeds[0]), "rediss://:***@h:7000");
    }

    #[test]
    fn tls_files_need_rediss_and_a_whole_client_identity() {
        let with_ca = Security {
            tls_ca: Some(Pem::Bytes(b"-----BEGIN CERTIFICATE-----\n".to_vec())),
            ..Security::default()
        };
        let err = with_ca.apply(&["redis://h:1".to_owned()]).unwrap_err();
        assert!(err.to_string().contains("not a rediss:// URL"), "{err}");
        let half = Security {
            tls_cert: Some(Pem::Bytes(b"x".to_vec())),
            ..Security::default()
        };
        let err = half.apply(&["rediss://h:1".to_owned()]).unwrap_err();
        assert!(err.to_string().contains("both"), "{err}");
        let mixed = Security::default()
            .apply(&["rediss://h:1".to_owned(), "redis://h:2".to_owned()])
            .unwrap_err();
        assert!(mixed.to_string().contains("mixing"), "{mixed}");
    }

    #[test]
    fn a_password_file_loses_one_trailing_newline() {
        let path = std::env::temp_dir().join(format!("sl-pw-{}", rand::random::<u64>()));
        std::fs::write(&path, "s3cret\n").unwrap();
        let security = Security {
            password: Some(SecretSource::File(path.clone())),
            ..Security::default()
        };
        let seeds = security.apply(&["redis://h:1".to_owned()]).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(seeds[0].redis_settings().password(), Some("s3cret"));
        let err = security.apply(&["redis://h:1".to_owned()]).unwrap_err();
        assert!(matches!(
            err,
            Error::Config {
                field: "password_file",
                ..
            }
        ));
    }
}
