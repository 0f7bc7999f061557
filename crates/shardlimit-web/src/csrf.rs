//! CSRF tokens for the write actions (reset, unblock, clear an override,
//! give a TTL): bound to the exact action, good once.
//!
//! A token is `<expiry>.<nonce>.<mac>`: the expiry in Unix seconds, a
//! random nonce and an HMAC-SHA256, under a secret drawn when the router is
//! built, of the three and the action (operation, subject or key, kind,
//! name, argument, force). Only a
//! page this router rendered can hold one — another site's page cannot
//! read it (same-origin policy) — and it authorises only the reset it was
//! shown with, once, until it expires: the nonces of spent tokens are kept
//! until their expiry, so a form posted twice (a reload, the back button, a
//! replayed request) is refused the second time. No cookie and no session:
//! a browser that sends basic-auth credentials by itself still needs the
//! token.
//!
//! Why HMAC rather than only nonces kept in memory: nothing is stored
//! until a token is spent (a confirmation page that is never submitted
//! costs nothing), and a token minted by another replica (another secret)
//! is refused as such — the confirmation and the POST are one page away
//! from each other, on the same replica.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::digest::Key;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

/// The MAC: RustCrypto's HMAC over SHA-256, the kept implementation a
/// security review expects (its `verify_slice` compares in constant time,
/// with `subtle`).
type HmacSha256 = Hmac<Sha256>;

/// One write as a form names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Action<'a> {
    /// `reset`, `unblock`, `clear-override`, `give-ttl`.
    pub(super) op: &'static str,
    /// The subject (or, to give a TTL, the key).
    pub(super) subject: &'a [u8],
    pub(super) kind: Option<&'a str>,
    pub(super) name: Option<&'a str>,
    /// The operation's argument (the TTL to give), if it has one.
    pub(super) arg: Option<&'a str>,
    pub(super) force: bool,
}

/// Mints and checks tokens under one secret.
pub(super) struct Csrf {
    /// HMAC-SHA256 keyed with the secret, cloned for each token.
    keyed: HmacSha256,
    ttl: Duration,
    /// The nonces of spent tokens, with their expiry: dropped once expired
    /// (the token is refused as expired from then on).
    spent: Mutex<HashMap<u64, u64>>,
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
    /// Already used once.
    Spent,
}

impl Refused {
    pub(super) fn explain(self) -> &'static str {
        match self {
            Refused::Malformed => "the confirmation token is missing or malformed",
            Refused::Expired => "the confirmation token has expired; confirm again",
            Refused::Mismatch => {
                "the confirmation token was issued for another action (or by another server)"
            }
            Refused::Spent => "the confirmation token was already used; confirm again",
        }
    }
}

impl Csrf {
    /// A fresh random secret; tokens live `ttl`.
    pub(super) fn new(ttl: Duration) -> Self {
        // A key of the hash's block size, 64 random bytes: HMAC uses it as
        // it is, and `new` takes it without a length to check.
        let mut secret = Key::<HmacSha256>::default();
        rand::rng().fill_bytes(&mut secret);
        Csrf {
            keyed: HmacSha256::new(&secret),
            ttl,
            spent: Mutex::default(),
        }
    }

    /// A token for `action`, valid once for the configured time from `now`.
    pub(super) fn mint(&self, action: &Action<'_>, now: SystemTime) -> String {
        let expiry = unix_secs(now).saturating_add(self.ttl.as_secs().max(1));
        let nonce = rand::rng().next_u64();
        let mac = self.mac(expiry, nonce, action).finalize().into_bytes();
        format!("{expiry}.{nonce:016x}.{}", hex::encode(mac))
    }

    /// Whether `token` authorises `action` at `now`; if it does, it is
    /// spent: the same token is refused from then on.
    pub(super) fn spend(
        &self,
        token: &str,
        action: &Action<'_>,
        now: SystemTime,
    ) -> Result<(), Refused> {
        let mut parts = token.split('.');
        let (Some(expiry), Some(nonce), Some(mac), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(Refused::Malformed);
        };
        let expiry: u64 = expiry.parse().map_err(|_| Refused::Malformed)?;
        let nonce = (nonce.len() == 16)
            .then(|| u64::from_str_radix(nonce, 16).ok())
            .flatten()
            .ok_or(Refused::Malformed)?;
        let mac = hex::decode(mac).map_err(|_| Refused::Malformed)?;
        self.mac(expiry, nonce, action)
            .verify_slice(&mac)
            .map_err(|_| Refused::Mismatch)?;
        let now = unix_secs(now);
        if now > expiry {
            return Err(Refused::Expired);
        }
        let mut spent = self.spent.lock().unwrap_or_else(PoisonError::into_inner);
        spent.retain(|_, until| *until >= now);
        if spent.insert(nonce, expiry).is_some() {
            return Err(Refused::Spent);
        }
        Ok(())
    }

