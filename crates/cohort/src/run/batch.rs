//! The batch loop of one entity. Each batch is one transaction that takes the
//! entity fence shared first, then runs either the range path (one statement)
//! or the locked path (select `FOR UPDATE`, compute values, mutate by
//! `(tableoid, ctid)`); see `statements.rs` and `docs/design.md`. Memory and
//! bind parameters are bounded by the batch size.

use chrono::{DateTime, Utc};
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use sqlx::postgres::types::Oid;
use sqlx::postgres::{PgArguments, PgRow};
use sqlx::query::Query;
use sqlx::{Acquire, PgConnection, Postgres, Row};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::cancelled;
use super::hold_filter::HoldFilter;
use super::markers::{self, ChangeMarker};
use super::order::{Order, Pages, Probe};
use super::statements::{EntitySql, P};
use crate::config::BatchOrder;
use crate::handlers::registry::Registered;
use crate::handlers::{CapturedRow, Dispatch};
use crate::holds::matter_set::MatterSet;
use crate::ledger::{AuditEvent, Delivery, Failure, FailureKind, RunKind};
use crate::model::AnonymiseMethod;
use crate::model::resolved::ResolvedEntity;
use crate::policy::Strategy;
use crate::schema::SchemaName;
use crate::sql::txn::{self, DEADLOCK_DETECTED, LOCK_NOT_AVAILABLE, LockWait, RunOwner, sqlstate};
use crate::sql::{AssertSqlSafe, PgTime, Statement};

type PgQuery<'q> = Query<'q, Postgres, PgArguments>;

/// How many times in a row a batch is retried after a deadlock before the
/// entity fails (the run goes on with the next). Each retry first waits
/// [`deadlock_backoff`], so the other transaction can finish.
const DEADLOCK_RETRIES: u32 = 10;

/// The wait before the `n`-th retry of a deadlocked batch: 10 ms doubling,
/// at most 1 s (about 5 s over all ten retries).
fn deadlock_backoff(n: u32) -> Duration {
    Duration::from_millis(10u64 << n.saturating_sub(1).min(7)).min(Duration::from_secs(1))
}

/// The longest run of locked-path batches after repeated lock waits
/// (`2^k` batches after the `k`-th, up to this).
const MAX_LOCKED_STREAK: u32 = 64;

/// Counts measured directly from the table.
#[derive(Debug, Clone, Default)]
pub(crate) struct Counts {
    pub(crate) eligible: u64,
    pub(crate) held: u64,
    pub(crate) null_anchor: u64,
    pub(crate) legal_minimum: u64,
    /// The oldest anchor of the eligible rows (past the cutoff, not held).
    pub(crate) oldest_eligible: Option<DateTime<Utc>>,
    /// The oldest anchor of the held rows past the cutoff.
    pub(crate) oldest_held: Option<DateTime<Utc>>,
    /// The live matters covering the type in the scope, oldest first.
    pub(crate) matters: Vec<Uuid>,
}

/// The values an entity's statements bind, for the whole loop.
#[derive(Debug, Clone)]
pub(crate) struct Values<'a> {
    pub(crate) entity: &'a ResolvedEntity,
    pub(crate) tenant: Option<Uuid>,
    pub(crate) cutoff: PgTime,
    pub(crate) subject: Option<&'a str>,
    pub(crate) batch_size: u32,
    /// The entity's summary row, which batches add their counts to.
    pub(crate) summary: i64,
    pub(crate) run: Uuid,
    pub(crate) ledger_tenant: Uuid,
    pub(crate) strategy: Strategy,
    /// The type's row handlers, in rank order (empty for none, and for
    /// preview and dry runs).
    pub(crate) handlers: &'a [Registered],
    /// The schema of Cohort's tables.
    pub(crate) schema: &'a SchemaName,
    /// The run's owner, which each batch's transaction checks (`None` for
    /// previews, which write nothing).
    pub(crate) owner: Option<RunOwner<'a>>,
    /// Whether the batch statements may be named and cached by the
    /// connection ([`crate::ConnectionMode::caches_statements`]).
    pub(crate) cache: bool,
    /// The run's kind, when each batch writes a change-stream marker
    /// (`Options::change_stream_markers`; `None` for previews and dry runs).
    pub(crate) marker: Option<RunKind>,
    /// A stage of a staged rule's values (`None` for a single-stage rule).
    pub(crate) stage: Option<StageValues>,
    /// Disposition review's values (`None` unless the stage is under
    /// review, contract DR1).
    pub(crate) review: Option<ReviewValues>,
    /// The event type the rule counts its period from (contract SL4).
    pub(crate) event: Option<&'a str>,
}

