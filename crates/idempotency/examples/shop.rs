//! A shop with one keyed `POST /orders`, on actix-web and Diesel
//! (PostgreSQL), using nothing of this workspace but the `idempotency`
//! crate: the article's one transaction (register the key, insert the
//! order, store the 201) through `Policy::execute`.
//!
//! ```text
//! DATABASE_URL=postgres://postgres@127.0.0.1/shop SHOP_TOKENS=tok_a=1,tok_b=2 PORT=0 \
//!   cargo run -p idempotency --example shop
//! ```
//!
//! It creates its tables if they are missing and prints the address it
//! listens on. `SHOP_TOKENS` maps bearer tokens to account ids (keys are
//! scoped per account); `GET /orders` lists the caller's orders, newest first.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use actix_web::http::{StatusCode, header};
use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::r2d2::{ConnectionManager, Pool};
use idempotency::{Connections, Fingerprint, IdempotencyKey, KeyError, KeyedRequest, Mode};
use idempotency::{Operation, Outcome, Policy, SavedResponse};
use serde_json::{Value, json};
use uuid::Uuid;

type PgPool = Pool<ConnectionManager<PgConnection>>;

const NO_TOKEN: &str = "Send Authorization: Bearer <token>.";

diesel::table! {
    orders (id) {
        id -> Uuid,
        seq -> Int8,
        account_id -> Int8,
        item -> Text,
        amount -> Int8,
        note -> Text,
    }
}

// Amounts in minor units; `seq` orders the list (the id is random).
const ORDERS_SQL: &str = "CREATE TABLE IF NOT EXISTS orders (id UUID PRIMARY KEY,
    seq BIGSERIAL, account_id BIGINT NOT NULL, item TEXT NOT NULL,
    amount BIGINT NOT NULL CHECK (amount > 0), note TEXT NOT NULL)";

#[derive(Debug, Insertable, Queryable, Selectable)]
struct Order {
    id: Uuid,
    account_id: i64,
    item: String,
    amount: i64,
    note: String,
}

impl Order {
    fn json(&self) -> Value {
        json!({"id": self.id.to_string(), "item": self.item, "amount": self.amount, "note": self.note})
    }
}

/// What runs under the key, on the transaction that registered it; its
/// answer is stored in the key's row in that same transaction.
struct CreateOrder(Order);

impl Operation<PgConnection> for CreateOrder {
    fn run(&mut self, tx: &mut PgConnection) -> Result<SavedResponse, idempotency::Error> {
        diesel::insert_into(orders::table)
            .values(&self.0)
            .execute(tx)?;
        let location = format!("/orders/{}", self.0.id);
        let headers = [
            ("content-type", "application/json"),
            ("location", &location),
        ];
        let headers = headers.map(|(name, value)| (name.to_owned(), value.to_owned()));
        Ok(SavedResponse {
            status: 201,
            headers: BTreeMap::from(headers),
            body: self.0.json(),
        })
    }
}

/// The protocol's connections: one from the pool for each of its transactions.
struct Checkouts<'a>(&'a PgPool, Instant);

impl Connections for Checkouts<'_> {
    type Store = PgConnection;

    fn run<T>(
        &mut self,
        work: impl FnOnce(&mut PgConnection) -> Result<T, idempotency::Error>,
    ) -> Result<T, idempotency::Error> {
        let mut conn = (self.0.get()).map_err(|e| idempotency::Error::Connection(e.into()))?;
        work(&mut conn)
    }

    fn until(&self) -> Instant {
        self.1
    }
}

struct Shop {
    pool: PgPool,
    policy: Policy,
    tokens: HashMap<String, i64>,
}

