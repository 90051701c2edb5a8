//! Partition-aware purge (contract PT1, PT2): for a retained table
//! partitioned by `RANGE` on its anchor column alone, a purge drops the
//! partitions that lie wholly before the cutoff, hold no held row and no row
//! of another tenant, instead of deleting their rows batch by batch. Every
//! other partition is left to the ordinary batches, which run afterwards.
//!
//! The partitions and their bounds are read from the catalog on every run
//! (pg_partman and hosts add and drop partitions all the time). A bound is
//! never interpreted in Rust: the upper bound's literal, as
//! `pg_get_expr(relpartbound)` prints it, is read back as a `timestamptz` by
//! the server, in the same statement, and compared there with the cutoff.
//!
//! One partition, one transaction:
//!
//! 1. the entity fence, **exclusively** (bounded by `fence_wait`): batches and
//!    hold creations of the type wait; a hold committed before the fence was
//!    granted is visible to every statement after it;
//! 2. `LOCK TABLE <partition> IN SHARE ROW EXCLUSIVE MODE` (bounded by
//!    `lock_wait`): readers go on, writers to that partition wait, so the
//!    count below is exactly what is dropped;
//! 3. the partition is looked up again (still attached to the table, still
//!    wholly expired), counted exactly, and probed: any held row (each
//!    active hold looks its row up by key), any row of another tenant, any
//!    row whose anchor is not before the cutoff;
//! 4. when it may go: the row details in bulk (`INSERT ... SELECT`, when the
//!    rule audits per row), the summary's count, then
//!    `ALTER TABLE <table> DETACH PARTITION <partition>` and
//!    `DROP TABLE <partition>`, which take `ACCESS EXCLUSIVE` on the table,
//!    the partition and the `DEFAULT` partition if any, until the commit
//!    right after them (bounded by `lock_wait`). `DETACH ... CONCURRENTLY` cannot run inside a
//!    transaction block, and the ledger's rows must commit with the drop.
//!
//! A lock that is not granted in time, or a drop PostgreSQL refuses (no
//! ownership, a dependent view), rolls the transaction back and leaves the
//! partition to the batches: nothing is lost, it is only slower.

use sqlx::postgres::types::Oid;
use sqlx::{PgConnection, Row};
use uuid::Uuid;

use super::cancelled;
use super::markers::{self, ChangeMarker};
use crate::holds::matter_set::{MatterParam, MatterSet, matter_held_numbered};
use crate::ledger::{AuditEvent, Delivery, Failure, FailureKind, Ledger};
use crate::model::resolved::ResolvedEntity;
use crate::policy::Strategy;
use crate::schema::SchemaName;
use crate::sql::predicates::hold_active_at;
use crate::sql::txn::{self, FenceMode, LOCK_NOT_AVAILABLE, LockWait, sqlstate};
use crate::sql::{AssertSqlSafe, Ident, PIN_SEARCH_PATH, PgTime, QualifiedName};

pub use crate::ledger::partitions::{PartitionDecision, PartitionPlan, SweepReason};

/// A partition as the catalog has it now.
#[derive(Debug, Clone)]
struct Partition {
    oid: Oid,
    schema: String,
    name: String,
    leaf: bool,
    default: bool,
    /// Its upper bound is at or before the cutoff.
    expired: bool,
}

impl Partition {
    fn display(&self) -> String {
        format!("{}.{}", self.schema, self.name)
    }

    fn relation(&self) -> Option<QualifiedName> {
        Some(QualifiedName::new(
            Ident::new(&self.schema).ok()?,
            Ident::new(&self.name).ok()?,
        ))
    }

    /// Why it cannot be dropped, before looking at its rows.
    fn static_reason(&self) -> Option<SweepReason> {
        if self.default {
            Some(SweepReason::Default)
        } else if !self.leaf {
            Some(SweepReason::NotALeaf)
        } else if !self.expired {
            Some(SweepReason::NotExpired)
        } else {
            None
        }
    }
}

