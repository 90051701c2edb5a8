//! Disposition review in a sweep (contracts DR1, DR2): a stage under review
//! changes only the rows of approved disposition batches, and freezes what
//! it would otherwise change into a new batch.
//!
//! For one type, tenant and stage, a sweep:
//!
//! 1. **claims** its batches in one short transaction that locks their rows
//!    (`FOR UPDATE`, so a decision being taken on a batch is waited for and
//!    seen, and two sweeps never carry one batch out twice): a pending batch
//!    whose auto-approval time has come by the run's logical time is
//!    approved by `auto`; an approved batch whose approvals are recorded in
//!    the chain (or one a settled run left half carried out) becomes
//!    `CarryingOut` for this run. Only batches bound to the rule's current
//!    hash are claimed; the others were voided when the type was planned
//!    ([`void_stale`]).
//! 2. **carries out** each claimed batch with the sweep's own batch loop and
//!    statements, restricted by a semi-join to the batch's frozen record
//!    ids: eligibility, holds, matters and the entity fence are judged at
//!    each statement as for any sweep, and the range and locked paths work
//!    as they do. It then measures the batch's rows that are still eligible
//!    (held, or left because locked), and records the carry-out with its
//!    counts as a decision.
//! 3. **freezes** the rows it would change that no batch holds yet: keyset
//!    batches of `INSERT ... SELECT` in the sweep's order, in one
//!    transaction with the batch's row and its `Frozen` decision, so a
//!    batch is there whole or not at all; memory is one batch's keys.

use sqlx::{PgConnection, Row};
use uuid::Uuid;

use super::batch::{EntityBatches, LoopEnd, ReviewValues, Values, bind_after, measure};
use super::cancelled;
use super::plan::{EntityPlan, ReviewPlan};
use super::statements::{EntitySql, Purpose};
use crate::disposition::{
    AUTO, BatchKey, COHORT, DecisionKind, DispositionAction, DispositionActivity, NewDecision,
    approvals, approved, auto_approve_at, record,
};
use crate::engine::Engine;
use crate::holds::matter_set::MatterSet;
use crate::ledger::{Delivery, Failure, Ledger};
use crate::model::resolved::ResolvedEntity;
use crate::policy::AuditDetail;
use crate::sql::txn::{self, RunOwner};
use crate::sql::{AssertSqlSafe, PgTime};
use tokio_util::sync::CancellationToken;

/// What a stage under review did in a run.
#[derive(Debug, Default)]
pub(crate) struct ReviewOutcome {
    /// Rows changed by carrying out approved batches.
    pub(crate) changed: u64,
    /// The type's rows past the cutoff a hold or matter covers (measured
    /// as for any sweep).
    pub(crate) held: u64,
    /// Approved rows left because another transaction held them locked.
    pub(crate) skipped: u64,
    pub(crate) null_anchor: u64,
    pub(crate) legal_minimum: u64,
    pub(crate) failure: Option<Failure>,
    pub(crate) cancelled: bool,
    pub(crate) activity: Vec<DispositionActivity>,
}

/// One stage under review in one run.
pub(crate) struct Reviewed<'a> {
    pub(crate) engine: &'a Engine,
    pub(crate) e: &'a ResolvedEntity,
    pub(crate) plan: &'a EntityPlan,
    pub(crate) review: &'a ReviewPlan,
    pub(crate) ledger: &'a Ledger,
    /// The stage's statements, unrestricted (what the closing count reads).
    pub(crate) sql: &'a EntitySql,
    /// The stage's values, without disposition values.
    pub(crate) values: &'a Values<'a>,
    pub(crate) cancellation: &'a Option<CancellationToken>,
    pub(crate) dry_run: bool,
}

/// A claimed batch: its key and how many rows it froze.
struct Claimed {
    key: BatchKey,
    rows: i64,
}

