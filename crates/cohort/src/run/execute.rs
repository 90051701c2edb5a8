//! One run, sweep or erasure: run lock, `Started` row, each entity in turn,
//! terminal status. The batch loop itself is in `batch.rs`.
//!
//! Only the run's own bookkeeping (its lock, its `Started` row, its terminal
//! status) can fail a run as a whole; everything about one entity (its rule,
//! its batches, its summary) is that entity's failure, and the run goes on.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use uuid::Uuid;

use super::batch::{EntityBatches, LoopEnd, StageValues, Values, measure};
use super::lease::RunLease;
use super::partitions::{self, PartitionPurge};
use super::plan::{EntityPlan, plan_stages};
use super::statements::{EntitySql, Purpose};
use super::{EntityFailure, ExemptType, RunResult, cancelled};
use crate::engine::Engine;
use crate::error::Error;
use crate::ledger::{
    AuditEvent, Delivery, EntitySummary, Failure, FailureKind, Ledger, RunKind, RunStatus,
    SummaryKey, Trigger,
};
use crate::model::resolved::{Column, ResolvedEntity};
use crate::policy::{AuditDetail, Scope, Strategy};
use crate::sql::txn::RunOwner;
use crate::sql::{AssertSqlSafe, PgTime};

/// Whether the owner of a run without a lease (started by a Cohort before
/// schema migration 7, which held a session advisory lock for the run's
/// life) is gone: that lock is free. One statement takes and gives back the
/// lock, so a pooler cannot leave it on a server session.
async fn legacy_owner_gone(conn: &mut PgConnection, run_id: Uuid) -> Result<bool, sqlx::Error> {
    const KEY: &str = "pg_catalog.hashtextextended('cohort-run|' OPERATOR(pg_catalog.||) \
                       $1::pg_catalog.text, 0)";
    let sql = format!(
        "SELECT CASE WHEN pg_catalog.pg_try_advisory_lock({KEY}) \
                     THEN pg_catalog.pg_advisory_unlock({KEY}) ELSE false END"
    );
    crate::sql::txn::alone(conn, async |conn| {
        crate::sql::query_scalar(AssertSqlSafe(sql))
            .bind(run_id)
            .fetch_one(conn)
            .await
    })
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
    /// HMAC-SHA256 of the subject under the host's subject key, recorded
    /// with the run (contract EV4); `None` without a key.
    pub(crate) subject_hmac: Option<Vec<u8>>,
    /// The erasure run this one replays after a restore (contract SA2).
    pub(crate) replay_of: Option<Uuid>,
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
    /// What disposition review did (contract DR1, DR2).
    disposition: Vec<crate::disposition::DispositionActivity>,
}

impl Engine {
    /// The exempt types registered, for reports.
    pub(crate) fn exempt_types(&self) -> Vec<ExemptType> {
        self.model
            .exempt
            .iter()
            .map(|d| ExemptType {
                entity_type: d.type_name,
                reason: match d.membership {
                    crate::model::Membership::Exempt { reason } => reason,
                    crate::model::Membership::Retained { .. } => "",
                },
            })
            .collect()
    }

    /// Runs `spec` over the entities of `scope`; readiness has been checked on
    /// `conn`, and `now` is at PostgreSQL's precision.
    pub(crate) async fn execute(
        &self,
        conn: &mut PgConnection,
        scope: &Scope,
        now: DateTime<Utc>,
        spec: RunSpec<'_>,
    ) -> Result<RunResult, Error> {
        let run_id = Uuid::new_v4();
        let trigger = spec.trigger;
        let span = tracing::info_span!(
            "cohort.run",
            run_id = %run_id,
            kind = spec.kind.as_str(),
            trigger = spec.trigger.as_str(),
            tenant_id = %scope.ledger_tenant(),
            dry_run = spec.dry_run,
        );
        let result = self
            .execute_run(conn, scope, now, spec, run_id)
            .instrument(span)
            .await;
        crate::metrics::run(
            trigger,
            result.as_ref().map(|r| crate::metrics::RunCounts {
                kind: r.kind,
                trigger,
                status: r.status,
                held: r.summaries.iter().map(|s| s.held).sum(),
                skipped: r.summaries.iter().map(|s| s.skipped).sum(),
            }),
        );
        result
    }

