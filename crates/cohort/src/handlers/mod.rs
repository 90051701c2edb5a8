//! Row handlers: capture a row before Cohort changes it, act on it after the
//! change committed, at least once.
//!
#![doc = include_str!("../../../../docs/handlers.md")]

pub(crate) mod queue;
pub(crate) mod registry;

use std::fmt;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::policy::{ProviderError, Strategy};

// The dispatcher runs on the engine, a layer above the handlers' types, so
// it lives in `crate::dispatch`; re-exported here at its public path.
pub use crate::dispatch::{DispatchReport, Dispatcher, MAX_UNSERVED_COUNTED};

/// The channel Cohort notifies when a batch queued handler work; the payload
/// is the schema of Cohort's tables, so installs in other schemas ignore it.
pub(crate) const CHANNEL: &str = "cohort_handler_work";
pub(crate) use queue::QueueSql;

/// What a handler's hooks return on failure: any error. Only its type name
/// reaches the ledger (sanitized, with a diagnostic id); the full error is
/// logged with the same id.
pub type HandlerError = ProviderError;

/// A side effect around the rows Cohort changes: delete a blob when its row
/// is purged, emit an event, keep an anonymised row's original values for a
/// downstream system.
///
/// Register one per retained type with
/// [`CohortBuilder::row_handler`](crate::CohortBuilder::row_handler).
///
/// - [`capture`](RowHandler::capture) runs inside the batch's transaction,
///   before the row is changed. Treat it as capture-only: it cannot touch the
///   database, and a side effect here survives a rollback. It may run for a
///   row that is then not changed.
/// - [`deliver`](RowHandler::deliver) runs after the batch committed, from
///   the queue, at least once: make it idempotent
///   ([`HandlerContext::attempt`] above 1 means a possible retry of work that
///   completed).
pub trait RowHandler: Send + Sync + 'static {
    /// What [`capture`](RowHandler::capture) keeps for
    /// [`deliver`](RowHandler::deliver): stored as JSON in the ledger's row
    /// detail until every handler of the row is done. It must come back from
    /// JSON equal to itself (checked at capture, before the row is changed).
    /// It may hold personal data: see the payload retention.
    type Snapshot: Serialize + DeserializeOwned + PartialEq + Send + Sync + 'static;

    /// Captures what [`deliver`](RowHandler::deliver) will need from the row
    /// as it is before the change. An error (or a panic) leaves the row
    /// unchanged for this run and dead-letters its work once.
    fn capture(&self, row: &CapturedRow) -> Result<Self::Snapshot, HandlerError>;

    /// Acts after the change committed. At nine tenths of the claim timeout
    /// `ctx.cancellation` fires and the attempt counts as failed; the future
    /// may then return on its own until 0.95 of the claim, after which it is
    /// dropped.
    fn deliver<'a>(
        &'a self,
        ctx: &'a HandlerContext,
        snapshot: Self::Snapshot,
    ) -> crate::BoxFuture<'a, Result<(), HandlerError>>;
}

/// A row as captured before the change: its columns as JSON (PostgreSQL's
/// `to_jsonb` of the row) and its canonical record id.
#[derive(Debug, Clone, PartialEq)]
pub struct CapturedRow {
    record_id: String,
    columns: serde_json::Map<String, serde_json::Value>,
}

impl CapturedRow {
    pub(crate) fn new(
        record_id: String,
        columns: serde_json::Map<String, serde_json::Value>,
    ) -> CapturedRow {
        CapturedRow { record_id, columns }
    }

    /// The row's canonical record id (`CAST(key AS text)`).
    pub fn record_id(&self) -> &str {
        &self.record_id
    }

    /// Column `name` read as `T` (`Option<T>` for a nullable column).
    pub fn get<T: DeserializeOwned>(&self, name: &str) -> Result<T, HandlerError> {
        let value = self
            .columns
            .get(name)
            .ok_or_else(|| format!("the row has no column {name:?}"))?;
        Ok(serde_json::from_value(value.clone())?)
    }

    /// Every column, as PostgreSQL's `to_jsonb` wrote it.
    pub fn columns(&self) -> &serde_json::Map<String, serde_json::Value> {
        &self.columns
    }
}

/// Whose delivery this is, and how to stop it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct HandlerContext {
    /// The retained type's id.
    pub entity_id: Uuid,
    /// The row's canonical record id.
    pub record_id: String,
    /// The row's tenant (nil for tenantless types).
    pub tenant_id: Uuid,
    /// The run that changed the row.
    pub run_id: Uuid,
    /// What the run did to it.
    pub strategy: Strategy,
    /// This delivery's attempt, from 1. Above 1, an earlier attempt may have
    /// done the work already.
    pub attempt: u32,
    /// Fires at nine tenths of the claim timeout ([`HandlerContext::cancel_at`]):
    /// stop then (the future is dropped at 0.95 of it). The attempt counts
    /// as failed.
    pub cancellation: CancellationToken,
    /// When the dispatcher took the claim (its clock, read before the claim
    /// statement, so never later than the database's claim).
    pub claimed_at: std::time::Instant,
    /// When [`HandlerContext::cancellation`] fires: `claimed_at` plus nine
    /// tenths of [`crate::Options::claim_timeout`]. A handler with long work
    /// can plan by it (`cancel_at.saturating_duration_since(Instant::now())`
    /// is the time it has left).
    pub cancel_at: std::time::Instant,
}

/// When a handler's deliveries may start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Dispatch {
    /// As soon as the batch that changed the row committed (the default).
    #[default]
    AfterBatch,
    /// Only once the run that changed the row has settled (succeeded,
    /// failed, partially failed or cancelled; a run abandoned by a crash is
    /// settled failed after the settle timeout).
    AfterSweepSettled,
}

/// How a handler is registered.
///
/// ```
/// let options = cohort::handlers::RowHandlerOptions::new()
///     .id(uuid::Uuid::parse_str("9b2e6c61-3a3f-4c61-9d39-2b7a8d4c1e55").unwrap())
///     .priority(10)
///     .dispatch(cohort::handlers::Dispatch::AfterSweepSettled);
/// assert_eq!(options.priority_value(), 10);
/// ```
#[derive(Debug, Clone, Default)]
pub struct RowHandlerOptions {
    id: Option<Uuid>,
    priority: i32,
    dispatch: Dispatch,
}

impl RowHandlerOptions {
    /// Defaults: identity from the handler's type name, priority 0,
    /// [`Dispatch::AfterBatch`].
    pub fn new() -> RowHandlerOptions {
        RowHandlerOptions::default()
    }

    /// A stable identity for the handler's queued work. Without one, the
    /// handler's Rust type name is its identity, and renaming or moving the
    /// type dead-letters the work still queued under the old name
    /// (`UnknownHandler`). Give long-lived handlers an id.
    pub fn id(mut self, id: Uuid) -> RowHandlerOptions {
        self.id = Some(id);
        self
    }

    /// The order among the type's handlers for one row: lower first; equal
    /// priorities run in registration order. One handler's delivery at a
    /// time per row.
    pub fn priority(mut self, priority: i32) -> RowHandlerOptions {
        self.priority = priority;
        self
    }

    /// When deliveries may start.
    pub fn dispatch(mut self, dispatch: Dispatch) -> RowHandlerOptions {
        self.dispatch = dispatch;
        self
    }

    /// The priority set.
    pub fn priority_value(&self) -> i32 {
        self.priority
    }
}

impl fmt::Display for Dispatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Dispatch::AfterBatch => "AfterBatch",
            Dispatch::AfterSweepSettled => "AfterSweepSettled",
        })
    }
}
