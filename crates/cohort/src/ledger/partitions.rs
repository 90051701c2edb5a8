//! What a partition-aware purge decided for each partition: part of the
//! audit events ([`super::AuditEvent`]) and of a run's result. Produced by
//! the run layer (`run/partitions.rs`, which re-exports them); defined here,
//! with the events that carry them.

use serde::Serialize;

/// What a partition-aware purge does with one partition of a table
/// partitioned by `RANGE` on its anchor (see `docs/partitions.md`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct PartitionPlan {
    /// The partition, `schema.name` (unquoted).
    pub partition: String,
    /// Dropped whole, or left to the row-by-row batches.
    pub decision: PartitionDecision,
    /// For a drop, the partition's exact row count: the rows dropped (or,
    /// in a dry run or a preview, that would be). `None` for a partition
    /// swept row by row (its rows are in the entity's ordinary counts).
    pub rows: Option<u64>,
}

/// Whether a partition is dropped whole or swept row by row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub enum PartitionDecision {
    /// Detached and dropped (in a dry run or a preview: would be).
    Drop,
    /// Swept row by row through the ordinary batches, for this reason.
    Sweep(SweepReason),
}

/// Why a partition is swept row by row rather than dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub enum SweepReason {
    /// Its upper bound is after the cutoff (or `MAXVALUE`): part of its
    /// range is not yet old enough, and rows may still arrive in it.
    NotExpired,
    /// The `DEFAULT` partition: it has no bounds, and is never dropped.
    Default,
    /// It is itself partitioned, or not a plain table (a foreign table).
    NotALeaf,
    /// An active hold covers at least one of its rows.
    Held,
    /// It holds rows of another tenant than the pass's (a tenant-scoped
    /// pass drops only a partition holding nothing but its tenant's rows).
    OtherTenants,
    /// The type has row handlers, which capture each row before it goes.
    RowHandlers,
    /// The drop could not take its locks within `Options::lock_wait`, or
    /// PostgreSQL refused it (the role does not own the table, an object
    /// depends on the partition); the log says which.
    DropRefused,
}
