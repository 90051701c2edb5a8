//! One occurrence, once across replicas (contract W4): the replica lock and
//! the claim check made under it.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::error::Error;
use crate::schema::SchemaName;
use crate::sql::AssertSqlSafe;

/// A session advisory lock keyed on the install's schema-qualified
/// `sweep_run` table (its quoted name, hashed to PostgreSQL's 64-bit
/// advisory keyspace): replicas of one install take turns; installs in
/// other schemas of the database have other keys (W5).
pub(super) struct ReplicaLock {
    /// The quoted, schema-qualified `sweep_run`, bound as a parameter.
    runs: String,
}

fn key_sql(f: &str) -> String {
    format!(
        "SELECT pg_catalog.{f}(pg_catalog.hashtextextended('cohort-worker|' OPERATOR(pg_catalog.||) \
         $1::pg_catalog.text, 0))"
    )
}

impl ReplicaLock {
    pub(super) fn new(schema: &SchemaName) -> ReplicaLock {
        ReplicaLock {
            runs: schema.table("sweep_run").to_string(),
        }
    }

    /// Takes the lock, trying again every `poll` while another replica holds
    /// it (polling rather than waiting in PostgreSQL, so that shutdown never
    /// leaves a backend queued for the lock). False when `shutdown` came first.
    pub(super) async fn acquire(
        &self,
        conn: &mut PgConnection,
        poll: Duration,
        shutdown: &CancellationToken,
    ) -> Result<bool, Error> {
        loop {
            let got: bool = sqlx::query_scalar(AssertSqlSafe(key_sql("pg_try_advisory_lock")))
                .bind(&self.runs)
                .fetch_one(&mut *conn)
                .await?;
            if got {
                return Ok(true);
            }
            tokio::select! {
                () = tokio::time::sleep(poll) => {}
                () = shutdown.cancelled() => return Ok(false),
            }
        }
    }

    pub(super) async fn release(&self, conn: &mut PgConnection) -> Result<(), Error> {
        sqlx::query(AssertSqlSafe(key_sql("pg_advisory_unlock")))
            .bind(&self.runs)
            .execute(conn)
            .await?;
        Ok(())
    }

    /// Whether the occurrence is already swept: the latest scheduled sweep of
    /// the same kind at or after it exists and was not interrupted (still
    /// `Started` with its owner gone, or `Cancelled`).
    pub(super) async fn claimed(
        &self,
        conn: &mut PgConnection,
        occurrence: DateTime<Utc>,
        dry_run: bool,
    ) -> Result<bool, Error> {
        let latest: Option<(Uuid, String)> = sqlx::query_as(AssertSqlSafe(format!(
            "SELECT r.run_id, r.status FROM {runs} AS r \
             WHERE r.trigger OPERATOR(pg_catalog.=) 'Scheduled' \
               AND r.run_kind OPERATOR(pg_catalog.=) 'Sweep' \
               AND r.dry_run OPERATOR(pg_catalog.=) $1 \
               AND r.logical_now OPERATOR(pg_catalog.>=) $2 \
             ORDER BY r.started_at DESC, r.run_id LIMIT 1",
            runs = self.runs
        )))
        .bind(dry_run)
        .bind(occurrence)
        .fetch_optional(&mut *conn)
        .await?;
        Ok(match latest {
            None => false,
            Some((_, status)) if status == "Cancelled" => false,
            Some((run_id, status)) if status == "Started" => {
                !crate::run::owner_gone(conn, run_id).await?
            }
            Some(_) => true,
        })
    }
}
