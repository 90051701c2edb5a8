//! Why a hold request or a deletion target was refused. Produced by the
//! holds layer (which re-exports it as `cohort::holds::HoldError`); defined
//! here, beside the error that carries it ([`super::Error::Hold`]).

use std::fmt;

use chrono::{DateTime, Utc};
use uuid::Uuid;

/// The longest record id Cohort accepts, in bytes. Real keys are far shorter;
/// the bound keeps a hostile or corrupted id from reaching the database.
pub const MAX_RECORD_ID_BYTES: usize = 1024;

/// The longest hold reason Cohort accepts, in bytes: a reason is a short
/// citation ("Litigation hold - case #12345"), not a document.
pub const MAX_REASON_BYTES: usize = 4096;

/// Why a record id was refused before any SQL ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecordIdProblem {
    /// The record id is empty.
    Empty,
    /// The record id is longer than [`MAX_RECORD_ID_BYTES`].
    TooLong {
        /// Its length in bytes.
        bytes: usize,
    },
    /// The record id contains a NUL byte, which PostgreSQL text cannot hold.
    ContainsNul,
}

impl fmt::Display for RecordIdProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordIdProblem::Empty => f.write_str("is empty"),
            RecordIdProblem::TooLong { bytes } => write!(
                f,
                "is {bytes} bytes long; the limit is {MAX_RECORD_ID_BYTES}"
            ),
            RecordIdProblem::ContainsNul => f.write_str("contains a NUL byte"),
        }
    }
}

/// Why a legal-hold request, a hold lookup or a host-deletion target was
/// refused. Carried by [`crate::Error::Hold`].
///
/// Messages never contain the record id or the reason text: record ids
/// identify people's data, and errors end up in logs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HoldError {
    /// No retained type with this retained-entity id is registered (exempt
    /// types cannot be held: no strategy touches them).
    #[error("no retained type with retained-entity id {entity_id} is registered")]
    UnknownEntity {
        /// The id given.
        entity_id: Uuid,
    },

    /// A tenant was given for a tenantless type; its holds have no tenant.
    #[error("retained type {entity_id} is tenantless; pass no tenant")]
    TenantNotAllowed {
        /// The retained type.
        entity_id: Uuid,
    },

    /// No tenant was given for a tenant-scoped type.
    #[error("retained type {entity_id} is tenant-scoped; a tenant is required")]
    TenantRequired {
        /// The retained type.
        entity_id: Uuid,
    },

    /// The record id is empty, too long or contains NUL.
    #[error("the record id for retained type {entity_id} {problem}")]
    InvalidRecordId {
        /// The retained type.
        entity_id: Uuid,
        /// What is wrong with it.
        problem: RecordIdProblem,
    },

    /// PostgreSQL could not read the record id as a value of the key
    /// column's type (a malformed UUID, a number out of range, a domain
    /// constraint it breaks). Rejected under a savepoint: a caller's
    /// transaction is still usable.
    #[error(
        "the record id is not a valid value of the key type of retained type {entity_id} (SQLSTATE {sqlstate})"
    )]
    MalformedRecordId {
        /// The retained type.
        entity_id: Uuid,
        /// PostgreSQL's SQLSTATE for the failed conversion (class 22, or 23514
        /// for a domain CHECK).
        sqlstate: String,
    },

    /// The reason is empty or only whitespace.
    #[error("a hold needs a non-empty reason")]
    EmptyReason,

    /// The reason contains a NUL byte, which PostgreSQL text cannot hold.
    #[error("the hold reason contains a NUL byte")]
    ReasonContainsNul,

    /// The reason is longer than [`MAX_REASON_BYTES`].
    #[error("the hold reason is {bytes} bytes long; the limit is {MAX_REASON_BYTES}")]
    ReasonTooLong {
        /// Its length in bytes.
        bytes: usize,
    },

    /// The expiry is not after the creation time.
    #[error("a hold's expiry ({expires_at}) must be after its creation ({created_at})")]
    ExpiryNotAfterCreation {
        /// The requested creation time.
        created_at: DateTime<Utc>,
        /// The requested expiry.
        expires_at: DateTime<Utc>,
    },

    /// No row of the retained type has this record id in the tenant given
    /// (in the caller's snapshot), so the hold would protect nothing. A row
    /// that exists only in another tenant gets exactly this answer: the API
    /// never tells a caller about another tenant's rows.
    #[error("no row of retained type {entity_id} has this record id in this tenant")]
    NoSuchRow {
        /// The retained type.
        entity_id: Uuid,
    },

    /// A hold with this id already exists.
    #[error("a hold with id {hold_id} already exists")]
    DuplicateHoldId {
        /// The id given.
        hold_id: Uuid,
    },

    /// No hold has this id.
    #[error("no hold has id {hold_id}")]
    NoSuchHold {
        /// The id given.
        hold_id: Uuid,
    },

    /// A matter needs a non-empty owner (who asked for it).
    #[error("a matter needs a non-empty owner (who asked for it)")]
    EmptyOwner,

    /// The owner is longer than [`MAX_REASON_BYTES`] or contains NUL.
    #[error("a matter's owner must be at most {MAX_REASON_BYTES} bytes of text without NUL")]
    InvalidOwner,

    /// A subject matter's subject is empty, longer than 1,024 bytes or
    /// contains NUL.
    #[error("a matter's subject must be 1 to 1024 bytes of text without NUL")]
    InvalidMatterSubject,

    /// A matter's anchor window ends before it starts.
    #[error("a matter's anchor window ends ({to}) before it starts ({from})")]
    WindowEndsBeforeStart {
        /// The window's start.
        from: DateTime<Utc>,
        /// Its end.
        to: DateTime<Utc>,
    },

    /// A subject matter names no retained type (an empty list), or none of
    /// the types it covers has an erasure-subject column, so it could
    /// protect nothing.
    #[error(
        "no retained type of this matter has an erasure-subject column, so the subject matches nothing"
    )]
    NoSubjectColumn,

    /// A matter with this id already exists.
    #[error("a matter with id {matter_id} already exists")]
    DuplicateMatterId {
        /// The id given.
        matter_id: Uuid,
    },

    /// No matter has this id.
    #[error("no matter has id {matter_id}")]
    NoSuchMatter {
        /// The id given.
        matter_id: Uuid,
    },

    /// The matter was released; it cannot change any more.
    #[error("matter {matter_id} is released; create another")]
    MatterReleased {
        /// The matter.
        matter_id: Uuid,
    },

    /// An extension would end the matter earlier than it ends now: release
    /// it instead.
    #[error(
        "matter {matter_id} ends later than that; extending cannot shorten it (release it instead)"
    )]
    ExpiryNotExtended {
        /// The matter.
        matter_id: Uuid,
    },

    /// A host deletion named more targets than [`MAX_DELETION_TARGETS`](crate::holds::MAX_DELETION_TARGETS).
    #[error("a host deletion may name at most {max} targets; {count} were given")]
    TooManyTargets {
        /// How many were given.
        count: usize,
        /// The limit.
        max: usize,
    },
}
