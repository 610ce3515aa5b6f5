//! SQL answers on a live server, for every way in (`POST /v1/sql`, the
//! PostgreSQL wire): the query planned against the server's schema
//! ([`cardinal_engine::sql::Prepared`]), run over a live view of the
//! engine holding its summary, with what that view covers (Kafka
//! partitions) for a cluster's coordinator.

use cardinal_engine::sql::Prepared;
use cardinal_export::Table;
use cardinal_rollup::Rollup;

use crate::service::Service;
use crate::source::Coverage;

/// Why a SQL query got no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The query is wrong (does not parse, names an unknown column, ...):
    /// the message quotes it with a caret. HTTP 400.
    Query(String),
    /// The server cannot answer now (a view failed). HTTP 503.
    Unavailable(String),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Query(why) | Refusal::Unavailable(why) => f.write_str(why),
        }
    }
}

/// `text` planned against the service's schema.
///
/// # Errors
///
/// [`Refusal::Query`] with the caret text.
pub fn prepare(service: &Service, text: &str) -> Result<Prepared, Refusal> {
    Prepared::new(service.plan(), text).map_err(|e| Refusal::Query(e.to_string()))
}

/// This node's partial answer to `prepared` (its answer groups, before
/// rows, mergeable with peers'), the stored groups it merged, and what
/// its view covers.
///
/// # Errors
///
/// [`Refusal::Unavailable`] when the view fails; [`Refusal::Query`] when
/// the query cannot be evaluated (overflow, the scan limit).
pub fn partial(
    service: &Service,
    prepared: &Prepared,
) -> Result<(Rollup, usize, Coverage), Refusal> {
    let name = prepared.summary_name();
    let index = service
        .engine_of(name)
        .ok_or_else(|| Refusal::Unavailable(format!("no engine holds summary {name}")))?;
    let (view, coverage) = service
        .view_covered(index)
        .map_err(|e| Refusal::Unavailable(format!("{e:#}")))?;
    let rollup = view
        .rollup(name)
        .ok_or_else(|| Refusal::Unavailable(format!("no rollup for summary {name}")))?;
    let (answer, matched) = prepared
        .partial(rollup)
        .map_err(|e| Refusal::Query(e.to_string()))?;
    Ok((answer, matched, coverage))
}

/// Answers `text` from this node alone: what the PostgreSQL front end
/// and a server without peers give.
///
/// # Errors
///
/// As [`prepare`] and [`partial`].
pub fn answer(service: &Service, text: &str) -> Result<Table, Refusal> {
    let prepared = prepare(service, text)?;
    let (rollup, matched, _) = partial(service, &prepared)?;
    prepared
        .finish(&rollup, matched)
        .map(|answer| answer.table)
        .map_err(|e| Refusal::Query(e.to_string()))
}
