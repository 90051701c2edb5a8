//! The SQL the disposition API and the sweep share: reading batches and
//! decisions, and recording a decision (a link of the evidence chain, whose
//! trigger writes the link itself).

use chrono::{DateTime, Months, TimeDelta, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

use super::types::DecisionKind;
use crate::policy::Period;
use crate::schema::SchemaName;
use crate::sql::{AssertSqlSafe, PgTime};

/// A batch's columns (alias `b`), with its approvers so far (`approvals`).
pub(crate) fn batch_columns(schema: &SchemaName) -> String {
    format!(
        "b.batch_id, b.retained_entity_id, b.entity_type, b.category, b.tenant_id, b.stage, \
         b.strategy, b.rule_hash, b.rule_content, b.run_id, b.frozen_at, b.created_at, \
         b.row_count, b.approvers_required, b.auto_approve_at, b.status, b.keep_until, \
         b.carried_run_id, b.changed_count, b.held_count, b.left_count, b.ineligible_count, \
         b.decided_at, \
         ARRAY(SELECT d.decided_by FROM {decisions} AS d \
               WHERE d.batch_id = b.batch_id AND d.decision = 'Approved' \
               ORDER BY d.chain_seq) AS approvals",
        decisions = schema.table("retention_disposition_decisions")
    )
}

/// A decision's columns (alias `d`).
pub(crate) const DECISION_COLUMNS: &str = "d.chain_seq, d.chain_hash, d.decision_id, d.batch_id, \
     d.decision, d.decided_by, d.automatic, d.rule_hash, d.reason, d.keep_until, d.run_id, \
     d.row_count, d.changed_count, d.held_count, d.left_count, d.ineligible_count, d.decided_at";

/// What binds a decision to its batch: the batch's identity as its Frozen
/// decision recorded it.
#[derive(Debug, Clone)]
pub(crate) struct BatchKey {
    pub(crate) batch_id: Uuid,
    pub(crate) entity_id: Uuid,
    pub(crate) tenant_id: Uuid,
    pub(crate) stage: i32,
    pub(crate) rule_hash: Vec<u8>,
    pub(crate) approvers_required: i32,
}

/// A decision to record.
#[derive(Debug, Clone)]
pub(crate) struct NewDecision<'a> {
    pub(crate) key: &'a BatchKey,
    pub(crate) kind: DecisionKind,
    pub(crate) decided_by: &'a str,
    pub(crate) automatic: bool,
    pub(crate) reason: Option<&'a str>,
    pub(crate) keep_until: Option<PgTime>,
    pub(crate) run_id: Option<Uuid>,
    pub(crate) rows: Option<i64>,
    /// Changed, held, left, ineligible.
    pub(crate) counts: Option<[i64; 4]>,
}

impl<'a> NewDecision<'a> {
    /// `kind` on `key`'s batch by `decided_by`, nothing else set.
    pub(crate) fn new(key: &'a BatchKey, kind: DecisionKind, decided_by: &'a str) -> Self {
        NewDecision {
            key,
            kind,
            decided_by,
            automatic: false,
            reason: None,
            keep_until: None,
            run_id: None,
            rows: None,
            counts: None,
        }
    }
}

/// The name a sweep records its own decisions under.
pub(crate) const COHORT: &str = "cohort";

/// The name an auto-approval is recorded under.
pub(crate) const AUTO: &str = "auto";

/// Records `d`; the trigger writes its link, position and time. One
/// statement naming every column (so the same privileges serve every kind).
pub(crate) async fn record(
    conn: &mut PgConnection,
    schema: &SchemaName,
    d: &NewDecision<'_>,
) -> Result<(), sqlx::Error> {
    let sql = format!(
        "INSERT INTO {} (decision_id, batch_id, decision, decided_by, automatic, \
             retained_entity_id, tenant_id, stage, rule_hash, approvers_required, reason, \
             keep_until, run_id, row_count, changed_count, held_count, left_count, ineligible_count) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)",
        schema.table("retention_disposition_decisions")
    );
    let c = d.counts;
    crate::sql::query(AssertSqlSafe(sql))
        .bind(Uuid::new_v4())
        .bind(d.key.batch_id)
        .bind(d.kind.as_str())
        .bind(d.decided_by)
        .bind(d.automatic)
        .bind(d.key.entity_id)
        .bind(d.key.tenant_id)
        .bind(d.key.stage)
        .bind(&d.key.rule_hash)
        .bind(d.key.approvers_required)
        .bind(d.reason)
        .bind(d.keep_until)
        .bind(d.run_id)
        .bind(d.rows)
        .bind(c.map(|c| c[0]))
        .bind(c.map(|c| c[1]))
        .bind(c.map(|c| c[2]))
        .bind(c.map(|c| c[3]))
        .execute(&mut *conn)
        .await
        .map(|_| ())
}

/// A batch's approvals so far: `(decided_by, automatic)`, in order.
pub(crate) async fn approvals(
    conn: &mut PgConnection,
    schema: &SchemaName,
    batch_id: Uuid,
) -> Result<Vec<(String, bool)>, sqlx::Error> {
    crate::sql::query_as(AssertSqlSafe(format!(
        "SELECT d.decided_by, d.automatic FROM {} AS d \
         WHERE d.batch_id = $1 AND d.decision = 'Approved' ORDER BY d.chain_seq",
        schema.table("retention_disposition_decisions")
    )))
    .bind(batch_id)
    .fetch_all(&mut *conn)
    .await
}

pub(crate) use crate::policy::review::{approved, same_person};

/// `t + period`, calendar parts in UTC (years, then months, then days), or
/// `None` past what a `DateTime` holds.
pub(crate) fn after(t: DateTime<Utc>, period: Period) -> Option<DateTime<Utc>> {
    match period {
        Period::Fixed(d) => i64::try_from(d.as_micros())
            .ok()
            .map(TimeDelta::microseconds)
            .and_then(|d| t.checked_add_signed(d)),
        Period::Calendar {
            years,
            months,
            days,
        } => {
            let total = u64::from(years) * 12 + u64::from(months);
            u32::try_from(total)
                .ok()
                .and_then(|m| t.checked_add_months(Months::new(m)))
                .and_then(|t| t.checked_add_signed(TimeDelta::days(i64::from(days))))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn periods_add_in_utc_calendar_parts() {
        let t = Utc.with_ymd_and_hms(2024, 1, 31, 12, 0, 0).unwrap();
        assert_eq!(
            after(t, Period::months(1)),
            Some(Utc.with_ymd_and_hms(2024, 2, 29, 12, 0, 0).unwrap())
        );
        assert_eq!(
            after(t, Period::days(30)),
            Some(Utc.with_ymd_and_hms(2024, 3, 1, 12, 0, 0).unwrap())
        );
        assert_eq!(after(t, Period::years(u32::MAX)), None);
    }
}
