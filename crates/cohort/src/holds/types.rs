//! The values hosts pass to and get back from the holds API.

use chrono::{DateTime, TimeZone, Utc};
use uuid::Uuid;

/// A request to create a legal hold on one row.
///
/// Times may carry any UTC offset; they are normalised to UTC here, at the
/// boundary.
///
/// ```
/// use chrono::{Duration, Utc};
/// use cohort::holds::HoldRequest;
///
/// let now = Utc::now();
/// let note_type = uuid::Uuid::parse_str("a3f467fe-c5d0-4f17-9897-83c373cc1dc8")?;
/// let tenant = uuid::Uuid::new_v4();
/// let request = HoldRequest::new(note_type, "4f9d…", Some(tenant), "Litigation hold - case #12345", now)
///     .expires_at(now + Duration::days(365));
/// assert_eq!(request.expires_at, Some(now + Duration::days(365)));
/// # Ok::<(), uuid::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HoldRequest {
    /// The hold's id (default: a random v4 UUID).
    pub hold_id: Uuid,
    /// The retained-entity id of the row's type (`#[cohort(id = "...")]`).
    pub entity_id: Uuid,
    /// The row's record id as text, in any spelling the key type accepts
    /// (`"007"` for a bigint key, `"ABC"` for a citext key). The hold stores
    /// the row's own canonical text.
    pub record_id: String,
    /// The row's tenant; `None` for tenantless types (and only for them).
    pub tenant_id: Option<Uuid>,
    /// Why the row is held. Must not be empty.
    pub reason: String,
    /// When the hold starts. The stored value is the earlier of this and the
    /// database clock, so a clock running ahead cannot delay protection.
    pub created_at: DateTime<Utc>,
    /// When the hold stops protecting (stored as given); `None` lasts until
    /// the hold is removed. Must be after `created_at`.
    pub expires_at: Option<DateTime<Utc>>,
}

impl HoldRequest {
    /// A hold with a random id and no expiry.
    pub fn new<Tz: TimeZone>(
        entity_id: Uuid,
        record_id: impl Into<String>,
        tenant_id: Option<Uuid>,
        reason: impl Into<String>,
        created_at: DateTime<Tz>,
    ) -> HoldRequest {
        HoldRequest {
            hold_id: Uuid::new_v4(),
            entity_id,
            record_id: record_id.into(),
            tenant_id,
            reason: reason.into(),
            created_at: created_at.with_timezone(&Utc),
            expires_at: None,
        }
    }

    /// A hold on a row of `T` (its retained-entity id comes from the type),
    /// with a random id and no expiry. A type without an id (an exempt one)
    /// gives the nil id, which hold creation refuses as unknown.
    ///
    /// ```
    /// # #[derive(cohort::Retained)]
    /// # #[cohort(category = "session-notes", anchor = "created_at", id = "a3f467fe-c5d0-4f17-9897-83c373cc1dc8")]
    /// # struct SessionNote { id: uuid::Uuid, tenant_id: uuid::Uuid, created_at: chrono::DateTime<chrono::Utc> }
    /// use cohort::holds::HoldRequest;
    /// let tenant = uuid::Uuid::new_v4();
    /// let request = HoldRequest::of::<SessionNote>("4f9d…", Some(tenant), "Litigation hold", chrono::Utc::now());
    /// assert_eq!(request.entity_id, SessionNote::ENTITY_ID);
    /// ```
    pub fn of<T: crate::Retained>(
        record_id: impl Into<String>,
        tenant_id: Option<Uuid>,
        reason: impl Into<String>,
        created_at: DateTime<impl TimeZone>,
    ) -> HoldRequest {
        HoldRequest::new(
            T::entity_id().unwrap_or_default(),
            record_id,
            tenant_id,
            reason,
            created_at,
        )
    }

    /// Sets the hold's id (for idempotent creation by the host).
    pub fn hold_id(mut self, hold_id: Uuid) -> HoldRequest {
        self.hold_id = hold_id;
        self
    }

    /// Sets the expiry (any offset; stored in UTC, as given).
    pub fn expires_at<Tz: TimeZone>(mut self, expires_at: DateTime<Tz>) -> HoldRequest {
        self.expires_at = Some(expires_at.with_timezone(&Utc));
        self
    }
}

/// A hold as stored in `retention_holds`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct Hold {
    /// The hold's id.
    pub hold_id: Uuid,
    /// The retained-entity id of the held row's type.
    pub entity_id: Uuid,
    /// The row's canonical record id (`CAST(key AS text)` of the row itself).
    pub record_id: String,
    /// The row's tenant; `None` for tenantless types.
    pub tenant_id: Option<Uuid>,
    /// Why the row is held.
    pub reason: String,
    /// When the hold started protecting: the earlier of the requested time
    /// and the database clock at creation.
    pub created_at: DateTime<Utc>,
    /// When it stops protecting, if it expires.
    pub expires_at: Option<DateTime<Utc>>,
    /// When it was removed, if it was.
    pub removed_at: Option<DateTime<Utc>>,
}