async fn create_order(req: HttpRequest, body: web::Bytes, shop: web::Data<Shop>) -> HttpResponse {
    let Some(account_id) = authenticate(&req, &shop) else {
        return problem(StatusCode::UNAUTHORIZED, NO_TOKEN);
    };
    let key = match idempotency_key(&req) {
        Ok(Some(key)) => key,
        Ok(None) => return problem(StatusCode::BAD_REQUEST, "Send an Idempotency-Key."),
        Err(e) => return problem(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    // Refused before the key is registered: the corrected request may reuse it.
    let body: Value = serde_json::from_slice(&body).unwrap_or_default();
    let Some(order) = parse_order(&body, account_id) else {
        return problem(StatusCode::BAD_REQUEST, "Send {item, amount > 0, note}.");
    };
    let fingerprint = Fingerprint::of("POST", req.path(), &body);
    // Diesel blocks: off the async workers.
    let outcome = web::block(move || {
        let (key, fingerprint) = (key.as_str(), fingerprint.as_str());
        let request = KeyedRequest {
            account_id,
            key,
            fingerprint,
            path: "/orders",
            body: &body,
        };
        let mut checkouts = Checkouts(&shop.pool, Instant::now() + Duration::from_secs(30));
        shop.policy
            .execute(&mut checkouts, &request, &mut CreateOrder(order))
    })
    .await;
    match outcome {
        Ok(Ok(Outcome::Executed(saved))) => respond(&saved, false),
        Ok(Ok(Outcome::Replayed(saved))) => respond(&saved, true),
        Ok(Ok(Outcome::Mismatch)) => problem(
            StatusCode::UNPROCESSABLE_ENTITY,
            "This Idempotency-Key was used with another request.",
        ),
        Ok(Ok(Outcome::InFlight)) => {
            let mut conflict = problem(StatusCode::CONFLICT, "The key's request is in flight.");
            let retry_after = header::HeaderValue::from_static("1");
            conflict
                .headers_mut()
                .insert(header::RETRY_AFTER, retry_after);
            conflict
        }
        failed => {
            eprintln!("POST /orders: {failed:?}");
            problem(
                StatusCode::INTERNAL_SERVER_ERROR,
                "Nothing was stored; retry.",
            )
        }
    }
}

async fn list_orders(req: HttpRequest, shop: web::Data<Shop>) -> HttpResponse {
    let Some(account_id) = authenticate(&req, &shop) else {
        return problem(StatusCode::UNAUTHORIZED, NO_TOKEN);
    };
    let rows = web::block(move || {
        let mine = orders::table.filter(orders::account_id.eq(account_id));
        let newest = mine.order(orders::seq.desc()).limit(100);
        let mut conn = shop.pool.get().map_err(|e| e.to_string())?;
        newest
            .select(Order::as_select())
            .load(&mut conn)
            .map_err(|e| e.to_string())
    })
    .await;
    match rows {
        Ok(Ok(rows)) => {
            HttpResponse::Ok().json(json!({"data": Vec::from_iter(rows.iter().map(Order::json))}))
        }
        failed => {
            eprintln!("GET /orders: {failed:?}");
            problem(
                StatusCode::INTERNAL_SERVER_ERROR,
                "The orders could not be read.",
            )
        }
    }
}

fn authenticate(req: &HttpRequest, shop: &Shop) -> Option<i64> {
    let value = req.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    shop.tokens.get(value.strip_prefix("Bearer ")?).copied()
}

/// The header once, parsed as the draft says (two of them are refused).
fn idempotency_key(req: &HttpRequest) -> Result<Option<IdempotencyKey>, KeyError> {
    let mut values = req.headers().get_all("idempotency-key");
    match (values.next(), values.next()) {
        (None, _) => Ok(None),
        (Some(value), None) => IdempotencyKey::parse(value.as_bytes()).map(Some),
        (Some(_), Some(_)) => Err(KeyError::Repeated),
    }
}

fn parse_order(body: &Value, account_id: i64) -> Option<Order> {
    let text = |name: &str| Some(body.get(name)?.as_str()?.to_owned());
    Some(Order {
        id: Uuid::new_v4(),
        account_id,
        item: text("item").filter(|item| !item.is_empty())?,
        amount: body.get("amount")?.as_i64().filter(|amount| *amount > 0)?,
        note: text("note")?,
    })
}

/// A stored response as HTTP: the same bytes on every replay, marked as one.
fn respond(saved: &SavedResponse, replayed: bool) -> HttpResponse {
    let mut response = HttpResponse::build(StatusCode::from_u16(saved.status).unwrap());
    for (name, value) in &saved.headers {
        response.insert_header((name.as_str(), value.as_str()));
    }
    if replayed {
        response.insert_header(("idempotent-replayed", "true"));
    }
    response.body(saved.body_bytes())
}

/// RFC 9457 problem details, as the draft's own examples answer.
fn problem(status: StatusCode, detail: &str) -> HttpResponse {
    let body =
        json!({"title": status.canonical_reason(), "status": status.as_u16(), "detail": detail});
    let content_type = (header::CONTENT_TYPE, "application/problem+json");
    HttpResponse::build(status)
        .insert_header(content_type)
        .body(body.to_string())
}

#[actix_web::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let manager = ConnectionManager::<PgConnection>::new(std::env::var("DATABASE_URL")?);
    let pool = Pool::builder().max_size(10).build(manager)?;
    let mut conn = pool.get()?;
    let keys_exist =
        diesel::dsl::sql::<diesel::sql_types::Bool>("to_regclass('idempotency_keys') IS NOT NULL");
    if !diesel::select(keys_exist).get_result::<bool>(&mut conn)? {
        conn.batch_execute(idempotency::postgres::CREATE_TABLE)?;
    }
    conn.batch_execute(ORDERS_SQL)?;
    drop(conn);
    let tokens = std::env::var("SHOP_TOKENS").unwrap_or_default();
    let tokens = tokens.split(',').filter_map(|pair| pair.split_once('='));
    let tokens = tokens.map(|(token, id)| Ok((token.to_owned(), id.parse()?)));
    let tokens = tokens.collect::<Result<_, std::num::ParseIntError>>()?;
    let policy = Policy::new(Mode::Atomic);
    let shop = web::Data::new(Shop {
        pool,
        policy,
        tokens,
    });
    let port: u16 = std::env::var("PORT").map_or(Ok(0), |port| port.parse())?;
    let server = HttpServer::new(move || {
        App::new()
            .app_data(shop.clone())
            .route("/orders", web::post().to(create_order))
            .route("/orders", web::get().to(list_orders))
    })
    .bind(("127.0.0.1", port))?;
    println!("shop listening on http://{}", server.addrs()[0]);
    Ok(server.run().await?)
}
