//! Events of event-based retention (contract SL4): "seven years after the
//! account is closed". An event has a type (`account-closed`), the subject
//! key it happened to (the value of the retained types' `event_key`
//! columns), a tenant (or none, for tenantless types), when it happened and
//! who recorded it. A rule that counts its period from an event type
//! ([`crate::Rule::after_event`]) makes a row eligible once a live event of
//! that type exists for the row's key and its time plus the period has
//! passed; a row whose event has not happened is kept and counted.
//!
//! Events are evidence: never changed nor deleted, only withdrawn (once,
//! with who and why), each recording and withdrawal a link of their own
//! chain (`retention_event_log`), which [`crate::evidence::verify`] walks.
//! A correction is a withdrawal and a new event; either takes effect at the
//! next batch's statement, and a row already removed stays removed. Reach
//! it through [`crate::Cohort::events`].

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, Row};
use uuid::Uuid;

pub use crate::error::event::EventError;

use crate::engine::Engine;
use crate::error::Error;
use crate::sql::AssertSqlSafe;
use crate::sql::txn::alone;

/// An event to record.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct EventRequest {
    event_type: String,
    subject_key: String,
    tenant: Option<Uuid>,
    occurred_at: DateTime<Utc>,
    recorded_by: String,
}

impl EventRequest {
    /// `event_type` happened to the subject `subject_key` at `occurred_at`,
    /// recorded by `recorded_by`; tenantless until [`tenant`](Self::tenant).
    pub fn new(
        event_type: impl Into<String>,
        subject_key: impl Into<String>,
        occurred_at: DateTime<Utc>,
        recorded_by: impl Into<String>,
    ) -> EventRequest {
        EventRequest {
            event_type: event_type.into(),
            subject_key: subject_key.into(),
            tenant: None,
            occurred_at,
            recorded_by: recorded_by.into(),
        }
    }

    /// The tenant the event happened in (rows of tenant-scoped types of that
    /// tenant only count it).
    pub fn tenant(mut self, tenant: Uuid) -> EventRequest {
        self.tenant = Some(tenant);
        self
    }
}

/// A recorded event.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Event {
    /// Its id.
    pub event_id: Uuid,
    /// Its type.
    pub event_type: String,
    /// The subject key it happened to.
    pub subject_key: String,
    /// The tenant, or `None` for tenantless types.
    pub tenant: Option<Uuid>,
    /// When it happened: rows age from here.
    pub occurred_at: DateTime<Utc>,
    /// Who recorded it.
    pub recorded_by: String,
    /// When it was recorded (the database clock).
    pub recorded_at: DateTime<Utc>,
    /// When it was withdrawn, if it was.
    pub withdrawn_at: Option<DateTime<Utc>>,
    /// Who withdrew it.
    pub withdrawn_by: Option<String>,
    /// Why.
    pub withdrawn_reason: Option<String>,
}

impl Event {
    /// Whether it still counts (not withdrawn).
    pub fn is_live(&self) -> bool {
        self.withdrawn_at.is_none()
    }
}

/// Which events [`Events::list`] returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[must_use]
pub struct EventFilter {
    event_type: Option<String>,
    subject_key: Option<String>,
    tenant: Option<Uuid>,
    withdrawn: bool,
    limit: Option<i64>,
}

impl EventFilter {
    /// Live events of every type, key and tenant.
    pub fn new() -> EventFilter {
        EventFilter::default()
    }

    /// Of this type only.
    pub fn event_type(mut self, event_type: impl Into<String>) -> EventFilter {
        self.event_type = Some(event_type.into());
        self
    }

    /// For this subject key only.
    pub fn subject_key(mut self, key: impl Into<String>) -> EventFilter {
        self.subject_key = Some(key.into());
        self
    }

    /// In this tenant only.
    pub fn tenant(mut self, tenant: Uuid) -> EventFilter {
        self.tenant = Some(tenant);
        self
    }

