//! The crate's one error type, at the bottom of the layers: every layer's
//! public functions return it. The types its variants carry (a readiness
//! report, a validation report, a hold's or an evidence call's refusal)
//! describe a failure and are defined here beside it, so the error composes
//! nothing from the layers above; the layers that produce them re-export
//! them at their public paths (`cohort::schema::ReadinessReport`,
//! `cohort::ValidationReport`, `cohort::holds::HoldError`,
//! `cohort::evidence::EvidenceError`, `cohort::disposition::DispositionError`).

pub(crate) mod disposition;
pub(crate) mod event;
pub(crate) mod evidence;
pub(crate) mod hold;
pub(crate) mod readiness;
pub(crate) mod validation;

use crate::sql::ident::IdentProblem;
use readiness::ReadinessReport;
use validation::ValidationReport;

/// Everything that can go wrong in Cohort, as variants a caller can act on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A schema, table or column name cannot be used as a PostgreSQL identifier.
    #[error("invalid {what} name {name:?}: {problem}")]
    InvalidIdentifier {
        /// What the name was for (`"schema"`, `"table"`, `"column"`).
        what: &'static str,
        /// The offending name, with NUL bytes shown escaped.
        name: String,
        /// Why it was refused.
        problem: IdentProblem,
    },

    /// Cohort's tables are missing or do not have the shape Cohort relies on.
    /// Apply Cohort's migrations ([`crate::schema::migrations`]); the report
    /// lists every problem (its `Display` gives one line each).
    #[error("Cohort's tables in schema {schema:?} are not ready: {count} problem(s)", schema = .0.schema.as_str(), count = .0.problems.len())]
    SchemaNotReady(ReadinessReport),

    /// Start-up validation found problems; the report lists every one (its
    /// `Display` gives one line each). This error's own message is one line,
    /// so print the report to show them:
    ///
    /// ```no_run
    /// # async fn start(builder: cohort::CohortBuilder) -> Option<cohort::Cohort> {
    /// match builder.build().await {
    ///     Ok(cohort) => Some(cohort),
    ///     Err(cohort::Error::Validation(report)) => {
    ///         // "Cohort's configuration is invalid: 2 problem(s)", then one
    ///         // line per problem, each naming the type, table and column.
    ///         eprintln!("{}", cohort::Error::Validation(report.clone()));
    ///         for problem in &report.problems {
    ///             eprintln!("  {problem}");
    ///         }
    ///         for problem in &report.readiness {
    ///             eprintln!("  {problem}");
    ///         }
    ///         None
    ///     }
    ///     Err(other) => {
    ///         eprintln!("{other}");
    ///         None
    ///     }
    /// }
    /// # }
    /// ```
    #[error("Cohort's configuration is invalid: {count} problem(s)", count = .0.len())]
    Validation(ValidationReport),

    /// An erasure subject that is empty, too long, contains NUL, or fits no
    /// erasure-subject column of the scope's retained types. Nothing was written.
    #[error("invalid erasure subject: {reason}")]
    InvalidSubject {
        /// Why.
        reason: &'static str,
    },

    /// A subject access export was asked for without saying who asked (an
    /// empty or blank `requested_by`). Nothing was written.
    #[error("a subject access export needs who asked for it (requested_by is empty)")]
    InvalidRequester,

    /// The handle has no subject key ([`crate::CohortBuilder::subject_key`]),
    /// so the subject access export cannot be recorded with the subject as
    /// a keyed hash. Nothing was written.
    #[error(
        "no subject key is set (CohortBuilder::subject_key): the export cannot be recorded without the subject in clear"
    )]
    SubjectKeyMissing,

    /// Writing a subject access export to its destination failed; the
    /// export was not recorded.
    #[error("writing the subject access export failed: {0}")]
    ExportWrite(#[source] std::io::Error),

    /// An erasure was refused because these types' categories resolve to
    /// soft-delete, which leaves personal data in the row. Nothing was written;
    /// opt in with `ErasureRequest::allow_soft_delete` if a flag is enough.
    #[error(
        "erasure refused: {entity_types:?} resolve to SoftDelete; opt in with allow_soft_delete"
    )]
    SoftDeleteErasureRefused {
        /// The types concerned.
        entity_types: Vec<&'static str>,
    },

    /// A database error Cohort did not expect.
    #[error(transparent)]
    Database(#[from] sqlx::Error),

    /// A run lost its connection (or the ledger refused its terminal status)
    /// after its `Started` row committed. The run stays `Started` until
    /// [`crate::Cohort::settle_abandoned_runs`] settles it; its committed
    /// batches stay committed.
    #[error("run {run_id} was interrupted: {source}")]
    RunInterrupted {
        /// The run left `Started`.
        run_id: uuid::Uuid,
        /// What went wrong.
        source: sqlx::Error,
    },

    /// The run was settled as abandoned by another process while this one
    /// still ran it (its lease had expired: the process was paused, cut off
    /// or too slow to renew it; contract CO2). This process stopped writing
    /// it at once; what it committed before stays, counted once, in the
    /// settled run.
    #[error(
        "run {run_id} was settled by another process after its lease expired; this process stopped writing it"
    )]
    RunLeaseLost {
        /// The run.
        run_id: uuid::Uuid,
    },

    /// A time given to Cohort is outside what PostgreSQL can store
    /// (4714 BC to 294276 AD). Nothing was written.
    #[error("{what} is outside PostgreSQL's timestamp range")]
    TimeOutOfRange {
        /// Which time (`"now"`, `"created_at"`, `"expires_at"`, ...).
        what: &'static str,
    },

    /// A legal-hold request (or a host-deletion target) was refused; the
    /// [`HoldError`](crate::holds::HoldError) says why. Nothing was written,
    /// and a caller's transaction is still usable.
    #[error(transparent)]
    Hold(#[from] hold::HoldError),

    /// A decision on a disposition batch was refused; the
    /// [`DispositionError`](crate::disposition::DispositionError) says why.
    /// Nothing was written, and a caller's transaction is still usable.
    #[error(transparent)]
    Disposition(#[from] disposition::DispositionError),
    /// An event request (contract SL4) was refused; the
    /// [`EventError`](crate::events::EventError) says why. Nothing was
    /// written.
    #[error(transparent)]
    Event(#[from] event::EventError),

    /// An evidence call (verify, export, report, certificate) refused or
    /// failed to write.
    #[error("{0}")]
    Evidence(#[from] evidence::EvidenceError),

    /// The host-deletion service owns its transaction, but the connection it
    /// was given is already inside one. Call it on a connection with no
    /// transaction open.
    #[error(
        "the connection already has a transaction open; the deletion service owns its transaction"
    )]
    TransactionAlreadyOpen,

    /// The connection is inside a transaction that was not started through
    /// sqlx (a raw `BEGIN`), so Cohort cannot join it under a savepoint
    /// without committing it. Start the transaction with
    /// `Connection::begin` or `Pool::begin` and pass `&mut *tx`.
    #[error(
        "the connection is inside a transaction sqlx did not start (raw BEGIN); start it with sqlx's begin() and pass &mut *tx"
    )]
    UntrackedTransaction,

    /// The worker's tenant source failed, or returned a tenant Cohort cannot
    /// sweep (the nil UUID, which the ledger reserves for tenantless
    /// passes). The occurrence ran no pass; the next one tries again.
    #[error("the tenant source failed: {reason}")]
    TenantSource {
        /// Why.
        reason: String,
    },
}

/// Shorthand for results with Cohort's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
