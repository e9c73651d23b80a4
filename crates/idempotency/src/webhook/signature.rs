//! Standard Webhooks 1.0 signatures: `webhook-signature` holds one or more
//! space-separated `v1,<base64 HMAC-SHA256>` entries, each over
//! `"{webhook-id}.{webhook-timestamp}.{body}"` with a secret's decoded bytes.
//! Several entries are sent while a secret rotates; a receiver accepts the
//! message when any entry matches any of its secrets.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// How far a `webhook-timestamp` may be from the receiver's clock, either
/// way, as the specification's reference libraries have it: a replay of a
/// captured delivery later than this is refused.
pub const TOLERANCE: std::time::Duration = std::time::Duration::from_secs(5 * 60);

const PREFIX: &str = "whsec_";

/// A symmetric signing secret: `whsec_` and the base64 of 24 to 64 bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

/// Why a string is not a signing secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// It does not start with `whsec_`.
    #[error("a signing secret starts with whsec_")]
    Prefix,
    /// What follows `whsec_` is not base64.
    #[error("a signing secret is whsec_ and base64")]
    Base64,
    /// It decodes to fewer than 24 or more than 64 bytes.
    #[error("a signing secret holds 24 to 64 bytes")]
    Length,
}

impl Secret {
    /// The secret of a `whsec_…` string.
    pub fn parse(text: &str) -> Result<Secret, SecretError> {
        let encoded = text.strip_prefix(PREFIX).ok_or(SecretError::Prefix)?;
        let bytes = STANDARD.decode(encoded).map_err(|_| SecretError::Base64)?;
        Secret::from_bytes(bytes)
    }

    /// A secret of these bytes (for a new secret, from a CSPRNG).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Secret, SecretError> {
        if !(24..=64).contains(&bytes.len()) {
            return Err(SecretError::Length);
        }
        Ok(Secret(bytes))
    }

    /// The `whsec_…` form, shown to the endpoint's owner once.
    pub fn to_whsec(&self) -> String {
        format!("{PREFIX}{}", STANDARD.encode(&self.0))
    }

    fn mac(&self, id: &str, timestamp: i64, body: &[u8]) -> Hmac<Sha256> {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes a key of any length");
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        mac
    }
}

// Never print a secret, not even in a debug log.
impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}

/// One signature entry: `v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`.
pub fn sign(secret: &Secret, id: &str, timestamp: i64, body: &[u8]) -> String {
    let tag = secret.mac(id, timestamp, body).finalize().into_bytes();
    format!("v1,{}", STANDARD.encode(tag))
}

/// The `webhook-signature` value: one entry per secret, space-separated
/// (the current secret and, while a rotation lasts, the previous one).
pub fn signature_header(secrets: &[&Secret], id: &str, timestamp: i64, body: &[u8]) -> String {
    let entries: Vec<String> = secrets
        .iter()
        .map(|s| sign(s, id, timestamp, body))
        .collect();
    entries.join(" ")
}

/// Why a delivery's signature was refused. Each is refused before the
/// receiver records or does anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// `webhook-timestamp` is not an integer of Unix seconds.
    #[error("webhook-timestamp is not Unix seconds")]
    BadTimestamp,
    /// `webhook-timestamp` is further than [`TOLERANCE`] from now: a
    /// replay of a captured delivery, or a clock far off.
    #[error("webhook-timestamp is further than the tolerance from now")]
    Stale,
    /// `webhook-signature` holds no decodable `v1,` entry.
    #[error("webhook-signature holds no v1 signature")]
    NoSignature,
    /// No `v1` entry matches the body under any of the secrets.
    #[error("no signature matches the body under any of the secrets")]
    Mismatch,
}

/// Checks a delivery: its timestamp within [`TOLERANCE`] of `now` (Unix
/// seconds) and a `v1` entry of `signature` that matches under one of
/// `secrets`. The comparison is the MAC's own, in constant time.
pub fn verify(
    secrets: &[&Secret],
    id: &str,
    timestamp: &str,
    signature: &str,
    body: &[u8],
    now: i64,
) -> Result<(), SignatureError> {
    let sent: i64 = timestamp
        .trim()
        .parse()
        .map_err(|_| SignatureError::BadTimestamp)?;
    if sent.abs_diff(now) > TOLERANCE.as_secs() {
        return Err(SignatureError::Stale);
    }
    let tags: Vec<Vec<u8>> = signature
        .split(' ')
        .filter_map(|entry| entry.strip_prefix("v1,"))
        .filter_map(|tag| STANDARD.decode(tag).ok())
        .collect();
    if tags.is_empty() {
        return Err(SignatureError::NoSignature);
    }
    // One MAC over the body per secret; each tag is checked against a copy.
    let matches = secrets.iter().any(|secret| {
        let mac = secret.mac(id, sent, body);
        tags.iter().any(|tag| mac.clone().verify_slice(tag).is_ok())
    });
    if matches {
        Ok(())
    } else {
        Err(SignatureError::Mismatch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The specification's own example (standard-webhooks/spec, and its
    // reference libraries' tests).
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const TIMESTAMP: i64 = 1614265330;
    const BODY: &[u8] = br#"{"test": 2432232314}"#;
    const SIGNATURE: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    #[test]
    fn signs_the_specifications_example_as_it_prints_it() {
        let secret = Secret::parse(SECRET).unwrap();
        assert_eq!(sign(&secret, ID, TIMESTAMP, BODY), SIGNATURE);
    }

    #[test]
    fn verifies_any_matching_entry_within_the_tolerance() {
        let secret = Secret::parse(SECRET).unwrap();
        let other = Secret::from_bytes(vec![7; 32]).unwrap();
        let header = format!("v1,bm9wZQ== {SIGNATURE}");
        let ts = TIMESTAMP.to_string();
        assert_eq!(
            verify(&[&other, &secret], ID, &ts, &header, BODY, TIMESTAMP + 299),
            Ok(())
        );
        assert_eq!(
            verify(&[&other], ID, &ts, &header, BODY, TIMESTAMP),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify(&[&secret], ID, &ts, SIGNATURE, b"{\"test\": 1}", TIMESTAMP),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify(&[&secret], ID, &ts, SIGNATURE, BODY, TIMESTAMP + 301),
            Err(SignatureError::Stale)
        );
        assert_eq!(
            verify(&[&secret], ID, &ts, SIGNATURE, BODY, TIMESTAMP - 301),
            Err(SignatureError::Stale)
        );
        assert_eq!(
            verify(&[&secret], ID, "soon", SIGNATURE, BODY, TIMESTAMP),
            Err(SignatureError::BadTimestamp)
        );
        assert_eq!(
            verify(&[&secret], ID, &ts, "v2,abc", BODY, TIMESTAMP),
            Err(SignatureError::NoSignature)
        );
    }

    #[test]
    fn a_secret_is_whsec_and_24_to_64_bytes_and_never_printed() {
        assert_eq!(
            Secret::parse("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
            Err(SecretError::Prefix)
        );
        assert_eq!(Secret::parse("whsec_!!"), Err(SecretError::Base64));
        assert_eq!(Secret::from_bytes(vec![1; 23]), Err(SecretError::Length));
        assert_eq!(Secret::from_bytes(vec![1; 65]), Err(SecretError::Length));
        let secret = Secret::parse(SECRET).unwrap();
        assert_eq!(secret.to_whsec(), SECRET);
        assert_eq!(format!("{secret:?}"), "Secret(…)");
    }
}
