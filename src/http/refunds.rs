//! Refunds: `POST /charges/{id}/refunds {"amount": n}` gives back part of a
//! charge. A refund is a delta ("refund 100"), so a retried one refunds again
//! unless it carries an `Idempotency-Key`: it is the protocol's second
//! operation, under the same `Policy::execute` as a charge.
//!
//! What it answers is stored under the key, whatever it is: the 201, or a
//! 400 `refund-exceeds-charge` when too little is left, or a 404 when the
//! account has no such charge. Once the operation has run against the
//! database, its answer is the key's, and a retry hears it again (Stripe
//! does the same). Only what is refused before it runs (authentication, the
//! headers, the body's validation) is not stored.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use serde::Serialize;
use uuid::Uuid;

use crate::http::charges::{PATH, charge_id, charge_json, refused};
use crate::http::paging::ListRequest;
use crate::http::problem::{
    ApiError, CHARGE_NOT_REFUNDABLE, NOT_FOUND, REFUND_EXCEEDS_CHARGE, saved,
};
use crate::http::requests::{self, KeyUse, record_outcome, respond};
use crate::http::state::AppState;
use crate::payments::domain::NewRefund;
use crate::payments::events::CHARGE_REFUNDED;
use crate::store::{
    AccountStore, ChargeStore, Event, Refund, RefundReservation, WebhookStore, now_micros,
    time_text,
};
use idempotency::{self, Operation, SavedResponse};

/// A refund as the API shows it.
#[derive(Serialize, utoipa::ToSchema)]
pub struct RefundView {
    pub id: Uuid,
    /// Always `"refund"`.
    #[schema(example = "refund")]
    pub object: &'static str,
    pub charge_id: Uuid,
    #[schema(schema_with = shown_amount)]
    pub amount: i64,
    #[schema(example = "jpy")]
    pub currency: String,
    /// RFC 3339, UTC, microseconds.
    #[schema(example = "2026-12-02T14:47:33.173074Z")]
    pub created_at: String,
}

