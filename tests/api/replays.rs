//! Replays of keys this process completed lately (`idempotency::recent`):
//! answered from one read of the key row, before any transaction, and only
//! as the database says.
//!
//! A replay that needs no write is shown by holding the key table's writes
//! (not its reads) while it is sent: the transaction's registration would
//! wait the lock timeout (7 s) there; the read answers at once.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{charge_body, spawn_app, spawn_app_with};

/// Well under the lock timeout the transaction's path would wait.
const AT_ONCE: Duration = Duration::from_secs(3);

crate::on_both_backends! {
    async fn a_retry_of_a_key_completed_here_replays_byte_for_byte_from_one_read() {
        let app = spawn_app().await;
        let first = app.charge("k-hinted", &charge_body()).await;
        assert_eq!(first.status, 201, "{}", first.body);

        let hold = app.hold_key_writes_not_reads();
        let started = Instant::now();
        let replay = app.charge("k-hinted", &charge_body()).await;
        let took = started.elapsed();
        drop(hold);

        assert!(took < AT_ONCE, "the replay waited {took:?} for the key table's writes");
        assert_eq!(replay.status, 201, "{}", replay.body);
        assert_eq!(replay.header("idempotent-replayed"), Some("true"));
        assert_eq!(replay.body, first.body, "the replayed body is byte-identical");
        assert_eq!(replay.header("location"), first.header("location"));
        assert_eq!(replay.header("content-type"), first.header("content-type"));
        assert_eq!(app.charges(), 1);
    }

    async fn a_different_body_with_a_key_completed_here_is_still_422() {
        let app = spawn_app().await;
        let first = app.charge("k-hinted-reuse", &charge_body()).await;
        assert_eq!(first.status, 201, "{}", first.body);

        let hold = app.hold_key_writes_not_reads();
        let started = Instant::now();
        let other = json!({"amount": 2000, "currency": "jpy", "description": "a book"});
        let reused = app.charge("k-hinted-reuse", &other).await;
        let took = started.elapsed();
        drop(hold);

        assert!(took < AT_ONCE, "the answer waited {took:?} for the key table's writes");
        reused.assert_problem(422, "idempotency-key-reused");
        assert_eq!(app.charges(), 1);
        let again = app.charge("k-hinted-reuse", &charge_body()).await;
        assert_eq!(again.body, first.body);
    }

    async fn a_key_completed_here_then_expired_by_the_demo_is_not_replayed_from_memory() {
        let app = spawn_app().await;
        let first = app.demo().charge("k-hinted-expired", &charge_body()).await;
        let replay = app.demo().charge("k-hinted-expired", &charge_body()).await;
        assert_eq!(replay.header("idempotent-replayed"), Some("true"));

        let expired = app.post("/demo/keys/k-hinted-expired/expire").await;
        assert_eq!(expired.status, 200, "{}", expired.body);
        let after = app.demo().charge("k-hinted-expired", &charge_body()).await;

        assert_eq!(after.status, 201, "{}", after.body);
        assert_eq!(after.header("idempotent-replayed"), None, "an expired key is new");
        assert_ne!(after.json()["id"], first.json()["id"]);
        assert_eq!(app.charges(), 2);
        assert_eq!(app.keys(), 1);
    }

    async fn a_key_completed_here_past_its_ttl_is_not_replayed_from_memory() {
        let app = spawn_app_with(|s| s.idempotency_ttl = Duration::from_secs(1)).await;
        let first = app.charge("k-hinted-ttl", &charge_body()).await;
        assert_eq!(first.status, 201, "{}", first.body);
        tokio::time::sleep(Duration::from_millis(1_300)).await;

        let after = app.charge("k-hinted-ttl", &charge_body()).await;
        assert_eq!(after.status, 201, "{}", after.body);
        assert_eq!(after.header("idempotent-replayed"), None, "an expired key is new");
        assert_ne!(after.json()["id"], first.json()["id"]);
        assert_eq!(app.charges(), 2);
    }

    async fn a_key_purged_after_completion_here_runs_as_new() {
        let app = spawn_app().await;
        let first = app.charge("k-hinted-purged", &charge_body()).await;
        app.execute("DELETE FROM idempotency_keys");

        let after = app.charge("k-hinted-purged", &charge_body()).await;
        assert_eq!(after.status, 201, "{}", after.body);
        assert_eq!(after.header("idempotent-replayed"), None);
        assert_ne!(after.json()["id"], first.json()["id"]);
        assert_eq!(app.keys(), 1);
    }
}
