//! The retention backlog (contract OB2): per retained type of a scope, the
//! rows past their cutoff that are still there, how old the oldest is, and
//! why they are still there. One counting statement per type (the one a
//! sweep ends with, which also reads the oldest anchors) and one indexed
//! read of the ledger per type; nothing is changed.

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use super::batch::{StageValues, Values, measure};
use super::execute::in_scope;
use super::plan::plan_stages;
use super::statements::{EntitySql, Purpose};
use crate::engine::Engine;
use crate::error::Error;
use crate::ledger::{Failure, Ledger};
use crate::model::resolved::ResolvedEntity;
use crate::policy::{AuditDetail, Scope, Strategy};
use crate::sql::{AssertSqlSafe, PgTime};

/// Why rows past their cutoff are still there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub enum BacklogReason {
    /// No real sweep of the type has run in this scope yet.
    NeverSwept,
    /// The latest sweep of the type failed for it (its summary has an error).
    LastSweepFailed,
    /// The latest sweep left rows it found locked, or did not reach them
    /// (it was cancelled).
    LockedOrSkipped,
    /// The latest sweep succeeded: these rows aged past the cutoff, or were
    /// written, since it ran; the next sweep takes them.
    DueSinceLastSweep,
}

/// One retained type's backlog.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct BacklogEntry {
    /// The retained-entity id.
    pub entity_id: Uuid,
    /// The Rust type (the model's name for the `cohort` command).
    pub entity_type: &'static str,
    /// The category.
    pub category: &'static str,
    /// The strategy the rule resolves to now (`None` when it cannot be
    /// resolved, then see `failure`).
    pub strategy: Option<Strategy>,
    /// The cutoff at `now`.
    pub cutoff: Option<DateTime<Utc>>,
    /// Rows past the cutoff, not held, still to change.
    pub overdue: u64,
    /// The oldest finite anchor among them (rows anchored at `-infinity`
    /// are counted in `overdue` but have no date to show).
    pub oldest_overdue: Option<DateTime<Utc>>,
    /// Why they are still there (`None` when there are none).
    pub reason: Option<BacklogReason>,
    /// Rows past the cutoff kept by an active hold.
    pub held: u64,
    /// The oldest finite anchor among those.
    pub oldest_held: Option<DateTime<Utc>>,
    /// The latest real sweep of the type in this scope, and when it started.
    pub last_sweep: Option<(Uuid, DateTime<Utc>)>,
    /// Why the type could not be measured.
    pub failure: Option<Failure>,
}

impl BacklogEntry {
    /// How far past its cutoff the oldest overdue row is at `now`: its age
    /// minus the retention it was due after (`now - anchor - (now -
    /// cutoff)` = `cutoff - anchor`).
    pub fn overdue_by(&self) -> Option<chrono::TimeDelta> {
        Some(self.cutoff? - self.oldest_overdue?)
    }
}

/// The backlog of a scope at a time ([`Cohort::backlog`](crate::Cohort::backlog)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Backlog {
    /// The logical time, at PostgreSQL's precision.
    pub now: DateTime<Utc>,
    /// One entry per retained type of the scope (exempt types aside).
    pub entries: Vec<BacklogEntry>,
}

impl Backlog {
    /// Rows overdue in all.
    pub fn overdue(&self) -> u64 {
        self.entries.iter().map(|e| e.overdue).sum()
    }

    /// The longest time any overdue row has been past its cutoff.
    pub fn max_overdue_by(&self) -> Option<chrono::TimeDelta> {
        self.entries
            .iter()
            .filter_map(BacklogEntry::overdue_by)
            .max()
    }
}