/// The values disposition review binds (contracts DR1, DR2; see
/// `run::review`).
#[derive(Debug, Clone)]
pub(crate) struct ReviewValues {
    /// The batch carried out, or frozen into ([`P::Batch`]).
    pub(crate) batch: Uuid,
    /// The rule's stage ([`P::ReviewStage`]).
    pub(crate) stage: i32,
    /// The rule's content hash ([`P::RuleHash`]).
    pub(crate) rule_hash: Vec<u8>,
    /// The run's logical time ([`P::LogicalNow`]).
    pub(crate) now: PgTime,
}

/// The values a stage of a staged rule binds (contract SL1).
#[derive(Debug, Clone, Copy)]
pub(crate) struct StageValues {
    /// When the run's stages began, by the database clock ([`P::StageBefore`]).
    pub(crate) before: PgTime,
    /// The legal minimum's cutoff on the anchor ([`P::LegalCutoff`]).
    pub(crate) legal_cutoff: PgTime,
}

impl StageValues {
    /// A stage's values when nothing was stamped by a run (previews, the
    /// backlog): every stamp counts.
    pub(crate) fn preview(stage: &super::plan::StagePlan) -> StageValues {
        StageValues {
            before: PgTime::INFINITY,
            legal_cutoff: stage
                .legal_cutoff
                .map_or(PgTime::INFINITY, |c| PgTime::cutoff(&c)),
        }
    }
}

/// Where the next batch starts: after this key.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Cursor {
    /// The anchor (sweeps only; erasures order by the record id alone).
    anchor: PgTime,
    /// The record id as text.
    key: String,
}

/// Values of one locked-path batch.
#[derive(Debug, Default)]
struct Located {
    oids: Vec<Oid>,
    tids: Vec<String>,
    customs: Vec<Vec<Option<String>>>,
    /// Rows changed with handler snapshots: record ids and JSON objects.
    payload_rids: Vec<String>,
    payloads: Vec<String>,
}

fn count(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// How many range statements in a row may find the type's holds written
/// since the filter was read before the entity fails.
const MAX_STALE_FILTERS: u32 = 1_000;

/// Binds a statement that needs no cursor nor locked rows (a count, a
/// subject access export's rows).
pub(crate) fn bind_values<'q>(
    statement: &'q Statement<P>,
    v: &Values<'_>,
    matters: &MatterSet,
) -> PgQuery<'q> {
    bind(statement, v, None, None, matters)
}

/// Binds a keyset statement (a freeze, contract DR1) after `after`, the
/// previous batch's upper key `(anchor, record id)`.
pub(crate) fn bind_after<'q>(
    statement: &'q Statement<P>,
    v: &Values<'_>,
    after: Option<(PgTime, String)>,
    matters: &MatterSet,
) -> PgQuery<'q> {
    let cursor = after.map(|(anchor, key)| Cursor { anchor, key });
    bind(statement, v, cursor.as_ref(), None, matters)
}

/// Binds `statement`'s parameters in order, with the type's matters.
fn bind<'q>(
    statement: &'q Statement<P>,
    v: &Values<'_>,
    cursor: Option<&Cursor>,
    located: Option<&Located>,
    matters: &MatterSet,
) -> PgQuery<'q> {
    bind_with(statement, v, cursor, located, None, matters)
}

/// [`bind`], with the batch loop's filter of the type's holds.
fn bind_with<'q>(
    statement: &'q Statement<P>,
    v: &Values<'_>,
    cursor: Option<&Cursor>,
    located: Option<&Located>,
    filter: Option<&HoldFilter>,
    matters: &MatterSet,
) -> PgQuery<'q> {
    bind_all(statement, v, cursor, located, filter, None, matters)
}

/// Binds a physical-order batch's statement at `pages`.
fn bind_pages<'q>(
    statement: &'q Statement<P>,
    v: &Values<'_>,
    pages: &Pages,
    filter: &HoldFilter,
    matters: &MatterSet,
) -> PgQuery<'q> {
    bind_all(statement, v, None, None, Some(filter), Some(pages), matters)
}

