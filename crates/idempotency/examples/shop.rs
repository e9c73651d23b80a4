//! A shop with one keyed `POST /orders`, on actix-web and Diesel
//! (PostgreSQL), using nothing of this workspace but the `idempotency`
//! crate: the article's one transaction (register the key, insert the
//! order, store the 201) through `Policy::execute`.
//!
//! ```text
//! DATABASE_URL=postgres://postgres@127.0.0.1/shop SHOP_TOKENS=tok_a=1,tok_b=2 PORT=0 \
//!   cargo run -p idempotency --example shop --features actix,r2d2
//! ```
//!
//! It creates its tables if they are missing and prints the address it
//! listens on. `SHOP_TOKENS` maps bearer tokens to account ids (keys are
//! scoped per account); `GET /orders` lists the caller's orders, newest first.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use actix_web::http::{StatusCode, header};
use actix_web::{App, HttpRequest, HttpResponse, HttpServer, Responder, ResponseError, web};
use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::r2d2::{ConnectionManager, Pool};
use idempotency::{
    IdempotencyKey, KeyedRequest, Mode, Operation, Policy, PoolConnections, SavedResponse,
};
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
        Ok(SavedResponse::json(201, Some(location), self.0.json()))
    }
}

struct Shop {
    pool: PgPool,
    policy: Policy,
    tokens: HashMap<String, i64>,
}

/// The shop's own errors, as RFC 9457 problem details (as the crate
/// answers a mismatch or a key in flight).
fn problem(status: StatusCode, detail: &str) -> HttpResponse {
    let body =
        json!({"title": status.canonical_reason(), "status": status.as_u16(), "detail": detail});
    HttpResponse::build(status)
        .content_type("application/problem+json")
        .body(body.to_string())
}

async fn create_order(req: HttpRequest, body: web::Bytes, shop: web::Data<Shop>) -> HttpResponse {
    let Some(account_id) = authenticate(&req, &shop) else {
        return problem(StatusCode::UNAUTHORIZED, NO_TOKEN);
    };
    let key = match IdempotencyKey::from_headers(req.headers()) {
        Ok(Some(key)) => key,
        Ok(None) => return problem(StatusCode::BAD_REQUEST, "Send an Idempotency-Key."),
        Err(e) => return e.error_response(),
    };
    // Refused before the key is registered: the corrected request may reuse it.
    let body: Value = serde_json::from_slice(&body).unwrap_or_default();
    let Some(order) = parse_order(&body, account_id) else {
        return problem(StatusCode::BAD_REQUEST, "Send {item, amount > 0, note}.");
    };
    let path = req.path().to_owned();
    // Diesel blocks: off the async workers.
    let outcome = web::block(move || {
        // Fingerprinted as received, kept for recovery as routed.
        let request =
            KeyedRequest::new(account_id, key.as_str(), "POST", &path, &body).routed_as("/orders");
        let until = Instant::now() + Duration::from_secs(30);
        let mut connections = PoolConnections::new(&shop.pool, until);
        shop.policy
            .execute(&mut connections, &request, &mut CreateOrder(order))
    })
    .await;
    match outcome {
        Ok(Ok(outcome)) => outcome.respond_to(&req),
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
