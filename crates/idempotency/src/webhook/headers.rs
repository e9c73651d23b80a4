//! A delivery's three Standard Webhooks headers, read once from a request,
//! and the one check a receiver makes before it records or does anything:
//! [`verify_request`].

#[cfg(feature = "actix")]
use actix_web::http::header::HeaderMap;

use super::signature::{Secret, SignatureError, verify};

/// The event's id: the same on every attempt, what the inbox records.
pub const ID: &str = "webhook-id";
/// Unix seconds of this attempt, signed with the body.
pub const TIMESTAMP: &str = "webhook-timestamp";
/// One or more `v1,<base64>` entries, space-separated.
pub const SIGNATURE: &str = "webhook-signature";

/// The longest `webhook-id` accepted: what the inbox's column holds.
pub const MAX_ID_LEN: usize = 255;

/// The three headers as the request carried them (`None`: absent).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Headers {
    /// `webhook-id`: the event's id, the same on every attempt.
    pub id: Option<String>,
    /// `webhook-timestamp`: this attempt's Unix seconds, as sent.
    pub timestamp: Option<String>,
    /// `webhook-signature`: the `v1,<base64>` entries, as sent.
    pub signature: Option<String>,
}

/// Why a delivery is refused, before anything is recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// The named header is absent, or empty (400).
    #[error("the {0} header is missing or empty")]
    Missing(&'static str),
    /// The named header was sent more than once (400).
    #[error("the {0} header was sent more than once")]
    Repeated(&'static str),
    /// The named header's value is not visible ASCII (400).
    #[error("the {0} header is not visible ASCII")]
    NotText(&'static str),
    /// `webhook-id` is longer than [`MAX_ID_LEN`] (400).
    #[error("webhook-id is longer than 255 characters")]
    IdTooLong,
    /// The signature check failed (see [`RequestError::status`]).
    #[error(transparent)]
    Signature(#[from] SignatureError),
}

impl RequestError {
    /// The HTTP status to refuse with: 401 when the delivery cannot be
    /// told from a forgery or a replay (no matching signature, a stale
    /// timestamp), 400 when the request is malformed. The sender retries
    /// either; nothing was recorded, so a retry that verifies is the first.
    pub fn status(&self) -> u16 {
        match self {
            RequestError::Signature(
                SignatureError::Mismatch | SignatureError::Stale | SignatureError::NoSignature,
            ) => 401,
            _ => 400,
        }
    }
}

impl Headers {
    /// The three headers among `pairs` (name, value), names compared
    /// without regard to case as HTTP's are; any other header is ignored.
    pub fn from_pairs<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    ) -> Result<Headers, RequestError> {
        let mut headers = Headers::default();
        for (name, value) in pairs {
            let (slot, name) = if name.eq_ignore_ascii_case(ID) {
                (&mut headers.id, ID)
            } else if name.eq_ignore_ascii_case(TIMESTAMP) {
                (&mut headers.timestamp, TIMESTAMP)
            } else if name.eq_ignore_ascii_case(SIGNATURE) {
                (&mut headers.signature, SIGNATURE)
            } else {
                continue;
            };
            if slot.is_some() {
                return Err(RequestError::Repeated(name));
            }
            // Visible ASCII and spaces: what each of the three can hold.
            let text = std::str::from_utf8(value)
                .ok()
                .filter(|v| v.bytes().all(|b| b == b' ' || b.is_ascii_graphic()))
                .ok_or(RequestError::NotText(name))?;
            *slot = Some(text.trim().to_owned());
        }
        Ok(headers)
    }

    /// The three headers of an actix-web request (feature `actix`).
    #[cfg(feature = "actix")]
    pub fn from_actix(headers: &HeaderMap) -> Result<Headers, RequestError> {
        Headers::from_pairs(
            headers
                .iter()
                .map(|(name, value)| (name.as_str(), value.as_bytes())),
        )
    }
}

/// Checks a delivery as a receiver must before it records or does
/// anything: the three headers present, the timestamp within
/// [`TOLERANCE`](super::TOLERANCE) of `now` (Unix seconds, see
/// [`unix_now`]) and a signature over the body under one of `secrets` (the
/// current one and, while a rotation lasts, the previous one). Answers the
/// event's id, for the inbox.
pub fn verify_request<'h>(
    secrets: &[&Secret],
    headers: &'h Headers,
    body: &[u8],
    now: i64,
) -> Result<&'h str, RequestError> {
    let present = |value: &'h Option<String>, name| {
        value
            .as_deref()
            .filter(|v| !v.is_empty())
            .ok_or(RequestError::Missing(name))
    };
    let id = present(&headers.id, ID)?;
    let timestamp = present(&headers.timestamp, TIMESTAMP)?;
    let signature = present(&headers.signature, SIGNATURE)?;
    if id.len() > MAX_ID_LEN {
        return Err(RequestError::IdTooLong);
    }
    verify(secrets, id, timestamp, signature, body, now)?;
    Ok(id)
}

