//! The auditor's commands: `verify`, `report`, `certificate` and `runs
//! export`, each the library's own call (`cohort::evidence`) on the
//! configured schema. Nothing here reads the ledger by itself.

use std::io::Write;
use std::path::{Path, PathBuf};

use chrono::{DateTime, FixedOffset, Utc};
use cohort::evidence::{
    CertificateOptions, ExportFormat, ExportRecords, ReportOptions, TimeRange, VerifyReport,
};
use cohort::schema::SchemaName;
use serde::Serialize;
use sqlx::{AssertSqlSafe, PgPool};
use uuid::Uuid;

use super::Ctx;
use crate::cli::{CertificateArgs, ExportFormatArg, ExportRecordsArg, ReportArgs, RunsExportArgs};
use crate::db::qualified;
use crate::error::{CliError, CliResult};
use crate::output::{self, time};

/// `verify` as JSON.
#[derive(Debug, Serialize)]
pub(crate) struct VerifyJson {
    /// Whether nothing failed.
    pub(crate) intact: bool,
    /// The schema verified.
    pub(crate) schema: String,
    /// Sealed runs checked.
    pub(crate) runs: u64,
    /// Runs still `Started`.
    pub(crate) runs_in_progress: u64,
    /// Summaries checked.
    pub(crate) summaries: u64,
    /// Row details checked.
    pub(crate) details: u64,
    /// Hold links checked.
    pub(crate) hold_links: u64,
    /// Hold links pruned (not a problem).
    pub(crate) pruned: usize,
    /// Whether captured payloads were checked against their digests.
    pub(crate) payloads_checked: bool,
    /// The install's chain head: its position and hash (null: no run yet).
    pub(crate) head: Option<HeadJson>,
    /// Every row or gap that fails, in words.
    pub(crate) problems: Vec<ProblemJson>,
}

/// A chain position.
#[derive(Debug, Serialize)]
pub(crate) struct HeadJson {
    /// The position.
    pub(crate) seq: i64,
    /// The SHA-256, hex.
    pub(crate) hash: String,
}

/// One problem `verify` found.
#[derive(Debug, Serialize)]
pub(crate) struct ProblemJson {
    /// The table.
    pub(crate) table: &'static str,
    /// The row (or the run whose chain is short).
    pub(crate) row: String,
    /// The position, where it has one.
    pub(crate) seq: Option<i64>,
    /// What is wrong, in words.
    pub(crate) message: String,
}

fn verify_json(r: &VerifyReport) -> VerifyJson {
    VerifyJson {
        intact: r.is_intact(),
        schema: r.schema.as_str().to_owned(),
        runs: r.runs,
        runs_in_progress: r.runs_in_progress,
        summaries: r.summaries,
        details: r.details,
        hold_links: r.hold_links,
        pruned: r.pruned.len(),
        payloads_checked: r.payloads_checked,
        head: r.head.as_ref().map(|h| HeadJson {
            seq: h.seq,
            hash: h.hash.clone(),
        }),
        problems: r
            .problems
            .iter()
            .map(|p| ProblemJson {
                table: p.table.table(),
                row: p.row.clone(),
                seq: p.seq,
                message: p.to_string(),
            })
            .collect(),
    }
}

/// `verify`.
pub(crate) async fn verify(ctx: &Ctx) -> CliResult {
    let schema = ctx.settings.schema_name()?;
    let pool = ctx.pool().await?;
    let mut conn = pool.acquire().await?;
    let report = cohort::evidence::verify(&mut conn, &schema).await?;
    let json = verify_json(&report);
    if ctx.json() {
        output::json(&json)?;
    } else {
        output::line(report.to_string().trim_end())?;
    }
    if json.intact {
        Ok(())
    } else {
        Err(CliError::CheckFailed(format!(
            "the ledger's chain is broken: {} problem(s)",
            json.problems.len()
        )))
    }
}

fn utc(t: Option<DateTime<FixedOffset>>) -> Option<DateTime<Utc>> {
    t.map(|t| t.with_timezone(&Utc))
}

