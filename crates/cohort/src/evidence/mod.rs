//! Evidence an auditor can trust (contract EV1–EV4): a tamper-evident
//! ledger, exports, an auditor's report and erasure certificates.
//!
//! * [`verify`] walks the hash chain that migration 4 keeps on Cohort's
//!   ledger and holds, recomputing every hash on the client, and names every
//!   row changed, deleted or inserted out of order (EV1).
//! * [`export`] streams runs, summaries or row details of a time range as
//!   JSON Lines or CSV to any [`std::io::Write`] with flat memory (EV2).
//! * [`AuditReport`] gathers an auditor's report and renders it as one
//!   self-contained HTML file with inline SVG charts (EV3);
//!   [`sign_report`] signs the file (a detached Ed25519 signature) and
//!   [`verify_report_signature`] checks it.
//! * [`Certificate`] is an erasure certificate: counts per type with their
//!   reasons, rules, times, the run id and the chain head, the subject kept
//!   as a keyed hash, optionally signed with Ed25519 (EV4).
//!
//! `docs/evidence.md` (below) is the auditor's workflow end to end and the
//! chain's design.
//!
#![doc = include_str!("../../../../docs/evidence.md")]

mod certificate;
mod chain;
mod charts;
mod export;
mod physical;
mod register;
mod report;
mod signature;

pub use crate::error::evidence::EvidenceError;
pub(crate) use certificate::subject_hmac_bytes;
pub use certificate::{
    BlockedCount, CERTIFICATE_VERSION, Certificate, CertificateMatter, CertificateOptions,
    CertificateSignature, CertificateType, ChainLink, SignedCertificate, certificate, subject_hmac,
};
pub use chain::{
    ChainHead, ChainProblem, ChainTable, ProblemKind, PrunedLink, VerifyReport, chain_link_at,
    verify,
};
pub(crate) use export::csv_field;
pub use export::{ExportFormat, ExportRecords, ExportSummary, TimeRange, export};
pub use physical::PhysicalState;
pub use register::{
    RegisterEntry, erasure_register_entry, read_erasure_register, write_erasure_register,
};
pub use report::{
    ActiveHold, ActiveMatter, AuditReport, CategoryMonth, CoverageEntry, DEFAULT_LIST_LIMIT,
    DecisionLine, DispositionEntry, DispositionTotals, EndedHold, EndedMatter, ErasureEntry,
    ErasureTotals, ExemptTable, FailedRun, FailureEntry, ReportList, ReportOptions, RuleInForce,
    RunCount, RunEntry, audit_report, run_chain_check_sql,
};
pub use signature::{
    REPORT_SIGNATURE_VERSION, ReportSignature, sign_report, verify_report_signature,
};

/// One read-only snapshot for every read of an evidence call (so its parts
/// agree, and through a pooler in transaction mode they stay on one server
/// connection); a savepoint in the caller's transaction when one is open.
pub(crate) async fn snapshot(
    conn: &mut PgConnection,
) -> Result<sqlx::Transaction<'_, sqlx::Postgres>, sqlx::Error> {
    if sqlx::Connection::is_in_transaction(conn) {
        sqlx::Connection::begin(conn).await
    } else {
        sqlx::Connection::begin_with(conn, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY").await
    }
}

/// Lower-case hex of `bytes`.
pub(crate) fn to_hex(bytes: &[u8]) -> String {
    hex::encode(bytes)
}

use crate::error::Error;
use crate::schema::{SchemaName, check_readiness};
use sqlx::PgConnection;

/// Readiness first, as every Cohort entry point: the evidence calls read the
/// columns migration 4 adds.
pub(crate) async fn ensure_ready(
    conn: &mut PgConnection,
    schema: &SchemaName,
) -> Result<(), Error> {
    check_readiness(conn, schema)
        .await?
        .into_result()
        .map(|_| ())
}
