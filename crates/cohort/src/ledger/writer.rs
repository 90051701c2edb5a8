//! The ledger writer. Private: hosts cannot replace or bypass it.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

use super::{EntitySummary, RunKind, RunStatus, Trigger};
use crate::policy::Strategy;
use crate::schema::SchemaName;
use crate::sql::AssertSqlSafe;

/// The ledger of one install (one schema).
#[derive(Debug, Clone)]
pub(crate) struct Ledger {
    runs: String,
    summaries: String,
    details: String,
}

/// The identity of a summary row.
pub(crate) struct SummaryKey<'a> {
    pub(crate) run_id: Uuid,
    pub(crate) entity_id: Uuid,
    pub(crate) entity_type: &'a str,
    pub(crate) category: &'a str,
    pub(crate) tenant_id: Uuid,
    pub(crate) strategy: Option<Strategy>,
}

fn strategy_name(s: Option<Strategy>) -> &'static str {
    s.map(|s| s.as_str()).unwrap_or("Unresolved")
}

impl Ledger {
    pub(crate) fn new(schema: &SchemaName) -> Ledger {
        Ledger {
            runs: schema.table("sweep_run").to_string(),
            summaries: schema.table("sweep_run_entity_summary").to_string(),
            details: schema.table("sweep_run_row_detail").to_string(),
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn start_run(
        &self,
        conn: &mut PgConnection,
        run_id: Uuid,
        kind: RunKind,
        trigger: Trigger,
        dry_run: bool,
        tenant_id: Uuid,
        now: DateTime<Utc>,
    ) -> Result<(), sqlx::Error> {
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO {} (run_id, run_kind, trigger, dry_run, tenant_id, logical_now, status, started_at) \
             VALUES ($1, $2, $3, $4, $5, $6, 'Started', pg_catalog.statement_timestamp())",
            self.runs
        )))
        .bind(run_id)
        .bind(kind.as_str())
        .bind(trigger.as_str())
        .bind(dry_run)
        .bind(tenant_id)
        .bind(now)
        .execute(conn)
        .await
        .map(|_| ())
    }

    pub(crate) async fn settle_run(
        &self,
        conn: &mut PgConnection,
        run_id: Uuid,
        status: RunStatus,
        error: Option<&str>,
    ) -> Result<(), sqlx::Error> {
        sqlx::query(AssertSqlSafe(format!(
            "UPDATE {} SET status = $2, settled_at = pg_catalog.statement_timestamp(), error = $3 \
             WHERE run_id = $1 AND status = 'Started'",
            self.runs
        )))
        .bind(run_id)
        .bind(status.as_str())
        .bind(error)
        .execute(conn)
        .await
        .map(|_| ())
    }

    /// Adds a batch's mutations to the entity's summary (creating it, `Running`).
    pub(crate) async fn add_progress(
        &self,
        conn: &mut PgConnection,
        key: &SummaryKey<'_>,
        affected: u64,
    ) -> Result<(), sqlx::Error> {
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO {t} AS s (run_id, retained_entity_id, entity_type, category, tenant_id, strategy, status, \
               affected_count, held_count, skipped_count, null_anchor_count, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, 'Running', $7, 0, 0, 0, pg_catalog.statement_timestamp()) \
             ON CONFLICT (run_id, retained_entity_id, category, tenant_id, strategy) DO UPDATE \
             SET affected_count = s.affected_count + EXCLUDED.affected_count, updated_at = EXCLUDED.updated_at",
            t = self.summaries
        )))
        .bind(key.run_id)
        .bind(key.entity_id)
        .bind(key.entity_type)
        .bind(key.category)
        .bind(key.tenant_id)
        .bind(strategy_name(key.strategy))
        .bind(to_i64(affected))
        .execute(conn)
        .await
        .map(|_| ())
    }

    /// Writes the entity's final counts and status.
    pub(crate) async fn finish_entity(
        &self,
        conn: &mut PgConnection,
        key: &SummaryKey<'_>,
        summary: &EntitySummary,
        status: &str,
    ) -> Result<(), sqlx::Error> {
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO {t} AS s (run_id, retained_entity_id, entity_type, category, tenant_id, strategy, status, \
               affected_count, held_count, skipped_count, null_anchor_count, applied_period, cutoff, \
               rule_source, rule_reason, error, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, \
                     pg_catalog.statement_timestamp()) \
             ON CONFLICT (run_id, retained_entity_id, category, tenant_id, strategy) DO UPDATE \
             SET status = EXCLUDED.status, affected_count = EXCLUDED.affected_count, \
                 held_count = EXCLUDED.held_count, skipped_count = EXCLUDED.skipped_count, \
                 null_anchor_count = EXCLUDED.null_anchor_count, applied_period = EXCLUDED.applied_period, \
                 cutoff = EXCLUDED.cutoff, rule_source = EXCLUDED.rule_source, \
                 rule_reason = EXCLUDED.rule_reason, error = EXCLUDED.error, updated_at = EXCLUDED.updated_at",
            t = self.summaries
        )))
        .bind(key.run_id)
        .bind(key.entity_id)
        .bind(key.entity_type)
        .bind(key.category)
        .bind(key.tenant_id)
        .bind(strategy_name(key.strategy))
        .bind(status)
        .bind(to_i64(summary.affected))
        .bind(to_i64(summary.held))
        .bind(to_i64(summary.skipped))
        .bind(to_i64(summary.null_anchor))
        .bind(summary.applied_period.as_deref())
        .bind(summary.cutoff)
        .bind(summary.rule_source.as_deref())
        .bind(summary.rule_reason.as_deref())
        .bind(summary.error.as_deref())
        .execute(conn)
        .await
        .map(|_| ())
    }

    /// Records each changed row of a batch (per-row audit).
    pub(crate) async fn add_details(
        &self,
        conn: &mut PgConnection,
        key: &SummaryKey<'_>,
        action: Strategy,
        record_ids: &[String],
    ) -> Result<(), sqlx::Error> {
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO {t} (run_id, retained_entity_id, entity_type, record_id, tenant_id, action, created_at) \
             SELECT $1, $2, $3, r, $4, $5, pg_catalog.statement_timestamp() \
             FROM pg_catalog.unnest($6::pg_catalog.text[]) AS r",
            t = self.details
        )))
        .bind(key.run_id)
        .bind(key.entity_id)
        .bind(key.entity_type)
        .bind(key.tenant_id)
        .bind(action.as_str())
        .bind(record_ids)
        .execute(conn)
        .await
        .map(|_| ())
    }
}

/// Counts are u64 in Rust and bigint in SQL; saturate rather than wrap.
pub(crate) fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
