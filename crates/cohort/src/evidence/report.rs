//! The auditor's report (contract EV3): gathered from the ledger in one
//! read-only snapshot, rendered as one self-contained HTML file (inline CSS
//! and SVG, no script, no request at view time) from a compile-time
//! template (askama), with charts drawn by plotters' SVG backend.
//!
//! Memory is bounded: every figure is aggregated in SQL (per category and
//! month, per type, per rule, per kind of run), and every list (runs,
//! erasures, failed runs, holds, matters) is capped at
//! [`ReportOptions::list_limit`] rows, with its total counted apart, so the
//! report states how many were left out.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;

use askama::Template;
use chrono::{DateTime, Utc};
use futures_util::TryStreamExt;
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row};
use uuid::Uuid;

use super::charts::{self, SERIES, grouped};
use super::{EvidenceError, TimeRange, VerifyReport, verify};
use crate::error::Error;
use crate::schema::SchemaName;
use crate::sql::AssertSqlSafe;

/// How many rows each list of the report shows at most, by default.
pub const DEFAULT_LIST_LIMIT: u32 = 500;

/// What to put in the report.
#[derive(Debug, Clone)]
pub struct ReportOptions {
    /// The runs to report on: those that started in this range. Holds and
    /// matters that ended are those that ended in it.
    pub range: TimeRange,
    /// The instant active holds are judged at (and their age measured to).
    pub as_of: DateTime<Utc>,
    /// The report's title.
    pub title: String,
    /// The tables the host keeps out of retention on purpose, with their
    /// reasons. The ledger does not know them (an exempt type is never
    /// swept), so only the caller can say: [`crate::Cohort::audit_report`]
    /// fills it from the handle's model, `cohort report` from the model
    /// file. `None`: not given, and the report says so.
    pub exempt: Option<Vec<ExemptTable>>,
    /// The longest list the report shows (runs, erasures, failed runs,
    /// holds, matters); each says how many more there are. At least 1.
    pub list_limit: u32,
    /// The hex Ed25519 public key the report file will be signed with
    /// ([`super::sign_report`]), when the caller signs it: the report names
    /// it and says how to check the detached signature.
    pub signed_by: Option<String>,
}

impl ReportOptions {
    /// Runs that started in `range`; holds active now; lists of at most
    /// [`DEFAULT_LIST_LIMIT`] rows; no exempt tables given; not signed.
    pub fn new(range: TimeRange) -> ReportOptions {
        ReportOptions {
            range,
            as_of: Utc::now(),
            title: "Data retention: auditor's report".to_owned(),
            exempt: None,
            list_limit: DEFAULT_LIST_LIMIT,
            signed_by: None,
        }
    }
}

/// A table kept out of retention on purpose (contract M1).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExemptTable {
    /// Its name in the model.
    pub name: String,
    /// The table, `schema.table`.
    pub table: String,
    /// Why it is exempt.
    pub reason: String,
}

impl ExemptTable {
    /// An exempt table.
    pub fn new(
        name: impl Into<String>,
        table: impl Into<String>,
        reason: impl Into<String>,
    ) -> ExemptTable {
        ExemptTable {
            name: name.into(),
            table: table.into(),
            reason: reason.into(),
        }
    }
}

/// A list capped at [`ReportOptions::list_limit`] rows, and how many rows
/// the whole list has.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReportList<T> {
    /// The rows shown, in the list's order.
    pub items: Vec<T>,
    /// How many rows the list has in all.
    pub total: u64,
}

impl<T> ReportList<T> {
    /// How many rows were left out.
    pub fn not_shown(&self) -> u64 {
        self.total.saturating_sub(self.items.len() as u64)
    }
}

/// Rows changed and held for one category in one month (of the runs'
/// start, UTC), dry runs excluded.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CategoryMonth {
    /// The category.
    pub category: String,
    /// `YYYY-MM`.
    pub month: String,
    /// Rows purged (sweeps and erasures).
    pub purged: i64,
    /// Rows soft-deleted.
    pub soft_deleted: i64,
    /// Rows anonymised.
    pub anonymised: i64,
    /// Rows left because an active hold covered them, as the month's
    /// latest run of each type and tenant in which the type succeeded found
    /// them: a held row counts once, however many runs met it, and a run in
    /// which the type failed or was cancelled (its held count incomplete)
    /// does not hide it.
    pub held: i64,
}

/// Runs of one kind and trigger in the range.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunCount {
    /// `Sweep` or `Erasure`.
    pub kind: String,
    /// `Scheduled` or `Manual`.
    pub trigger: String,
    /// Every run, whatever its status.
    pub runs: i64,
    /// Of which dry runs.
    pub dry_runs: i64,
    /// Ended `Succeeded`.
    pub succeeded: i64,
    /// Ended `PartiallyFailed`.
    pub partially_failed: i64,
    /// Ended `Failed`.
    pub failed: i64,
    /// Ended `Cancelled`.
    pub cancelled: i64,
    /// Still `Started`.
    pub in_progress: i64,
    /// Rows changed by the real (not dry) runs.
    pub rows_changed: i64,
}

/// A settled run (not cancelled) of the range.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunEntry {
    /// The run.
    pub run_id: Uuid,
    /// `Sweep` or `Erasure`.
    pub kind: String,
    /// `Scheduled` or `Manual`.
    pub trigger: String,
    /// Whether nothing was changed.
    pub dry_run: bool,
    /// The tenant; `None` for the tenantless pass.
    pub tenant: Option<Uuid>,
    /// `Succeeded`, `PartiallyFailed` or `Failed`.
    pub status: String,
    /// When it started (RFC 3339, UTC).
    pub started_at: String,
    /// When it settled.
    pub settled_at: Option<String>,
    /// How many types (ledger summaries) it processed.
    pub types: i64,
    /// Rows it changed (a dry run: would have).
    pub changed: i64,
    /// Rows it left because a hold or matter covered them.
    pub held: i64,
    /// Types that failed in it.
    pub failed_types: i64,
    /// The erasure it replays after a restore (contract SA2).
    pub replay_of: Option<Uuid>,
}

/// A rule as the ledger recorded it for the runs of the range: one row per
/// category, strategy and provenance.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RuleInForce {
    /// The category.
    pub category: String,
    /// The types of the category it was applied to, by name.
    pub types: String,
    /// The strategy (`Purge`, `SoftDelete`, `Anonymise`, `Exempt`;
    /// `Unresolved` when no rule could be resolved).
    pub strategy: String,
    /// The periods sweeps applied (ISO 8601), comma-separated: each the
    /// greater of the rule's period and its legal minimum (contract P6).
    pub sweep_periods: Option<String>,
    /// The legal minimums erasures applied (ISO 8601, `none` when the rule
    /// had none), comma-separated.
    pub erasure_minimums: Option<String>,
    /// The rule's source.
    pub rule_source: Option<String>,
    /// The rule's reason.
    pub rule_reason: Option<String>,
    /// Sweeps that applied it.
    pub sweeps: i64,
    /// Erasures that applied it.
    pub erasures: i64,
    /// The start of the first run that applied it (RFC 3339, UTC).
    pub first_used: String,
    /// The start of the last.
    pub last_used: String,
}

/// A retained type, as the registry of retained types and the ledger know
/// it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CoverageEntry {
    /// The retained-entity id.
    pub entity_id: Uuid,
    /// Its name (the registry's, else the ledger's).
    pub name: String,
    /// Its table, `schema.table`, when registered.
    pub table: Option<String>,
    /// When a handle registered it (RFC 3339, UTC).
    pub registered_at: Option<String>,
    /// The categories runs of the range recorded for it.
    pub categories: Option<String>,
    /// The strategies they applied.
    pub strategies: Option<String>,
    /// Real (not dry) runs of the range that processed it.
    pub runs: i64,
    /// Of which it failed in.
    pub failed: i64,
    /// Rows those runs changed.
    pub changed: i64,
    /// The start of the last run of the range that processed it.
    pub last_run: Option<String>,
}

impl CoverageEntry {
    /// What the ledger says of the type in the range, in words.
    pub fn state(&self) -> &'static str {
        let strategies = self.strategies.as_deref().unwrap_or("");
        if self.runs == 0 {
            "no run in range"
        } else if self.table.is_none() {
            "in the ledger, not in the registry"
        } else if self.failed >= self.runs {
            "failed in every run"
        } else if strategies == "Exempt" {
            "exempt by its rule"
        } else {
            "swept"
        }
    }
}

/// An erasure request (an erasure run) of the range and its outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ErasureEntry {
    /// The run.
    pub run_id: Uuid,
    /// `Scheduled` or `Manual`.
    pub trigger: String,
    /// Whether nothing was changed.
    pub dry_run: bool,
    /// The tenant; `None` for tenantless.
    pub tenant: Option<Uuid>,
    /// How it ended (`Succeeded`, `PartiallyFailed`, `Failed`,
    /// `Cancelled`).
    pub status: String,
    /// When it started (RFC 3339, UTC).
    pub started_at: String,
    /// When it settled.
    pub settled_at: Option<String>,
    /// The first 16 hex digits of the subject's keyed hash (HMAC-SHA256
    /// under the host's subject key), to match a certificate; `None` when
    /// it recorded none.
    pub subject_hash: Option<String>,
    /// The erasure it replays after a restore.
    pub replay_of: Option<Uuid>,
    /// Types it processed.
    pub types: i64,
    /// Rows erased (a dry run: would have been).
    pub erased: i64,
    /// Rows kept because a hold or matter covered them.
    pub held: i64,
    /// Rows kept because the legal minimum had not passed.
    pub legal_minimum: i64,
    /// Rows kept because their anchor is NULL (the legal minimum cannot be
    /// judged passed).
    pub null_anchor: i64,
    /// Types that failed.
    pub failed_types: i64,
}

/// The erasures of the range, all of them (not only those listed).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ErasureTotals {
    /// Erasure runs settled in the range (dry runs included).
    pub requests: i64,
    /// Of which dry runs.
    pub dry_runs: i64,
    /// Of which did not succeed (`PartiallyFailed`, `Failed`, `Cancelled`).
    pub not_succeeded: i64,
    /// Rows erased by the real ones.
    pub erased: i64,
    /// Rows the real ones kept for a hold or matter.
    pub held: i64,
    /// Rows they kept for the legal minimum.
    pub legal_minimum: i64,
    /// Rows they kept for a NULL anchor.
    pub null_anchor: i64,
}

/// One failure of a failed run, from its sanitized error.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FailureEntry {
    /// The type that failed, by name (`None`: the run as a whole).
    pub entity: Option<String>,
    /// The failure's kind (`Database`, `RuleProvider`, ...).
    pub kind: String,
    /// What the kind means, in words.
    pub meaning: String,
    /// The SQLSTATE of a database error.
    pub sqlstate: Option<String>,
    /// The id the host's log has the full error under.
    pub diagnostic_id: Option<String>,
}

