//! `cohort subject export` (a data subject's access request, contract SA1)
//! and `cohort erasures register|replay` (erasures that survive a restore,
//! contract SA2).

use std::io::{BufRead, Write};
use std::path::Path;

use cohort::AccessRequest;
use cohort::evidence::ExportFormat;

use super::evidence::Sink;
use super::{Ctx, scope};
use crate::cli::{
    ErasuresCommand, ErasuresRegisterArgs, ErasuresReplayArgs, ExportFormatArg, SubjectCommand,
    SubjectExportArgs,
};
use crate::error::{CliError, CliResult};
use crate::output;

pub(crate) async fn run(ctx: &Ctx, cmd: &SubjectCommand) -> CliResult {
    match cmd {
        SubjectCommand::Export(args) => export(ctx, args).await,
    }
}

/// `subject export`.
async fn export(ctx: &Ctx, args: &SubjectExportArgs) -> CliResult {
    let model = ctx.model()?;
    let pool = ctx.pool().await?;
    let cohort = ctx.cohort(&pool, &model, None).await?;
    let (scope, now) = scope(&args.scope, &model)?;
    let format = match args.format {
        ExportFormatArg::Jsonl => ExportFormat::JsonLines,
        ExportFormatArg::Csv => ExportFormat::Csv,
    };
    let request =
        AccessRequest::new(args.subject.as_str(), args.requested_by.as_str()).format(format);
    let mut sink = Sink::open(args.output.as_deref())?;
    let export = match cohort
        .subject_export(&scope, now, request, sink.writer())
        .await
    {
        Ok(export) => export,
        Err(e) => {
            sink.abandon();
            return Err(e.into());
        }
    };
    let written = sink.finish()?;
    let names = super::names(&model);
    let tables: Vec<String> = export
        .types
        .iter()
        .filter(|t| t.rows > 0)
        .map(|t| {
            let name = names
                .get(&t.entity_id)
                .map_or(t.entity_type, String::as_str);
            format!("{name} {}", t.rows)
        })
        .collect();
    let summary = format!(
        "{} row(s) of the subject ({} held){}; recorded as access {}",
        export.rows,
        export.held,
        if tables.is_empty() {
            String::new()
        } else {
            format!(": {}", tables.join(", "))
        },
        export.access_id
    );
    match written {
        // The rows went to stdout: the summary goes to stderr.
        None => eprintln!("{summary}"),
        Some(_) if ctx.json() => output::json(&export)?,
        Some(path) => output::line(format!("wrote {}: {summary}", path.display()))?,
    }
    Ok(())
}

/// `erasures register|replay`.
pub(crate) async fn erasures(ctx: &Ctx, cmd: &ErasuresCommand) -> CliResult {
    match cmd {
        ErasuresCommand::Register(args) => register(ctx, args).await,
        ErasuresCommand::Replay(args) => replay(ctx, args).await,
    }
}

/// `erasures register`.
async fn register(ctx: &Ctx, args: &ErasuresRegisterArgs) -> CliResult {
    let schema = ctx.settings.schema_name()?;
    let pool = ctx.pool().await?;
    let since = args.since.map(|t| t.with_timezone(&chrono::Utc));
    let mut conn = pool.acquire().await?;
    let mut sink = Sink::open(args.output.as_deref())?;
    let written =
        match cohort::evidence::write_erasure_register(&mut conn, &schema, since, sink.writer())
            .await
        {
            Ok(n) => n,
            Err(e) => {
                sink.abandon();
                return Err(e.into());
            }
        };
    if let Some(path) = sink.finish()? {
        eprintln!("wrote {}: {written} erasure(s)", path.display());
    }
    Ok(())
}

/// After `erase --register FILE`: appends the run's entry, synced to disk.
pub(crate) async fn append_to_register(ctx: &Ctx, run_id: uuid::Uuid, path: &Path) -> CliResult {
    let schema = ctx.settings.schema_name()?;
    let pool = ctx.pool().await?;
    let mut conn = pool.acquire().await?;
    let Some(entry) = cohort::evidence::erasure_register_entry(&mut conn, &schema, run_id).await?
    else {
        eprintln!(
            "note: run {run_id} is not written to {}: a dry run, or no certificate_key was set",
            path.display()
        );
        return Ok(());
    };
    let mut line = serde_json::to_string(&entry)
        .map_err(|e| CliError::io("cannot write", path, std::io::Error::other(e)))?;
    line.push('\n');
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| CliError::io("cannot open", path, e))?;
    file.write_all(line.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| CliError::io("cannot write", path, e))?;
    eprintln!("registered erasure {run_id} in {}", path.display());
    Ok(())
}

/// One line of the host's own list of erasure requests.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Request {
    tenant: Option<uuid::Uuid>,
    subject: String,
}

/// `erasures replay`.
async fn replay(ctx: &Ctx, args: &ErasuresReplayArgs) -> CliResult {
    let open = |path: &Path| {
        std::fs::File::open(path)
            .map(std::io::BufReader::new)
            .map_err(|e| CliError::io("cannot read", path, e))
    };
    let register = cohort::evidence::read_erasure_register(open(&args.register)?)?;
    let mut requests = Vec::new();
    for (n, line) in open(&args.subjects)?.lines().enumerate() {
        let line = line.map_err(|e| CliError::io("cannot read", &args.subjects, e))?;
        if line.trim().is_empty() {
            continue;
        }
        let r: Request = serde_json::from_str(&line).map_err(|e| {
            CliError::Usage(format!(
                "{} line {}: expected {{\"tenant\": \"<uuid>\" or null, \"subject\": \"...\"}}: {e}",
                args.subjects.display(),
                n + 1
            ))
        })?;
        requests.push((r.tenant, r.subject));
    }
    let model = ctx.model()?;
    let pool = ctx.pool().await?;
    let cohort = ctx.cohort(&pool, &model, None).await?;
    let report = cohort
        .replay_erasures(&register, requests, args.since, chrono::Utc::now())
        .await?;
    if ctx.json() {
        return output::json(&report);
    }
    if report.is_empty() {
        return output::line(format!(
            "nothing to replay: the register has no erasure settled since {}",
            args.since.to_rfc3339()
        ));
    }
    for r in &report.replayed {
        output::line(format!(
            "replayed erasure {} as run {}: {} row(s) erased again ({:?})",
            r.original_run, r.run_id, r.affected, r.status
        ))?;
    }
    for id in &report.unmatched {
        output::line(format!(
            "not replayed: erasure {id}: its subject is in none of {}",
            args.subjects.display()
        ))?;
    }
    for f in &report.failed {
        output::line(format!("failed: erasure {}: {}", f.original_run, f.reason))?;
    }
    if report.unmatched.is_empty() && report.failed.is_empty() {
        Ok(())
    } else {
        Err(CliError::CheckFailed(format!(
            "{} erasure(s) not replayed",
            report.unmatched.len() + report.failed.len()
        )))
    }
}
