//! Lists a client can page through, as integrators know them from Stripe:
//! `limit` (1 to 100, default 20), `starting_after` or `ending_before` (the
//! id of a row the client was given; not both), `has_more`, newest first.
//!
//! A page is a keyset on `(created_at, id)` ([`store::Page`]), never an
//! offset: rows made while a client pages are before its first page, so
//! they neither shift the pages nor appear twice, and a deep page costs
//! what the first does.

use chrono::{DateTime, Utc};
use serde::Deserialize;
use uuid::Uuid;

use crate::http::problem::ApiError;
use crate::store::{Cursor, Page, QueryResult};

pub const DEFAULT_LIMIT: i64 = 20;
pub const MAX_LIMIT: i64 = 100;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Query {
    limit: Option<i64>,
    starting_after: Option<String>,
    ending_before: Option<String>,
    status: Option<String>,
    #[serde(rename = "type")]
    type_: Option<String>,
}

/// What a list pages over: its filter's name and values, and how its rows'
/// ids are spelled.
#[derive(Clone, Copy)]
pub struct Listed {
    /// `status` (charges) or `type` (events).
    pub filter: &'static str,
    /// The values the filter may take (none: the list has no filter).
    pub values: &'static [&'static str],
    /// A row's id as the API gives it out, or `None`.
    pub id: fn(&str) -> Option<Uuid>,
}

impl Listed {
    /// Rows named by UUIDs, lowercase and hyphenated; filtered by `status`.
    pub const fn by_status(values: &'static [&'static str]) -> Listed {
        Listed {
            filter: "status",
            values,
            id: plain_id,
        }
    }
}

/// An id as the API gives them out (lowercase, hyphenated).
pub fn plain_id(text: &str) -> Option<Uuid> {
    Uuid::parse_str(text)
        .ok()
        .filter(|id| id.hyphenated().to_string() == text)
}

/// A list request's query string, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct ListRequest {
    limit: i64,
    /// `starting_after` or `ending_before`, by the row's id.
    from: Option<Start>,
    status: Option<&'static str>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Start {
    After(Uuid),
    Before(Uuid),
}

impl ListRequest {
    /// Parses the query string; `statuses` are the values `status` may
    /// take (none: the list has no `status` filter, and it is refused).
    pub fn parse(query: &str, statuses: &'static [&'static str]) -> Result<ListRequest, ApiError> {
        ListRequest::parse_for(query, Listed::by_status(statuses))
    }

    /// Parses the query string of a list of `listed`.
    pub fn parse_for(query: &str, listed: Listed) -> Result<ListRequest, ApiError> {
        let q = actix_web::web::Query::<Query>::from_query(query)
            .map_err(|e| ApiError::invalid(format!("Bad query string: {e}.")))?
            .into_inner();
        let limit = q.limit.unwrap_or(DEFAULT_LIMIT);
        if !(1..=MAX_LIMIT).contains(&limit) {
            return Err(ApiError::invalid(format!(
                "`limit` must be between 1 and {MAX_LIMIT}."
            )));
        }
        let from = match (q.starting_after, q.ending_before) {
            (Some(_), Some(_)) => {
                return Err(ApiError::invalid(
                    "Send `starting_after` or `ending_before`, not both: a page runs one way from one row.",
                ));
            }
            (Some(id), None) => Some(Start::After(row_id(listed, "starting_after", &id)?)),
            (None, Some(id)) => Some(Start::Before(row_id(listed, "ending_before", &id)?)),
            (None, None) => None,
        };
        let (given, other) = match listed.filter {
            "type" => (q.type_, q.status.map(|_| "status")),
            _ => (q.status, q.type_.map(|_| "type")),
        };
        if let Some(other) = other {
            return Err(ApiError::invalid(format!(
                "This list has no `{other}` filter."
            )));
        }
        let (name, values) = (listed.filter, listed.values);
        let status = match given {
            None => None,
            Some(s) => Some(
                values
                    .iter()
                    .copied()
                    .find(|known| *known == s)
                    .ok_or_else(|| {
                        ApiError::invalid(match values {
                            [] => format!("This list has no `{name}` filter."),
                            _ => format!("`{name}` must be one of: {}.", values.join(", ")),
                        })
                    })?,
            ),
        };
        Ok(ListRequest {
            limit,
            from,
            status,
        })
    }

    /// The store's page. `position` finds the cursor's row (the caller's
    /// own: another account's id is no row) and gives its `created_at`.
    pub fn page(
        &self,
        position: impl FnOnce(Uuid) -> QueryResult<Option<DateTime<Utc>>>,
    ) -> Result<Page, ApiError> {
        let cursor = match self.from {
            None => None,
            Some(Start::After(id)) => {
                Some(Cursor::After(found(position(id)?, "starting_after")?, id))
            }
            Some(Start::Before(id)) => {
                Some(Cursor::Before(found(position(id)?, "ending_before")?, id))
            }
        };
        Ok(Page {
            limit: self.limit,
            cursor,
            status: self.status,
        })
    }

    /// The page's rows as the client gets them, newest first, and whether
    /// there are more beyond them (`has_more`, in the direction paged: older
    /// after `starting_after` or none, newer before `ending_before`). `rows`
    /// are as the store read them: up to `limit + 1`, in its order.
    pub fn finish<T>(&self, mut rows: Vec<T>) -> (Vec<T>, bool) {
        let has_more = rows.len() as i64 > self.limit;
        rows.truncate(self.limit as usize);
        if matches!(self.from, Some(Start::Before(_))) {
            rows.reverse();
        }
        (rows, has_more)
    }
}

/// A row's id as the API gives them out.
fn row_id(listed: Listed, parameter: &str, text: &str) -> Result<Uuid, ApiError> {
    (listed.id)(text).ok_or_else(|| {
        ApiError::invalid(format!(
            "`{parameter}` must be the id of a row of this list, as the API gave it (lowercase, hyphenated)."
        ))
    })
}

fn found(at: Option<DateTime<Utc>>, parameter: &str) -> Result<DateTime<Utc>, ApiError> {
    at.ok_or_else(|| {
        ApiError::invalid(format!(
            "`{parameter}` names no row of this list for your account."
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_is_checked_whole() {
        let id = "0b9c7c5e-6a0e-4f4e-9d4e-6f1f2d3c4b5a";
        let ok = ListRequest::parse(&format!("limit=5&starting_after={id}"), &["failed"]).unwrap();
        assert_eq!(ok.limit, 5);
        assert_eq!(ok.from, Some(Start::After(id.parse().unwrap())));
        for bad in [
            format!("starting_after={id}&ending_before={id}"),
            "limit=0".to_owned(),
            "limit=101".to_owned(),
            "starting_after=0B9C7C5E-6A0E-4F4E-9D4E-6F1F2D3C4B5A".to_owned(),
            "status=pending".to_owned(),
            "offset=20".to_owned(),
        ] {
            assert!(ListRequest::parse(&bad, &["failed"]).is_err(), "{bad}");
        }
        assert!(ListRequest::parse("status=failed", &[]).is_err());
    }

    #[test]
    fn a_page_before_a_row_is_reversed_to_newest_first() {
        let before = ListRequest {
            limit: 2,
            from: Some(Start::Before(Uuid::nil())),
            status: None,
        };
        // Read oldest first from the cursor, one more than the limit.
        assert_eq!(before.finish(vec![1, 2, 3]), (vec![2, 1], true));
        assert_eq!(before.finish(vec![1]), (vec![1], false));
        let first = ListRequest {
            from: None,
            ..before
        };
        assert_eq!(first.finish(vec![3, 2, 1]), (vec![3, 2], true));
    }
}