/// Binds `statement`'s parameters, by role, in order.
fn bind_all<'q>(
    statement: &'q Statement<P>,
    v: &Values<'_>,
    cursor: Option<&Cursor>,
    located: Option<&Located>,
    filter: Option<&HoldFilter>,
    pages: Option<&Pages>,
    matters: &MatterSet,
) -> PgQuery<'q> {
    // The hot path's statements, named when the connection keeps them.
    let mut q = crate::sql::query(AssertSqlSafe(statement.text.as_str())).persistent(v.cache);
    for p in &statement.params {
        q = match *p {
            P::Tenant => q.bind(v.tenant),
            P::Cutoff => q.bind(v.cutoff),
            P::Entity => q.bind(v.entity.entity_id),
            P::Subject => q.bind(v.subject.map(str::to_owned)),
            P::Offset => q.bind(i64::from(v.batch_size) - 1),
            P::Limit => q.bind(i64::from(v.batch_size)),
            P::LoAnchor => q.bind(cursor.map(|c| c.anchor)),
            P::LoKey => q.bind(cursor.map(|c| c.key.clone())),
            P::Literal(i) => q.bind(match v.entity.anonymise.get(i).map(|a| a.method) {
                Some(AnonymiseMethod::Literal(text)) => Some(text),
                _ => None,
            }),
            P::Summary => q.bind(v.summary),
            P::Run => q.bind(v.run),
            P::EntityType => q.bind(v.entity.type_name()),
            P::LedgerTenant => q.bind(v.ledger_tenant),
            P::Action => q.bind(v.strategy.as_str()),
            P::Oids => q.bind(located.map(|l| l.oids.clone()).unwrap_or_default()),
            P::Tids => q.bind(located.map(|l| l.tids.clone()).unwrap_or_default()),
            P::Custom(i) => q.bind(
                located
                    .and_then(|l| l.customs.get(i).cloned())
                    .unwrap_or_default(),
            ),
            P::PayloadRids => q.bind(located.map(|l| l.payload_rids.clone()).unwrap_or_default()),
            P::Payloads => q.bind(located.map(|l| l.payloads.clone()).unwrap_or_default()),
            P::HandlerIds => q.bind(v.handlers.iter().map(|h| h.id.clone()).collect::<Vec<_>>()),
            P::HandlerRanks => q.bind(v.handlers.iter().map(|h| h.rank).collect::<Vec<_>>()),
            P::HandlerAfter => q.bind(
                v.handlers
                    .iter()
                    .map(|h| h.dispatch == Dispatch::AfterSweepSettled)
                    .collect::<Vec<_>>(),
            ),
            P::Schema => q.bind(v.schema.as_str().to_owned()),
            P::HoldBits => q.bind(filter.map(|f| f.bits.clone()).unwrap_or_default()),
            P::HoldMask => q.bind(filter.map_or(-1, |f| f.mask)),
            P::HoldsVersion => q.bind(filter.and_then(|f| f.version)),
            P::Matter(p) => matters.bind(q, p),
            P::StageBefore => q.bind(v.stage.map(|s| s.before)),
            P::LegalCutoff => q.bind(v.stage.map(|s| s.legal_cutoff)),
            P::EventType => q.bind(v.event.map(str::to_owned)),
            P::SliceValues => q.bind(
                v.entity
                    .slice
                    .as_ref()
                    .map(|s| s.values.clone())
                    .unwrap_or_default(),
            ),
            P::ArchiveTable => q.bind(v.entity.archive.as_ref().map(|a| a.entity.table.unquoted())),
            P::Batch => q.bind(v.review.as_ref().map(|r| r.batch)),
            P::ReviewStage => q.bind(v.review.as_ref().map(|r| r.stage)),
            P::RuleHash => q.bind(v.review.as_ref().map(|r| r.rule_hash.clone())),
            P::LogicalNow => q.bind(v.review.as_ref().map(|r| r.now)),
            P::LoTid => q.bind(pages.map(|p| p.lo.clone())),
            P::EndTid => q.bind(pages.map(Pages::end_tid)),
            P::LastTid => q.bind(pages.map(Pages::last_tid)),
        };
    }
    q
}

