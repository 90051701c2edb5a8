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
    /// normalised to UTC), applying each category's rule, and returns what it
    /// did. The run is audited as `Manual`.
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
        self.run_sweep(scope, now.with_timezone(&Utc), options, Trigger::Manual)
            .await
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
        let _ = sqlx::Connection::close(conn).await;
        result
    }
}