    async fn execute_run(
        &self,
        conn: &mut PgConnection,
        scope: &Scope,
        now: DateTime<Utc>,
        spec: RunSpec<'_>,
        run_id: Uuid,
    ) -> Result<RunResult, Error> {
        let inner = self;
        let tenant_id = scope.ledger_tenant();
        let ledger = Ledger::new(&inner.schema);
        let mut delivery = Delivery::new(&inner.observers, inner.options.observer_timeout);

        let mut lease = RunLease::new(run_id);
        if let Err(e) = ledger
            .start_run(
                conn,
                run_id,
                spec.kind,
                spec.trigger,
                spec.dry_run,
                tenant_id,
                now,
                spec.erasure
                    .as_ref()
                    .and_then(|e| e.subject_hmac.as_deref()),
                spec.erasure.as_ref().and_then(|e| e.replay_of),
                lease.token(),
                super::lease::interval(inner.options.run_lease),
            )
            .await
        {
            return Err(e.into());
        }
        lease.keep(&inner.pool, &inner.schema, inner.options.run_lease);
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
            // A type whose rows take their category from a column runs as
            // one entity per category (contract SL3).
            None => inner
                .model
                .entities
                .iter()
                .filter(|e| in_scope(e, scope))
                .flat_map(ResolvedEntity::slices)
                .map(|e| (e, Vec::new(), None))
                .collect(),
        };

