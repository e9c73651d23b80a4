//! The `events` and `webhook_endpoints` tables, and the `webhook_deliveries`
//! rows an event owes (issue #48), written once for both backends as
//! `store::tables` writes the others: [`webhook_store!`] is the body of one
//! [`WebhookStore`] impl, instantiated by each backend's `mod.rs`.
//!
//! The outbox: [`WebhookStore::write_event`] runs in the transaction that
//! writes the charge or refund the event describes, so the event and its
//! deliveries commit with it or not at all. The sender (another file) reads
//! and updates the deliveries; this one only creates them.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{Page, QueryResult};

/// Most endpoints an account may have.
pub const MAX_ENDPOINTS: i64 = 16;

/// An event as stored: `data` is the object's JSON text, kept byte for byte.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub id: Uuid,
    pub account_id: i64,
    /// One of `payments::events::TYPES`.
    pub event_type: String,
    pub data: String,
    pub created_at: DateTime<Utc>,
}

impl Event {
    /// A new event of `event_type` about `data` (the object's JSON text),
    /// made now.
    pub fn new(account_id: i64, event_type: &str, data: String) -> Event {
        Event {
            id: Uuid::new_v4(),
            account_id,
            event_type: event_type.to_owned(),
            data,
            created_at: super::now_micros(),
        }
    }

    /// Its JSON, the bytes `GET /events/{id}` answers and every delivery
    /// sends (`payments::events::body`).
    pub fn body(&self) -> String {
        crate::payments::events::body(
            &self.id,
            &self.event_type,
            &super::time_text(self.created_at),
            &self.data,
        )
    }
}

/// A webhook endpoint as stored. Its secrets are `whsec_…` text; `Debug`
/// never shows them.
#[derive(Clone, PartialEq)]
pub struct Endpoint {
    pub id: Uuid,
    pub account_id: i64,
    pub url: String,
    pub description: Option<String>,
    /// Event types, or `["*"]`.
    pub enabled_events: Vec<String>,
    pub secret: String,
    /// The secret before the last rotation, signing too until it expires.
    pub previous_secret: Option<String>,
    pub previous_secret_expires_at: Option<DateTime<Utc>>,
    /// `enabled` or `disabled`.
    pub status: String,
    pub disabled_reason: Option<String>,
    pub created_at: DateTime<Utc>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("id", &self.id)
            .field("account_id", &self.account_id)
            .field("url", &self.url)
            .field("enabled_events", &self.enabled_events)
            .field("status", &self.status)
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    /// Whether it is sent events of this type.
    pub fn subscribed(&self, event_type: &str) -> bool {
        self.enabled_events
            .iter()
            .any(|t| t == "*" || t == event_type)
    }
}

/// The secrets an endpoint's deliveries are signed with (and a receiver
/// checks): the current one, and the previous one while its rotation's
/// grace lasts.
pub fn signing_secrets<'a>(
    secret: &'a str,
    previous: Option<&'a str>,
    previous_expires_at: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Vec<&'a str> {
    let previous = previous.filter(|_| previous_expires_at.is_some_and(|until| until > now));
    std::iter::once(secret).chain(previous).collect()
}

/// The enabled_events column: a JSON array of strings.
pub fn events_text(types: &[String]) -> String {
    serde_json::to_string(types).expect("strings serialize")
}

/// The enabled_events column's value.
pub fn parse_events(text: &str) -> QueryResult<Vec<String>> {
    serde_json::from_str(text).map_err(|e| diesel::result::Error::DeserializationError(Box::new(e)))
}

/// The `events` and `webhook_endpoints` tables, and the deliveries an
/// event owes.
pub trait WebhookStore {
    /// The outbox: inserts the event and one pending delivery (attempts 0,
    /// due now) per enabled endpoint of its account subscribed to its type.
    /// Two statements; call it in the transaction that writes what the
    /// event describes.
    fn write_event(&mut self, event: &Event) -> QueryResult<()>;
    fn find_event(&mut self, account_id: i64, id: Uuid) -> QueryResult<Option<Event>>;
    /// One page of the account's events, newest first; `page.status` is
    /// the type to keep, if any.
    fn list_events(&mut self, account_id: i64, page: &Page) -> QueryResult<Vec<Event>>;