/// The partitions of `e`'s table, when it is still partitioned by `RANGE` on
/// its anchor alone (else none), each with whether its upper bound is at or
/// before `cutoff`. `$4` is the pattern that takes the upper bound's quoted
/// literal out of `FOR VALUES FROM (...) TO ('...')`; `MAXVALUE` does not
/// match, and `DEFAULT` has no bounds.
const LIST: &str = "WITH parent AS ( \
       SELECT c.oid FROM pg_catalog.pg_class c \
       JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace \
       JOIN pg_catalog.pg_partitioned_table pt ON pt.partrelid OPERATOR(pg_catalog.=) c.oid \
       JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) c.oid \
            AND a.attnum OPERATOR(pg_catalog.=) pt.partattrs[0] \
       WHERE n.nspname OPERATOR(pg_catalog.=) $1::pg_catalog.name \
         AND c.relname OPERATOR(pg_catalog.=) $2::pg_catalog.name \
         AND pt.partstrat OPERATOR(pg_catalog.=) 'r'::pg_catalog.\"char\" \
         AND pt.partnatts OPERATOR(pg_catalog.=) 1 \
         AND a.attname OPERATOR(pg_catalog.=) $3::pg_catalog.name), \
     parts AS ( \
       SELECT c.oid, n.nspname::pg_catalog.text AS schema, c.relname::pg_catalog.text AS name, \
              (c.relkind OPERATOR(pg_catalog.=) 'r'::pg_catalog.\"char\") AS leaf, \
              pg_catalog.pg_get_expr(c.relpartbound, c.oid) AS bound \
       FROM parent p \
       JOIN pg_catalog.pg_inherits i ON i.inhparent OPERATOR(pg_catalog.=) p.oid \
       JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) i.inhrelid \
       JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace), \
     uppers AS ( \
       SELECT parts.*, (pg_catalog.regexp_match(parts.bound, $4))[1] AS upper FROM parts) \
     SELECT u.oid, u.schema, u.name, u.leaf, \
            (u.bound OPERATOR(pg_catalog.=) 'DEFAULT') AS is_default, \
            CASE WHEN u.upper IS NULL THEN false \
                 ELSE pg_catalog.replace(u.upper, '''''', '''')::pg_catalog.timestamptz \
                      OPERATOR(pg_catalog.<=) $5::pg_catalog.timestamptz END AS expired \
     FROM uppers u ORDER BY u.schema, u.name";

/// The upper bound's literal of a single-column range partition.
const UPPER_BOUND: &str = r"^FOR VALUES FROM \(.*\) TO \('(.*)'\)$";

async fn list(
    conn: &mut PgConnection,
    e: &ResolvedEntity,
    cutoff: PgTime,
) -> Result<Vec<Partition>, sqlx::Error> {
    crate::sql::query(LIST)
        .bind(e.table.schema.as_str())
        .bind(e.table.name.as_str())
        .bind(e.anchor.name.as_str())
        .bind(UPPER_BOUND)
        .bind(cutoff)
        .fetch_all(conn)
        .await?
        .into_iter()
        .map(|r| {
            Ok(Partition {
                oid: r.try_get("oid")?,
                schema: r.try_get("schema")?,
                name: r.try_get("name")?,
                leaf: r.try_get("leaf")?,
                default: r.try_get::<Option<bool>, _>("is_default")?.unwrap_or(false),
                expired: r.try_get::<Option<bool>, _>("expired")?.unwrap_or(false),
            })
        })
        .collect()
}

/// What a partition holds: its exact row count, and whether any row is
/// held, belongs to another tenant, or is not before the cutoff.
#[derive(Debug, Clone, Copy)]
struct Scan {
    total: u64,
    held: bool,
    others: bool,
    young: bool,
}

impl Scan {
    fn reason(&self) -> Option<SweepReason> {
        if self.others {
            Some(SweepReason::OtherTenants)
        } else if self.held {
            Some(SweepReason::Held)
        } else if self.young {
            // The bound says expired but a row says otherwise: trust the rows.
            Some(SweepReason::NotExpired)
        } else {
            None
        }
    }
}

