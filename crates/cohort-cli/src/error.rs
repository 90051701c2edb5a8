//! The command's errors and its exit codes.

use std::fmt;
use std::process::ExitCode;

use crate::model::Diagnostics;

/// The exit codes, as documented in `--help`, the README and `docs/cli.md`.
pub(crate) mod code {
    /// Success.
    pub(crate) const SUCCESS: u8 = 0;
    /// An error: the command could not do what was asked (a database error,
    /// an invalid model or settings file, a run that ended `Failed` or
    /// `PartiallyFailed`).
    pub(crate) const ERROR: u8 = 1;
    /// A usage error: unknown command or flag, a malformed value.
    pub(crate) const USAGE: u8 = 2;
    /// A check ran and failed: `schema check` (not ready), `validate`
    /// (problems found), `coverage --fail-on-unclassified` (unclassified
    /// tables), `verify` (a broken chain), `certificate` (the run did not
    /// erase that subject).
    pub(crate) const CHECK_FAILED: u8 = 3;
    /// Interrupted by Ctrl-C: the run ended `Cancelled`, or a second Ctrl-C
    /// exited at once.
    pub(crate) const INTERRUPTED: u8 = 130;
}

/// The exit-code table shown at the end of every `--help`.
pub(crate) const EXIT_CODES_HELP: &str = "\
Exit codes:
  0    success
  1    error (database, settings or model file, a run that ended Failed or PartiallyFailed,
       a worker occurrence with a failed pass)
  2    usage error (unknown command or flag, malformed value)
  3    a check failed (schema check: not ready; validate: problems found;
       coverage --fail-on-unclassified: unclassified tables;
       verify: the ledger's chain is broken; certificate: the run did not erase that subject;
       verify-report: the report's signature does not verify)
  130  interrupted by Ctrl-C (the run ended Cancelled; a second Ctrl-C exits at once)";

/// Everything that can stop a command, each with an actionable message.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CliError {
    /// The settings (file or environment) are unusable.
    #[error("settings: {0}")]
    Settings(String),

    /// The model file is missing, unreadable or has mistakes (each listed).
    #[error("{0}")]
    Model(Diagnostics),

    /// A file could not be read or written.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done (`"cannot read"`).
        what: &'static str,
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },

    /// No database is configured.
    #[error(
        "no database configured: set DATABASE_URL, pass --database-url, set database_url in cohort.toml (COHORT_DATABASE_URL), or set the PG* variables (PGHOST, PGDATABASE, ...) as for psql"
    )]
    NoDatabase,

    /// The database could not be reached; the URL is shown without its password.
    #[error("cannot connect to {url}: {source}")]
    Connect {
        /// The URL with its password replaced by `***`.
        url: String,
        /// Why.
        source: sqlx::Error,
    },

    /// An error from Cohort itself (validation, readiness, a hold refused, ...).
    #[error("{}", cohort_message(.0))]
    Cohort(#[from] cohort::Error),

    /// A database error from the command's own read-only queries.
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),

    /// The server refused the login; the message says where the user and
    /// password came from.
    #[error("{0}")]
    Login(String),

    /// Cohort refused the request for what the database holds (no such row,
    /// no such hold, a hold id taken), in the model file's words.
    #[error("{0}")]
    Refused(String),

    /// A value given on the command line is not usable (beyond what clap
    /// checks).
    #[error("{0}")]
    Usage(String),

    /// A check ran and failed; what failed was already printed.
    #[error("{0}")]
    CheckFailed(String),

    /// A run ended without succeeding; its result was already printed.
    #[error("the run {run_id} ended {status}")]
    RunNotSucceeded {
        /// The run.
        run_id: uuid::Uuid,
        /// How it ended.
        status: cohort::RunStatus,
    },

    /// The run was cancelled by Ctrl-C; its result was already printed.
    #[error("interrupted: the run {0} was cancelled (batches already committed stay committed)")]
    Interrupted(uuid::Uuid),

    /// A worker occurrence ran with failed passes; its report was already
    /// printed.
    #[error("{failed} of the occurrence's {passes} pass(es) failed (see each pass's error)")]
    PassesFailed {
        /// Passes that failed.
        failed: usize,
        /// Passes run.
        passes: usize,
    },

    /// The worker's occurrence was cancelled by Ctrl-C or SIGTERM; its report
    /// was already printed.
    #[error(
        "interrupted: the pass in flight was cancelled (batches already committed stay committed); the next occurrence sweeps it again"
    )]
    WorkerInterrupted,

    /// Something that is not anybody's input went wrong (a task panicked).
    #[error("internal error: {0}")]
    Internal(String),
}

