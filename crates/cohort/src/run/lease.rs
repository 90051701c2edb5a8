//! A run's lease (contract CO2): who owns a `Started` run, and until when.
//!
//! A run's `Started` row carries its owner's token (minted for the run) and
//! a lease expiry. While the run lives, a keeper task renews the lease every
//! third of [`crate::Options::run_lease`], each renewal a short transaction
//! of its own on the pool (so it works through a connection pooler in
//! transaction mode: no session state). [`crate::Cohort::settle_abandoned_runs`]
//! settles a run only once its lease has expired, under a row lock on the
//! run, re-checking the expiry.
//!
//! Fencing: every write the run makes checks, in the write's own
//! transaction, that the run is still `Started` and still carries the
//! owner's token, and takes a share lock on the run's row until it commits.
//! A settle (which updates the row) therefore either waits for that write to
//! commit, or commits first and the write finds the run no longer its
//! owner's. An owner that stalled past its lease (a paused process, a
//! network partition) and was settled meanwhile cannot write a batch into
//! the settled run, nor settle it again: its next write fails with
//! [`crate::Error::RunLeaseLost`], and what it committed before stays
//! counted once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sqlx::PgPool;
use uuid::Uuid;

use crate::schema::SchemaName;
use crate::sql::AssertSqlSafe;

/// The lease of one run, while its owner holds it.
#[derive(Debug)]
pub(crate) struct RunLease {
    run_id: Uuid,
    token: Uuid,
    lost: Arc<AtomicBool>,
    keeper: Option<tokio::task::JoinHandle<()>>,
}

impl RunLease {
    /// A lease for run `run_id` with a fresh owner token; not yet kept.
    pub(crate) fn new(run_id: Uuid) -> RunLease {
        RunLease {
            run_id,
            token: Uuid::new_v4(),
            lost: Arc::new(AtomicBool::new(false)),
            keeper: None,
        }
    }

    /// The run.
    pub(crate) fn run_id(&self) -> Uuid {
        self.run_id
    }

    /// The owner's token, which the run's `Started` row and every write
    /// carry.
    pub(crate) fn token(&self) -> Uuid {
        self.token
    }

    /// Starts renewing the lease every third of `period` (once the run's
    /// `Started` row exists), until the lease is dropped or lost.
    pub(crate) fn keep(&mut self, pool: &PgPool, schema: &SchemaName, period: Duration) {
        let (pool, runs) = (pool.clone(), schema.table("sweep_run").to_string());
        let (run_id, token, lost) = (self.run_id, self.token, self.lost.clone());
        let every = (period / 3).max(Duration::from_millis(100));
        self.keeper = Some(tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                match renew(&pool, &runs, run_id, token, period).await {
                    Ok(true) => {}
                    Ok(false) => {
                        tracing::warn!(%run_id, "the run's lease was taken over: it was settled as abandoned");
                        lost.store(true, Ordering::SeqCst);
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(%run_id, error = %e, "renewing the run's lease failed; retrying");
                    }
                }
            }
        }));
    }

    /// Records that a write found the run no longer its owner's.
    pub(crate) fn lose(&self) {
        self.lost.store(true, Ordering::SeqCst);
    }

    /// Whether the lease was lost (the run was settled by someone else).
    pub(crate) fn is_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }
}

impl Drop for RunLease {
    fn drop(&mut self) {
        if let Some(keeper) = self.keeper.take() {
            keeper.abort();
        }
    }
}

/// One renewal, in a transaction of its own: false when the run is no
/// longer `Started` with this token.
async fn renew(
    pool: &PgPool,
    runs: &str,
    run_id: Uuid,
    token: Uuid,
    period: Duration,
) -> Result<bool, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let renewed = crate::sql::query(AssertSqlSafe(format!(
        "UPDATE {runs} SET lease_expires_at = pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) $3::pg_catalog.interval \
         WHERE run_id OPERATOR(pg_catalog.=) $1 AND owner_token OPERATOR(pg_catalog.=) $2 \
           AND status OPERATOR(pg_catalog.=) 'Started'"
    )))
    .persistent(false)
    .bind(run_id)
    .bind(token)
    .bind(interval(period))
    .execute(&mut *tx)
    .await?
    .rows_affected();
    tx.commit().await?;
    Ok(renewed == 1)
}

/// A duration as a PostgreSQL interval (saturating).
pub(crate) fn interval(d: Duration) -> chrono::TimeDelta {
    chrono::TimeDelta::from_std(d).unwrap_or(chrono::TimeDelta::MAX)
}
