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

diesel::joinable!(authorizations -> accounts (account_id));
diesel::joinable!(charges -> accounts (account_id));
diesel::joinable!(refunds -> accounts (account_id));
diesel::joinable!(refunds -> charges (charge_id));

diesel::allow_tables_to_appear_in_same_query!(
    accounts,
    authorizations,
    charges,
    in_process_network_keys,
    refunds,
);
