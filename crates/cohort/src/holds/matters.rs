//! Matter holds (contracts MH1-MH3): one row that protects a whole scope
//! (a data subject, or a retained type in a tenant, optionally within an
//! anchor window), including rows written after it.
//!
//! A matter is stored once in `retention_matters`; no row per record is
//! written. Migration 8's triggers fence it like a hold (contract H11) and
//! chain its creation, changes and release into `retention_matter_events`
//! (contract EV1). Every mutation path reads the matters of the type it
//! changes and tests each row against them in its own statements (see
//! [`super::matter_set`]).

use chrono::{DateTime, TimeZone, Utc};
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row};
use uuid::Uuid;

use super::key::{self, KeySql};
use super::matter_set::{MatterSet, matter_active_at, matter_held_numbered};
use super::txn::{self, Open};
use super::types::Target;
use super::validate::{self, pg_time};
use crate::engine::Engine;
use crate::error::Error;
use crate::error::hold::{HoldError, MAX_REASON_BYTES};
use crate::model::resolved::ResolvedEntity;
use crate::sql::predicates::hold_active_at;
use crate::sql::{AssertSqlSafe, PgTime, Pinned};

/// The longest subject a matter accepts, in bytes (as erasure).
const MAX_SUBJECT_BYTES: usize = 1024;

/// What a matter protects.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum MatterScope {
    /// Every row, of the matter's tenant, where any erasure-subject column
    /// equals the subject (compared as erasure compares, contract E9).
    Subject {
        /// The data subject.
        subject: String,
        /// The retained types it covers; `None`: every retained type of the
        /// tenant's shape (tenant-scoped types for a tenant, tenantless
        /// types without one), including types registered later.
        entity_ids: Option<Vec<Uuid>>,
    },
    /// Every row of one retained type in the matter's tenant, or only
    /// those whose anchor falls in `[anchor_from, anchor_to)`.
    Type {
        /// The retained type.
        entity_id: Uuid,
        /// The window's start (inclusive); `None`: unbounded.
        anchor_from: Option<DateTime<Utc>>,
        /// The window's end (exclusive); `None`: unbounded.
        anchor_to: Option<DateTime<Utc>>,
    },
}

/// A request to put a matter on hold. Build one with
/// [`MatterRequest::subject`] or [`MatterRequest::retained_type`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MatterRequest {
    /// The matter's id (random unless set with [`MatterRequest::matter_id`]).
    pub matter_id: Uuid,
    /// The tenant whose rows it covers; `None` for tenantless types.
    pub tenant_id: Option<Uuid>,
    /// What it covers.
    pub scope: MatterScope,
    /// Why (a citation: "Litigation - case #12345").
    pub reason: String,
    /// Who asked for it (counsel, a ticket).
    pub owner: String,
    /// When it stops protecting by itself; `None`: until released.
    pub expires_at: Option<DateTime<Utc>>,
}

impl MatterRequest {
    /// A matter over a data subject, across every retained type of the
    /// tenant (narrow it with [`MatterRequest::entities`]).
    ///
    /// ```
    /// use cohort::holds::MatterRequest;
    /// let tenant = uuid::Uuid::new_v4();
    /// let request = MatterRequest::subject("customer-4711", Some(tenant),
    ///     "Litigation - case #12345", "legal@example.com");
    /// assert_eq!(request.tenant_id, Some(tenant));
    /// ```
    pub fn subject(
        subject: impl Into<String>,
        tenant_id: Option<Uuid>,
        reason: impl Into<String>,
        owner: impl Into<String>,
    ) -> MatterRequest {
        MatterRequest {
            matter_id: Uuid::new_v4(),
            tenant_id,
            scope: MatterScope::Subject {
                subject: subject.into(),
                entity_ids: None,
            },
            reason: reason.into(),
            owner: owner.into(),
            expires_at: None,
        }
    }

    /// A matter over every row of one retained type in a tenant (narrow it
    /// with [`MatterRequest::anchor_window`]).
    pub fn retained_type(
        entity_id: Uuid,
        tenant_id: Option<Uuid>,
        reason: impl Into<String>,
        owner: impl Into<String>,
    ) -> MatterRequest {
        MatterRequest {
            matter_id: Uuid::new_v4(),
            tenant_id,
            scope: MatterScope::Type {
                entity_id,
                anchor_from: None,
                anchor_to: None,
            },
            reason: reason.into(),
            owner: owner.into(),
            expires_at: None,
        }
    }

