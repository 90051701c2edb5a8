//! The dispatcher: claims due deliveries from the queue, runs the handlers'
//! `deliver`, and settles each delivery with its claim token.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde::Serialize;
use sqlx::postgres::PgListener;
use sqlx::{PgConnection, Row};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::engine::Engine;
use crate::error::Error;
use crate::handlers::CHANNEL;
use crate::handlers::HandlerContext;
use crate::handlers::queue::QueueSql;
use crate::handlers::registry::{Delivered, Registered};
use crate::ledger::{Failure, FailureKind};
use crate::policy::Strategy;
use crate::sql::AssertSqlSafe;
use std::sync::Arc;

/// How many deliveries one claim takes.
const CLAIM_BATCH: i64 = 32;

/// The longest backoff between attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(3600);

/// What one [`Dispatcher::run_once`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct DispatchReport {
    /// Deliveries claimed.
    pub claimed: u64,
    /// Deliveries that succeeded.
    pub succeeded: u64,
    /// Deliveries that failed and will be retried.
    pub retried: u64,
    /// Deliveries dead-lettered (attempts exhausted, undecodable or scrubbed
    /// payload, unknown handler).
    pub dead_lettered: u64,
    /// Outcomes discarded because the claim had been reclaimed meanwhile, or
    /// that could not be recorded (the delivery stays in flight until its
    /// claim expires).
    pub unsettled: u64,
    /// Expired claims put back in the queue.
    pub reclaimed: u64,
    /// Payloads cleared by the retention backstop.
    pub scrubbed: u64,
    /// Abandoned runs settled.
    pub runs_settled: u64,
    /// Deliveries due for longer than the claim timeout whose retained type
    /// no handler of this dispatcher serves (counted up to
    /// [`MAX_UNSERVED_COUNTED`]): work queued by another application that
    /// shares the install (its dispatcher delivers it), or by a type whose
    /// handlers this application no longer registers. Such work is never
    /// claimed here; a non-zero count is logged as a warning naming the
    /// types (contract RH9).
    pub unserved: u64,
}

/// The most deliveries [`DispatchReport::unserved`] counts.
pub const MAX_UNSERVED_COUNTED: u64 = 10_000;

/// Delivers queued row-handler work. Get one from [`Cohort::dispatcher`](crate::Cohort::dispatcher);
/// run as many as you like, on as many replicas as you like: claims skip
/// each other's rows.
#[derive(Debug, Clone)]
pub struct Dispatcher {
    engine: Arc<Engine>,
}

/// One claimed delivery.
struct Claimed {
    work_id: i64,
    token: Uuid,
    attempt: u32,
    run_id: Uuid,
    entity_id: Uuid,
    record_id: String,
    tenant_id: Uuid,
    handler_id: String,
    payload: Option<serde_json::Value>,
    scrubbed: bool,
    action: Option<String>,
}

/// What to record for a delivery.
struct Outcome {
    state: &'static str,
    error: Option<Failure>,
    retry_after: Duration,
}

fn strategy(action: Option<&str>) -> Strategy {
    match action {
        Some("SoftDelete") => Strategy::SoftDelete,
        Some("Anonymise") => Strategy::Anonymise,
        Some("Archive") => Strategy::Archive,
        _ => Strategy::Purge,
    }
}

/// `min(2^attempt, 1 hour)`, with ±10% jitter so retries of one batch spread.
fn backoff(attempt: u32) -> Duration {
    let base = Duration::from_secs(1u64 << attempt.min(12)).min(MAX_BACKOFF);
    let jitter = 0.9 + 0.2 * (Uuid::new_v4().as_u128() % 1000) as f64 / 1000.0;
    base.mul_f64(jitter)
}

fn interval(d: Duration) -> chrono::TimeDelta {
    chrono::TimeDelta::from_std(d).unwrap_or(chrono::TimeDelta::MAX)
}

impl Dispatcher {
    pub(crate) fn new(engine: Arc<Engine>) -> Dispatcher {
        Dispatcher { engine }
    }

    fn sql(&self) -> QueueSql {
        QueueSql::new(&self.engine.schema)
    }

