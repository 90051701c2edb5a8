//! Preview and sweep (erasure shares the same execution model).

mod access;
mod backlog;
mod batch;
mod erasure;
mod execute;
mod hold_filter;
mod lease;
mod maintenance;
mod markers;
mod order;
mod partitions;
mod plan;
mod preview;
mod replay;
mod review;
mod statements;
mod sweep;

use chrono::{DateTime, Utc};
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

pub use access::{AccessExport, AccessRequest, AccessType};
pub use backlog::{Backlog, BacklogEntry, BacklogReason};
pub use erasure::{ErasureRequest, MAX_SUBJECT_BYTES, Subject};
pub use maintenance::{TableMaintenance, VacuumOptions, VacuumOutcome};
pub use markers::MARKER_PREFIX;
pub use partitions::{PartitionDecision, PartitionPlan, SweepReason};
pub use preview::{Preview, PreviewEntry};
pub use replay::{ReplayFailure, ReplayReport, ReplayedErasure};
pub(crate) use sweep::close;

use crate::ledger::{EntitySummary, Failure, RunKind, RunStatus};

/// How a sweep runs.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct SweepOptions {
    /// Count and write the ledger, but change no row.
    pub dry_run: bool,
    /// Cancels the run at the next batch boundary; committed batches stay.
    pub cancellation: Option<CancellationToken>,
    /// Ends the run with `VACUUM (ANALYZE)` of the tables it changed enough
    /// rows in (contract OB3); `None` only reports their dead tuples
    /// ([`RunResult::tables`]).
    pub vacuum: Option<VacuumOptions>,
}

impl SweepOptions {
    /// A dry run: counts and ledger, no changes.
    pub fn dry_run(mut self) -> Self {
        self.dry_run = true;
        self
    }

    /// Stops the run when `token` is cancelled.
    pub fn cancel_on(mut self, token: CancellationToken) -> Self {
        self.cancellation = Some(token);
        self
    }

    /// Vacuums the tables the sweep changed enough rows in, after it.
    ///
    /// ```
    /// use cohort::{SweepOptions, VacuumOptions};
    /// let options = SweepOptions::default().vacuum(VacuumOptions::default().min_rows(50_000));
    /// assert_eq!(options.vacuum.map(|v| v.min_rows), Some(50_000));
    /// ```
    pub fn vacuum(mut self, vacuum: VacuumOptions) -> Self {
        self.vacuum = Some(vacuum);
        self
    }
}

/// One entity that failed during a run; the others went on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct EntityFailure {
    /// The retained-entity id.
    pub entity_id: Uuid,
    /// The Rust type.
    pub entity_type: &'static str,
    /// The sanitized failure (the ledger stores the same).
    pub failure: Failure,
}

/// A type registered as explicitly exempt (`#[cohort(exempt = "...")]`):
/// reported so that what is deliberately kept shows up next to what is swept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ExemptType {
    /// The Rust type.
    pub entity_type: &'static str,
    /// Why it is exempt.
    pub reason: &'static str,
}

/// What a sweep or an erasure did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct RunResult {
    /// The run's id in `sweep_run`.
    pub run_id: Uuid,
    /// Sweep or erasure.
    pub kind: RunKind,
    /// How it ended.
    pub status: RunStatus,
    /// Whether it was a dry run.
    pub dry_run: bool,
    /// The logical time, in UTC, at PostgreSQL's precision (microseconds):
    /// the value every cutoff was computed from and the ledger stores.
    pub now: DateTime<Utc>,
    /// One summary per entity processed, in processing order.
    pub summaries: Vec<EntitySummary>,
    /// The entities that failed.
    pub entity_failures: Vec<EntityFailure>,
    /// The registered types that are explicitly exempt (never swept).
    pub exempt: Vec<ExemptType>,
    /// For a real sweep or erasure, each table it changed rows in: its dead
    /// tuples after the run, and whether it was vacuumed (contracts OB3,
    /// SA3: [`SweepOptions::vacuum`], [`ErasureRequest::vacuum`]). Empty for
    /// a dry run.
    pub tables: Vec<TableMaintenance>,
    /// What disposition review did (contracts DR1, DR2): batches frozen,
    /// auto-approved, carried out and voided, in order. Empty for an
    /// erasure and a dry run.
    pub dispositions: Vec<crate::disposition::DispositionActivity>,
}

impl RunResult {
    /// Rows changed by the run (or that would have been, in a dry run).
    pub fn affected(&self) -> u64 {
        self.summaries.iter().map(|s| s.affected).sum()
    }
}

pub(crate) fn cancelled(token: &Option<CancellationToken>) -> bool {
    token.as_ref().is_some_and(CancellationToken::is_cancelled)
}