impl Engine {
    /// The backlog at `now` (already at PostgreSQL's precision).
    pub(crate) async fn run_backlog(
        &self,
        scope: &Scope,
        now: DateTime<Utc>,
    ) -> Result<Backlog, Error> {
        let ledger = Ledger::new(&self.schema);
        let mut conn = self.pool.acquire().await?;
        self.ensure_ready(&mut conn).await?;
        let tenant = scope.tenant().map(|t| t.id);
        let last_sql = format!(
            "SELECT r.run_id, r.started_at, s.error IS NOT NULL AS failed, \
                    s.skipped_count OPERATOR(pg_catalog.>) 0 OR r.status OPERATOR(pg_catalog.=) 'Cancelled' AS left_rows \
             FROM {summaries} AS s JOIN {runs} AS r ON r.run_id OPERATOR(pg_catalog.=) s.run_id \
             WHERE s.retained_entity_id OPERATOR(pg_catalog.=) $1 \
               AND s.tenant_id OPERATOR(pg_catalog.=) $2 \
               AND r.run_kind OPERATOR(pg_catalog.=) 'Sweep' AND NOT r.dry_run \
               AND r.status OPERATOR(pg_catalog.<>) 'Started' \
             ORDER BY r.started_at DESC, r.run_id DESC LIMIT 1",
            summaries = self.schema.table("sweep_run_entity_summary"),
            runs = self.schema.table("sweep_run"),
        );
        let mut entries = Vec::new();
        for e in self
            .model
            .entities
            .iter()
            .filter(|e| in_scope(e, scope))
            .flat_map(ResolvedEntity::slices)
        {
            let blank = || BacklogEntry {
                entity_id: e.entity_id,
                entity_type: e.type_name(),
                category: e.category,
                strategy: None,
                cutoff: None,
                overdue: 0,
                oldest_overdue: None,
                reason: None,
                held: 0,
                oldest_held: None,
                last_sweep: None,
                failure: None,
            };
            // One entry per stage of a staged rule (contract SL1).
            let plans = match plan_stages(self.provider.as_ref(), e, scope.tenant(), now).await {
                Err(f) => {
                    entries.push(BacklogEntry {
                        failure: Some(f),
                        ..blank()
                    });
                    continue;
                }
                Ok(plans) => plans,
            };
            for plan in plans {
                // A stage after an archive stage measures the archive table.
                let source = e;
                let e = match (
                    &e.archive,
                    plan.stage.as_ref().is_some_and(|s| s.on_archive()),
                ) {
                    (Some(archive), true) => &archive.entity,
                    _ => e,
                };
                let mut entry = blank();
                entry.strategy = Some(plan.rule.strategy);
                if plan.rule.strategy == Strategy::Exempt {
                    entries.push(entry);
                    continue;
                }
                let cutoff = PgTime::cutoff(&plan.cutoff);
                entry.cutoff = cutoff.to_utc();
                let sql = EntitySql::build(
                    e,
                    plan.rule.strategy,
                    &self.schema,
                    &ledger,
                    &Purpose::Sweep,
                    plan.rule.audit == AuditDetail::PerRow,
                    false,
                    plan.stage.as_ref().map(|s| s.sql(source)),
                    plan.rule.after_event.is_some(),
                );
                let values = Values {
                    entity: e,
                    tenant,
                    cutoff,
                    subject: None,
                    batch_size: self.options.batch_size,
                    summary: 0,
                    run: Uuid::nil(),
                    ledger_tenant: scope.ledger_tenant(),
                    strategy: plan.rule.strategy,
                    handlers: &[],
                    schema: &self.schema,
                    owner: None,
                    cache: self.options.connection_mode.caches_statements(),
                    marker: None,
                    stage: plan.stage.as_ref().map(StageValues::preview),
                    review: None,
                    event: plan.rule.after_event.as_deref(),
                };
                match measure(&mut conn, &sql, &values).await {
                    Ok(c) => {
                        entry.overdue = c.eligible;
                        entry.oldest_overdue = c.oldest_eligible;
                        entry.held = c.held;
                        entry.oldest_held = c.oldest_held;
                    }
                    Err(err) => {
                        entry.failure = Some(Failure::from_sqlx(&err));
                        entries.push(entry);
                        continue;
                    }
                }
                let sql = last_sql.clone();
                let ledger_tenant = scope.ledger_tenant();
                let last: Option<(Uuid, DateTime<Utc>, bool, bool)> =
                    crate::sql::txn::alone(&mut conn, async |c| {
                        crate::sql::query_as(AssertSqlSafe(sql))
                            .bind(e.entity_id)
                            .bind(ledger_tenant)
                            .fetch_optional(c)
                            .await
                    })
                    .await?;
                entry.last_sweep = last.map(|(id, at, _, _)| (id, at));
                if entry.overdue > 0 {
                    entry.reason = Some(match last {
                        None => BacklogReason::NeverSwept,
                        Some((_, _, true, _)) => BacklogReason::LastSweepFailed,
                        Some((_, _, _, true)) => BacklogReason::LockedOrSkipped,
                        Some(_) => BacklogReason::DueSinceLastSweep,
                    });
                }
                entries.push(entry);
            }
        }
        Ok(Backlog { now, entries })
    }
}