    /// [`MatterRequest::retained_type`] for `T`.
    pub fn of<T: crate::Retained>(
        tenant_id: Option<Uuid>,
        reason: impl Into<String>,
        owner: impl Into<String>,
    ) -> MatterRequest {
        MatterRequest::retained_type(T::entity_id().unwrap_or_default(), tenant_id, reason, owner)
    }

    /// Restricts a subject matter to these retained types (no effect on a
    /// type matter).
    pub fn entities(mut self, entity_ids: impl IntoIterator<Item = Uuid>) -> MatterRequest {
        if let MatterScope::Subject { entity_ids: e, .. } = &mut self.scope {
            *e = Some(entity_ids.into_iter().collect());
        }
        self
    }

    /// Restricts a type matter to rows whose anchor is at or after `from`
    /// and before `to` (either may be `None`: unbounded; no effect on a
    /// subject matter).
    pub fn anchor_window<Tz: TimeZone>(
        mut self,
        from: Option<DateTime<Tz>>,
        to: Option<DateTime<Tz>>,
    ) -> MatterRequest {
        if let MatterScope::Type {
            anchor_from,
            anchor_to,
            ..
        } = &mut self.scope
        {
            *anchor_from = from.map(|t| t.with_timezone(&Utc));
            *anchor_to = to.map(|t| t.with_timezone(&Utc));
        }
        self
    }

    /// Sets the matter's id (for idempotent creation).
    pub fn matter_id(mut self, matter_id: Uuid) -> MatterRequest {
        self.matter_id = matter_id;
        self
    }

    /// Sets when it stops protecting by itself.
    pub fn expires_at<Tz: TimeZone>(mut self, expires_at: DateTime<Tz>) -> MatterRequest {
        self.expires_at = Some(expires_at.with_timezone(&Utc));
        self
    }
}

/// A matter as stored.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct Matter {
    /// Its id.
    pub matter_id: Uuid,
    /// The tenant whose rows it covers; `None` for tenantless types.
    pub tenant_id: Option<Uuid>,
    /// What it covers.
    pub scope: MatterScope,
    /// Why.
    pub reason: String,
    /// Who asked for it.
    pub owner: String,
    /// When it started protecting (the database clock at creation).
    pub created_at: DateTime<Utc>,
    /// When it stops protecting by itself, if it does.
    pub expires_at: Option<DateTime<Utc>>,
    /// When it was released, if it was.
    pub released_at: Option<DateTime<Utc>>,
}

impl Matter {
    /// Whether it protects at `at`: created, neither expired nor released.
    pub fn is_active_at<Tz: TimeZone>(&self, at: DateTime<Tz>) -> bool {
        let at = at.with_timezone(&Utc);
        self.created_at <= at
            && self.expires_at.is_none_or(|e| e > at)
            && self.released_at.is_none_or(|r| r > at)
    }
}

/// What a matter protects now in one retained type.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct MatterTypeReport {
    /// The retained type.
    pub entity_id: Uuid,
    /// Its type name.
    pub entity_type: String,
    /// How many of its rows the matter covers now (0 once it stopped
    /// protecting).
    pub protected_rows: u64,
    /// Why it can protect nothing of this type, when it cannot: no
    /// erasure-subject column of the type can hold the subject.
    pub note: Option<String>,
}

/// A matter and, per retained type it covers, what it protects now.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct MatterReport {
    /// The matter.
    pub matter: Matter,
    /// Per retained type of this handle's model that it covers.
    pub types: Vec<MatterTypeReport>,
}

/// Which holds and matters protect one row ([`Matters::protection`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct Protection {
    /// The row holds that cover it.
    pub holds: Vec<Uuid>,
    /// The matters that cover it.
    pub matters: Vec<Uuid>,
}

impl Protection {
    /// Whether anything protects the row.
    pub fn is_held(&self) -> bool {
        !self.holds.is_empty() || !self.matters.is_empty()
    }
}

