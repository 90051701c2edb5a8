//! Disposition review (contracts DR1-DR3): rows at the end of their
//! retention that a rule puts under review are not changed by a sweep until
//! named reviewers approve them.
//!
//! A sweep that meets a rule (or a stage of a staged rule) with a
//! [`Review`] freezes what it would change into a
//! *disposition batch* per type, tenant and stage, bound to the SHA-256 of
//! the rule's content, and changes none of it. Reviewers then decide through
//! [`Dispositions`] ([`crate::Cohort::dispositions`]) or `cohort
//! disposition`: [`approve`](Dispositions::approve) (one approver, or two
//! distinct ones when the review says so), [`reject`](Dispositions::reject)
//! with a reason, or [`extend`](Dispositions::extend) to a date. The next
//! sweep changes exactly the approved batch's rows that are still eligible
//! and not held at its statements, and records what it changed and what it
//! left. Every decision is a link of the evidence chain
//! ([`crate::evidence::verify`]).
//!
#![doc = include_str!("../../../../docs/disposition.md")]

mod store;
mod types;

use chrono::{DateTime, TimeZone, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

pub use crate::error::disposition::{BatchStatus, DispositionError, MAX_DECIDER_BYTES};
pub(crate) use store::{
    AUTO, BatchKey, COHORT, NewDecision, after, approvals, approved, batch_columns, record,
};
pub use types::{Decision, DecisionKind, DispositionAction, DispositionActivity, DispositionBatch};

use crate::engine::Engine;
use crate::error::Error;
use crate::error::hold::MAX_REASON_BYTES;
use crate::holds::txn::{Open, open_transaction};
use crate::policy::Review;
use crate::sql::{AssertSqlSafe, PgTime, Pinned};

/// Decisions on disposition batches. Get one from
/// [`Cohort::dispositions`](crate::Cohort::dispositions); it is a cheap
/// borrow. A plain connection runs each call in a transaction of its own;
/// an open sqlx transaction is joined under a savepoint (as
/// [`crate::holds::Holds`] does), and the batch's row stays locked until
/// that transaction ends.
#[derive(Debug, Clone, Copy)]
pub struct Dispositions<'a> {
    engine: &'a Engine,
}

impl<'a> Dispositions<'a> {
    pub(crate) fn new(engine: &'a Engine) -> Dispositions<'a> {
        Dispositions { engine }
    }
}

/// A decider's name, checked before anything is read.
fn decider(name: &str) -> Result<&str, DispositionError> {
    if name.trim().is_empty() {
        return Err(DispositionError::EmptyDecider);
    }
    if name.len() > MAX_DECIDER_BYTES || name.contains('\0') {
        return Err(DispositionError::InvalidDecider);
    }
    Ok(name)
}

impl Dispositions<'_> {
    fn batches(&self) -> String {
        self.engine
            .schema
            .table("retention_disposition_batches")
            .to_string()
    }

