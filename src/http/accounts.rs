//! Accounts and their API keys. A key is shown once, when it is made, and
//! stored only as its SHA-256 digest; a request's key is hashed and looked
//! up, never compared in clear.
//!
//! The seeded demo account (demo mode, see `demo/`) is flagged `demo`: its
//! key is public, so it authenticates only on a server in demo mode.

use std::collections::HashMap;
use std::sync::RwLock;
use std::time::{Duration, Instant};

use actix_web::HttpRequest;
use actix_web::http::header;
use sha2::{Digest, Sha256};

use crate::http::limits::{KeyedLimit, retry_after_secs};
use crate::http::problem::ApiError;
use crate::store::{AccountRecord, DbPool, Store};

/// What every generated key starts with, so that a key pasted into the
/// wrong place (a log, a ticket, a repository) is recognisable.
pub const API_KEY_PREFIX: &str = "sk_live_";
/// Random bytes in a generated key (hex-encoded after the prefix).
pub const API_KEY_RANDOM_BYTES: usize = 32;

pub fn hash_api_key(key: &str) -> String {
    format!("{:x}", Sha256::digest(key.as_bytes()))
}

/// A new API key: the prefix and 32 bytes from the operating system's CSPRNG.
pub fn generate_api_key() -> String {
    let mut bytes = [0u8; API_KEY_RANDOM_BYTES];
    getrandom::fill(&mut bytes).expect("the operating system's random number generator");
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{API_KEY_PREFIX}{hex}")
}

#[derive(Debug, thiserror::Error)]
pub enum AccountError {
    #[error("an account named {0:?} already exists")]
    NameTaken(String),
    #[error("no live account is named {0:?}")]
    NoSuchAccount(String),
    #[error("an account name is 1 to 100 characters, without control characters")]
    BadName,
    #[error(transparent)]
    Database(#[from] diesel::result::Error),
}

fn valid_name(name: &str) -> bool {
    let n = name.chars().count();
    (1..=100).contains(&n) && !name.chars().any(char::is_control) && name.trim() == name
}

/// Creates an account with `api_key` (already generated; only its digest
/// is stored). `demo` marks the demo account.
pub fn insert_account(
    store: &mut dyn Store,
    name: &str,
    api_key: &str,
    demo: bool,
) -> Result<i64, AccountError> {
    if !valid_name(name) {
        return Err(AccountError::BadName);
    }
    store
        .insert_account(name, &hash_api_key(api_key), demo)
        .map_err(|e| match e {
            diesel::result::Error::DatabaseError(
                diesel::result::DatabaseErrorKind::UniqueViolation,
                _,
            ) => AccountError::NameTaken(name.to_owned()),
            e => e.into(),
        })
}

/// `charges account create <name>`: a new account and its key, which is
/// returned once and never stored in clear.
pub fn create_account(store: &mut dyn Store, name: &str) -> Result<(i64, String), AccountError> {
    let key = generate_api_key();
    let id = insert_account(store, name, &key, false)?;
    Ok((id, key))
}

/// `charges account revoke <name>`: the account's key stops working (on a
/// running server within `ACCOUNT_CACHE_TTL`). Its charges stay.
pub fn revoke_account(store: &mut dyn Store, name: &str) -> Result<i64, AccountError> {
    store
        .revoke_account(name)?
        .ok_or_else(|| AccountError::NoSuchAccount(name.to_owned()))
}

/// `charges account list`.
pub fn list_accounts(store: &mut dyn Store) -> Result<Vec<AccountRecord>, AccountError> {
    Ok(store.list_accounts()?)
}

/// Who a request is, from `Authorization: Bearer <key>`. A key that resolved
/// is trusted for `ttl` without asking the database again: that is the
/// bound on how long a revoked key keeps working on a running server. A key
/// that resolved to nothing is refused without asking again for
/// [`UNKNOWN_KEY_TTL`] (at most `ttl`): a client that repeats a made-up key
/// costs no look-up. Then the account's rate limit.
pub struct Authenticator {
    /// Digest -> the account (`None`: no live account has it), and when.
    /// The raw digest: hex is needed only for a look-up in the database.
    cache: RwLock<HashMap<Digest32, (Option<i64>, Instant)>>,
    ttl: Duration,
    include_demo: bool,
    /// The request deadline (REQUEST_TIMEOUT) a look-up waits within.
    request_timeout: Duration,
    per_account: Option<KeyedLimit<i64>>,
}

/// An API key's SHA-256 digest, as bytes.
type Digest32 = [u8; 32];

/// Entries kept at most; past it the cache is emptied (this only bounds a
/// flood of distinct keys; a flood from one address meets its rate limit).
const CACHE_CAPACITY: usize = 10_000;
/// How long an unknown key is refused without a look-up: short, so that a
/// key made a moment after it was tried works within it.
pub const UNKNOWN_KEY_TTL: Duration = Duration::from_secs(5);

impl Authenticator {
    /// `include_demo`: whether the demo account's public key is accepted
    /// (demo mode).
    /// `per_account`: requests a second an account may make (0: no limit).
    pub fn new(
        ttl: Duration,
        include_demo: bool,
        request_timeout: Duration,
        per_account: u32,
    ) -> Authenticator {
        Authenticator {
            cache: RwLock::default(),
            ttl,
            include_demo,
            request_timeout,
            per_account: KeyedLimit::new(per_account),
        }
    }

