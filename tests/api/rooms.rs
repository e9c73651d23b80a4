//! A class behind one address (#50): sandboxes made with a room code
//! (`Demo-Room`, one of DEMO_ROOM_CODES) count against the room's
//! DEMO_ROOM_SANDBOXES_PER_MINUTE, not the shared address's
//! DEMO_SANDBOXES_PER_MINUTE; an unknown code is a 403 `demo-room-unknown`
//! that makes nothing and counts nothing; DEMO_MAX_SANDBOXES bounds rooms
//! too. Every request here comes from 127.0.0.1, as a class behind one NAT.

use reqwest::Method;

use crate::support::{Captured, TestApp, spawn_app_with};

async fn in_room(app: &TestApp, code: &str) -> Captured {
    app.send(
        app.request(Method::POST, "/demo/sandboxes")
            .header("Demo-Room", code),
    )
    .await
}

fn made(app: &TestApp) -> i64 {
    app.count("demo_sandboxes WHERE NOT permanent")
}

crate::on_both_backends! {
    /// Thirty learners at one address, the address's limit 2 a minute: with
    /// the room's code every one gets a sandbox of its own; without, the
    /// third is refused as before.
    async fn a_class_behind_one_address_makes_its_sandboxes_with_a_room_code() {
        let app = spawn_app_with(|s| {
            s.demo_sandboxes_per_minute = 2;
            s.demo_room_codes = vec!["maple-7".into(), "birch-3".into()];
        })
        .await;
        let mut keys = std::collections::BTreeSet::new();
        for learner in 0..30 {
            let r = in_room(&app, "maple-7").await;
            assert_eq!(r.status, 201, "learner {learner}: {}", r.body);
            keys.insert(r.json()["api_key"].as_str().unwrap().to_owned());
        }
        assert_eq!(keys.len(), 30, "a sandbox, and a key, each");
        // The address's own allowance is untouched by the room's sandboxes.
        assert_eq!(app.post("/demo/sandboxes").await.status, 201);
        assert_eq!(app.post("/demo/sandboxes").await.status, 201);
        app.post("/demo/sandboxes").await.assert_problem(429, "rate-limited");
        assert_eq!(made(&app), 32);
    }

    /// DEMO_ROOM_SANDBOXES_PER_MINUTE per room: past it a 429 with
    /// Retry-After for that room alone.
    async fn each_room_has_an_allowance_of_its_own() {
        let app = spawn_app_with(|s| {
            s.demo_room_codes = vec!["maple-7".into(), "birch-3".into()];
            s.demo_room_sandboxes_per_minute = 3;
        })
        .await;
        for _ in 0..3 {
            assert_eq!(in_room(&app, "maple-7").await.status, 201);
        }
        let refused = in_room(&app, "maple-7").await;
        refused.assert_problem(429, "rate-limited");
        assert!(refused.body.contains("DEMO_ROOM_SANDBOXES_PER_MINUTE"), "{}", refused.body);
        let wait: u64 = refused.header("retry-after").unwrap().parse().unwrap();
        assert!((1..=60).contains(&wait), "Retry-After {wait}");
        assert_eq!(in_room(&app, "birch-3").await.status, 201, "another room");
        assert_eq!(app.post("/demo/sandboxes").await.status, 201, "no room: the address");
        assert_eq!(made(&app), 5);
    }

    /// A code the server does not hand out (a typo, a guess, any code when
    /// there are none): 403 `demo-room-unknown`, documented at its URI;
    /// nothing made, and nothing counted against the address.
    async fn an_unknown_room_code_is_refused_and_counts_nothing() {
        let app = spawn_app_with(|s| {
            s.demo_sandboxes_per_minute = 1;
            s.demo_room_codes = vec!["maple-7".into()];
        })
        .await;
        for code in ["maple-8", "MAPLE-7", "maple", "maple-7x", ""] {
            let r = in_room(&app, code).await;
            r.assert_problem(403, "demo-room-unknown");
            assert!(r.header("retry-after").is_none(), "waiting would not help: {code:?}");
        }
        assert_eq!(made(&app), 0);
        let documented = app.get_json("/problems/demo-room-unknown").await;
        assert_eq!(documented["status"], 403);
        assert_eq!(app.post("/demo/sandboxes").await.status, 201, "the address's one a minute is left");
        let none = spawn_app_with(|_| {}).await;
        in_room(&none, "maple-7").await.assert_problem(403, "demo-room-unknown");
    }

    /// DEMO_MAX_SANDBOXES bounds a room's sandboxes too: a code lifts the
    /// per-address limit, not the demo's size.
    async fn a_room_code_does_not_lift_the_demos_size() {
        let app = spawn_app_with(|s| {
            s.demo_max_sandboxes = 2;
            s.demo_room_codes = vec!["maple-7".into()];
        })
        .await;
        assert_eq!(in_room(&app, "maple-7").await.status, 201);
        assert_eq!(in_room(&app, "maple-7").await.status, 201);
        in_room(&app, "maple-7").await.assert_problem(503, "demo-room-full");
    }
}
