//! A shop's webhook receiver, on actix-web and Diesel (PostgreSQL), using
//! nothing of this workspace but the `idempotency` crate: an order is
//! marked paid once, however often its `charge.succeeded` arrives.
//!
//! ```text
//! DATABASE_URL=postgres://postgres@127.0.0.1/shop WEBHOOK_SECRETS=whsec_… PORT=0 \
//!   cargo run -p idempotency --example receiver --features actix
//! ```
//!
//! `WEBHOOK_SECRETS` holds the endpoint's signing secrets, space-separated:
//! the current one and, while a rotation lasts, the previous one. It
//! creates its tables if they are missing and prints the address it
//! listens on. `POST /orders {"id": "ord_1"}` opens an order; a
//! `charge.succeeded` whose charge's `description` is the order's id, sent
//! to `POST /webhooks`, pays it; `GET /orders/{id}` shows how many times it
//! was paid (1, or 0).

use std::net::SocketAddr;

use actix_web::dev::Server;
use actix_web::http::StatusCode;
use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::r2d2::{ConnectionManager, Pool};
use idempotency::webhook::{Headers, Received, Secret, receive, unix_now, verify_request};
use serde_json::{Value, json};

type PgPool = Pool<ConnectionManager<PgConnection>>;

/// The sender's name in the inbox (a receiver of several senders keeps
/// their event ids apart).
const SOURCE: &str = "charges";

diesel::table! {
    shop_orders (id) {
        id -> Text,
        // How often a payment was applied: 1 however often it was delivered.
        times_paid -> Int4,
        charge_id -> Nullable<Text>,
    }
}

const ORDERS_SQL: &str = "CREATE TABLE IF NOT EXISTS shop_orders (id TEXT PRIMARY KEY,
    times_paid INT NOT NULL DEFAULT 0, charge_id TEXT)";

pub struct Receiver {
    pool: PgPool,
    secrets: Vec<Secret>,
}

/// An error as RFC 9457 problem details, as the crate's own answers are.
fn problem(status: StatusCode, detail: &str) -> HttpResponse {
    let body =
        json!({"title": status.canonical_reason(), "status": status.as_u16(), "detail": detail});
    HttpResponse::build(status)
        .content_type("application/problem+json")
        .body(body.to_string())
}

async fn webhook(req: HttpRequest, body: web::Bytes, shop: web::Data<Receiver>) -> HttpResponse {
    // 1. Verify first: a forged, tampered or stale delivery is refused
    // before anything is recorded.
    let secrets: Vec<&Secret> = shop.secrets.iter().collect();
    let verified = Headers::from_actix(req.headers()).and_then(|headers| {
        verify_request(&secrets, &headers, &body, unix_now()).map(str::to_owned)
    });
    let event_id = match verified {
        Ok(id) => id,
        Err(e) => {
            let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::BAD_REQUEST);
            return problem(status, &e.to_string());
        }
    };
    let event: Value = serde_json::from_slice(&body).unwrap_or_default();
    if event["type"] != "charge.succeeded" {
        // Not an event this shop acts on: delivered, nothing to do.
        return HttpResponse::NoContent().finish();
    }
    let charge = &event["data"]["object"];
    let order = charge["description"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let charge_id = charge["id"].as_str().map(str::to_owned);
    // 2. The event's id and its effect in one transaction. Diesel blocks:
    // off the async workers.
    let done = web::block(move || {
        let mut pooled = shop.pool.get().map_err(|e| e.to_string())?;
        let conn: &mut PgConnection = &mut pooled;
        conn.transaction(|tx| {
            let received = receive(tx, SOURCE, &event_id)?;
            if received == Received::First {
                diesel::update(shop_orders::table.find(&order))
                    .set((
                        shop_orders::times_paid.eq(shop_orders::times_paid + 1),
                        shop_orders::charge_id.eq(&charge_id),
                    ))
                    .execute(tx)?;
            }
            Ok::<_, diesel::result::Error>(received)
        })
        .map_err(|e| e.to_string())
    })
    .await;
    // 3. 2xx for a duplicate too: its effect is done, the sender may stop.
    match done {
        Ok(Ok(Received::First)) => HttpResponse::Ok().json(json!({"received": "first"})),
        Ok(Ok(Received::Duplicate)) => HttpResponse::Ok().json(json!({"received": "duplicate"})),
        failed => {
            eprintln!("POST /webhooks: {failed:?}");
            // Nothing was recorded: the sender's retry is the first.
            problem(StatusCode::INTERNAL_SERVER_ERROR, "Not received; retry.")
        }
    }
}

