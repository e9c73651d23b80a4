//! Where each kind of server sends webhooks (issue #48's rule against
//! request forgery), through the app as it starts: the loopback demo sends
//! to loopback alone, and the demo hosted for others (`--public`) to the
//! receiver it hosts at its own address and nowhere else, not even another
//! port of its own machine.

use std::time::Duration;

use serde_json::json;

use crate::support::receiver::Receiver;
use crate::support::webhooks::{add_endpoint, add_event};
use crate::support::{TestBackend, spawn_app_with};
use crate::webhook_endpoints::register;
use crate::webhooks_delivery::until_count;

crate::on_both_backends! {
    async fn the_loopback_demo_registers_loopback_targets_and_refuses_its_network_neighbours() {
        let app = spawn_app_with(|_| {}).await;
        for (i, url) in ["http://127.0.0.1:9/hook", "http://[::1]:9/hook", "http://localhost:9/hook"]
            .into_iter()
            .enumerate()
        {
            let body = json!({"url": url, "enabled_events": ["*"]});
            let r = register(&app, format!("loopback-{i}").as_str(), &body).await;
            assert_eq!(r.status, 201, "{url}: {}", r.body);
        }
        for (i, url) in ["http://10.0.0.1/hook", "http://169.254.169.254/latest/meta-data", "http://[fd00::1]/hook"]
            .into_iter()
            .enumerate()
        {
            let body = json!({"url": url, "enabled_events": ["*"]});
            let r = register(&app, format!("neighbour-{i}").as_str(), &body).await;
            r.assert_problem(400, "webhook-target-not-allowed");
        }
        assert_eq!(app.count("webhook_endpoints"), 3);
    }
}

#[tokio::test]
async fn the_hosted_demo_delivers_to_its_own_receiver_and_refuses_another_port_of_its_machine() {
    crate::support::BACKEND
        .scope(TestBackend::Postgres, async {
            let app = spawn_app_with(|s| {
                s.demo_public = true;
                // http:// allowed, so that what refuses the other port is the
                // address rule, not the scheme.
                s.webhooks.allow_http = true;
                s.webhooks.poll_interval = Duration::from_millis(50);
                s.webhooks.retry_schedule = vec![Duration::ZERO; 2];
                s.webhooks.timeout = Duration::from_secs(2);
            })
            .await;
            let sandbox = app.new_sandbox().await;
            let made = sandbox.post_as_self("/demo/lesson8/endpoint").await;
            assert_eq!(made.status, 201, "{}", made.body);
            let account: i64 = app.db.strings(&format!(
                "SELECT CAST(account_id AS TEXT) AS value FROM webhook_endpoints WHERE id = '{}'",
                made.json()["endpoint_id"].as_str().unwrap()
            ))[0]
                .parse()
                .unwrap();
            // Its own bound address (the app's http:// URL) is allowed exactly.
            add_event(&app.db, account);
            until_count(&app, "webhook_deliveries WHERE status = 'succeeded'", 1).await;
            assert_eq!(app.count("webhook_attempts WHERE response_status = 200"), 1);

            // Another port on 127.0.0.1 (an endpoint written past the API,
            // which refuses it): refused at connect, nothing sent.
            let other = Receiver::start(vec![]).await;
            add_endpoint(&app.db, account, &other.url());
            add_event(&app.db, account);
            until_count(
                &app,
                "webhook_attempts WHERE error LIKE '%a loopback address%'",
                2,
            )
            .await;
            assert!(
                other.received().is_empty(),
                "sent to another port of the machine"
            );
            until_count(&app, "webhook_deliveries WHERE status = 'succeeded'", 2).await;
        })
        .await;
}
