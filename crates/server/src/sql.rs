//! SQL answers on a live server, for every way in (`POST /v1/sql`, the
//! PostgreSQL wire): the query planned against the server's schema
//! ([`cardinal_engine::sql::Prepared`]), run over a live view of the
//! engine holding its summary, with what that view covers (Kafka
//! partitions) for a cluster's coordinator.

use cardinal_engine::sql::Prepared;
use cardinal_rollup::Rollup;

use crate::service::Service;
use crate::source::Coverage;

/// Why a SQL query got no answer.
#[derive(Debug)]
pub enum Refusal {
    /// The query is wrong (does not parse, names an unknown column, passes
    /// a limit, ...): the engine's error, whose message quotes the query
    /// with a caret. HTTP 400; a PostgreSQL client gets its SQLSTATE.
    Query(cardinal_engine::Error),
    /// The server cannot answer now (a view failed, a peer is missing,
    /// two nodes cover one partition): HTTP 503 or 409, as `status` says.
    Unavailable {
        /// The HTTP status that says why (503 or 409).
        status: u16,
        /// What is wrong.
        why: String,
    },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Query(e) => write!(f, "{e}"),
            Refusal::Unavailable { why, .. } => f.write_str(why),
        }
    }
}

/// A view that could not be had: 503.
fn unavailable(why: String) -> Refusal {
    Refusal::Unavailable { status: 503, why }
}

/// `text` planned against the service's schema.
///
/// # Errors
///
/// [`Refusal::Query`] with the caret text.
pub fn prepare(service: &Service, text: &str) -> Result<Prepared, Refusal> {
    Prepared::new(service.plan(), text).map_err(Refusal::Query)
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
        .ok_or_else(|| unavailable(format!("no engine holds summary {name}")))?;
    let (view, coverage) = service
        .view_covered(index)
        .map_err(|e| unavailable(format!("{e:#}")))?;
    let rollup = view
        .rollup(name)
        .ok_or_else(|| unavailable(format!("no rollup for summary {name}")))?;
    let (answer, matched) = prepared.partial(rollup).map_err(Refusal::Query)?;
    Ok((answer, matched, coverage))
}
