//! The request deadline: how long one request may wait for the database in
//! all (`REQUEST_TIMEOUT`), counted from its first database access, so that
//! a request that reads its account and then writes waits no longer than
//! one that only writes. Past it the request is answered 503 at once, even
//! if the database never answers (`store::DbPool::run`).

use std::time::{Duration, Instant};

use actix_web::{HttpMessage, HttpRequest};

#[derive(Debug, Clone, Copy)]
struct Deadline(Instant);

/// What is left of `req`'s deadline, which starts now if it has not yet.
pub fn remaining(req: &HttpRequest, timeout: Duration) -> Duration {
    let mut extensions = req.extensions_mut();
    let deadline = match extensions.get::<Deadline>() {
        Some(deadline) => *deadline,
        None => {
            let deadline = Deadline(Instant::now() + timeout);
            extensions.insert(deadline);
            deadline
        }
    };
    deadline.0.saturating_duration_since(Instant::now())
}
