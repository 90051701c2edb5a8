//! The ledger writer. Private: hosts cannot replace or bypass it.
//!
//! Some of these statements run outside Cohort's pinned transactions (a run's
//! start and end, an entity's summaries, each in a transaction of its own:
//! [`alone`]), so every operator and function is written
//! `pg_catalog`-qualified: a schema earlier on the session's `search_path`
//! cannot shadow them.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

use super::{EntitySummary, RunKind, RunStatus, Trigger};
use crate::policy::Strategy;
use crate::schema::SchemaName;
use crate::sql::txn::alone;
use crate::sql::{AssertSqlSafe, PgTime};

/// A one-row relation that makes the statement's transaction commit
/// without waiting for the WAL flush (`synchronous_commit` set for that
/// transaction only, so nothing outlives it on a pooled connection).
/// Statements select their values `FROM` it.
const ASYNC_COMMIT: &str =
    "(SELECT pg_catalog.set_config('synchronous_commit', 'off', true)) AS async_commit";

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

/// The SQL condition that run `run` (an expression) is still `Started` and
/// owned by `token` (an expression), taking a share lock on its row until
/// the transaction ends (contract CO2): a settle of the run waits for the
/// write that checked it, or the write finds the run settled.
pub(crate) fn owned_sql(runs: &str, run: &str, token: &str) -> String {
    format!(
        "EXISTS (SELECT 1 FROM {runs} AS o WHERE o.run_id OPERATOR(pg_catalog.=) {run} \
         AND o.owner_token OPERATOR(pg_catalog.=) {token} \
         AND o.status OPERATOR(pg_catalog.=) 'Started' FOR SHARE OF o)"
    )
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

    /// The quoted, schema-qualified runs table.
    pub(crate) fn runs(&self) -> &str {
        &self.runs
    }

    /// Writes the run's `Started` row, owned by `owner` with a lease of
    /// `lease` from the database clock (contract CO2). Its commit does not
    /// wait for the WAL flush (a transaction-local setting; see
    /// `docs/design.md`, "A run").
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
        subject_hmac: Option<&[u8]>,
        replay_of: Option<Uuid>,
        owner: Uuid,
        lease: chrono::TimeDelta,
    ) -> Result<(), sqlx::Error> {
        let sql = format!(
            "INSERT INTO {} (run_id, run_kind, trigger, dry_run, tenant_id, logical_now, status, started_at, \
                             subject_hmac, owner_token, lease_expires_at, replay_of) \
             SELECT $1, $2, $3, $4, $5, $6, 'Started', pg_catalog.statement_timestamp(), $7, $8, \
                    pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) $9::pg_catalog.interval, $10 \
             FROM {ASYNC_COMMIT}",
            self.runs
        );
        alone(conn, async |conn| {
            crate::sql::query(AssertSqlSafe(sql))
                .bind(run_id)
                .bind(kind.as_str())
                .bind(trigger.as_str())
                .bind(dry_run)
                .bind(tenant_id)
                .bind(now)
                .bind(subject_hmac)
                .bind(owner)
                .bind(lease)
                .bind(replay_of)
                .execute(conn)
                .await
                .map(|_| ())
        })
        .await
    }

    /// Settles run `run_id`, still `Started` and owned by `owner`; false
    /// when it is not (another process settled it: the lease was lost). The
    /// commit is durable: it flushes every asynchronous commit before it.
    pub(crate) async fn settle_run(
        &self,
        conn: &mut PgConnection,
        run_id: Uuid,
        status: RunStatus,
        error: Option<&str>,
        owner: Uuid,
    ) -> Result<bool, sqlx::Error> {
        let sql = format!(
            "UPDATE {} SET status = $2, settled_at = pg_catalog.statement_timestamp(), error = $3 \
             WHERE run_id OPERATOR(pg_catalog.=) $1 AND status OPERATOR(pg_catalog.=) 'Started' \
               AND owner_token OPERATOR(pg_catalog.=) $4",
            self.runs
        );
        alone(conn, async |conn| {
            crate::sql::query(AssertSqlSafe(sql))
                .bind(run_id)
                .bind(status.as_str())
                .bind(error)
                .bind(owner)
                .execute(conn)
                .await
                .map(|done| done.rows_affected() == 1)
        })
        .await
    }

    /// Settles an abandoned run as `Failed` with `error` (its summaries first,
    /// so the run's chain link covers them), in one transaction, if it is
    /// still `Started` and its lease has expired (or it has none: a run of a
    /// Cohort before migration 7), re-checked under a row lock so an owner
    /// that renewed meanwhile keeps its run. Returns whether it settled it.
    pub(crate) async fn settle_abandoned(
        &self,
        conn: &mut PgConnection,
        run_id: Uuid,
        error: &str,
    ) -> Result<bool, sqlx::Error> {
        let mut tx = sqlx::Acquire::begin(&mut *conn).await?;
        let expired: Option<i32> = crate::sql::query_scalar(AssertSqlSafe(format!(
            "SELECT 1 FROM {} AS r WHERE r.run_id OPERATOR(pg_catalog.=) $1 \
               AND r.status OPERATOR(pg_catalog.=) 'Started' \
               AND (r.lease_expires_at IS NULL \
                    OR r.lease_expires_at OPERATOR(pg_catalog.<) pg_catalog.clock_timestamp()) \
             FOR UPDATE OF r",
            self.runs
        )))
        .bind(run_id)
        .fetch_optional(&mut *tx)
        .await?;
        if expired.is_none() {
            tx.rollback().await?;
            return Ok(false);
        }
        self.fail_running_summaries(&mut tx, run_id, error).await?;
        crate::sql::query(AssertSqlSafe(format!(
            "UPDATE {} SET status = 'Failed', settled_at = pg_catalog.statement_timestamp(), error = $2 \
             WHERE run_id OPERATOR(pg_catalog.=) $1 AND status OPERATOR(pg_catalog.=) 'Started'",
            self.runs
        )))
        .bind(run_id)
        .bind(error)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Creates the entity's summary (`Running`) before its first batch, with
    /// what is known before any row changes: strategy, cutoff, period applied
    /// and provenance, so a run abandoned mid-entity still says what it was
    /// doing. Returns the summary's id, which batches add their counts to.
    /// `None` when the run is no longer `owner`'s (its lease was lost).
    pub(crate) async fn start_entity(
        &self,
        conn: &mut PgConnection,
        key: &SummaryKey<'_>,
        summary: &EntitySummary,
        cutoff: Option<PgTime>,
        owner: Uuid,
    ) -> Result<Option<i64>, sqlx::Error> {
        let sql = format!(
            "INSERT INTO {t} AS s (run_id, retained_entity_id, entity_type, category, tenant_id, strategy, status, \
               affected_count, held_count, skipped_count, null_anchor_count, applied_period, cutoff, \
               rule_source, rule_reason, updated_at) \
             SELECT $1, $2, $3, $4, $5, $6, 'Running', 0, 0, 0, 0, $7, $8, $9, $10, \
                    pg_catalog.statement_timestamp() \
             FROM {ASYNC_COMMIT} WHERE {owned} \
             ON CONFLICT (run_id, retained_entity_id, category, tenant_id, strategy) DO UPDATE \
             SET updated_at = EXCLUDED.updated_at \
             RETURNING s.summary_id",
            t = self.summaries,
            owned = owned_sql(&self.runs, "$1", "$11"),
        );
        alone(conn, async |conn| {
            crate::sql::query_scalar(AssertSqlSafe(sql))
                .bind(key.run_id)
                .bind(key.entity_id)
                .bind(clean(key.entity_type))
                .bind(clean(key.category))
                .bind(key.tenant_id)
                .bind(strategy_name(key.strategy))
                .bind(summary.applied_period.map(|p| p.to_string()))
                .bind(cutoff)
                .bind(summary.rule_source.as_deref().map(clean))
                .bind(summary.rule_reason.as_deref().map(clean))
                .bind(owner)
                .fetch_optional(conn)
                .await
        })
        .await
    }

    /// The body of a CTE that adds the rows of CTE `d` to summary `summary`
    /// (a placeholder): part of the batch's own statement, so the mutation and
    /// its progress commit together. (The batch's transaction checked the
    /// run's lease when it began.)
    pub(crate) fn progress_cte(&self, d: &str, summary: &str) -> String {
        format!(
            "UPDATE {t} SET affected_count = affected_count OPERATOR(pg_catalog.+) \
                        (SELECT pg_catalog.count(*) FROM {d}), \
                    updated_at = pg_catalog.statement_timestamp() \
             WHERE summary_id OPERATOR(pg_catalog.=) {summary}",
            t = self.summaries
        )
    }

    /// The body of a CTE that records each row of CTE `d` (column `rid`, the
    /// canonical record id) as a row detail (returning `detail_id` and
    /// `record_id` when handlers capture). The other arguments are placeholders: run, retained-entity
    /// id, entity type, tenant, action. With `payloads`, the SQL of a
    /// `ROWS FROM` giving `pl(rid, payload)` (payload as JSON text), each
    /// detail keeps its row's captured handler snapshots.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn details_cte(
        &self,
        d: &str,
        run: &str,
        entity: &str,
        entity_type: &str,
        tenant: &str,
        action: &str,
        payloads: Option<&str>,
    ) -> String {
        let (column, value, join) = match payloads {
            Some(source) => (
                ", captured_payload",
                ", (pl.payload)::pg_catalog.jsonb",
                format!(" LEFT JOIN {source} ON pl.rid OPERATOR(pg_catalog.=) {d}.rid"),
            ),
            None => ("", "", String::new()),
        };
        format!(
            "INSERT INTO {t} (run_id, retained_entity_id, entity_type, record_id, tenant_id, action, created_at{column}) \
             SELECT {run}, {entity}, {entity_type}, {d}.rid, {tenant}, {action}, pg_catalog.statement_timestamp(){value} \
             FROM {d}{join}{returning}",
            t = self.details,
            // Only the handlers' queue reads the new details back; without
            // handlers the role needs no SELECT on them (docs/security.md).
            returning = if payloads.is_some() {
                " RETURNING detail_id, record_id"
            } else {
                ""
            },
        )
    }

    /// Adds `n` rows to summary `summary`'s affected count: a dropped
    /// partition's exact row count, in the drop's own transaction.
    pub(crate) async fn add_affected(
        &self,
        conn: &mut PgConnection,
        summary: i64,
        n: u64,
    ) -> Result<(), sqlx::Error> {
        crate::sql::query(AssertSqlSafe(format!(
            "UPDATE {t} SET affected_count = affected_count OPERATOR(pg_catalog.+) $2, \
                    updated_at = pg_catalog.statement_timestamp() \
             WHERE summary_id OPERATOR(pg_catalog.=) $1",
            t = self.summaries
        )))
        .bind(summary)
        .bind(to_i64(n))
        .execute(conn)
        .await
        .map(|_| ())
    }

    /// An `INSERT ... SELECT` that records every row of `relation` (`rid`:
    /// the quoted record-id column) as a row detail, in bulk: for a
    /// partition about to be dropped. Binds `$1` run, `$2` retained-entity
    /// id, `$3` entity type, `$4` tenant, `$5` action.
    pub(crate) fn details_of_relation(&self, relation: &str, rid: &str) -> String {
        format!(
            "INSERT INTO {t} (run_id, retained_entity_id, entity_type, record_id, tenant_id, action, created_at) \
             SELECT $1, $2, $3, (t.{rid})::pg_catalog.text, $4, $5, pg_catalog.statement_timestamp() \
             FROM {relation} AS t",
            t = self.details,
        )
    }

    /// Settles the summaries of `run_id` still `Running` as `Failed` with
    /// `error`: for a run settled because its owner is gone. Their affected
    /// counts stay as the committed batches left them.
    pub(crate) async fn fail_running_summaries(
        &self,
        conn: &mut PgConnection,
        run_id: Uuid,
        error: &str,
    ) -> Result<u64, sqlx::Error> {
        crate::sql::query(AssertSqlSafe(format!(
            "UPDATE {t} SET status = 'Failed', error = $2, updated_at = pg_catalog.statement_timestamp() \
             WHERE run_id OPERATOR(pg_catalog.=) $1 AND status OPERATOR(pg_catalog.=) 'Running'",
            t = self.summaries
        )))
        .bind(run_id)
        .bind(error)
        .execute(conn)
        .await
        .map(|done| done.rows_affected())
    }

    /// Writes the entity's final counts and status; false when the run is
    /// no longer `owner`'s (its lease was lost).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn finish_entity(
        &self,
        conn: &mut PgConnection,
        key: &SummaryKey<'_>,
        summary: &EntitySummary,
        cutoff: Option<PgTime>,
        status: &str,
        owner: Uuid,
    ) -> Result<bool, sqlx::Error> {
        let sql = format!(
            "INSERT INTO {t} AS s (run_id, retained_entity_id, entity_type, category, tenant_id, strategy, status, \
               affected_count, held_count, skipped_count, null_anchor_count, applied_period, cutoff, \
               rule_source, rule_reason, error, updated_at, legal_minimum_count) \
             SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, \
                    pg_catalog.statement_timestamp(), $17 \
             FROM {ASYNC_COMMIT} WHERE {owned} \
             ON CONFLICT (run_id, retained_entity_id, category, tenant_id, strategy) DO UPDATE \
             SET status = EXCLUDED.status, affected_count = EXCLUDED.affected_count, \
                 held_count = EXCLUDED.held_count, skipped_count = EXCLUDED.skipped_count, \
                 null_anchor_count = EXCLUDED.null_anchor_count, applied_period = EXCLUDED.applied_period, \
                 cutoff = EXCLUDED.cutoff, rule_source = EXCLUDED.rule_source, \
                 rule_reason = EXCLUDED.rule_reason, error = EXCLUDED.error, updated_at = EXCLUDED.updated_at, \
                 legal_minimum_count = EXCLUDED.legal_minimum_count",
            t = self.summaries,
            owned = owned_sql(&self.runs, "$1", "$18"),
        );
        alone(conn, async |conn| {
            crate::sql::query(AssertSqlSafe(sql))
                .bind(key.run_id)
                .bind(key.entity_id)
                .bind(clean(key.entity_type))
                .bind(clean(key.category))
                .bind(key.tenant_id)
                .bind(strategy_name(key.strategy))
                .bind(status)
                .bind(to_i64(summary.affected))
                .bind(to_i64(summary.held))
                .bind(to_i64(summary.skipped))
                .bind(to_i64(summary.null_anchor))
                .bind(summary.applied_period.map(|p| p.to_string()))
                .bind(cutoff)
                .bind(summary.rule_source.as_deref().map(clean))
                .bind(summary.rule_reason.as_deref().map(clean))
                .bind(summary.error.as_deref())
                .bind(to_i64(summary.legal_minimum))
                .bind(owner)
                .execute(conn)
                .await
                .map(|done| done.rows_affected() == 1)
        })
        .await
    }
}

/// Text PostgreSQL can store: a NUL byte (which `text` cannot hold, and
/// which would fail the ledger write) becomes U+FFFD. Rule provenance and
/// names come from the host; the ledger must accept whatever they are.
pub(crate) fn clean(text: &str) -> std::borrow::Cow<'_, str> {
    if text.contains('\0') {
        std::borrow::Cow::Owned(text.replace('\0', "\u{FFFD}"))
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

/// Counts are u64 in Rust and bigint in SQL; saturate rather than wrap.
pub(crate) fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
