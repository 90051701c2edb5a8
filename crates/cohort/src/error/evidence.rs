//! What the evidence calls refuse, besides database errors.

use uuid::Uuid;

/// Why an evidence call failed, besides a database error or an unready
/// schema (those are [`crate::Error::Database`] and
/// [`crate::Error::SchemaNotReady`]). Reached through
/// [`crate::Error::Evidence`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EvidenceError {
    /// Writing an export or a report failed.
    #[error("writing evidence failed: {0}")]
    Io(#[from] std::io::Error),
    /// No run has this id.
    #[error("no run {run_id} in the ledger")]
    NoSuchRun {
        /// The run asked for.
        run_id: Uuid,
    },
    /// A certificate was asked for a run that is not an erasure.
    #[error("run {run_id} is not an erasure")]
    NotAnErasure {
        /// The run asked for.
        run_id: Uuid,
    },
    /// A certificate was asked for a run that has not settled: it has no
    /// chain link yet, and its counts may still change.
    #[error("run {run_id} has not settled")]
    NotSettled {
        /// The run asked for.
        run_id: Uuid,
    },
    /// A certificate was asked for a subject that the run did not erase:
    /// its keyed hash differs from the one the run recorded (another
    /// subject, or another key).
    #[error(
        "run {run_id} did not erase this subject (or the subject key differs from the one it erased with)"
    )]
    SubjectMismatch {
        /// The run asked for.
        run_id: Uuid,
    },
    /// A certificate was asked for an erasure that recorded no subject hash:
    /// it ran without a subject key ([`crate::CohortBuilder::subject_key`])
    /// or before schema migration 6, so nothing ties it to a subject.
    #[error("run {run_id} recorded no subject hash, so it cannot be certified for a subject")]
    SubjectNotRecorded {
        /// The run asked for.
        run_id: Uuid,
    },
    /// A certificate document is not one [`crate::evidence::SignedCertificate::to_json`]
    /// wrote: unparsable, or not byte for byte in canonical form.
    #[error("not a canonical certificate document: {reason}")]
    MalformedCertificate {
        /// What is wrong.
        reason: String,
    },
    /// A certificate's or report's signature is missing, is by another key,
    /// or does not verify over the document as it is.
    #[error("the signature does not verify with this key over this document")]
    BadSignature,
    /// A report's signature file cannot be read: not the JSON
    /// [`crate::evidence::ReportSignature::to_json`] writes, or a version
    /// this library does not know.
    #[error("not a report signature: {reason}")]
    MalformedSignature {
        /// What is wrong.
        reason: String,
    },
    /// The report's time range is empty (`from` is not before `to`).
    #[error("the time range is empty: from must be before to")]
    EmptyRange,
    /// Rendering the report failed (template or chart).
    #[error("rendering the report failed: {reason}")]
    Render {
        /// What failed.
        reason: String,
    },
}