    /// The MAC of a token for `action`, fed and not yet finalised.
    fn mac(&self, expiry: u64, nonce: u64, action: &Action<'_>) -> HmacSha256 {
        let mut mac = self.keyed.clone();
        mac.update(&expiry.to_be_bytes());
        mac.update(&nonce.to_be_bytes());
        // Length-prefixed fields: no two actions encode to the same bytes.
        for field in [
            action.op.as_bytes(),
            action.subject,
            action.kind.unwrap_or("").as_bytes(),
            action.name.unwrap_or("").as_bytes(),
            action.arg.unwrap_or("").as_bytes(),
        ] {
            mac.update(&u64::try_from(field.len()).unwrap_or(u64::MAX).to_be_bytes());
            mac.update(field);
        }
        mac.update(&[
            u8::from(action.kind.is_some()),
            u8::from(action.name.is_some()),
            u8::from(action.arg.is_some()),
            u8::from(action.force),
        ]);
        mac
    }
}

fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
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
            op: "reset",
            arg: None,
        }
    }

    #[test]
    fn hmac_matches_rfc_4231_case_2() {
        let mac = HmacSha256::new_from_slice(b"Jefe")
            .unwrap()
            .chain_update(b"what do ya want for nothing?")
            .finalize()
            .into_bytes();
        assert_eq!(
            hex::encode(mac),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn a_token_authorises_only_its_own_action_until_it_expires() {
        let csrf = Csrf::new(Duration::from_secs(600));
        let now = SystemTime::now();
        let token = csrf.mint(&action(b"user:1", false), now);
        assert_eq!(csrf.spend(&token, &action(b"user:1", false), now), Ok(()));
        assert_eq!(
            csrf.spend(&token, &action(b"user:2", false), now),
            Err(Refused::Mismatch)
        );
        assert_eq!(
            csrf.spend(&token, &action(b"user:1", true), now),
            Err(Refused::Mismatch),
            "a token for a plain reset does not authorise a forced one"
        );
        let whole_subject = Action {
            kind: None,
            name: None,
            ..action(b"user:1", false)
        };
        assert_eq!(
            csrf.spend(&token, &whole_subject, now),
            Err(Refused::Mismatch)
        );
        let unblock = Action {
            op: "unblock",
            ..action(b"user:1", false)
        };
        assert_eq!(
            csrf.spend(&token, &unblock, now),
            Err(Refused::Mismatch),
            "a token for a reset does not authorise another operation"
        );
        let give = |ttl| Action {
            op: "give-ttl",
            arg: Some(ttl),
            ..action(b"user:1", false)
        };
        let day = csrf.mint(&give("86400"), now);
        assert_eq!(
            csrf.spend(&day, &give("31622400"), now),
            Err(Refused::Mismatch),
            "nor one for another argument"
        );
        let later = now + Duration::from_secs(601);
        assert_eq!(
            csrf.spend(&token, &action(b"user:1", false), later),
            Err(Refused::Expired)
        );
    }

    #[test]
    fn a_token_is_good_once_and_two_tokens_for_one_action_differ() {
        let csrf = Csrf::new(Duration::from_secs(600));
        let now = SystemTime::now();
        let a = action(b"user:1", false);
        let (first, second) = (csrf.mint(&a, now), csrf.mint(&a, now));
        assert_ne!(first, second);
        assert_eq!(csrf.spend(&first, &a, now), Ok(()));
        assert_eq!(csrf.spend(&first, &a, now), Err(Refused::Spent));
        assert_eq!(csrf.spend(&second, &a, now), Ok(()));
        // Spent nonces are forgotten once expired: the token is then
        // refused as expired.
        let later = now + Duration::from_secs(601);
        let third = csrf.mint(&a, later);
        assert_eq!(csrf.spend(&third, &a, later), Ok(()));
        assert_eq!(csrf.spent.lock().unwrap().len(), 1);
        assert_eq!(csrf.spend(&first, &a, later), Err(Refused::Expired));
    }

    #[test]
    fn tampered_or_foreign_tokens_are_refused() {
        let csrf = Csrf::new(Duration::from_secs(600));
        let now = SystemTime::now();
        let a = action(b"user:1", false);
        let token = csrf.mint(&a, now);
        let other = Csrf::new(Duration::from_secs(600));
        assert_eq!(other.spend(&token, &a, now), Err(Refused::Mismatch));
        // Moving the expiry forward, or changing the nonce, breaks the MAC.
        let (_, rest) = token.split_once('.').unwrap();
        let forged = format!("{}.{rest}", u64::MAX);
        assert_eq!(csrf.spend(&forged, &a, now), Err(Refused::Mismatch));
        let (expiry, rest) = token.split_once('.').unwrap();
        let (_, mac) = rest.split_once('.').unwrap();
        let renonced = format!("{expiry}.{:016x}.{mac}", 7);
        assert_eq!(csrf.spend(&renonced, &a, now), Err(Refused::Mismatch));
        for bad in [
            "",
            "123",
            "abc.def",
            "1.zz",
            "1.abc",
            "1.0000000000000007",
            "1.07.abcd",
            "1.2.3.4",
        ] {
            assert_eq!(csrf.spend(bad, &a, now), Err(Refused::Malformed), "{bad}");
        }
    }
}
