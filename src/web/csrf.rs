//! CSRF tokens for the reset action: stateless, bound to the exact action.
//!
//! A token is `<expiry>.<mac>`: the expiry in Unix seconds and an
//! HMAC-SHA256, under a secret drawn when the router is built, of the
//! expiry and the action (subject, kind, name, force). Only a page this
//! router rendered can hold one — another site's page cannot read it
//! (same-origin policy) — and it authorises only the reset it was shown
//! with, until it expires. No cookie and no server-side session: a browser
//! that sends basic-auth credentials by itself still needs the token.
//!
//! Why HMAC over a random nonce kept in memory: nothing to store, nothing
//! to expire, and it works behind several replicas sharing no state (each
//! has its own secret, so a token is only good on the replica that minted
//! it — the confirmation and the POST are one page away from each other).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rand::RngCore;
use sha2::{Digest, Sha256};

/// One reset as a form names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Action<'a> {
    pub(super) subject: &'a [u8],
    pub(super) kind: Option<&'a str>,
    pub(super) name: Option<&'a str>,
    pub(super) force: bool,
}

/// Mints and checks tokens under one secret.
pub(super) struct Csrf {
    secret: [u8; 32],
    ttl: Duration,
}

/// Why a token was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Refused {
    /// Not `<expiry>.<64 hex digits>`.
    Malformed,
    /// Past its expiry: show the confirmation again.
    Expired,
    /// Minted for another action, or by another secret.
    Mismatch,
}

impl Refused {
    pub(super) fn explain(self) -> &'static str {
        match self {
            Refused::Malformed => "the confirmation token is missing or malformed",
            Refused::Expired => "the confirmation token has expired; confirm again",
            Refused::Mismatch => {
                "the confirmation token was issued for another action (or by another server)"
            }
        }
    }
}

impl Csrf {
    /// A fresh random secret; tokens live `ttl`.
    pub(super) fn new(ttl: Duration) -> Self {
        let mut secret = [0u8; 32];
        rand::rng().fill_bytes(&mut secret);
        Csrf { secret, ttl }
    }

    /// A token for `action`, valid for the configured time from `now`.
    pub(super) fn mint(&self, action: &Action<'_>, now: SystemTime) -> String {
        let expiry = unix_secs(now).saturating_add(self.ttl.as_secs().max(1));
        format!("{expiry}.{}", hex(&self.mac(expiry, action)))
    }

    /// Whether `token` authorises `action` at `now`.
    pub(super) fn verify(
        &self,
        token: &str,
        action: &Action<'_>,
        now: SystemTime,
    ) -> Result<(), Refused> {
        let (expiry, mac) = token.split_once('.').ok_or(Refused::Malformed)?;
        let expiry: u64 = expiry.parse().map_err(|_| Refused::Malformed)?;
        let mac = unhex(mac).ok_or(Refused::Malformed)?;
        if !constant_time_eq(&mac, &self.mac(expiry, action)) {
            return Err(Refused::Mismatch);
        }
        if unix_secs(now) > expiry {
            return Err(Refused::Expired);
        }
        Ok(())
    }

    fn mac(&self, expiry: u64, action: &Action<'_>) -> [u8; 32] {
        // Length-prefixed fields: no two actions encode to the same bytes.
        let mut message = Vec::with_capacity(64 + action.subject.len());
        message.extend_from_slice(&expiry.to_be_bytes());
        for field in [
            action.subject,
            action.kind.unwrap_or("").as_bytes(),
            action.name.unwrap_or("").as_bytes(),
        ] {
            message
                .extend_from_slice(&u64::try_from(field.len()).unwrap_or(u64::MAX).to_be_bytes());
            message.extend_from_slice(field);
        }
        message.push(u8::from(action.kind.is_some()));
        message.push(u8::from(action.name.is_some()));
        message.push(u8::from(action.force));
        hmac_sha256(&self.secret, &message)
    }
}

/// HMAC-SHA256 (RFC 2104) for keys of at most one block (64 bytes).
fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    let mut block = [0u8; 64];
    if key.len() <= block.len() {
        block[..key.len()].copy_from_slice(key);
    } else {
        block[..32].copy_from_slice(&Sha256::digest(key));
    }
    let pad = |byte: u8| block.map(|b| b ^ byte);
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .into()
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(super) fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 || !text.is_ascii() {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn action(subject: &[u8], force: bool) -> Action<'_> {
        Action {
            subject,
            kind: Some("gcra"),
            name: Some("api"),
            force,
        }
    }

    #[test]
    fn hmac_matches_rfc_4231_case_2() {
        let mac = hmac_sha256(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(
            hex(&mac),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn a_token_authorises_only_its_own_action_until_it_expires() {
        let csrf = Csrf::new(Duration::from_secs(600));
        let now = SystemTime::now();
        let token = csrf.mint(&action(b"user:1", false), now);
        assert_eq!(csrf.verify(&token, &action(b"user:1", false), now), Ok(()));
        assert_eq!(
            csrf.verify(&token, &action(b"user:2", false), now),
            Err(Refused::Mismatch)
        );
        assert_eq!(
            csrf.verify(&token, &action(b"user:1", true), now),
            Err(Refused::Mismatch),
            "a token for a plain reset does not authorise a forced one"
        );
        let whole_subject = Action {
            kind: None,
            name: None,
            ..action(b"user:1", false)
        };
        assert_eq!(
            csrf.verify(&token, &whole_subject, now),
            Err(Refused::Mismatch)
        );
        let later = now + Duration::from_secs(601);
        assert_eq!(
            csrf.verify(&token, &action(b"user:1", false), later),
            Err(Refused::Expired)
        );
    }

    #[test]
    fn tampered_or_foreign_tokens_are_refused() {
        let csrf = Csrf::new(Duration::from_secs(600));
        let now = SystemTime::now();
        let a = action(b"user:1", false);
        let token = csrf.mint(&a, now);
        let other = Csrf::new(Duration::from_secs(600));
        assert_eq!(other.verify(&token, &a, now), Err(Refused::Mismatch));
        // Moving the expiry forward breaks the MAC.
        let (_, mac) = token.split_once('.').unwrap();
        let forged = format!("{}.{mac}", u64::MAX);
        assert_eq!(csrf.verify(&forged, &a, now), Err(Refused::Mismatch));
        for bad in ["", "123", "abc.def", "1.zz", "1.abc"] {
            assert_eq!(csrf.verify(bad, &a, now), Err(Refused::Malformed), "{bad}");
        }
    }
}
