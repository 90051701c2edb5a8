//! The scheduled worker (contract W1–W9): sweeps at each occurrence of a
//! cron schedule, once across replicas, and runs the row-handler dispatcher
//! beside the sweeps.
//!
//! ```no_run
//! # async fn host(cohort: cohort::Cohort) -> Result<(), cohort::Error> {
//! use cohort::CancellationToken;
//!
//! let shutdown = CancellationToken::new();
//! let worker = cohort.worker().tenants(vec![
//!     cohort::TenantContext::new(uuid::uuid!("6f2c1f3e-8a51-4d8a-9c3e-2b7f0e1d9a10")),
//! ]);
//! // Runs until `shutdown` is cancelled (on SIGTERM, say): the batch in
//! // flight commits or rolls back and the run ends `Cancelled`.
//! worker.run(shutdown.clone()).await?;
//! # Ok(()) }
//! ```
//!
//! # One occurrence
//!
//! [`Worker::run_occurrence`] is what `run` does at each occurrence:
//!
//! 1. It asks the [`TenantSource`] for the tenants. A repeated tenant runs
//!    once (the first entry wins; a warning is logged when the repeats
//!    disagree on jurisdiction or tags). The nil UUID, or a failing source,
//!    fails the occurrence before any pass.
//! 2. It takes the worker's lease, the one row of the install's
//!    `sweep_worker_lease` table (so installs in other schemas of the same
//!    database do not wait, W5), and keeps it renewed every third of
//!    [`crate::Options::run_lease`] while it works; each attempt is a short
//!    transaction of its own, so replicas coordinate through a connection
//!    pooler in transaction mode too (contract CO3). A replica that finds
//!    the lease held tries again every [`crate::Options::poll_interval`]
//!    (default 1 s) until it gets it or the worker is shut down: a second
//!    replica waits as long as the first one's claim check and passes take
//!    (the whole occurrence; the holder gives the lease up when it is
//!    done), then finds the occurrence claimed and skips. If the holder
//!    dies, its lease expires after `run_lease` and the next replica takes
//!    it. Waiting outside PostgreSQL means a shutdown never leaves a
//!    backend queued on a lock.
//! 3. Under the lock it looks at the latest scheduled sweep of the same kind
//!    (dry or real) whose logical time is at or after the occurrence. None:
//!    the occurrence is swept. One still `Started` whose owner is gone (its
//!    lease expired: the process died), or `Cancelled` (shut down
//!    mid-occurrence): the occurrence is swept again, every pass. Anything
//!    else (`Succeeded`, `Failed`, `PartiallyFailed`, or a live run) claims
//!    it and this worker skips (W4): a dry-run replica never stands in for
//!    the real sweep, and failures are retried at the next occurrence.
//! 4. It settles abandoned runs ([`crate::Cohort::settle_abandoned_runs`])
//!    and prunes inactive holds (when [`crate::Options::inactive_hold_retention`]
//!    is set); a failure there is logged and the passes go on.
//! 5. The passes: one per tenant, in first-seen order, over the
//!    tenant-scoped types, then one tenantless pass over the tenantless
//!    types; each a sweep at the occurrence's time recorded as
//!    [`crate::Trigger::Scheduled`]. The kill switch is read before each
//!    pass; once engaged, no further pass starts (W9). One pass failing does
//!    not stop the next (W8). The passes share one connection out of the
//!    pool; a pass that fails with an error closes it and the next opens
//!    another.
//!
//! Missed occurrences are skipped, not caught up: the next occurrence is
//! always the first after the clock's current time (W6). The worker checks
//! the schema's readiness when it starts and never changes the schema (W7).
//!
//! Occurrence times are compared across replicas: keep replica clocks in
//! sync (NTP).

mod claim;
mod sources;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use uuid::Uuid;

pub use crate::config::Schedule;
pub use sources::{Clock, KillSwitch, NoTenants, SystemClock, TenantSource};

