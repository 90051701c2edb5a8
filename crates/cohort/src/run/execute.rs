//! One run, sweep or erasure: run lock, `Started` row, each entity in turn,
//! terminal status. The batch loop itself is in `batch.rs`.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::batch::{EntityBatches, LoopEnd, measure};
use super::plan::{EntityPlan, plan};
use super::{EntityFailure, RunResult, cancelled};
use crate::cohort::Cohort;
use crate::error::Error;
use crate::ledger::{
    AuditEvent, Delivery, EntitySummary, Failure, FailureKind, Ledger, RunKind, RunStatus,
    SummaryKey, Trigger,
};
use crate::model::resolved::{Column, ResolvedEntity};
use crate::policy::{Scope, Strategy};
use crate::sql::AssertSqlSafe;
use crate::sql::entity::{EntitySql, Purpose};

fn run_key_sql(f: &str) -> String {
    format!(
        "SELECT pg_catalog.{f}(pg_catalog.hashtextextended('cohort-run|' || $1::pg_catalog.text, 0))"
    )
}

/// The advisory lock a run holds for its whole life (session level, on its
/// own connection), so that a live run is never mistaken for an abandoned one.
pub(crate) async fn lock_run(conn: &mut PgConnection, run_id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query(AssertSqlSafe(run_key_sql("pg_advisory_lock")))
        .bind(run_id)
        .execute(conn)
        .await
        .map(|_| ())
}

pub(crate) async fn unlock_run(conn: &mut PgConnection, run_id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query(AssertSqlSafe(run_key_sql("pg_advisory_unlock")))
        .bind(run_id)
        .execute(conn)
        .await
        .map(|_| ())
}

async fn try_lock_run(conn: &mut PgConnection, run_id: Uuid) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar(AssertSqlSafe(run_key_sql("pg_try_advisory_lock")))
        .bind(run_id)
        .fetch_one(conn)
        .await
}

/// Whether `e` belongs to the pass of `scope`.
pub(crate) fn in_scope(e: &ResolvedEntity, scope: &Scope) -> bool {
    match scope {
        Scope::Tenant(_) => e.tenant.is_some(),
        Scope::Tenantless => e.tenant.is_none(),
    }
}

/// What an erasure adds to a run.
pub(crate) struct Erasure<'a> {
    pub(crate) subject: &'a str,
    /// Per entity of the run (same order): the subject columns that accept
    /// the subject, and the rule resolved before the run started.
    pub(crate) entities: Vec<(
        &'a ResolvedEntity,
        Vec<&'a Column>,
        Result<EntityPlan, Failure>,
    )>,
}

/// Everything that shapes one run.
pub(crate) struct RunSpec<'a> {
    pub(crate) kind: RunKind,
    pub(crate) trigger: Trigger,
    pub(crate) dry_run: bool,
    pub(crate) cancellation: Option<CancellationToken>,
    pub(crate) erasure: Option<Erasure<'a>>,
}

/// One entity of a run: its subject columns and, for an erasure, its plan.
type Work<'a> = (
    &'a ResolvedEntity,
    Vec<&'a Column>,
    Option<Result<EntityPlan, Failure>>,
);

/// What happened to one entity.
struct EntityOutcome {
    summary: EntitySummary,
    failure: Option<Failure>,
    cancelled: bool,
}

impl Cohort {
    /// Runs `spec` over the entities of `scope`; readiness has been checked on `conn`.
    pub(crate) async fn execute(
        &self,
        conn: &mut PgConnection,
        scope: &Scope,
        now: DateTime<Utc>,
        spec: RunSpec<'_>,
    ) -> Result<RunResult, Error> {
        let inner = &self.inner;
        let run_id = Uuid::new_v4();
        let tenant_id = scope.ledger_tenant();
        let ledger = Ledger::new(&inner.schema);
        let mut delivery = Delivery::new(&inner.observers, inner.options.observer_timeout);

        lock_run(conn, run_id).await?;
        if let Err(e) = ledger
            .start_run(
                conn,
                run_id,
                spec.kind,
                spec.trigger,
                spec.dry_run,
                tenant_id,
                now,
            )
            .await
        {
            let _ = unlock_run(conn, run_id).await;
            return Err(e.into());
        }
        delivery
            .deliver(&AuditEvent::Started {
                run_id,
                kind: spec.kind,
                trigger: spec.trigger,
                dry_run: spec.dry_run,
                tenant_id,
                now,
            })
            .await;

        // The entities of this run, each with its subject columns and
        // pre-resolved plan for an erasure.
        let work: Vec<Work<'_>> = match &spec.erasure {
            Some(erasure) => erasure
                .entities
                .iter()
                .map(|(e, cols, plan)| (*e, cols.clone(), Some(plan.clone())))
                .collect(),
            None => inner
                .model
                .entities
                .iter()
                .filter(|e| in_scope(e, scope))
                .map(|e| (e, Vec::new(), None))
                .collect(),
        };

