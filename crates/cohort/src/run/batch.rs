//! The batch loop of one entity: select and lock candidates, take the row
//! advisory locks, mutate on a fresh snapshot with holds and eligibility
//! re-checked, write progress and row detail, commit. Memory and bind
//! parameters are bounded by the batch size.

use std::panic::AssertUnwindSafe;

use chrono::{DateTime, Utc};
use sqlx::postgres::PgArguments;
use sqlx::query::{Query, QueryScalar};
use sqlx::{Acquire, PgConnection, Postgres, Row};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::cancelled;
use super::plan::EntityPlan;
use crate::ledger::{AuditEvent, Delivery, Failure, FailureKind, Ledger, SummaryKey};
use crate::model::AnonymiseMethod;
use crate::model::resolved::ResolvedEntity;
use crate::policy::{AuditDetail, Strategy};
use crate::sql::AssertSqlSafe;
use crate::sql::entity::EntitySql;

type PgQuery<'q> = Query<'q, Postgres, PgArguments>;
type PgQueryScalar<'q, O> = QueryScalar<'q, Postgres, O, PgArguments>;

/// Counts measured directly from the table.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Counts {
    pub(crate) eligible: u64,
    pub(crate) held: u64,
    pub(crate) null_anchor: u64,
}

/// Pins `search_path` for the current (own) transaction.
pub(crate) async fn pin(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query(crate::sql::PIN_SEARCH_PATH)
        .execute(conn)
        .await
        .map(|_| ())
}

fn count(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// Eligible (not held), held and NULL-anchor rows, measured in one statement.
pub(crate) async fn measure(
    conn: &mut PgConnection,
    sql: &EntitySql,
    tenant: Option<Uuid>,
    cutoff: DateTime<Utc>,
    entity_id: Uuid,
    subject: Option<&str>,
) -> Result<Counts, sqlx::Error> {
    let mut tx = conn.begin().await?;
    pin(&mut tx).await?;
    // A generic plan: after a purge the anchor index is full of dead entries,
    // and planning with the actual cutoff would probe them to estimate it.
    sqlx::query("SELECT pg_catalog.set_config('plan_cache_mode', 'force_generic_plan', true)")
        .execute(&mut *tx)
        .await?;
    let mut query = sqlx::query(AssertSqlSafe(sql.count.clone()))
        .bind(tenant)
        .bind(cutoff)
        .bind(entity_id);
    if let Some(subject) = subject {
        query = query.bind(subject.to_owned());
    }
    let row = query.fetch_one(&mut *tx).await?;
    tx.commit().await?;
    Ok(Counts {
        eligible: count(row.try_get("eligible")?),
        held: count(row.try_get("held")?),
        null_anchor: count(row.try_get("null_anchor")?),
    })
}

/// Everything one entity's batch loop needs.
pub(crate) struct EntityBatches<'a> {
    pub(crate) entity: &'a ResolvedEntity,
    pub(crate) plan: &'a EntityPlan,
    /// The `$2` bound to every statement.
    pub(crate) cutoff: DateTime<Utc>,
    pub(crate) sql: &'a EntitySql,
    pub(crate) ledger: &'a Ledger,
    pub(crate) key: SummaryKey<'a>,
    pub(crate) tenant: Option<Uuid>,
    /// The erasure subject (`$4`), for erasures.
    pub(crate) subject: Option<&'a str>,
    pub(crate) batch_size: u32,
    /// Whether to take the rows' advisory locks (always for erasures).
    pub(crate) advisory_locks: bool,
    pub(crate) cancellation: &'a Option<CancellationToken>,
}

/// How a batch loop ended.
pub(crate) enum LoopEnd {
    /// No candidates left.
    Drained(u64),
    /// Cancelled between batches; the committed batches stay.
    Cancelled(u64),
    /// A batch failed and was rolled back; earlier batches stay.
    Failed(u64, Failure),
}