/// Matter holds. Get one from [`Cohort::matters`](crate::Cohort::matters);
/// it is a cheap borrow. Connections are handled as [`super::Holds`]
/// handles them: a plain connection runs each call in a transaction of its
/// own, an open sqlx transaction is joined under a savepoint.
#[derive(Debug, Clone, Copy)]
pub struct Matters<'a> {
    engine: &'a Engine,
}

const COLUMNS: &str = "m.matter_id, m.tenant_id, m.scope_kind, m.subject, m.entity_ids, \
                       m.retained_entity_id, m.anchor_from, m.anchor_to, m.reason, m.owner, \
                       m.created_at, m.expires_at, m.released_at";

impl<'a> Matters<'a> {
    pub(crate) fn new(engine: &'a Engine) -> Matters<'a> {
        Matters { engine }
    }
}

impl Matters<'_> {
    fn entities(&self) -> &[ResolvedEntity] {
        &self.engine.model.entities
    }

    fn table(&self) -> String {
        self.engine.schema.table("retention_matters").to_string()
    }

    async fn begin<'c>(&self, conn: &'c mut PgConnection) -> Result<Pinned<'c>, Error> {
        if txn::open_transaction(conn).await? == Open::Untracked {
            return Err(Error::UntrackedTransaction);
        }
        self.engine.ensure_ready(conn).await?;
        Ok(Pinned::begin(conn).await?)
    }

    /// The types of this handle's model a matter covers.
    fn covered(&self, tenant_id: Option<Uuid>, scope: &MatterScope) -> Vec<&ResolvedEntity> {
        self.entities()
            .iter()
            .filter(|e| match scope {
                MatterScope::Type { entity_id, .. } => e.entity_id == *entity_id,
                MatterScope::Subject { entity_ids, .. } => {
                    e.tenant.is_some() == tenant_id.is_some()
                        && entity_ids
                            .as_ref()
                            .is_none_or(|ids| ids.contains(&e.entity_id))
                }
            })
            .collect()
    }

    /// Everything about a request that can be judged without the database.
    fn check(&self, r: &MatterRequest) -> Result<(), HoldError> {
        if r.reason.trim().is_empty() {
            return Err(HoldError::EmptyReason);
        }
        if r.reason.contains('\0') {
            return Err(HoldError::ReasonContainsNul);
        }
        if r.reason.len() > MAX_REASON_BYTES {
            return Err(HoldError::ReasonTooLong {
                bytes: r.reason.len(),
            });
        }
        if r.owner.trim().is_empty() {
            return Err(HoldError::EmptyOwner);
        }
        if r.owner.contains('\0') || r.owner.len() > MAX_REASON_BYTES {
            return Err(HoldError::InvalidOwner);
        }
        match &r.scope {
            MatterScope::Type {
                entity_id,
                anchor_from,
                anchor_to,
            } => {
                let e = validate::entity(self.entities(), *entity_id)?;
                validate::tenant(e, r.tenant_id)?;
                if let (Some(from), Some(to)) = (anchor_from, anchor_to)
                    && to < from
                {
                    return Err(HoldError::WindowEndsBeforeStart {
                        from: *from,
                        to: *to,
                    });
                }
            }
            MatterScope::Subject {
                subject,
                entity_ids,
            } => {
                if subject.is_empty() || subject.len() > MAX_SUBJECT_BYTES || subject.contains('\0')
                {
                    return Err(HoldError::InvalidMatterSubject);
                }
                if let Some(ids) = entity_ids {
                    for id in ids {
                        let e = validate::entity(self.entities(), *id)?;
                        validate::tenant(e, r.tenant_id)?;
                    }
                }
                if self
                    .covered(r.tenant_id, &r.scope)
                    .iter()
                    .all(|e| e.subjects.is_empty())
                {
                    return Err(HoldError::NoSubjectColumn);
                }
            }
        }
        Ok(())
    }

    /// Puts a matter on hold and returns it as stored.
    ///
    /// Refused with [`Error::Hold`], nothing written, when the reason or
    /// owner is empty (or too long, or holds NUL), a subject is empty,
    /// longer than 1,024 bytes or holds NUL, a named retained type is
    /// unknown or does not fit the tenant (tenant-scoped types need one,
    /// tenantless ones none), no covered type has an erasure-subject column
    /// (a subject matter), the anchor window ends before it starts, or the
    /// matter id is taken.
    ///
    /// The database takes the entity fence of every type the matter covers,
    /// exclusively, until the transaction ends: sweeps, erasures and host
    /// deletions of those types that are under way finish first, and those
    /// that start later see the matter (contract MH1). So keep the
    /// transaction short.
    pub async fn create(
        &self,
        conn: &mut PgConnection,
        request: MatterRequest,
    ) -> Result<Matter, Error> {
        self.check(&request)?;
        let mut r = request;
        if let Some(t) = r.expires_at {
            r.expires_at = Some(pg_time(&t, "expires_at")?);
        }
        let (kind, subject, entity_ids, entity, from, to) = match &r.scope {
            MatterScope::Subject {
                subject,
                entity_ids,
            } => (
                "Subject",
                Some(subject.clone()),
                entity_ids.clone(),
                None,
                None,
                None,
            ),
            MatterScope::Type {
                entity_id,
                anchor_from,
                anchor_to,
            } => {
                let from = anchor_from
                    .map(|t| pg_time(&t, "anchor_from"))
                    .transpose()?;
                let to = anchor_to.map(|t| pg_time(&t, "anchor_to")).transpose()?;
                ("Type", None, None, Some(*entity_id), from, to)
            }
        };
        let sql = format!(
            "INSERT INTO {table} AS m (matter_id, tenant_id, scope_kind, subject, entity_ids, \
                                       retained_entity_id, anchor_from, anchor_to, reason, owner, \
                                       created_at, expires_at, released_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, pg_catalog.statement_timestamp(), $11, NULL) \
             RETURNING {COLUMNS}",
            table = self.table()
        );
        let mut scope = self.begin(conn).await?;
        let inserted = crate::sql::query(AssertSqlSafe(sql))
            .bind(r.matter_id)
            .bind(r.tenant_id)
            .bind(kind)
            .bind(subject)
            .bind(entity_ids)
            .bind(entity)
            .bind(from)
            .bind(to)
            .bind(&r.reason)
            .bind(&r.owner)
            .bind(r.expires_at)
            .fetch_one(scope.conn())
            .await;
        let result = match inserted {
            Ok(row) => matter_from_row(&row).map_err(Error::from),
            Err(err) if super::sqlstate(&err).as_deref() == Some("23505") => {
                Err(HoldError::DuplicateMatterId {
                    matter_id: r.matter_id,
                }
                .into())
            }
            Err(err) => Err(err.into()),
        };
        scope.finish(result).await
    }

    /// Every matter, released or not, oldest first.
    pub async fn list(&self, conn: &mut PgConnection) -> Result<Vec<Matter>, Error> {
        let sql = format!(
            "SELECT {COLUMNS} FROM {table} AS m ORDER BY m.created_at, m.matter_id",
            table = self.table()
        );
        let mut scope = self.begin(conn).await?;
        let rows = crate::sql::query(AssertSqlSafe(sql))
            .fetch_all(scope.conn())
            .await
            .map_err(Error::from);
        let result = rows.and_then(|rows| {
            rows.iter()
                .map(|r| matter_from_row(r).map_err(Error::from))
                .collect()
        });
        scope.finish(result).await
    }

    /// The matter with this id, if there is one.
    pub async fn get(
        &self,
        conn: &mut PgConnection,
        matter_id: Uuid,
    ) -> Result<Option<Matter>, Error> {
        let mut scope = self.begin(conn).await?;
        let result = self.get_in(scope.conn(), matter_id).await;
        scope.finish(result).await
    }

    async fn get_in(
        &self,
        conn: &mut PgConnection,
        matter_id: Uuid,
    ) -> Result<Option<Matter>, Error> {
        self.read_one(conn, matter_id, "").await
    }

    /// The matter with this id, read `FOR UPDATE` when `lock` says so.
    async fn read_one(
        &self,
        conn: &mut PgConnection,
        matter_id: Uuid,
        lock: &str,
    ) -> Result<Option<Matter>, Error> {
        let sql = format!(
            "SELECT {COLUMNS} FROM {table} AS m WHERE m.matter_id = $1{lock}",
            table = self.table()
        );
        let row = crate::sql::query(AssertSqlSafe(sql))
            .bind(matter_id)
            .fetch_optional(&mut *conn)
            .await?;
        Ok(row.as_ref().map(matter_from_row).transpose()?)
    }

    /// The matter and, per retained type of this handle's model it covers,
    /// how many rows it protects now (contract MH3). A subject that no
    /// erasure-subject column of a type can hold matches nothing there, and
    /// the type's entry says so. Counting reads each covered table once.
    pub async fn report(
        &self,
        conn: &mut PgConnection,
        matter_id: Uuid,
    ) -> Result<MatterReport, Error> {
        let mut scope = self.begin(conn).await?;
        let result = self.report_in(scope.conn(), matter_id).await;
        scope.finish(result).await
    }

    async fn report_in(
        &self,
        conn: &mut PgConnection,
        matter_id: Uuid,
    ) -> Result<MatterReport, Error> {
        let Some(matter) = self.get_in(conn, matter_id).await? else {
            return Err(HoldError::NoSuchMatter { matter_id }.into());
        };
        let mut types = Vec::new();
        for e in self.covered(matter.tenant_id, &matter.scope) {
            let set = MatterSet::read_in(
                conn,
                &self.engine.schema,
                e,
                matter.tenant_id,
                None,
                Some(matter_id),
            )
            .await?;
            let note = match &matter.scope {
                MatterScope::Subject { .. } if e.subjects.is_empty() => {
                    Some("the type has no erasure-subject column".to_owned())
                }
                MatterScope::Subject { .. }
                    if (0..e.subjects.len()).all(|i| set.subjects(i).is_empty()) =>
                {
                    Some("no erasure-subject column of the type can hold the subject".to_owned())
                }
                _ => None,
            };
            let protected_rows = if note.is_some() {
                0
            } else {
                count_protected(conn, e, &set, matter.tenant_id).await?
            };
            types.push(MatterTypeReport {
                entity_id: e.entity_id,
                entity_type: e.type_name().to_owned(),
                protected_rows,
                note,
            });
        }
        Ok(MatterReport { matter, types })
    }

    /// Moves a live matter's expiry later (`None`: until released) and
    /// returns it. [`HoldError::ExpiryNotExtended`] when it would end
    /// earlier than it does now; [`HoldError::MatterReleased`] once
    /// released. The change is a link of the evidence chain.
    pub async fn extend<Tz: TimeZone>(
        &self,
        conn: &mut PgConnection,
        matter_id: Uuid,
        expires_at: Option<DateTime<Tz>>,
    ) -> Result<Matter, Error> {
        let expires_at = expires_at.map(|t| pg_time(&t, "expires_at")).transpose()?;
        let mut scope = self.begin(conn).await?;
        let result = self.extend_in(scope.conn(), matter_id, expires_at).await;
        scope.finish(result).await
    }

    async fn extend_in(
        &self,
        conn: &mut PgConnection,
        matter_id: Uuid,
        expires_at: Option<DateTime<Utc>>,
    ) -> Result<Matter, Error> {
        let Some(m) = self.get_locked(conn, matter_id).await? else {
            return Err(HoldError::NoSuchMatter { matter_id }.into());
        };
        if m.released_at.is_some() {
            return Err(HoldError::MatterReleased { matter_id }.into());
        }
        let shorter = match (m.expires_at, expires_at) {
            (None, Some(_)) => true,
            (Some(now), Some(new)) => new < now,
            _ => false,
        };
        if shorter {
            return Err(HoldError::ExpiryNotExtended { matter_id }.into());
        }
        let sql = format!(
            "UPDATE {table} AS m SET expires_at = $2 WHERE m.matter_id = $1 RETURNING {COLUMNS}",
            table = self.table()
        );
        let row = crate::sql::query(AssertSqlSafe(sql))
            .bind(matter_id)
            .bind(expires_at)
            .fetch_one(&mut *conn)
            .await?;
        Ok(matter_from_row(&row)?)
    }

    /// Releases a matter: everything it covered stops being protected by it
    /// at once (rows another hold or matter covers stay protected). Returns
    /// it; [`HoldError::MatterReleased`] when it already was. The release is
    /// a link of the evidence chain.
    pub async fn release(&self, conn: &mut PgConnection, matter_id: Uuid) -> Result<Matter, Error> {
        let mut scope = self.begin(conn).await?;
        let result = self.release_in(scope.conn(), matter_id).await;
        scope.finish(result).await
    }

    async fn release_in(&self, conn: &mut PgConnection, matter_id: Uuid) -> Result<Matter, Error> {
        let Some(m) = self.get_locked(conn, matter_id).await? else {
            return Err(HoldError::NoSuchMatter { matter_id }.into());
        };
        if m.released_at.is_some() {
            return Err(HoldError::MatterReleased { matter_id }.into());
        }
        let sql = format!(
            "UPDATE {table} AS m SET released_at = pg_catalog.statement_timestamp() \
             WHERE m.matter_id = $1 RETURNING {COLUMNS}",
            table = self.table()
        );
        let row = crate::sql::query(AssertSqlSafe(sql))
            .bind(matter_id)
            .fetch_one(&mut *conn)
            .await?;
        Ok(matter_from_row(&row)?)
    }

    async fn get_locked(
        &self,
        conn: &mut PgConnection,
        matter_id: Uuid,
    ) -> Result<Option<Matter>, Error> {
        self.read_one(conn, matter_id, " FOR UPDATE").await
    }

    /// Which row holds and matters protect the row `target` names at
    /// `as_of` (contract MH2). The target is validated as for
    /// [`super::Holds::is_held`]; a row that does not exist (in the
    /// target's tenant) can only be covered by row holds.
    pub async fn protection<Tz: TimeZone>(
        &self,
        conn: &mut PgConnection,
        target: &Target,
        as_of: DateTime<Tz>,
    ) -> Result<Protection, Error> {
        let as_of = pg_time(&as_of, "as_of")?;
        let e = validate::target(self.entities(), target)?;
        let mut scope = self.begin(conn).await?;
        let result = protection_in(
            scope.conn(),
            &self.engine.schema,
            e,
            target,
            PgTime::from_utc(&as_of),
        )
        .await;
        scope.finish(result).await
    }
}