/// A run that failed as a whole or in part.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FailedRun {
    /// The run.
    pub run_id: Uuid,
    /// `Sweep` or `Erasure`.
    pub kind: String,
    /// `Scheduled` or `Manual`.
    pub trigger: String,
    /// `Failed` or `PartiallyFailed`.
    pub status: String,
    /// When it started (RFC 3339, UTC).
    pub started_at: String,
    /// When it settled.
    pub settled_at: Option<String>,
    /// Its sanitized error as stored (kinds, SQLSTATEs, diagnostic ids;
    /// never a message or a value).
    pub error: Option<String>,
    /// The same, read: one entry per failed type.
    pub failures: Vec<FailureEntry>,
}

/// A hold active at the report's `as_of`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ActiveHold {
    /// The hold.
    pub hold_id: Uuid,
    /// The retained-entity id.
    pub entity_id: Uuid,
    /// The retained type's name (its id when no name is known).
    pub entity: String,
    /// The held row's record id.
    pub record_id: String,
    /// The tenant (`-` for tenantless).
    pub tenant: String,
    /// Why it is held.
    pub reason: String,
    /// When it was created (RFC 3339, UTC).
    pub created_at: String,
    /// When it stops protecting by itself (RFC 3339, UTC); `None`: until
    /// removed.
    pub expires_at: Option<String>,
    /// Whole days since its creation, at `as_of`.
    pub age_days: i64,
}

/// A hold that stopped protecting in the range (removed or expired), up to
/// `as_of`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EndedHold {
    /// The hold.
    pub hold_id: Uuid,
    /// The retained-entity id.
    pub entity_id: Uuid,
    /// The retained type's name (its id when no name is known).
    pub entity: String,
    /// The held row's record id.
    pub record_id: String,
    /// The tenant (`-` for tenantless).
    pub tenant: String,
    /// Why it was held.
    pub reason: String,
    /// When it was created (RFC 3339, UTC).
    pub created_at: String,
    /// When it stopped protecting (RFC 3339, UTC).
    pub ended_at: String,
    /// `removed` or `expired`.
    pub ended_by: String,
}

/// A matter hold active at the report's `as_of` (contract MH3).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ActiveMatter {
    /// The matter.
    pub matter_id: Uuid,
    /// What it protects, in words: the subject and the types it covers, or
    /// the type and its anchor window, types by name.
    pub scope: String,
    /// The tenant (`-` for tenantless).
    pub tenant: String,
    /// Who asked for it.
    pub owner: String,
    /// Why.
    pub reason: String,
    /// When it was created (RFC 3339, UTC).
    pub created_at: String,
    /// When it stops by itself (RFC 3339, UTC), if it does.
    pub expires_at: Option<String>,
    /// Whole days since its creation, at `as_of`.
    pub age_days: i64,
}

/// A matter hold that stopped protecting in the range (released or
/// expired), up to `as_of`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EndedMatter {
    /// The matter.
    pub matter_id: Uuid,
    /// What it protected, in words.
    pub scope: String,
    /// The tenant (`-` for tenantless).
    pub tenant: String,
    /// Who asked for it.
    pub owner: String,
    /// Why.
    pub reason: String,
    /// When it was created (RFC 3339, UTC).
    pub created_at: String,
    /// When it stopped protecting (RFC 3339, UTC).
    pub ended_at: String,
    /// `released` or `expired`.
    pub ended_by: String,
}

/// One decision on a disposition batch, as the report lists it (contract
/// DR3).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DecisionLine {
    /// Its position in the chain of disposition decisions.
    pub seq: i64,
    /// `Frozen`, `Approved`, `Rejected`, `Extended`, `Voided`, `CarriedOut`.
    pub decision: String,
    /// Who took it (`auto` for an auto-approval, `cohort` for a sweep).
    pub decided_by: String,
    /// Whether no person took it.
    pub automatic: bool,
    /// When (RFC 3339, UTC).
    pub decided_at: String,
    /// A rejection's reason, or why a batch was voided.
    pub reason: Option<String>,
    /// A rejection's or extension's end (RFC 3339, UTC).
    pub keep_until: Option<String>,
}

/// A disposition batch with a decision in the range: the proof of
/// disposition (contract DR3): what was frozen, under which rule, who
/// decided what and when, and what was carried out.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DispositionEntry {
    /// The batch.
    pub batch_id: Uuid,
    /// The retained type, by name.
    pub entity: String,
    /// The tenant (`-` for tenantless).
    pub tenant: String,
    /// The rule's stage, the first being 1.
    pub stage: i64,
    /// What carrying it out does.
    pub strategy: String,
    /// The rule hash the batch is bound to (lower-case hex).
    pub rule_hash: String,
    /// When it was frozen (RFC 3339, UTC).
    pub frozen_at: String,
    /// Rows frozen.
    pub rows: i64,
    /// Distinct approvers it needs.
    pub approvers_required: i64,
    /// Where it stands now.
    pub status: String,
    /// Carried out: rows changed, kept because held, left because locked,
    /// kept because no longer eligible (or gone).
    pub carried_out: Option<[i64; 4]>,
    /// Every decision on it, in chain order.
    pub decisions: Vec<DecisionLine>,
}

/// The range's disposition batches, added up.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DispositionTotals {
    /// Batches with a decision in the range.
    pub batches: i64,
    /// Rows they froze.
    pub frozen: i64,
    /// Rows carried out (changed) in the range.
    pub changed: i64,
    /// Batches still pending a decision.
    pub pending: i64,
}

/// An auditor's report, gathered by [`audit_report`]; [`AuditReport::to_html`]
/// renders it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct AuditReport {
    /// The install.
    pub schema: SchemaName,
    /// What was asked for.
    pub options: ReportOptions,
    /// When it was gathered.
    pub generated_at: DateTime<Utc>,
    /// How many runs started in the range (any status, dry runs included).
    pub runs_in_range: i64,
    /// The start of the range's first run.
    pub first_run: Option<DateTime<Utc>>,
    /// The start of its last run.
    pub last_run: Option<DateTime<Utc>>,
    /// Per category and month, in order.
    pub rows: Vec<CategoryMonth>,
    /// Runs per kind and trigger.
    pub run_counts: Vec<RunCount>,
    /// Settled runs, oldest first; cancelled runs and runs in progress are
    /// only counted ([`Self::run_counts`]).
    pub runs: ReportList<RunEntry>,
    /// The rules the runs applied, per category.
    pub rules: ReportList<RuleInForce>,
    /// Every retained type the registry or the range's ledger knows.
    pub coverage: Vec<CoverageEntry>,
    /// Erasure requests and their outcomes, oldest first.
    pub erasures: ReportList<ErasureEntry>,
    /// Every erasure of the range, added up.
    pub erasure_totals: ErasureTotals,
    /// Failed and partially failed runs, oldest first.
    pub failed_runs: ReportList<FailedRun>,
    /// Active holds, oldest first.
    pub active_holds: ReportList<ActiveHold>,
    /// Holds that stopped protecting in the range, in the order they did.
    pub ended_holds: ReportList<EndedHold>,
    /// Active matter holds, oldest first.
    pub active_matters: ReportList<ActiveMatter>,
    /// Matter holds that stopped protecting in the range.
    pub ended_matters: ReportList<EndedMatter>,
    /// Disposition batches with a decision in the range, oldest first
    /// (contract DR3).
    pub dispositions: ReportList<DispositionEntry>,
    /// The range's disposition batches, added up.
    pub disposition_totals: DispositionTotals,
    /// The chain's verification.
    pub verification: VerifyReport,
    /// Retained-entity ids to names (the registry's, then the ledger's).
    pub names: BTreeMap<Uuid, String>,
}

fn rfc3339(prefix: &str, c: &str) -> String {
    format!(
        "CASE WHEN {prefix}.{c} IS NULL THEN NULL WHEN pg_catalog.isfinite({prefix}.{c}) THEN \
           pg_catalog.to_char({prefix}.{c} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') \
         WHEN {prefix}.{c} OPERATOR(pg_catalog.>) 'epoch'::pg_catalog.timestamptz THEN 'infinity' \
         ELSE '-infinity' END AS {c}"
    )
}

/// The runs of the range: `$1 <= started_at < $2`.
const IN_RANGE: &str = "pg_catalog.isfinite(r.started_at) \
     AND r.started_at OPERATOR(pg_catalog.>=) $1 AND r.started_at OPERATOR(pg_catalog.<) $2";

