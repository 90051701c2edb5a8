//! Host deletions that respect holds: lock the targets, check them for
//! active holds, and only then run the host's own delete, in one transaction.

use std::collections::{BTreeMap, HashSet};
use std::fmt;

use futures_util::future::BoxFuture;
use sqlx::{PgConnection, Row};
use uuid::Uuid;

use super::MAX_DELETION_TARGETS;
use super::key::{self, KeySql};
use super::matter_set::{MatterSet, matter_held_numbered};
use super::statements::HoldSql;
use super::txn::{self, Open};
use super::types::Target;
use super::validate;
use crate::engine::Engine;
use crate::error::Error;
use crate::error::hold::HoldError;
use crate::model::resolved::ResolvedEntity;
use crate::sql::{AssertSqlSafe, Pinned};

/// Host deletions that respect legal holds. Get one from [`Cohort::deletion`](crate::Cohort::deletion).
#[derive(Debug, Clone, Copy)]
pub struct Deletion<'a> {
    engine: &'a Engine,
}

impl<'a> Deletion<'a> {
    pub(crate) fn new(engine: &'a Engine) -> Deletion<'a> {
        Deletion { engine }
    }
}

/// What a host deletion did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum DeletionOutcome<T> {
    /// No target was held: the callback ran and its work committed; its value.
    Deleted(T),
    /// At least one target is held: the callback did not run and nothing
    /// changed. The held targets, as given, each once.
    Protected {
        /// The targets an active hold covers.
        held: Vec<Target>,
    },
}

/// Why a host deletion failed. Either way everything rolled back.
#[derive(Debug)]
pub enum DeletionError<E> {
    /// Cohort refused or failed: [`Error::TransactionAlreadyOpen`], a target
    /// refused as [`Error::Hold`] (unknown type, wrong tenant shape, malformed
    /// record id, no row of the tenant, too many targets), a database error.
    Cohort(Error),
    /// The callback returned this error.
    Callback(E),
}

impl<E> From<Error> for DeletionError<E> {
    fn from(e: Error) -> Self {
        DeletionError::Cohort(e)
    }
}

impl<E> From<sqlx::Error> for DeletionError<E> {
    fn from(e: sqlx::Error) -> Self {
        DeletionError::Cohort(Error::Database(e))
    }
}

impl<E> From<HoldError> for DeletionError<E> {
    fn from(e: HoldError) -> Self {
        DeletionError::Cohort(Error::Hold(e))
    }
}

impl<E: fmt::Display> fmt::Display for DeletionError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeletionError::Cohort(e) => write!(f, "host deletion refused: {e}"),
            DeletionError::Callback(e) => write!(f, "host deletion callback failed: {e}"),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for DeletionError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DeletionError::Cohort(e) => Some(e),
            DeletionError::Callback(e) => Some(e),
        }
    }
}