async fn open_order(body: web::Json<Value>, shop: web::Data<Receiver>) -> HttpResponse {
    let Some(id) = body["id"]
        .as_str()
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
    else {
        return problem(StatusCode::BAD_REQUEST, "Send {\"id\": \"ord_…\"}.");
    };
    let opened = web::block(move || {
        let mut conn = shop.pool.get().map_err(|e| e.to_string())?;
        diesel::insert_into(shop_orders::table)
            .values(shop_orders::id.eq(&id))
            .on_conflict_do_nothing()
            .execute(&mut conn)
            .map_err(|e| e.to_string())
    })
    .await;
    match opened {
        Ok(Ok(_)) => HttpResponse::Created().finish(),
        failed => {
            eprintln!("POST /orders: {failed:?}");
            problem(
                StatusCode::INTERNAL_SERVER_ERROR,
                "The order was not opened.",
            )
        }
    }
}

async fn show_order(id: web::Path<String>, shop: web::Data<Receiver>) -> HttpResponse {
    let found = web::block(move || {
        let mut conn = shop.pool.get().map_err(|e| e.to_string())?;
        shop_orders::table
            .find(id.into_inner())
            .first::<(String, i32, Option<String>)>(&mut conn)
            .optional()
            .map_err(|e| e.to_string())
    })
    .await;
    match found {
        Ok(Ok(Some((id, times_paid, charge_id)))) => HttpResponse::Ok().json(
            json!({"id": id, "paid": times_paid > 0, "times_paid": times_paid, "charge_id": charge_id}),
        ),
        Ok(Ok(None)) => problem(StatusCode::NOT_FOUND, "No such order."),
        failed => {
            eprintln!("GET /orders: {failed:?}");
            problem(StatusCode::INTERNAL_SERVER_ERROR, "The order could not be read.")
        }
    }
}

/// The receiver on `database_url` (its tables created if missing),
/// listening on 127.0.0.1:`port` (0: any free port).
pub fn start(
    database_url: &str,
    secrets: Vec<Secret>,
    port: u16,
) -> Result<(Server, SocketAddr), Box<dyn std::error::Error>> {
    let pool = Pool::builder()
        .max_size(10)
        .build(ConnectionManager::<PgConnection>::new(database_url))?;
    let mut conn = pool.get()?;
    let inbox_exists =
        diesel::dsl::sql::<diesel::sql_types::Bool>("to_regclass('webhook_inbox') IS NOT NULL");
    if !diesel::select(inbox_exists).get_result::<bool>(&mut conn)? {
        conn.batch_execute(idempotency::webhook::POSTGRES_INBOX)?;
    }
    conn.batch_execute(ORDERS_SQL)?;
    drop(conn);
    let shop = web::Data::new(Receiver { pool, secrets });
    let server = HttpServer::new(move || {
        App::new()
            .app_data(shop.clone())
            .route("/webhooks", web::post().to(webhook))
            .route("/orders", web::post().to(open_order))
            .route("/orders/{id}", web::get().to(show_order))
    })
    .workers(2)
    .bind(("127.0.0.1", port))?;
    let addr = server.addrs()[0];
    Ok((server.run(), addr))
}

#[actix_web::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let secrets = std::env::var("WEBHOOK_SECRETS")?;
    let secrets = secrets.split_whitespace().map(Secret::parse);
    let secrets = secrets.collect::<Result<Vec<_>, _>>()?;
    let port: u16 = std::env::var("PORT").map_or(Ok(0), |port| port.parse())?;
    let (server, addr) = start(&std::env::var("DATABASE_URL")?, secrets, port)?;
    println!("receiver listening on http://{addr}");
    Ok(server.await?)
}
