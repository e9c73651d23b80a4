//! The charge endpoints. `POST /charges` parses the request into a
//! `NewCharge`, then runs creating it under the request's `Idempotency-Key`
//! with the protocol, or plainly when there is none. `PUT
//! /charges/{id}/description` is idempotent by nature: it sets the whole
//! value, so repeating it changes nothing and it needs no key.

use std::sync::Arc;

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use crate::http::paging::ListRequest;
use crate::http::problem::{ApiError, CARD_DECLINED, Problem, saved_problem};
use crate::http::requests::{self, JsonRequest, KeyUse, record_outcome, respond};
use crate::http::schemas::{
    self, ChargeId, ChargeRequestBody, ChargeStatus, DescriptionBody, KeyParam, ListCursor,
};
use crate::http::state::AppState;
use crate::network_client::{self, NetworkClient};
use crate::payments::domain::{Description, NewCharge, NewDescription};
use crate::payments::events;
use crate::payments::methods::{self, Decline};
use crate::store::{
    AccountStore, Charge, ChargeStore, Checkouts, Event, WebhookStore, now_micros, time_text,
};
use crate::store::{RequestHooks, write_alone};
use idempotency::{self, IdempotencyKey, Operation, SavedResponse};

pub const PATH: &str = "/charges";

/// Creating a charge, as an operation under a key. Its id and time are
/// chosen before anything is written. Without a card network its answer is
/// known then too (the 201, or the 402 of a declining test payment method),
/// so it announces its response: the atomic design writes the key row
/// completed in the statement that registers the key. With a network, the
/// network decides: the 201 carries its authorization, or the 402 its
/// decline, known only once it answered: asking it is the operation's
/// foreign step. Either way the charge is written, failed or not: a decline
/// is a result, stored under the key and replayed like a 201.
pub struct CreateCharge {
    pub charge: Charge,
    pub response: SavedResponse,
    /// The network to ask first, with the key to ask under.
    network: Option<NetworkCall>,
    /// Whether [`run`](Operation::run) checks first that the account may
    /// still act: when the charge is made long after its request was
    /// authenticated (after the network's answer; by the recovery task).
    check_account: bool,
}

/// The charge's foreign step: one call to the card network, the faults
/// injected around it, and what it decided.
struct NetworkCall {
    client: Arc<NetworkClient>,
    key: String,
    hooks: RequestHooks,
    amount: i64,
    currency: String,
    payment_method: String,
    authorized: Option<Uuid>,
    declined: Option<Decline>,
}

impl CreateCharge {
    pub fn new(account_id: i64, new: &NewCharge) -> CreateCharge {
        let charge = Charge {
            id: Uuid::new_v4(),
            account_id,
            amount: new.amount.get(),
            amount_refunded: 0,
            currency: new.currency.code().to_owned(),
            description: new.description.as_ref().map(|d| d.as_str().to_owned()),
            created_at: now_micros(),
            authorization_id: None,
            payment_method: new.payment_method.id.to_owned(),
            failure_code: new.payment_method.decline_code().map(str::to_owned),
        };
        let response = answer(&charge);
        CreateCharge {
            charge,
            response,
            network: None,
            check_account: false,
        }
    }

    /// Checks that the account may still act before the charge is written
    /// (the recovery task's charges; any charge with a network).
    pub fn checking_account(mut self) -> CreateCharge {
        self.check_account = true;
        self
    }

    /// Asks `network` to authorize the charge first, under the key derived
    /// from the client's (`key`), or, for a charge without one, from the
    /// charge's own id.
    pub fn through(
        mut self,
        network: Option<Arc<NetworkClient>>,
        key: Option<&str>,
        hooks: RequestHooks,
    ) -> CreateCharge {
        self.network = network.map(|client| {
            let derived = match key {
                Some(key) => network_client::derived_key(self.charge.account_id, key),
                None => network_client::key_for_charge(self.charge.id),
            };
            NetworkCall {
                client,
                key: derived,
                hooks,
                amount: self.charge.amount,
                currency: self.charge.currency.clone(),
                payment_method: self.charge.payment_method.clone(),
                authorized: None,
                declined: None,
            }
        });
        if self.network.is_some() {
            // The network decides whether the card declines, not we.
            self.charge.failure_code = None;
            self.response = answer(&self.charge);
        }
        self.check_account |= self.network.is_some();
        self
    }