        let mut summaries = Vec::new();
        let mut dispositions = Vec::new();
        let mut failures = Vec::new();
        let mut was_cancelled = false;
        let mut processed = 0usize;
        for (e, subjects, planned) in work {
            if cancelled(&spec.cancellation) {
                was_cancelled = true;
                break;
            }
            processed += 1;
            // One plan, or one per stage of a staged rule (contract SL1).
            let stages: Vec<Result<EntityPlan, Failure>> = match planned {
                Some(p) => vec![p],
                None => match plan_stages(inner.provider.as_ref(), e, scope.tenant(), now).await {
                    Ok(plans) => plans.into_iter().map(Ok).collect(),
                    Err(f) => vec![Err(f)],
                },
            };
            // Disposition batches bound to a rule that changed are voided
            // (contract DR2); a sweep never carries one out anyway.
            if spec.erasure.is_none() && !spec.dry_run && stages.iter().all(Result::is_ok) {
                let plans: Vec<EntityPlan> = stages.iter().filter_map(|p| p.clone().ok()).collect();
                let owner = RunOwner {
                    runs: ledger.runs(),
                    run_id,
                    token: lease.token(),
                };
                match super::review::void_stale(
                    conn,
                    inner,
                    &ledger,
                    e,
                    scope.ledger_tenant(),
                    &plans,
                    run_id,
                    Some(&owner),
                )
                .await
                {
                    Ok(voided) => dispositions.extend(voided),
                    Err(err) => {
                        let f = Failure::from_sqlx(&err);
                        tracing::warn!(
                            entity_id = %e.entity_id,
                            diagnostic_id = %f.diagnostic_id,
                            "voiding the type's stale disposition batches failed; the next sweep tries again"
                        );
                    }
                }
            }
            // A later stage never takes a row stamped by this run.
            let began = if stages.len() > 1 {
                match stage_clock(conn).await {
                    Ok(t) => Some(t),
                    Err(e) => return Err(e.into()),
                }
            } else {
                None
            };
            for planned in stages {
                let span = tracing::info_span!(
                    "cohort.entity",
                    entity_id = %e.entity_id,
                    entity_type = e.type_name(),
                    category = e.category,
                    strategy = tracing::field::Empty,
                );
                if let Ok(plan) = &planned {
                    span.record("strategy", plan.rule.strategy.as_str());
                }
                let outcome = self
                    .run_entity(
                        conn,
                        &ledger,
                        &mut delivery,
                        e,
                        &subjects,
                        planned,
                        began,
                        scope,
                        &spec,
                        &lease,
                    )
                    .instrument(span)
                    .await;
                if lease.is_lost() {
                    return Err(Error::RunLeaseLost { run_id });
                }
                let failed = outcome.failure.is_some();
                if let Some(f) = &outcome.failure {
                    failures.push(EntityFailure {
                        entity_id: e.entity_id,
                        entity_type: e.type_name(),
                        failure: f.clone(),
                    });
                }
                delivery
                    .deliver(&AuditEvent::EntitySummary {
                        run_id,
                        summary: outcome.summary.clone(),
                    })
                    .await;
                summaries.push(outcome.summary);
                dispositions.extend(outcome.disposition);
                if outcome.cancelled {
                    was_cancelled = true;
                    break;
                }
                // A failed stage ends the type's stages in this run.
                if failed {
                    break;
                }
            }
            if was_cancelled {
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
        match ledger
            .settle_run(conn, run_id, status, error.as_deref(), lease.token())
            .await
        {
            Ok(true) => {}
            // Settled by another process meanwhile: its lease had expired.
            Ok(false) => return Err(Error::RunLeaseLost { run_id }),
            // The run's connection is gone (or the ledger refuses it): the run
            // stays `Started` until `settle_abandoned_runs` takes it, once its
            // lease expired.
            Err(source) => return Err(Error::RunInterrupted { run_id, source }),
        }
        drop(lease);
        tracing::info!(
            status = status.as_str(),
            affected = summaries.iter().map(|s| s.affected).sum::<u64>(),
            held = summaries.iter().map(|s| s.held).sum::<u64>(),
            skipped = summaries.iter().map(|s| s.skipped).sum::<u64>(),
            failed_entities = failures.len(),
            "run settled"
        );
        delivery
            .deliver(&AuditEvent::Settled {
                run_id,
                status,
                error: error.clone(),
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
            exempt: self.exempt_types(),
            tables: Vec::new(),
            dispositions,
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
        began: Option<PgTime>,
        scope: &Scope,
        spec: &RunSpec<'_>,
        lease: &RunLease,
    ) -> EntityOutcome {
        let inner = self;
        // A stage after an archive stage acts on the archive table, as a
        // type of its own (contract SL2); it runs no row handler.
        let source = e;
        let on_archive = planned
            .as_ref()
            .is_ok_and(|p| p.stage.as_ref().is_some_and(|s| s.on_archive()));
        let e = match (&e.archive, on_archive) {
            (Some(archive), true) => &archive.entity,
            _ => e,
        };
        let run_id = lease.run_id();
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
            legal_minimum: 0,
            applied_period: None,
            cutoff: None,
            rule_source: None,
            rule_reason: None,
            error: None,
            partitions: Vec::new(),
        };
        let plan = match planned {
            Ok(plan) => plan,
            Err(failure) => {
                return finish(ledger, conn, lease, summary, None, Some(failure), false).await;
            }
        };
        summary.strategy = Some(plan.rule.strategy);
        summary.rule_source = plan.rule.source.clone();
        summary.rule_reason = plan.rule.reason.clone();
        let (purpose, cutoff) = match &spec.erasure {
            None => {
                summary.applied_period = Some(plan.applied);
                (Purpose::Sweep, Some(plan.cutoff))
            }
            Some(_) => {
                // The ordinary period never delays an erasure; only a positive
                // legal minimum does.
                let legal_minimum = plan.rule.legal_minimum.filter(|m| !m.is_zero());
                summary.applied_period = legal_minimum;
                (
                    Purpose::Erasure {
                        subjects: subjects.to_vec(),
                        legal_minimum: legal_minimum.is_some(),
                    },
                    legal_minimum.map(|m| m.cutoff(plan.now)),
                )
            }
        };
        if plan.rule.strategy == Strategy::Exempt {
            return finish(ledger, conn, lease, summary, None, None, false).await;
        }
        // A cutoff before PostgreSQL's earliest timestamp means nothing is
        // old enough: it is bound as -infinity and reported as none.
        let pg_cutoff = cutoff.map(|c| PgTime::cutoff(&c));
        summary.cutoff = pg_cutoff.and_then(PgTime::to_utc);
        let key = SummaryKey {
            run_id,
            entity_id: e.entity_id,
            entity_type: e.type_name(),
            category: e.category,
            tenant_id: scope.ledger_tenant(),
            strategy: Some(plan.rule.strategy),
        };
        let summary_id = match ledger
            .start_entity(conn, &key, &summary, pg_cutoff, lease.token())
            .await
        {
            Ok(Some(id)) => id,
            Ok(None) => {
                lease.lose();
                return EntityOutcome {
                    summary,
                    failure: None,
                    cancelled: false,
                    disposition: Vec::new(),
                };
            }
            Err(err) => {
                let failure = Failure::from_sqlx(&err);
                return finish(
                    ledger,
                    conn,
                    lease,
                    summary,
                    pg_cutoff,
                    Some(failure),
                    false,
                )
                .await;
            }
        };
        let per_row = plan.rule.audit == AuditDetail::PerRow;
        // A dry run never runs a handler and never queues work.
        let handlers: &[crate::handlers::registry::Registered] = if spec.dry_run || on_archive {
            &[]
        } else {
            inner.handlers_of(e.entity_id)
        };
        let sql = EntitySql::build(
            e,
            plan.rule.strategy,
            &inner.schema,
            ledger,
            &purpose,
            per_row,
            !handlers.is_empty(),
            plan.stage.as_ref().map(|s| s.sql(source)),
            plan.rule.after_event.is_some(),
        );
        let values = Values {
            entity: e,
            tenant,
            cutoff: pg_cutoff.unwrap_or(PgTime::NEG_INFINITY),
            subject,
            batch_size: inner.options.batch_size,
            summary: summary_id,
            run: run_id,
            ledger_tenant: scope.ledger_tenant(),
            strategy: plan.rule.strategy,
            handlers,
            schema: &inner.schema,
            owner: Some(RunOwner {
                runs: ledger.runs(),
                run_id,
                token: lease.token(),
            }),
            cache: inner.options.connection_mode.caches_statements(),
            marker: (inner.options.change_stream_markers && !spec.dry_run).then_some(spec.kind),
            stage: plan.stage.as_ref().map(|s| StageValues {
                before: began.unwrap_or(PgTime::INFINITY),
                legal_cutoff: s
                    .legal_cutoff
                    .map_or(PgTime::INFINITY, |c| PgTime::cutoff(&c)),
            }),
            review: None,
            event: plan.rule.after_event.as_deref(),
        };

        // DR1, DR2: a stage under review changes only approved batches'
        // rows and freezes the rest for review; never a partition drop.
        if let (Some(review), None) = (&plan.review, &spec.erasure) {
            let reviewed = super::review::Reviewed {
                engine: inner,
                e,
                plan: &plan,
                review,
                ledger,
                sql: &sql,
                values: &values,
                cancellation: &spec.cancellation,
                dry_run: spec.dry_run,
            };
            let out = reviewed.run(conn, delivery).await;
            summary.affected = out.changed;
            summary.held = out.held;
            summary.skipped = out.skipped;
            summary.null_anchor = out.null_anchor;
            summary.legal_minimum = out.legal_minimum;
            let mut outcome = finish(
                ledger,
                conn,
                lease,
                summary,
                pg_cutoff,
                out.failure,
                out.cancelled,
            )
            .await;
            outcome.disposition = out.activity;
            return outcome;
        }

        // PT1: a purge of a table partitioned by range on its anchor drops
        // the partitions that may go first; the batches sweep the rest.
        // A later stage ages by a stamp, not by the partition key.
        let purge = (partitions::applies(
            e,
            plan.rule.strategy,
            spec.erasure.is_none(),
            &inner.options,
        ) && plan.stage.as_ref().is_none_or(|s| s.index == 0))
        .then(|| {
            PartitionPurge {
                entity: e,
                schema: &inner.schema,
                ledger,
                tenant,
                ledger_tenant: scope.ledger_tenant(),
                cutoff: values.cutoff,
                run: run_id,
                summary: summary_id,
                per_row,
                // A dry run plans as the real run would: handlers' capture
                // keeps every partition to the batches.
                handlers: !inner.handlers_of(e.entity_id).is_empty(),
                fence_wait: inner.options.fence_wait,
                lock_wait: inner.options.lock_wait,
                owner: values.owner,
                marker: values.marker,
            }
        });

        if spec.dry_run {
            if let Some(purge) = &purge {
                summary.partitions = purge.preview(conn).await;
            }
            let failure = match measure(conn, &sql, &values).await {
                Ok(c) => {
                    summary.affected = c.eligible;
                    summary.held = c.held;
                    summary.null_anchor = c.null_anchor;
                    summary.legal_minimum = c.legal_minimum;
                    None
                }
                Err(err) => Some(Failure::from_sqlx(&err)),
            };
            return finish(ledger, conn, lease, summary, pg_cutoff, failure, false).await;
        }

        let mut dropped = 0;
        if let Some(purge) = &purge {
            let purged = purge.run(conn, delivery, &spec.cancellation).await;
            summary.partitions = purged.plans;
            dropped = purged.dropped;
            if let Some(failure) = purged.failure {
                summary.affected = dropped;
                return finish(
                    ledger,
                    conn,
                    lease,
                    summary,
                    pg_cutoff,
                    Some(failure),
                    false,
                )
                .await;
            }
        }

        let batches = EntityBatches {
            start: dropped,
            sql: &sql,
            values: values.clone(),
            fence_wait: inner.options.fence_wait,
            lock_wait: inner.options.lock_wait,
            cancellation: &spec.cancellation,
            order: inner.options.batch_order,
        };
        let (affected, mut failure, was_cancelled) = match batches.run(conn, delivery).await {
            LoopEnd::Drained(n) => (n, None, false),
            LoopEnd::Cancelled(n) => (n, None, true),
            LoopEnd::Failed(n, f) => (n, Some(f), false),
        };
        summary.affected = affected;
        if failure.is_none() {
            // Held, left-behind and NULL-anchor rows, measured directly.
            match measure(conn, &sql, &values).await {
                Ok(c) => {
                    summary.held = c.held;
                    summary.skipped = c.eligible;
                    summary.null_anchor = c.null_anchor;
                    summary.legal_minimum = c.legal_minimum;
                }
                Err(err) => failure = Some(Failure::from_sqlx(&err)),
            }
        }
        finish(
            ledger,
            conn,
            lease,
            summary,
            pg_cutoff,
            failure,
            was_cancelled,
        )
        .await
    }
}

/// Writes the entity's final summary. A failure to write it is that entity's
/// failure (logged with its diagnostic id), never the run's.
async fn finish(
    ledger: &Ledger,
    conn: &mut PgConnection,
    lease: &RunLease,
    mut summary: EntitySummary,
    cutoff: Option<PgTime>,
    mut failure: Option<Failure>,
    cancelled: bool,
) -> EntityOutcome {
    let run_id = lease.run_id();
    let key = SummaryKey {
        run_id,
        entity_id: summary.entity_id,
        entity_type: summary.entity_type,
        category: summary.category,
        tenant_id: summary.tenant_id,
        strategy: summary.strategy,
    };
    for attempt in 0..2 {
        summary.error = failure.as_ref().map(|f| f.to_string());
        let status = match (&failure, cancelled) {
            (Some(_), _) => "Failed",
            (None, true) => "Cancelled",
            (None, false) => "Succeeded",
        };
        match ledger
            .finish_entity(conn, &key, &summary, cutoff, status, lease.token())
            .await
        {
            Ok(true) => break,
            Ok(false) => {
                // The run was settled by another process: write nothing more.
                lease.lose();
                break;
            }
            Err(err) => {
                let f = Failure::from_sqlx(&err);
                tracing::warn!(
                    %run_id,
                    entity_id = %summary.entity_id,
                    diagnostic_id = %f.diagnostic_id,
                    "writing an entity's summary failed"
                );
                // Record the bookkeeping failure as the entity's own, once.
                if attempt == 0 && failure.is_none() {
                    failure = Some(f);
                } else {
                    break;
                }
            }
        }
    }
    summary.error = failure.as_ref().map(|f| f.to_string());
    EntityOutcome {
        summary,
        failure,
        cancelled,
        disposition: Vec::new(),
    }
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
                "failure": f.failure.envelope(),
            })
        })
        .collect();
    Some(serde_json::Value::Array(list).to_string())
}