    /// The caller's account id, if it is within its rate limit (else 429,
    /// before anything else of the request runs).
    pub async fn authenticate(&self, req: &HttpRequest, pool: &DbPool) -> Result<i64, ApiError> {
        let id = self.identify(req, pool).await?;
        if let Some(limit) = &self.per_account
            && let Err(wait) = limit.check(&id)
        {
            crate::metrics::METRICS
                .rate_limited
                .with_label_values(&["account"])
                .inc();
            return Err(ApiError::RateLimited {
                retry_after_secs: retry_after_secs(wait),
                scope: "account",
            });
        }
        Ok(id)
    }

    /// Forgets idle rate-limit buckets (called now and then).
    pub fn forget_idle(&self) {
        if let Some(limit) = &self.per_account {
            limit.forget_idle();
        }
    }

    async fn identify(&self, req: &HttpRequest, pool: &DbPool) -> Result<i64, ApiError> {
        let key = bearer_token(req)?.ok_or(ApiError::Unauthorized)?;
        let digest: Digest32 = Sha256::digest(key.as_bytes()).into();
        if let Some((id, at)) = self.cache.read().expect("cache lock").get(&digest) {
            let fresh = match id {
                Some(_) => self.ttl,
                None => UNKNOWN_KEY_TTL.min(self.ttl),
            };
            if at.elapsed() < fresh {
                return id.ok_or(ApiError::Unauthorized);
            }
        }
        let include_demo = self.include_demo;
        let lookup = hash_api_key(key);
        let left = crate::http::limits::deadline_left(req, self.request_timeout);
        let found = pool
            .run(left, move |store| -> Result<Option<i64>, ApiError> {
                Ok(store.find_account(&lookup, include_demo)?)
            })
            .await?;
        let mut cache = self.cache.write().expect("cache lock");
        if cache.len() >= CACHE_CAPACITY {
            cache.clear();
        }
        cache.insert(digest, (found, Instant::now()));
        found.ok_or(ApiError::Unauthorized)
    }
}

/// The bearer token, if the request has one. Two `Authorization` headers
/// are refused: a proxy that reads the first and an app that reads the last
/// would disagree about who is calling.
pub fn bearer_token(req: &HttpRequest) -> Result<Option<&str>, ApiError> {
    let mut values = req.headers().get_all(header::AUTHORIZATION);
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(ApiError::invalid("Send exactly one Authorization header."));
    }
    let Ok(value) = value.to_str() else {
        return Ok(None);
    };
    Ok(value.split_once(' ').and_then(|(scheme, token)| {
        let token = token.trim();
        (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_are_prefixed_and_carry_32_random_bytes() {
        let a = generate_api_key();
        let b = generate_api_key();
        assert_ne!(a, b);
        let hex = a.strip_prefix(API_KEY_PREFIX).unwrap();
        assert_eq!(hex.len(), 2 * API_KEY_RANDOM_BYTES);
        assert!(hex.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(hash_api_key(&a).len(), 64);
    }

    #[test]
    fn account_names_are_bounded_and_printable() {
        assert!(valid_name("Acme Ltd"));
        assert!(!valid_name(""));
        assert!(!valid_name(" padded"));
        assert!(!valid_name("tab\there"));
        assert!(!valid_name(&"n".repeat(101)));
    }
}