    /// Inserts an endpoint as given (the demo's own receiver is inserted
    /// with this too). No limit is checked: see [`Self::lock_endpoints`].
    fn insert_endpoint(&mut self, endpoint: &Endpoint) -> QueryResult<()>;
    /// Locks the account's row for the rest of the transaction (PostgreSQL
    /// `FOR NO KEY UPDATE`, which charges' foreign keys do not wait on;
    /// SQLite's transactions already hold the one write lock) and counts its
    /// endpoints: two registrations at once count one after the other.
    fn lock_endpoints(&mut self, account_id: i64) -> QueryResult<i64>;
    fn find_endpoint(&mut self, account_id: i64, id: Uuid) -> QueryResult<Option<Endpoint>>;
    /// One page of the account's endpoints, newest first.
    fn list_endpoints(&mut self, account_id: i64, page: &Page) -> QueryResult<Vec<Endpoint>>;
    /// Deletes the endpoint (its deliveries and their attempts go with it:
    /// the foreign keys cascade); whether there was one.
    fn delete_endpoint(&mut self, account_id: i64, id: Uuid) -> QueryResult<bool>;
    /// Makes `secret` the endpoint's, keeping the one it had as the
    /// previous secret until `previous_until`; the endpoint after it.
    fn rotate_endpoint_secret(
        &mut self,
        account_id: i64,
        id: Uuid,
        secret: &str,
        previous_until: DateTime<Utc>,
    ) -> QueryResult<Option<Endpoint>>;

    /// Deletes every webhook row of the account: attempts, deliveries,
    /// endpoints and events, in that order (each points at the next). For
    /// whatever deletes an account (the demo's sandboxes).
    fn delete_account_webhooks(&mut self, account_id: i64) -> QueryResult<()>;

    /// Deletes the events about one charge (their deliveries and attempts
    /// cascade): the demo's `forget-commit`, a database losing the charge's
    /// commit, loses them with it. How many.
    fn forget_charge_events(&mut self, account_id: i64, charge_id: Uuid) -> QueryResult<usize>;
}