impl Engine {
    /// Settles abandoned runs (see [`Cohort::settle_abandoned_runs`]).
    pub(crate) async fn settle_abandoned(&self) -> Result<u64, Error> {
        let inner = self;
        let mut conn = inner.pool.acquire().await?;
        self.ensure_ready(&mut conn).await?;
        let runs = inner.schema.table("sweep_run");
        // Runs whose lease expired; and runs without a lease (written by a
        // Cohort before migration 7) older than the settle timeout.
        // Every statement in a transaction of its own (through a pooler in
        // transaction mode, one outside a transaction may change server
        // connections between its parse and its execution).
        let sql = format!(
            "SELECT run_id, lease_expires_at IS NULL AS legacy FROM {runs} \
             WHERE status OPERATOR(pg_catalog.=) 'Started' \
               AND (lease_expires_at OPERATOR(pg_catalog.<) pg_catalog.clock_timestamp() \
                    OR (lease_expires_at IS NULL AND started_at OPERATOR(pg_catalog.<) \
                        (pg_catalog.statement_timestamp() OPERATOR(pg_catalog.-) $1::pg_catalog.interval)))"
        );
        let timeout = chrono::TimeDelta::from_std(inner.options.settle_timeout)
            .unwrap_or(chrono::TimeDelta::MAX);
        let stale: Vec<(Uuid, bool)> = crate::sql::txn::alone(&mut conn, async |conn| {
            crate::sql::query_as(AssertSqlSafe(sql))
                .bind(timeout)
                .fetch_all(conn)
                .await
        })
        .await?;
        let ledger = Ledger::new(&inner.schema);
        let mut settled = 0;
        for (run_id, legacy) in stale {
            if legacy && !legacy_owner_gone(&mut conn, run_id).await? {
                continue;
            }
            let failure = Failure::reason(
                FailureKind::Abandoned,
                &format_args!("run {run_id} abandoned by its owner"),
            );
            if ledger
                .settle_abandoned(&mut conn, run_id, &failure.to_string())
                .await?
            {
                settled += 1;
            }
        }
        Ok(settled)
    }
}

/// The database's clock, read before a staged rule's stages run: a later
/// stage takes only rows stamped before it (contract SL1).
async fn stage_clock(conn: &mut PgConnection) -> Result<PgTime, sqlx::Error> {
    crate::sql::query_scalar("SELECT pg_catalog.statement_timestamp()")
        .fetch_one(&mut *conn)
        .await
}