impl From<&Refund> for RefundView {
    fn from(r: &Refund) -> Self {
        RefundView {
            id: r.id,
            object: "refund",
            charge_id: r.charge_id,
            amount: r.amount,
            currency: r.currency.clone(),
            created_at: time_text(r.created_at),
        }
    }
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct RefundList {
    /// Always `"list"`.
    pub object: &'static str,
    /// `/charges/{id}/refunds`.
    pub url: String,
    /// Whether there are more beyond this page, in the direction paged (as for charges).
    pub has_more: bool,
    /// Newest first.
    pub data: Vec<RefundView>,
}

/// The body of `POST /charges/{id}/refunds`. An unknown member, or a member given twice, is a 400.
#[derive(utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // Documentation only: parsed by `NewRefund::parse`.
pub struct RefundRequestBody {
    #[schema(schema_with = refund_amount)]
    amount: i64,
}

/// Refunding, as an operation under a key: its writes need the charges'
/// table only (and the accounts', to check one that the recovery task
/// finishes long after its request was authenticated).
pub(crate) struct CreateRefund {
    pub account_id: i64,
    pub charge: Uuid,
    pub amount: i64,
    pub check_account: bool,
}

impl<Tx: ChargeStore + AccountStore + WebhookStore + ?Sized> Operation<Tx> for CreateRefund {
    fn run(&mut self, tx: &mut Tx) -> Result<SavedResponse, idempotency::Error> {
        if self.check_account
            && let Some(refused) = refused(tx, self.account_id)?
        {
            return Ok(refused);
        }
        refund(tx, self.account_id, self.charge, self.amount)
    }
}

fn shown_amount() -> utoipa::openapi::schema::ObjectBuilder {
    let amount = crate::http::schemas::amount("In the charge's currency's minor unit.", 100);
    crate::http::schemas::shown(amount)
}

fn refund_amount() -> utoipa::openapi::schema::ObjectBuilder {
    crate::http::schemas::amount(
        "In the charge's currency's minor unit, a whole number as for a charge (`100.0` is 100, `99.99999999999999999` is a 400); more than is left of the charge is a 400 `refund-exceeds-charge`.",
        100,
    )
}

/// The refund operation: reserve the amount on the charge (one conditional
/// statement, so concurrent refunds never pass the charge's amount), then
/// record the refund and its event (`charge.refunded`, about the charge as
/// it is now), and answer.
pub(crate) fn refund(
    tx: &mut (impl ChargeStore + WebhookStore + ?Sized),
    account_id: i64,
    charge: Uuid,
    amount: i64,
) -> Result<SavedResponse, idempotency::Error> {
    Ok(match tx.reserve_refund(account_id, charge, amount)? {
        RefundReservation::Reserved(charge) => {
            let refund = Refund {
                id: Uuid::new_v4(),
                charge_id: charge.id,
                account_id,
                amount,
                currency: charge.currency.clone(),
                created_at: now_micros(),
            };
            tx.insert_refund(&refund)?;
            let data = charge_json(&charge).to_string();
            tx.write_event(&Event::new(account_id, CHARGE_REFUNDED, data))?;
            SavedResponse::json(
                StatusCode::CREATED.as_u16(),
                Some(format!("{PATH}/{}/refunds/{}", charge.id, refund.id)),
                serde_json::to_value(RefundView::from(&refund)).expect("a refund serializes"),
            )
        }
        RefundReservation::NotEnoughLeft(charge) => saved(
            &REFUND_EXCEEDS_CHARGE,
            format!(
                "This refund of {amount} is more than is left of the charge: {} of its {} {} refunded already, {} left. Nothing was refunded.",
                charge.amount_refunded,
                charge.amount,
                charge.currency,
                charge.amount - charge.amount_refunded
            ),
        ),
        RefundReservation::ChargeFailed(charge) => saved(
            &CHARGE_NOT_REFUNDABLE,
            format!(
                "This charge failed (declined: {}), so it took no money and there is nothing to give back. Nothing was refunded.",
                charge.failure_code.as_deref().unwrap_or("unknown")
            ),
        ),
        RefundReservation::NoSuchCharge => saved(
            &NOT_FOUND,
            "There is no such charge for your account; nothing was refunded.",
        ),
    })
}

/// Refund part or all of a charge. With an `Idempotency-Key`, at most once
/// per key.
#[utoipa::path(
    post, path = "/charges/{id}/refunds", tag = "charges", operation_id = "create_refund",
    params(
        ("id" = inline(crate::http::schemas::ChargeId), Path),
        crate::http::schemas::KeyParam,
    ),
    request_body(content = RefundRequestBody, content_type = "application/json"),
    responses(
        (status = 201, description = "Refunded now, or replayed from the key (then with `Idempotent-Replayed: true`).", body = RefundView,
            headers(
                ("Location" = String, description = "`/charges/{id}/refunds/{refund_id}`"),
                ("Idempotent-Replayed" = String, description = "`true` when this response was stored earlier for the same key and request"),
            )),
    ),
    security(("api_key" = []))
)]
pub async fn create(
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let mut request = requests::read_json(&req, payload, &state, KeyUse::Read).await?;
    let charge = charge_id(&path)?;
    let amount = NewRefund::parse(&request.body)
        .map_err(|errors| ApiError::InvalidRequest {
            detail: "The refund has invalid fields; see `errors`.".to_owned(),
            errors,
        })?
        .amount
        .get();
    let account_id = request.account_id;
    let operation = CreateRefund {
        account_id,
        charge,
        amount,
        check_account: false,
    };
    match request.key.take() {
        Some(key) => requests::run_keyed(&req, &state, request, key, operation).await,
        // No key: every retry refunds again (lesson 2 shows it).
        None => {
            let hooks = request.hooks;
            let response = state
                .db(&req, move |store| {
                    // Two statements that must commit together: a transaction.
                    store.transaction(|tx| {
                        let response = refund(tx, account_id, charge, amount)?;
                        hooks.before_commit()?;
                        Ok::<_, ApiError>(response)
                    })
                })
                .await?;
            record_outcome("no_key", "none");
            Ok(respond(&response, false))
        }
    }
}

/// A charge's refunds, newest first, a page at a time.
#[utoipa::path(
    get, path = "/charges/{id}/refunds", tag = "charges", operation_id = "list_refunds",
    params(
        ("id" = inline(crate::http::schemas::ChargeId), Path),
        ("limit" = Option<i64>, Query, description = "1 to 100, default 20", minimum = 1, maximum = 100),
        ("starting_after" = inline(Option<crate::http::schemas::ListCursor>), Query, description = "The page after this refund: older ones. Not with `ending_before`."),
        ("ending_before" = inline(Option<crate::http::schemas::ListCursor>), Query, description = "The page before this refund: newer ones. Not with `starting_after`."),
    ),
    responses(
        (status = 200, body = RefundList),
    ),
    security(("api_key" = []))
)]
pub async fn list(
    req: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let account_id = state.accounts.authenticate(&req, &state.pool).await?;
    let charge = charge_id(&path)?;
    let list = ListRequest::parse(req.query_string(), &[])?;
    let (refunds, has_more) = state
        .db(
            &req,
            move |store| -> Result<Option<(Vec<Refund>, bool)>, ApiError> {
                if store.find_charge(account_id, charge)?.is_none() {
                    return Ok(None);
                }
                let page = list.page(|id| {
                    let refund = store.find_refund(account_id, id)?;
                    // Another charge's refund is no row of this list.
                    Ok(refund
                        .filter(|r| r.charge_id == charge)
                        .map(|r| r.created_at))
                })?;
                Ok(Some(
                    list.finish(store.list_refunds(account_id, charge, &page)?),
                ))
            },
        )
        .await?
        .ok_or(ApiError::NotFound)?;
    Ok(HttpResponse::Ok().json(RefundList {
        object: "list",
        url: format!("{PATH}/{charge}/refunds"),
        has_more,
        data: refunds.iter().map(RefundView::from).collect(),
    }))
}
