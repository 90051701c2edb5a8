//! `cohort subject export`: a data subject's access request (contract SA1).

use cohort::AccessRequest;
use cohort::evidence::ExportFormat;

use super::evidence::Sink;
use super::{Ctx, scope};
use crate::cli::{ExportFormatArg, SubjectCommand, SubjectExportArgs};
use crate::error::CliResult;
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
