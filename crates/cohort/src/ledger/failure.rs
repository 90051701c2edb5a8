//! Sanitized failures: what the ledger stores instead of an error message.

use std::fmt;

use serde::Serialize;
use uuid::Uuid;

/// What kind of failure, as stored in the ledger. Machine-safe by construction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub enum FailureKind {
    /// A database error (the SQLSTATE says which).
    Database,
    /// The rule provider returned an error.
    RuleProvider,
    /// The rule provider panicked.
    RuleProviderPanic,
    /// The category resolved to no rule.
    UnresolvedCategory,
    /// The resolved strategy was not declared in the category's capabilities.
    UndeclaredStrategy,
    /// The strategy does not fit the type's columns.
    UnsupportedStrategy,
    /// A staged rule's stages are not a valid sequence (contract SL1).
    InvalidStages,
    /// Erasure refused a soft-delete category (no opt-in).
    SoftDeleteRefused,
    /// A custom anonymiser panicked.
    AnonymiserPanic,
    /// The run was abandoned by its owner and recovered after the settle timeout.
    Abandoned,
    /// The entity fence was not granted within `Options::fence_wait`: a
    /// transaction that created a hold on this type stayed open that long.
    FenceTimeout,
    /// A row handler's capture returned an error: the row was left unchanged.
    HandlerCapture,
    /// A row handler's snapshot does not come back equal from JSON.
    SnapshotRoundTrip,
    /// A row handler's delivery returned an error.
    Handler,
    /// A row handler's capture or delivery panicked.
    HandlerPanic,
    /// A row handler's delivery ran past nine tenths of the claim timeout.
    HandlerTimeout,
    /// A delivery's claim expired (its dispatcher crashed or stalled) and
    /// was reclaimed.
    ClaimExpired,
    /// A delivery's payload is not the handler's snapshot type.
    PayloadUndecodable,
    /// A delivery's payload was scrubbed after the payload retention.
    PayloadScrubbed,
    /// No handler with this identity is registered for the type (renamed?).
    UnknownHandler,
}

impl FailureKind {
    /// The name stored in the ledger's error envelopes.
    pub fn as_str(&self) -> &'static str {
        match self {
            FailureKind::Database => "Database",
            FailureKind::RuleProvider => "RuleProvider",
            FailureKind::RuleProviderPanic => "RuleProviderPanic",
            FailureKind::UnresolvedCategory => "UnresolvedCategory",
            FailureKind::UndeclaredStrategy => "UndeclaredStrategy",
            FailureKind::UnsupportedStrategy => "UnsupportedStrategy",
            FailureKind::InvalidStages => "InvalidStages",
            FailureKind::SoftDeleteRefused => "SoftDeleteRefused",
            FailureKind::AnonymiserPanic => "AnonymiserPanic",
            FailureKind::Abandoned => "Abandoned",
            FailureKind::FenceTimeout => "FenceTimeout",
            FailureKind::HandlerCapture => "HandlerCapture",
            FailureKind::SnapshotRoundTrip => "SnapshotRoundTrip",
            FailureKind::Handler => "Handler",
            FailureKind::HandlerPanic => "HandlerPanic",
            FailureKind::HandlerTimeout => "HandlerTimeout",
            FailureKind::ClaimExpired => "ClaimExpired",
            FailureKind::PayloadUndecodable => "PayloadUndecodable",
            FailureKind::PayloadScrubbed => "PayloadScrubbed",
            FailureKind::UnknownHandler => "UnknownHandler",
        }
    }
}

/// A sanitized failure: its kind, the SQLSTATE when there is one, and a
/// random diagnostic id. Never a message, a stack, an SQL value or a subject.
/// The full error is logged through `tracing` with the same diagnostic id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Failure {
    /// What kind of failure.
    pub kind: FailureKind,
    /// The PostgreSQL SQLSTATE, for database errors.
    pub sqlstate: Option<String>,
    /// Correlates the stored envelope with the logged error.
    pub diagnostic_id: Uuid,
}

impl Failure {
    /// Records `detail` in the log (with the diagnostic id) and returns the envelope.
    pub(crate) fn logged(
        kind: FailureKind,
        sqlstate: Option<String>,
        detail: &dyn fmt::Display,
    ) -> Failure {
        let failure = Failure {
            kind,
            sqlstate,
            diagnostic_id: Uuid::new_v4(),
        };
        tracing::error!(
            diagnostic_id = %failure.diagnostic_id,
            kind = failure.kind.as_str(),
            sqlstate = failure.sqlstate.as_deref().unwrap_or(""),
            error = %detail,
            "cohort operation failed"
        );
        failure
    }

    /// From a database error.
    pub(crate) fn from_sqlx(e: &sqlx::Error) -> Failure {
        let sqlstate = match e {
            sqlx::Error::Database(db) => db.code().map(|c| c.into_owned()),
            _ => None,
        };
        Failure::logged(FailureKind::Database, sqlstate, e)
    }

    /// A Cohort-defined reason, with nothing to log beyond the kind.
    pub(crate) fn reason(kind: FailureKind, detail: &dyn fmt::Display) -> Failure {
        Failure::logged(kind, None, detail)
    }
}

impl Failure {
    /// The stored envelope as JSON.
    pub(crate) fn envelope(&self) -> serde_json::Value {
        serde_json::json!({
            "kind": self.kind.as_str(),
            "sqlstate": self.sqlstate,
            "diagnostic_id": self.diagnostic_id.to_string(),
        })
    }
}

impl fmt::Display for Failure {
    /// The stored envelope: `{"kind":"Database","sqlstate":"42P01","diagnostic_id":"..."}`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.envelope())
    }
}