/// Eligible (not held), held and NULL-anchor rows, measured in one statement.
pub(crate) async fn measure(
    conn: &mut PgConnection,
    sql: &EntitySql,
    v: &Values<'_>,
) -> Result<Counts, sqlx::Error> {
    let mut tx = conn.begin().await?;
    // The pinned search_path, and a generic plan: after a purge the anchor
    // index is full of dead entries, and planning with the actual cutoff
    // would probe them to estimate it.
    crate::sql::query(
        "SELECT pg_catalog.set_config('search_path', 'pg_catalog, ' OPERATOR(pg_catalog.||) \
                pg_catalog.current_setting('search_path'), true), \
                pg_catalog.set_config('plan_cache_mode', 'force_generic_plan', true)",
    )
    .execute(&mut *tx)
    .await?;
    let matters = MatterSet::read_in(&mut tx, v.schema, v.entity, v.tenant, None, None).await?;
    let row = bind(&sql.count, v, None, None, &matters)
        .fetch_one(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(Counts {
        eligible: count(row.try_get("eligible")?),
        held: count(row.try_get("held")?),
        null_anchor: count(row.try_get("null_anchor")?),
        legal_minimum: count(row.try_get("legal_minimum")?),
        oldest_eligible: row.try_get("oldest_eligible")?,
        oldest_held: row.try_get("oldest_held")?,
        matters: matters.ids,
    })
}

/// What a batch loop knows of the type's holds and matters, read at one
/// holds version: the range path's filter of its holds, and its matters.
struct Guard {
    holds: HoldFilter,
    matters: MatterSet,
}

impl Guard {
    /// Reads both at the same holds version (a hold or matter written
    /// between the two reads makes it read again).
    async fn read(conn: &mut PgConnection, v: &Values<'_>) -> Result<Guard, sqlx::Error> {
        let mut tries = 0;
        loop {
            let matters = MatterSet::read(conn, v.schema, v.entity, v.tenant, None).await?;
            let mut holds = HoldFilter::read(conn, v.schema, v.entity.entity_id, v.tenant).await?;
            tries += 1;
            if holds.version == matters.version {
                return Ok(Guard { holds, matters });
            }
            if tries >= 100 {
                // The batch checks the version the matters were read at
                // (the older one), so it finds them stale and reads again,
                // never using matters older than the holds version it sees.
                holds.version = matters.version;
                return Ok(Guard { holds, matters });
            }
        }
    }

    /// Whether the type's holds version is still the one this was read at
    /// (one primary-key probe).
    async fn fresh(&self, conn: &mut PgConnection, v: &Values<'_>) -> Result<bool, sqlx::Error> {
        let version: Option<i64> = crate::sql::query_scalar(AssertSqlSafe(format!(
            "SELECT r.holds_version FROM {} AS r WHERE r.retained_entity_id = $1",
            v.schema.table("retention_entities")
        )))
        .bind(v.entity.entity_id)
        .fetch_optional(&mut *conn)
        .await?;
        Ok(version == self.matters.version)
    }
}

/// Everything one entity's batch loop needs.
pub(crate) struct EntityBatches<'a> {
    /// Rows the entity already changed before its batches (dropped
    /// partitions): the loop's totals start there.
    pub(crate) start: u64,
    pub(crate) sql: &'a EntitySql,
    pub(crate) values: Values<'a>,
    /// The longest a batch waits for the entity fence.
    pub(crate) fence_wait: Duration,
    /// The longest a range statement waits for a row another transaction holds.
    pub(crate) lock_wait: Duration,
    pub(crate) cancellation: &'a Option<CancellationToken>,
    /// The order the range batches take ([`crate::Options::batch_order`]).
    pub(crate) order: BatchOrder,
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

/// Which path a batch takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    Range,
    Locked,
}

/// Where the next batch starts.
enum Next {
    /// After this key (anchor order, and the locked path).
    Key(Cursor),
    /// At this position of a physical-order pass.
    Pages(Pages),
}

/// What one committed batch did.
struct Batch {
    affected: u64,
    /// The changed rows' record ids, when the rule audits per row.
    ids: Vec<String>,
    /// Whether rows may remain after this batch.
    more: bool,
}

/// Why a batch did not commit (it was rolled back).
enum BatchError {
    /// The range statement met a row lock (lock wait or deadlock): redo the
    /// range on the locked path.
    Busy,
    /// The locked path met a deadlock: retry it.
    Deadlock(sqlx::Error),
    /// A hold was written for the type since the filter was read: the
    /// statement changed nothing; read the filter again and redo the range.
    StaleFilter,
    /// The entity fence was not granted within the fence wait.
    Fence(sqlx::Error),
    /// Anything else: the entity fails.
    Failed(Failure),
}

fn db(e: sqlx::Error) -> BatchError {
    BatchError::Failed(Failure::from_sqlx(&e))
}

