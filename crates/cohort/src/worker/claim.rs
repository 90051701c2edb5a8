//! One occurrence, once across replicas (contract W4): the replica lock and
//! the claim check made under it.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::error::Error;
use crate::schema::SchemaName;
use crate::sql::AssertSqlSafe;

/// The worker's lease (contract CO3, W4): one row of `sweep_worker_lease`
/// per install (its schema), held by one replica at a time until it
/// expires, renewed by a keeper task every third of
/// [`crate::Options::run_lease`] while the replica checks and sweeps an
/// occurrence. Each attempt, renewal and release is a short transaction of
/// its own, so replicas coordinate through a connection pooler in
/// transaction mode too (no session lock). Installs in other schemas have
/// their own table (W5).
pub(super) struct WorkerLease {
    /// The quoted, schema-qualified `sweep_worker_lease`.
    table: String,
    /// The quoted, schema-qualified `sweep_run`.
    runs: String,
    token: Uuid,
    period: Duration,
    keeper: Option<tokio::task::JoinHandle<()>>,
}

/// The lease's one row.
const LEASE_NAME: &str = "scheduled worker";

impl WorkerLease {
    pub(super) fn new(schema: &SchemaName, period: Duration) -> WorkerLease {
        WorkerLease {
            table: schema.table("sweep_worker_lease").to_string(),
            runs: schema.table("sweep_run").to_string(),
            token: Uuid::new_v4(),
            period,
            keeper: None,
        }
    }

    /// Takes the lease, trying again every `poll` while another replica
    /// holds it, and keeps it renewed. False when `shutdown` came first.
    pub(super) async fn acquire(
        &mut self,
        pool: &PgPool,
        poll: Duration,
        shutdown: &CancellationToken,
    ) -> Result<bool, Error> {
        loop {
            if take(pool, &self.table, self.token, self.period).await? {
                let (pool, table, token, period) =
                    (pool.clone(), self.table.clone(), self.token, self.period);
                let every = (period / 3).max(Duration::from_millis(100));
                self.keeper = Some(tokio::spawn(async move {
                    loop {
                        tokio::time::sleep(every).await;
                        match take(&pool, &table, token, period).await {
                            Ok(true) => {}
                            Ok(false) => {
                                tracing::warn!(
                                    "cohort worker: another replica took the worker lease over"
                                );
                                return;
                            }
                            Err(e) => {
                                tracing::warn!(error = %e, "cohort worker: renewing the worker lease failed")
                            }
                        }
                    }
                }));
                return Ok(true);
            }
            tokio::select! {
                () = tokio::time::sleep(poll) => {}
                () = shutdown.cancelled() => return Ok(false),
            }
        }
    }

    /// Gives the lease up at once (the next replica need not wait for it to
    /// expire).
    pub(super) async fn release(&mut self, pool: &PgPool) -> Result<(), Error> {
        if let Some(keeper) = self.keeper.take() {
            keeper.abort();
        }
        let mut tx = pool.begin().await?;
        crate::sql::query(AssertSqlSafe(format!(
            "UPDATE {} SET expires_at = pg_catalog.clock_timestamp() \
             WHERE lease_name OPERATOR(pg_catalog.=) $1 AND owner_token OPERATOR(pg_catalog.=) $2",
            self.table
        )))
        .persistent(false)
        .bind(LEASE_NAME)
        .bind(self.token)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
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
        // In a transaction of its own: through a pooler in transaction mode
        // a statement outside one may reach another server connection.
        let sql = format!(
            "SELECT r.run_id, r.status FROM {runs} AS r \
             WHERE r.trigger OPERATOR(pg_catalog.=) 'Scheduled' \
               AND r.run_kind OPERATOR(pg_catalog.=) 'Sweep' \
               AND r.dry_run OPERATOR(pg_catalog.=) $1 \
               AND r.logical_now OPERATOR(pg_catalog.>=) $2 \
             ORDER BY r.started_at DESC, r.run_id LIMIT 1",
            runs = self.runs
        );
        let latest: Option<(Uuid, String)> = crate::sql::txn::alone(conn, async |conn| {
            crate::sql::query_as(AssertSqlSafe(sql))
                .bind(dry_run)
                .bind(occurrence)
                .fetch_optional(conn)
                .await
        })
        .await?;
        // Only the holder of the worker lease starts scheduled runs, and this
        // worker holds it now: a scheduled run still `Started` was left by a
        // holder that is gone (crashed, or stalled past the lease), so the
        // occurrence is swept again. (The run itself is settled once its own
        // lease expires; a stalled holder that wakes up finds its lease lost.)
        Ok(match latest {
            None => false,
            Some((_, status)) if status == "Cancelled" || status == "Started" => false,
            Some(_) => true,
        })
    }
}

impl Drop for WorkerLease {
    fn drop(&mut self) {
        if let Some(keeper) = self.keeper.take() {
            keeper.abort();
        }
    }
}

/// Takes or renews the lease for `token` when it is free, expired or
/// already `token`'s; true when `token` holds it now.
async fn take(pool: &PgPool, table: &str, token: Uuid, period: Duration) -> Result<bool, Error> {
    let mut tx = pool.begin().await?;
    let holder: Option<Uuid> = crate::sql::query_scalar(AssertSqlSafe(format!(
        "INSERT INTO {table} AS l (lease_name, owner_token, expires_at) \
         VALUES ($1, $2, pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) $3::pg_catalog.interval) \
         ON CONFLICT (lease_name) DO UPDATE \
             SET owner_token = EXCLUDED.owner_token, expires_at = EXCLUDED.expires_at \
             WHERE l.expires_at OPERATOR(pg_catalog.<) pg_catalog.clock_timestamp() \
                OR l.owner_token OPERATOR(pg_catalog.=) EXCLUDED.owner_token \
         RETURNING l.owner_token"
    )))
    .persistent(false)
    .bind(LEASE_NAME)
    .bind(token)
    .bind(chrono::TimeDelta::from_std(period).unwrap_or(chrono::TimeDelta::MAX))
    .fetch_optional(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(holder == Some(token))
}
