//! Sweeps: a run over every retained type of a scope.

use chrono::{DateTime, Utc};

use super::execute::RunSpec;
use super::{RunResult, SweepOptions};
use crate::engine::Engine;
use crate::error::Error;
use crate::ledger::{RunKind, Trigger};
use crate::policy::Scope;

impl Engine {
    /// A sweep at `now` (already at PostgreSQL's precision).
    pub(crate) async fn run_sweep(
        &self,
        scope: &Scope,
        now: DateTime<Utc>,
        options: SweepOptions,
        trigger: Trigger,
    ) -> Result<RunResult, Error> {
        // The run's connection leaves the pool: if this future is dropped
        // mid-run, the connection closes, the batch in flight rolls back and
        // the run lock is released, so `settle_abandoned_runs` can settle it.
        let mut conn = self.pool.acquire().await?.detach();
        let result = async {
            self.ensure_ready(&mut conn).await?;
            self.sweep_on(&mut conn, scope, now, options, trigger).await
        }
        .await;
        close(conn).await;
        result
    }

    /// A sweep at `now` on `conn`, a connection out of the pool (dropped,
    /// it closes) whose readiness has been checked. After an `Ok` the
    /// connection is as it was and may run the next sweep; after an `Err`
    /// it may be broken, and is best closed.
    pub(crate) async fn sweep_on(
        &self,
        conn: &mut sqlx::PgConnection,
        scope: &Scope,
        now: DateTime<Utc>,
        options: SweepOptions,
        trigger: Trigger,
    ) -> Result<RunResult, Error> {
        let vacuum = options.vacuum;
        let spec = RunSpec {
            kind: RunKind::Sweep,
            trigger,
            dry_run: options.dry_run,
            cancellation: options.cancellation,
            erasure: None,
        };
        let mut result = self.execute(conn, scope, now, spec).await?;
        result.tables = self.after_run(conn, &result, vacuum.as_ref()).await;
        Ok(result)
    }
}

/// Closes a run's own connection; a failure only means it is already gone.
pub(crate) async fn close(conn: sqlx::PgConnection) {
    if let Err(e) = sqlx::Connection::close(conn).await {
        tracing::debug!(error = %e, "closing a run's connection failed; it is gone already");
    }
}
