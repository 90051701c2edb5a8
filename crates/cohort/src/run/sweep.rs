//! A sweep run: run lock, `Started` row, each entity in turn, terminal status.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

use super::batch::{EntityBatches, LoopEnd, measure};
use super::plan::plan;
use super::{EntityFailure, SweepOptions, SweepResult, cancelled};
use crate::cohort::Cohort;
use crate::error::Error;
use crate::ledger::{
    AuditEvent, Delivery, EntitySummary, Failure, FailureKind, Ledger, RunKind, RunStatus,
    SummaryKey, Trigger,
};
use crate::model::resolved::ResolvedEntity;
use crate::policy::{Scope, Strategy};
use crate::sql::entity::{EntitySql, Purpose};

/// The advisory lock a run holds for its whole life (session level, on its
/// own connection), so that a live run is never mistaken for an abandoned one.
pub(crate) async fn lock_run(conn: &mut PgConnection, run_id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_catalog.pg_advisory_lock(pg_catalog.hashtextextended('cohort-run|' || $1::pg_catalog.text, 0))")
        .bind(run_id)
        .execute(conn)
        .await
        .map(|_| ())
}

pub(crate) async fn unlock_run(conn: &mut PgConnection, run_id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_catalog.pg_advisory_unlock(pg_catalog.hashtextextended('cohort-run|' || $1::pg_catalog.text, 0))")
        .bind(run_id)
        .execute(conn)
        .await
        .map(|_| ())
}

/// Whether `e` belongs to the pass of `scope`.
pub(crate) fn in_scope(e: &ResolvedEntity, scope: &Scope) -> bool {
    match scope {
        Scope::Tenant(_) => e.tenant.is_some(),
        Scope::Tenantless => e.tenant.is_none(),
    }
}

impl Cohort {
    /// Sweeps the rows of `scope` that are old enough at `now` (any UTC offset;
    /// normalised to UTC), applying each category's rule, and returns what it
    /// did. The run is audited as `Manual`.
    ///
    /// Runs on connections of its own (never the caller's transaction), in
    /// batches that each commit; one entity's failure is recorded and the others
    /// go on.
    pub async fn sweep<Tz: chrono::TimeZone>(
        &self,
        scope: &Scope,
        now: DateTime<Tz>,
    ) -> Result<SweepResult, Error> {
        self.sweep_with(scope, now, SweepOptions::default()).await
    }

    /// [`Cohort::sweep`] with options: dry run, cancellation.
    pub async fn sweep_with<Tz: chrono::TimeZone>(
        &self,
        scope: &Scope,
        now: DateTime<Tz>,
        options: SweepOptions,
    ) -> Result<SweepResult, Error> {
        self.run_sweep(scope, now.with_timezone(&Utc), options, Trigger::Manual)
            .await
    }

    pub(crate) async fn run_sweep(
        &self,
        scope: &Scope,
        now: DateTime<Utc>,
        options: SweepOptions,
        trigger: Trigger,
    ) -> Result<SweepResult, Error> {
        let inner = &self.inner;
        let mut conn = inner.pool.acquire().await?;
        self.ensure_ready(&mut conn).await?;
        let run_id = Uuid::new_v4();
        let tenant_id = scope.ledger_tenant();
        let ledger = Ledger::new(&inner.schema);
        let mut delivery = Delivery::new(&inner.observers, inner.options.observer_timeout);

        lock_run(&mut conn, run_id).await?;
        ledger
            .start_run(
                &mut conn,
                run_id,
                RunKind::Sweep,
                trigger,
                options.dry_run,
                tenant_id,
                now,
            )
            .await?;
        delivery
            .deliver(&AuditEvent::Started {
                run_id,
                kind: RunKind::Sweep,
                trigger,
                dry_run: options.dry_run,
                tenant_id,
                now,
            })
            .await;

        let mut summaries = Vec::new();
        let mut failures = Vec::new();
        let mut was_cancelled = false;
        let mut processed = 0usize;
        for e in inner.model.entities.iter().filter(|e| in_scope(e, scope)) {
            if cancelled(&options.cancellation) {
                was_cancelled = true;
                break;
            }
            processed += 1;
            let outcome = self
                .sweep_entity(
                    &mut conn,
                    &ledger,
                    &mut delivery,
                    e,
                    scope,
                    now,
                    &options,
                    run_id,
                )
                .await;
            let (summary, failure, stop) = match outcome {
                Ok(EntityOutcome {
                    summary,
                    failure,
                    cancelled,
                }) => (summary, failure, cancelled),
                Err(e) => {
                    // The connection itself failed: settle what we can, then report.
                    let failure = Failure::from_sqlx(&e);
                    let _ = ledger
                        .settle_run(
                            &mut conn,
                            run_id,
                            RunStatus::Failed,
                            Some(&failure.to_string()),
                        )
                        .await;
                    let _ = unlock_run(&mut conn, run_id).await;
                    return Err(Error::Database(e));
                }
            };
            if let Some(f) = failure {
                failures.push(EntityFailure {
                    entity_id: e.entity_id,
                    entity_type: e.type_name(),
                    failure: f,
                });
            }
            delivery
                .deliver(&AuditEvent::EntitySummary {
                    run_id,
                    summary: summary.clone(),
                })
                .await;
            summaries.push(summary);
            if stop {
                was_cancelled = true;
                break;
            }
        }

        let status = if was_cancelled {
            RunStatus::Cancelled
        } else if failures.is_empty() {
            RunStatus::Succeeded
        } else if failures.len() == processed {
            RunStatus::Failed
        } else {
            RunStatus::PartiallyFailed
        };
        let error = run_error(&failures);
        ledger
            .settle_run(&mut conn, run_id, status, error.as_deref())
            .await?;
        unlock_run(&mut conn, run_id).await?;
        delivery
            .deliver(&AuditEvent::Settled {
                run_id,
                status,
                error,
            })
            .await;
        Ok(SweepResult {
            run_id,
            status,
            dry_run: options.dry_run,
            now,
            summaries,
            entity_failures: failures,
        })
    }

