//! API keys and the accounts they belong to. Keys are stored as SHA-256
//! digests; a request's key is hashed and looked up, never compared in clear.

use std::collections::HashMap;
use std::sync::RwLock;

use actix_web::HttpRequest;
use actix_web::http::header;
use chrono::Utc;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Text};
use sha2::{Digest, Sha256};

use crate::db::{Conn, DbPool, time_text};
use crate::problem::ApiError;
use crate::schema::accounts;

/// The documented key of the seeded demo account.
pub const DEMO_API_KEY: &str = "sk_test_demo";
pub const DEMO_ACCOUNT_NAME: &str = "Demo account";

pub fn hash_api_key(key: &str) -> String {
    format!("{:x}", Sha256::digest(key.as_bytes()))
}

#[derive(QueryableByName)]
struct Id {
    #[diesel(sql_type = BigInt)]
    id: i64,
}

pub fn create_account(conn: &mut Conn<'_>, name: &str, api_key: &str) -> QueryResult<i64> {
    match conn {
        Conn::Pg(c) => diesel::insert_into(accounts::table)
            .values((
                accounts::name.eq(name),
                accounts::api_key_sha256.eq(hash_api_key(api_key)),
            ))
            .returning(accounts::id)
            .get_result(*c),
        Conn::Sqlite(c) => diesel::sql_query(
            "INSERT INTO accounts (name, api_key_sha256, created_at) VALUES (?, ?, ?) RETURNING id",
        )
        .bind::<Text, _>(name)
        .bind::<Text, _>(hash_api_key(api_key))
        .bind::<Text, _>(time_text(Utc::now()))
        .get_result::<Id>(*c)
        .map(|r| r.id),
    }
}

pub fn find_by_api_key(conn: &mut Conn<'_>, api_key: &str) -> QueryResult<Option<i64>> {
    let digest = hash_api_key(api_key);
    match conn {
        Conn::Pg(c) => accounts::table
            .filter(accounts::api_key_sha256.eq(digest))
            .select(accounts::id)
            .first(*c)
            .optional(),
        Conn::Sqlite(c) => diesel::sql_query("SELECT id FROM accounts WHERE api_key_sha256 = ?")
            .bind::<Text, _>(digest)
            .get_result::<Id>(*c)
            .optional()
            .map(|r| r.map(|r| r.id)),
    }
}

pub fn seed_demo_account(conn: &mut Conn<'_>) -> QueryResult<i64> {
    let digest = hash_api_key(DEMO_API_KEY);
    match conn {
        Conn::Pg(c) => diesel::insert_into(accounts::table)
            .values((accounts::name.eq(DEMO_ACCOUNT_NAME), accounts::api_key_sha256.eq(&digest)))
            .on_conflict(accounts::api_key_sha256)
            .do_nothing()
            .execute(*c)?,
        Conn::Sqlite(c) => diesel::sql_query(
            "INSERT INTO accounts (name, api_key_sha256, created_at) VALUES (?, ?, ?) ON CONFLICT (api_key_sha256) DO NOTHING",
        )
        .bind::<Text, _>(DEMO_ACCOUNT_NAME)
        .bind::<Text, _>(&digest)
        .bind::<Text, _>(time_text(Utc::now()))
        .execute(*c)?,
    };
    find_by_api_key(conn, DEMO_API_KEY).map(|id| id.expect("demo account was just seeded"))
}

/// Accounts are only ever added, so a key that resolved once resolves to the
/// same account forever: caching hits saves a query on every request.
#[derive(Default)]
pub struct AccountCache(RwLock<HashMap<String, i64>>);

impl AccountCache {
    /// The caller's account from `Authorization: Bearer <key>`.
    pub async fn authenticate(&self, req: &HttpRequest, pool: &DbPool) -> Result<i64, ApiError> {
        let key = bearer_token(req).ok_or(ApiError::Unauthorized)?;
        let digest = hash_api_key(key);
        if let Some(id) = self.0.read().expect("cache lock").get(&digest) {
            return Ok(*id);
        }
        let pool = pool.clone();
        let key = key.to_owned();
        let found = actix_web::web::block(move || -> Result<Option<i64>, ApiError> {
            let mut conn = crate::db::checkout(&pool)?;
            Ok(find_by_api_key(&mut conn.conn(), &key)?)
        })
        .await??;
        let id = found.ok_or(ApiError::Unauthorized)?;
        self.0.write().expect("cache lock").insert(digest, id);
        Ok(id)
    }
}

fn bearer_token(req: &HttpRequest) -> Option<&str> {
    let value = req.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}