    /// The charge as the network's answer makes it: with its authorization,
    /// or failed with its decline.
    fn authorized(&mut self) {
        let Some(call) = &self.network else { return };
        let failure = call.declined.map(|d| d.code.to_owned());
        if self.charge.authorization_id != call.authorized || self.charge.failure_code != failure {
            self.charge.authorization_id = call.authorized;
            self.charge.failure_code = failure;
            self.response = answer(&self.charge);
        }
    }

    /// Without a key: the network first (if any), holding no connection,
    /// then one INSERT on a connection checked out for it alone. A slow
    /// network must not hold a pooled connection (issue #38: 40 keyless
    /// charges on a 1 s network took the whole pool from every account).
    fn run_unkeyed(
        &mut self,
        checkouts: &mut Checkouts,
        hooks: &RequestHooks,
    ) -> Result<SavedResponse, ApiError> {
        if let Some(call) = &mut self.network {
            call.call()?;
        }
        self.authorized();
        let check_account = self.check_account;
        let charge = &self.charge;
        let event = charge_event(charge);
        // One transaction: the charge and its event (the outbox) commit
        // together or not at all.
        let inserted = checkouts.with(|store| {
            store.transaction(|tx| -> Result<bool, ApiError> {
                // The network answered long after the request was
                // authenticated: the account must still be live when the
                // charge is written, as for a keyed charge's phase 3.
                if check_account && !tx.account_is_live(charge.account_id)? {
                    return Ok(false);
                }
                tx.insert_charge(charge)?;
                tx.write_event(&event)?;
                hooks.before_commit()?;
                Ok(true)
            })
        })?;
        if inserted {
            return Ok(self.response.clone());
        }
        // Refused: the authorization is given up, with no connection held.
        let refused = crate::http::problem::saved(
            &crate::http::problem::ACCOUNT_REVOKED,
            "This account was revoked while the card network was asked to authorize this charge, so it was not charged, and the network's authorization was voided.",
        );
        if let Some(call) = &mut self.network
            && let Err(e) = call.settle(&refused)
        {
            tracing::error!(error = %e, account = self.charge.account_id, "could not void the authorization of a refused charge; void it by hand");
        }
        Ok(refused)
    }
}

/// The one check of an account's liveness a keyed operation makes when it
/// runs long after its request was authenticated (by the recovery task; a
/// charge after the network's answer): `Some` stored 403 ([`revoked`]) if
/// the account may no longer act.
pub fn refused<Tx: AccountStore + ?Sized>(
    tx: &mut Tx,
    account_id: i64,
) -> Result<Option<SavedResponse>, idempotency::Error> {
    Ok((!tx.account_is_live(account_id)?).then(revoked))
}

/// The stored, final answer to a keyed request whose account was revoked
/// before it was completed (it is not completed).
pub fn revoked() -> SavedResponse {
    crate::http::problem::saved(
        &crate::http::problem::ACCOUNT_REVOKED,
        "This account was revoked before the request was completed, so it was not: nothing was charged or refunded, and an authorization the card network had made for it was voided. This answer is stored for this Idempotency-Key.",
    )
}

