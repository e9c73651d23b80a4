//! A charge without an Idempotency-Key asks the card network holding no
//! pooled connection, as a keyed one does (issue #38, finding 1): a slow
//! network does not hold up another account's reads or writes.

use std::time::{Duration, Instant};

use charges::config::NETWORK_IN_PROCESS;

use crate::support::{Captured, TEST_KEY, TestApp, TestDatabase, charge_body, spawn_app_with};

const SHOP_KEY: &str = "sk_live_keyless_shop";

/// The app with an in-process card network answering in `latency` (its
/// ledger on a database of the test's), `pool_size` connections, and the
/// shop's account; the ledger's database and the app.
async fn shop_with_network(latency: Duration, pool_size: u32) -> (TestDatabase, TestApp) {
    let network = TestDatabase::create();
    let url = network.url.clone();
    let app = spawn_app_with(move |s| {
        s.network_url = NETWORK_IN_PROCESS.to_owned();
        s.network_database_url = Some(url);
        s.network_latency = latency;
        s.pool_size = pool_size;
    })
    .await;
    app.create_account("Shop", SHOP_KEY);
    (network, app)
}

crate::on_both_backends! {
    /// On d1dbd42 each keyless charge held one of the 10 connections for
    /// the network's whole second, and the read waited for the pool.
    async fn forty_keyless_charges_on_a_1_s_network_hold_up_no_other_account() {
        // The production default pool.
        let (network, app) = shop_with_network(Duration::from_secs(1), 10).await;
        let body = charge_body();
        let charges = futures::future::join_all((0..40).map(|_| app.charge_as(SHOP_KEY, None, &body, &[])));
        let others = async {
            // All 40 are waiting on the network by now.
            tokio::time::sleep(Duration::from_millis(400)).await;
            let started = Instant::now();
            let read = app.get_as(TEST_KEY, "/charges").await;
            let read_took = started.elapsed();
            let started = Instant::now();
            let keyed = app.charge_as(TEST_KEY, "k-other", &body, &[]).await;
            (read, read_took, keyed, started.elapsed())
        };
        let (charged, (read, read_took, keyed, keyed_took)): (Vec<Captured>, _) =
            tokio::join!(charges, others);
        assert_eq!(read.status, 200, "{}", read.body);
        assert!(read_took < Duration::from_millis(300), "GET /charges took {read_took:?}");
        assert_eq!(keyed.status, 201, "{}", keyed.summary());
        // The network's second, and little more.
        assert!(keyed_took < Duration::from_millis(1500), "a keyed charge took {keyed_took:?}");
        for c in &charged {
            assert_eq!(c.status, 201, "{}", c.summary());
        }
        assert_eq!((app.charges(), network.count("authorizations")), (41, 41));
        eprintln!("40 keyless charges on a 1 s network: another account's GET /charges took {read_took:?}, its keyed charge {keyed_took:?}");
    }

    /// The account revoked while its keyless charge waits on the network:
    /// not charged, and the network's authorization voided, as a keyed
    /// charge's phase 3 refuses (the keyless path wrote the charge anyway).
    async fn an_account_revoked_while_its_keyless_charge_waits_on_the_network_is_not_charged() {
        let (network, app) = shop_with_network(Duration::from_millis(1500), 20).await;
        let charge = app.charge_as(SHOP_KEY, None, &charge_body(), &[]);
        let revoke = async {
            tokio::time::sleep(Duration::from_millis(500)).await;
            app.execute("UPDATE accounts SET revoked_at = CURRENT_TIMESTAMP WHERE name = 'Shop'");
        };
        let (answer, ()) = tokio::join!(charge, revoke);
        answer.assert_problem(403, "account-revoked");
        assert_eq!(app.charges(), 0, "nothing charged");
        assert_eq!(network.count("authorizations"), 1);
        assert_eq!(network.count("authorizations WHERE voided_at IS NOT NULL"), 1);
    }
}