/// `[from, to)` from the flags, each end open when not given.
fn range(
    from: Option<DateTime<FixedOffset>>,
    to: Option<DateTime<FixedOffset>>,
    default_to: DateTime<Utc>,
) -> CliResult<TimeRange> {
    let all = TimeRange::all();
    let r = TimeRange::new(utc(from).unwrap_or(all.from), utc(to).unwrap_or(default_to));
    if r.from >= r.to {
        return Err(CliError::Usage(format!(
            "--from {} is not before --to {}: the range is empty",
            time(&r.from),
            time(&r.to)
        )));
    }
    Ok(r)
}

/// Where output goes: a file (written whole, then renamed into place) or
/// stdout.
pub(crate) enum Sink {
    File {
        path: PathBuf,
        tmp: PathBuf,
        out: std::io::BufWriter<std::fs::File>,
    },
    Stdout(std::io::StdoutLock<'static>),
}

impl Sink {
    pub(crate) fn open(path: Option<&Path>) -> CliResult<Sink> {
        match path {
            None => Ok(Sink::Stdout(std::io::stdout().lock())),
            Some(path) => {
                let mut name = path.file_name().unwrap_or_default().to_os_string();
                name.push(".partial");
                let tmp = path.with_file_name(name);
                let file = std::fs::File::create(&tmp)
                    .map_err(|e| CliError::io("cannot create", &tmp, e))?;
                Ok(Sink::File {
                    path: path.to_path_buf(),
                    tmp,
                    out: std::io::BufWriter::new(file),
                })
            }
        }
    }

    pub(crate) fn writer(&mut self) -> &mut dyn Write {
        match self {
            Sink::File { out, .. } => out,
            Sink::Stdout(s) => s,
        }
    }

    /// Drops what was written: a file's partial copy is removed (an export
    /// that failed half-way must not leave personal data behind).
    pub(crate) fn abandon(self) {
        if let Sink::File { tmp, out, .. } = self {
            drop(out);
            if let Err(e) = std::fs::remove_file(&tmp) {
                eprintln!("warning: cannot remove {}: {e}", tmp.display());
            }
        }
    }