impl Deletion<'_> {
    /// Deletes through `callback`, unless an active hold covers a target.
    ///
    /// `targets` must name every row of a retained type the callback will
    /// delete (at most [`super::MAX_DELETION_TARGETS`]). In one transaction
    /// of its own, Cohort takes the entity fence of each type involved,
    /// shared (the lock hold creation takes exclusively), reads each record
    /// id through its key type, locks each target's row in the target's
    /// tenant `FOR UPDATE`, and checks every target for an active hold,
    /// judged by the database clock in a statement started after the locks.
    /// A target that names no row of its tenant is refused with
    /// [`HoldError::NoSuchRow`] (whether the row exists nowhere or only in
    /// another tenant: the answer is the same). If any target is held it
    /// rolls back and returns [`DeletionOutcome::Protected`] without calling
    /// `callback`. Otherwise it calls `callback` with the transaction's
    /// connection (`search_path` as the caller had it): an error rolls
    /// everything back and comes back as [`DeletionError::Callback`]; success
    /// commits.
    ///
    /// The service owns the transaction: `conn` must not be inside one
    /// ([`Error::TransactionAlreadyOpen`]), whether sqlx started it or a raw
    /// `BEGIN` did.
    pub async fn execute<T, E, F>(
        &self,
        conn: &mut PgConnection,
        targets: &[Target],
        callback: F,
    ) -> Result<DeletionOutcome<T>, DeletionError<E>>
    where
        F: for<'c> FnOnce(&'c mut PgConnection) -> BoxFuture<'c, Result<T, E>>,
    {
        if targets.len() > MAX_DELETION_TARGETS {
            return Err(HoldError::TooManyTargets {
                count: targets.len(),
                max: MAX_DELETION_TARGETS,
            }
            .into());
        }
        let entities = &self.engine.model.entities;
        let resolved = targets
            .iter()
            .map(|t| validate::target(entities, t))
            .collect::<Result<Vec<_>, _>>()?;
        if txn::open_transaction(conn).await? != Open::No {
            return Err(Error::TransactionAlreadyOpen.into());
        }
        self.engine.ensure_ready(conn).await?;

        let mut tx = Pinned::begin(conn).await?;
        let held = match self.lock_and_check(tx.conn(), targets, &resolved).await {
            Ok(held) => held,
            Err(e) => {
                tx.rollback().await;
                return Err(e.into());
            }
        };
        if !held.is_empty() {
            tx.rollback().await;
            return Ok(DeletionOutcome::Protected { held });
        }
        // The host's callback runs with the caller's search_path.
        tx.unpin().await?;
        match callback(tx.conn()).await {
            Ok(value) => {
                tx.commit().await?;
                Ok(DeletionOutcome::Deleted(value))
            }
            Err(e) => {
                tx.rollback().await;
                Err(DeletionError::Callback(e))
            }
        }
    }

    /// Fences, canonicalises, locks and checks; returns the held targets.
    async fn lock_and_check(
        &self,
        conn: &mut PgConnection,
        targets: &[Target],
        resolved: &[&ResolvedEntity],
    ) -> Result<Vec<Target>, Error> {
        // 1. The entity fences of every type involved, shared, in key order:
        //    a hold being created on one of them has committed (and is seen
        //    below), or waits for this transaction to end.
        let fences: Vec<i32> = resolved.iter().map(|e| e.fence).collect();
        crate::sql::query(AssertSqlSafe(key::fences_shared()))
            .bind(&fences)
            .execute(&mut *conn)
            .await?;

        // Positions of the targets of each retained type.
        let mut groups: BTreeMap<Uuid, Vec<usize>> = BTreeMap::new();
        for (i, t) in targets.iter().enumerate() {
            groups.entry(t.entity_id).or_default().push(i);
        }
        let mut texts: Vec<Option<String>> = vec![None; targets.len()];
        for (entity_id, positions) in &groups {
            let key = KeySql::of(resolved[positions[0]]);
            let ids: Vec<&str> = positions
                .iter()
                .map(|&i| targets[i].record_id.as_str())
                .collect();
            let tenants: Vec<Option<Uuid>> =
                positions.iter().map(|&i| targets[i].tenant_id).collect();
            // 2. Each record id read as its key type (a malformed one is a
            //    typed error).
            crate::sql::query(AssertSqlSafe(key.canonicalise_many()))
                .bind(&ids)
                .fetch_all(&mut *conn)
                .await
                .map_err(|e| key::malformed_or(e, *entity_id))?;
            // 3. The rows, each in its target's tenant, locked.
            let rows = crate::sql::query(AssertSqlSafe(key.lock_for_update()))
                .bind(&ids)
                .bind(&tenants)
                .fetch_all(&mut *conn)
                .await
                .map_err(|e| key::malformed_or(e, *entity_id))?;
            for row in rows {
                if let Some(i) = position(row.try_get("i")?, positions) {
                    texts[i] = Some(row.try_get("rid")?);
                }
            }
        }
        // A target that names no row of its tenant is refused, whether the
        // row exists nowhere or only in another tenant: the answer is the
        // same, and a callback that deletes by id alone cannot reach past
        // another tenant's hold.
        let mut found = Vec::with_capacity(targets.len());
        for (t, text) in targets.iter().zip(texts) {
            match text {
                Some(text) => found.push(text),
                None => {
                    return Err(HoldError::NoSuchRow {
                        entity_id: t.entity_id,
                    }
                    .into());
                }
            }
        }

        // 4. Active holds, judged by the database clock in a statement that
        //    starts after the fences and row locks are held.
        let (entity_ids, tenants): (Vec<Uuid>, Vec<Option<Uuid>>) =
            targets.iter().map(|t| (t.entity_id, t.tenant_id)).unzip();
        let held: Vec<i64> = crate::sql::query_scalar(AssertSqlSafe(
            HoldSql::new(&self.engine.schema).held_targets(),
        ))
        .bind(&entity_ids)
        .bind(&tenants)
        .bind(&found)
        .fetch_all(&mut *conn)
        .await?;
        // 5. Matters (contract MH1): each type's live matters, read after
        //    the fences, tested on the locked rows themselves.
        let mut held = held;
        for positions in groups.values() {
            let e = resolved[positions[0]];
            let rids: Vec<String> = positions.iter().map(|&i| found[i].clone()).collect();
            let tenants: Vec<Option<Uuid>> =
                positions.iter().map(|&i| targets[i].tenant_id).collect();
            for at in covered_by_matters(conn, &self.engine.schema, e, &rids, &tenants).await? {
                if let Some(&i) = usize::try_from(at - 1).ok().and_then(|p| positions.get(p)) {
                    held.push(i64::try_from(i + 1).unwrap_or(i64::MAX));
                }
            }
        }
        held.sort_unstable();
        let mut seen = HashSet::new();
        let mut out: Vec<Target> = Vec::new();
        for at in held {
            if let Some(t) = usize::try_from(at - 1).ok().and_then(|p| targets.get(p))
                && seen.insert(t)
            {
                out.push(t.clone());
            }
        }
        Ok(out)
    }
}