    #[allow(clippy::too_many_arguments)]
    async fn sweep_entity(
        &self,
        conn: &mut PgConnection,
        ledger: &Ledger,
        delivery: &mut Delivery,
        e: &ResolvedEntity,
        scope: &Scope,
        now: DateTime<Utc>,
        options: &SweepOptions,
        run_id: Uuid,
    ) -> Result<EntityOutcome, sqlx::Error> {
        let inner = &self.inner;
        let tenant = scope.tenant().map(|t| t.id);
        let mut summary = EntitySummary {
            entity_id: e.entity_id,
            entity_type: e.type_name(),
            category: e.category,
            tenant_id: scope.ledger_tenant(),
            strategy: None,
            affected: 0,
            held: 0,
            skipped: 0,
            null_anchor: 0,
            applied_period: None,
            cutoff: None,
            rule_source: None,
            rule_reason: None,
            error: None,
        };
        let plan = match plan(inner.provider.as_ref(), e, scope.tenant(), now).await {
            Ok(plan) => plan,
            Err(failure) => {
                return finish(ledger, conn, run_id, summary, Some(failure), false).await;
            }
        };
        summary.strategy = Some(plan.rule.strategy);
        summary.applied_period = Some(plan.applied.to_string());
        summary.rule_source = plan.rule.source.clone();
        summary.rule_reason = plan.rule.reason.clone();
        if plan.rule.strategy == Strategy::Exempt {
            return finish(ledger, conn, run_id, summary, None, false).await;
        }
        summary.cutoff = Some(plan.cutoff);
        let sql = EntitySql::build(e, plan.rule.strategy, &inner.schema, &Purpose::Sweep);

        if options.dry_run {
            return match measure(conn, &sql, tenant, plan.cutoff, e.entity_id, None).await {
                Ok(c) => {
                    summary.affected = c.eligible;
                    summary.held = c.held;
                    summary.null_anchor = c.null_anchor;
                    finish(ledger, conn, run_id, summary, None, false).await
                }
                Err(err) => {
                    finish(
                        ledger,
                        conn,
                        run_id,
                        summary,
                        Some(Failure::from_sqlx(&err)),
                        false,
                    )
                    .await
                }
            };
        }

        let batches = EntityBatches {
            entity: e,
            plan: &plan,
            sql: &sql,
            ledger,
            key: SummaryKey {
                run_id,
                entity_id: e.entity_id,
                entity_type: e.type_name(),
                category: e.category,
                tenant_id: scope.ledger_tenant(),
                strategy: Some(plan.rule.strategy),
            },
            tenant,
            subject: None,
            batch_size: inner.options.batch_size,
            cancellation: &options.cancellation,
        };
        let (affected, failure, was_cancelled) = match batches.run(conn, delivery).await {
            LoopEnd::Drained(n) => (n, None, false),
            LoopEnd::Cancelled(n) => (n, None, true),
            LoopEnd::Failed(n, f) => (n, Some(f), false),
        };
        summary.affected = affected;
        if failure.is_none() {
            // Held, left-behind and NULL-anchor rows, measured directly.
            match measure(conn, &sql, tenant, plan.cutoff, e.entity_id, None).await {
                Ok(c) => {
                    summary.held = c.held;
                    summary.skipped = c.eligible;
                    summary.null_anchor = c.null_anchor;
                }
                Err(err) => {
                    return finish(
                        ledger,
                        conn,
                        run_id,
                        summary,
                        Some(Failure::from_sqlx(&err)),
                        false,
                    )
                    .await;
                }
            }
        }
        finish(ledger, conn, run_id, summary, failure, was_cancelled).await
    }
}