/// A charge's answer, as stored and replayed: its 201, or the 402 of its
/// decline.
fn answer(charge: &Charge) -> SavedResponse {
    match charge.failure_code.as_deref().and_then(methods::decline) {
        None => SavedResponse::json(
            StatusCode::CREATED.as_u16(),
            Some(format!("{PATH}/{}", charge.id)),
            charge_json(charge),
        ),
        Some(decline) => saved_problem(Problem {
            decline_code: Some(decline.code),
            charge: Some(charge.id),
            ..Problem::new(
                &CARD_DECLINED,
                format!(
                    "{} The charge {} failed ({}): it is recorded with `status: failed`, and nothing was charged. This answer is final: a retry with the same Idempotency-Key replays it. To try again, with another payment method or the same one, send a new Idempotency-Key.",
                    decline.message, charge.id, decline.code
                ),
            )
        }),
    }
}

/// With a network, the authorization is the operation's foreign step: the
/// protocol asks for it between its phases, holding no connection, and
/// then runs [`run`](Operation::run), the INSERT, in the transaction that
/// stores the response.
impl<Tx: ChargeStore + AccountStore + WebhookStore + ?Sized> Operation<Tx> for CreateCharge {
    fn run(&mut self, tx: &mut Tx) -> Result<SavedResponse, idempotency::Error> {
        if self.check_account
            && let Some(refused) = refused(tx, self.charge.account_id)?
        {
            return Ok(refused);
        }
        self.authorized();
        tx.insert_charge(&self.charge)?;
        tx.write_event(&charge_event(&self.charge))?;
        Ok(self.response.clone())
    }

    fn known_response(&self) -> Option<&SavedResponse> {
        (!self.check_account).then_some(&self.response)
    }

    fn foreign_step(&self) -> Option<&str> {
        self.network.as_ref().map(|call| call.client.identity())
    }

    fn call(&mut self) -> Result<(), idempotency::Error> {
        self.network.as_mut().map_or(Ok(()), NetworkCall::call)
    }

    fn settle(&mut self, stored: &SavedResponse) -> Result<(), idempotency::Error> {
        let network = self.network.as_mut();
        network.map_or(Ok(()), |call| call.settle(stored))
    }
}

/// Asked under the same key every time: a retry of ours is the network's
/// replay.
impl NetworkCall {
    fn call(&mut self) -> Result<(), idempotency::Error> {
        let injected = |f| idempotency::Error::Hook(Box::new(f));
        self.hooks.before_remote_call().map_err(injected)?;
        let answer = self
            .client
            .authorize(&self.key, self.amount, &self.currency, &self.payment_method)
            .map_err(|e| match e {
                network_client::NetworkError::KeyReused => idempotency::Error::DependencyKeyReused,
                e => idempotency::Error::Dependency(e.to_string()),
            })?;
        self.hooks.after_remote_call().map_err(injected)?;
        match answer {
            network_client::Answer::Authorized(a) => self.authorized = Some(a.id),
            network_client::Answer::Declined(d) => self.declined = Some(d),
        }
        Ok(())
    }

    /// Voids the authorization when the answer stored is not the charge's
    /// 201 (its account was revoked meanwhile): no charge will ever own it.
    fn settle(&mut self, stored: &SavedResponse) -> Result<(), idempotency::Error> {
        let (false, Some(id)) = (
            stored.status == StatusCode::CREATED.as_u16(),
            self.authorized,
        ) else {
            return Ok(());
        };
        self.client
            .void(id)
            .map_err(|e| idempotency::Error::Dependency(e.to_string()))
    }
}

/// The parsed body of `POST /charges`.
pub fn parse_new_charge(body: &Value) -> Result<NewCharge, ApiError> {
    NewCharge::parse(body).map_err(|errors| ApiError::InvalidRequest {
        detail: "The charge has invalid fields; see `errors`.".to_owned(),
        errors,
    })
}