    /// Flushes, and puts a file in place; the name written, if a file.
    pub(crate) fn finish(self) -> CliResult<Option<PathBuf>> {
        match self {
            Sink::Stdout(mut s) => {
                s.flush()
                    .map_err(|e| CliError::io("cannot write to", Path::new("stdout"), e))?;
                Ok(None)
            }
            Sink::File { path, tmp, mut out } => {
                out.flush()
                    .map_err(|e| CliError::io("cannot write", &tmp, e))?;
                drop(out);
                std::fs::rename(&tmp, &path).map_err(|e| CliError::io("cannot write", &path, e))?;
                Ok(Some(path))
            }
        }
    }
}

/// `report`.
pub(crate) async fn report(ctx: &Ctx, args: &ReportArgs) -> CliResult {
    let schema = ctx.settings.schema_name()?;
    let pool = ctx.pool().await?;
    let now = Utc::now();
    let mut options = ReportOptions::new(range(args.from, args.to, now)?);
    if let Some(title) = &args.title {
        options.title.clone_from(title);
    }
    let mut conn = pool.acquire().await?;
    let report = cohort::evidence::audit_report(&mut conn, &schema, &options).await?;
    let mut sink = Sink::open(args.output.as_deref())?;
    report.write_html(sink.writer())?;
    if let Some(path) = sink.finish()? {
        let chain = if report.verification.is_intact() {
            "the chain is intact".to_owned()
        } else {
            format!(
                "the chain has {} problem(s), listed in the report",
                report.verification.problems.len()
            )
        };
        eprintln!("wrote {} ({chain})", path.display());
    }
    Ok(())
}

/// The latest settled erasure run.
async fn latest_erasure(pool: &PgPool, schema: &SchemaName) -> CliResult<Uuid> {
    let sql = format!(
        "SELECT r.run_id FROM {} r \
         WHERE r.run_kind OPERATOR(pg_catalog.=) 'Erasure' AND r.settled_at IS NOT NULL \
         ORDER BY r.started_at DESC, r.run_id LIMIT 1",
        qualified(schema.as_str(), "sweep_run")?
    );
    // Every read in one transaction, each statement unnamed: through a
    // pooler in transaction mode they stay on one server connection.
    let mut tx = pool.begin().await?;
    let id: Option<Uuid> = sqlx::query_scalar(AssertSqlSafe(sql))
        .persistent(false)
        .fetch_optional(&mut *tx)
        .await?;
    id.ok_or_else(|| {
        CliError::Usage("the ledger has no settled erasure run; give a run's id".to_owned())
    })
}

fn signing_key(path: &Path) -> CliResult<ed25519_dalek::SigningKey> {
    let text = std::fs::read_to_string(path).map_err(|e| CliError::io("cannot read", path, e))?;
    let bad = || {
        CliError::Settings(format!(
            "the signing key {} must hold a 32-byte Ed25519 seed as 64 hex digits",
            path.display()
        ))
    };
    let bytes = hex::decode(text.trim()).map_err(|_| bad())?;
    let seed: [u8; 32] = bytes.try_into().map_err(|_| bad())?;
    Ok(ed25519_dalek::SigningKey::from_bytes(&seed))
}

/// `certificate`.
pub(crate) async fn certificate(ctx: &Ctx, args: &CertificateArgs) -> CliResult {
    let schema = ctx.settings.schema_name()?;
    let key = ctx.settings.certificate_key.as_deref().ok_or_else(|| {
        CliError::Settings(
            "certificate_key is not set: the certificate keeps the subject as an HMAC under it; \
             set COHORT_CERTIFICATE_KEY (or certificate_key in cohort.toml)"
                .to_owned(),
        )
    })?;
    let signer = args.signing_key.as_deref().map(signing_key).transpose()?;
    let pool = ctx.pool().await?;
    let run_id = if args.run.eq_ignore_ascii_case("latest") {
        latest_erasure(&pool, &schema).await?
    } else {
        Uuid::parse_str(args.run.trim()).map_err(|e| {
            CliError::Usage(format!(
                "{:?} is not a run id ({e}); give an erasure run's UUID or `latest`",
                args.run
            ))
        })?
    };
    let options = CertificateOptions {
        subject: &args.subject,
        subject_key: key.as_bytes(),
        subject_in_clear: args.subject_in_clear,
    };
    let mut conn = pool.acquire().await?;
    let cert = cohort::evidence::certificate(&mut conn, &schema, run_id, &options).await?;
    let document = match &signer {
        Some(k) => cert.sign(k),
        None => cert.unsigned(),
    };
    let mut sink = Sink::open(args.output.as_deref())?;
    let w = sink.writer();
    let io = |e| CliError::io("cannot write", Path::new("the certificate"), e);
    w.write_all(document.to_json().as_bytes()).map_err(io)?;
    w.write_all(b"\n").map_err(io)?;
    if let Some(path) = sink.finish()? {
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// `runs export`.
pub(crate) async fn export(pool: &PgPool, schema: &SchemaName, args: &RunsExportArgs) -> CliResult {
    let range = range(args.from, args.to, TimeRange::all().to)?;
    let records = match args.records {
        ExportRecordsArg::Runs => ExportRecords::Runs,
        ExportRecordsArg::Summaries => ExportRecords::Summaries,
        ExportRecordsArg::RowDetails => ExportRecords::RowDetails,
    };
    let format = match args.format {
        ExportFormatArg::Jsonl => ExportFormat::JsonLines,
        ExportFormatArg::Csv => ExportFormat::Csv,
    };
    let mut conn = pool.acquire().await?;
    let mut sink = Sink::open(args.output.as_deref())?;
    let written =
        cohort::evidence::export(&mut conn, schema, records, range, format, sink.writer()).await?;
    if let Some(path) = sink.finish()? {
        eprintln!("wrote {} record(s) to {}", written.records, path.display());
    }
    Ok(())
}
