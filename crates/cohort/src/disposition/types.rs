//! What the disposition API returns: batches, decisions, and what a sweep
//! did with them.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::Row;
use sqlx::postgres::PgRow;
use uuid::Uuid;

use crate::error::disposition::BatchStatus;
use crate::sql::PgTime;

/// What a decision on a disposition batch was (contract DR3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[non_exhaustive]
pub enum DecisionKind {
    /// A sweep froze the batch for review (by `cohort`).
    Frozen,
    /// An approver approved it (or `auto`, after the review's set time).
    Approved,
    /// A reviewer rejected it, with a reason: its rows are kept.
    Rejected,
    /// A reviewer kept its rows until a date.
    Extended,
    /// The rule that selected it changed before it was carried out (by
    /// `cohort`).
    Voided,
    /// A sweep carried it out (by `cohort`), with what it changed and left.
    CarriedOut,
}

impl DecisionKind {
    /// The name stored in `retention_disposition_decisions.decision`.
    pub fn as_str(&self) -> &'static str {
        match self {
            DecisionKind::Frozen => "Frozen",
            DecisionKind::Approved => "Approved",
            DecisionKind::Rejected => "Rejected",
            DecisionKind::Extended => "Extended",
            DecisionKind::Voided => "Voided",
            DecisionKind::CarriedOut => "CarriedOut",
        }
    }

    /// The kind stored as `text`, if it is one.
    pub fn parse(text: &str) -> Option<DecisionKind> {
        Some(match text {
            "Frozen" => DecisionKind::Frozen,
            "Approved" => DecisionKind::Approved,
            "Rejected" => DecisionKind::Rejected,
            "Extended" => DecisionKind::Extended,
            "Voided" => DecisionKind::Voided,
            "CarriedOut" => DecisionKind::CarriedOut,
            _ => return None,
        })
    }
}

impl std::fmt::Display for DecisionKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A disposition batch as stored (contract DR1): what one sweep froze for
/// review for one retained type, tenant and stage, and where it stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct DispositionBatch {
    /// Its id.
    pub batch_id: Uuid,
    /// The retained type.
    pub entity_id: Uuid,
    /// Its type name.
    pub entity_type: String,
    /// Its category.
    pub category: String,
    /// The tenant (the nil UUID for a tenantless type).
    pub tenant_id: Uuid,
    /// The stage of the rule (0: the rule's own, 1: its first `then`, ...).
    pub stage: u32,
    /// What carrying it out does (`Purge`, `SoftDelete`, `Anonymise`).
    pub strategy: String,
    /// SHA-256 of the rule's canonical content, lower-case hex.
    pub rule_hash: String,
    /// The rule's canonical content ([`crate::policy::RuleContent`]).
    pub rule_content: String,
    /// The sweep that froze it.
    pub run_id: Uuid,
    /// That sweep's logical time.
    pub frozen_at: DateTime<Utc>,
    /// When it was written, by the database clock.
    pub created_at: DateTime<Utc>,
    /// How many rows it froze.
    pub rows: u64,
    /// How many distinct approvers it needs (1 or 2).
    pub approvers_required: u32,
    /// Who approved it so far, in order (`auto` for an auto-approval).
    pub approvals: Vec<String>,
    /// When a sweep approves it by itself, if the review says so.
    pub auto_approve_at: Option<DateTime<Utc>>,
    /// Where it stands.
    pub status: BatchStatus,
    /// Rejected or extended: its rows are kept (not offered again) until then.
    pub keep_until: Option<DateTime<Utc>>,
    /// The sweep that carried it out (or is carrying it out).
    pub carried_run_id: Option<Uuid>,
    /// Carried out: rows changed.
    pub changed: Option<u64>,
    /// Carried out: rows kept because a hold or matter covered them.
    pub held: Option<u64>,
    /// Carried out: rows still eligible that the sweep could not change
    /// (locked by another transaction); a later sweep offers them again.
    pub left: Option<u64>,
    /// Carried out: rows no longer eligible (their anchor moved, their state
    /// changed) or gone; kept, or already gone.
    pub ineligible: Option<u64>,
    /// The last decision's time.
    pub decided_at: Option<DateTime<Utc>>,
}

/// One decision on a disposition batch, a link of the evidence chain
/// (contract DR3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Decision {
    /// Its position in the install's chain of disposition decisions.
    pub seq: i64,
    /// Its id.
    pub decision_id: Uuid,
    /// The batch.
    pub batch_id: Uuid,
    /// What was decided.
    pub kind: DecisionKind,
    /// Who decided: the approver's or reviewer's name, `auto` for an
    /// auto-approval, `cohort` for what a sweep recorded.
    pub decided_by: String,
    /// Whether no person took it (an auto-approval, a freeze, a void, a
    /// carry-out).
    pub automatic: bool,
    /// The rule hash the batch is bound to, lower-case hex.
    pub rule_hash: String,
    /// A rejection's reason (or why a batch was voided).
    pub reason: Option<String>,
    /// A rejection's or extension's end.
    pub keep_until: Option<DateTime<Utc>>,
    /// The sweep that froze, voided or carried out the batch.
    pub run_id: Option<Uuid>,
    /// Frozen: rows frozen.
    pub rows: Option<u64>,
    /// Carried out: rows changed.
    pub changed: Option<u64>,
    /// Carried out: rows kept because held.
    pub held: Option<u64>,
    /// Carried out: rows left because locked.
    pub left: Option<u64>,
    /// Carried out: rows no longer eligible, or gone.
    pub ineligible: Option<u64>,
    /// When, by the database clock.
    pub decided_at: DateTime<Utc>,
    /// The link's SHA-256, lower-case hex.
    pub chain_hash: String,
}