fn count(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

impl Reviewed<'_> {
    fn stage(&self) -> i32 {
        i32::try_from(self.review.stage).unwrap_or(i32::MAX)
    }

    fn hash(&self) -> Vec<u8> {
        self.review.content.hash.to_vec()
    }

    fn now(&self) -> PgTime {
        PgTime::from_utc(&self.plan.now).unwrap_or(PgTime::INFINITY)
    }

    /// The stage's values bound to disposition batch `batch`.
    fn values_for(&self, batch: Uuid) -> Values<'_> {
        let mut v = self.values.clone();
        v.review = Some(ReviewValues {
            batch,
            stage: self.stage(),
            rule_hash: self.hash(),
            now: self.now(),
        });
        v
    }

    fn owner(&self) -> Option<&RunOwner<'_>> {
        self.values.owner.as_ref()
    }

    fn activity(&self, batch_id: Uuid, action: DispositionAction) -> DispositionActivity {
        DispositionActivity {
            batch_id,
            entity_id: self.e.entity_id,
            entity_type: self.e.type_name().to_owned(),
            stage: u32::try_from(self.review.stage).unwrap_or(u32::MAX),
            action,
        }
    }

    fn table(&self, name: &'static str) -> String {
        self.engine.schema.table(name).to_string()
    }

    /// Runs the stage (see the module docs). A failure is the entity's.
    pub(crate) async fn run(
        &self,
        conn: &mut PgConnection,
        delivery: &mut Delivery,
    ) -> ReviewOutcome {
        let mut out = ReviewOutcome::default();
        let e = self.e;
        let carry = EntitySql::build_in(
            e,
            self.plan.rule.strategy,
            &self.engine.schema,
            self.ledger,
            &Purpose::Sweep,
            self.plan.rule.audit == AuditDetail::PerRow,
            !self.values.handlers.is_empty(),
            self.plan.stage.as_ref().map(|s| s.sql(e)),
            true,
            self.plan.rule.after_event.is_some(),
        );
        if self.dry_run {
            // What a real sweep at this instant would carry out: the
            // approved batches and those due for auto-approval; nothing is
            // frozen, decided or claimed.
            match self.due(conn).await {
                Ok(ids) => {
                    for id in ids {
                        match measure(conn, &carry, &self.values_for(id)).await {
                            Ok(c) => out.changed += c.eligible,
                            Err(err) => {
                                out.failure = Some(Failure::from_sqlx(&err));
                                return out;
                            }
                        }
                    }
                }
                Err(err) => {
                    out.failure = Some(Failure::from_sqlx(&err));
                    return out;
                }
            }
            self.close_counts(conn, &mut out).await;
            return out;
        }
        let claimed = match self.claim(conn, &mut out).await {
            Ok(c) => c,
            Err(err) => {
                out.failure = Some(Failure::from_sqlx(&err));
                return out;
            }
        };
        for batch in claimed {
            if cancelled(self.cancellation) {
                out.cancelled = true;
                return out;
            }
            let values = self.values_for(batch.key.batch_id);
            let loop_ = EntityBatches {
                start: 0,
                sql: &carry,
                values: values.clone(),
                fence_wait: self.engine.options.fence_wait,
                lock_wait: self.engine.options.lock_wait,
                cancellation: self.cancellation,
                // A carry-out's statements have no physical-order form.
                order: crate::config::BatchOrder::Anchor,
            };
            let changed = match loop_.run(conn, delivery).await {
                LoopEnd::Drained(n) => n,
                // The batch stays CarryingOut: the next sweep finishes it.
                LoopEnd::Cancelled(n) => {
                    out.changed += n;
                    out.cancelled = true;
                    return out;
                }
                LoopEnd::Failed(n, f) => {
                    out.changed += n;
                    out.failure = Some(f);
                    return out;
                }
            };
            out.changed += changed;
            let c = match measure(conn, &carry, &values).await {
                Ok(c) => c,
                Err(err) => {
                    out.failure = Some(Failure::from_sqlx(&err));
                    return out;
                }
            };
            // Every frozen id is now changed, still eligible (held, or
            // locked and left), or neither: no longer eligible, or gone.
            let rows = count(batch.rows);
            let ineligible = rows
                .saturating_sub(changed)
                .saturating_sub(c.held)
                .saturating_sub(c.eligible);
            out.skipped += c.eligible;
            let counts = [changed, c.held, c.eligible, ineligible];
            if let Err(err) = self.carried_out(conn, &batch, counts).await {
                out.failure = Some(Failure::from_sqlx(&err));
                return out;
            }
            out.activity.push(self.activity(
                batch.key.batch_id,
                DispositionAction::CarriedOut {
                    changed,
                    held: c.held,
                    left: c.eligible,
                    ineligible,
                },
            ));
        }
        if cancelled(self.cancellation) {
            out.cancelled = true;
            return out;
        }
        match self.freeze(conn).await {
            Ok(Some((batch_id, rows))) => out
                .activity
                .push(self.activity(batch_id, DispositionAction::Frozen { rows })),
            Ok(None) => {}
            Err(err) => {
                out.failure = Some(Failure::from_sqlx(&err));
                return out;
            }
        }
        self.close_counts(conn, &mut out).await;
        out
    }

    /// What a sweep at this instant would do (a preview, contract S7): the
    /// rows of approved batches (and of those due for auto-approval) it
    /// would change, and the rows it would freeze for review. Changes
    /// nothing.
    pub(crate) async fn preview(&self, conn: &mut PgConnection) -> Result<(u64, u64), sqlx::Error> {
        let e = self.e;
        let carry = EntitySql::build_in(
            e,
            self.plan.rule.strategy,
            &self.engine.schema,
            self.ledger,
            &Purpose::Sweep,
            false,
            false,
            self.plan.stage.as_ref().map(|s| s.sql(e)),
            true,
            self.plan.rule.after_event.is_some(),
        );
        let mut approved = 0;
        for id in self.due(conn).await? {
            approved += measure(conn, &carry, &self.values_for(id)).await?.eligible;
        }
        // The freeze's own statements, rolled back: what it would take.
        txn::begin_owned(conn, None, self.engine.options.fence_wait).await?;
        let frozen = self.freeze_in(conn, Uuid::nil(), false).await;
        if let Err(r) = txn::rollback(conn).await {
            tracing::warn!(error = %r, "rolling back a disposition preview failed");
        }
        Ok((approved, frozen?.unwrap_or(0)))
    }

    /// The type's held, NULL-anchor and legal-minimum rows, measured as any
    /// sweep measures them.
    async fn close_counts(&self, conn: &mut PgConnection, out: &mut ReviewOutcome) {
        match measure(conn, self.sql, self.values).await {
            Ok(c) => {
                out.held = c.held;
                out.null_anchor = c.null_anchor;
                out.legal_minimum = c.legal_minimum;
            }
            Err(err) => out.failure = Some(Failure::from_sqlx(&err)),
        }
    }

    /// The scope's batches (the type's, in the tenant, for the stage and
    /// the category: a type whose rows take their category from a column
    /// has one set of batches per category, contract SL3), `FOR UPDATE`
    /// (or not, for a dry run).
    fn batches_sql(&self, lock: bool) -> String {
        format!(
            "SELECT b.batch_id, b.status, b.rule_hash, b.approvers_required, b.row_count, \
                    COALESCE(b.auto_approve_at <= $5::pg_catalog.timestamptz, false) AS due, \
                    (b.status = 'CarryingOut' AND NOT EXISTS ( \
                        SELECT 1 FROM {runs} AS r WHERE r.run_id = b.carried_run_id \
                           AND r.status = 'Started')) AS abandoned \
             FROM {batches} AS b \
             WHERE b.retained_entity_id = $1 AND b.tenant_id = $2 AND b.stage = $3 \
               AND b.rule_hash = $4 AND b.category = $6 \
               AND b.status IN ('Pending', 'Approved', 'CarryingOut') \
             ORDER BY b.created_at, b.batch_id{lock}",
            runs = self.ledger.runs(),
            batches = self.table("retention_disposition_batches"),
            lock = if lock { " FOR UPDATE OF b" } else { "" },
        )
    }

    async fn scope_rows(
        &self,
        conn: &mut PgConnection,
        lock: bool,
    ) -> Result<Vec<sqlx::postgres::PgRow>, sqlx::Error> {
        crate::sql::query(AssertSqlSafe(self.batches_sql(lock)))
            .bind(self.e.entity_id)
            .bind(self.values.ledger_tenant)
            .bind(self.stage())
            .bind(self.hash())
            .bind(self.now())
            .bind(self.e.category)
            .fetch_all(&mut *conn)
            .await
    }

    /// A dry run's batches: approved, due for auto-approval, or left half
    /// carried out.
    async fn due(&self, conn: &mut PgConnection) -> Result<Vec<Uuid>, sqlx::Error> {
        let rows = txn::alone(conn, async |conn| self.scope_rows(conn, false).await).await?;
        let mut ids = Vec::new();
        for r in rows {
            let status: String = r.try_get("status")?;
            let due: bool = r.try_get("due")?;
            let abandoned: bool = r.try_get("abandoned")?;
            if status == "Approved" || (status == "Pending" && due) || abandoned {
                ids.push(r.try_get("batch_id")?);
            }
        }
        Ok(ids)
    }

    /// Step 1: approves what is due for auto-approval and claims what is
    /// approved, in one transaction holding the batches' rows.
    async fn claim(
        &self,
        conn: &mut PgConnection,
        out: &mut ReviewOutcome,
    ) -> Result<Vec<Claimed>, sqlx::Error> {
        txn::begin_owned(conn, self.owner(), self.engine.options.fence_wait).await?;
        let mut activity = Vec::new();
        let claimed = match self.claim_in(conn, &mut activity).await {
            Ok(c) => c,
            Err(e) => {
                if let Err(r) = txn::rollback(conn).await {
                    tracing::warn!(error = %r, "rolling back a disposition claim failed");
                }
                return Err(e);
            }
        };
        txn::commit(conn).await?;
        out.activity.extend(activity);
        Ok(claimed)
    }

    async fn claim_in(
        &self,
        conn: &mut PgConnection,
        activity: &mut Vec<DispositionActivity>,
    ) -> Result<Vec<Claimed>, sqlx::Error> {
        let schema = &self.engine.schema;
        let rows = self.scope_rows(conn, true).await?;
        let mut claimed = Vec::new();
        for r in rows {
            let status: String = r.try_get("status")?;
            let due: bool = r.try_get("due")?;
            let abandoned: bool = r.try_get("abandoned")?;
            let key = BatchKey {
                batch_id: r.try_get("batch_id")?,
                entity_id: self.e.entity_id,
                tenant_id: self.values.ledger_tenant,
                stage: self.stage(),
                rule_hash: r.try_get("rule_hash")?,
                approvers_required: r.try_get("approvers_required")?,
            };
            let rows: i64 = r.try_get("row_count")?;
            let take = match status.as_str() {
                "Pending" if due => {
                    let mut d = NewDecision::new(&key, DecisionKind::Approved, AUTO);
                    d.automatic = true;
                    d.run_id = Some(self.values.run);
                    record(conn, schema, &d).await?;
                    activity.push(self.activity(key.batch_id, DispositionAction::AutoApproved));
                    true
                }
                "Approved" => true,
                "CarryingOut" => abandoned,
                _ => false,
            };
            if !take {
                continue;
            }
            // A batch is carried out only on approvals the chain records:
            // a status set by hand does not count.
            let so_far = approvals(conn, schema, key.batch_id).await?;
            if !approved(&so_far, key.approvers_required) {
                tracing::warn!(
                    batch_id = %key.batch_id,
                    "a disposition batch marked {status} has fewer recorded approvals than it needs; left alone"
                );
                continue;
            }
            crate::sql::query(AssertSqlSafe(format!(
                "UPDATE {} AS b SET status = 'CarryingOut', carried_run_id = $2 WHERE b.batch_id = $1",
                self.table("retention_disposition_batches")
            )))
            .bind(key.batch_id)
            .bind(self.values.run)
            .execute(&mut *conn)
            .await?;
            claimed.push(Claimed { key, rows });
        }
        Ok(claimed)
    }

    /// Records a claimed batch as carried out, with its counts (changed,
    /// held, left, no longer eligible).
    async fn carried_out(
        &self,
        conn: &mut PgConnection,
        batch: &Claimed,
        counts: [u64; 4],
    ) -> Result<(), sqlx::Error> {
        let c = counts.map(|n| i64::try_from(n).unwrap_or(i64::MAX));
        txn::begin_owned(conn, self.owner(), self.engine.options.fence_wait).await?;
        let result: Result<(), sqlx::Error> = async {
            let updated = crate::sql::query(AssertSqlSafe(format!(
                "UPDATE {} AS b SET status = 'CarriedOut', changed_count = $3, held_count = $4, \
                        left_count = $5, ineligible_count = $6, \
                        decided_at = pg_catalog.statement_timestamp() \
                 WHERE b.batch_id = $1 AND b.status = 'CarryingOut' AND b.carried_run_id = $2",
                self.table("retention_disposition_batches")
            )))
            .bind(batch.key.batch_id)
            .bind(self.values.run)
            .bind(c[0])
            .bind(c[1])
            .bind(c[2])
            .bind(c[3])
            .execute(&mut *conn)
            .await?
            .rows_affected();
            if updated == 1 {
                let mut d = NewDecision::new(&batch.key, DecisionKind::CarriedOut, COHORT);
                d.automatic = true;
                d.run_id = Some(self.values.run);
                d.rows = Some(batch.rows);
                d.counts = Some(c);
                record(conn, &self.engine.schema, &d).await?;
            }
            Ok(())
        }
        .await;
        match result {
            Ok(()) => txn::commit(conn).await,
            Err(e) => {
                if let Err(r) = txn::rollback(conn).await {
                    tracing::warn!(error = %r, "rolling back a disposition carry-out failed");
                }
                Err(e)
            }
        }
    }

    /// Step 3: freezes the rows the stage would change that no batch holds
    /// into a new batch; `None` when there are none.
    async fn freeze(&self, conn: &mut PgConnection) -> Result<Option<(Uuid, u64)>, sqlx::Error> {
        let batch_id = Uuid::new_v4();
        txn::begin_owned(conn, self.owner(), self.engine.options.fence_wait).await?;
        let result = self.freeze_in(conn, batch_id, true).await;
        match result {
            Ok(Some(rows)) => {
                txn::commit(conn).await?;
                Ok(Some((batch_id, rows)))
            }
            Ok(None) | Err(_) => {
                if let Err(r) = txn::rollback(conn).await {
                    tracing::warn!(error = %r, "rolling back a disposition freeze failed");
                }
                result.map(|_| None)
            }
        }
    }

    /// The freeze's statements in the open transaction; with `write`, the
    /// batch's row and its decision too (a preview rolls it all back).
    async fn freeze_in(
        &self,
        conn: &mut PgConnection,
        batch_id: Uuid,
        write: bool,
    ) -> Result<Option<u64>, sqlx::Error> {
        let e = self.e;
        let schema = &self.engine.schema;
        let statements = EntitySql::freeze(
            e,
            self.plan.rule.strategy,
            schema,
            self.ledger,
            self.plan.stage.as_ref().map(|s| s.sql(e)),
            self.plan.rule.after_event.is_some(),
        );
        let values = self.values_for(batch_id);
        let matters = MatterSet::read_in(conn, schema, e, self.values.tenant, None, None).await?;
        let mut after: Option<(PgTime, String)> = None;
        let mut total: i64 = 0;
        loop {
            if cancelled(self.cancellation) {
                return Ok(None);
            }
            let statement = &statements[usize::from(after.is_some())];
            let row = bind_after(statement, &values, after.clone(), &matters)
                .fetch_one(&mut *conn)
                .await?;
            total += row.try_get::<i64, _>("frozen")?;
            let hi_anchor: Option<PgTime> = row.try_get("hi_anchor")?;
            let hi_key: Option<String> = row.try_get("hi_key")?;
            match (hi_anchor, hi_key) {
                (Some(a), Some(k)) => after = Some((a, k)),
                _ => break,
            }
        }
        if total == 0 || !write {
            return Ok(Some(count(total)).filter(|_| total > 0));
        }
        // The review as the batch keeps it: the effective re-offer period.
        let mut review = self.review.review;
        review.reoffer_after = review.reoffer_after.or(Some(self.plan.rule.period));
        let review_json = serde_json::to_string(&review).unwrap_or_else(|_| "{}".to_owned());
        crate::sql::query(AssertSqlSafe(format!(
            "INSERT INTO {} (batch_id, retained_entity_id, entity_type, category, tenant_id, \
                 stage, strategy, rule_hash, rule_content, review, run_id, frozen_at, created_at, \
                 row_count, approvers_required, auto_approve_at, status) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::pg_catalog.jsonb, $11, $12, \
                     pg_catalog.statement_timestamp(), $13, $14, $15, 'Pending')",
            self.table("retention_disposition_batches")
        )))
        .bind(batch_id)
        .bind(e.entity_id)
        .bind(e.type_name())
        .bind(e.category)
        .bind(self.values.ledger_tenant)
        .bind(self.stage())
        .bind(self.plan.rule.strategy.as_str())
        .bind(self.hash())
        .bind(&self.review.content.text)
        .bind(review_json)
        .bind(self.values.run)
        .bind(self.now())
        .bind(total)
        .bind(self.review.review.required())
        .bind(auto_approve_at(self.plan.now, &self.review.review))
        .execute(&mut *conn)
        .await?;
        let key = BatchKey {
            batch_id,
            entity_id: e.entity_id,
            tenant_id: self.values.ledger_tenant,
            stage: self.stage(),
            rule_hash: self.hash(),
            approvers_required: self.review.review.required(),
        };
        let mut d = NewDecision::new(&key, DecisionKind::Frozen, COHORT);
        d.automatic = true;
        d.run_id = Some(self.values.run);
        d.rows = Some(total);
        record(conn, schema, &d).await?;
        Ok(Some(count(total)))
    }
}