    /// The retained types that have handlers.
    fn entities(&self) -> Vec<Uuid> {
        let mut ids: Vec<Uuid> = self.engine.handlers.iter().map(|h| h.entity_id).collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// A connection of the dispatcher's own, out of the pool (closed after
    /// use), with `search_path` pinned for the session (`pg_catalog` first)
    /// and commits that do not wait for the WAL flush.
    ///
    /// Not waiting is safe here and is most of the dispatcher's speed: each
    /// claim and each outcome is one small transaction. A crash of the
    /// database server can lose the last few recorded outcomes (never half
    /// of one); their deliveries are then made again, which at-least-once
    /// delivery allows (RH3). It cannot make a lost claim settle, because a
    /// settle needs the claim's token.
    ///
    /// Through a pooler in transaction mode the connection's server session
    /// may change at every transaction and is shared with other clients:
    /// there nothing is set for the session, and each statement runs in a
    /// transaction of its own with both settings local to it ([`Step`]).
    async fn connection(&self) -> Result<PgConnection, Error> {
        let mut conn = self.engine.pool.acquire().await?.detach();
        self.engine.ensure_ready(&mut conn).await?;
        if !self.pooled() {
            crate::sql::query(
                "SELECT pg_catalog.set_config('search_path', 'pg_catalog, ' OPERATOR(pg_catalog.||) \
                 pg_catalog.current_setting('search_path'), false), \
                 pg_catalog.set_config('synchronous_commit', 'off', false)",
            )
            .execute(&mut conn)
            .await?;
        }
        Ok(conn)
    }

    /// Whether the pool goes through a pooler in transaction mode.
    fn pooled(&self) -> bool {
        !self.engine.options.connection_mode.caches_statements()
    }

    /// Where the next statement runs: on the session, or in a transaction
    /// of its own through a pooler.
    async fn step<'c>(&self, conn: &'c mut PgConnection) -> Result<Step<'c>, sqlx::Error> {
        if self.pooled() {
            crate::sql::txn::begin_local(conn).await?;
            Ok(Step { conn, tx: true })
        } else {
            Ok(Step { conn, tx: false })
        }
    }

    /// Delivers what is due now and returns: puts back deliveries whose
    /// claim expired, clears payloads past the payload retention, settles
    /// abandoned runs (so that work waiting for them can go), then claims
    /// and delivers due work until none is left or `Options::dispatch_limit`
    /// deliveries were made.
    pub async fn run_once(&self) -> Result<DispatchReport, Error> {
        let mut conn = self.connection().await?;
        let result = self.drain(&mut conn).await;
        crate::run::close(conn).await;
        result
    }

    async fn drain(&self, conn: &mut PgConnection) -> Result<DispatchReport, Error> {
        let options = &self.engine.options;
        let sql = self.sql();
        let entities = self.entities();
        let mut report = DispatchReport {
            runs_settled: self.engine.settle_abandoned().await?,
            ..DispatchReport::default()
        };
        let cache = !self.pooled();
        let mut step = self.step(conn).await?;
        let found = crate::sql::query_as(AssertSqlSafe(sql.unserved()))
            .bind(&entities)
            .bind(interval(options.claim_timeout))
            .bind(MAX_UNSERVED_COUNTED as i64)
            .fetch_one(step.conn())
            .await;
        let (unserved, types): (i64, Vec<Uuid>) = step.end(found).await?;
        report.unserved = count(unserved);
        if report.unserved > 0 {
            tracing::warn!(
                unserved = report.unserved,
                types = ?types,
                "row-handler work of retained types this application registers no handler for has waited \
                 longer than the claim timeout; run the dispatcher of the application that registers them"
            );
        }
        if entities.is_empty() {
            return Ok(report);
        }
        let expired = Failure::reason(
            FailureKind::ClaimExpired,
            &"a delivery's claim expired; its dispatcher crashed or stalled",
        );
        let mut step = self.step(conn).await?;
        let reclaimed = crate::sql::query_scalar(AssertSqlSafe(sql.reclaim()))
            .bind(&entities)
            .bind(i32::try_from(options.max_attempts).unwrap_or(i32::MAX))
            .bind(expired.to_string())
            .fetch_one(step.conn())
            .await;
        report.reclaimed = count(step.end(reclaimed).await?);
        let mut step = self.step(conn).await?;
        let scrubbed = crate::sql::query(AssertSqlSafe(sql.scrub()))
            .bind(interval(options.payload_retention))
            .execute(step.conn())
            .await;
        report.scrubbed = step.end(scrubbed).await?.rows_affected();

        let handlers: HashMap<(Uuid, &str), &Registered> = self
            .engine
            .handlers
            .iter()
            .map(|h| ((h.entity_id, h.id.as_str()), h))
            .collect();
        while report.claimed < u64::from(options.dispatch_limit) {
            // The deadline clock starts before the claim: whatever the host
            // clock says, the handler is stopped before the database's expiry.
            let claimed_at = Instant::now();
            let batch = CLAIM_BATCH.min(i64::from(options.dispatch_limit) - report.claimed as i64);
            let mut step = self.step(conn).await?;
            let claimed = crate::sql::query(AssertSqlSafe(sql.claim()))
                .persistent(cache)
                .bind(&entities)
                .bind(batch)
                .bind(interval(options.claim_timeout))
                .fetch_all(step.conn())
                .await;
            let rows = step.end(claimed).await?;
            if rows.is_empty() {
                break;
            }
            report.claimed += rows.len() as u64;
            let mut unrecorded = false;
            for row in rows {
                let claimed = Claimed {
                    work_id: row.try_get("work_id")?,
                    token: row.try_get("claim_token")?,
                    attempt: u32::try_from(row.try_get::<i32, _>("attempts")?).unwrap_or(0),
                    run_id: row.try_get("run_id")?,
                    entity_id: row.try_get("retained_entity_id")?,
                    record_id: row.try_get("record_id")?,
                    tenant_id: row.try_get("tenant_id")?,
                    handler_id: row.try_get("handler_id")?,
                    payload: row.try_get("payload")?,
                    scrubbed: row.try_get("scrubbed")?,
                    action: row.try_get("action")?,
                };
                let handler = handlers
                    .get(&(claimed.entity_id, claimed.handler_id.as_str()))
                    .copied();
                let outcome = self.deliver(&claimed, handler, claimed_at).await;
                let state = outcome.state;
                let settled = match self.step(conn).await {
                    Ok(mut step) => {
                        let settled = crate::sql::query_scalar::<i64>(AssertSqlSafe(sql.settle()))
                            .persistent(cache)
                            .bind(claimed.work_id)
                            .bind(claimed.token)
                            .bind(outcome.state)
                            .bind(outcome.error.as_ref().map(|f| f.to_string()))
                            .bind(interval(outcome.retry_after))
                            .fetch_one(step.conn())
                            .await;
                        step.end(settled).await
                    }
                    Err(e) => Err(e),
                };
                match settled {
                    Ok(1) => match state {
                        "Succeeded" => {
                            crate::metrics::delivery("Succeeded");
                            report.succeeded += 1;
                        }
                        "DeadLettered" => {
                            crate::metrics::delivery("DeadLettered");
                            report.dead_lettered += 1;
                        }
                        _ => {
                            crate::metrics::delivery("Retried");
                            report.retried += 1;
                        }
                    },
                    Ok(_) => {
                        report.unsettled += 1;
                        tracing::warn!(
                            work_id = claimed.work_id,
                            "a delivery's claim was reclaimed before it settled; its outcome is discarded"
                        );
                    }
                    Err(e) => {
                        // Not a handler failure: the delivery stays in flight,
                        // its attempt spent, until its claim expires; the
                        // rest of the batch carries on.
                        report.unsettled += 1;
                        unrecorded = true;
                        tracing::warn!(
                            work_id = claimed.work_id,
                            error = %e,
                            "recording a delivery's outcome failed; it is reclaimed once its claim expires"
                        );
                    }
                }
            }
            // The database refused an outcome: finish this batch, claim no more.
            if unrecorded {
                break;
            }
        }
        Ok(report)
    }

    /// Runs one delivery and decides what to record.
    async fn deliver(
        &self,
        claimed: &Claimed,
        handler: Option<&Registered>,
        claimed_at: Instant,
    ) -> Outcome {
        let options = &self.engine.options;
        let dead = |failure: Failure| Outcome {
            state: "DeadLettered",
            error: Some(failure),
            retry_after: Duration::ZERO,
        };
        let Some(handler) = handler else {
            return dead(Failure::reason(
                FailureKind::UnknownHandler,
                &format_args!(
                    "no handler {:?} is registered for type {}",
                    claimed.handler_id, claimed.entity_id
                ),
            ));
        };
        if claimed.scrubbed {
            return dead(Failure::reason(
                FailureKind::PayloadScrubbed,
                &"the payload was scrubbed after the payload retention",
            ));
        }
        let Some(payload) = claimed.payload.clone() else {
            return dead(Failure::reason(
                FailureKind::PayloadUndecodable,
                &"the row detail holds no payload for this handler",
            ));
        };
        let cancellation = CancellationToken::new();
        let deadline = claimed_at + options.claim_timeout.mul_f64(0.9);
        let ctx = HandlerContext {
            entity_id: claimed.entity_id,
            record_id: claimed.record_id.clone(),
            tenant_id: claimed.tenant_id,
            run_id: claimed.run_id,
            strategy: strategy(claimed.action.as_deref()),
            attempt: claimed.attempt,
            cancellation: cancellation.clone(),
            claimed_at,
            cancel_at: deadline,
        };
        // After the cancellation fires, the handler has until 0.95 of the
        // claim to stop on its own; then its future is dropped. Either way
        // the outcome is settled while the claim is still ours.
        let grace = claimed_at + options.claim_timeout.mul_f64(0.95);
        let delivery = handler.handler.deliver(&ctx, payload);
        tokio::pin!(delivery);
        let delivered = tokio::select! {
            biased;
            delivered = &mut delivery => Some(delivered),
            () = tokio::time::sleep_until(deadline.into()) => None,
        };
        if delivered.is_none() {
            cancellation.cancel();
            // Whatever it returns now, the attempt failed.
            let _ = tokio::time::timeout_at(grace.into(), &mut delivery).await;
        }
        // A handler that blocked its thread past the deadline returns late:
        // its attempt failed all the same.
        let delivered = match delivered {
            Some(d) if Instant::now() < deadline => d,
            _ => {
                cancellation.cancel();
                Delivered::Failed(Failure::reason(
                    FailureKind::HandlerTimeout,
                    &format_args!(
                        "handler {:?} ran past nine tenths of the claim timeout",
                        claimed.handler_id
                    ),
                ))
            }
        };
        match delivered {
            Delivered::Done => Outcome {
                state: "Succeeded",
                error: None,
                retry_after: Duration::ZERO,
            },
            Delivered::Undecodable(f) => dead(f),
            Delivered::Failed(f) if claimed.attempt >= options.max_attempts => dead(f),
            Delivered::Failed(f) => Outcome {
                state: "Pending",
                error: Some(f),
                retry_after: backoff(claimed.attempt),
            },
        }
    }

    /// Delivers until `shutdown` fires: [`Dispatcher::run_once`], then waits
    /// for a notification that a batch queued work (`LISTEN`), or
    /// `Options::poll_interval`, whichever comes first. A failed round is
    /// logged and retried after the poll interval. Returns once `shutdown`
    /// fires (a delivery under way finishes first).
    pub async fn run(&self, shutdown: CancellationToken) -> Result<(), Error> {
        let options = &self.engine.options;
        let schema = self.engine.schema.as_str().to_owned();
        // LISTEN is a wake-up only: a connection pooler can break it, and
        // the poll path keeps working without it.
        // Through a pooler in transaction mode a notification reaches
        // whichever client holds that server session next: poll only.
        let listen = if self.pooled() {
            Err(None)
        } else {
            PgListener::connect_with(&self.engine.pool)
                .await
                .map_err(Some)
        };
        let mut listener = match listen {
            Ok(mut l) => match l.listen(CHANNEL).await {
                Ok(()) => Some(l),
                Err(e) => {
                    tracing::warn!(error = %e, "LISTEN failed; the dispatcher polls");
                    None
                }
            },
            Err(Some(e)) => {
                tracing::warn!(error = %e, "LISTEN failed; the dispatcher polls");
                None
            }
            Err(None) => None,
        };
        while !shutdown.is_cancelled() {
            match self.run_once().await {
                Ok(report) if report.claimed > 0 => {
                    tracing::debug!(?report, "dispatched");
                    // More may be due at once.
                    if report.claimed >= u64::from(options.dispatch_limit) {
                        continue;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "a dispatch round failed; retrying after the poll interval")
                }
            }
            let wait = tokio::time::sleep(options.poll_interval);
            tokio::pin!(wait);
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return Ok(()),
                    () = &mut wait => break,
                    note = async {
                        match listener.as_mut() {
                            Some(l) => l.recv().await.map(Some),
                            None => std::future::pending().await,
                        }
                    } => match note {
                        Ok(Some(n)) if n.payload() == schema => break,
                        Ok(_) => {}
                        Err(e) => {
                            tracing::warn!(error = %e, "the notification connection failed; the dispatcher polls");
                            listener = None;
                        }
                    },
                }
            }
        }
        Ok(())
    }
}

/// One statement of the dispatcher's: on its session (a direct
/// connection), or in a transaction of its own ([`Dispatcher::step`]).
struct Step<'c> {
    conn: &'c mut PgConnection,
    tx: bool,
}

impl Step<'_> {
    fn conn(&mut self) -> &mut PgConnection {
        self.conn
    }

    /// Commits the statement's transaction when it has one and the
    /// statement succeeded; rolls it back when it failed.
    async fn end<T>(self, result: Result<T, sqlx::Error>) -> Result<T, sqlx::Error> {
        if !self.tx {
            return result;
        }
        match result {
            Ok(value) => {
                crate::sql::txn::commit(self.conn).await?;
                Ok(value)
            }
            Err(e) => {
                if let Err(r) = crate::sql::txn::rollback(self.conn).await {
                    tracing::warn!(error = %r, "rolling back a dispatcher transaction failed");
                }
                Err(e)
            }
        }
    }
}

fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}