/// Gathers the auditor's report of the install in `schema`: the chain's
/// verification ([`verify`]), the retained types and their coverage, the
/// rules in force, runs by kind and trigger, activity per category and
/// month, the runs, erasure requests, failed runs, and holds and matters
/// active and ended. One `REPEATABLE READ READ ONLY` snapshot; figures
/// aggregated in SQL, lists capped at [`ReportOptions::list_limit`].
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), cohort::Error> {
/// use cohort::evidence::{ReportOptions, TimeRange, audit_report};
/// let mut conn = pool.acquire().await?;
/// let schema = cohort::schema::SchemaName::public();
/// let report = audit_report(&mut conn, &schema, &ReportOptions::new(TimeRange::all())).await?;
/// std::fs::write("retention-report.html", report.to_html()?)
///     .map_err(cohort::evidence::EvidenceError::from)?;
/// # Ok(()) }
/// ```
pub async fn audit_report(
    conn: &mut PgConnection,
    schema: &SchemaName,
    options: &ReportOptions,
) -> Result<AuditReport, Error> {
    if options.range.from >= options.range.to {
        return Err(EvidenceError::EmptyRange.into());
    }
    // One read-only snapshot for the verification and the figures, every
    // statement inside it (a pooler in transaction mode keeps them on one
    // server connection).
    let mut tx = super::snapshot(conn).await?;
    let report = read_report(&mut tx, schema, options).await?;
    tx.commit().await?;
    Ok(report)
}

fn tenant_of(t: Option<Uuid>) -> Option<Uuid> {
    t.filter(|t| !t.is_nil())
}

fn tenant_text(t: Option<Uuid>) -> String {
    tenant_of(t).map_or_else(|| "-".to_owned(), |t| t.to_string())
}

fn total_of(total: i64) -> u64 {
    u64::try_from(total).unwrap_or(0)
}

/// The name of a retained type, or its id when none is known.
fn name_of(names: &BTreeMap<Uuid, String>, id: Uuid) -> String {
    names.get(&id).cloned().unwrap_or_else(|| id.to_string())
}

async fn read_report(
    conn: &mut PgConnection,
    schema: &SchemaName,
    options: &ReportOptions,
) -> Result<AuditReport, Error> {
    let verification = verify(conn, schema).await?;
    let limit = i64::from(options.list_limit.max(1));
    let (from, to) = (options.range.from, options.range.to);
    // Holds and matters that ended: in the range, and not after `as_of`.
    let ended_to = to.min(options.as_of);
    let t = Tables::new(schema);

    let span = crate::sql::query(AssertSqlSafe(format!(
        "SELECT pg_catalog.count(*) AS runs, pg_catalog.min(r.started_at) AS first, \
                pg_catalog.max(r.started_at) AS last FROM {runs} AS r WHERE {IN_RANGE}",
        runs = t.runs
    )))
    .bind(from)
    .bind(to)
    .fetch_one(&mut *conn)
    .await?;

    let coverage = read_coverage(conn, &t, options).await?;
    let mut names: BTreeMap<Uuid, String> = BTreeMap::new();
    for c in &coverage {
        names.insert(c.entity_id, c.name.clone());
    }

    Ok(AuditReport {
        schema: schema.clone(),
        options: options.clone(),
        generated_at: Utc::now(),
        runs_in_range: span.try_get("runs")?,
        first_run: span.try_get("first")?,
        last_run: span.try_get("last")?,
        rows: read_category_months(conn, &t, options).await?,
        run_counts: read_run_counts(conn, &t, options).await?,
        runs: read_runs(conn, &t, options, limit).await?,
        rules: read_rules(conn, &t, options, limit).await?,
        erasures: read_erasures(conn, &t, options, limit).await?,
        erasure_totals: read_erasure_totals(conn, &t, options).await?,
        failed_runs: read_failed_runs(conn, &t, options, limit, &names).await?,
        active_holds: read_active_holds(conn, &t, options, limit, &names).await?,
        ended_holds: read_ended_holds(conn, &t, from, ended_to, limit, &names).await?,
        active_matters: read_active_matters(conn, &t, options, limit, &names).await?,
        ended_matters: read_ended_matters(conn, &t, from, ended_to, limit, &names).await?,
        dispositions: read_dispositions(conn, &t, from, to, limit, &names).await?,
        disposition_totals: read_disposition_totals(conn, &t, from, to).await?,
        coverage,
        verification,
        names,
    })
}

/// Cohort's tables, schema-qualified and quoted.
struct Tables {
    runs: crate::sql::QualifiedName,
    summaries: crate::sql::QualifiedName,
    holds: crate::sql::QualifiedName,
    matters: crate::sql::QualifiedName,
    registry: crate::sql::QualifiedName,
    batches: crate::sql::QualifiedName,
    decisions: crate::sql::QualifiedName,
}

impl Tables {
    fn new(schema: &SchemaName) -> Tables {
        Tables {
            runs: schema.table("sweep_run"),
            summaries: schema.table("sweep_run_entity_summary"),
            holds: schema.table("retention_holds"),
            matters: schema.table("retention_matters"),
            registry: schema.table("retention_entities"),
            batches: schema.table("retention_disposition_batches"),
            decisions: schema.table("retention_disposition_decisions"),
        }
    }
}

async fn read_coverage(
    conn: &mut PgConnection,
    t: &Tables,
    options: &ReportOptions,
) -> Result<Vec<CoverageEntry>, Error> {
    // One row per retained type: the registry's (every type a handle
    // registered) and the range's ledger's (aggregated per type), joined.
    let sql = format!(
        "WITH seen AS ( \
           SELECT s.retained_entity_id, pg_catalog.max(s.entity_type) AS entity_type, \
                  pg_catalog.string_agg(DISTINCT s.category, ', ') AS categories, \
                  pg_catalog.string_agg(DISTINCT s.strategy, ', ') FILTER (WHERE NOT r.dry_run) AS strategies, \
                  pg_catalog.count(DISTINCT s.run_id) FILTER (WHERE NOT r.dry_run) AS runs, \
                  pg_catalog.count(DISTINCT s.run_id) FILTER (WHERE NOT r.dry_run AND s.status OPERATOR(pg_catalog.=) 'Failed') AS failed, \
                  COALESCE(pg_catalog.sum(s.affected_count) FILTER (WHERE NOT r.dry_run), 0)::bigint AS changed, \
                  pg_catalog.max(r.started_at) FILTER (WHERE NOT r.dry_run) AS last_run \
           FROM {summaries} AS s JOIN {runs} AS r ON r.run_id OPERATOR(pg_catalog.=) s.run_id \
           WHERE {IN_RANGE} GROUP BY s.retained_entity_id) \
         SELECT COALESCE(e.retained_entity_id, seen.retained_entity_id) AS entity_id, \
                COALESCE(e.entity_type, seen.entity_type) AS name, \
                CASE WHEN e.retained_entity_id IS NULL THEN NULL \
                     ELSE pg_catalog.concat(e.table_schema, '.', e.table_name) END AS table_name, \
                {registered}, seen.categories, seen.strategies, \
                COALESCE(seen.runs, 0)::bigint AS runs, COALESCE(seen.failed, 0)::bigint AS failed, \
                COALESCE(seen.changed, 0)::bigint AS changed, {last_run} \
         FROM {registry} AS e FULL JOIN seen \
           ON seen.retained_entity_id OPERATOR(pg_catalog.=) e.retained_entity_id \
         ORDER BY 2, 1",
        summaries = t.summaries,
        runs = t.runs,
        registry = t.registry,
        registered = rfc3339("e", "registered_at"),
        last_run = rfc3339("seen", "last_run"),
    );
    let mut out = Vec::new();
    let mut stream = crate::sql::query(AssertSqlSafe(sql))
        .bind(options.range.from)
        .bind(options.range.to)
        .fetch(&mut *conn);
    while let Some(r) = stream.try_next().await? {
        let entity_id: Uuid = r.try_get("entity_id")?;
        let name: Option<String> = r.try_get("name")?;
        out.push(CoverageEntry {
            entity_id,
            name: name.unwrap_or_else(|| entity_id.to_string()),
            table: r.try_get("table_name")?,
            registered_at: r.try_get("registered_at")?,
            categories: r.try_get("categories")?,
            strategies: r.try_get("strategies")?,
            runs: r.try_get("runs")?,
            failed: r.try_get("failed")?,
            changed: r.try_get("changed")?,
            last_run: r.try_get("last_run")?,
        });
    }
    Ok(out)
}

async fn read_category_months(
    conn: &mut PgConnection,
    t: &Tables,
    options: &ReportOptions,
) -> Result<Vec<CategoryMonth>, Error> {
    let mut rows = Vec::new();
    let mut stream = crate::sql::query(AssertSqlSafe(format!(
        // Rows changed add up over the month's runs; rows held do not
        // (the same held row is counted by every run that meets it):
        // per type and tenant, the held count of the month's latest run in
        // which the type succeeded.
        "SELECT m.category, m.month, \
                pg_catalog.sum(m.purged)::bigint AS purged, \
                pg_catalog.sum(m.soft_deleted)::bigint AS soft_deleted, \
                pg_catalog.sum(m.anonymised)::bigint AS anonymised, \
                pg_catalog.sum(m.held)::bigint AS held \
         FROM (SELECT s.category, \
                      pg_catalog.to_char(pg_catalog.date_trunc('month', r.started_at AT TIME ZONE 'UTC'), 'YYYY-MM') AS month, \
                      pg_catalog.sum(CASE WHEN s.strategy OPERATOR(pg_catalog.=) 'Purge' THEN s.affected_count ELSE 0 END) AS purged, \
                      pg_catalog.sum(CASE WHEN s.strategy OPERATOR(pg_catalog.=) 'SoftDelete' THEN s.affected_count ELSE 0 END) AS soft_deleted, \
                      pg_catalog.sum(CASE WHEN s.strategy OPERATOR(pg_catalog.=) 'Anonymise' THEN s.affected_count ELSE 0 END) AS anonymised, \
                      COALESCE((pg_catalog.array_agg(s.held_count ORDER BY r.started_at DESC, r.run_id DESC) \
                                FILTER (WHERE s.status OPERATOR(pg_catalog.=) 'Succeeded'))[1], 0) AS held \
               FROM {summaries} AS s JOIN {runs} AS r ON r.run_id OPERATOR(pg_catalog.=) s.run_id \
               WHERE NOT r.dry_run AND {IN_RANGE} \
               GROUP BY 1, 2, s.retained_entity_id, s.tenant_id) AS m \
         GROUP BY 1, 2 ORDER BY 2, 1",
        summaries = t.summaries,
        runs = t.runs,
    )))
    .bind(options.range.from)
    .bind(options.range.to)
    .fetch(&mut *conn);
    while let Some(r) = stream.try_next().await? {
        rows.push(CategoryMonth {
            category: r.try_get("category")?,
            month: r.try_get("month")?,
            purged: r.try_get("purged")?,
            soft_deleted: r.try_get("soft_deleted")?,
            anonymised: r.try_get("anonymised")?,
            held: r.try_get("held")?,
        });
    }
    Ok(rows)
}

async fn read_run_counts(
    conn: &mut PgConnection,
    t: &Tables,
    options: &ReportOptions,
) -> Result<Vec<RunCount>, Error> {
    let sql = format!(
        "SELECT r.run_kind, r.\"trigger\", pg_catalog.count(*) AS runs, \
                pg_catalog.count(*) FILTER (WHERE r.dry_run) AS dry_runs, \
                pg_catalog.count(*) FILTER (WHERE r.status OPERATOR(pg_catalog.=) 'Succeeded') AS succeeded, \
                pg_catalog.count(*) FILTER (WHERE r.status OPERATOR(pg_catalog.=) 'PartiallyFailed') AS partially_failed, \
                pg_catalog.count(*) FILTER (WHERE r.status OPERATOR(pg_catalog.=) 'Failed') AS failed, \
                pg_catalog.count(*) FILTER (WHERE r.status OPERATOR(pg_catalog.=) 'Cancelled') AS cancelled, \
                pg_catalog.count(*) FILTER (WHERE r.status OPERATOR(pg_catalog.=) 'Started') AS in_progress, \
                COALESCE(pg_catalog.sum(c.changed) FILTER (WHERE NOT r.dry_run), 0)::bigint AS rows_changed \
         FROM {runs} AS r \
         LEFT JOIN LATERAL (SELECT pg_catalog.sum(s.affected_count) AS changed FROM {summaries} AS s \
                            WHERE s.run_id OPERATOR(pg_catalog.=) r.run_id) AS c ON true \
         WHERE {IN_RANGE} GROUP BY 1, 2 ORDER BY 1 DESC, 2 DESC",
        runs = t.runs,
        summaries = t.summaries,
    );
    let mut out = Vec::new();
    for r in crate::sql::query(AssertSqlSafe(sql))
        .bind(options.range.from)
        .bind(options.range.to)
        .fetch_all(&mut *conn)
        .await?
    {
        out.push(RunCount {
            kind: r.try_get("run_kind")?,
            trigger: r.try_get("trigger")?,
            runs: r.try_get("runs")?,
            dry_runs: r.try_get("dry_runs")?,
            succeeded: r.try_get("succeeded")?,
            partially_failed: r.try_get("partially_failed")?,
            failed: r.try_get("failed")?,
            cancelled: r.try_get("cancelled")?,
            in_progress: r.try_get("in_progress")?,
            rows_changed: r.try_get("rows_changed")?,
        });
    }
    Ok(out)
}

/// Per run: its summaries added up (through the summaries' unique key,
/// which leads with the run).
fn per_run(summaries: &crate::sql::QualifiedName) -> String {
    format!(
        "LEFT JOIN LATERAL (SELECT pg_catalog.count(*) AS types, \
                COALESCE(pg_catalog.sum(s.affected_count), 0)::bigint AS changed, \
                COALESCE(pg_catalog.sum(s.held_count), 0)::bigint AS held, \
                COALESCE(pg_catalog.sum(s.legal_minimum_count), 0)::bigint AS legal_minimum, \
                COALESCE(pg_catalog.sum(s.null_anchor_count), 0)::bigint AS null_anchor, \
                pg_catalog.count(*) FILTER (WHERE s.status OPERATOR(pg_catalog.=) 'Failed') AS failed_types \
           FROM {summaries} AS s WHERE s.run_id OPERATOR(pg_catalog.=) r.run_id) AS c ON true"
    )
}

async fn read_runs(
    conn: &mut PgConnection,
    t: &Tables,
    options: &ReportOptions,
    limit: i64,
) -> Result<ReportList<RunEntry>, Error> {
    // Every run of the range, whatever its status: a cancelled run and one
    // still in progress are part of what happened.
    let listed = "true";
    let total: i64 = crate::sql::query_scalar(AssertSqlSafe(format!(
        "SELECT pg_catalog.count(*) FROM {runs} AS r WHERE {IN_RANGE} AND {listed}",
        runs = t.runs
    )))
    .bind(options.range.from)
    .bind(options.range.to)
    .fetch_one(&mut *conn)
    .await?;
    let sql = format!(
        "SELECT r.run_id, r.run_kind, r.\"trigger\", r.dry_run, r.tenant_id, r.status, r.replay_of, \
                {started}, {settled}, c.types, c.changed, c.held, c.failed_types \
         FROM {runs} AS r {per_run} \
         WHERE {IN_RANGE} AND {listed} ORDER BY r.started_at, r.run_id LIMIT $3",
        runs = t.runs,
        per_run = per_run(&t.summaries),
        started = rfc3339("r", "started_at"),
        settled = rfc3339("r", "settled_at"),
    );
    let mut items = Vec::new();
    for r in crate::sql::query(AssertSqlSafe(sql))
        .bind(options.range.from)
        .bind(options.range.to)
        .bind(limit)
        .fetch_all(&mut *conn)
        .await?
    {
        items.push(RunEntry {
            run_id: r.try_get("run_id")?,
            kind: r.try_get("run_kind")?,
            trigger: r.try_get("trigger")?,
            dry_run: r.try_get("dry_run")?,
            tenant: tenant_of(r.try_get("tenant_id")?),
            status: r.try_get("status")?,
            started_at: text_time(&r, "started_at")?,
            settled_at: r.try_get("settled_at")?,
            types: r.try_get("types")?,
            changed: r.try_get("changed")?,
            held: r.try_get("held")?,
            failed_types: r.try_get("failed_types")?,
            replay_of: r.try_get("replay_of")?,
        });
    }
    Ok(ReportList {
        items,
        total: total_of(total),
    })
}

fn text_time(r: &PgRow, column: &str) -> Result<String, sqlx::Error> {
    Ok(r.try_get::<Option<String>, _>(column)?.unwrap_or_default())
}

async fn read_rules(
    conn: &mut PgConnection,
    t: &Tables,
    options: &ReportOptions,
    limit: i64,
) -> Result<ReportList<RuleInForce>, Error> {
    // One row per category, strategy and provenance; the periods sweeps
    // applied and the legal minimums erasures applied, side by side.
    let grouped_rules = format!(
        "SELECT s.category, s.strategy, s.rule_source, s.rule_reason, \
                pg_catalog.string_agg(DISTINCT s.entity_type, ', ') AS types, \
                pg_catalog.string_agg(DISTINCT s.applied_period, ', ') \
                    FILTER (WHERE r.run_kind OPERATOR(pg_catalog.=) 'Sweep') AS sweep_periods, \
                pg_catalog.string_agg(DISTINCT COALESCE(s.applied_period, 'none'), ', ') \
                    FILTER (WHERE r.run_kind OPERATOR(pg_catalog.=) 'Erasure') AS erasure_minimums, \
                pg_catalog.count(DISTINCT s.run_id) FILTER (WHERE r.run_kind OPERATOR(pg_catalog.=) 'Sweep') AS sweeps, \
                pg_catalog.count(DISTINCT s.run_id) FILTER (WHERE r.run_kind OPERATOR(pg_catalog.=) 'Erasure') AS erasures, \
                pg_catalog.min(r.started_at) AS first_used, pg_catalog.max(r.started_at) AS last_used \
         FROM {summaries} AS s JOIN {runs} AS r ON r.run_id OPERATOR(pg_catalog.=) s.run_id \
         WHERE {IN_RANGE} GROUP BY 1, 2, 3, 4",
        summaries = t.summaries,
        runs = t.runs,
    );
    let total: i64 = crate::sql::query_scalar(AssertSqlSafe(format!(
        "SELECT pg_catalog.count(*) FROM ({grouped_rules}) AS g"
    )))
    .bind(options.range.from)
    .bind(options.range.to)
    .fetch_one(&mut *conn)
    .await?;
    let sql = format!(
        "SELECT g.category, g.strategy, g.rule_source, g.rule_reason, g.types, g.sweep_periods, \
                g.erasure_minimums, g.sweeps, g.erasures, {first}, {last} \
         FROM ({grouped_rules}) AS g ORDER BY g.category, g.first_used, g.strategy LIMIT $3",
        first = rfc3339("g", "first_used"),
        last = rfc3339("g", "last_used"),
    );
    let mut items = Vec::new();
    for r in crate::sql::query(AssertSqlSafe(sql))
        .bind(options.range.from)
        .bind(options.range.to)
        .bind(limit)
        .fetch_all(&mut *conn)
        .await?
    {
        items.push(RuleInForce {
            category: r.try_get("category")?,
            types: r.try_get::<Option<String>, _>("types")?.unwrap_or_default(),
            strategy: r.try_get("strategy")?,
            sweep_periods: r.try_get("sweep_periods")?,
            erasure_minimums: r.try_get("erasure_minimums")?,
            rule_source: r.try_get("rule_source")?,
            rule_reason: r.try_get("rule_reason")?,
            sweeps: r.try_get("sweeps")?,
            erasures: r.try_get("erasures")?,
            first_used: text_time(&r, "first_used")?,
            last_used: text_time(&r, "last_used")?,
        });
    }
    Ok(ReportList {
        items,
        total: total_of(total),
    })
}

const ERASURES: &str = "r.run_kind OPERATOR(pg_catalog.=) 'Erasure' \
     AND r.status OPERATOR(pg_catalog.<>) 'Started'";

async fn read_erasures(
    conn: &mut PgConnection,
    t: &Tables,
    options: &ReportOptions,
    limit: i64,
) -> Result<ReportList<ErasureEntry>, Error> {
    let total: i64 = crate::sql::query_scalar(AssertSqlSafe(format!(
        "SELECT pg_catalog.count(*) FROM {runs} AS r WHERE {IN_RANGE} AND {ERASURES}",
        runs = t.runs
    )))
    .bind(options.range.from)
    .bind(options.range.to)
    .fetch_one(&mut *conn)
    .await?;
    let sql = format!(
        "SELECT r.run_id, r.\"trigger\", r.dry_run, r.tenant_id, r.status, r.replay_of, \
                pg_catalog.left(pg_catalog.encode(r.subject_hmac, 'hex'), 16) AS subject_hash, \
                {started}, {settled}, c.types, c.changed, c.held, c.legal_minimum, c.null_anchor, c.failed_types \
         FROM {runs} AS r {per_run} \
         WHERE {IN_RANGE} AND {ERASURES} ORDER BY r.started_at, r.run_id LIMIT $3",
        runs = t.runs,
        per_run = per_run(&t.summaries),
        started = rfc3339("r", "started_at"),
        settled = rfc3339("r", "settled_at"),
    );
    let mut items = Vec::new();
    for r in crate::sql::query(AssertSqlSafe(sql))
        .bind(options.range.from)
        .bind(options.range.to)
        .bind(limit)
        .fetch_all(&mut *conn)
        .await?
    {
        items.push(ErasureEntry {
            run_id: r.try_get("run_id")?,
            trigger: r.try_get("trigger")?,
            dry_run: r.try_get("dry_run")?,
            tenant: tenant_of(r.try_get("tenant_id")?),
            status: r.try_get("status")?,
            started_at: text_time(&r, "started_at")?,
            settled_at: r.try_get("settled_at")?,
            subject_hash: r.try_get("subject_hash")?,
            replay_of: r.try_get("replay_of")?,
            types: r.try_get("types")?,
            erased: r.try_get("changed")?,
            held: r.try_get("held")?,
            legal_minimum: r.try_get("legal_minimum")?,
            null_anchor: r.try_get("null_anchor")?,
            failed_types: r.try_get("failed_types")?,
        });
    }
    Ok(ReportList {
        items,
        total: total_of(total),
    })
}

async fn read_erasure_totals(
    conn: &mut PgConnection,
    t: &Tables,
    options: &ReportOptions,
) -> Result<ErasureTotals, Error> {
    let sql = format!(
        "SELECT pg_catalog.count(*) AS requests, \
                pg_catalog.count(*) FILTER (WHERE r.dry_run) AS dry_runs, \
                pg_catalog.count(*) FILTER (WHERE r.status OPERATOR(pg_catalog.<>) 'Succeeded') AS not_succeeded, \
                COALESCE(pg_catalog.sum(c.changed) FILTER (WHERE NOT r.dry_run), 0)::bigint AS erased, \
                COALESCE(pg_catalog.sum(c.held) FILTER (WHERE NOT r.dry_run), 0)::bigint AS held, \
                COALESCE(pg_catalog.sum(c.legal_minimum) FILTER (WHERE NOT r.dry_run), 0)::bigint AS legal_minimum, \
                COALESCE(pg_catalog.sum(c.null_anchor) FILTER (WHERE NOT r.dry_run), 0)::bigint AS null_anchor \
         FROM {runs} AS r {per_run} WHERE {IN_RANGE} AND {ERASURES}",
        runs = t.runs,
        per_run = per_run(&t.summaries),
    );
    let r = crate::sql::query(AssertSqlSafe(sql))
        .bind(options.range.from)
        .bind(options.range.to)
        .fetch_one(&mut *conn)
        .await?;
    Ok(ErasureTotals {
        requests: r.try_get("requests")?,
        dry_runs: r.try_get("dry_runs")?,
        not_succeeded: r.try_get("not_succeeded")?,
        erased: r.try_get("erased")?,
        held: r.try_get("held")?,
        legal_minimum: r.try_get("legal_minimum")?,
        null_anchor: r.try_get("null_anchor")?,
    })
}

const UNKNOWN_FAILURE: &str = "a failure this version of Cohort does not know";

/// What a failure kind of the ledger's sanitized envelopes means.
fn failure_meaning(kind: &str) -> &'static str {
    match kind {
        "Database" => "a database error (see the SQLSTATE)",
        "RuleProvider" => "the host's rule provider returned an error",
        "RuleProviderPanic" => "the host's rule provider panicked",
        "UnresolvedCategory" => "the category resolved to no rule",
        "UndeclaredStrategy" => "the rule's strategy was not declared for the category",
        "UnsupportedStrategy" => "the strategy does not fit the table's columns",
        "SoftDeleteRefused" => "an erasure refused a soft-delete category (no opt-in)",
        "AnonymiserPanic" => "a custom anonymiser panicked",
        "Abandoned" => "the run's process went away; the run was settled after its lease expired",
        "FenceTimeout" => {
            "the type's fence was not granted in time (a transaction creating a hold stayed open)"
        }
        "HandlerCapture" => "a row handler's capture failed; the row was left unchanged",
        "SnapshotRoundTrip" => "a row handler's snapshot does not survive JSON",
        "Handler" => "a row handler's delivery failed",
        "HandlerPanic" => "a row handler panicked",
        "HandlerTimeout" => "a row handler's delivery took too long",
        "ClaimExpired" => "a delivery's claim expired and was taken back",
        "PayloadUndecodable" => "a delivery's payload is not the handler's snapshot type",
        "PayloadScrubbed" => "a delivery's payload was scrubbed after its retention",
        "UnknownHandler" => "no handler with this identity is registered",
        "InvalidStages" => "the rule's stages are not a valid sequence",
        _ => UNKNOWN_FAILURE,
    }
}