/// The 1-based positions of the rows `rids` (canonical text) in `tenants`
/// (one per row) of type `e` that a live matter covers. Each tenant's
/// matters are read once.
async fn covered_by_matters(
    conn: &mut PgConnection,
    schema: &crate::schema::SchemaName,
    e: &ResolvedEntity,
    rids: &[String],
    tenants: &[Option<Uuid>],
) -> Result<Vec<i64>, Error> {
    let mut distinct: Vec<Option<Uuid>> = tenants.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    let mut out = Vec::new();
    for tenant in distinct {
        let set = MatterSet::read_in(conn, schema, e, tenant, None, None).await?;
        if set.matters == 0 {
            continue;
        }
        let (predicate, params) =
            matter_held_numbered(e, "t", "pg_catalog.statement_timestamp()", 4);
        let on_tenant = match &e.tenant {
            Some(c) => format!(" AND t.{} = $3", c.name),
            None => " AND $3::pg_catalog.uuid IS NULL".to_owned(),
        };
        let sql = format!(
            "SELECT u.i FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.text[]), \
                                        pg_catalog.unnest($2::pg_catalog.uuid[])) \
                             WITH ORDINALITY AS u(r, tn, i) \
             WHERE u.tn IS NOT DISTINCT FROM $3::pg_catalog.uuid \
               AND EXISTS (SELECT 1 FROM {table} AS t \
                           WHERE {key}{on_tenant} AND {predicate}) \
             ORDER BY u.i",
            table = e.table,
            key = e.record_id.equals_text("t", "u.r"),
        );
        let mut q = crate::sql::query_scalar::<i64>(AssertSqlSafe(sql))
            .bind(rids)
            .bind(tenants)
            .bind(tenant);
        for p in params {
            q = set.bind_scalar(q, p);
        }
        out.extend(q.fetch_all(&mut *conn).await?);
    }
    Ok(out)
}

/// The target index of a 1-based position `at` within a group's `positions`.
fn position(at: i64, positions: &[usize]) -> Option<usize> {
    let p = usize::try_from(at.checked_sub(1)?).ok()?;
    positions.get(p).copied()
}