/// `impl WebhookStore for $conn`, over the tables it is given: `events`,
/// `webhook_attempts`, `webhook_deliveries` and `webhook_endpoints`, in this
/// order; `$id_sql` is a UUID column's SQL type in their schema.
macro_rules! webhook_store {
    ($conn:ty, $backend:ty, $id_sql:ty, $events:ident, $attempts:ident, $deliveries:ident, $endpoints:ident) => {
        use diesel::prelude::*;
        use uuid::Uuid;
        use $crate::store::tables::Dialect;
        use $crate::store::webhooks::{Endpoint, Event, events_text};
        use $crate::store::{Cursor, Page, QueryResult};

        type D = $conn;
        type Id = <D as Dialect>::Id;
        type Time = <D as Dialect>::Time;

        #[derive(Queryable, Selectable)]
        #[diesel(table_name = $events, check_for_backend($backend))]
        struct EventRow {
            id: Id,
            account_id: i64,
            event_type: String,
            data: String,
            created_at: Time,
        }

        impl EventRow {
            fn decode(self) -> QueryResult<Event> {
                Ok(Event {
                    id: D::decode_id(self.id)?,
                    account_id: self.account_id,
                    event_type: self.event_type,
                    data: self.data,
                    created_at: D::decode_time(self.created_at)?,
                })
            }
        }

        #[derive(Queryable, Selectable)]
        #[diesel(table_name = $endpoints, check_for_backend($backend))]
        struct EndpointRow {
            id: Id,
            account_id: i64,
            url: String,
            description: Option<String>,
            enabled_events: String,
            secret: String,
            previous_secret: Option<String>,
            previous_secret_expires_at: Option<Time>,
            status: String,
            disabled_reason: Option<String>,
            created_at: Time,
        }

        impl EndpointRow {
            fn decode(self) -> QueryResult<Endpoint> {
                Ok(Endpoint {
                    id: D::decode_id(self.id)?,
                    account_id: self.account_id,
                    url: self.url,
                    description: self.description,
                    enabled_events: $crate::store::webhooks::parse_events(&self.enabled_events)?,
                    secret: self.secret,
                    previous_secret: self.previous_secret,
                    previous_secret_expires_at: self
                        .previous_secret_expires_at
                        .map(D::decode_time)
                        .transpose()?,
                    status: self.status,
                    disabled_reason: self.disabled_reason,
                    created_at: D::decode_time(self.created_at)?,
                })
            }
        }

        impl $crate::store::webhooks::WebhookStore for $conn {
            fn write_event(&mut self, event: &Event) -> QueryResult<()> {
                D::cached(diesel::insert_into($events::table).values((
                    $events::id.eq(D::encode_id(event.id)),
                    $events::account_id.eq(event.account_id),
                    $events::event_type.eq(&event.event_type),
                    $events::data.eq(&event.data),
                    $events::created_at.eq(D::encode_time(event.created_at)),
                )))
                .execute(self)
                .inspect_err(D::note)?;
                // One INSERT … SELECT: the subscribed endpoints' deliveries.
                // enabled_events is a JSON array of known types (checked at
                // registration), so a quoted type matches only itself.
                let quoted = format!("%{}%", serde_json::Value::from(event.event_type.as_str()));
                let subscribed = $endpoints::table
                    .filter($endpoints::account_id.eq(event.account_id))
                    .filter($endpoints::status.eq("enabled"))
                    .filter(
                        $endpoints::enabled_events
                            .eq(r#"["*"]"#)
                            .or($endpoints::enabled_events.like(quoted)),
                    )
                    .select((
                        D::encode_id(event.id).into_sql::<$id_sql>(),
                        $endpoints::id,
                        $endpoints::account_id,
                        D::clock().nullable(),
                        D::clock(),
                    ));
                diesel::insert_into($deliveries::table)
                    .values(subscribed)
                    .into_columns((
                        $deliveries::event_id,
                        $deliveries::endpoint_id,
                        $deliveries::account_id,
                        $deliveries::next_attempt_at,
                        $deliveries::created_at,
                    ))
                    .execute(self)
                    .inspect_err(D::note)
                    .map(|_| ())
            }

            fn find_event(&mut self, account_id: i64, id: Uuid) -> QueryResult<Option<Event>> {
                $events::table
                    .filter($events::id.eq(D::encode_id(id)))
                    .filter($events::account_id.eq(account_id))
                    .select(EventRow::as_select())
                    .first(self)
                    .inspect_err(D::note)
                    .optional()?
                    .map(EventRow::decode)
                    .transpose()
            }

            fn list_events(&mut self, account_id: i64, page: &Page) -> QueryResult<Vec<Event>> {
                let mut query = $events::table
                    .filter($events::account_id.eq(account_id))
                    .select(EventRow::as_select())
                    .limit(page.limit + 1)
                    .into_boxed();
                if let Some(event_type) = page.status {
                    query = query.filter($events::event_type.eq(event_type));
                }
                query = $crate::store::tables::keyset!(query, page.cursor, $events);
                query
                    .load(self)
                    .inspect_err(D::note)?
                    .into_iter()
                    .map(EventRow::decode)
                    .collect()
            }

            fn insert_endpoint(&mut self, e: &Endpoint) -> QueryResult<()> {
                diesel::insert_into($endpoints::table)
                    .values((
                        $endpoints::id.eq(D::encode_id(e.id)),
                        $endpoints::account_id.eq(e.account_id),
                        $endpoints::url.eq(&e.url),
                        $endpoints::description.eq(e.description.as_deref()),
                        $endpoints::enabled_events.eq(events_text(&e.enabled_events)),
                        $endpoints::secret.eq(&e.secret),
                        $endpoints::previous_secret.eq(e.previous_secret.as_deref()),
                        $endpoints::previous_secret_expires_at
                            .eq(e.previous_secret_expires_at.map(D::encode_time)),
                        $endpoints::status.eq(&e.status),
                        $endpoints::disabled_reason.eq(e.disabled_reason.as_deref()),
                        $endpoints::created_at.eq(D::encode_time(e.created_at)),
                    ))
                    .execute(self)
                    .inspect_err(D::note)
                    .map(|_| ())
            }

            fn lock_endpoints(&mut self, account_id: i64) -> QueryResult<i64> {
                D::lock_account(self, account_id).inspect_err(D::note)?;
                $endpoints::table
                    .filter($endpoints::account_id.eq(account_id))
                    .count()
                    .get_result(self)
                    .inspect_err(D::note)
            }

            fn find_endpoint(
                &mut self,
                account_id: i64,
                id: Uuid,
            ) -> QueryResult<Option<Endpoint>> {
                $endpoints::table
                    .filter($endpoints::id.eq(D::encode_id(id)))
                    .filter($endpoints::account_id.eq(account_id))
                    .select(EndpointRow::as_select())
                    .first(self)
                    .inspect_err(D::note)
                    .optional()?
                    .map(EndpointRow::decode)
                    .transpose()
            }

            fn list_endpoints(
                &mut self,
                account_id: i64,
                page: &Page,
            ) -> QueryResult<Vec<Endpoint>> {
                let mut query = $endpoints::table
                    .filter($endpoints::account_id.eq(account_id))
                    .select(EndpointRow::as_select())
                    .limit(page.limit + 1)
                    .into_boxed();
                query = $crate::store::tables::keyset!(query, page.cursor, $endpoints);
                query
                    .load(self)
                    .inspect_err(D::note)?
                    .into_iter()
                    .map(EndpointRow::decode)
                    .collect()
            }

            fn delete_endpoint(&mut self, account_id: i64, id: Uuid) -> QueryResult<bool> {
                diesel::delete(
                    $endpoints::table
                        .filter($endpoints::id.eq(D::encode_id(id)))
                        .filter($endpoints::account_id.eq(account_id)),
                )
                .execute(self)
                .inspect_err(D::note)
                .map(|n| n > 0)
            }

            fn rotate_endpoint_secret(
                &mut self,
                account_id: i64,
                id: Uuid,
                secret: &str,
                previous_until: chrono::DateTime<chrono::Utc>,
            ) -> QueryResult<Option<Endpoint>> {
                // The SET's right-hand sides read the row as it was: the
                // old secret becomes the previous one.
                diesel::update(
                    $endpoints::table
                        .filter($endpoints::id.eq(D::encode_id(id)))
                        .filter($endpoints::account_id.eq(account_id)),
                )
                .set((
                    $endpoints::previous_secret.eq($endpoints::secret.nullable()),
                    $endpoints::previous_secret_expires_at.eq(Some(D::encode_time(previous_until))),
                    $endpoints::secret.eq(secret),
                ))
                .returning(EndpointRow::as_returning())
                .get_result(self)
                .inspect_err(D::note)
                .optional()?
                .map(EndpointRow::decode)
                .transpose()
            }

            fn forget_charge_events(
                &mut self,
                account_id: i64,
                charge_id: Uuid,
            ) -> QueryResult<usize> {
                // `data` is the charge's compact JSON: its id is `"id":"…"`.
                let about = format!("%\"id\":\"{}\"%", charge_id.hyphenated());
                diesel::delete(
                    $events::table
                        .filter($events::account_id.eq(account_id))
                        .filter($events::data.like(about)),
                )
                .execute(self)
                .inspect_err(D::note)
            }

            fn delete_account_webhooks(&mut self, account_id: i64) -> QueryResult<()> {
                let own = $deliveries::table
                    .filter($deliveries::account_id.eq(account_id))
                    .select($deliveries::event_id);
                diesel::delete($attempts::table.filter($attempts::event_id.eq_any(own)))
                    .execute(self)
                    .inspect_err(D::note)?;
                diesel::delete($deliveries::table.filter($deliveries::account_id.eq(account_id)))
                    .execute(self)
                    .inspect_err(D::note)?;
                diesel::delete($endpoints::table.filter($endpoints::account_id.eq(account_id)))
                    .execute(self)
                    .inspect_err(D::note)?;
                diesel::delete($events::table.filter($events::account_id.eq(account_id)))
                    .execute(self)
                    .inspect_err(D::note)
                    .map(|_| ())
            }
        }
    };
}

pub(super) use webhook_store;