impl EntityBatches<'_> {
    /// Runs batches until no candidate is left, the run is cancelled or a batch fails.
    pub(crate) async fn run(&self, conn: &mut PgConnection, delivery: &mut Delivery) -> LoopEnd {
        let mut affected = 0u64;
        let mut cursor: Option<(DateTime<Utc>, String)> = None;
        loop {
            if cancelled(self.cancellation) {
                return LoopEnd::Cancelled(affected);
            }
            match self.batch(conn, &mut cursor).await {
                Ok(None) => return LoopEnd::Drained(affected),
                Ok(Some(changed)) => {
                    affected += changed.len() as u64;
                    delivery
                        .deliver(&AuditEvent::EntityProgress {
                            run_id: self.key.run_id,
                            entity_id: self.key.entity_id,
                            strategy: self.plan.rule.strategy,
                            batch_affected: changed.len() as u64,
                            total_affected: affected,
                        })
                        .await;
                    if self.plan.rule.audit == AuditDetail::PerRow {
                        for record_id in changed {
                            delivery
                                .deliver(&AuditEvent::RowDetail {
                                    run_id: self.key.run_id,
                                    entity_id: self.key.entity_id,
                                    record_id,
                                    tenant_id: self.key.tenant_id,
                                    action: self.plan.rule.strategy,
                                })
                                .await;
                        }
                    }
                }
                Err(failure) => return LoopEnd::Failed(affected, failure),
            }
        }
    }

    /// One committed batch. `None` when there were no candidates; otherwise
    /// the canonical record ids changed.
    async fn batch(
        &self,
        conn: &mut PgConnection,
        cursor: &mut Option<(DateTime<Utc>, String)>,
    ) -> Result<Option<Vec<String>>, Failure> {
        let db = |e: sqlx::Error| Failure::from_sqlx(&e);
        let strategy = self.plan.rule.strategy;
        let mut tx = conn.begin().await.map_err(db)?;
        sqlx::query(crate::sql::PIN_FOR_BATCH)
            .execute(&mut *tx)
            .await
            .map_err(db)?;

        // 1. Candidates, row-locked, skipping rows other transactions hold.
        let limit = i64::from(self.batch_size);
        let query = match cursor {
            None => sqlx::query(AssertSqlSafe(self.sql.candidates_first.clone())),
            Some(_) => sqlx::query(AssertSqlSafe(self.sql.candidates_after.clone())),
        };
        let mut query = self.common(query).bind(limit);
        if let Some((anchor, rid)) = cursor.as_ref() {
            if !self.sql.erasure {
                query = query.bind(*anchor);
            }
            query = query.bind(rid.clone());
        }
        let rows = query.fetch_all(&mut *tx).await.map_err(db)?;
        let Some(last) = rows.last() else {
            tx.commit().await.map_err(db)?;
            return Ok(None);
        };
        // Erasure candidates may have a NULL anchor; their keyset is the record id alone.
        let last_anchor: Option<DateTime<Utc>> = last.try_get("anchor").map_err(db)?;
        *cursor = Some((
            last_anchor.unwrap_or(DateTime::<Utc>::MIN_UTC),
            last.try_get("record_id").map_err(db)?,
        ));
        let mut tids = Vec::with_capacity(rows.len());
        let mut records = Vec::with_capacity(rows.len());
        for r in &rows {
            tids.push(r.try_get::<String, _>("tid").map_err(db)?);
            records.push(r.try_get::<String, _>("record_id").map_err(db)?);
        }

        // 2. The rows' advisory locks, in key order; a row whose lock another
        //    transaction holds (a hold being created, a host deletion) is left.
        //    (Sweeps may skip them: see `Options::advisory_row_locks`.)
        let busy: Vec<String> = if self.advisory_locks {
            self.common_scalar(sqlx::query_scalar(AssertSqlSafe(
                self.sql.lock_rows.clone(),
            )))
            .bind(&records)
            .fetch_one(&mut *tx)
            .await
            .map_err(db)?
        } else {
            Vec::new()
        };
        let busy: std::collections::HashSet<&str> = busy.iter().map(String::as_str).collect();
        let keep: Vec<bool> = records.iter().map(|r| !busy.contains(r.as_str())).collect();

        // 3. The mutation: a new statement, so a new snapshot that sees every
        //    hold committed before our locks; eligibility and holds re-checked.
        let mut mutate = self
            .common_scalar(sqlx::query_scalar::<_, String>(AssertSqlSafe(
                self.sql.mutate.clone(),
            )))
            .bind(pick(&tids, &keep));
        if strategy == Strategy::Anonymise {
            for a in &self.entity.anonymise {
                if let AnonymiseMethod::Literal(text) = a.method {
                    mutate = mutate.bind(text);
                }
            }
            let mut custom_index = 0;
            for a in &self.entity.anonymise {
                if let AnonymiseMethod::Custom(custom) = a.method {
                    let column = format!("c{custom_index}");
                    custom_index += 1;
                    let mut values = Vec::with_capacity(rows.len());
                    for (r, k) in rows.iter().zip(&keep) {
                        if !*k {
                            continue;
                        }
                        let original: Option<String> = r.try_get(column.as_str()).map_err(db)?;
                        let replaced = std::panic::catch_unwind(AssertUnwindSafe(|| {
                            (custom.anonymise)(original.as_deref())
                        }))
                        .map_err(|_| {
                            Failure::reason(
                                FailureKind::AnonymiserPanic,
                                &format_args!("anonymiser {} panicked", custom.name),
                            )
                        })?;
                        values.push(replaced);
                    }
                    mutate = mutate.bind(values);
                }
            }
        }
        let changed: Vec<String> = mutate.fetch_all(&mut *tx).await.map_err(db)?;

        // 4. Progress and row detail, in the same transaction as the mutation.
        self.ledger
            .add_progress(&mut tx, &self.key, changed.len() as u64)
            .await
            .map_err(db)?;
        if self.plan.rule.audit == AuditDetail::PerRow && !changed.is_empty() {
            self.ledger
                .add_details(&mut tx, &self.key, strategy, &changed)
                .await
                .map_err(db)?;
        }
        tx.commit().await.map_err(db)?;
        Ok(Some(changed))
    }

    /// Binds `$1` tenant, `$2` cutoff, `$3` entity and, for an erasure, `$4` subject.
    fn common<'q>(&self, q: PgQuery<'q>) -> PgQuery<'q> {
        let q = q
            .bind(self.tenant)
            .bind(self.cutoff)
            .bind(self.entity.entity_id);
        match self.subject {
            Some(s) => q.bind(s.to_owned()),
            None => q,
        }
    }

    fn common_scalar<'q, O>(&self, q: PgQueryScalar<'q, O>) -> PgQueryScalar<'q, O> {
        let q = q
            .bind(self.tenant)
            .bind(self.cutoff)
            .bind(self.entity.entity_id);
        match self.subject {
            Some(s) => q.bind(s.to_owned()),
            None => q,
        }
    }
}

fn pick(items: &[String], keep: &[bool]) -> Vec<String> {
    items
        .iter()
        .zip(keep)
        .filter(|(_, k)| **k)
        .map(|(i, _)| i.clone())
        .collect()
}