fn count(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// The scan's statement: `$1` entity, `$2` cutoff, `$3` tenant (tenant-scoped
/// types only). One sequential pass over the partition gives the exact count
/// and whether any row is of another tenant or not before the cutoff (a
/// partition that may be dropped is read once, whole, and no more). Held
/// rows are probes instead: each active hold of the type (and tenant) looks
/// its row up through the key's own equality (an index probe on the key),
/// so a partition of millions of rows is not joined. A hold whose record id
/// the key type cannot read fails the statement: the drop is then refused
/// and the partition swept row by row, which compares as text.
fn scan_sql(
    e: &ResolvedEntity,
    relation: &QualifiedName,
    schema: &SchemaName,
    params: &mut Vec<MatterParam>,
) -> String {
    let (scope, on_tenant, others) = match &e.tenant {
        Some(c) => (
            " AND h.tenant_id = $3".to_owned(),
            format!(" AND t.{} = h.tenant_id", c.name),
            format!(
                "COALESCE(pg_catalog.bool_or(t.{} IS DISTINCT FROM $3::pg_catalog.uuid), false)",
                c.name
            ),
        ),
        None => (
            " AND h.tenant_id IS NULL".to_owned(),
            String::new(),
            "false".to_owned(),
        ),
    };
    // The key's own equality finds the row by index; the text equality
    // then compares exactly as the sweep's hold check does (H16).
    let key = format!(
        "{} AND (t.{})::pg_catalog.text = h.record_id",
        e.record_id.equals_text("t", "h.record_id"),
        e.record_id.name
    );
    // Matters are tested on every row in the same pass (contract MH1):
    // their arrays are bound after the scan's own values.
    let first = if e.tenant.is_some() { 4 } else { 3 };
    let (matter, bound) = matter_held_numbered(e, "t", "pg_catalog.statement_timestamp()", first);
    params.extend(bound);
    format!(
        "SELECT pg_catalog.count(*) AS total, \
                {others} AS others, \
                COALESCE(pg_catalog.bool_or(t.{anchor} >= $2::pg_catalog.timestamptz), false) AS young, \
                EXISTS (SELECT 1 FROM {holds} AS h \
                        WHERE h.retained_entity_id = $1{scope} AND {active} \
                          AND EXISTS (SELECT 1 FROM {relation} AS t WHERE {key}{on_tenant})) \
                OR COALESCE(pg_catalog.bool_or({matter}), false) AS held \
         FROM {relation} AS t",
        anchor = e.anchor.name,
        holds = schema.table("retention_holds"),
        active = hold_active_at("pg_catalog.statement_timestamp()"),
    )
}

async fn scan(
    conn: &mut PgConnection,
    e: &ResolvedEntity,
    relation: &QualifiedName,
    schema: &SchemaName,
    tenant: Option<Uuid>,
    cutoff: PgTime,
) -> Result<Scan, sqlx::Error> {
    // The matters read on the scan's own transaction, which holds the fence
    // when it drops (so none can be written before the drop commits).
    let matters = MatterSet::read_in(conn, schema, e, tenant, None, None).await?;
    let mut params = Vec::new();
    let sql = scan_sql(e, relation, schema, &mut params);
    let mut q = crate::sql::query(AssertSqlSafe(sql))
        .bind(e.entity_id)
        .bind(cutoff);
    if e.tenant.is_some() {
        q = q.bind(tenant);
    }
    for p in params {
        q = matters.bind(q, p);
    }
    let row = q.fetch_one(conn).await?;
    Ok(Scan {
        total: count(row.try_get("total")?),
        held: row.try_get("held")?,
        others: row.try_get("others")?,
        young: row.try_get("young")?,
    })
}

/// What one entity's partition-aware purge needs.
pub(crate) struct PartitionPurge<'a> {
    pub(crate) entity: &'a ResolvedEntity,
    pub(crate) schema: &'a SchemaName,
    pub(crate) ledger: &'a Ledger,
    /// The pass's tenant (`None` for the tenantless pass).
    pub(crate) tenant: Option<Uuid>,
    /// The ledger's tenant (nil for the tenantless pass), for row details.
    pub(crate) ledger_tenant: Uuid,
    pub(crate) cutoff: PgTime,
    pub(crate) run: Uuid,
    pub(crate) summary: i64,
    /// Whether the rule audits per row.
    pub(crate) per_row: bool,
    /// Whether the type has row handlers (then nothing is dropped).
    pub(crate) handlers: bool,
    pub(crate) fence_wait: std::time::Duration,
    pub(crate) lock_wait: std::time::Duration,
    /// The run's owner, which each drop's transaction checks.
    pub(crate) owner: Option<crate::sql::txn::RunOwner<'a>>,
    /// The run's kind, when each drop writes a change-stream marker.
    pub(crate) marker: Option<crate::ledger::RunKind>,
}

/// Whether a partition-aware purge applies to an entity at all: a sweep
/// (not an erasure) that purges a table partitioned by range on its anchor,
/// with `Options::partition_drops` on.
pub(crate) fn applies(
    e: &ResolvedEntity,
    strategy: Strategy,
    sweep: bool,
    options: &crate::config::Options,
) -> bool {
    // A category's slice shares its partitions with the other categories'
    // rows (contract SL3): its rows are swept, never dropped.
    options.partition_drops
        && sweep
        && strategy == Strategy::Purge
        && e.range_on_anchor
        && e.slice.is_none()
}

