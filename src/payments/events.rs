//! An event as the API shows it and as its webhook sends it. One builder
//! for both, splicing in the `data` text stored in the charge's transaction
//! unchanged: every delivery of an event sends, and signs, the same bytes,
//! and they are the bytes `GET /events/{id}` answers.

use serde_json::Value;
use uuid::Uuid;

/// The event types, as the `events` table's CHECK constraint lists them.
pub const CHARGE_SUCCEEDED: &str = "charge.succeeded";
pub const CHARGE_FAILED: &str = "charge.failed";
pub const CHARGE_REFUNDED: &str = "charge.refunded";
pub const TYPES: [&str; 3] = [CHARGE_SUCCEEDED, CHARGE_FAILED, CHARGE_REFUNDED];

/// An event's id as clients see it (and as `webhook-id` carries it):
/// `evt_` and the row's UUID, lowercase and hyphenated.
pub fn public_id(id: &Uuid) -> String {
    format!("evt_{}", id.hyphenated())
}

/// The row's id for a public id, or `None` for any other spelling.
pub fn parse_public_id(s: &str) -> Option<Uuid> {
    let id = Uuid::parse_str(s.strip_prefix("evt_")?).ok()?;
    (public_id(&id) == s).then_some(id)
}

/// The event's JSON: `{"id", "object": "event", "type", "created_at",
/// "data": {"object": …}}`. `created_at` is the text the API writes times
/// in (`store::time_text`); `data` is the stored JSON text of the object.
pub fn body(id: &Uuid, event_type: &str, created_at: &str, data: &str) -> String {
    let text = |s: &str| Value::from(s).to_string();
    format!(
        r#"{{"id":{},"object":"event","type":{},"created_at":{},"data":{{"object":{}}}}}"#,
        text(&public_id(id)),
        text(event_type),
        text(created_at),
        data
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_is_json_with_the_stored_object_byte_for_byte() {
        let id = Uuid::nil();
        let data = r#"{"id":"x","amount":500, "note":"spacing kept"}"#;
        let body = body(&id, CHARGE_SUCCEEDED, "2026-12-07T12:00:00.000000Z", data);
        assert!(body.contains(data));
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["id"], "evt_00000000-0000-0000-0000-000000000000");
        assert_eq!(v["object"], "event");
        assert_eq!(v["type"], "charge.succeeded");
        assert_eq!(v["data"]["object"]["amount"], 500);
    }

    #[test]
    fn only_the_given_spelling_of_an_id_names_an_event() {
        let id = Uuid::new_v4();
        assert_eq!(parse_public_id(&public_id(&id)), Some(id));
        assert_eq!(parse_public_id(&id.hyphenated().to_string()), None);
        assert_eq!(parse_public_id(&format!("evt_{}", id.simple())), None);
        assert_eq!(parse_public_id(&public_id(&id).to_uppercase()), None);
    }
}
