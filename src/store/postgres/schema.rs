// @generated automatically by Diesel CLI.

diesel::table! {
    accounts (id) {
        id -> Int8,
        name -> Text,
        api_key_sha256 -> Text,
        created_at -> Timestamptz,
        revoked_at -> Nullable<Timestamptz>,
        demo -> Bool,
    }
}

diesel::table! {
    authorizations (id) {
        id -> Uuid,
        account_id -> Int8,
        amount -> Int8,
        currency -> Text,
        created_at -> Timestamptz,
        voided_at -> Nullable<Timestamptz>,
    }
}

diesel::table! {
    charges (id) {
        id -> Uuid,
        account_id -> Int8,
        amount -> Int8,
        currency -> Text,
        description -> Nullable<Text>,
        created_at -> Timestamptz,
        amount_refunded -> Int8,
        authorization_id -> Nullable<Uuid>,
        payment_method -> Text,
        status -> Text,
        failure_code -> Nullable<Text>,
    }
}

diesel::table! {
    events (id) {
        id -> Uuid,
        account_id -> Int8,
        #[sql_name = "type"]
        event_type -> Text,
        data -> Text,
        created_at -> Timestamptz,
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
        id -> Uuid,
        charge_id -> Uuid,
        account_id -> Int8,
        amount -> Int8,
        currency -> Text,
        created_at -> Timestamptz,
    }
}

diesel::table! {
    webhook_attempts (event_id, endpoint_id, attempt) {
        event_id -> Uuid,
        endpoint_id -> Uuid,
        attempt -> Int4,
        webhook_timestamp -> Int8,
        attempted_at -> Timestamptz,
        response_status -> Nullable<Int4>,
        error -> Nullable<Text>,
        duration_ms -> Int8,
    }
}

diesel::table! {
    webhook_deliveries (event_id, endpoint_id) {
        event_id -> Uuid,
        endpoint_id -> Uuid,
        account_id -> Int8,
        status -> Text,
        attempts -> Int4,
        next_attempt_at -> Nullable<Timestamptz>,
        claim_token -> Nullable<Uuid>,
        claimed_until -> Nullable<Timestamptz>,
        created_at -> Timestamptz,
    }
}

diesel::table! {
    webhook_endpoints (id) {
        id -> Uuid,
        account_id -> Int8,
        url -> Text,
        description -> Nullable<Text>,
        enabled_events -> Text,
        secret -> Text,
        previous_secret -> Nullable<Text>,
        previous_secret_expires_at -> Nullable<Timestamptz>,
        status -> Text,
        disabled_reason -> Nullable<Text>,
        created_at -> Timestamptz,
        failing -> Bool,
        served_at -> Nullable<Timestamptz>,
    }
}

diesel::joinable!(authorizations -> accounts (account_id));
diesel::joinable!(charges -> accounts (account_id));
diesel::joinable!(events -> accounts (account_id));
diesel::joinable!(refunds -> accounts (account_id));
diesel::joinable!(refunds -> charges (charge_id));
diesel::joinable!(webhook_deliveries -> accounts (account_id));
diesel::joinable!(webhook_deliveries -> events (event_id));
diesel::joinable!(webhook_deliveries -> webhook_endpoints (endpoint_id));
diesel::joinable!(webhook_endpoints -> accounts (account_id));

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
