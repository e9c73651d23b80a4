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

diesel::allow_tables_to_appear_in_same_query!(
    accounts,
    authorizations,
    charges,
    in_process_network_keys,
    refunds,
);