fn failure_entry(entity: Option<String>, envelope: &serde_json::Value) -> FailureEntry {
    let field = |name: &str| {
        envelope
            .get(name)
            .and_then(|v| v.as_str())
            .map(str::to_owned)
    };
    let kind = field("kind").unwrap_or_else(|| "unknown".to_owned());
    FailureEntry {
        entity,
        meaning: failure_meaning(&kind).to_owned(),
        kind,
        sqlstate: field("sqlstate"),
        diagnostic_id: field("diagnostic_id"),
    }
}

/// Reads a run's stored error: a list of `{"entity_id", "failure"}` (a run
/// whose types failed), or one envelope (a run settled as abandoned).
fn read_failures(error: &str, names: &BTreeMap<Uuid, String>) -> Vec<FailureEntry> {
    match serde_json::from_str::<serde_json::Value>(error) {
        Ok(serde_json::Value::Array(list)) => list
            .iter()
            .map(|f| {
                let entity = f.get("entity_id").and_then(|v| v.as_str()).map(|id| {
                    match Uuid::parse_str(id) {
                        Ok(id) => name_of(names, id),
                        Err(_) => id.to_owned(),
                    }
                });
                failure_entry(entity, f.get("failure").unwrap_or(f))
            })
            .collect(),
        Ok(envelope @ serde_json::Value::Object(_)) => vec![failure_entry(None, &envelope)],
        _ => vec![FailureEntry {
            entity: None,
            kind: "unknown".to_owned(),
            meaning: "the stored error is not a sanitized envelope".to_owned(),
            sqlstate: None,
            diagnostic_id: None,
        }],
    }
}

