//! Preview: what a sweep at the same instant would do, changing nothing.

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use super::ExemptType;
use super::batch::{StageValues, Values, measure};
use super::execute::in_scope;
use super::partitions::{self, PartitionPlan, PartitionPurge};
use super::plan::plan_stages;
use super::statements::{EntitySql, Purpose};
use crate::engine::Engine;
use crate::error::Error;
use crate::ledger::{Failure, Ledger};
use crate::model::resolved::ResolvedEntity;
use crate::policy::{AuditDetail, Scope, Strategy};
use crate::sql::PgTime;

/// What a sweep of one entity would do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct PreviewEntry {
    /// The retained-entity id.
    pub entity_id: Uuid,
    /// The Rust type.
    pub entity_type: &'static str,
    /// The category.
    pub category: &'static str,
    /// The strategy the rule resolves to (`None` when it could not be resolved).
    pub strategy: Option<Strategy>,
    /// The cutoff (`None` for `Exempt`, failures, and a period so long that
    /// the cutoff falls before PostgreSQL's earliest timestamp: then nothing
    /// is old enough).
    pub cutoff: Option<DateTime<Utc>>,
    /// Rows a sweep would change.
    pub eligible: u64,
    /// Rows past the cutoff protected by an active hold.
    pub held: u64,
    /// Rows with a NULL anchor (kept indefinitely).
    pub null_anchor: u64,
    /// Why the entity could not be previewed, if it could not.
    pub failure: Option<Failure>,
    /// For a purge of a table partitioned by `RANGE` on its anchor: which
    /// partitions a sweep would drop whole and which it would sweep row by
    /// row (`docs/partitions.md`). Empty otherwise (and then left out of
    /// JSON). The rows of a partition to drop are counted in `eligible`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub partitions: Vec<PartitionPlan>,
    /// The live matter holds covering this type in the scope's tenant
    /// (contract MH2), oldest first: the rows they cover are in `held`.
    /// [`crate::holds::Matters::protection`] names what protects one row.
    /// Empty when none (and then left out of JSON).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub matters: Vec<Uuid>,
    /// Whether the stage is under disposition review (contract DR1): a
    /// sweep then changes only the rows of approved batches (what
    /// `eligible` counts) and freezes the other rows it would change for
    /// review (`awaiting_review`). False (and left out of JSON) otherwise.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub review: bool,
    /// Under review: the eligible rows not held that no batch holds yet,
    /// which a sweep would freeze into a new batch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub awaiting_review: Option<u64>,
}

/// A count-only preview of a sweep.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Preview {
    /// The logical time, in UTC, at PostgreSQL's precision.
    pub now: DateTime<Utc>,
    /// One entry per retained type of the scope.
    pub entries: Vec<PreviewEntry>,
    /// The registered types that are explicitly exempt (never swept).
    pub exempt: Vec<ExemptType>,
}

impl Engine {
    /// The preview at `now` (already at PostgreSQL's precision).
    pub(crate) async fn run_preview(
        &self,
        scope: &Scope,
        now: DateTime<Utc>,
    ) -> Result<Preview, Error> {
        let inner = self;
        let ledger = Ledger::new(&inner.schema);
        let mut conn = inner.pool.acquire().await?;
        self.ensure_ready(&mut conn).await?;
        let tenant = scope.tenant().map(|t| t.id);
        let mut entries = Vec::new();
        for e in inner
            .model
            .entities
            .iter()
            .filter(|e| in_scope(e, scope))
            .flat_map(ResolvedEntity::slices)
        {
            let entry = || PreviewEntry {
                entity_id: e.entity_id,
                entity_type: e.type_name(),
                category: e.category,
                strategy: None,
                cutoff: None,
                eligible: 0,
                held: 0,
                null_anchor: 0,
                failure: None,
                partitions: Vec::new(),
                matters: Vec::new(),
                review: false,
                awaiting_review: None,
            };
            // One entry per stage of a staged rule (contract SL1).
            let plans = match plan_stages(inner.provider.as_ref(), e, scope.tenant(), now).await {
                Ok(plans) => plans,
                Err(f) => {
                    entries.push(PreviewEntry {
                        failure: Some(f),
                        ..entry()
                    });
                    continue;
                }
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
                let mut entry = entry();
                entry.strategy = Some(plan.rule.strategy);
                if plan.rule.strategy != Strategy::Exempt {
                    let cutoff = PgTime::cutoff(&plan.cutoff);
                    entry.cutoff = cutoff.to_utc();
                    let sql = EntitySql::build(
                        e,
                        plan.rule.strategy,
                        &inner.schema,
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
                        batch_size: inner.options.batch_size,
                        summary: 0,
                        run: Uuid::nil(),
                        ledger_tenant: scope.ledger_tenant(),
                        strategy: plan.rule.strategy,
                        handlers: &[],
                        schema: &inner.schema,
                        owner: None,
                        cache: inner.options.connection_mode.caches_statements(),
                        marker: None,
                        stage: plan.stage.as_ref().map(StageValues::preview),
                        review: None,
                        event: plan.rule.after_event.as_deref(),
                    };
                    if let Some(review) = &plan.review {
                        let reviewed = super::review::Reviewed {
                            engine: inner,
                            e,
                            plan: &plan,
                            review,
                            ledger: &ledger,
                            sql: &sql,
                            values: &values,
                            cancellation: &None,
                            dry_run: true,
                        };
                        entry.review = true;
                        match reviewed.preview(&mut conn).await {
                            Ok((approved, awaiting)) => {
                                entry.eligible = approved;
                                entry.awaiting_review = Some(awaiting);
                            }
                            Err(err) => entry.failure = Some(Failure::from_sqlx(&err)),
                        }
                        match measure(&mut conn, &sql, &values).await {
                            Ok(c) => {
                                entry.held = c.held;
                                entry.null_anchor = c.null_anchor;
                                entry.matters = c.matters;
                            }
                            Err(err) => entry.failure = Some(Failure::from_sqlx(&err)),
                        }
                        entries.push(entry);
                        continue;
                    }
                    if plan.stage.is_none()
                        && partitions::applies(e, plan.rule.strategy, true, &inner.options)
                    {
                        let purge = PartitionPurge {
                            entity: e,
                            schema: &inner.schema,
                            ledger: &ledger,
                            tenant,
                            ledger_tenant: scope.ledger_tenant(),
                            cutoff,
                            run: Uuid::nil(),
                            summary: 0,
                            per_row: plan.rule.audit == AuditDetail::PerRow,
                            handlers: !inner.handlers_of(e.entity_id).is_empty(),
                            fence_wait: inner.options.fence_wait,
                            lock_wait: inner.options.lock_wait,
                            owner: None,
                            marker: None,
                        };
                        entry.partitions = purge.preview(&mut conn).await;
                    }
                    match measure(&mut conn, &sql, &values).await {
                        Ok(c) => {
                            entry.eligible = c.eligible;
                            entry.held = c.held;
                            entry.null_anchor = c.null_anchor;
                            entry.matters = c.matters;
                        }
                        Err(err) => entry.failure = Some(Failure::from_sqlx(&err)),
                    }
                }
                entries.push(entry);
            }
        }
        Ok(Preview {
            now,
            entries,
            exempt: self.exempt_types(),
        })
    }
}
