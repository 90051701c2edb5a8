//! Preview: what a sweep at the same instant would do, changing nothing.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::batch::measure;
use super::execute::in_scope;
use super::plan::plan;
use crate::cohort::Cohort;
use crate::error::Error;
use crate::ledger::Failure;
use crate::policy::{Scope, Strategy};
use crate::sql::entity::{EntitySql, Purpose};

/// What a sweep of one entity would do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreviewEntry {
    /// The retained-entity id.
    pub entity_id: Uuid,
    /// The Rust type.
    pub entity_type: &'static str,
    /// The category.
    pub category: &'static str,
    /// The strategy the rule resolves to (`None` when it could not be resolved).
    pub strategy: Option<Strategy>,
    /// The cutoff (`None` for `Exempt` and failures).
    pub cutoff: Option<DateTime<Utc>>,
    /// Rows a sweep would change.
    pub eligible: u64,
    /// Rows past the cutoff protected by an active hold.
    pub held: u64,
    /// Rows with a NULL anchor (kept indefinitely).
    pub null_anchor: u64,
    /// Why the entity could not be previewed, if it could not.
    pub failure: Option<Failure>,
}

/// A count-only preview of a sweep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preview {
    /// The logical time, in UTC.
    pub now: DateTime<Utc>,
    /// One entry per retained type of the scope.
    pub entries: Vec<PreviewEntry>,
}

impl Cohort {
    /// Counts, per retained type of `scope`, what a sweep at `now` would change,
    /// how many rows are held and how many have a NULL anchor. Changes nothing
    /// and writes no ledger.
    pub async fn preview<Tz: chrono::TimeZone>(
        &self,
        scope: &Scope,
        now: DateTime<Tz>,
    ) -> Result<Preview, Error> {
        let now = now.with_timezone(&Utc);
        let inner = &self.inner;
        let mut conn = inner.pool.acquire().await?;
        self.ensure_ready(&mut conn).await?;
        let tenant = scope.tenant().map(|t| t.id);
        let mut entries = Vec::new();
        for e in inner.model.entities.iter().filter(|e| in_scope(e, scope)) {
            let mut entry = PreviewEntry {
                entity_id: e.entity_id,
                entity_type: e.type_name(),
                category: e.category,
                strategy: None,
                cutoff: None,
                eligible: 0,
                held: 0,
                null_anchor: 0,
                failure: None,
            };
            match plan(inner.provider.as_ref(), e, scope.tenant(), now).await {
                Err(f) => entry.failure = Some(f),
                Ok(plan) => {
                    entry.strategy = Some(plan.rule.strategy);
                    if plan.rule.strategy != Strategy::Exempt {
                        entry.cutoff = Some(plan.cutoff);
                        let sql =
                            EntitySql::build(e, plan.rule.strategy, &inner.schema, &Purpose::Sweep);
                        match measure(&mut conn, &sql, tenant, plan.cutoff, e.entity_id, None).await
                        {
                            Ok(c) => {
                                entry.eligible = c.eligible;
                                entry.held = c.held;
                                entry.null_anchor = c.null_anchor;
                            }
                            Err(err) => entry.failure = Some(Failure::from_sqlx(&err)),
                        }
                    }
                }
            }
            entries.push(entry);
        }
        Ok(Preview { now, entries })
    }
}
