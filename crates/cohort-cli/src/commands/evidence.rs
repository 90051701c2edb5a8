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
use crate::cli::{
    CertificateArgs, ExportFormatArg, ExportRecordsArg, ReportArgs, RunsExportArgs,
    VerifyReportArgs,
};
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

/// The model's exempt tables for the report: from the model file when it
/// is there (an explicit `--model` must be), `None` with `--no-model` or
/// without the file.
fn exempt_tables(
    ctx: &Ctx,
    args: &ReportArgs,
) -> CliResult<Option<Vec<cohort::evidence::ExemptTable>>> {
    if args.no_model {
        return Ok(None);
    }
    if ctx.global.model.is_none() && !ctx.model_path().exists() {
        eprintln!(
            "note: no model file at {}: the report cannot list exempt tables (--no-model says so quietly)",
            ctx.model_path().display()
        );
        return Ok(None);
    }
    let model = ctx.model()?;
    Ok(Some(
        model
            .exempt
            .iter()
            .map(|x| {
                let schema = x
                    .schema
                    .as_deref()
                    .unwrap_or(ctx.settings.default_table_schema.as_str());
                cohort::evidence::ExemptTable::new(
                    x.name.clone(),
                    format!("{schema}.{}", x.table),
                    x.reason.clone(),
                )
            })
            .collect(),
    ))
}

/// `<file>.sig`.
fn signature_path(file: &Path) -> PathBuf {
    let mut name = file.file_name().unwrap_or_default().to_os_string();
    name.push(".sig");
    file.with_file_name(name)
}

/// `report`.
pub(crate) async fn report(ctx: &Ctx, args: &ReportArgs) -> CliResult {
    let schema = ctx.settings.schema_name()?;
    let signer = args.sign.as_deref().map(signing_key).transpose()?;
    // `--sign` requires `--output` (clap refuses it alone): the signature
    // is written beside the file.
    let output = args.output.as_deref();
    let exempt = exempt_tables(ctx, args)?;
    let pool = ctx.pool().await?;
    let now = Utc::now();
    let mut options = ReportOptions::new(range(args.from, args.to, now)?);
    if let Some(title) = &args.title {
        options.title.clone_from(title);
    }
    options.exempt = exempt;
    options.list_limit = args.list_limit;
    options.signed_by = signer
        .as_ref()
        .map(|k| hex::encode(k.verifying_key().as_bytes()));
    let mut conn = pool.acquire().await?;
    let report = cohort::evidence::audit_report(&mut conn, &schema, &options).await?;
    let html = report.to_html()?;
    let mut sink = Sink::open(output)?;
    let io = |e| CliError::io("cannot write", Path::new("the report"), e);
    sink.writer().write_all(html.as_bytes()).map_err(io)?;
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
        if let Some(key) = &signer {
            let sig_path = signature_path(&path);
            let signature = cohort::evidence::sign_report(html.as_bytes(), key);
            let mut sig = Sink::open(Some(&sig_path))?;
            sig.writer()
                .write_all(signature.to_json().as_bytes())
                .map_err(|e| CliError::io("cannot write", &sig_path, e))?;
            sig.finish()?;
            eprintln!(
                "wrote {} (Ed25519, public key {})",
                sig_path.display(),
                signature.public_key
            );
        }
    }
    Ok(())
}

/// `verify-report` as JSON.
#[derive(Debug, Serialize)]
pub(crate) struct VerifyReportJson {
    /// Whether the signature is the key's over the file as it is.
    pub(crate) valid: bool,
    /// The report file.
    pub(crate) file: String,
    /// The signature file.
    pub(crate) signature: String,
    /// The key checked against, hex.
    pub(crate) public_key: String,
    /// The file's SHA-256, hex.
    pub(crate) sha256: String,
    /// Why not, when not.
    pub(crate) problem: Option<String>,
}

/// The public key of `verify-report`: 64 hex digits, a file holding them,
/// or a signing key's seed file.
fn verifying_key(args: &VerifyReportArgs) -> CliResult<ed25519_dalek::VerifyingKey> {
    if let Some(path) = &args.signing_key {
        return Ok(signing_key(path)?.verifying_key());
    }
    let given = args.public_key.as_deref().unwrap_or_default().trim();
    let text = if given.len() == 64 && given.chars().all(|c| c.is_ascii_hexdigit()) {
        given.to_owned()
    } else {
        let path = Path::new(given);
        std::fs::read_to_string(path)
            .map_err(|e| CliError::io("cannot read", path, e))?
            .trim()
            .to_owned()
    };
    let bad = || {
        CliError::Usage(format!(
            "--public-key {given:?}: give the Ed25519 public key as 64 hex digits, or a file holding them"
        ))
    };
    let bytes: [u8; 32] = hex::decode(&text)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or_else(bad)?;
    ed25519_dalek::VerifyingKey::from_bytes(&bytes).map_err(|_| bad())
}

/// `verify-report`: no database.
pub(crate) fn verify_report(ctx: &Ctx, args: &VerifyReportArgs) -> CliResult {
    let key = verifying_key(args)?;
    let sig_path = args
        .signature
        .clone()
        .unwrap_or_else(|| signature_path(&args.file));
    let file = std::fs::read(&args.file).map_err(|e| CliError::io("cannot read", &args.file, e))?;
    let signature = std::fs::read_to_string(&sig_path)
        .map_err(|e| CliError::io("cannot read", &sig_path, e))?;
    let checked = cohort::evidence::verify_report_signature(&file, &signature, &key);
    let json = VerifyReportJson {
        valid: checked.is_ok(),
        file: args.file.display().to_string(),
        signature: sig_path.display().to_string(),
        public_key: hex::encode(key.as_bytes()),
        sha256: hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&file)),
        problem: checked.as_ref().err().map(ToString::to_string),
    };
    if ctx.json() {
        output::json(&json)?;
    } else if json.valid {
        output::line(format!(
            "{}: signed by {} (SHA-256 {})",
            json.file, json.public_key, json.sha256
        ))?;
    }
    match checked {
        Ok(_) => Ok(()),
        Err(cohort::evidence::EvidenceError::MalformedSignature { reason }) => {
            Err(CliError::CheckFailed(format!(
                "{} is not a report signature: {reason}",
                json.signature
            )))
        }
        Err(e) => Err(CliError::CheckFailed(format!(
            "{}: {e}: the file changed since it was signed, or another key signed it",
            json.file
        ))),
    }
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
        ExportRecordsArg::Decisions => ExportRecords::Decisions,
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