/// [`Matters::protection`] on a pinned transaction: `at` `None` is the
/// database clock.
pub(super) async fn protection_in(
    conn: &mut PgConnection,
    schema: &crate::schema::SchemaName,
    e: &ResolvedEntity,
    target: &Target,
    at: Option<PgTime>,
) -> Result<Protection, Error> {
    let key = KeySql::of(e);
    crate::sql::query(AssertSqlSafe(key.canonicalise_one()))
        .bind(&target.record_id)
        .fetch_one(&mut *conn)
        .await
        .map_err(|err| key::malformed_or(err, key.entity_id()))?;
    let at_sql = "COALESCE($4::pg_catalog.timestamptz, pg_catalog.statement_timestamp())";
    let holds: Vec<Uuid> = crate::sql::query_scalar(AssertSqlSafe(format!(
        "SELECT h.hold_id FROM {holds} AS h \
          WHERE h.retained_entity_id = $1 AND h.tenant_id IS NOT DISTINCT FROM $2 \
            AND h.record_id = {canonical} AND {active} ORDER BY h.created_at, h.hold_id",
        holds = schema.table("retention_holds"),
        canonical = key.canonical_text("$3"),
        active = hold_active_at(at_sql),
    )))
    .bind(e.entity_id)
    .bind(target.tenant_id)
    .bind(&target.record_id)
    .bind(at)
    .fetch_all(&mut *conn)
    .await?;
    // Each live matter of the type, asked on its own: which of them covers
    // the row (they are few; the row is one).
    let ids: Vec<Uuid> = crate::sql::query_scalar(AssertSqlSafe(format!(
        "SELECT m.matter_id FROM {matters} AS m WHERE {covers} AND {live} \
         ORDER BY m.created_at, m.matter_id",
        matters = schema.table("retention_matters"),
        covers = super::matter_set::matter_covers("$1", "$2::pg_catalog.uuid"),
        live = matter_active_at(
            "COALESCE($3::pg_catalog.timestamptz, pg_catalog.statement_timestamp())"
        ),
    )))
    .bind(e.entity_id)
    .bind(target.tenant_id)
    .bind(at)
    .fetch_all(&mut *conn)
    .await?;
    let mut matters = Vec::new();
    for id in ids {
        let set = MatterSet::read_in(conn, schema, e, target.tenant_id, None, Some(id)).await?;
        if row_covered(conn, e, &set, target, at).await? {
            matters.push(id);
        }
    }
    Ok(Protection { holds, matters })
}