/// Voids the type's batches in the scope's tenant (and, for a type whose
/// rows take their category from a column, of `e`'s category: each has its
/// own rule, contract SL3) that are not yet carried out and whose rule
/// changed (contract DR2): bound to a stage the current plans do not
/// review, or to another hash. Each void is a decision by
/// `cohort`. Safety never depends on it (a sweep claims only batches of the
/// current hash); it keeps the record honest.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn void_stale(
    conn: &mut PgConnection,
    engine: &Engine,
    ledger: &Ledger,
    e: &ResolvedEntity,
    ledger_tenant: Uuid,
    plans: &[EntityPlan],
    run: Uuid,
    owner: Option<&RunOwner<'_>>,
) -> Result<Vec<DispositionActivity>, sqlx::Error> {
    let (stages, hashes): (Vec<i32>, Vec<Vec<u8>>) = plans
        .iter()
        .filter_map(|p| p.review.as_ref())
        .map(|r| {
            (
                i32::try_from(r.stage).unwrap_or(i32::MAX),
                r.content.hash.to_vec(),
            )
        })
        .unzip();
    let schema = &engine.schema;
    let sql = format!(
        "WITH v AS (UPDATE {batches} AS b SET status = 'Voided', \
                           decided_at = pg_catalog.statement_timestamp() \
             WHERE b.retained_entity_id = $1 AND b.tenant_id = $2 AND b.category = $5 \
               AND (b.status IN ('Pending', 'Approved') \
                    OR (b.status = 'CarryingOut' AND NOT EXISTS ( \
                        SELECT 1 FROM {runs} AS r WHERE r.run_id = b.carried_run_id \
                           AND r.status = 'Started'))) \
               AND NOT EXISTS (SELECT 1 FROM ROWS FROM (pg_catalog.unnest($3::pg_catalog.int4[]), \
                                                        pg_catalog.unnest($4::pg_catalog.bytea[])) AS k(stage, hash) \
                               WHERE k.stage = b.stage AND k.hash = b.rule_hash) \
             RETURNING b.batch_id, b.stage, b.rule_hash, b.approvers_required, b.row_count, b.created_at) \
         SELECT v.batch_id, v.stage, v.rule_hash, v.approvers_required, v.row_count FROM v \
         ORDER BY v.created_at, v.batch_id",
        batches = schema.table("retention_disposition_batches"),
        runs = ledger.runs(),
    );
    txn::begin_owned(conn, owner, engine.options.fence_wait).await?;
    let result: Result<Vec<DispositionActivity>, sqlx::Error> = async {
        let rows = crate::sql::query(AssertSqlSafe(sql))
            .bind(e.entity_id)
            .bind(ledger_tenant)
            .bind(&stages)
            .bind(&hashes)
            .bind(e.category)
            .fetch_all(&mut *conn)
            .await?;
        let mut activity = Vec::new();
        for r in rows {
            let key = BatchKey {
                batch_id: r.try_get("batch_id")?,
                entity_id: e.entity_id,
                tenant_id: ledger_tenant,
                stage: r.try_get("stage")?,
                rule_hash: r.try_get("rule_hash")?,
                approvers_required: r.try_get("approvers_required")?,
            };
            let mut d = NewDecision::new(&key, DecisionKind::Voided, COHORT);
            d.automatic = true;
            d.run_id = Some(run);
            d.reason = Some("the rule that selected the batch changed before it was carried out");
            d.rows = Some(r.try_get("row_count")?);
            record(conn, schema, &d).await?;
            activity.push(DispositionActivity {
                batch_id: key.batch_id,
                entity_id: e.entity_id,
                entity_type: e.type_name().to_owned(),
                stage: u32::try_from(key.stage).unwrap_or(0),
                action: DispositionAction::Voided,
            });
        }
        Ok(activity)
    }
    .await;
    match result {
        Ok(a) => {
            txn::commit(conn).await?;
            Ok(a)
        }
        Err(err) => {
            if let Err(r) = txn::rollback(conn).await {
                tracing::warn!(error = %r, "rolling back a disposition void failed");
            }
            Err(err)
        }
    }
}