        let mut summaries = Vec::new();
        let mut failures = Vec::new();
        let mut was_cancelled = false;
        let mut processed = 0usize;
        for (e, subjects, planned) in work {
            if cancelled(&spec.cancellation) {
                was_cancelled = true;
                break;
            }
            processed += 1;
            let planned = match planned {
                Some(p) => p,
                None => plan(inner.provider.as_ref(), e, scope.tenant(), now).await,
            };
            let outcome = self
                .run_entity(
                    conn,
                    &ledger,
                    &mut delivery,
                    e,
                    &subjects,
                    planned,
                    scope,
                    &spec,
                    run_id,
                )
                .await;
            let outcome = match outcome {
                Ok(outcome) => outcome,
                Err(err) => {
                    // The run's own connection failed: settle what we can, then report.
                    let failure = Failure::from_sqlx(&err);
                    let _ = ledger
                        .settle_run(conn, run_id, RunStatus::Failed, Some(&failure.to_string()))
                        .await;
                    let _ = unlock_run(conn, run_id).await;
                    return Err(Error::Database(err));
                }
            };
            if let Some(f) = outcome.failure {
                failures.push(EntityFailure {
                    entity_id: e.entity_id,
                    entity_type: e.type_name(),
                    failure: f,
                });
            }
            delivery
                .deliver(&AuditEvent::EntitySummary {
                    run_id,
                    summary: outcome.summary.clone(),
                })
                .await;
            summaries.push(outcome.summary);
            if outcome.cancelled {
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
        let settled = ledger
            .settle_run(conn, run_id, status, error.as_deref())
            .await;
        unlock_run(conn, run_id).await?;
        settled?;
        delivery
            .deliver(&AuditEvent::Settled {
                run_id,
                status,
                error,
            })
            .await;
        Ok(RunResult {
            run_id,
            kind: spec.kind,
            status,
            dry_run: spec.dry_run,
            now,
            summaries,
            entity_failures: failures,
        })
    }

    #[allow(clippy::too_many_arguments)]
    async fn run_entity(
        &self,
        conn: &mut PgConnection,
        ledger: &Ledger,
        delivery: &mut Delivery,
        e: &ResolvedEntity,
        subjects: &[&Column],
        planned: Result<EntityPlan, Failure>,
        scope: &Scope,
        spec: &RunSpec<'_>,
        run_id: Uuid,
    ) -> Result<EntityOutcome, sqlx::Error> {
        let inner = &self.inner;
        let tenant = scope.tenant().map(|t| t.id);
        let subject = spec.erasure.as_ref().map(|er| er.subject);
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
        let plan = match planned {
            Ok(plan) => plan,
            Err(failure) => {
                return finish(ledger, conn, run_id, summary, Some(failure), false).await;
            }
        };
        summary.strategy = Some(plan.rule.strategy);
        summary.rule_source = plan.rule.source.clone();
        summary.rule_reason = plan.rule.reason.clone();
        let purpose = match &spec.erasure {
            None => {
                summary.applied_period = Some(plan.applied.to_string());
                Purpose::Sweep
            }
            Some(_) => {
                // The ordinary period never delays an erasure; only a positive
                // legal minimum does.
                let legal_minimum = plan.rule.legal_minimum.filter(|m| !m.is_zero());
                summary.applied_period = legal_minimum.map(|m| m.to_string());
                Purpose::Erasure {
                    subjects: subjects.to_vec(),
                    legal_minimum: legal_minimum.is_some(),
                }
            }
        };
        if plan.rule.strategy == Strategy::Exempt {
            return finish(ledger, conn, run_id, summary, None, false).await;
        }
        let cutoff = match (&purpose, plan.rule.legal_minimum) {
            (Purpose::Sweep, _) => Some(plan.cutoff),
            (
                Purpose::Erasure {
                    legal_minimum: true,
                    ..
                },
                Some(min),
            ) => Some(min.cutoff(plan.now)),
            _ => None,
        };
        summary.cutoff = cutoff;
        let bound_cutoff = cutoff.unwrap_or(plan.now);
        let sql = EntitySql::build(e, plan.rule.strategy, &inner.schema, &purpose);

        if spec.dry_run {
            return match measure(conn, &sql, tenant, bound_cutoff, e.entity_id, subject).await {
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
            cutoff: bound_cutoff,
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
            subject,
            batch_size: inner.options.batch_size,
            advisory_locks: inner.options.advisory_row_locks || spec.erasure.is_some(),
            cancellation: &spec.cancellation,
        };
        let (affected, failure, was_cancelled) = match batches.run(conn, delivery).await {
            LoopEnd::Drained(n) => (n, None, false),
            LoopEnd::Cancelled(n) => (n, None, true),
            LoopEnd::Failed(n, f) => (n, Some(f), false),
        };
        summary.affected = affected;
        if failure.is_none() {
            // Held, left-behind and NULL-anchor rows, measured directly.
            match measure(conn, &sql, tenant, bound_cutoff, e.entity_id, subject).await {
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
fn run_error(failures: &[EntityFailure]) -> Option<String> {
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

impl Cohort {
    /// Marks runs still `Started` after `Options::settle_timeout` as `Failed`,
    /// when their owner is gone (their run lock can be taken); a live run is
    /// never touched. Returns how many were settled.
    pub async fn settle_abandoned_runs(&self) -> Result<u64, Error> {
        let inner = &self.inner;
        let mut conn = inner.pool.acquire().await?;
        self.ensure_ready(&mut conn).await?;
        let runs = inner.schema.table("sweep_run");
        let stale: Vec<Uuid> = sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT run_id FROM {runs} WHERE status = 'Started' \
             AND started_at < pg_catalog.statement_timestamp() - $1::pg_catalog.interval"
        )))
        .bind(
            chrono::TimeDelta::from_std(inner.options.settle_timeout)
                .unwrap_or(chrono::TimeDelta::MAX),
        )
        .fetch_all(&mut *conn)
        .await?;
        let ledger = Ledger::new(&inner.schema);
        let mut settled = 0;
        for run_id in stale {
            if !try_lock_run(&mut conn, run_id).await? {
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
}