async fn read_failed_runs(
    conn: &mut PgConnection,
    t: &Tables,
    options: &ReportOptions,
    limit: i64,
    names: &BTreeMap<Uuid, String>,
) -> Result<ReportList<FailedRun>, Error> {
    let failed = "r.status OPERATOR(pg_catalog.=) ANY (ARRAY['Failed', 'PartiallyFailed'])";
    let total: i64 = crate::sql::query_scalar(AssertSqlSafe(format!(
        "SELECT pg_catalog.count(*) FROM {runs} AS r WHERE {IN_RANGE} AND {failed}",
        runs = t.runs
    )))
    .bind(options.range.from)
    .bind(options.range.to)
    .fetch_one(&mut *conn)
    .await?;
    let mut items = Vec::new();
    for r in crate::sql::query(AssertSqlSafe(format!(
        "SELECT r.run_id, r.run_kind, r.\"trigger\", r.status, r.error, {}, {} FROM {runs} AS r \
         WHERE {IN_RANGE} AND {failed} ORDER BY r.started_at, r.run_id LIMIT $3",
        rfc3339("r", "started_at"),
        rfc3339("r", "settled_at"),
        runs = t.runs,
    )))
    .bind(options.range.from)
    .bind(options.range.to)
    .bind(limit)
    .fetch_all(&mut *conn)
    .await?
    {
        let error: Option<String> = r.try_get("error")?;
        items.push(FailedRun {
            run_id: r.try_get("run_id")?,
            kind: r.try_get("run_kind")?,
            trigger: r.try_get("trigger")?,
            status: r.try_get("status")?,
            started_at: text_time(&r, "started_at")?,
            settled_at: r.try_get("settled_at")?,
            failures: error
                .as_deref()
                .map(|e| read_failures(e, names))
                .unwrap_or_default(),
            error,
        });
    }
    Ok(ReportList {
        items,
        total: total_of(total),
    })
}

/// Whole days from `created_at` to `$1`.
const AGE_DAYS: &str = "pg_catalog.floor(pg_catalog.date_part('epoch', \
     $1::pg_catalog.timestamptz OPERATOR(pg_catalog.-) h.created_at) OPERATOR(pg_catalog./) 86400)::bigint AS age_days";

async fn read_active_holds(
    conn: &mut PgConnection,
    t: &Tables,
    options: &ReportOptions,
    limit: i64,
    names: &BTreeMap<Uuid, String>,
) -> Result<ReportList<ActiveHold>, Error> {
    let active = "h.created_at OPERATOR(pg_catalog.<=) $1::pg_catalog.timestamptz \
         AND (h.expires_at IS NULL OR h.expires_at OPERATOR(pg_catalog.>) $1::pg_catalog.timestamptz) \
         AND (h.removed_at IS NULL OR h.removed_at OPERATOR(pg_catalog.>) $1::pg_catalog.timestamptz) \
         AND pg_catalog.isfinite(h.created_at)";
    let total: i64 = crate::sql::query_scalar(AssertSqlSafe(format!(
        "SELECT pg_catalog.count(*) FROM {holds} AS h WHERE {active}",
        holds = t.holds
    )))
    .bind(options.as_of)
    .fetch_one(&mut *conn)
    .await?;
    let mut items = Vec::new();
    for r in crate::sql::query(AssertSqlSafe(format!(
        "SELECT h.hold_id, h.retained_entity_id, h.record_id, h.tenant_id, h.reason, {}, {}, {AGE_DAYS} \
         FROM {holds} AS h WHERE {active} ORDER BY h.created_at, h.hold_id LIMIT $2",
        rfc3339("h", "created_at"),
        rfc3339("h", "expires_at"),
        holds = t.holds,
    )))
    .bind(options.as_of)
    .bind(limit)
    .fetch_all(&mut *conn)
    .await?
    {
        let entity_id: Uuid = r.try_get("retained_entity_id")?;
        items.push(ActiveHold {
            hold_id: r.try_get("hold_id")?,
            entity_id,
            entity: name_of(names, entity_id),
            record_id: r.try_get("record_id")?,
            tenant: tenant_text(r.try_get("tenant_id")?),
            reason: r.try_get("reason")?,
            created_at: text_time(&r, "created_at")?,
            expires_at: r.try_get("expires_at")?,
            age_days: r.try_get::<Option<i64>, _>("age_days")?.unwrap_or(0),
        });
    }
    Ok(ReportList {
        items,
        total: total_of(total),
    })
}

async fn read_ended_holds(
    conn: &mut PgConnection,
    t: &Tables,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    limit: i64,
    names: &BTreeMap<Uuid, String>,
) -> Result<ReportList<EndedHold>, Error> {
    // A hold stops protecting at the earlier of its removal and its expiry.
    let ended = "(SELECT h.*, LEAST(h.removed_at, h.expires_at) AS ended_at, \
                   CASE WHEN h.removed_at IS NOT NULL \
                         AND (h.expires_at IS NULL OR h.removed_at OPERATOR(pg_catalog.<=) h.expires_at) \
                        THEN 'removed' ELSE 'expired' END AS ended_by";
    let filter = "e.ended_at OPERATOR(pg_catalog.>=) $1 AND e.ended_at OPERATOR(pg_catalog.<) $2 \
                  AND pg_catalog.isfinite(e.ended_at)";
    let total: i64 = crate::sql::query_scalar(AssertSqlSafe(format!(
        "SELECT pg_catalog.count(*) FROM {ended} FROM {holds} AS h) AS e WHERE {filter}",
        holds = t.holds
    )))
    .bind(from)
    .bind(to)
    .fetch_one(&mut *conn)
    .await?;
    let mut items = Vec::new();
    for r in crate::sql::query(AssertSqlSafe(format!(
        "SELECT e.hold_id, e.retained_entity_id, e.record_id, e.tenant_id, e.reason, e.ended_by, {}, {} \
         FROM {ended} FROM {holds} AS h) AS e WHERE {filter} ORDER BY e.ended_at, e.hold_id LIMIT $3",
        rfc3339("e", "created_at"),
        rfc3339("e", "ended_at"),
        holds = t.holds,
    )))
    .bind(from)
    .bind(to)
    .bind(limit)
    .fetch_all(&mut *conn)
    .await?
    {
        let entity_id: Uuid = r.try_get("retained_entity_id")?;
        items.push(EndedHold {
            hold_id: r.try_get("hold_id")?,
            entity_id,
            entity: name_of(names, entity_id),
            record_id: r.try_get("record_id")?,
            tenant: tenant_text(r.try_get("tenant_id")?),
            reason: r.try_get("reason")?,
            created_at: text_time(&r, "created_at")?,
            ended_at: text_time(&r, "ended_at")?,
            ended_by: r.try_get("ended_by")?,
        });
    }
    Ok(ReportList {
        items,
        total: total_of(total),
    })
}