    /// Withdrawn events too.
    pub fn with_withdrawn(mut self) -> EventFilter {
        self.withdrawn = true;
        self
    }

    /// At most `n` events (the latest recorded first).
    pub fn limit(mut self, n: u32) -> EventFilter {
        self.limit = Some(i64::from(n));
        self
    }
}

/// The events service: record, withdraw, read. See the module documentation.
#[derive(Debug, Clone, Copy)]
pub struct Events<'a> {
    engine: &'a Engine,
}

const COLUMNS: &str = "e.event_id, e.event_type, e.subject_key, e.tenant_id, e.occurred_at, \
                       e.recorded_by, e.recorded_at, e.withdrawn_at, e.withdrawn_by, e.withdrawn_reason";

fn event_of(r: &sqlx::postgres::PgRow) -> Result<Event, sqlx::Error> {
    Ok(Event {
        event_id: r.try_get("event_id")?,
        event_type: r.try_get("event_type")?,
        subject_key: r.try_get("subject_key")?,
        tenant: r.try_get("tenant_id")?,
        occurred_at: r.try_get("occurred_at")?,
        recorded_by: r.try_get("recorded_by")?,
        recorded_at: r.try_get("recorded_at")?,
        withdrawn_at: r.try_get("withdrawn_at")?,
        withdrawn_by: r.try_get("withdrawn_by")?,
        withdrawn_reason: r.try_get("withdrawn_reason")?,
    })
}

