//! After a sweep (contract OB3): the dead tuples its deletes and updates left
//! in each table it changed, and, on request, `VACUUM (ANALYZE)` of the
//! tables it changed enough rows in, so removed data leaves the heap and the
//! planner's statistics follow the table.
//!
//! `VACUUM` runs outside any transaction, on a connection of its own taken
//! out of the pool and closed afterwards, one table at a time, each bounded
//! by [`VacuumOptions::timeout`]: on a direct connection through
//! `statement_timeout` on that connection (which is closed, so the setting
//! reaches no one else); behind a transaction pooler, where a session
//! setting would stay on the pooler's server connection, by no longer
//! waiting (the server finishes the `VACUUM` on its own). `VACUUM` needs the
//! table's owner (on PostgreSQL 16 and later also the `MAINTAIN` privilege);
//! a role without it gets [`VacuumOutcome::NotPermitted`] and the dead-tuple
//! report only.

use std::time::{Duration, Instant};

use serde::Serialize;
use sqlx::{PgConnection, Row};

use super::RunResult;
use crate::config::ConnectionMode;
use crate::engine::Engine;
use crate::sql::{AssertSqlSafe, QualifiedName};

/// `VACUUM (ANALYZE)` at the end of a sweep ([`SweepOptions::vacuum`](super::SweepOptions::vacuum)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct VacuumOptions {
    /// Tables the sweep changed fewer rows in are not vacuumed (default 10,000).
    pub min_rows: u64,
    /// How long one table's `VACUUM` may take (default 10 minutes).
    pub timeout: Duration,
}

impl Default for VacuumOptions {
    fn default() -> Self {
        VacuumOptions {
            min_rows: 10_000,
            timeout: Duration::from_secs(600),
        }
    }
}

impl VacuumOptions {
    /// Vacuums tables the sweep changed at least `rows` rows in.
    pub fn min_rows(mut self, rows: u64) -> Self {
        self.min_rows = rows;
        self
    }

    /// Bounds each table's `VACUUM`.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
}

/// What became of one table the sweep changed rows in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct TableMaintenance {
    /// The table, `schema.name` (unquoted).
    pub table: String,
    /// Rows the sweep changed in it (deleted or updated).
    pub changed: u64,
    /// Dead tuples in the table (its partitions summed) after the sweep and
    /// any `VACUUM`, from `pg_stat_user_tables`; `None` when the statistics
    /// could not be read. On a direct connection the sweep's own backend
    /// flushes its statistics first; behind a transaction pooler the
    /// figure may trail the sweep's last batches by up to a few seconds.
    pub dead_tuples: Option<u64>,
    /// Whether it was vacuumed.
    pub vacuum: VacuumOutcome,
}

/// Whether a changed table was vacuumed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub enum VacuumOutcome {
    /// The sweep did not ask for it.
    NotRequested,
    /// Fewer rows changed than [`VacuumOptions::min_rows`].
    BelowThreshold,
    /// `VACUUM (ANALYZE)` ran to its end.
    Vacuumed {
        /// How long it took.
        millis: u64,
    },
    /// The role may not vacuum the table (it is not the table's owner, nor
    /// granted `MAINTAIN` on PostgreSQL 16 and later).
    NotPermitted,
    /// It took longer than [`VacuumOptions::timeout`].
    TimedOut,
    /// PostgreSQL refused or failed it; the reason, sanitised.
    Failed {
        /// What PostgreSQL said (its SQLSTATE and message).
        reason: String,
    },
}

impl Engine {
    /// The maintenance report of a finished, real sweep or erasure: one
    /// entry per table it changed rows in, vacuumed first when `vacuum` asks
    /// for it. Never fails the run: a failure is its table's outcome.
    pub(crate) async fn after_run(
        &self,
        run_conn: &mut PgConnection,
        result: &RunResult,
        vacuum: Option<&VacuumOptions>,
    ) -> Vec<TableMaintenance> {
        if result.dry_run {
            return Vec::new();
        }
        let mut changed: Vec<(QualifiedName, u64)> = Vec::new();
        for s in result.summaries.iter().filter(|s| s.affected > 0) {
            let Some(e) = self
                .model
                .entities
                .iter()
                .find(|e| e.entity_id == s.entity_id)
            else {
                continue;
            };
            match changed.iter_mut().find(|(t, _)| *t == e.table) {
                Some((_, n)) => *n += s.affected,
                None => changed.push((e.table.clone(), s.affected)),
            }
        }
        if changed.is_empty() {
            return Vec::new();
        }
        // The sweep's backend holds statistics not yet flushed: have it
        // flush at the end of this statement (simple protocol: no prepared
        // statement, so it works through any pooler).
        if let Err(e) = sqlx::raw_sql("SELECT pg_catalog.pg_stat_force_next_flush()")
            .execute(&mut *run_conn)
            .await
        {
            tracing::debug!(error = %e, "flushing the sweep's statistics failed; dead tuples may lag");
        }
        let mut out = Vec::with_capacity(changed.len());
        for (table, rows) in changed {
            let outcome = match vacuum {
                None => VacuumOutcome::NotRequested,
                Some(v) if rows < v.min_rows => VacuumOutcome::BelowThreshold,
                Some(v) => self.vacuum(&table, v).await,
            };
            out.push(TableMaintenance {
                table: table.unquoted(),
                changed: rows,
                dead_tuples: self.dead_tuples(&table).await,
                vacuum: outcome,
            });
        }
        out
    }