const MATTER_COLUMNS: &str = "m.matter_id, m.tenant_id, m.scope_kind, m.subject, m.entity_ids, \
     m.retained_entity_id, m.owner, m.reason";

/// A matter's scope in words, types by name.
fn matter_scope(r: &PgRow, names: &BTreeMap<Uuid, String>) -> Result<String, sqlx::Error> {
    let kind: String = r.try_get("scope_kind")?;
    Ok(if kind == "Subject" {
        let subject: Option<String> = r.try_get("subject")?;
        let entities: Option<Vec<Uuid>> = r.try_get("entity_ids")?;
        format!(
            "subject {} in {}",
            subject.unwrap_or_default(),
            entities.map_or_else(
                || "every retained type".to_owned(),
                |e| format!(
                    "types {}",
                    e.iter()
                        .map(|id| name_of(names, *id))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            )
        )
    } else {
        let entity = r
            .try_get::<Option<Uuid>, _>("retained_entity_id")?
            .map(|id| name_of(names, id))
            .unwrap_or_default();
        let from: Option<String> = r.try_get("anchor_from")?;
        let to: Option<String> = r.try_get("anchor_to")?;
        match (from, to) {
            (None, None) => format!("every row of type {entity}"),
            (f, t) => format!(
                "type {entity}, anchors from {} to {}",
                f.unwrap_or_else(|| "-".to_owned()),
                t.unwrap_or_else(|| "-".to_owned())
            ),
        }
    })
}

async fn read_active_matters(
    conn: &mut PgConnection,
    t: &Tables,
    options: &ReportOptions,
    limit: i64,
    names: &BTreeMap<Uuid, String>,
) -> Result<ReportList<ActiveMatter>, Error> {
    let active = "m.created_at OPERATOR(pg_catalog.<=) $1::pg_catalog.timestamptz \
         AND (m.expires_at IS NULL OR m.expires_at OPERATOR(pg_catalog.>) $1::pg_catalog.timestamptz) \
         AND (m.released_at IS NULL OR m.released_at OPERATOR(pg_catalog.>) $1::pg_catalog.timestamptz) \
         AND pg_catalog.isfinite(m.created_at)";
    let total: i64 = crate::sql::query_scalar(AssertSqlSafe(format!(
        "SELECT pg_catalog.count(*) FROM {matters} AS m WHERE {active}",
        matters = t.matters
    )))
    .bind(options.as_of)
    .fetch_one(&mut *conn)
    .await?;
    let mut items = Vec::new();
    for r in crate::sql::query(AssertSqlSafe(format!(
        "SELECT {MATTER_COLUMNS}, {}, {}, {}, {}, {} \
         FROM {matters} AS m WHERE {active} ORDER BY m.created_at, m.matter_id LIMIT $2",
        rfc3339("m", "created_at"),
        rfc3339("m", "expires_at"),
        rfc3339("m", "anchor_from"),
        rfc3339("m", "anchor_to"),
        AGE_DAYS.replace("h.created_at", "m.created_at"),
        matters = t.matters,
    )))
    .bind(options.as_of)
    .bind(limit)
    .fetch_all(&mut *conn)
    .await?
    {
        items.push(ActiveMatter {
            matter_id: r.try_get("matter_id")?,
            scope: matter_scope(&r, names)?,
            tenant: tenant_text(r.try_get("tenant_id")?),
            owner: r.try_get("owner")?,
            reason: r.try_get("reason")?,
            created_at: text_time(&r, "created_at")?,
            expires_at: r.try_get("expires_at")?,
            age_days: r.try_get::<Option<i64>, _>("age_days")?.unwrap_or(0),
        });
    }
    Ok(ReportList {
        items,
        total: total_of(total),
    })
}

async fn read_ended_matters(
    conn: &mut PgConnection,
    t: &Tables,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    limit: i64,
    names: &BTreeMap<Uuid, String>,
) -> Result<ReportList<EndedMatter>, Error> {
    let ended = "(SELECT m.*, LEAST(m.released_at, m.expires_at) AS ended_at, \
                   CASE WHEN m.released_at IS NOT NULL \
                         AND (m.expires_at IS NULL OR m.released_at OPERATOR(pg_catalog.<=) m.expires_at) \
                        THEN 'released' ELSE 'expired' END AS ended_by";
    let filter = "m.ended_at OPERATOR(pg_catalog.>=) $1 AND m.ended_at OPERATOR(pg_catalog.<) $2 \
                  AND pg_catalog.isfinite(m.ended_at)";
    let total: i64 = crate::sql::query_scalar(AssertSqlSafe(format!(
        "SELECT pg_catalog.count(*) FROM {ended} FROM {matters} AS m) AS m WHERE {filter}",
        matters = t.matters
    )))
    .bind(from)
    .bind(to)
    .fetch_one(&mut *conn)
    .await?;
    let mut items = Vec::new();
    for r in crate::sql::query(AssertSqlSafe(format!(
        "SELECT {MATTER_COLUMNS}, m.ended_by, {}, {}, {}, {} \
         FROM {ended} FROM {matters} AS m) AS m WHERE {filter} ORDER BY m.ended_at, m.matter_id LIMIT $3",
        rfc3339("m", "created_at"),
        rfc3339("m", "ended_at"),
        rfc3339("m", "anchor_from"),
        rfc3339("m", "anchor_to"),
        matters = t.matters,
    )))
    .bind(from)
    .bind(to)
    .bind(limit)
    .fetch_all(&mut *conn)
    .await?
    {
        items.push(EndedMatter {
            matter_id: r.try_get("matter_id")?,
            scope: matter_scope(&r, names)?,
            tenant: tenant_text(r.try_get("tenant_id")?),
            owner: r.try_get("owner")?,
            reason: r.try_get("reason")?,
            created_at: text_time(&r, "created_at")?,
            ended_at: text_time(&r, "ended_at")?,
            ended_by: r.try_get("ended_by")?,
        });
    }
    Ok(ReportList {
        items,
        total: total_of(total),
    })
}

/// Batches with a decision in `[$1, $2)` (alias `b`).
const DECIDED_IN_RANGE: &str = "EXISTS (SELECT 1 FROM {decisions} AS x WHERE x.batch_id = b.batch_id \
     AND x.decided_at OPERATOR(pg_catalog.>=) $1 AND x.decided_at OPERATOR(pg_catalog.<) $2)";

async fn read_dispositions(
    conn: &mut PgConnection,
    t: &Tables,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    limit: i64,
    names: &BTreeMap<Uuid, String>,
) -> Result<ReportList<DispositionEntry>, Error> {
    let in_range = DECIDED_IN_RANGE.replace("{decisions}", &t.decisions.to_string());
    let total: i64 = crate::sql::query_scalar(AssertSqlSafe(format!(
        "SELECT pg_catalog.count(*) FROM {batches} AS b WHERE {in_range}",
        batches = t.batches
    )))
    .bind(from)
    .bind(to)
    .fetch_one(&mut *conn)
    .await?;
    let mut items = Vec::new();
    for r in crate::sql::query(AssertSqlSafe(format!(
        "SELECT b.batch_id, b.retained_entity_id, b.entity_type, b.tenant_id, b.stage, b.strategy, \
                pg_catalog.encode(b.rule_hash, 'hex') AS rule_hash, b.row_count, \
                b.approvers_required, b.status, b.changed_count, b.held_count, b.left_count, \
                b.ineligible_count, {} \
         FROM {batches} AS b WHERE {in_range} ORDER BY b.created_at, b.batch_id LIMIT $3",
        rfc3339("b", "created_at"),
        batches = t.batches
    )))
    .bind(from)
    .bind(to)
    .bind(limit)
    .fetch_all(&mut *conn)
    .await?
    {
        let entity: Uuid = r.try_get("retained_entity_id")?;
        let stored_type: String = r.try_get("entity_type")?;
        let counts = [
            r.try_get::<Option<i64>, _>("changed_count")?,
            r.try_get::<Option<i64>, _>("held_count")?,
            r.try_get::<Option<i64>, _>("left_count")?,
            r.try_get::<Option<i64>, _>("ineligible_count")?,
        ];
        items.push(DispositionEntry {
            batch_id: r.try_get("batch_id")?,
            entity: names.get(&entity).cloned().unwrap_or(stored_type),
            tenant: tenant_text(r.try_get("tenant_id")?),
            stage: i64::from(r.try_get::<i32, _>("stage")?) + 1,
            strategy: r.try_get("strategy")?,
            rule_hash: r.try_get("rule_hash")?,
            frozen_at: text_time(&r, "created_at")?,
            rows: r.try_get("row_count")?,
            approvers_required: i64::from(r.try_get::<i32, _>("approvers_required")?),
            status: r.try_get("status")?,
            carried_out: match counts {
                [Some(a), Some(b), Some(c), Some(d)] => Some([a, b, c, d]),
                _ => None,
            },
            decisions: Vec::new(),
        });
    }
    // Their decisions, one statement; a batch has a handful.
    let ids: Vec<Uuid> = items.iter().map(|i| i.batch_id).collect();
    let mut by_batch: BTreeMap<Uuid, Vec<DecisionLine>> = BTreeMap::new();
    for r in crate::sql::query(AssertSqlSafe(format!(
        "SELECT d.batch_id, d.chain_seq, d.decision, d.decided_by, d.automatic, d.reason, {}, {} \
         FROM {decisions} AS d WHERE d.batch_id = ANY($1) ORDER BY d.chain_seq",
        rfc3339("d", "decided_at"),
        rfc3339("d", "keep_until"),
        decisions = t.decisions
    )))
    .bind(&ids)
    .fetch_all(&mut *conn)
    .await?
    {
        by_batch
            .entry(r.try_get("batch_id")?)
            .or_default()
            .push(DecisionLine {
                seq: r.try_get("chain_seq")?,
                decision: r.try_get("decision")?,
                decided_by: r.try_get("decided_by")?,
                automatic: r.try_get("automatic")?,
                decided_at: text_time(&r, "decided_at")?,
                reason: r.try_get("reason")?,
                keep_until: r.try_get("keep_until")?,
            });
    }
    for item in &mut items {
        item.decisions = by_batch.remove(&item.batch_id).unwrap_or_default();
    }
    Ok(ReportList {
        items,
        total: total_of(total),
    })
}

async fn read_disposition_totals(
    conn: &mut PgConnection,
    t: &Tables,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<DispositionTotals, Error> {
    let in_range = DECIDED_IN_RANGE.replace("{decisions}", &t.decisions.to_string());
    let r = crate::sql::query(AssertSqlSafe(format!(
        "SELECT pg_catalog.count(*) AS batches, \
                COALESCE(pg_catalog.sum(b.row_count), 0)::pg_catalog.int8 AS frozen, \
                pg_catalog.count(*) FILTER (WHERE b.status = 'Pending') AS pending, \
                (SELECT COALESCE(pg_catalog.sum(d.changed_count), 0)::pg_catalog.int8 FROM {decisions} AS d \
                  WHERE d.decision = 'CarriedOut' AND d.decided_at OPERATOR(pg_catalog.>=) $1 \
                    AND d.decided_at OPERATOR(pg_catalog.<) $2) AS changed \
         FROM {batches} AS b WHERE {in_range}",
        batches = t.batches,
        decisions = t.decisions
    )))
    .bind(from)
    .bind(to)
    .fetch_one(&mut *conn)
    .await?;
    Ok(DispositionTotals {
        batches: r.try_get("batches")?,
        frozen: r.try_get("frozen")?,
        changed: r.try_get("changed")?,
        pending: r.try_get("pending")?,
    })
}

/// SQL an auditor can run (in `psql`, with read access to Cohort's tables)
/// to recompute the install's run chain without Cohort or its functions:
/// every run link's SHA-256 from its columns, by the canonical encoding of
/// `docs/evidence.md` ("What is hashed"), each checked against its stored
/// hash and its successor's link. It returns the links checked, how many
/// hashes differ (`changed`), how many links do not follow their
/// predecessor (`broken`), and the head's position and hash, which must
/// equal the head the report printed. (`verify` also walks the summaries,
/// row details, holds and matters; a run link covers its summaries' and
/// row details' chains by their length and head.)
pub fn run_chain_check_sql(schema: &SchemaName) -> String {
    // Each field's canonical text; NULL is `~`, except the trailing
    // `subject_hmac` (migration 6), left out entirely while NULL.
    let us = |c: &str| {
        format!(
            "CASE WHEN NOT isfinite(r.{c})\n                   THEN CASE WHEN r.{c} > 'epoch' THEN 'infinity' ELSE '-infinity' END\n                   ELSE ((extract(epoch FROM r.{c}) * 1000000)::numeric(30,0))::text END"
        )
    };
    CHAIN_CHECK_SQL
        .replace("{logical_now}", &us("logical_now"))
        .replace("{started_at}", &us("started_at"))
        .replace("{settled_at}", &us("settled_at"))
        .replace("{runs}", &schema.table("sweep_run").to_string())
}

/// [`run_chain_check_sql`]'s text, before its placeholders are filled.
const CHAIN_CHECK_SQL: &str = r#"-- Recompute every run link of the install's evidence chain from its columns
-- (docs/evidence.md, "What is hashed"); needs no Cohort function.
WITH link AS (
  SELECT r.chain_seq, r.chain_prev, r.chain_hash,
         sha256(convert_to('14:cohort-ev1:run' || (
           SELECT string_agg(CASE WHEN f.v IS NULL THEN f.if_null
                                  ELSE octet_length(f.v) || ':' || f.v END, '' ORDER BY f.n)
           FROM (VALUES
             (1, r.chain_seq::text, '~'),
             (2, encode(r.chain_prev, 'hex'), '~'),
             (3, r.run_id::text, '~'),
             (4, r.run_kind, '~'),
             (5, r."trigger", '~'),
             (6, CASE WHEN r.dry_run THEN 't' ELSE 'f' END, '~'),
             (7, r.tenant_id::text, '~'),
             (8, {logical_now}, '~'),
             (9, r.status, '~'),
             (10, {started_at}, '~'),
             (11, {settled_at}, '~'),
             (12, r.error, '~'),
             (13, r.chain_summaries::text, '~'),
             (14, encode(r.chain_summaries_head, 'hex'), '~'),
             (15, r.chain_details::text, '~'),
             (16, encode(r.chain_details_head, 'hex'), '~'),
             -- left out entirely while NULL (added by migration 6)
             (17, encode(r.subject_hmac, 'hex'), '')
           ) AS f(n, v, if_null)), 'UTF8')) AS recomputed
  FROM {runs} AS r
  WHERE r.chain_seq IS NOT NULL
), walk AS (
  SELECT l.*, lag(l.chain_hash) OVER (ORDER BY l.chain_seq) AS before,
         row_number() OVER (ORDER BY l.chain_seq) AS position
  FROM link AS l
)
SELECT count(*) AS links,
       count(*) FILTER (WHERE recomputed IS DISTINCT FROM chain_hash) AS changed,
       count(*) FILTER (WHERE chain_prev IS DISTINCT FROM before
                           OR chain_seq <> position) AS broken,
       max(chain_seq) AS head_seq,
       encode((array_agg(chain_hash ORDER BY chain_seq DESC))[1], 'hex') AS head_hash
FROM walk;
"#;

/// `text` as the inside of a CSS string: letters, digits and spaces as
/// they are, every other character as a CSS escape (`\27 ` for `'`), so no
/// text can end the string, the rule or the style element.
fn css_string(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == ' ' {
                c.to_string()
            } else {
                format!("\\{:x} ", u32::from(c))
            }
        })
        .collect()
}