/// What a sweep did with disposition review for one retained type and
/// stage ([`crate::RunResult::dispositions`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct DispositionActivity {
    /// The batch.
    pub batch_id: Uuid,
    /// The retained type.
    pub entity_id: Uuid,
    /// Its type name.
    pub entity_type: String,
    /// The rule's stage.
    pub stage: u32,
    /// What happened.
    pub action: DispositionAction,
}

/// What a sweep did to a disposition batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
#[non_exhaustive]
pub enum DispositionAction {
    /// Froze the rows it would have changed into a new batch, and changed
    /// none of them.
    Frozen {
        /// Rows frozen.
        rows: u64,
    },
    /// Approved a batch whose auto-approval time had come.
    AutoApproved,
    /// Carried out an approved batch.
    CarriedOut {
        /// Rows changed.
        changed: u64,
        /// Rows kept: held.
        held: u64,
        /// Rows left: locked by another transaction.
        left: u64,
        /// Rows kept: no longer eligible, or gone.
        ineligible: u64,
    },
    /// Voided a batch whose rule changed.
    Voided,
}

fn count(v: Option<i64>) -> Option<u64> {
    v.map(|n| u64::try_from(n).unwrap_or(0))
}

fn time(row: &PgRow, name: &str) -> Result<Option<DateTime<Utc>>, sqlx::Error> {
    Ok(row
        .try_get::<Option<PgTime>, _>(name)?
        .map(PgTime::to_utc_clamped))
}

/// A batch from a row of [`super::store::BATCH_COLUMNS`].
pub(crate) fn batch_from_row(row: &PgRow) -> Result<DispositionBatch, sqlx::Error> {
    let status: String = row.try_get("status")?;
    let hash: Vec<u8> = row.try_get("rule_hash")?;
    let stage: i32 = row.try_get("stage")?;
    let required: i32 = row.try_get("approvers_required")?;
    Ok(DispositionBatch {
        batch_id: row.try_get("batch_id")?,
        entity_id: row.try_get("retained_entity_id")?,
        entity_type: row.try_get("entity_type")?,
        category: row.try_get("category")?,
        tenant_id: row.try_get("tenant_id")?,
        stage: u32::try_from(stage).unwrap_or(0),
        strategy: row.try_get("strategy")?,
        rule_hash: hex::encode(hash),
        rule_content: row.try_get("rule_content")?,
        run_id: row.try_get("run_id")?,
        frozen_at: time(row, "frozen_at")?.unwrap_or(DateTime::<Utc>::MIN_UTC),
        created_at: time(row, "created_at")?.unwrap_or(DateTime::<Utc>::MIN_UTC),
        rows: count(row.try_get("row_count")?).unwrap_or(0),
        approvers_required: u32::try_from(required).unwrap_or(1),
        approvals: row
            .try_get::<Option<Vec<String>>, _>("approvals")?
            .unwrap_or_default(),
        auto_approve_at: time(row, "auto_approve_at")?,
        status: BatchStatus::parse(&status).ok_or_else(|| sqlx::Error::ColumnDecode {
            index: "status".into(),
            source: format!("unknown disposition batch status {status:?}").into(),
        })?,
        keep_until: time(row, "keep_until")?,
        carried_run_id: row.try_get("carried_run_id")?,
        changed: count(row.try_get("changed_count")?),
        held: count(row.try_get("held_count")?),
        left: count(row.try_get("left_count")?),
        ineligible: count(row.try_get("ineligible_count")?),
        decided_at: time(row, "decided_at")?,
    })
}

/// A decision from a row of [`super::store::DECISION_COLUMNS`].
pub(crate) fn decision_from_row(row: &PgRow) -> Result<Decision, sqlx::Error> {
    let kind: String = row.try_get("decision")?;
    let hash: Vec<u8> = row.try_get("rule_hash")?;
    let link: Vec<u8> = row.try_get("chain_hash")?;
    Ok(Decision {
        seq: row.try_get("chain_seq")?,
        decision_id: row.try_get("decision_id")?,
        batch_id: row.try_get("batch_id")?,
        kind: DecisionKind::parse(&kind).ok_or_else(|| sqlx::Error::ColumnDecode {
            index: "decision".into(),
            source: format!("unknown disposition decision {kind:?}").into(),
        })?,
        decided_by: row.try_get("decided_by")?,
        automatic: row.try_get("automatic")?,
        rule_hash: hex::encode(hash),
        reason: row.try_get("reason")?,
        keep_until: time(row, "keep_until")?,
        run_id: row.try_get("run_id")?,
        rows: count(row.try_get("row_count")?),
        changed: count(row.try_get("changed_count")?),
        held: count(row.try_get("held_count")?),
        left: count(row.try_get("left_count")?),
        ineligible: count(row.try_get("ineligible_count")?),
        decided_at: time(row, "decided_at")?.unwrap_or(DateTime::<Utc>::MIN_UTC),
        chain_hash: hex::encode(link),
    })
}
