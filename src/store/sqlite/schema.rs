//! The SQLite schema of `migrations/sqlite`, for Diesel's query builder:
//! `src/store/postgres/schema.rs` in SQLite's types (UUIDs, JSON and times are TEXT, times
//! as fixed-width RFC 3339 so that text order is time order). Written by
//! hand: `diesel print-schema` is pointed at PostgreSQL, the reference.

diesel::table! {
    accounts (id) {
        id -> BigInt,
        name -> Text,
        api_key_sha256 -> Text,
        created_at -> Text,
        revoked_at -> Nullable<Text>,
        demo -> Bool,
    }
}

diesel::table! {
    authorizations (id) {
        id -> Text,
        account_id -> BigInt,
        amount -> BigInt,
        currency -> Text,
        created_at -> Text,
        voided_at -> Nullable<Text>,
    }
}

diesel::table! {
    charges (id) {
        id -> Text,
        account_id -> BigInt,
        amount -> BigInt,
        currency -> Text,
        description -> Nullable<Text>,
        created_at -> Text,
        amount_refunded -> BigInt,
        authorization_id -> Nullable<Text>,
        payment_method -> Text,
        status -> Text,
        failure_code -> Nullable<Text>,
    }
}

diesel::table! {
    events (id) {
        id -> Text,
        account_id -> BigInt,
        #[sql_name = "type"]
        event_type -> Text,
        data -> Text,
        created_at -> Text,
    }
}

diesel::table! {
    in_process_network_keys (name) {
        name -> Text,
        api_key -> Text,
    }
}

diesel::table! {
    refunds (id) {
        id -> Text,
        charge_id -> Text,
        account_id -> BigInt,
        amount -> BigInt,
        currency -> Text,
        created_at -> Text,
    }
}

diesel::table! {
    webhook_attempts (event_id, endpoint_id, attempt) {
        event_id -> Text,
        endpoint_id -> Text,
        attempt -> Integer,
        webhook_timestamp -> BigInt,
        attempted_at -> Text,
        response_status -> Nullable<Integer>,
        error -> Nullable<Text>,
        duration_ms -> BigInt,
    }
}

diesel::table! {
    webhook_deliveries (event_id, endpoint_id) {
        event_id -> Text,
        endpoint_id -> Text,
        account_id -> BigInt,
        status -> Text,
        attempts -> Integer,
        next_attempt_at -> Nullable<Text>,
        claim_token -> Nullable<Text>,
        claimed_until -> Nullable<Text>,
        created_at -> Text,
    }
}

diesel::table! {
    webhook_endpoints (id) {
        id -> Text,
        account_id -> BigInt,
        url -> Text,
        description -> Nullable<Text>,
        enabled_events -> Text,
        secret -> Text,
        previous_secret -> Nullable<Text>,
        previous_secret_expires_at -> Nullable<Text>,
        status -> Text,
        disabled_reason -> Nullable<Text>,
        created_at -> Text,
        failing -> Bool,
        served_at -> Nullable<Text>,
    }
}

diesel::allow_tables_to_appear_in_same_query!(
    accounts,
    authorizations,
    charges,
    events,
    in_process_network_keys,
    refunds,
    webhook_attempts,
    webhook_deliveries,
    webhook_endpoints,
);