impl<'a> Events<'a> {
    pub(crate) fn new(engine: &'a Engine) -> Events<'a> {
        Events { engine }
    }

    /// The event types the model's categories count from.
    fn declared(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for e in &self.engine.model.entities {
            for t in e.slices().iter().flat_map(|s| s.capabilities.event_types()) {
                if !out.iter().any(|o| o == t) {
                    out.push(t.to_owned());
                }
            }
        }
        out.sort();
        out
    }

    /// Records `request` (a link of the events' chain) and returns it. Typed
    /// refusals, with nothing written: an empty type, key or recorder, a
    /// type no category counts from, a time PostgreSQL cannot store.
    pub async fn record(&self, request: EventRequest) -> Result<Event, Error> {
        if request.event_type.trim().is_empty() {
            return Err(EventError::EmptyType.into());
        }
        if request.subject_key.is_empty() {
            return Err(EventError::EmptySubjectKey.into());
        }
        if request.recorded_by.trim().is_empty() {
            return Err(EventError::EmptyRecorder.into());
        }
        let declared = self.declared();
        if !declared.contains(&request.event_type) {
            return Err(EventError::UndeclaredType {
                event_type: request.event_type,
                declared,
            }
            .into());
        }
        let occurred =
            crate::sql::PgTime::from_utc(&request.occurred_at).ok_or(Error::TimeOutOfRange {
                what: "occurred_at",
            })?;
        let mut conn = self.engine.pool.acquire().await?;
        self.engine.ensure_ready(&mut conn).await?;
        let sql = format!(
            "INSERT INTO {t} AS e (event_id, event_type, subject_key, tenant_id, occurred_at, \
                                   recorded_by, recorded_at) \
             VALUES ($1, $2, $3, $4, $5, $6, pg_catalog.statement_timestamp()) RETURNING {COLUMNS}",
            t = self.engine.schema.table("retention_events"),
        );
        let row = alone(&mut conn, async |c| {
            crate::sql::query(AssertSqlSafe(sql))
                .bind(Uuid::new_v4())
                .bind(&request.event_type)
                .bind(&request.subject_key)
                .bind(request.tenant)
                .bind(occurred)
                .bind(&request.recorded_by)
                .fetch_one(c)
                .await
        })
        .await?;
        Ok(event_of(&row)?)
    }

    /// Withdraws event `event_id` (a link of the events' chain): from the
    /// next batch's statement on it counts no more. Typed refusals, nothing
    /// written: an empty withdrawer or reason, no such event, one withdrawn
    /// already.
    pub async fn withdraw(
        &self,
        event_id: Uuid,
        withdrawn_by: &str,
        reason: &str,
    ) -> Result<Event, Error> {
        if withdrawn_by.trim().is_empty() {
            return Err(EventError::EmptyRecorder.into());
        }
        if reason.trim().is_empty() {
            return Err(EventError::EmptyReason.into());
        }
        let mut conn = self.engine.pool.acquire().await?;
        self.engine.ensure_ready(&mut conn).await?;
        let t = self.engine.schema.table("retention_events");
        let (by, why) = (withdrawn_by.to_owned(), reason.to_owned());
        let outcome = alone(&mut conn, async |c| {
            let found = crate::sql::query(AssertSqlSafe(format!(
                "SELECT {COLUMNS} FROM {t} AS e WHERE e.event_id = $1 FOR UPDATE"
            )))
            .bind(event_id)
            .fetch_optional(&mut *c)
            .await?;
            let Some(found) = found else {
                return Ok(Err(EventError::NotFound { event_id }));
            };
            if found
                .try_get::<Option<DateTime<Utc>>, _>("withdrawn_at")?
                .is_some()
            {
                return Ok(Err(EventError::AlreadyWithdrawn { event_id }));
            }
            let row = crate::sql::query(AssertSqlSafe(format!(
                "UPDATE {t} AS e SET withdrawn_at = pg_catalog.statement_timestamp(), \
                        withdrawn_by = $2, withdrawn_reason = $3 \
                 WHERE e.event_id = $1 RETURNING {COLUMNS}"
            )))
            .bind(event_id)
            .bind(&by)
            .bind(&why)
            .fetch_one(&mut *c)
            .await?;
            Ok(Ok(row))
        })
        .await?;
        Ok(event_of(&outcome?)?)
    }

    /// Event `event_id`, live or withdrawn.
    pub async fn get(&self, event_id: Uuid) -> Result<Option<Event>, Error> {
        let mut conn = self.engine.pool.acquire().await?;
        self.engine.ensure_ready(&mut conn).await?;
        let sql = format!(
            "SELECT {COLUMNS} FROM {t} AS e WHERE e.event_id = $1",
            t = self.engine.schema.table("retention_events")
        );
        let row = alone(&mut conn, async |c| {
            crate::sql::query(AssertSqlSafe(sql))
                .bind(event_id)
                .fetch_optional(c)
                .await
        })
        .await?;
        Ok(row.as_ref().map(event_of).transpose()?)
    }

    /// The events `filter` selects, the latest recorded first.
    pub async fn list(&self, filter: &EventFilter) -> Result<Vec<Event>, Error> {
        let mut conn = self.engine.pool.acquire().await?;
        self.engine.ensure_ready(&mut conn).await?;
        list_on(&mut conn, self.engine, filter).await
    }
}

async fn list_on(
    conn: &mut PgConnection,
    engine: &Engine,
    filter: &EventFilter,
) -> Result<Vec<Event>, Error> {
    let sql = format!(
        "SELECT {COLUMNS} FROM {t} AS e \
         WHERE ($1::pg_catalog.text IS NULL OR e.event_type = $1) \
           AND ($2::pg_catalog.text IS NULL OR e.subject_key = $2) \
           AND ($3::pg_catalog.uuid IS NULL OR e.tenant_id = $3) \
           AND ($4 OR e.withdrawn_at IS NULL) \
         ORDER BY e.recorded_at DESC, e.event_id LIMIT $5",
        t = engine.schema.table("retention_events")
    );
    let rows = alone(conn, async |c| {
        crate::sql::query(AssertSqlSafe(sql))
            .bind(filter.event_type.as_deref())
            .bind(filter.subject_key.as_deref())
            .bind(filter.tenant)
            .bind(filter.withdrawn)
            .bind(filter.limit)
            .fetch_all(c)
            .await
    })
    .await?;
    Ok(rows.iter().map(event_of).collect::<Result<_, _>>()?)
}