impl Hold {
    /// Whether the hold is active at `at`: created at or before it, and
    /// neither expired nor removed at or before it. The same rule mutations
    /// apply with the database clock.
    pub fn is_active_at<Tz: TimeZone>(&self, at: DateTime<Tz>) -> bool {
        let at = at.with_timezone(&Utc);
        self.created_at <= at
            && self.expires_at.is_none_or(|e| e > at)
            && self.removed_at.is_none_or(|r| r > at)
    }
}

/// Narrows [`crate::holds::Holds::list_active`]; the default lists every
/// active hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HoldFilter {
    /// Only holds of this retained type.
    pub entity_id: Option<Uuid>,
    /// Only holds of this tenant.
    pub tenant_id: Option<Uuid>,
}

impl HoldFilter {
    /// Every active hold.
    pub fn all() -> HoldFilter {
        HoldFilter::default()
    }

    /// Only holds of this retained type.
    pub fn entity(mut self, entity_id: Uuid) -> HoldFilter {
        self.entity_id = Some(entity_id);
        self
    }

    /// Only holds of this tenant.
    pub fn tenant(mut self, tenant_id: Uuid) -> HoldFilter {
        self.tenant_id = Some(tenant_id);
        self
    }
}

/// One row, named the way holds name it: retained type, record id (any
/// spelling the key type accepts) and tenant (`None` for tenantless types).
/// Used by [`crate::holds::Holds::is_held`] and by host deletions.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Target {
    /// The retained-entity id of the row's type.
    pub entity_id: Uuid,
    /// The row's record id as text.
    pub record_id: String,
    /// The row's tenant; `None` for tenantless types.
    pub tenant_id: Option<Uuid>,
}

impl Target {
    /// Names one row of `T` (its retained-entity id comes from the type).
    ///
    /// ```
    /// # #[derive(cohort::Retained)]
    /// # #[cohort(category = "session-notes", anchor = "created_at", id = "a3f467fe-c5d0-4f17-9897-83c373cc1dc8")]
    /// # struct SessionNote { id: uuid::Uuid, tenant_id: uuid::Uuid, created_at: chrono::DateTime<chrono::Utc> }
    /// use cohort::holds::Target;
    /// let target = Target::of::<SessionNote>("4f9d…", Some(uuid::Uuid::new_v4()));
    /// assert_eq!(target.entity_id, SessionNote::ENTITY_ID);
    /// ```
    pub fn of<T: crate::Retained>(record_id: impl Into<String>, tenant_id: Option<Uuid>) -> Target {
        Target::new(T::entity_id().unwrap_or_default(), record_id, tenant_id)
    }

    /// Names one row.
    pub fn new(entity_id: Uuid, record_id: impl Into<String>, tenant_id: Option<Uuid>) -> Target {
        Target {
            entity_id,
            record_id: record_id.into(),
            tenant_id,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{Duration, FixedOffset};

    #[test]
    fn times_with_any_offset_are_normalised_to_utc() {
        let plus_two = FixedOffset::east_opt(2 * 3600).expect("offset");
        let local = plus_two
            .with_ymd_and_hms(2026, 6, 1, 14, 0, 0)
            .single()
            .expect("time");
        let r = HoldRequest::new(Uuid::nil(), "1", None, "r", local)
            .expires_at(local + Duration::hours(1));
        let utc = Utc
            .with_ymd_and_hms(2026, 6, 1, 12, 0, 0)
            .single()
            .expect("time");
        assert_eq!(r.created_at, utc);
        assert_eq!(r.expires_at, Some(utc + Duration::hours(1)));
    }

    #[test]
    fn a_hold_is_not_active_at_the_instant_of_its_expiry_or_removal() {
        let t = Utc
            .with_ymd_and_hms(2026, 6, 1, 12, 0, 0)
            .single()
            .expect("time");
        let mut h = Hold {
            hold_id: Uuid::nil(),
            entity_id: Uuid::nil(),
            record_id: "1".into(),
            tenant_id: None,
            reason: "r".into(),
            created_at: t,
            expires_at: Some(t + Duration::hours(1)),
            removed_at: None,
        };
        assert!(!h.is_active_at(t - Duration::microseconds(1)));
        assert!(h.is_active_at(t));
        assert!(h.is_active_at(t + Duration::hours(1) - Duration::microseconds(1)));
        assert!(!h.is_active_at(t + Duration::hours(1)));
        h.removed_at = Some(t + Duration::minutes(1));
        assert!(!h.is_active_at(t + Duration::minutes(1)));
    }
}