/// How a partition-aware purge ended.
pub(crate) struct Purged {
    /// What happened to each partition.
    pub(crate) plans: Vec<PartitionPlan>,
    /// Rows dropped, all partitions together.
    pub(crate) dropped: u64,
    /// The entity's failure (the fence was not granted in time), if any:
    /// the batches do not run then.
    pub(crate) failure: Option<Failure>,
}

fn sweep_plan(p: &Partition, reason: SweepReason) -> PartitionPlan {
    PartitionPlan {
        partition: p.display(),
        decision: PartitionDecision::Sweep(reason),
        rows: None,
    }
}

impl PartitionPurge<'_> {
    /// What a purge would do with each partition, changing nothing and
    /// taking no lock but the scans' own: for dry runs and previews. A
    /// failure to read the partitions is logged, and the plan is empty (the
    /// batches' counts stay right).
    pub(crate) async fn preview(&self, conn: &mut PgConnection) -> Vec<PartitionPlan> {
        match self.preview_in(conn).await {
            Ok(plans) => plans,
            Err(err) => {
                tracing::warn!(
                    entity = %self.entity.entity_id,
                    error = %err,
                    "reading the partitions to plan their drops failed; planning none"
                );
                Vec::new()
            }
        }
    }

    async fn preview_in(&self, conn: &mut PgConnection) -> Result<Vec<PartitionPlan>, sqlx::Error> {
        let mut tx = sqlx::Acquire::begin(&mut *conn).await?;
        crate::sql::query(PIN_SEARCH_PATH).execute(&mut *tx).await?;
        let mut plans = Vec::new();
        for p in list(&mut tx, self.entity, self.cutoff).await? {
            plans.push(self.judge(&mut tx, &p).await?.0);
        }
        tx.commit().await?;
        Ok(plans)
    }

    /// The plan of one partition on the current snapshot, and its scan when
    /// it was scanned.
    async fn judge(
        &self,
        conn: &mut PgConnection,
        p: &Partition,
    ) -> Result<(PartitionPlan, Option<Scan>), sqlx::Error> {
        if let Some(reason) = p.static_reason() {
            return Ok((sweep_plan(p, reason), None));
        }
        if self.handlers {
            return Ok((sweep_plan(p, SweepReason::RowHandlers), None));
        }
        let Some(relation) = p.relation() else {
            return Ok((sweep_plan(p, SweepReason::DropRefused), None));
        };
        let s = scan(
            conn,
            self.entity,
            &relation,
            self.schema,
            self.tenant,
            self.cutoff,
        )
        .await?;
        let plan = match s.reason() {
            Some(reason) => sweep_plan(p, reason),
            None => PartitionPlan {
                partition: p.display(),
                decision: PartitionDecision::Drop,
                rows: Some(s.total),
            },
        };
        Ok((plan, Some(s)))
    }

    /// Drops every partition that may go, one transaction each, and reports
    /// every partition. The batches run afterwards for the rest.
    pub(crate) async fn run(
        &self,
        conn: &mut PgConnection,
        delivery: &mut Delivery,
        cancellation: &Option<tokio_util::sync::CancellationToken>,
    ) -> Purged {
        let mut purged = Purged {
            plans: Vec::new(),
            dropped: 0,
            failure: None,
        };
        let partitions = match list(conn, self.entity, self.cutoff).await {
            Ok(p) => p,
            Err(err) => {
                tracing::warn!(
                    entity = %self.entity.entity_id,
                    error = %err,
                    "reading the partitions failed; sweeping every row through the batches"
                );
                return purged;
            }
        };
        for p in partitions {
            if let Some(reason) = p.static_reason() {
                purged.plans.push(sweep_plan(&p, reason));
                continue;
            }
            if self.handlers {
                purged.plans.push(sweep_plan(&p, SweepReason::RowHandlers));
                continue;
            }
            if cancelled(cancellation) {
                // The batches see the cancellation too and stop.
                break;
            }
            match self.drop_one(conn, &p).await {
                Ok(plan) => {
                    if let (PartitionDecision::Drop, Some(n)) = (plan.decision, plan.rows) {
                        purged.dropped += n;
                        crate::metrics::batch(Strategy::Purge, n, 0.0);
                        tracing::info!(partition = %plan.partition, rows = n, "partition dropped");
                        delivery
                            .deliver(&AuditEvent::EntityProgress {
                                run_id: self.run,
                                entity_id: self.entity.entity_id,
                                strategy: Strategy::Purge,
                                batch_affected: n,
                                total_affected: purged.dropped,
                            })
                            .await;
                    }
                    purged.plans.push(plan);
                }
                Err(DropError::Fence(err)) => {
                    purged.failure = Some(Failure::logged(
                        FailureKind::FenceTimeout,
                        sqlstate(&err),
                        &format_args!(
                            "the entity fence of {} was not granted within {:?} for a partition \
                             drop: a transaction that created a hold is still open ({err})",
                            self.entity.type_name(),
                            self.fence_wait
                        ),
                    ));
                    return purged;
                }
                Err(DropError::Refused(err)) => {
                    tracing::warn!(
                        entity = %self.entity.entity_id,
                        partition = %p.display(),
                        sqlstate = sqlstate(&err).as_deref().unwrap_or(""),
                        error = %err,
                        "a partition could not be dropped; its rows are swept row by row"
                    );
                    purged.plans.push(sweep_plan(&p, SweepReason::DropRefused));
                }
            }
        }
        purged
    }

    /// One partition's transaction (see the module docs). Commits a drop;
    /// rolls back anything else.
    async fn drop_one(
        &self,
        conn: &mut PgConnection,
        p: &Partition,
    ) -> Result<PartitionPlan, DropError> {
        if let Err(err) = txn::begin_fence(
            conn,
            self.entity.fence,
            FenceMode::Exclusive,
            self.fence_wait,
            LockWait::Bounded(self.lock_wait),
            self.owner.as_ref(),
        )
        .await
        {
            rollback(conn).await;
            return Err(match sqlstate(&err).as_deref() {
                Some(LOCK_NOT_AVAILABLE) => DropError::Fence(err),
                _ => DropError::Refused(err),
            });
        }
        match self.drop_in(conn, p).await {
            Ok(plan) if plan.decision == PartitionDecision::Drop => {
                txn::commit(conn).await.map_err(DropError::Refused)?;
                Ok(plan)
            }
            Ok(plan) => {
                rollback(conn).await;
                Ok(plan)
            }
            Err(err) => {
                rollback(conn).await;
                Err(DropError::Refused(err))
            }
        }
    }

    async fn drop_in(
        &self,
        conn: &mut PgConnection,
        p: &Partition,
    ) -> Result<PartitionPlan, sqlx::Error> {
        let Some(relation) = p.relation() else {
            return Ok(sweep_plan(p, SweepReason::DropRefused));
        };
        crate::sql::query(AssertSqlSafe(format!(
            "LOCK TABLE {relation} IN SHARE ROW EXCLUSIVE MODE"
        )))
        .execute(&mut *conn)
        .await?;
        // Under the lock: the same partition (not another one renamed to
        // its name meanwhile), still attached, still wholly expired.
        let now = list(conn, self.entity, self.cutoff).await?;
        let Some(current) = now
            .into_iter()
            .find(|c| c.oid == p.oid && c.schema == p.schema && c.name == p.name)
        else {
            return Ok(sweep_plan(p, SweepReason::DropRefused));
        };
        let (plan, scanned) = self.judge(conn, &current).await?;
        let (PartitionDecision::Drop, Some(s)) = (plan.decision, scanned) else {
            return Ok(plan);
        };
        let e = self.entity;
        if self.per_row && s.total > 0 {
            crate::sql::query(AssertSqlSafe(self.ledger.details_of_relation(
                &relation.to_string(),
                &e.record_id.name.to_string(),
            )))
            .bind(self.run)
            .bind(e.entity_id)
            .bind(e.type_name())
            .bind(self.ledger_tenant)
            .bind(Strategy::Purge.as_str())
            .execute(&mut *conn)
            .await?;
        }
        self.ledger
            .add_affected(conn, self.summary, s.total)
            .await?;
        crate::sql::query(AssertSqlSafe(format!(
            "ALTER TABLE {} DETACH PARTITION {relation}",
            e.table
        )))
        .execute(&mut *conn)
        .await?;
        crate::sql::query(AssertSqlSafe(format!("DROP TABLE {relation}")))
            .execute(&mut *conn)
            .await?;
        if let Some(kind) = self.marker {
            let marker = ChangeMarker {
                partition: Some(p.display()),
                ..ChangeMarker::new(self.run, kind, e, Strategy::Purge, s.total)
            };
            markers::emit(conn, &marker).await?;
        }
        Ok(plan)
    }
}

/// Why a partition's transaction did not commit.
enum DropError {
    /// The entity fence was not granted within the fence wait.
    Fence(sqlx::Error),
    /// Anything else: the partition is left to the batches.
    Refused(sqlx::Error),
}

async fn rollback(conn: &mut PgConnection) {
    if let Err(e) = txn::rollback(conn).await {
        tracing::warn!(error = %e, "rolling back a partition drop failed");
    }
}