/// Whether a matter of `set` covers the row `target` names, judged at `at`.
async fn row_covered(
    conn: &mut PgConnection,
    e: &ResolvedEntity,
    set: &MatterSet,
    target: &Target,
    at: Option<PgTime>,
) -> Result<bool, Error> {
    let (predicate, params) = matter_held_numbered(
        e,
        "t",
        "COALESCE($3::pg_catalog.timestamptz, pg_catalog.statement_timestamp())",
        4,
    );
    let tenant = match &e.tenant {
        Some(c) => format!(" AND t.{} = $2", c.name),
        None => " AND $2::pg_catalog.uuid IS NULL".to_owned(),
    };
    let sql = format!(
        "SELECT EXISTS (SELECT 1 FROM {table} AS t WHERE {key}{tenant} AND {predicate})",
        table = e.table,
        key = e.record_id.equals_text("t", "$1"),
    );
    let mut q = crate::sql::query_scalar::<bool>(AssertSqlSafe(sql))
        .bind(&target.record_id)
        .bind(target.tenant_id)
        .bind(at);
    for p in params {
        q = set.bind_scalar(q, p);
    }
    Ok(q.fetch_one(&mut *conn).await?)
}

/// How many rows of `e` in `tenant` the matters of `set` cover now.
async fn count_protected(
    conn: &mut PgConnection,
    e: &ResolvedEntity,
    set: &MatterSet,
    tenant: Option<Uuid>,
) -> Result<u64, Error> {
    let (predicate, params) = matter_held_numbered(e, "t", "pg_catalog.statement_timestamp()", 2);
    let tenant_cond = match &e.tenant {
        Some(c) => format!("t.{} = $1", c.name),
        None => "$1::pg_catalog.uuid IS NULL".to_owned(),
    };
    let sql = format!(
        "SELECT pg_catalog.count(*) FROM {table} AS t WHERE {tenant_cond} AND {predicate}",
        table = e.table,
    );
    let mut q = crate::sql::query_scalar::<i64>(AssertSqlSafe(sql)).bind(tenant);
    for p in params {
        q = set.bind_scalar(q, p);
    }
    let n: i64 = q.fetch_one(&mut *conn).await?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// A matter as stored; times read as PostgreSQL keeps them.
fn matter_from_row(row: &PgRow) -> Result<Matter, sqlx::Error> {
    let time = |name: &str| -> Result<Option<DateTime<Utc>>, sqlx::Error> {
        Ok(row
            .try_get::<Option<PgTime>, _>(name)?
            .map(PgTime::to_utc_clamped))
    };
    let kind: String = row.try_get("scope_kind")?;
    let scope = if kind == "Type" {
        MatterScope::Type {
            entity_id: row
                .try_get::<Option<Uuid>, _>("retained_entity_id")?
                .unwrap_or_default(),
            anchor_from: time("anchor_from")?,
            anchor_to: time("anchor_to")?,
        }
    } else {
        MatterScope::Subject {
            subject: row
                .try_get::<Option<String>, _>("subject")?
                .unwrap_or_default(),
            entity_ids: row.try_get("entity_ids")?,
        }
    };
    Ok(Matter {
        matter_id: row.try_get("matter_id")?,
        tenant_id: row.try_get("tenant_id")?,
        scope,
        reason: row.try_get("reason")?,
        owner: row.try_get("owner")?,
        created_at: time("created_at")?.unwrap_or(DateTime::<Utc>::MIN_UTC),
        expires_at: time("expires_at")?,
        released_at: time("released_at")?,
    })
}