    /// Dead tuples of `table` and its partitions.
    async fn dead_tuples(&self, table: &QualifiedName) -> Option<u64> {
        let mut conn = self.pool.acquire().await.ok()?;
        // The table itself, or its partitions (`pg_partition_tree` lists
        // nothing for a table that is not partitioned).
        let sql = "SELECT pg_catalog.sum(s.n_dead_tup)::pg_catalog.int8 \
                   FROM pg_catalog.pg_stat_user_tables AS s \
                   WHERE s.relid OPERATOR(pg_catalog.=) $1::pg_catalog.text::pg_catalog.regclass \
                      OR s.relid IN (SELECT p.relid FROM pg_catalog.pg_partition_tree( \
                                         $1::pg_catalog.text::pg_catalog.regclass) AS p)";
        let name = table.to_string();
        let dead: Option<i64> = crate::sql::txn::alone(&mut conn, async |conn| {
            crate::sql::query_scalar(sql)
                .bind(name)
                .fetch_one(conn)
                .await
        })
        .await
        .map_err(|e| tracing::debug!(error = %e, "reading dead tuples failed"))
        .ok()?;
        dead.and_then(|d| u64::try_from(d).ok())
    }

    /// `VACUUM (ANALYZE)` of `table` on a connection of its own.
    async fn vacuum(&self, table: &QualifiedName, options: &VacuumOptions) -> VacuumOutcome {
        let mut conn = match self.pool.acquire().await {
            Ok(c) => c.detach(),
            Err(e) => return failed(&e),
        };
        let outcome = async {
            match may_vacuum(&mut conn, table).await {
                Ok(true) => {}
                Ok(false) => return VacuumOutcome::NotPermitted,
                Err(e) => return failed(&e),
            }
            let direct = self.options.connection_mode == ConnectionMode::Direct;
            if direct {
                let ms = options.timeout.as_millis().clamp(1, i32::MAX as u128);
                // A session setting on a connection that is closed below.
                if let Err(e) =
                    sqlx::raw_sql(AssertSqlSafe(format!("SET statement_timeout = {ms}")))
                        .execute(&mut conn)
                        .await
                {
                    return failed(&e);
                }
            }
            let started = Instant::now();
            let run = sqlx::raw_sql(AssertSqlSafe(format!("VACUUM (ANALYZE) {table}")))
                .execute(&mut conn);
            // Behind a pooler the client stops waiting a little after the
            // bound; directly, the server's statement_timeout ends it first.
            let bound = options.timeout + Duration::from_secs(if direct { 5 } else { 0 });
            match tokio::time::timeout(bound, run).await {
                Err(_) => VacuumOutcome::TimedOut,
                Ok(Ok(_)) => VacuumOutcome::Vacuumed {
                    millis: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                },
                Ok(Err(sqlx::Error::Database(e))) if e.code().as_deref() == Some("57014") => {
                    VacuumOutcome::TimedOut
                }
                Ok(Err(e)) => failed(&e),
            }
        }
        .await;
        super::close(conn).await;
        outcome
    }
}

/// Whether the connection's role may vacuum `table`: a superuser, a member
/// of its owner, or (PostgreSQL 16+) granted `MAINTAIN`. `VACUUM` itself
/// only warns and skips a table it may not vacuum.
async fn may_vacuum(conn: &mut PgConnection, table: &QualifiedName) -> Result<bool, sqlx::Error> {
    let name = table.to_string();
    crate::sql::txn::alone(conn, async |conn| {
        let row = crate::sql::query(
            "SELECT (SELECT r.rolsuper FROM pg_catalog.pg_roles AS r \
                     WHERE r.rolname OPERATOR(pg_catalog.=) CURRENT_USER) AS superuser, \
                    pg_catalog.pg_has_role(c.relowner, 'USAGE') AS owner, \
                    pg_catalog.current_setting('server_version_num')::pg_catalog.int4 AS version \
             FROM pg_catalog.pg_class AS c \
             WHERE c.oid OPERATOR(pg_catalog.=) $1::pg_catalog.text::pg_catalog.regclass",
        )
        .bind(&name)
        .fetch_one(&mut *conn)
        .await?;
        let (superuser, owner, version): (Option<bool>, bool, i32) =
            (row.try_get("superuser")?, row.try_get("owner")?, row.try_get("version")?);
        if superuser.unwrap_or(false) || owner {
            return Ok(true);
        }
        if version < 160_000 {
            return Ok(false);
        }
        crate::sql::query_scalar(
            "SELECT pg_catalog.has_table_privilege($1::pg_catalog.text::pg_catalog.regclass, 'MAINTAIN')",
        )
        .bind(&name)
        .fetch_one(&mut *conn)
        .await
    })
    .await
}

/// A failure as an outcome: the SQLSTATE and message (no row data: a
/// `VACUUM` error names only the table).
fn failed(e: &sqlx::Error) -> VacuumOutcome {
    let reason = match e {
        sqlx::Error::Database(d) => format!(
            "{}: {}",
            d.code().as_deref().unwrap_or("?????"),
            d.message()
        ),
        other => other.to_string(),
    };
    tracing::warn!(%reason, "cohort: VACUUM after the sweep failed");
    VacuumOutcome::Failed { reason }
}