use crate::engine::Engine;
use crate::error::Error;
use crate::ledger::{RunStatus, Trigger};
use crate::policy::{Scope, TenantContext};
use crate::run::{RunResult, SweepOptions};
use crate::sql::timestamp::to_pg_precision;

/// The scheduled worker; from [`Cohort::worker`](crate::Cohort::worker).
#[must_use]
pub struct Worker {
    engine: Arc<Engine>,
    tenants: Arc<dyn TenantSource>,
    kill_switch: Arc<dyn KillSwitch>,
    clock: Arc<dyn Clock>,
}

impl fmt::Debug for Worker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Worker")
            .field("schedule", &self.engine.schedule)
            .field("dry_run", &self.engine.options.worker.dry_run)
            .finish_non_exhaustive()
    }
}

/// What one occurrence did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct OccurrenceReport {
    /// The occurrence (UTC, at PostgreSQL's precision): every pass's logical time.
    pub occurrence: DateTime<Utc>,
    /// Whether the passes were dry runs.
    pub dry_run: bool,
    /// True when another worker (or an earlier attempt) had already swept
    /// this occurrence: no pass ran.
    pub already_swept: bool,
    /// True when the kill switch stopped the occurrence before a pass.
    pub stopped_by_kill_switch: bool,
    /// True when shutdown stopped the occurrence (the last pass's run ended
    /// `Cancelled`); another worker, or this one restarted, sweeps it again.
    pub cancelled: bool,
    /// One entry per pass started, in order.
    pub passes: Vec<PassReport>,
}

impl OccurrenceReport {
    /// Passes that did not succeed: an error, or a run `Failed` or
    /// `PartiallyFailed`.
    pub fn failed_passes(&self) -> usize {
        self.passes
            .iter()
            .filter(|p| {
                p.error.is_some()
                    || matches!(
                        p.status,
                        Some(RunStatus::Failed | RunStatus::PartiallyFailed)
                    )
            })
            .count()
    }

    /// Rows changed by all passes (or that would have been, in a dry run).
    pub fn affected(&self) -> u64 {
        self.passes.iter().map(|p| p.affected).sum()
    }
}

/// One pass of an occurrence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct PassReport {
    /// The tenant; `None` for the tenantless pass.
    pub tenant_id: Option<Uuid>,
    /// The pass's run, when one was recorded.
    pub run_id: Option<Uuid>,
    /// How the run ended, when it did.
    pub status: Option<RunStatus>,
    /// Rows changed (or that would have been).
    pub affected: u64,
    /// The error that stopped the pass, when it returned one.
    pub error: Option<String>,
}

impl PassReport {
    fn of(tenant_id: Option<Uuid>, result: &Result<RunResult, Error>) -> PassReport {
        match result {
            Ok(r) => PassReport {
                tenant_id,
                run_id: Some(r.run_id),
                status: Some(r.status),
                affected: r.affected(),
                error: None,
            },
            Err(e) => PassReport {
                tenant_id,
                run_id: match e {
                    Error::RunInterrupted { run_id, .. } => Some(*run_id),
                    _ => None,
                },
                status: None,
                affected: 0,
                error: Some(e.to_string()),
            },
        }
    }
}

impl Worker {
    pub(crate) fn new(engine: Arc<Engine>) -> Worker {
        let options = &engine.options.worker;
        let tenants: Arc<dyn TenantSource> = match options.tenant {
            Some(id) => Arc::new(TenantContext::new(id)),
            None => Arc::new(NoTenants),
        };
        let kill_switch: Arc<dyn KillSwitch> = Arc::new(options.kill_switch);
        Worker {
            engine,
            tenants,
            kill_switch,
            clock: Arc::new(SystemClock),
        }
    }

    /// Where the tenants come from (default: [`crate::WorkerOptions::tenant`],
    /// or no tenant).
    pub fn tenants(mut self, source: impl TenantSource) -> Worker {
        self.tenants = Arc::new(source);
        self
    }

