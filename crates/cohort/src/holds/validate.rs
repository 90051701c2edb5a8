//! Checks on a request's own values, before any SQL runs.

use chrono::{DateTime, TimeZone, Utc};
use uuid::Uuid;

use crate::error::Error;
use crate::sql::timestamp::to_pg_precision;

use super::types::{HoldRequest, Target};
use crate::error::hold::{HoldError, MAX_REASON_BYTES, MAX_RECORD_ID_BYTES, RecordIdProblem};
use crate::model::resolved::ResolvedEntity;

/// The registered retained type with this id.
pub(super) fn entity(
    entities: &[ResolvedEntity],
    entity_id: Uuid,
) -> Result<&ResolvedEntity, HoldError> {
    entities
        .iter()
        .find(|e| e.entity_id == entity_id)
        .ok_or(HoldError::UnknownEntity { entity_id })
}

/// A tenant is given exactly when the type is tenant-scoped.
pub(super) fn tenant(e: &ResolvedEntity, tenant_id: Option<Uuid>) -> Result<(), HoldError> {
    match (&e.tenant, tenant_id) {
        (Some(_), Some(_)) | (None, None) => Ok(()),
        (Some(_), None) => Err(HoldError::TenantRequired {
            entity_id: e.entity_id,
        }),
        (None, Some(_)) => Err(HoldError::TenantNotAllowed {
            entity_id: e.entity_id,
        }),
    }
}

/// Non-empty, bounded, no NUL. Its shape is the key type's business (SQL).
pub(super) fn record_id(entity_id: Uuid, record_id: &str) -> Result<(), HoldError> {
    let problem = if record_id.is_empty() {
        RecordIdProblem::Empty
    } else if record_id.len() > MAX_RECORD_ID_BYTES {
        RecordIdProblem::TooLong {
            bytes: record_id.len(),
        }
    } else if record_id.contains('\0') {
        RecordIdProblem::ContainsNul
    } else {
        return Ok(());
    };
    Err(HoldError::InvalidRecordId { entity_id, problem })
}

/// Everything about a target that can be judged without the database.
pub(super) fn target<'e>(
    entities: &'e [ResolvedEntity],
    t: &Target,
) -> Result<&'e ResolvedEntity, HoldError> {
    let e = entity(entities, t.entity_id)?;
    tenant(e, t.tenant_id)?;
    record_id(t.entity_id, &t.record_id)?;
    Ok(e)
}

/// Everything about a hold request that can be judged without the database.
pub(super) fn request<'e>(
    entities: &'e [ResolvedEntity],
    r: &HoldRequest,
) -> Result<&'e ResolvedEntity, HoldError> {
    let e = entity(entities, r.entity_id)?;
    tenant(e, r.tenant_id)?;
    record_id(r.entity_id, &r.record_id)?;
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
    if let Some(expires_at) = r.expires_at
        && expires_at <= r.created_at
    {
        return Err(HoldError::ExpiryNotAfterCreation {
            created_at: r.created_at,
            expires_at,
        });
    }
    Ok(e)
}

/// `t` at PostgreSQL's precision, or [`Error::TimeOutOfRange`] naming `what`.
pub(super) fn pg_time<Tz: TimeZone>(
    t: &DateTime<Tz>,
    what: &'static str,
) -> Result<DateTime<Utc>, Error> {
    to_pg_precision(t).ok_or(Error::TimeOutOfRange { what })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_ids_are_bounded_non_empty_and_nul_free() {
        let id = Uuid::nil();
        assert!(record_id(id, "42").is_ok());
        assert!(record_id(id, &"x".repeat(MAX_RECORD_ID_BYTES)).is_ok());
        let problem = |s: &str| match record_id(id, s) {
            Err(HoldError::InvalidRecordId { problem, .. }) => Some(problem),
            _ => None,
        };
        assert_eq!(problem(""), Some(RecordIdProblem::Empty));
        assert_eq!(
            problem(&"x".repeat(MAX_RECORD_ID_BYTES + 1)),
            Some(RecordIdProblem::TooLong {
                bytes: MAX_RECORD_ID_BYTES + 1
            })
        );
        assert_eq!(problem("a\0b"), Some(RecordIdProblem::ContainsNul));
        // Quotes and SQL are just characters: the key type judges them.
        assert_eq!(problem("'; DROP TABLE session_notes; --"), None);
    }
}
