//! Lists an integrator can page through (issue #47): `limit`,
//! `starting_after`, `ending_before`, `has_more`, newest first, by keyset,
//! so a walk sees every row that existed when it began exactly once while
//! other charges are being made.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value, json};

use crate::support::{AppClient, TestApp, spawn_app};

/// `n` keyless charges, one after the other; their ids, oldest first.
async fn charges(app: &AppClient, n: usize, method: &str) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        let made = app
            .charge(
                None,
                &json!({"amount": 100 + i, "currency": "jpy", "payment_method": method}),
            )
            .await;
        assert!(made.status == 201 || made.status == 402, "{}", made.body);
        ids.push(
            made.json()["id"]
                .as_str()
                .or(made.json()["charge"].as_str())
                .unwrap()
                .to_owned(),
        );
    }
    ids
}

fn ids(page: &Value) -> Vec<String> {
    page["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap().to_owned())
        .collect()
}

/// Walks a list from its newest row to its oldest, `limit` at a time; every
/// row seen, in order, and the pages' `has_more`.
async fn walk(app: &AppClient, path: &str, limit: usize) -> (Vec<Value>, Vec<bool>) {
    let (mut rows, mut more) = (Vec::new(), Vec::new());
    let mut url = format!("{path}?limit={limit}");
    loop {
        let page = app.get_json(&url).await;
        assert_eq!(page["object"], "list", "{page}");
        let data = page["data"].as_array().unwrap().clone();
        assert!(data.len() <= limit);
        more.push(page["has_more"].as_bool().unwrap());
        rows.extend(data.iter().cloned());
        if !page["has_more"].as_bool().unwrap() {
            return (rows, more);
        }
        let last = data.last().unwrap()["id"].as_str().unwrap();
        url = format!("{path}?limit={limit}&starting_after={last}");
    }
}

/// Newest first: `(created_at, id)` strictly decreasing.
fn assert_newest_first(rows: &[Value]) {
    for pair in rows.windows(2) {
        let key = |c: &Value| {
            (
                c["created_at"].as_str().unwrap().to_owned(),
                c["id"].as_str().unwrap().to_owned(),
            )
        };
        assert!(
            key(&pair[0]) > key(&pair[1]),
            "{} then {}",
            pair[0],
            pair[1]
        );
    }
}

crate::on_both_backends! {
    async fn paging_250_charges_by_10_while_others_are_made_sees_each_one_that_existed_once_newest_first() {
        let app = spawn_app().await;
        let existing: HashSet<String> = charges(&app, 250, "pm_card_visa").await.into_iter().collect();
        let stop = Arc::new(AtomicBool::new(false));
        let maker = {
            let (app, stop) = ((*app).clone(), stop.clone());
            tokio::spawn(async move {
                let mut made = 0;
                while !stop.load(Ordering::Relaxed) && made < 500 {
                    charges(&app, 1, "pm_card_visa").await;
                    made += 1;
                }
                made
            })
        };
        let (rows, more) = walk(&app, "/charges", 10).await;
        stop.store(true, Ordering::Relaxed);
        let made_meanwhile = maker.await.unwrap();
        assert_newest_first(&rows);
        let seen: Vec<String> = rows.iter().map(|c| c["id"].as_str().unwrap().to_owned()).collect();
        let unique: HashSet<&String> = seen.iter().collect();
        assert_eq!(unique.len(), seen.len(), "no charge twice");
        assert!(existing.iter().all(|id| unique.contains(id)), "every charge that existed, once");
        assert!(more[..more.len() - 1].iter().all(|m| *m) && !more[more.len() - 1]);
        eprintln!("paged {} charges by 10 while {made_meanwhile} were made", seen.len());
    }

    async fn ending_before_walks_back_to_the_newest() {
        let app = spawn_app().await;
        let made = charges(&app, 7, "pm_card_visa").await;
        // Newest first: the third page of 2 from the top.
        let first = app.get_json("/charges?limit=2").await;
        assert_eq!(ids(&first), [made[6].clone(), made[5].clone()]);
        assert_eq!(first["has_more"], true);
        let oldest = &made[0];
        let back = app.get_json(&format!("/charges?limit=3&ending_before={oldest}")).await;
        assert_eq!(ids(&back), [made[3].clone(), made[2].clone(), made[1].clone()]);
        assert_eq!(back["has_more"], true, "newer ones remain");
        let top = app.get_json(&format!("/charges?limit=3&ending_before={}", made[3])).await;
        assert_eq!(ids(&top), [made[6].clone(), made[5].clone(), made[4].clone()]);
        assert_eq!(top["has_more"], false);
        let after = app.get_json(&format!("/charges?limit=10&starting_after={}", made[2])).await;
        assert_eq!(ids(&after), [made[1].clone(), made[0].clone()]);
        assert_eq!((after["has_more"].clone(), after["url"].clone()), (json!(false), json!("/charges")));
    }

    async fn a_bad_page_is_a_400_that_names_its_parameter() {
        let app = spawn_app().await;
        let made = charges(&app, 2, "pm_card_visa").await;
        let other = app.as_account("sk_live_other_pager");
        app.create_account("Other pager", "sk_live_other_pager");
        let theirs = charges(&other, 1, "pm_card_visa").await;
        for (query, says) in [
            (format!("starting_after={}&ending_before={}", made[0], made[1]), "not both"),
            (format!("starting_after={}", theirs[0]), "names no row"),
            (format!("ending_before={}", uuid::Uuid::new_v4()), "names no row"),
            ("starting_after=not-an-id".to_owned(), "starting_after"),
            (format!("starting_after={}", made[0].to_uppercase()), "lowercase"),
            ("limit=101".to_owned(), "limit"),
            ("status=pending".to_owned(), "status"),
        ] {
            let answer = app.get_as(app.api_key(), &format!("/charges?{query}")).await;
            answer.assert_problem(400, "invalid-request");
            assert!(answer.json()["detail"].as_str().unwrap().contains(says), "{query}: {}", answer.body);
        }
    }

    async fn the_status_filter_pages_the_failed_charges_apart() {
        let app: TestApp = spawn_app().await;
        charges(&app, 3, "pm_card_visa").await;
        let failed = charges(&app, 3, "pm_card_chargeDeclined").await;
        charges(&app, 2, "pm_card_mastercard").await;
        let page = app.get_json("/charges?status=failed&limit=2").await;
        assert_eq!(ids(&page), [failed[2].clone(), failed[1].clone()]);
        assert_eq!(page["has_more"], true);
        let rest = app.get_json(&format!("/charges?status=failed&limit=2&starting_after={}", failed[1])).await;
        assert_eq!(ids(&rest), [failed[0].clone()]);
        assert_eq!(rest["has_more"], false);
        let succeeded = app.get_json("/charges?status=succeeded&limit=100").await;
        assert_eq!(succeeded["data"].as_array().unwrap().len(), 5);
    }

    async fn a_charges_refunds_page_the_same_way() {
        let app = spawn_app().await;
        let charge = charges(&app, 1, "pm_card_visa").await.remove(0);
        let mut refunds = Vec::new();
        for _ in 0..5 {
            let r = app.refund(None, &charge, 1).await;
            assert_eq!(r.status, 201, "{}", r.body);
            refunds.push(r.json()["id"].as_str().unwrap().to_owned());
        }
        let path = format!("/charges/{charge}/refunds");
        let (rows, more) = walk(&app, &path, 2).await;
        let seen: Vec<String> = rows.iter().map(|r| r["id"].as_str().unwrap().to_owned()).collect();
        let newest_first: Vec<String> = refunds.iter().rev().cloned().collect();
        assert_eq!(seen, newest_first);
        assert_eq!(more, [true, true, false]);
        let back = app.get_json(&format!("{path}?limit=2&ending_before={}", refunds[1])).await;
        assert_eq!(ids(&back), [refunds[3].clone(), refunds[2].clone()]);
        assert_eq!(back["url"], path.as_str());
        // Another charge's refund is no row of this list.
        let other = charges(&app, 1, "pm_card_visa").await.remove(0);
        let theirs = app.refund(None, &other, 1).await.json()["id"].as_str().unwrap().to_owned();
        app.get_as(app.api_key(), &format!("{path}?starting_after={theirs}")).await.assert_problem(400, "invalid-request");
        app.get_as(app.api_key(), &format!("{path}?status=failed")).await.assert_problem(400, "invalid-request");
    }
}