    /// The kill switch, read before every pass (default:
    /// [`crate::WorkerOptions::kill_switch`]).
    pub fn kill_switch(mut self, switch: impl KillSwitch) -> Worker {
        self.kill_switch = Arc::new(switch);
        self
    }

    /// The clock the schedule is followed by (default [`SystemClock`]).
    pub fn clock(mut self, clock: impl Clock) -> Worker {
        self.clock = Arc::new(clock);
        self
    }

    /// The schedule.
    pub fn schedule(&self) -> &Schedule {
        &self.engine.schedule
    }

    /// The first occurrence after the clock's current time.
    pub fn next_occurrence(&self) -> Option<DateTime<Utc>> {
        self.schedule().next_after(self.clock.now())
    }

    /// Runs until `shutdown` is cancelled: at each occurrence,
    /// [`Worker::run_occurrence`]; beside it, when row handlers are
    /// registered, the dispatcher ([`crate::handlers::Dispatcher::run`]).
    ///
    /// Returns an error only when it cannot start: Cohort's tables are not
    /// ready (W7) or the database cannot be reached. A failed occurrence is
    /// logged and the next one comes as scheduled (W2). On shutdown the batch
    /// in flight commits or rolls back, the run ends `Cancelled`, and `run`
    /// returns `Ok`.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), Error> {
        {
            let mut conn = self.engine.pool.acquire().await?;
            self.engine.ensure_ready(&mut conn).await?;
        }
        let sweeps = self.sweep_loop(&shutdown);
        if self.engine.handlers.is_empty() {
            sweeps.await;
            return Ok(());
        }
        let dispatcher = crate::dispatch::Dispatcher::new(Arc::clone(&self.engine));
        let (_, dispatched) = tokio::join!(sweeps, dispatcher.run(shutdown.clone()));
        dispatched
    }

    async fn sweep_loop(&self, shutdown: &CancellationToken) {
        loop {
            let Some(next) = self.next_occurrence() else {
                tracing::warn!(
                    schedule = ?self.schedule(),
                    "the schedule has no occurrence left; the worker sweeps no more"
                );
                shutdown.cancelled().await;
                return;
            };
            tracing::info!(next_occurrence = %next, "cohort worker: next occurrence");
            tokio::select! {
                () = self.clock.sleep_until(next) => {}
                () = shutdown.cancelled() => return,
            }
            match self.run_occurrence(next, shutdown).await {
                Ok(report) => {
                    crate::metrics::occurrence(if report.already_swept {
                        "skipped"
                    } else if report.failed_passes() > 0 {
                        "failed"
                    } else {
                        "run"
                    });
                    if report.failed_passes() > 0 {
                        tracing::error!(
                            occurrence = %report.occurrence,
                            failed = report.failed_passes(),
                            passes = report.passes.len(),
                            "cohort worker: passes failed; they are retried at the next occurrence"
                        );
                    }
                }
                Err(e) => {
                    crate::metrics::occurrence("failed");
                    tracing::error!(
                        occurrence = %next,
                        error = %e,
                        "cohort worker: the occurrence failed; the next one comes as scheduled"
                    );
                }
            }
            if shutdown.is_cancelled() {
                return;
            }
        }
    }

    /// Sweeps one occurrence, as `run` does when it comes (see the module
    /// documentation): the tenants, the replica lock, the claim check, then
    /// one pass per tenant and the tenantless pass, each at `occurrence` and
    /// recorded as `Scheduled`. `shutdown` cancels the pass in flight at its
    /// next batch boundary.
    pub async fn run_occurrence(
        &self,
        occurrence: DateTime<Utc>,
        shutdown: &CancellationToken,
    ) -> Result<OccurrenceReport, Error> {
        let occurrence =
            to_pg_precision(&occurrence).ok_or(Error::TimeOutOfRange { what: "occurrence" })?;
        let dry_run = self.engine.options.worker.dry_run;
        let span = tracing::info_span!(
            "cohort.occurrence",
            occurrence = %occurrence,
            dry_run,
            schema = self.engine.schema.as_str(),
        );
        self.occurrence(occurrence, dry_run, shutdown)
            .instrument(span)
            .await
    }

    async fn occurrence(
        &self,
        occurrence: DateTime<Utc>,
        dry_run: bool,
        shutdown: &CancellationToken,
    ) -> Result<OccurrenceReport, Error> {
        let mut report = OccurrenceReport {
            occurrence,
            dry_run,
            already_swept: false,
            stopped_by_kill_switch: false,
            cancelled: false,
            passes: Vec::new(),
        };
        let tenants = self.tenant_passes().await?;
        let inner = &self.engine;
        let mut conn = inner.pool.acquire().await?.detach();
        let result = async {
            self.engine.ensure_ready(&mut conn).await?;
            let mut lock = claim::WorkerLease::new(&inner.schema, inner.options.run_lease);
            if !lock
                .acquire(&inner.pool, inner.options.poll_interval, shutdown)
                .await?
            {
                report.cancelled = true;
                return Ok(());
            }
            let claimed = lock.claimed(&mut conn, occurrence, dry_run).await;
            let outcome = match claimed {
                Ok(true) => {
                    tracing::info!("cohort worker: occurrence already swept; skipped");
                    report.already_swept = true;
                    Ok(())
                }
                Ok(false) => {
                    self.housekeeping(&mut conn).await;
                    self.passes(&tenants, occurrence, dry_run, shutdown, &mut report)
                        .await;
                    Ok(())
                }
                Err(e) => Err(e),
            };
            lock.release(&inner.pool).await?;
            outcome
        }
        .await;
        crate::run::close(conn).await;
        result.map(|()| report)
    }

    /// The tenant passes of this occurrence, deduplicated in first-seen
    /// order; the nil tenant fails the occurrence.
    async fn tenant_passes(&self) -> Result<Vec<TenantContext>, Error> {
        let listed = self
            .tenants
            .tenants()
            .await
            .map_err(|e| Error::TenantSource {
                reason: e.to_string(),
            })?;
        dedupe(listed)
    }

    /// Settling abandoned runs and pruning holds: logged, never fatal.
    async fn housekeeping(&self, conn: &mut sqlx::PgConnection) {
        if let Err(e) = self.engine.settle_abandoned().await {
            tracing::warn!(error = %e, "cohort worker: settling abandoned runs failed");
        }
        if self.engine.options.inactive_hold_retention.is_some() {
            match crate::holds::Holds::new(&self.engine).prune(conn).await {
                Ok(n) => tracing::debug!(pruned = n, "cohort worker: inactive holds pruned"),
                Err(e) => tracing::warn!(error = %e, "cohort worker: pruning holds failed"),
            }
        }
    }

    async fn passes(
        &self,
        tenants: &[TenantContext],
        occurrence: DateTime<Utc>,
        dry_run: bool,
        shutdown: &CancellationToken,
        report: &mut OccurrenceReport,
    ) {
        let model = &self.engine.model;
        let any_scoped = model.entities.iter().any(|e| e.tenant.is_some());
        let any_tenantless = model.entities.iter().any(|e| e.tenant.is_none());
        let mut scopes: Vec<Scope> = Vec::new();
        if any_scoped {
            scopes.extend(tenants.iter().cloned().map(Scope::Tenant));
        }
        if any_tenantless {
            scopes.push(Scope::Tenantless);
        }
        // The passes share one connection out of the pool (a new backend
        // and its statement cache per pass were most of a short pass's
        // time); a pass that fails with an error closes it, and the next
        // pass opens another. Dropped mid-pass, it closes, and the pass's
        // run lock with it (the run is then settled as abandoned).
        let mut conn: Option<sqlx::PgConnection> = None;
        for scope in scopes {
            let engaged = match self.kill_switch.engaged().await {
                Ok(on) => on,
                Err(e) => {
                    tracing::warn!(error = %e, "cohort worker: the kill switch cannot be read; counted as engaged");
                    true
                }
            };
            if engaged {
                tracing::warn!("cohort worker: the kill switch is on; no further pass starts");
                report.stopped_by_kill_switch = true;
                break;
            }
            // A pass started after shutdown ends `Cancelled` at once, so the
            // occurrence's latest run says it was not finished.
            let mut options = SweepOptions {
                dry_run,
                cancellation: Some(shutdown.child_token()),
                vacuum: None,
            };
            if let Some(rows) = self.engine.options.worker.vacuum_min_rows {
                options = options.vacuum(crate::run::VacuumOptions::default().min_rows(rows));
            }
            let tenant_id = scope.tenant().map(|t| t.id);
            let result = self.pass(&mut conn, &scope, occurrence, options).await;
            if let Err(e) = &result {
                tracing::error!(tenant_id = ?tenant_id, error = %e, "cohort worker: a pass failed; the next goes on");
                if let Some(broken) = conn.take() {
                    crate::run::close(broken).await;
                }
            }
            let pass = PassReport::of(tenant_id, &result);
            let cancelled = pass.status == Some(RunStatus::Cancelled);
            report.passes.push(pass);
            if cancelled {
                report.cancelled = true;
                break;
            }
        }
        if let Some(conn) = conn {
            crate::run::close(conn).await;
        }
    }

    /// One pass on the passes' connection, opened (out of the pool) if
    /// there is none yet; readiness was checked when the occurrence began.
    async fn pass(
        &self,
        conn: &mut Option<sqlx::PgConnection>,
        scope: &Scope,
        occurrence: DateTime<Utc>,
        options: SweepOptions,
    ) -> Result<RunResult, Error> {
        let conn = match conn {
            Some(c) => c,
            None => conn.insert(self.engine.pool.acquire().await?.detach()),
        };
        self.engine
            .sweep_on(conn, scope, occurrence, options, Trigger::Scheduled)
            .await
    }
}