/// `sh` single-quoted.
fn shell_quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// A time from the ledger (RFC 3339) as the report shows it:
/// `2026-03-01 09:30:00` (the report says its times are UTC).
fn shown(t: &str) -> String {
    t.replacen('T', " ", 1).trim_end_matches('Z').to_owned()
}

/// An ISO 8601 period of the ledger with its length in words, when simple:
/// `P30D (30 days)`.
fn period_words(p: &str) -> String {
    let words = p.strip_prefix('P').and_then(|rest| {
        let (n, unit) = rest.split_at(rest.len().checked_sub(1)?);
        let n: u64 = n.parse().ok()?;
        let unit = match unit {
            "D" => "day",
            "W" => "week",
            "M" => "month",
            "Y" => "year",
            _ => return None,
        };
        Some(format!(
            "{} {unit}{}",
            grouped(n as i64),
            if n == 1 { "" } else { "s" }
        ))
    });
    match words {
        Some(w) => format!("{p} ({w})"),
        None => p.to_owned(),
    }
}

/// A run's or hold's id as shown in a table: the first 8 hex digits (what
/// `cohort runs show` takes), the full id in the cell's title.
struct ShortId {
    short: String,
    full: String,
}

fn short_id(id: Uuid) -> ShortId {
    let full = id.to_string();
    ShortId {
        short: full.chars().take(8).collect(),
        full,
    }
}

/// One small multiple: a category's months.
struct Panel {
    svg: String,
}

/// Pruned holds of one type.
struct Pruned {
    entity: String,
    links: usize,
}

#[derive(Template)]
#[template(path = "evidence_report.html")]
struct Page<'a> {
    r: &'a AuditReport,
    version: &'static str,
    from: String,
    to: String,
    generated_at: String,
    as_of: String,
    ended_to: String,
    problems: Vec<String>,
    problems_not_shown: usize,
    verification_summary: String,
    legend: Vec<&'static str>,
    category_chart: String,
    panels: Vec<Panel>,
    panels_not_shown: usize,
    totals: [i64; 3],
    held_latest: i64,
    verify_command: String,
    head_sql: String,
    check_sql: String,
    export_command: String,
    pruned: Vec<Pruned>,
    exempt_by_rule: Vec<&'a CoverageEntry>,
    /// The printed pages' footer, as the text of a CSS string.
    print_footer: String,
    covered: usize,
    not_covered: usize,
}

/// The most small multiples drawn; more categories are in the table only.
const MAX_PANELS: usize = 24;

/// A value the template passes to a helper, through however many
/// references askama adds.
trait Value<T> {
    fn value(&self) -> T;
}

macro_rules! plain_values {
    ($($t:ty => $target:ty),* $(,)?) => {
        $(impl Value<$target> for $t {
            fn value(&self) -> $target {
                <$target>::try_from(*self).unwrap_or(<$target>::MAX)
            }
        })*
    };
}

plain_values!(i64 => i64, u64 => i64, usize => i64);

impl Value<Uuid> for Uuid {
    fn value(&self) -> Uuid {
        *self
    }
}

impl Value<Option<Uuid>> for Option<Uuid> {
    fn value(&self) -> Option<Uuid> {
        *self
    }
}

impl<T, V: Value<T> + ?Sized> Value<T> for &V {
    fn value(&self) -> T {
        (**self).value()
    }
}

impl Page<'_> {
    /// A count with thousands separators.
    fn n(&self, v: impl Value<i64>) -> String {
        grouped(v.value())
    }

    fn t(&self, v: &str) -> String {
        shown(v)
    }

    /// The date of a time.
    fn day<'b>(&self, v: &'b str) -> &'b str {
        v.get(..10).unwrap_or(v)
    }

    fn ot(&self, v: Option<&str>) -> String {
        v.map_or_else(|| "-".to_owned(), shown)
    }

    fn id(&self, v: impl Value<Uuid>) -> ShortId {
        short_id(v.value())
    }

    fn tenant(&self, v: impl Value<Option<Uuid>>) -> String {
        v.value()
            .map_or_else(|| "tenantless".to_owned(), |t| t.to_string())
    }

    fn periods(&self, v: Option<&str>) -> String {
        match v {
            None => "-".to_owned(),
            Some(list) => list
                .split(", ")
                .map(period_words)
                .collect::<Vec<_>>()
                .join(", "),
        }
    }

    fn opt<'b>(&self, v: Option<&'b str>) -> &'b str {
        v.unwrap_or("-")
    }

    /// A decision in words: `2026-12-02 14:03:11 approved by ann`.
    fn decision(&self, d: &DecisionLine) -> String {
        let what = match d.decision.as_str() {
            "Frozen" => "frozen for review".to_owned(),
            "Approved" if d.automatic => {
                "approved automatically (auto-approval time reached)".to_owned()
            }
            "Approved" => format!("approved by {}", d.decided_by),
            "Rejected" => format!(
                "rejected by {} ({}), kept until {}",
                d.decided_by,
                d.reason.as_deref().unwrap_or("no reason"),
                d.keep_until
                    .as_deref()
                    .map_or_else(|| "-".to_owned(), shown)
            ),
            "Extended" => format!(
                "extended by {} until {}",
                d.decided_by,
                d.keep_until
                    .as_deref()
                    .map_or_else(|| "-".to_owned(), shown)
            ),
            "Voided" => "voided: its rule changed before it was carried out".to_owned(),
            "CarriedOut" => "carried out".to_owned(),
            other => other.to_owned(),
        };
        format!("{} {what}", shown(&d.decided_at))
    }

    /// The first 12 hex digits of a hash.
    fn short_hash<'b>(&self, v: &'b str) -> &'b str {
        v.get(..12).unwrap_or(v)
    }
}

