//! Webhook endpoints and events for the delivery tests, written with SQL as
//! the API will write them: `add_endpoint` as `POST /webhook_endpoints`
//! (a `whsec_` secret, every event type), `rotate_secret` as its rotation
//! (the previous secret kept for an hour), `add_event` as the outbox (the
//! event row and one pending delivery, due now, per enabled endpoint of
//! the account). Once those routes exist, these become calls to them.

use uuid::Uuid;

use super::db::{TestDatabase, at};

/// The id of the account named `name`.
pub fn account_id(db: &TestDatabase, name: &str) -> i64 {
    let ids = db.strings(&format!(
        "SELECT CAST(id AS TEXT) AS value FROM accounts WHERE name = '{}'",
        name.replace('\'', "''")
    ));
    ids[0].parse().unwrap()
}

/// A new random signing secret, `whsec_…`, as registration makes one.
pub use charges::http::webhooks::endpoints::new_secret;

/// An enabled endpoint of the account at `url` for every event type; its
/// id and signing secret.
pub fn add_endpoint(db: &TestDatabase, account_id: i64, url: &str) -> (Uuid, String) {
    let (id, secret) = (Uuid::new_v4(), new_secret());
    db.execute(&format!(
        "INSERT INTO webhook_endpoints (id, account_id, url, enabled_events, secret, status, created_at) \
         VALUES ('{id}', {account_id}, '{}', '[\"*\"]', '{secret}', 'enabled', {})",
        url.replace('\'', "''"),
        at(db.backend(), 0)
    ));
    (id, secret)
}

/// Rotates the endpoint's secret: the new one, the old kept for an hour.
pub fn rotate_secret(db: &TestDatabase, endpoint: Uuid) -> String {
    let secret = new_secret();
    db.execute(&format!(
        "UPDATE webhook_endpoints SET previous_secret = secret, secret = '{secret}', \
         previous_secret_expires_at = {} WHERE id = '{endpoint}'",
        at(db.backend(), 3600)
    ));
    secret
}

/// A `charge.succeeded` event of the account and its pending deliveries,
/// as the outbox writes them in the charge's transaction; its id.
pub fn add_event(db: &TestDatabase, account_id: i64) -> Uuid {
    let id = Uuid::new_v4();
    let now = at(db.backend(), 0);
    db.execute(&format!(
        "INSERT INTO events (id, account_id, type, data, created_at) VALUES \
         ('{id}', {account_id}, 'charge.succeeded', \
          '{{\"id\":\"{}\",\"object\":\"charge\",\"amount\":500,\"currency\":\"jpy\"}}', {now})",
        Uuid::new_v4()
    ));
    // A SELECT's literal is text, which PostgreSQL casts to UUID only if asked.
    let event = match db.backend() {
        super::TestBackend::Postgres => format!("CAST('{id}' AS uuid)"),
        super::TestBackend::Sqlite => format!("'{id}'"),
    };
    db.execute(&format!(
        "INSERT INTO webhook_deliveries \
         (event_id, endpoint_id, account_id, status, attempts, next_attempt_at, created_at) \
         SELECT {event}, id, account_id, 'pending', 0, {now}, {now} FROM webhook_endpoints \
         WHERE account_id = {account_id} AND status = 'enabled'"
    ));
    id
}

/// `evt_…`, the event's id as the API and `webhook-id` write it.
pub fn public_id(id: Uuid) -> String {
    format!("evt_{id}")
}
