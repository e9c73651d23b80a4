//! A network that loses 30 % of the responses after the server has answered:
//! 1 000 logical charges, each retried with its key until it gets an answer,
//! make exactly 1 000 charges, and every client holds the charge the database
//! has for its key.

use std::time::{Duration, Instant};

use futures::StreamExt;

use crate::client::{self, Attempt, Retry};
use crate::proxy::{LossyProxy, Stats};
use crate::server::{self, Config};
use crate::support::{AppClient, TestBackend, TestDatabase};
use crate::within;

const CHARGES: usize = 1_000;
const CONCURRENCY: usize = 32;
const LOSE_PER_MILLE: u64 = 300;
/// With 30 % lost, 20 attempts all lost is a 3.5e-11 event per charge.
const MAX_ATTEMPTS: usize = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_responses_retried_with_the_same_key_make_exactly_one_charge_each() {
    let started = Instant::now();
    let db = TestDatabase::create_for(TestBackend::Postgres);
    let mut server = server::start(
        "server",
        &db.url,
        &Config {
            pool_size: 8,
            pool_timeout: "5s",
            workers: 2,
            demo_max_delayed: None,
        },
    );
    db.create_test_account();
    let proxy = LossyProxy::start(server.addr(), LOSE_PER_MILLE, 0x5eed_0001).await;
    let through_proxy = vec![AppClient::one_connection_per_request(&proxy.url)];
    let retry = Retry {
        max_attempts: MAX_ATTEMPTS,
        backoff: Duration::from_millis(5),
        deadline: Instant::now() + Duration::from_secs(40),
    };
    let charges: Vec<_> = within(
        Duration::from_secs(45),
        "1 000 charges through the lossy proxy",
        futures::stream::iter((0..CHARGES).map(|_| {
            client::charge_until_answered(&through_proxy, 0, client::new_key(), &retry, |_| {
                vec![("connection", "close")]
            })
        }))
        .buffer_unordered(CONCURRENCY)
        .collect(),
    )
    .await;

    let attempts: usize = charges.iter().map(|c| c.attempts.len()).sum();
    let no_response = charges
        .iter()
        .flat_map(|c| &c.attempts)
        .filter(|a| matches!(a, Attempt::Transport(_)))
        .count();
    let lost = Stats::get(&proxy.stats.lost_responses);
    eprintln!(
        "lossy network: {CHARGES} charges, {attempts} attempts, {lost} responses lost, {:?}",
        started.elapsed()
    );
    for charge in &charges {
        let answer = charge
            .answer()
            .unwrap_or_else(|| panic!("{} got no answer: {}", charge.key, charge.history()));
        assert_eq!(answer.status, 201, "{}: {}", charge.key, charge.history());
        // Every attempt is a 201 or a lost response: nothing else goes wrong.
        for attempt in &charge.attempts[..charge.attempts.len() - 1] {
            assert!(
                matches!(attempt, Attempt::Transport(_)),
                "{}: {}",
                charge.key,
                charge.history()
            );
        }
        // The first attempt always reached the server: if its response was
        // lost, the server had executed it, and the answer is its replay.
        let first_lost = charge.attempts.len() > 1;
        assert_eq!(
            answer.replayed(),
            first_lost,
            "{}: answered {} after {}",
            charge.key,
            if answer.replayed() {
                "as a replay"
            } else {
                "as executed"
            },
            charge.history()
        );
    }
    // The proxy lost what it says it lost, and only after the server answered.
    assert_eq!(Stats::get(&proxy.stats.connections), attempts);
    assert_eq!(
        lost, no_response,
        "every connection the proxy lost is one the client saw fail"
    );
    assert_eq!(Stats::get(&proxy.stats.lost_without_response), 0);
    assert_eq!(Stats::get(&proxy.stats.upstream_errors), 0);
    let share = lost as f64 / attempts as f64;
    assert!(
        (0.2..0.4).contains(&share),
        "the proxy lost {lost} of {attempts} responses"
    );

    assert_eq!(
        db.charges(),
        CHARGES as i64,
        "exactly one charge per logical charge"
    );
    let keys = db.key_rows();
    assert_eq!(keys.len(), CHARGES);
    for charge in &charges {
        let row = &keys[&charge.key];
        assert_eq!(row.status, "completed", "{}", charge.key);
        assert_eq!(
            row.charge_id,
            Some(charge.answer().unwrap().charge_id()),
            "{}: the client holds another charge than the database has for its key",
            charge.key
        );
    }
    db.assert_consistent();
    server.assert_healthy();
}
