//! JSON rows that more than one command prints, defined once so their
//! field names cannot drift apart (`--json` names are stable, contract K3).
//!
//! A run is printed by two commands from two sources, and the two shapes
//! stay two types on purpose: [`super::runs::RunRowJson`] (`runs list`,
//! `runs show`: a run as the ledger keeps it) and [`super::sweep::RunJson`]
//! (`sweep`, `erase`: the run that just finished); their documentation says
//! how they differ. A run's per-table counts are one type, [`SummaryJson`].

use serde::Serialize;
use uuid::Uuid;

/// One table's counts in a run: built by `sweep` and `erase` from the run's
/// result, and by `runs show` from the ledger's summary rows. The same
/// fields under the same names, but for two:
///
/// - `status` (`Running`, `Succeeded`, `Failed` or `Cancelled`) is the
///   ledger's: only `runs show` has it, and it is left out of the JSON of
///   `sweep` and `erase`, whose result carries none (a failed table has an
///   `error`);
/// - `strategy` is null in a finished run's result when no rule resolved;
///   the ledger records that as `Unresolved`, which `runs show` prints.
#[derive(Debug, Serialize)]
pub(crate) struct SummaryJson {
    /// The model's name for the table (as the run recorded it, in `runs show`).
    pub(crate) entity: String,
    /// Its retained-entity id.
    pub(crate) entity_id: Uuid,
    /// Its category.
    pub(crate) category: String,
    /// The tenant (the nil UUID for tenantless runs).
    pub(crate) tenant_id: Uuid,
    /// The strategy applied (see the type's documentation when no rule
    /// resolved).
    pub(crate) strategy: Option<String>,
    /// The ledger's status of the table in the run (`runs show` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) status: Option<String>,
    /// Rows changed (or, in a dry run, that would have been).
    pub(crate) affected: u64,
    /// Rows protected by a legal hold.
    pub(crate) held: u64,
    /// Rows left for a later run (locked, changed meanwhile).
    pub(crate) skipped: u64,
    /// Rows with a NULL anchor (or blocked by a legal minimum, in an erasure).
    pub(crate) null_anchor: u64,
    /// Rows the rule's period made eligible that its legal minimum still
    /// keeps (erasures with a legal minimum; zero for sweeps).
    pub(crate) legal_minimum: u64,
    /// The period applied, ISO 8601.
    pub(crate) applied_period: Option<String>,
    /// The cutoff applied.
    pub(crate) cutoff: Option<String>,
    /// The rule's source.
    pub(crate) rule_source: Option<String>,
    /// The rule's reason.
    pub(crate) rule_reason: Option<String>,
    /// The sanitized failure, when the table failed.
    pub(crate) error: Option<String>,
}