/// First-seen order, one pass per tenant id; disagreeing repeats are logged.
fn dedupe(listed: Vec<TenantContext>) -> Result<Vec<TenantContext>, Error> {
    let mut seen: HashMap<Uuid, usize> = HashMap::with_capacity(listed.len());
    let mut out: Vec<TenantContext> = Vec::with_capacity(listed.len());
    for t in listed {
        if t.id.is_nil() {
            return Err(Error::TenantSource {
                reason:
                    "it returned the nil tenant, which the ledger reserves for tenantless passes"
                        .into(),
            });
        }
        match seen.get(&t.id) {
            Some(&i) => {
                if out[i] != t {
                    tracing::warn!(
                        tenant_id = %t.id,
                        first = ?out[i],
                        repeat = ?t,
                        "cohort worker: the tenant source lists a tenant twice with different contexts; the first is used"
                    );
                }
            }
            None => {
                seen.insert(t.id, out.len());
                out.push(t);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(n: u128, jurisdiction: Option<&str>) -> TenantContext {
        let mut t = TenantContext::new(Uuid::from_u128(n));
        t.jurisdiction = jurisdiction.map(Into::into);
        t
    }

    // contract: W3
    #[test]
    fn repeated_tenants_run_once_in_first_seen_order_and_the_first_wins() {
        let out = dedupe(vec![
            tenant(3, Some("DE")),
            tenant(1, None),
            tenant(3, Some("FR")),
            tenant(2, None),
            tenant(1, None),
        ])
        .expect("no nil tenant");
        assert_eq!(
            out,
            vec![tenant(3, Some("DE")), tenant(1, None), tenant(2, None)]
        );
    }

    #[test]
    fn the_nil_tenant_fails_the_whole_list() {
        let err = dedupe(vec![tenant(1, None), tenant(0, None)]).expect_err("nil");
        assert!(matches!(err, Error::TenantSource { .. }), "{err}");
    }
}