/// Create a charge. With an `Idempotency-Key`, at most once per key.
#[utoipa::path(
    post, path = "/charges", tag = "charges",
    request_body(content = ChargeRequestBody, content_type = "application/json"),
    params(KeyParam),
    responses(
        (status = 201, description = "Created now, or replayed from the key (then with `Idempotent-Replayed: true`); the replay is byte-identical.", body = ChargeView,
            headers(
                ("Location" = String, description = "`/charges/{id}`"),
                ("Idempotent-Replayed" = String, description = "`true` when this response was stored earlier for the same key and request"),
            )),
    ),
    security(("api_key" = []))
)]
pub async fn create(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let mut request = requests::read_json(&req, payload, &state, KeyUse::Read).await?;
    let mut create = CreateCharge::new(request.account_id, &parse_new_charge(&request.body)?)
        .through(
            state.network.clone(),
            request.key.as_ref().map(IdempotencyKey::as_str),
            request.hooks.clone(),
        );
    match request.key.take() {
        Some(key) => requests::run_keyed(&req, &state, request, key, create).await,
        // No key: nothing can tell a retry from a new charge. One INSERT
        // (after the network's authorization, if there is a network).
        None => {
            let JsonRequest { hooks, .. } = request;
            let response = state
                .db_checkouts(&req, move |checkouts| create.run_unkeyed(checkouts, &hooks))
                .await?;
            record_outcome("no_key", "none");
            Ok(respond(&response, false))
        }
    }
}

/// A charge as the API shows it.
#[derive(Serialize, utoipa::ToSchema)]
pub struct ChargeView {
    pub id: Uuid,
    /// Always `"charge"`.
    #[schema(example = "charge")]
    pub object: &'static str,
    #[schema(schema_with = schemas::shown_amount)]
    pub amount: i64,
    #[schema(schema_with = schemas::amount_refunded)]
    pub amount_refunded: i64,
    /// The card network's authorization of it (`null` on a server without a network, and for a failed charge).
    pub authorization_id: Option<Uuid>,
    #[schema(example = "jpy")]
    pub currency: String,
    pub description: Option<String>,
    /// RFC 3339, UTC, microseconds.
    #[schema(example = "2026-12-02T14:47:33.173074Z")]
    pub created_at: String,
    /// The test payment method it was made with.
    #[schema(schema_with = schemas::payment_method_id)]
    pub payment_method: String,
    /// `failed`: the card was declined (the charge's `POST` answered 402); nothing was charged, and it cannot be refunded.
    #[schema(schema_with = schemas::charge_status)]
    pub status: &'static str,
    /// Why it failed: the decline code (`null` when it succeeded).
    #[schema(schema_with = schemas::failure_code)]
    pub failure_code: Option<String>,
    /// The decline's sentence for a customer (`null` when it succeeded).
    #[schema(example = json!(null))]
    pub failure_message: Option<&'static str>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct ChargeList {
    /// Always `"list"`.
    pub object: &'static str,
    /// Always `"/charges"`.
    pub url: &'static str,
    /// Whether there are more beyond this page, in the direction paged: older ones after `starting_after` (or without a cursor), newer ones before `ending_before`.
    pub has_more: bool,
    /// Newest first.
    pub data: Vec<ChargeView>,
}

impl From<&Charge> for ChargeView {
    fn from(charge: &Charge) -> Self {
        ChargeView {
            id: charge.id,
            object: "charge",
            amount: charge.amount,
            amount_refunded: charge.amount_refunded,
            authorization_id: charge.authorization_id,
            currency: charge.currency.clone(),
            description: charge.description.clone(),
            created_at: time_text(charge.created_at),
            payment_method: charge.payment_method.clone(),
            status: charge.status(),
            failure_code: charge.failure_code.clone(),
            failure_message: charge
                .failure_code
                .as_deref()
                .and_then(methods::decline)
                .map(|d| d.message),
        }
    }
}

/// The event a new charge is told by: `charge.succeeded`, or
/// `charge.failed` for a decline, about the charge as `GET /charges/{id}`
/// shows it. Written in the charge's transaction ([`WebhookStore::write_event`]).
pub fn charge_event(charge: &Charge) -> Event {
    let event_type = match charge.failure_code {
        None => events::CHARGE_SUCCEEDED,
        Some(_) => events::CHARGE_FAILED,
    };
    Event::new(
        charge.account_id,
        event_type,
        charge_json(charge).to_string(),
    )
}

