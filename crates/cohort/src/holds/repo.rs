//! The holds repository: create, remove, list, ask, prune.

use chrono::{DateTime, TimeZone, Utc};
use sqlx::postgres::PgRow;
use sqlx::postgres::types::PgInterval;
use sqlx::{PgConnection, Row};
use uuid::Uuid;

use super::key::{self, KeySql};
use super::statements::HoldSql;
use super::txn::{self, Open};
use super::types::{Hold, HoldFilter, HoldRequest, Target};
use super::validate::{self, pg_time};
use crate::engine::Engine;
use crate::error::Error;
use crate::error::hold::HoldError;
use crate::model::resolved::ResolvedEntity;
use crate::sql::{AssertSqlSafe, PgTime, Pinned};

/// The longest inactive-hold retention [`Holds::prune`] computes with; longer
/// ones saturate to it (about 4,000 years: no hold is that old, and the
/// timestamp arithmetic stays in range).
const MAX_PRUNE_MICROS: i64 = 4_000 * 366 * 24 * 3600 * 1_000_000;

/// Legal holds. Get one from [`Cohort::holds`](crate::Cohort::holds); it is a cheap borrow.
///
/// Every method takes the connection to run on. Pass a plain connection
/// (`&mut *pool.acquire().await?`) and the method runs in a transaction of
/// its own; pass an open transaction (`&mut *tx` from `pool.begin()`) and it
/// joins it under a savepoint, so a refused request leaves the transaction
/// usable and the hold commits or rolls back with the rest of the caller's
/// work. A transaction opened with a raw `BEGIN` query is refused
/// ([`Error::UntrackedTransaction`]): sqlx does not know about it, so Cohort
/// could not nest a savepoint in it without committing it.
///
/// Every method checks Cohort's tables first (readiness), pins `search_path`
/// to `pg_catalog` for its own statements and puts the caller's back.
#[derive(Debug, Clone, Copy)]
pub struct Holds<'a> {
    engine: &'a Engine,
}

impl<'a> Holds<'a> {
    pub(crate) fn new(engine: &'a Engine) -> Holds<'a> {
        Holds { engine }
    }
}

impl Holds<'_> {
    fn entities(&self) -> &[ResolvedEntity] {
        &self.engine.model.entities
    }

    fn sql(&self) -> HoldSql {
        HoldSql::new(&self.engine.schema)
    }

