//! Change-stream markers (contract SA4): with
//! [`Options::change_stream_markers`](crate::Options::change_stream_markers)
//! on, every transaction of a sweep or an erasure that changes rows (a
//! batch, or a partition drop) also writes one transactional logical
//! decoding message, prefix [`MARKER_PREFIX`], so a change-data-capture
//! consumer can tell retention's deletes and updates from the
//! application's own. The message is part of the transaction: a batch that
//! rolls back leaves none, and a decoder sees it between the transaction's
//! `BEGIN` and `COMMIT`, next to the changes it labels.
//!
//! The message's content is one JSON object (see [`ChangeMarker`]); it names
//! the run, the type and the strategy, never a row's values or a subject.

use serde::Serialize;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::ledger::RunKind;
use crate::model::resolved::ResolvedEntity;
use crate::policy::Strategy;

/// The prefix of Cohort's logical decoding messages.
pub const MARKER_PREFIX: &str = "cohort";

/// The content of one change-stream marker, as JSON (`docs/data-subjects.md`).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ChangeMarker<'a> {
    /// The run's id (`sweep_run.run_id`).
    pub(crate) run: Uuid,
    /// `sweep` or `erasure`.
    pub(crate) kind: &'static str,
    /// The retained type's name.
    #[serde(rename = "type")]
    pub(crate) entity_type: &'a str,
    /// The retained type's id.
    pub(crate) entity: Uuid,
    /// The table, `schema.name` (unquoted).
    pub(crate) table: String,
    /// `purge`, `soft_delete` or `anonymise`.
    pub(crate) strategy: &'static str,
    /// The batch's number within the type in this run (1, 2, ...); `None`
    /// for a partition drop.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) batch: Option<u64>,
    /// The partition dropped, `schema.name`; only for a partition drop.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) partition: Option<String>,
    /// Rows the transaction changed (deleted, updated, or dropped with the
    /// partition).
    pub(crate) rows: u64,
}

impl<'a> ChangeMarker<'a> {
    /// The marker of `rows` changed in `entity` by run `run`; the caller
    /// sets [`ChangeMarker::batch`] or [`ChangeMarker::partition`].
    pub(crate) fn new(
        run: Uuid,
        kind: RunKind,
        entity: &'a ResolvedEntity,
        strategy: Strategy,
        rows: u64,
    ) -> ChangeMarker<'a> {
        ChangeMarker {
            run,
            kind: kind_name(kind),
            entity_type: entity.type_name(),
            entity: entity.entity_id,
            table: entity.table.unquoted(),
            strategy: strategy_name(strategy),
            batch: None,
            partition: None,
            rows,
        }
    }
}

/// The marker's name for a run kind.
fn kind_name(kind: RunKind) -> &'static str {
    match kind {
        RunKind::Sweep => "sweep",
        RunKind::Erasure => "erasure",
    }
}

/// The marker's name for a strategy.
fn strategy_name(strategy: Strategy) -> &'static str {
    match strategy {
        Strategy::Purge => "purge",
        Strategy::SoftDelete => "soft_delete",
        Strategy::Anonymise => "anonymise",
        Strategy::Exempt => "exempt",
        Strategy::Archive => "archive",
    }
}

/// Writes `marker` into the open transaction on `conn`.
pub(crate) async fn emit(conn: &mut PgConnection, marker: &ChangeMarker<'_>) -> sqlx::Result<()> {
    let content = serde_json::to_string(marker)
        .map_err(|e| sqlx::Error::Protocol(format!("change-stream marker: {e}")))?;
    crate::sql::query(
        "SELECT pg_catalog.pg_logical_emit_message(true, $1::pg_catalog.text, $2::pg_catalog.text)::pg_catalog.text",
    )
    .bind(MARKER_PREFIX)
    .bind(content)
    .execute(&mut *conn)
    .await?;
    Ok(())
}