impl AuditReport {
    /// The report as one self-contained HTML document.
    pub fn to_html(&self) -> Result<String, Error> {
        let mut months: BTreeSet<String> = BTreeSet::new();
        let mut categories: BTreeMap<String, [i64; 4]> = BTreeMap::new();
        let mut per_category: BTreeMap<&str, BTreeMap<&str, [i64; 4]>> = BTreeMap::new();
        let mut totals = [0i64; 3];
        // Rows are in month order: a category's held rows are its latest
        // month's (held rows are a state, not a sum over time).
        for r in &self.rows {
            months.insert(r.month.clone());
            let c = categories.entry(r.category.clone()).or_default();
            c[0] += r.purged;
            c[1] += r.soft_deleted;
            c[2] += r.anonymised;
            c[3] = r.held;
            totals[0] += r.purged;
            totals[1] += r.soft_deleted;
            totals[2] += r.anonymised;
            per_category
                .entry(&r.category)
                .or_default()
                .insert(&r.month, [r.purged, r.soft_deleted, r.anonymised, r.held]);
        }
        let held_latest = categories.values().map(|c| c[3]).sum();
        let months: Vec<String> = months.into_iter().collect();
        let category_chart = charts::category_chart(&categories.into_iter().collect::<Vec<_>>())?;
        // Small multiples, the busiest categories first.
        let mut order: Vec<(&str, i64)> = per_category
            .iter()
            .map(|(c, m)| (*c, m.values().map(|v| v[0] + v[1] + v[2] + v[3]).sum()))
            .collect();
        order.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let mut panels = Vec::new();
        for (category, _) in order.iter().take(MAX_PANELS) {
            let by_month = &per_category[category];
            let values: Vec<[i64; 4]> = months
                .iter()
                .map(|m| by_month.get(m.as_str()).copied().unwrap_or_default())
                .collect();
            panels.push(Panel {
                svg: charts::month_panel(category, &months, &values)?,
            });
        }
        let v = &self.verification;
        let time = |t: DateTime<Utc>| t.format("%Y-%m-%d %H:%M:%S").to_string();
        let all = TimeRange::all();
        let from = if self.options.range.from == all.from {
            match self.first_run {
                Some(first) => format!("the first run ({})", time(first)),
                None => "the beginning (the ledger has no run in range)".to_owned(),
            }
        } else {
            time(self.options.range.from)
        };
        let to = if self.options.range.to == all.to {
            format!("the report's generation ({})", time(self.generated_at))
        } else {
            time(self.options.range.to)
        };
        let schema_env = if self.schema.as_str() == "public" {
            String::new()
        } else {
            format!("COHORT_SCHEMA={} ", shell_quoted(self.schema.as_str()))
        };
        let head_sql = match &v.head {
            Some(h) => format!(
                "SELECT chain_seq, encode(chain_hash, 'hex') FROM {} WHERE chain_seq = {};",
                self.schema.table("sweep_run"),
                h.seq
            ),
            None => String::new(),
        };
        let mut pruned: BTreeMap<String, usize> = BTreeMap::new();
        for p in &v.pruned {
            *pruned.entry(name_of(&self.names, p.entity_id)).or_default() += 1;
        }
        let limit = usize::try_from(self.options.list_limit.max(1)).unwrap_or(usize::MAX);
        let range_flags = {
            let mut f = String::new();
            if self.options.range.from != all.from {
                f.push_str(&format!(
                    " --from {}",
                    self.options.range.from.format("%Y-%m-%dT%H:%M:%SZ")
                ));
            }
            if self.options.range.to != all.to {
                f.push_str(&format!(
                    " --to {}",
                    self.options.range.to.format("%Y-%m-%dT%H:%M:%SZ")
                ));
            }
            f
        };
        let page = Page {
            r: self,
            version: env!("CARGO_PKG_VERSION"),
            from,
            to,
            generated_at: time(self.generated_at),
            as_of: time(self.options.as_of),
            ended_to: time(self.options.range.to.min(self.options.as_of)),
            problems: v
                .problems
                .iter()
                .take(limit)
                .map(|p| p.to_string())
                .collect(),
            problems_not_shown: v.problems.len().saturating_sub(limit),
            verification_summary: format!(
                "{} sealed runs, {} runs in progress, {} summaries, {} row details, {} hold links, {} matter links and {} disposition decisions checked; {} pruned hold links.",
                grouped(i64::try_from(v.runs).unwrap_or(i64::MAX)),
                grouped(i64::try_from(v.runs_in_progress).unwrap_or(i64::MAX)),
                grouped(i64::try_from(v.summaries).unwrap_or(i64::MAX)),
                grouped(i64::try_from(v.details).unwrap_or(i64::MAX)),
                grouped(i64::try_from(v.hold_links).unwrap_or(i64::MAX)),
                grouped(i64::try_from(v.matter_links).unwrap_or(i64::MAX)),
                grouped(i64::try_from(v.disposition_links).unwrap_or(i64::MAX)),
                grouped(i64::try_from(v.pruned.len()).unwrap_or(i64::MAX)),
            ),
            legend: SERIES.iter().map(|(name, _)| *name).collect(),
            category_chart,
            panels_not_shown: order.len().saturating_sub(MAX_PANELS),
            panels,
            totals,
            held_latest,
            verify_command: format!("{schema_env}cohort verify --json"),
            head_sql,
            check_sql: run_chain_check_sql(&self.schema),
            export_command: format!("{schema_env}cohort runs export --format csv{range_flags}"),
            pruned: pruned
                .into_iter()
                .map(|(entity, links)| Pruned { entity, links })
                .collect(),
            exempt_by_rule: self
                .coverage
                .iter()
                .filter(|c| c.state() == "exempt by its rule")
                .collect(),
            print_footer: css_string(&format!(
                "{} \u{b7} schema {} \u{b7} generated {} UTC",
                self.options.title,
                self.schema.as_str(),
                time(self.generated_at)
            )),
            covered: self
                .coverage
                .iter()
                .filter(|c| c.state() == "swept")
                .count(),
            not_covered: self
                .coverage
                .iter()
                .filter(|c| c.state() == "no run in range")
                .count(),
        };
        page.render().map_err(|e| {
            Error::from(EvidenceError::Render {
                reason: e.to_string(),
            })
        })
    }

    /// Writes [`Self::to_html`] to `out`.
    pub fn write_html<W: Write + ?Sized>(&self, out: &mut W) -> Result<(), Error> {
        let html = self.to_html()?;
        out.write_all(html.as_bytes())
            .map_err(|e| Error::from(EvidenceError::Io(e)))
    }

    /// The rows the range's runs changed, per strategy: purged,
    /// soft-deleted, anonymised (dry runs excluded).
    pub fn rows_changed(&self) -> [i64; 3] {
        self.rows.iter().fold([0; 3], |mut t, r| {
            t[0] += r.purged;
            t[1] += r.soft_deleted;
            t[2] += r.anonymised;
            t
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_are_put_in_words() {
        assert_eq!(period_words("P30D"), "P30D (30 days)");
        assert_eq!(period_words("P1Y"), "P1Y (1 year)");
        assert_eq!(period_words("P10000D"), "P10000D (10,000 days)");
        assert_eq!(period_words("PT12H"), "PT12H");
        assert_eq!(period_words("none"), "none");
    }

    #[test]
    fn stored_errors_are_read() {
        let id = Uuid::new_v4();
        let names = BTreeMap::from([(id, "SessionNote".to_owned())]);
        let list = format!(
            r#"[{{"entity_id":"{id}","failure":{{"kind":"Database","sqlstate":"40P01","diagnostic_id":"d1"}}}}]"#
        );
        let f = read_failures(&list, &names);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].entity.as_deref(), Some("SessionNote"));
        assert_eq!(f[0].sqlstate.as_deref(), Some("40P01"));
        assert_eq!(f[0].diagnostic_id.as_deref(), Some("d1"));
        let one = read_failures(
            r#"{"kind":"Abandoned","sqlstate":null,"diagnostic_id":"d2"}"#,
            &names,
        );
        assert_eq!(one[0].kind, "Abandoned");
        assert!(one[0].meaning.contains("lease"));
        assert_eq!(read_failures("garbage", &names)[0].kind, "unknown");
    }

    #[test]
    fn every_failure_kind_has_a_meaning() {
        use crate::ledger::FailureKind as K;
        for kind in [
            K::Database,
            K::RuleProvider,
            K::RuleProviderPanic,
            K::UnresolvedCategory,
            K::UndeclaredStrategy,
            K::UnsupportedStrategy,
            K::InvalidStages,
            K::SoftDeleteRefused,
            K::AnonymiserPanic,
            K::Abandoned,
            K::FenceTimeout,
            K::HandlerCapture,
            K::SnapshotRoundTrip,
            K::Handler,
            K::HandlerPanic,
            K::HandlerTimeout,
            K::ClaimExpired,
            K::PayloadUndecodable,
            K::PayloadScrubbed,
            K::UnknownHandler,
        ] {
            // Exhaustive: a new kind fails to compile here until it is listed
            // (and given a meaning).
            match kind {
                K::Database
                | K::RuleProvider
                | K::RuleProviderPanic
                | K::UnresolvedCategory
                | K::UndeclaredStrategy
                | K::UnsupportedStrategy
                | K::InvalidStages
                | K::SoftDeleteRefused
                | K::AnonymiserPanic
                | K::Abandoned
                | K::FenceTimeout
                | K::HandlerCapture
                | K::SnapshotRoundTrip
                | K::Handler
                | K::HandlerPanic
                | K::HandlerTimeout
                | K::ClaimExpired
                | K::PayloadUndecodable
                | K::PayloadScrubbed
                | K::UnknownHandler => {}
            }
            assert_ne!(failure_meaning(kind.as_str()), UNKNOWN_FAILURE, "{kind:?}");
        }
    }

    #[test]
    fn times_and_shell_words() {
        assert_eq!(shown("2026-03-01T09:30:00Z"), "2026-03-01 09:30:00");
        assert_eq!(shell_quoted("it's"), r"'it'\''s'");
        assert_eq!(css_string("a's </style>"), r"a\27 s \3c \2f style\3e ");
    }
}