    async fn begin<'c>(&self, conn: &'c mut PgConnection) -> Result<Pinned<'c>, Error> {
        if open_transaction(conn).await? == Open::Untracked {
            return Err(Error::UntrackedTransaction);
        }
        self.engine.ensure_ready(conn).await?;
        Ok(Pinned::begin(conn).await?)
    }

    /// Every batch, oldest first; only those in `status` when given.
    pub async fn list(
        &self,
        conn: &mut PgConnection,
        status: Option<BatchStatus>,
    ) -> Result<Vec<DispositionBatch>, Error> {
        let sql = format!(
            "SELECT {cols} FROM {batches} AS b \
             WHERE $1::pg_catalog.text IS NULL OR b.status = $1::pg_catalog.text \
             ORDER BY b.created_at, b.batch_id",
            cols = batch_columns(&self.engine.schema),
            batches = self.batches()
        );
        let mut scope = self.begin(conn).await?;
        let rows = crate::sql::query(AssertSqlSafe(sql))
            .bind(status.map(|s| s.as_str()))
            .fetch_all(scope.conn())
            .await
            .map_err(Error::from);
        let result = rows.and_then(|rows| {
            rows.iter()
                .map(|r| types::batch_from_row(r).map_err(Error::from))
                .collect()
        });
        scope.finish(result).await
    }

    /// The batch with this id, if there is one.
    pub async fn get(
        &self,
        conn: &mut PgConnection,
        batch_id: Uuid,
    ) -> Result<Option<DispositionBatch>, Error> {
        let mut scope = self.begin(conn).await?;
        let result = self.read(scope.conn(), batch_id, "").await;
        scope.finish(result.map(|b| b.map(|(b, _, _)| b))).await
    }

    /// Every decision on the batch, in chain order (empty for an unknown id).
    pub async fn decisions(
        &self,
        conn: &mut PgConnection,
        batch_id: Uuid,
    ) -> Result<Vec<Decision>, Error> {
        let sql = format!(
            "SELECT {cols} FROM {decisions} AS d WHERE d.batch_id = $1 ORDER BY d.chain_seq",
            cols = store::DECISION_COLUMNS,
            decisions = self.engine.schema.table("retention_disposition_decisions")
        );
        let mut scope = self.begin(conn).await?;
        let rows = crate::sql::query(AssertSqlSafe(sql))
            .bind(batch_id)
            .fetch_all(scope.conn())
            .await
            .map_err(Error::from);
        let result = rows.and_then(|rows| {
            rows.iter()
                .map(|r| types::decision_from_row(r).map_err(Error::from))
                .collect()
        });
        scope.finish(result).await
    }

    /// Up to `limit` of the record ids the batch froze, in text order,
    /// after `after` (a page: pass the last id of the previous one).
    pub async fn record_ids(
        &self,
        conn: &mut PgConnection,
        batch_id: Uuid,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<String>, Error> {
        let sql = format!(
            "SELECT r.record_id FROM {records} AS r \
             WHERE r.batch_id = $1 AND ($2::pg_catalog.text IS NULL OR r.record_id > $2::pg_catalog.text) \
             ORDER BY r.record_id LIMIT $3",
            records = self.engine.schema.table("retention_disposition_records")
        );
        let mut scope = self.begin(conn).await?;
        let result = crate::sql::query_scalar(AssertSqlSafe(sql))
            .bind(batch_id)
            .bind(after)
            .bind(i64::from(limit))
            .fetch_all(scope.conn())
            .await
            .map_err(Error::from);
        scope.finish(result).await
    }

    /// The batch, with what binds its decisions and its review; locked
    /// `FOR UPDATE` when `lock` says so.
    async fn read(
        &self,
        conn: &mut PgConnection,
        batch_id: Uuid,
        lock: &str,
    ) -> Result<Option<(DispositionBatch, BatchKey, Review)>, Error> {
        let sql = format!(
            "SELECT {cols}, b.rule_hash AS hash, b.review::pg_catalog.text AS review_json \
             FROM {batches} AS b WHERE b.batch_id = $1{lock}",
            cols = batch_columns(&self.engine.schema),
            batches = self.batches()
        );
        let Some(row) = crate::sql::query(AssertSqlSafe(sql))
            .bind(batch_id)
            .fetch_optional(&mut *conn)
            .await?
        else {
            return Ok(None);
        };
        use sqlx::Row;
        let batch = types::batch_from_row(&row)?;
        let key = BatchKey {
            batch_id,
            entity_id: batch.entity_id,
            tenant_id: batch.tenant_id,
            stage: row.try_get("stage")?,
            rule_hash: row.try_get("hash")?,
            approvers_required: row.try_get("approvers_required")?,
        };
        let review_json: String = row.try_get("review_json")?;
        let review = serde_json::from_str(&review_json).unwrap_or_default();
        Ok(Some((batch, key, review)))
    }

    /// The batch locked for a decision: it must exist and be pending.
    async fn pending(
        &self,
        conn: &mut PgConnection,
        batch_id: Uuid,
    ) -> Result<(DispositionBatch, BatchKey, Review), Error> {
        let Some((batch, key, review)) = self.read(conn, batch_id, " FOR UPDATE OF b").await?
        else {
            return Err(DispositionError::NoSuchBatch { batch_id }.into());
        };
        if batch.status != BatchStatus::Pending {
            return Err(DispositionError::NotPending {
                batch_id,
                status: batch.status,
            }
            .into());
        }
        Ok((batch, key, review))
    }

    async fn reread(
        &self,
        conn: &mut PgConnection,
        batch_id: Uuid,
    ) -> Result<DispositionBatch, Error> {
        self.read(conn, batch_id, "")
            .await?
            .map(|(b, _, _)| b)
            .ok_or_else(|| DispositionError::NoSuchBatch { batch_id }.into())
    }

    async fn set_status(
        &self,
        conn: &mut PgConnection,
        batch_id: Uuid,
        status: BatchStatus,
        keep_until: Option<PgTime>,
    ) -> Result<(), Error> {
        let sql = format!(
            "UPDATE {batches} AS b SET status = $2, keep_until = $3, \
                    decided_at = pg_catalog.statement_timestamp() \
             WHERE b.batch_id = $1",
            batches = self.batches()
        );
        crate::sql::query(AssertSqlSafe(sql))
            .bind(batch_id)
            .bind(status.as_str())
            .bind(keep_until)
            .execute(&mut *conn)
            .await?;
        Ok(())
    }

    /// Approves a pending batch in `approver`'s name (contract DR2) and
    /// returns it. With one approver required (or once a second, distinct
    /// one approves a batch that needs two) the batch is `Approved`, and the
    /// next sweep of its type changes exactly its rows that are still
    /// eligible and not held; before that it stays `Pending` with the first
    /// approval recorded. Names are compared trimmed and without case, so
    /// "Ann" cannot approve twice as "ann".
    ///
    /// Refused with [`Error::Disposition`], nothing written, for an empty
    /// or overlong name ([`DispositionError::EmptyDecider`],
    /// [`DispositionError::InvalidDecider`]), an unknown batch
    /// ([`DispositionError::NoSuchBatch`]), a batch that is not pending
    /// (voided, rejected, extended, approved, carried out:
    /// [`DispositionError::NotPending`]), or an approver who already
    /// approved it ([`DispositionError::SameApprover`]).
    pub async fn approve(
        &self,
        conn: &mut PgConnection,
        batch_id: Uuid,
        approver: &str,
    ) -> Result<DispositionBatch, Error> {
        let approver = decider(approver)?;
        let mut scope = self.begin(conn).await?;
        let result = self.approve_in(scope.conn(), batch_id, approver).await;
        scope.finish(result).await
    }

    async fn approve_in(
        &self,
        conn: &mut PgConnection,
        batch_id: Uuid,
        approver: &str,
    ) -> Result<DispositionBatch, Error> {
        let (_, key, _) = self.pending(conn, batch_id).await?;
        let schema = &self.engine.schema;
        let mut so_far = approvals(conn, schema, batch_id).await?;
        if so_far
            .iter()
            .any(|(n, _)| store::same_person(n) == store::same_person(approver))
        {
            return Err(DispositionError::SameApprover {
                batch_id,
                approver: approver.to_owned(),
            }
            .into());
        }
        record(
            conn,
            schema,
            &NewDecision::new(&key, DecisionKind::Approved, approver),
        )
        .await?;
        so_far.push((approver.to_owned(), false));
        if approved(&so_far, key.approvers_required) {
            self.set_status(conn, batch_id, BatchStatus::Approved, None)
                .await?;
        } else {
            self.set_status(conn, batch_id, BatchStatus::Pending, None)
                .await?;
        }
        self.reread(conn, batch_id).await
    }

    /// Rejects a pending batch in `by`'s name, with a reason (contract
    /// DR2), and returns it: its rows are kept, and sweeps do not offer them
    /// again until the rule changes or the review's re-offer period (by
    /// default the stage's own period) has passed since now.
    ///
    /// Refused, nothing written, for an empty name, an empty or overlong
    /// reason ([`DispositionError::InvalidReason`]), an unknown batch or one
    /// that is not pending.
    pub async fn reject(
        &self,
        conn: &mut PgConnection,
        batch_id: Uuid,
        by: &str,
        reason: &str,
    ) -> Result<DispositionBatch, Error> {
        let by = decider(by)?;
        if reason.trim().is_empty() || reason.len() > MAX_REASON_BYTES || reason.contains('\0') {
            return Err(DispositionError::InvalidReason.into());
        }
        let mut scope = self.begin(conn).await?;
        let result = self.reject_in(scope.conn(), batch_id, by, reason).await;
        scope.finish(result).await
    }

    async fn reject_in(
        &self,
        conn: &mut PgConnection,
        batch_id: Uuid,
        by: &str,
        reason: &str,
    ) -> Result<DispositionBatch, Error> {
        let (_, key, review) = self.pending(conn, batch_id).await?;
        let now: PgTime = crate::sql::query_scalar("SELECT pg_catalog.statement_timestamp()")
            .fetch_one(&mut *conn)
            .await?;
        // The review stored with the batch carries the effective re-offer
        // period (the stage's own when the review named none).
        let keep_until = match (now.to_utc(), review.reoffer_after) {
            (Some(now), Some(period)) => after(now, period)
                .and_then(|t| PgTime::from_utc(&t))
                .unwrap_or(PgTime::INFINITY),
            _ => PgTime::INFINITY,
        };
        let mut d = NewDecision::new(&key, DecisionKind::Rejected, by);
        d.reason = Some(reason);
        d.keep_until = Some(keep_until);
        record(conn, &self.engine.schema, &d).await?;
        self.set_status(conn, batch_id, BatchStatus::Rejected, Some(keep_until))
            .await?;
        self.reread(conn, batch_id).await
    }

    /// Keeps a pending batch's rows until `until` in `by`'s name (contract
    /// DR2) and returns it: sweeps at a logical time before `until` do not
    /// offer them again; at or after it they are frozen into a new batch if
    /// they are still eligible.
    ///
    /// Refused, nothing written, for an empty name, a time outside
    /// PostgreSQL's range ([`Error::TimeOutOfRange`]), a time not after the
    /// database clock ([`DispositionError::ExtensionInPast`]), an unknown
    /// batch or one that is not pending.
    pub async fn extend<Tz: TimeZone>(
        &self,
        conn: &mut PgConnection,
        batch_id: Uuid,
        by: &str,
        until: DateTime<Tz>,
    ) -> Result<DispositionBatch, Error> {
        let by = decider(by)?;
        let until = crate::sql::timestamp::to_pg_precision(&until)
            .and_then(|t| PgTime::from_utc(&t))
            .ok_or(Error::TimeOutOfRange { what: "until" })?;
        let mut scope = self.begin(conn).await?;
        let result = self.extend_in(scope.conn(), batch_id, by, until).await;
        scope.finish(result).await
    }

    async fn extend_in(
        &self,
        conn: &mut PgConnection,
        batch_id: Uuid,
        by: &str,
        until: PgTime,
    ) -> Result<DispositionBatch, Error> {
        let (_, key, _) = self.pending(conn, batch_id).await?;
        let later: bool = crate::sql::query_scalar(
            "SELECT $1::pg_catalog.timestamptz OPERATOR(pg_catalog.>) pg_catalog.statement_timestamp()",
        )
        .bind(until)
        .fetch_one(&mut *conn)
        .await?;
        if !later {
            return Err(DispositionError::ExtensionInPast { batch_id }.into());
        }
        let mut d = NewDecision::new(&key, DecisionKind::Extended, by);
        d.keep_until = Some(until);
        record(conn, &self.engine.schema, &d).await?;
        self.set_status(conn, batch_id, BatchStatus::Extended, Some(until))
            .await?;
        self.reread(conn, batch_id).await
    }
}

/// When a batch frozen at `frozen_at` under `review` is approved by itself.
pub(crate) fn auto_approve_at(frozen_at: DateTime<Utc>, review: &Review) -> Option<PgTime> {
    review.auto_approve_after.map(|p| {
        after(frozen_at, p)
            .and_then(|t| PgTime::from_utc(&t))
            .unwrap_or(PgTime::INFINITY)
    })
}
