//! Sweeps: a run over every retained type of a scope.

use chrono::{DateTime, Utc};

use super::execute::RunSpec;
use super::{RunResult, SweepOptions};
use crate::cohort::Cohort;
use crate::error::Error;
use crate::ledger::{RunKind, Trigger};
use crate::policy::Scope;

impl Cohort {
    /// Sweeps the rows of `scope` that are old enough at `now` (any UTC offset;
    /// normalised to UTC at microsecond precision, as PostgreSQL keeps it),
    /// applying each category's rule, and returns what it did. The run is
    /// audited as `Manual`. A `now` outside PostgreSQL's range is refused
    /// ([`Error::TimeOutOfRange`]) before anything is written.
    ///
    /// Runs on connections of its own (never the caller's transaction), in
    /// batches that each commit; one entity's failure is recorded and the
    /// others go on.
    pub async fn sweep<Tz: chrono::TimeZone>(
        &self,
        scope: &Scope,
        now: DateTime<Tz>,
    ) -> Result<RunResult, Error> {
        self.sweep_with(scope, now, SweepOptions::default()).await
    }

    /// [`Cohort::sweep`] with options: dry run, cancellation.
    pub async fn sweep_with<Tz: chrono::TimeZone>(
        &self,
        scope: &Scope,
        now: DateTime<Tz>,
        options: SweepOptions,
    ) -> Result<RunResult, Error> {
        let now = crate::sql::timestamp::to_pg_precision(&now)
            .ok_or(Error::TimeOutOfRange { what: "now" })?;
        self.run_sweep(scope, now, options, Trigger::Manual).await
    }

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
        let mut conn = self.inner.pool.acquire().await?.detach();
        self.ensure_ready(&mut conn).await?;
        let spec = RunSpec {
            kind: RunKind::Sweep,
            trigger,
            dry_run: options.dry_run,
            cancellation: options.cancellation,
            erasure: None,
        };
        let result = self.execute(&mut conn, scope, now, spec).await;
        close(conn).await;
        result
    }
}

/// Closes a run's own connection; a failure only means it is already gone.
pub(crate) async fn close(conn: sqlx::PgConnection) {
    if let Err(e) = sqlx::Connection::close(conn).await {
        tracing::debug!(error = %e, "closing a run's connection failed; it is gone already");
    }
}
