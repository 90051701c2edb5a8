//! What observers hear, and the ledger's vocabulary.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use crate::policy::{Period, Strategy};

/// What kind of run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub enum RunKind {
    /// A retention sweep.
    Sweep,
    /// A right-to-erasure request.
    Erasure,
}

impl RunKind {
    /// The name stored in `sweep_run.run_kind`.
    pub fn as_str(&self) -> &'static str {
        match self {
            RunKind::Sweep => "Sweep",
            RunKind::Erasure => "Erasure",
        }
    }
}

/// Who started a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub enum Trigger {
    /// The scheduled worker.
    Scheduled,
    /// A direct call.
    Manual,
}

impl Trigger {
    /// The name stored in `sweep_run.trigger`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Trigger::Scheduled => "Scheduled",
            Trigger::Manual => "Manual",
        }
    }
}

/// A run's status, as stored in `sweep_run.status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub enum RunStatus {
    /// Running (or its owner died; see the settle timeout).
    Started,
    /// Every entity succeeded.
    Succeeded,
    /// At least one entity failed; the others were processed.
    PartiallyFailed,
    /// The run failed as a whole.
    Failed,
    /// The run was cancelled; committed batches stay committed.
    Cancelled,
}

impl RunStatus {
    /// The name stored in the ledger.
    pub fn as_str(&self) -> &'static str {
        match self {
            RunStatus::Started => "Started",
            RunStatus::Succeeded => "Succeeded",
            RunStatus::PartiallyFailed => "PartiallyFailed",
            RunStatus::Failed => "Failed",
            RunStatus::Cancelled => "Cancelled",
        }
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The counts of one (retained entity, category, tenant, strategy) in one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct EntitySummary {
    /// The retained-entity id.
    pub entity_id: Uuid,
    /// The Rust type's name.
    pub entity_type: &'static str,
    /// The category.
    pub category: &'static str,
    /// The tenant (nil for tenantless).
    pub tenant_id: Uuid,
    /// The strategy applied; `None` when no rule could be resolved.
    pub strategy: Option<Strategy>,
    /// Rows changed (or, in a dry run, that would have been).
    pub affected: u64,
    /// Rows past the cutoff protected by an active hold, measured directly.
    pub held: u64,
    /// Eligible rows left alone for another reason (locked by another
    /// transaction, changed meanwhile).
    pub skipped: u64,
    /// Rows whose anchor is NULL: never eligible for a sweep, and kept by an
    /// erasure with a positive legal minimum (contract E3).
    pub null_anchor: u64,
    /// For an erasure with a positive legal minimum, the subject's rows whose
    /// anchor is not yet past it (kept for now; NULL anchors are counted in
    /// `null_anchor`). Zero otherwise. Stored as `legal_minimum_count`.
    pub legal_minimum: u64,
    /// The period applied, when a rule resolved: the greater of the period
    /// and the legal minimum for a sweep, the legal minimum (if positive) for
    /// an erasure. Stored in the ledger as ISO 8601 text (`P30D`).
    pub applied_period: Option<Period>,
    /// The cutoff applied, when there was one: `None` for exempt types, for an
    /// erasure without a legal minimum, and when the period is so long that
    /// the cutoff falls before PostgreSQL's earliest timestamp (then nothing
    /// is old enough).
    pub cutoff: Option<DateTime<Utc>>,
    /// The rule's provenance.
    pub rule_source: Option<String>,
    /// The rule's reason.
    pub rule_reason: Option<String>,
    /// The sanitized failure, when this entity failed.
    pub error: Option<String>,
    /// For a purge of a table partitioned by `RANGE` on its anchor: each
    /// partition, dropped whole or swept row by row, and why (contract PT1;
    /// `docs/partitions.md`). A dropped partition's rows are in `affected`.
    /// Empty for every other table and strategy (and then left out of JSON).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub partitions: Vec<super::partitions::PartitionPlan>,
}

/// One event of a run, delivered to observers after its transaction committed.
///
/// Serializes as `{"event": "Started", ...fields}`, so observers can ship
/// events as they are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "event")]
#[non_exhaustive]
pub enum AuditEvent {
    /// The run row committed.
    Started {
        /// The run.
        run_id: Uuid,
        /// Sweep or erasure.
        kind: RunKind,
        /// Scheduled or manual.
        trigger: Trigger,
        /// Whether nothing is changed.
        dry_run: bool,
        /// The tenant (nil for tenantless).
        tenant_id: Uuid,
        /// The logical time.
        now: DateTime<Utc>,
    },
    /// A batch committed.
    EntityProgress {
        /// The run.
        run_id: Uuid,
        /// The retained-entity id.
        entity_id: Uuid,
        /// The strategy.
        strategy: Strategy,
        /// Rows this batch changed.
        batch_affected: u64,
        /// Rows changed so far for this entity.
        total_affected: u64,
    },
    /// A row changed (per-row audit only). Contains identifying data: treat
    /// observers as sensitive-data processors.
    RowDetail {
        /// The run.
        run_id: Uuid,
        /// The retained-entity id.
        entity_id: Uuid,
        /// The row's canonical record id.
        record_id: String,
        /// The row's tenant (nil for tenantless).
        tenant_id: Uuid,
        /// What was done.
        action: Strategy,
    },
    /// An entity finished.
    EntitySummary {
        /// The run.
        run_id: Uuid,
        /// The counts.
        summary: EntitySummary,
    },
    /// The run settled.
    Settled {
        /// The run.
        run_id: Uuid,
        /// `Succeeded` (the "Completed" event), `PartiallyFailed`, `Failed` or `Cancelled`.
        status: RunStatus,
        /// The sanitized error, if any.
        error: Option<String>,
    },
}