    /// Readiness, then a transaction (or savepoint) with `search_path` pinned.
    async fn begin<'c>(&self, conn: &'c mut PgConnection) -> Result<Pinned<'c>, Error> {
        if txn::open_transaction(conn).await? == Open::Untracked {
            return Err(Error::UntrackedTransaction);
        }
        self.engine.ensure_ready(conn).await?;
        Ok(Pinned::begin(conn).await?)
    }

    /// Creates a hold on one existing row and returns it as stored.
    ///
    /// Refused with [`Error::Hold`] when the retained type is unknown, the
    /// tenant does not fit the type (required for tenant-scoped types, absent
    /// for tenantless ones), the record id is empty, longer than
    /// [`super::MAX_RECORD_ID_BYTES`], contains NUL or is not a value of the
    /// key's type, the reason is empty, longer than
    /// [`super::MAX_REASON_BYTES`] or contains NUL, the expiry is not after
    /// the creation time, no row of the tenant has the record id, or the hold
    /// id is taken; with [`Error::TimeOutOfRange`] when a time is outside
    /// PostgreSQL's range.
    ///
    /// The record id is read through the key column's own type and the hold
    /// stores the row's own canonical text (`'007'` for a bigint key is
    /// stored as `7`; `'ABC'` for a citext key row `abc` as `abc`). Before
    /// looking for the row, it takes the type's entity fence exclusively,
    /// which it holds until the transaction ends: sweeps, erasures and host
    /// deletions of this type wait for it (up to [`crate::Options::fence_wait`]),
    /// so keep transactions that create holds short. Then it reads the row
    /// `FOR SHARE`: in a caller's `REPEATABLE READ` transaction a row deleted
    /// since the snapshot raises a serialization failure (SQLSTATE 40001, as
    /// [`Error::Database`]). A row of another tenant is answered exactly as a
    /// row that does not exist ([`HoldError::NoSuchRow`]). The stored
    /// created-at is the earlier of the requested one and the database clock.
    pub async fn create(
        &self,
        conn: &mut PgConnection,
        request: HoldRequest,
    ) -> Result<Hold, Error> {
        let e = validate::request(self.entities(), &request)?;
        let mut request = request;
        request.created_at = pg_time(&request.created_at, "created_at")?;
        if let Some(expires_at) = request.expires_at {
            request.expires_at = Some(pg_time(&expires_at, "expires_at")?);
        }
        let mut scope = self.begin(conn).await?;
        let result = self.create_in(scope.conn(), e, &request).await;
        scope.finish(result).await
    }

    async fn create_in(
        &self,
        conn: &mut PgConnection,
        e: &ResolvedEntity,
        r: &HoldRequest,
    ) -> Result<Hold, Error> {
        let key = KeySql::of(e);
        // 1. The entity fence, exclusively, before looking for the row: every
        //    batch of this type that started has committed, and none starts
        //    until this transaction ends (then its statements see the hold).
        crate::sql::query(AssertSqlSafe(key::fence_exclusive()))
            .bind(e.fence)
            .execute(&mut *conn)
            .await?;
        // 2. The record id read as the key type.
        crate::sql::query(AssertSqlSafe(key.canonicalise_one()))
            .bind(&r.record_id)
            .fetch_one(&mut *conn)
            .await
            .map_err(|err| key::malformed_or(err, e.entity_id))?;
        // 3. The row itself, in the hold's tenant, FOR SHARE. A row of another
        //    tenant is not found, exactly like one that does not exist.
        let row = crate::sql::query(AssertSqlSafe(key.read_for_share()))
            .bind(&r.record_id)
            .bind(r.tenant_id)
            .fetch_optional(&mut *conn)
            .await
            .map_err(|err| key::malformed_or(err, e.entity_id))?;
        let Some(row) = row else {
            return Err(HoldError::NoSuchRow {
                entity_id: e.entity_id,
            }
            .into());
        };
        let record_id: String = row.try_get("rid")?;
        // 4. The hold, under the row's own canonical text.
        let inserted = crate::sql::query(AssertSqlSafe(self.sql().insert()))
            .bind(r.hold_id)
            .bind(e.entity_id)
            .bind(&record_id)
            .bind(r.tenant_id)
            .bind(&r.reason)
            .bind(r.created_at)
            .bind(r.expires_at)
            .fetch_one(&mut *conn)
            .await;
        match inserted {
            Ok(row) => Ok(hold_from_row(&row)?),
            Err(err) if super::sqlstate(&err).as_deref() == Some("23505") => {
                Err(HoldError::DuplicateHoldId { hold_id: r.hold_id }.into())
            }
            Err(err) => Err(err.into()),
        }
    }

    /// Removes a hold: it stops protecting once the database clock passes
    /// `removed_at` (stored as given, any offset). Removing a hold that is
    /// already removed keeps the earlier of the two instants, so a removal
    /// scheduled for later can be brought forward (but never pushed back).
    /// Returns the hold as stored; [`HoldError::NoSuchHold`] when no hold has
    /// the id, [`Error::TimeOutOfRange`] for an instant PostgreSQL cannot store.
    pub async fn remove<Tz: TimeZone>(
        &self,
        conn: &mut PgConnection,
        hold_id: Uuid,
        removed_at: DateTime<Tz>,
    ) -> Result<Hold, Error> {
        let removed_at = pg_time(&removed_at, "removed_at")?;
        let mut scope = self.begin(conn).await?;
        let result = crate::sql::query(AssertSqlSafe(self.sql().remove()))
            .bind(hold_id)
            .bind(removed_at)
            .fetch_optional(scope.conn())
            .await
            .map_err(Error::from)
            .and_then(|row| match row {
                Some(row) => Ok(hold_from_row(&row)?),
                None => Err(HoldError::NoSuchHold { hold_id }.into()),
            });
        scope.finish(result).await
    }

    /// The holds active at `as_of` (any offset): created at or before it,
    /// neither expired nor removed at or before it. A reporting query: it
    /// judges the caller's `as_of`, where mutations judge the database
    /// clock. With [`crate::Options::inactive_hold_retention`] set, a hold
    /// pruned since can be missing from answers about the past.
    pub async fn list_active<Tz: TimeZone>(
        &self,
        conn: &mut PgConnection,
        as_of: DateTime<Tz>,
        filter: &HoldFilter,
    ) -> Result<Vec<Hold>, Error> {
        let as_of = pg_time(&as_of, "as_of")?;
        let mut scope = self.begin(conn).await?;
        let result = crate::sql::query(AssertSqlSafe(self.sql().list_active()))
            .bind(as_of)
            .bind(filter.entity_id)
            .bind(filter.tenant_id)
            .fetch_all(scope.conn())
            .await
            .map_err(Error::from)
            .and_then(|rows| {
                rows.iter()
                    .map(|r| hold_from_row(r).map_err(Error::from))
                    .collect()
            });
        scope.finish(result).await
    }

    /// Every hold of the filter, active or not (expired, removed, not yet
    /// started), oldest first: what an auditor reviews. Holds pruned by
    /// [`Holds::prune`] are gone.
    pub async fn list(
        &self,
        conn: &mut PgConnection,
        filter: &HoldFilter,
    ) -> Result<Vec<Hold>, Error> {
        let mut scope = self.begin(conn).await?;
        let result = crate::sql::query(AssertSqlSafe(self.sql().list_all()))
            .bind(filter.entity_id)
            .bind(filter.tenant_id)
            .fetch_all(scope.conn())
            .await
            .map_err(Error::from)
            .and_then(|rows| {
                rows.iter()
                    .map(|r| hold_from_row(r).map_err(Error::from))
                    .collect()
            });
        scope.finish(result).await
    }

    /// Whether an active hold, or a live matter (contract MH2), covers the
    /// row `target` names at `as_of` (any offset);
    /// [`crate::holds::Matters::protection`] says which. A row that does not
    /// exist can only be covered by a row hold. The record id may be spelled
    /// any way the key type accepts;
    /// it is compared with the key type's own equality. A reporting query
    /// (see [`Holds::list_active`]). The target is validated as for
    /// [`Holds::create`]; a malformed record id is refused under a savepoint.
    pub async fn is_held<Tz: TimeZone>(
        &self,
        conn: &mut PgConnection,
        target: &Target,
        as_of: DateTime<Tz>,
    ) -> Result<bool, Error> {
        let as_of = pg_time(&as_of, "as_of")?;
        let e = validate::target(self.entities(), target)?;
        let mut scope = self.begin(conn).await?;
        let result = self.is_held_in(scope.conn(), e, target, as_of).await;
        scope.finish(result).await
    }

    async fn is_held_in(
        &self,
        conn: &mut PgConnection,
        e: &ResolvedEntity,
        target: &Target,
        as_of: DateTime<Utc>,
    ) -> Result<bool, Error> {
        let protection = super::matters::protection_in(
            conn,
            &self.engine.schema,
            e,
            target,
            PgTime::from_utc(&as_of),
        )
        .await?;
        Ok(protection.is_held())
    }

    /// Deletes holds that have not protected anything (expired or removed)
    /// for longer than [`crate::Options::inactive_hold_retention`], judged
    /// by the database clock, and returns how many. With no retention
    /// configured (the default) it deletes nothing.
    pub async fn prune(&self, conn: &mut PgConnection) -> Result<u64, Error> {
        let retention = self.engine.options.inactive_hold_retention;
        let mut scope = self.begin(conn).await?;
        let result = match retention {
            None => Ok(0),
            Some(retention) => {
                let micros = i64::try_from(retention.as_micros())
                    .unwrap_or(i64::MAX)
                    .min(MAX_PRUNE_MICROS);
                let interval = PgInterval {
                    months: 0,
                    days: 0,
                    microseconds: micros,
                };
                crate::sql::query(AssertSqlSafe(self.sql().prune()))
                    .bind(interval)
                    .execute(scope.conn())
                    .await
                    .map(|done| done.rows_affected())
                    .map_err(Error::from)
            }
        };
        scope.finish(result).await
    }
}

/// A hold as stored. Times are read as PostgreSQL keeps them, so a hold
/// written with plain SQL (`'infinity'`, a year beyond chrono's range) is
/// reported, clamped to chrono's range, instead of failing the read.
fn hold_from_row(row: &PgRow) -> Result<Hold, sqlx::Error> {
    let time = |name: &str| -> Result<Option<DateTime<Utc>>, sqlx::Error> {
        Ok(row
            .try_get::<Option<PgTime>, _>(name)?
            .map(PgTime::to_utc_clamped))
    };
    Ok(Hold {
        hold_id: row.try_get("hold_id")?,
        entity_id: row.try_get("retained_entity_id")?,
        record_id: row.try_get("record_id")?,
        tenant_id: row.try_get("tenant_id")?,
        reason: row.try_get("reason")?,
        created_at: time("created_at")?.unwrap_or(DateTime::<Utc>::MIN_UTC),
        expires_at: time("expires_at")?,
        removed_at: time("removed_at")?,
    })
}