/// Cohort's error, with its reports spelled out one problem per line.
fn cohort_message(e: &cohort::Error) -> String {
    match e {
        cohort::Error::Validation(report) if !report.readiness.is_empty() => format!(
            "the model does not fit the database: {report}fix: run `cohort schema migrate` (or apply `cohort schema sql` with your migration tool)"
        ),
        cohort::Error::Validation(report) => {
            format!("the model does not fit the database: {report}")
        }
        cohort::Error::Evidence(cohort::evidence::EvidenceError::SubjectMismatch { run_id }) => {
            format!(
                "run {run_id} did not erase this subject (or certificate_key is not the one set when it erased): no certificate"
            )
        }
        cohort::Error::Evidence(cohort::evidence::EvidenceError::SubjectNotRecorded { run_id }) => {
            format!(
                "run {run_id} recorded no subject hash, so it cannot be certified: it ran without certificate_key set \
                 (or before `cohort schema migrate` added migration 6); set COHORT_CERTIFICATE_KEY before erasing"
            )
        }
        cohort::Error::SubjectKeyMissing => {
            "certificate_key is not set, so the export cannot be recorded with the subject \
             only as a keyed hash; set COHORT_CERTIFICATE_KEY (or certificate_key in cohort.toml)"
                .to_owned()
        }
        cohort::Error::SchemaNotReady(report) => format!(
            "{e}\n{report}fix: run `cohort schema migrate` (or apply `cohort schema sql` with your migration tool)"
        ),
        other => other.to_string(),
    }
}

impl CliError {
    /// The process exit code for this error.
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) => code::USAGE,
            CliError::CheckFailed(_) => code::CHECK_FAILED,
            CliError::Cohort(cohort::Error::Evidence(
                cohort::evidence::EvidenceError::SubjectMismatch { .. }
                | cohort::evidence::EvidenceError::SubjectNotRecorded { .. },
            )) => code::CHECK_FAILED,
            CliError::Interrupted(_) | CliError::WorkerInterrupted => code::INTERRUPTED,
            _ => code::ERROR,
        }
    }

    /// Whether the error is a write to a reader that went away (a closed
    /// pipe), however deep it is wrapped.
    pub(crate) fn is_broken_pipe(&self) -> bool {
        let mut next: Option<&(dyn std::error::Error + 'static)> = Some(self);
        while let Some(e) = next {
            if let Some(io) = e.downcast_ref::<std::io::Error>()
                && io.kind() == std::io::ErrorKind::BrokenPipe
            {
                return true;
            }
            next = e.source();
        }
        false
    }

    /// Reads a file, naming it in the error.
    pub(crate) fn io(what: &'static str, path: &std::path::Path, source: std::io::Error) -> Self {
        CliError::Io {
            what,
            path: path.display().to_string(),
            source,
        }
    }
}

/// The result every command returns.
pub(crate) type CliResult<T = ()> = Result<T, CliError>;

/// An exit code as the process returns it.
pub(crate) fn exit(code: u8) -> ExitCode {
    ExitCode::from(code)
}

/// `text` without the PostgreSQL source-file line numbers sqlx appends to
/// a server's message (`database "x" does not exist at line 948`), which
/// read like a line of the operator's own file.
pub(crate) fn without_source_lines(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(" at line ") {
        let after = &rest[i + " at line ".len()..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        let ends = after[digits..]
            .chars()
            .next()
            .is_none_or(|c| matches!(c, '\n' | ';' | ',' | ')' | ':'));
        if digits > 0 && ends {
            out.push_str(&rest[..i]);
        } else {
            out.push_str(&rest[..i + " at line ".len()]);
        }
        rest = if digits > 0 && ends {
            &after[digits..]
        } else {
            after
        };
    }
    out.push_str(rest);
    out
}

/// Shows an error on stderr, prefixed with `error:`.
pub(crate) struct Shown<'a>(pub(crate) &'a CliError);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = without_source_lines(&self.0.to_string());
        write!(f, "error: {}", text.trim_end())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_source_lines_are_dropped_and_the_operators_text_kept() {
        assert_eq!(
            without_source_lines("database \"trail\" does not exist at line 948"),
            "database \"trail\" does not exist"
        );
        assert_eq!(
            without_source_lines("x at line 12; fix: y at line 3\nz"),
            "x; fix: y\nz"
        );
        assert_eq!(
            without_source_lines("model.toml at line 7 column 3"),
            "model.toml at line 7 column 3"
        );
        assert_eq!(without_source_lines("at line 5"), "at line 5");
    }

    #[test]
    fn exit_codes_match_the_documented_table() {
        assert_eq!(CliError::Usage("x".into()).exit_code(), 2);
        assert_eq!(CliError::CheckFailed("x".into()).exit_code(), 3);
        assert_eq!(CliError::NoDatabase.exit_code(), 1);
        assert_eq!(CliError::Interrupted(uuid::Uuid::nil()).exit_code(), 130);
        for line in ["  0 ", "  1 ", "  2 ", "  3 ", "  130 "] {
            assert!(EXIT_CODES_HELP.contains(line), "{line}");
        }
    }
}