/// Now, in Unix seconds, on this machine's clock.
pub fn unix_now() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    since.map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhook::signature_header;

    fn secret(byte: u8) -> Secret {
        Secret::from_bytes(vec![byte; 32]).unwrap()
    }

    fn signed(secrets: &[&Secret], id: &str, at: i64, body: &[u8]) -> Vec<(String, Vec<u8>)> {
        vec![
            ("Webhook-Id".into(), id.into()),
            ("WEBHOOK-TIMESTAMP".into(), at.to_string().into()),
            (
                "webhook-signature".into(),
                signature_header(secrets, id, at, body).into(),
            ),
            ("content-type".into(), b"application/json".to_vec()),
        ]
    }

    fn read(pairs: &[(String, Vec<u8>)]) -> Result<Headers, RequestError> {
        Headers::from_pairs(pairs.iter().map(|(n, v)| (n.as_str(), v.as_slice())))
    }

    #[test]
    fn reads_the_three_headers_in_any_case_and_verifies_them() {
        let (new, old) = (secret(1), secret(2));
        let pairs = signed(&[&old], "evt_1", 1_000, b"{}");
        let headers = read(&pairs).unwrap();
        assert_eq!(headers.id.as_deref(), Some("evt_1"));
        // The previous secret still verifies while the rotation lasts.
        assert_eq!(
            verify_request(&[&new, &old], &headers, b"{}", 1_010),
            Ok("evt_1")
        );
        let refused = verify_request(&[&new], &headers, b"{}", 1_010).unwrap_err();
        assert_eq!(refused, RequestError::Signature(SignatureError::Mismatch));
        assert_eq!(refused.status(), 401);
    }

    #[test]
    fn refuses_a_missing_repeated_or_garbled_header_with_its_name() {
        let s = secret(1);
        let mut pairs = signed(&[&s], "evt_1", 1_000, b"{}");
        pairs.remove(1);
        let headers = read(&pairs).unwrap();
        let missing = verify_request(&[&s], &headers, b"{}", 1_000).unwrap_err();
        assert_eq!(missing, RequestError::Missing(TIMESTAMP));
        assert_eq!(
            missing.to_string(),
            "the webhook-timestamp header is missing or empty"
        );
        assert_eq!(missing.status(), 400);
        pairs.push(("webhook-id".into(), b"evt_2".to_vec()));
        assert_eq!(read(&pairs), Err(RequestError::Repeated(ID)));
        let garbled = [("webhook-id".to_owned(), vec![0xff, 0x01])];
        assert_eq!(read(&garbled), Err(RequestError::NotText(ID)));
        let long = "e".repeat(MAX_ID_LEN + 1);
        let pairs = signed(&[&s], &long, 1_000, b"{}");
        let headers = read(&pairs).unwrap();
        assert_eq!(
            verify_request(&[&s], &headers, b"{}", 1_000),
            Err(RequestError::IdTooLong)
        );
    }
}