impl EntityBatches<'_> {
    /// Runs batches until no candidate is left, the run is cancelled or a batch fails.
    pub(crate) async fn run(&self, conn: &mut PgConnection, delivery: &mut Delivery) -> LoopEnd {
        let mut affected = self.start;
        let mut cursor: Option<Cursor> = None;
        // Batches to run on the locked path before trying a range again.
        let mut locked_streak = 0u32;
        let mut lock_waits = 0u32;
        let mut deadlocks = 0u32;
        let mut guard: Option<Guard> = None;
        // Chosen once, after the first read of the holds and matters.
        let mut order: Option<Order> = None;
        let mut stale = 0u32;
        // Committed batches, for the change-stream markers' numbers.
        let mut committed = 0u64;
        loop {
            if cancelled(self.cancellation) {
                return LoopEnd::Cancelled(affected);
            }
            let path = if self.sql.range.is_some() && locked_streak == 0 {
                Path::Range
            } else {
                Path::Locked
            };
            if guard.is_none() {
                match Guard::read(conn, &self.values).await {
                    Ok(g) => {
                        tracing::debug!(
                            entity = %self.values.entity.entity_id,
                            holds = g.holds.holds,
                            bits = g.holds.bits.len() * 8,
                            matters = g.matters.matters,
                            "read the type's holds filter and matters"
                        );
                        guard = Some(g);
                    }
                    Err(e) => return LoopEnd::Failed(affected, Failure::from_sqlx(&e)),
                }
            }
            let Some(g) = guard.as_ref() else {
                continue;
            };
            let order = match &mut order {
                Some(o) => o,
                None => {
                    let v = &self.values;
                    let probe = self.sql.pages.as_ref().map(|_| Probe {
                        table: v.entity.table.to_string(),
                        entity: v.entity.entity_id,
                        batch_size: v.batch_size,
                        estimate: bind_values(&self.sql.estimate, v, &g.matters),
                        sample: bind_values(&self.sql.sample, v, &g.matters),
                    });
                    order.insert(super::order::choose(conn, probe, self.order).await)
                }
            };
            let outcome = self
                .batch(conn, &mut cursor, order, path, g, committed + 1)
                .await;
            let batch = match outcome {
                Ok(batch) => {
                    committed += 1;
                    deadlocks = 0;
                    stale = 0;
                    if path == Path::Locked {
                        locked_streak = locked_streak.saturating_sub(1);
                    }
                    batch
                }
                Err(BatchError::StaleFilter) => {
                    stale += 1;
                    if stale > MAX_STALE_FILTERS {
                        return LoopEnd::Failed(
                            affected,
                            Failure::reason(
                                FailureKind::Database,
                                &"holds of the type were written before every one of 1,000 batches in a row",
                            ),
                        );
                    }
                    guard = None;
                    continue;
                }
                Err(BatchError::Busy) => {
                    crate::metrics::lock_wait_fallback();
                    if matches!(order, Order::Pages(_)) {
                        // The locked path walks the anchor index: the rest
                        // of the type's run takes anchor order from the
                        // start (the rows the pages' batches changed are no
                        // longer eligible).
                        *order = Order::Anchor;
                        cursor = None;
                    }
                    // Do this range the careful way, and keep to the careful
                    // way longer each time rows turn out to be locked.
                    lock_waits = lock_waits.saturating_add(1);
                    locked_streak = 1u32
                        .checked_shl(lock_waits.min(31))
                        .unwrap_or(u32::MAX)
                        .min(MAX_LOCKED_STREAK);
                    tracing::debug!(
                        entity = %self.values.entity.entity_id,
                        locked_batches = locked_streak,
                        "a range met a locked row; taking the locked path"
                    );
                    continue;
                }
                Err(BatchError::Deadlock(e)) => {
                    deadlocks += 1;
                    if deadlocks > DEADLOCK_RETRIES {
                        return LoopEnd::Failed(affected, Failure::from_sqlx(&e));
                    }
                    tracing::debug!(
                        entity = %self.values.entity.entity_id,
                        attempt = deadlocks,
                        "a batch was chosen as a deadlock victim; retrying it"
                    );
                    tokio::time::sleep(deadlock_backoff(deadlocks)).await;
                    continue;
                }
                Err(BatchError::Fence(e)) => {
                    crate::metrics::fence_timeout();
                    let failure = Failure::logged(
                        FailureKind::FenceTimeout,
                        sqlstate(&e),
                        &format_args!(
                            "the entity fence of {} was not granted within {:?}: a transaction \
                             that created a hold is still open ({e})",
                            self.values.entity.type_name(),
                            self.fence_wait
                        ),
                    );
                    return LoopEnd::Failed(affected, failure);
                }
                Err(BatchError::Failed(f)) => return LoopEnd::Failed(affected, f),
            };
            affected += batch.affected;
            self.deliver(delivery, &batch, affected).await;
            if !batch.more {
                return LoopEnd::Drained(affected);
            }
        }
    }

    /// The events of one committed batch.
    async fn deliver(&self, delivery: &mut Delivery, batch: &Batch, total: u64) {
        let v = &self.values;
        if batch.affected > 0 {
            delivery
                .deliver(&AuditEvent::EntityProgress {
                    run_id: v.run,
                    entity_id: v.entity.entity_id,
                    strategy: v.strategy,
                    batch_affected: batch.affected,
                    total_affected: total,
                })
                .await;
        }
        for record_id in &batch.ids {
            delivery
                .deliver(&AuditEvent::RowDetail {
                    run_id: v.run,
                    entity_id: v.entity.entity_id,
                    record_id: record_id.clone(),
                    tenant_id: v.ledger_tenant,
                    action: v.strategy,
                })
                .await;
        }
    }

    /// One batch (number `number` of the type in this run), committed, or
    /// rolled back with the reason.
    async fn batch(
        &self,
        conn: &mut PgConnection,
        cursor: &mut Option<Cursor>,
        order: &mut Order,
        path: Path,
        guard: &Guard,
        number: u64,
    ) -> Result<Batch, BatchError> {
        let wait = match path {
            Path::Range => LockWait::Bounded(self.lock_wait),
            Path::Locked => LockWait::Session,
        };
        let fencing = std::time::Instant::now();
        let fenced = txn::begin_fenced(
            conn,
            self.values.entity.fence,
            self.fence_wait,
            wait,
            self.values.owner.as_ref(),
        )
        .await;
        crate::metrics::fence_wait(fencing.elapsed().as_secs_f64());
        if let Err(e) = fenced {
            if let Err(rollback) = txn::rollback(conn).await {
                tracing::warn!(error = %rollback, "rolling back a batch that could not begin failed");
            }
            return Err(match sqlstate(&e).as_deref() {
                Some(LOCK_NOT_AVAILABLE) => BatchError::Fence(e),
                // The run was settled by another process after its lease
                // expired: the entity's summary write then finds it too and
                // the run stops.
                Some(txn::LEASE_LOST) if self.values.owner.is_some() => {
                    BatchError::Failed(Failure::reason(
                        FailureKind::Abandoned,
                        &format_args!(
                            "run {} was settled by another process after its lease expired",
                            self.values.run
                        ),
                    ))
                }
                _ => db(e),
            });
        }
        let started = std::time::Instant::now();
        let mut result = match (path, &*order) {
            (Path::Range, Order::Pages(pages)) => self
                .pages(conn, pages, guard)
                .await
                .map(|(batch, next)| (batch, Some(Next::Pages(next)))),
            (Path::Range, Order::Anchor) => self
                .range(conn, cursor.as_ref(), guard)
                .await
                .map(|(batch, next)| (batch, next.map(Next::Key))),
            (Path::Locked, _) => self
                .locked(conn, cursor.as_ref(), guard)
                .await
                .map(|(batch, next)| (batch, next.map(Next::Key))),
        };
        if let (Ok((batch, _)), Some(kind)) = (&result, self.values.marker)
            && batch.affected > 0
        {
            let v = &self.values;
            let marker = ChangeMarker {
                batch: Some(number),
                ..ChangeMarker::new(v.run, kind, v.entity, v.strategy, batch.affected)
            };
            if let Err(e) = markers::emit(conn, &marker).await {
                result = Err(db(e));
            }
        }
        match result {
            Ok((batch, next)) => {
                txn::commit(conn).await.map_err(db)?;
                match next {
                    Some(Next::Key(next)) => *cursor = Some(next),
                    Some(Next::Pages(next)) => *order = Order::Pages(next),
                    None => {}
                }
                tracing::debug!(
                    rows = batch.affected,
                    ms = started.elapsed().as_secs_f64() * 1000.0,
                    path = ?path,
                    "batch committed"
                );
                crate::metrics::batch(
                    self.values.strategy,
                    batch.affected,
                    started.elapsed().as_secs_f64(),
                );
                Ok(batch)
            }
            Err(e) => {
                if let Err(rollback) = txn::rollback(conn).await {
                    tracing::warn!(error = %rollback, "rolling back a failed batch failed");
                }
                Err(e)
            }
        }
    }

    /// The range path: one statement finds the upper key and mutates the range.
    async fn range(
        &self,
        conn: &mut PgConnection,
        cursor: Option<&Cursor>,
        guard: &Guard,
    ) -> Result<(Batch, Option<Cursor>), BatchError> {
        let range = if guard.matters.matters > 0 {
            // The planner cannot estimate how many rows the matters cover,
            // and with a low guess it sorts every eligible row to find the
            // upper key, and scans the whole table for the batch's range,
            // instead of walking the anchor index: forbid both for this
            // batch's statement (the index gives the order and the range;
            // docs/performance.md, "Matter holds").
            crate::sql::query(
                "SELECT pg_catalog.set_config('enable_sort', 'off', true), \
                        pg_catalog.set_config('enable_seqscan', 'off', true)",
            )
            .execute(&mut *conn)
            .await
            .map_err(db)?;
            &self.sql.range_matters
        } else {
            &self.sql.range
        };
        let Some(range) = range else {
            return Err(BatchError::Failed(Failure::reason(
                FailureKind::Database,
                &"no range statement for this entity",
            )));
        };
        let statement = &range[usize::from(cursor.is_some())];
        let row = match bind_with(
            statement,
            &self.values,
            cursor,
            None,
            Some(&guard.holds),
            &guard.matters,
        )
        .fetch_one(&mut *conn)
        .await
        {
            Ok(row) => row,
            Err(e) => {
                return Err(match sqlstate(&e).as_deref() {
                    Some(LOCK_NOT_AVAILABLE | DEADLOCK_DETECTED) => BatchError::Busy,
                    _ => db(e),
                });
            }
        };
        let fresh: Option<bool> = row.try_get("fresh").map_err(db)?;
        if fresh != Some(true) {
            return Err(BatchError::StaleFilter);
        }
        let hi_anchor: Option<PgTime> = row.try_get("hi_anchor").map_err(db)?;
        let hi_key: Option<String> = row.try_get("hi_key").map_err(db)?;
        let batch = Batch {
            affected: count(row.try_get("affected").map_err(db)?),
            ids: self.ids(&row)?,
            more: hi_key.is_some(),
        };
        let next = match (hi_anchor, hi_key) {
            (Some(anchor), Some(key)) => Some(Cursor { anchor, key }),
            _ => None,
        };
        Ok((batch, next))
    }

    /// The range path in physical order (`run::order`): one statement
    /// changes the eligible rows of the next window of pages, up to a batch.
    async fn pages(
        &self,
        conn: &mut PgConnection,
        pages: &Pages,
        guard: &Guard,
    ) -> Result<(Batch, Pages), BatchError> {
        let Some(statement) = &self.sql.pages else {
            return Err(BatchError::Failed(Failure::reason(
                FailureKind::Database,
                &"no physical-order statement for this entity",
            )));
        };
        let row = match bind_pages(statement, &self.values, pages, &guard.holds, &guard.matters)
            .fetch_one(&mut *conn)
            .await
        {
            Ok(row) => row,
            Err(e) => {
                return Err(match sqlstate(&e).as_deref() {
                    Some(LOCK_NOT_AVAILABLE | DEADLOCK_DETECTED) => BatchError::Busy,
                    _ => db(e),
                });
            }
        };
        let fresh: Option<bool> = row.try_get("fresh").map_err(db)?;
        if fresh != Some(true) {
            return Err(BatchError::StaleFilter);
        }
        let hi: Option<String> = row.try_get("hi_tid").map_err(db)?;
        let (next, more) = pages.next(hi);
        let batch = Batch {
            affected: count(row.try_get("affected").map_err(db)?),
            ids: self.ids(&row)?,
            more,
        };
        Ok((batch, next))
    }

    /// The locked path: lock the batch's rows with their values, compute
    /// what the mutation needs, mutate them by `(tableoid, ctid)`.
    async fn locked(
        &self,
        conn: &mut PgConnection,
        cursor: Option<&Cursor>,
        guard: &Guard,
    ) -> Result<(Batch, Option<Cursor>), BatchError> {
        // Under the fence no hold or matter of the type can be written: if
        // none was since the matters were read, they are the ones to check.
        if !guard.fresh(conn, &self.values).await.map_err(db)? {
            return Err(BatchError::StaleFilter);
        }
        let statement = &self.sql.candidates[usize::from(cursor.is_some())];
        let rows = match bind(statement, &self.values, cursor, None, &guard.matters)
            .fetch_all(&mut *conn)
            .await
        {
            Ok(rows) => rows,
            Err(e) if sqlstate(&e).as_deref() == Some(DEADLOCK_DETECTED) => {
                return Err(BatchError::Deadlock(e));
            }
            Err(e) => return Err(db(e)),
        };
        let Some(last) = rows.last() else {
            return Ok((
                Batch {
                    affected: 0,
                    ids: Vec::new(),
                    more: false,
                },
                None,
            ));
        };
        let next = Cursor {
            // Erasure candidates may have a NULL anchor; their keyset is the
            // record id alone.
            anchor: last
                .try_get::<Option<PgTime>, _>("anchor")
                .map_err(db)?
                .unwrap_or(PgTime::NEG_INFINITY),
            key: last.try_get("record_id").map_err(db)?,
        };
        let mut located = Located {
            oids: Vec::with_capacity(rows.len()),
            tids: Vec::with_capacity(rows.len()),
            customs: vec![Vec::with_capacity(rows.len()); self.sql.customs],
            ..Located::default()
        };
        // Row handlers capture first: a row whose capture fails is left
        // unchanged, its work dead-lettered once, and the cursor still moves
        // past it, so the rest of the run never sees it again.
        let kept = if self.sql.capture {
            self.capture(conn, &rows, &mut located).await?
        } else {
            rows.iter().collect()
        };
        for r in &kept {
            located.oids.push(r.try_get("o").map_err(db)?);
            located.tids.push(r.try_get("c").map_err(db)?);
        }
        self.anonymise(&kept, &mut located)?;
        let row = match bind(
            &self.sql.mutate,
            &self.values,
            None,
            Some(&located),
            &guard.matters,
        )
        .fetch_one(&mut *conn)
        .await
        {
            Ok(row) => row,
            Err(e) if sqlstate(&e).as_deref() == Some(DEADLOCK_DETECTED) => {
                return Err(BatchError::Deadlock(e));
            }
            Err(e) => return Err(db(e)),
        };
        let batch = Batch {
            affected: count(row.try_get("affected").map_err(db)?),
            ids: self.ids(&row)?,
            more: rows.len() >= self.values.batch_size as usize,
        };
        Ok((batch, Some(next)))
    }

    /// Runs every handler's capture on every row; returns the rows to
    /// change, with their snapshots bound in `located`, and dead-letters the
    /// work of the others in the batch's transaction.
    async fn capture<'r>(
        &self,
        conn: &mut PgConnection,
        rows: &'r [PgRow],
        located: &mut Located,
    ) -> Result<Vec<&'r PgRow>, BatchError> {
        let v = &self.values;
        let mut kept = Vec::with_capacity(rows.len());
        let (mut rids, mut handlers, mut ranks, mut errors) = (vec![], vec![], vec![], vec![]);
        for r in rows {
            let record_id: String = r.try_get("record_id").map_err(db)?;
            let captured: serde_json::Value = r.try_get("captured").map_err(db)?;
            let columns = match captured {
                serde_json::Value::Object(columns) => columns,
                _ => serde_json::Map::new(),
            };
            let row = CapturedRow::new(record_id.clone(), columns);
            let mut snapshots = serde_json::Map::new();
            let mut failed = false;
            for h in v.handlers {
                match h.handler.capture(&row) {
                    Ok(snapshot) => {
                        snapshots.insert(h.id.clone(), snapshot);
                    }
                    Err(failure) => {
                        failed = true;
                        rids.push(record_id.clone());
                        handlers.push(h.id.clone());
                        ranks.push(h.rank);
                        errors.push(failure.to_string());
                    }
                }
            }
            if !failed {
                located.payload_rids.push(record_id);
                located
                    .payloads
                    .push(serde_json::Value::Object(snapshots).to_string());
                kept.push(r);
            }
        }
        if !rids.is_empty() {
            crate::sql::query(AssertSqlSafe(
                crate::handlers::QueueSql::dead_letter_captures(v.schema),
            ))
            .bind(v.run)
            .bind(v.entity.entity_id)
            .bind(v.ledger_tenant)
            .bind(&rids)
            .bind(&handlers)
            .bind(&ranks)
            .bind(&errors)
            .execute(&mut *conn)
            .await
            .map_err(db)?;
            tracing::warn!(
                entity = %v.entity.entity_id,
                rows = rids.len(),
                "row handlers' capture failed; those rows are left for the next run and their work dead-lettered"
            );
        }
        Ok(kept)
    }

    /// The custom anonymisers' replacement values, column by column.
    fn anonymise(&self, rows: &[&PgRow], located: &mut Located) -> Result<(), BatchError> {
        if self.values.strategy != Strategy::Anonymise {
            return Ok(());
        }
        // The same columns, in the same order, as the statements' `v{i}`.
        let customs = self
            .values
            .entity
            .anonymise
            .iter()
            .filter_map(|a| a.computed.as_ref().map(|f| (a, f)));
        for (i, (anonymised, custom)) in customs.enumerate() {
            let column = format!("v{i}");
            let Some(values) = located.customs.get_mut(i) else {
                continue;
            };
            for r in rows {
                let original: Option<String> = r.try_get(column.as_str()).map_err(db)?;
                let replaced = std::panic::catch_unwind(AssertUnwindSafe(|| {
                    custom.anonymise(original.as_deref())
                }))
                .map_err(|_| {
                    BatchError::Failed(Failure::reason(
                        FailureKind::AnonymiserPanic,
                        &format_args!(
                            "the anonymiser of column {} panicked",
                            anonymised.column.name
                        ),
                    ))
                })?;
                values.push(replaced);
            }
        }
        Ok(())
    }

    /// The changed rows' record ids (per-row audit only).
    fn ids(&self, row: &PgRow) -> Result<Vec<String>, BatchError> {
        if !self.sql.per_row {
            return Ok(Vec::new());
        }
        let ids: Option<Vec<String>> = row.try_get("ids").map_err(db)?;
        Ok(ids.unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlock_retries_back_off_to_a_second_and_stay_bounded() {
        assert_eq!(deadlock_backoff(1), Duration::from_millis(10));
        assert_eq!(deadlock_backoff(2), Duration::from_millis(20));
        assert_eq!(deadlock_backoff(8), Duration::from_secs(1));
        assert_eq!(deadlock_backoff(u32::MAX), Duration::from_secs(1));
        let total: Duration = (1..=DEADLOCK_RETRIES).map(deadlock_backoff).sum();
        assert!(total < Duration::from_secs(6), "{total:?}");
    }
}