pub fn charge_json(charge: &Charge) -> Value {
    serde_json::to_value(ChargeView::from(charge)).expect("a charge serializes")
}

/// A charge's id as its one URI spells it: lowercase, hyphenated, as it is
/// given out. Any other spelling, like a malformed id, names no charge.
pub fn charge_id(path: &str) -> Result<Uuid, ApiError> {
    crate::http::paging::plain_id(path).ok_or(ApiError::NotFound)
}

/// The caller's charges, newest first, a page at a time.
#[utoipa::path(
    get, path = "/charges", tag = "charges",
    params(
        ("limit" = Option<i64>, Query, description = "1 to 100, default 20", minimum = 1, maximum = 100),
        ("starting_after" = inline(Option<ListCursor>), Query, description = "The page after this charge (the last of the previous page): older ones. Not with `ending_before`."),
        ("ending_before" = inline(Option<ListCursor>), Query, description = "The page before this charge (the first of the next page): newer ones. Not with `starting_after`."),
        ("status" = inline(Option<ChargeStatus>), Query, description = "Only the charges of this status"),
    ),
    responses(
        (status = 200, body = ChargeList),
    ),
    security(("api_key" = []))
)]
pub async fn list(req: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let account_id = state.accounts.authenticate(&req, &state.pool).await?;
    // Read after authentication, so an unknown caller hears 401 first.
    let list = ListRequest::parse(req.query_string(), &["succeeded", "failed"])?;
    let (charges, has_more) = state
        .db(&req, move |store| {
            let page =
                list.page(|id| Ok(store.find_charge(account_id, id)?.map(|c| c.created_at)))?;
            Ok(list.finish(store.list_charges(account_id, &page)?))
        })
        .await?;
    Ok(HttpResponse::Ok().json(ChargeList {
        object: "list",
        url: PATH,
        has_more,
        data: charges.iter().map(ChargeView::from).collect(),
    }))
}

/// One of the caller's charges.
#[utoipa::path(
    get, path = "/charges/{id}", tag = "charges",
    params(("id" = inline(ChargeId), Path)),
    responses(
        (status = 200, body = ChargeView),
    ),
    security(("api_key" = []))
)]
pub async fn get(
    req: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let account_id = state.accounts.authenticate(&req, &state.pool).await?;
    let id = charge_id(&path)?;
    let charge = state
        .db(&req, move |store| Ok(store.find_charge(account_id, id)?))
        .await?
        .ok_or(ApiError::NotFound)?;
    Ok(HttpResponse::Ok().json(charge_json(&charge)))
}

/// Set a charge's description to the value sent: idempotent by nature (the
/// request carries the whole end state), so sending it again changes nothing
/// and it needs no `Idempotency-Key` (one sent is not read).
#[utoipa::path(
    put, path = "/charges/{id}/description", tag = "charges",
    params(("id" = inline(ChargeId), Path)),
    request_body(content = DescriptionBody, content_type = "application/json"),
    responses(
        (status = 200, description = "The charge, with the description as set", body = ChargeView),
    ),
    security(("api_key" = []))
)]
pub async fn set_description(
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let request = requests::read_json(&req, payload, &state, KeyUse::Ignored).await?;
    let id = charge_id(&path)?;
    let NewDescription(description) =
        NewDescription::parse(&request.body).map_err(|errors| ApiError::InvalidRequest {
            detail: "The description is invalid; see `errors`.".to_owned(),
            errors,
        })?;
    let (account_id, hooks) = (request.account_id, request.hooks);
    let charge = state
        .db(&req, move |store| {
            Ok(write_alone(store, &hooks, |s| {
                s.set_description(
                    account_id,
                    id,
                    description.as_ref().map(Description::as_str),
                )
            })?)
        })
        .await?
        .ok_or(ApiError::NotFound)?;
    Ok(HttpResponse::Ok().json(charge_json(&charge)))
}
