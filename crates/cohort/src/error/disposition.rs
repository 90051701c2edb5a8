//! Why a decision on a disposition batch was refused (contract DR2).
//! Produced by the disposition layer (which re-exports these as
//! `cohort::disposition::{DispositionError, BatchStatus}`); defined here,
//! beside the error that carries them ([`super::Error::Disposition`]).

use std::fmt;

use uuid::Uuid;

/// The longest name of a decider (an approver, who rejected or extended) in
/// bytes.
pub const MAX_DECIDER_BYTES: usize = 256;

/// Where a disposition batch stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub enum BatchStatus {
    /// Frozen, waiting for its decision (possibly approved by one of two
    /// required approvers).
    Pending,
    /// Approved: the next sweep carries it out.
    Approved,
    /// A sweep is carrying it out (or was, and stopped: the next sweep
    /// finishes it).
    CarryingOut,
    /// Carried out: its rows that were still eligible and not held were
    /// changed.
    CarriedOut,
    /// Rejected: its rows are kept and not offered again until the rule
    /// changes or the re-offer period has passed.
    Rejected,
    /// Extended: its rows are kept until a date.
    Extended,
    /// Voided: the rule that selected it changed before it was carried out.
    Voided,
}

impl BatchStatus {
    /// The name stored in `retention_disposition_batches.status`.
    pub fn as_str(&self) -> &'static str {
        match self {
            BatchStatus::Pending => "Pending",
            BatchStatus::Approved => "Approved",
            BatchStatus::CarryingOut => "CarryingOut",
            BatchStatus::CarriedOut => "CarriedOut",
            BatchStatus::Rejected => "Rejected",
            BatchStatus::Extended => "Extended",
            BatchStatus::Voided => "Voided",
        }
    }

    /// The status stored as `text`, if it is one.
    pub fn parse(text: &str) -> Option<BatchStatus> {
        Some(match text {
            "Pending" => BatchStatus::Pending,
            "Approved" => BatchStatus::Approved,
            "CarryingOut" => BatchStatus::CarryingOut,
            "CarriedOut" => BatchStatus::CarriedOut,
            "Rejected" => BatchStatus::Rejected,
            "Extended" => BatchStatus::Extended,
            "Voided" => BatchStatus::Voided,
            _ => return None,
        })
    }
}

impl fmt::Display for BatchStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a decision on a disposition batch was refused. Carried by
/// [`crate::Error::Disposition`]; nothing was written, and a caller's
/// transaction is still usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DispositionError {
    /// No disposition batch has this id.
    #[error("no disposition batch {batch_id}")]
    NoSuchBatch {
        /// The id given.
        batch_id: Uuid,
    },
    /// The batch is no longer waiting for a decision: it was approved,
    /// rejected, extended, voided or carried out.
    #[error(
        "disposition batch {batch_id} is {status}, not pending: no decision can be taken on it"
    )]
    NotPending {
        /// The batch.
        batch_id: Uuid,
        /// Where it stands.
        status: BatchStatus,
    },
    /// The decider's name is empty or blank.
    #[error("a decision needs the name of who takes it (it is empty)")]
    EmptyDecider,
    /// The decider's name is longer than [`MAX_DECIDER_BYTES`] or holds NUL.
    #[error(
        "the name of who takes the decision is longer than {MAX_DECIDER_BYTES} bytes or holds NUL"
    )]
    InvalidDecider,
    /// The batch needs two distinct approvers and this one already approved
    /// it.
    #[error(
        "{approver:?} already approved disposition batch {batch_id}: it needs a second, distinct approver"
    )]
    SameApprover {
        /// The batch.
        batch_id: Uuid,
        /// The approver named twice.
        approver: String,
    },
    /// A rejection needs a reason; it is empty, too long or holds NUL.
    #[error("a rejection needs a reason of at most 4096 bytes without NUL")]
    InvalidReason,
    /// An extension must end after the database's clock.
    #[error("disposition batch {batch_id} can only be extended to a later time than now")]
    ExtensionInPast {
        /// The batch.
        batch_id: Uuid,
    },
}