/// What happened to one entity.
pub(crate) struct EntityOutcome {
    pub(crate) summary: EntitySummary,
    pub(crate) failure: Option<Failure>,
    pub(crate) cancelled: bool,
}

async fn finish(
    ledger: &Ledger,
    conn: &mut PgConnection,
    run_id: Uuid,
    mut summary: EntitySummary,
    failure: Option<Failure>,
    cancelled: bool,
) -> Result<EntityOutcome, sqlx::Error> {
    summary.error = failure.as_ref().map(|f| f.to_string());
    let status = match (&failure, cancelled) {
        (Some(_), _) => "Failed",
        (None, true) => "Cancelled",
        (None, false) => "Succeeded",
    };
    let key = SummaryKey {
        run_id,
        entity_id: summary.entity_id,
        entity_type: summary.entity_type,
        category: summary.category,
        tenant_id: summary.tenant_id,
        strategy: summary.strategy,
    };
    ledger.finish_entity(conn, &key, &summary, status).await?;
    Ok(EntityOutcome {
        summary,
        failure,
        cancelled,
    })
}

/// The run's stored error: the sanitized envelopes of its failed entities.
pub(crate) fn run_error(failures: &[EntityFailure]) -> Option<String> {
    if failures.is_empty() {
        return None;
    }
    let list: Vec<serde_json::Value> = failures
        .iter()
        .map(|f| {
            serde_json::json!({
                "entity_id": f.entity_id.to_string(),
                "failure": serde_json::from_str::<serde_json::Value>(&f.failure.to_string()).unwrap_or_default(),
            })
        })
        .collect();
    Some(serde_json::Value::Array(list).to_string())
}

/// Marks runs left `Started` longer than the settle timeout as failed, but
/// only those whose run lock can be taken (their owner is gone).
pub(crate) async fn settle_abandoned(cohort: &Cohort) -> Result<u64, Error> {
    let inner = &cohort.inner;
    let mut conn = inner.pool.acquire().await?;
    cohort.ensure_ready(&mut conn).await?;
    let runs = inner.schema.table("sweep_run");
    let stale: Vec<Uuid> = sqlx::query_scalar(crate::sql::AssertSqlSafe(format!(
        "SELECT run_id FROM {runs} WHERE status = 'Started' \
         AND started_at < pg_catalog.statement_timestamp() - $1::pg_catalog.interval"
    )))
    .bind(
        chrono::TimeDelta::from_std(inner.options.settle_timeout).unwrap_or(chrono::TimeDelta::MAX),
    )
    .fetch_all(&mut *conn)
    .await?;
    let ledger = Ledger::new(&inner.schema);
    let mut settled = 0;
    for run_id in stale {
        let got: bool = sqlx::query_scalar(
            "SELECT pg_catalog.pg_try_advisory_lock(pg_catalog.hashtextextended('cohort-run|' || $1::pg_catalog.text, 0))",
        )
        .bind(run_id)
        .fetch_one(&mut *conn)
        .await?;
        if !got {
            continue;
        }
        let failure = Failure::reason(
            FailureKind::Abandoned,
            &format_args!("run {run_id} abandoned by its owner"),
        );
        let result = ledger
            .settle_run(
                &mut conn,
                run_id,
                RunStatus::Failed,
                Some(&failure.to_string()),
            )
            .await;
        unlock_run(&mut conn, run_id).await?;
        result?;
        settled += 1;
    }
    Ok(settled)
}

impl Cohort {
    /// Marks runs still `Started` after `Options::settle_timeout` as `Failed`,
    /// when their owner is gone (their run lock can be taken); a live run is
    /// never touched. Returns how many were settled.
    pub async fn settle_abandoned_runs(&self) -> Result<u64, Error> {
        settle_abandoned(self).await
    }
}
