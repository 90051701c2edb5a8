//! `validate`: the model file, every mistake at once with file, line and
//! key; then the library's own start-up validation against the live
//! catalog (every problem at once, each naming its table and column), and
//! the readiness of Cohort's tables.

use serde::Serialize;

use super::Ctx;
use crate::cli::ValidateArgs;
use crate::error::{CliError, CliResult};
use crate::model::Diagnostic;
use crate::output;

/// `validate --json`.
#[derive(Debug, Default, Serialize)]
struct ValidateJson {
    /// The model file.
    file: String,
    /// Whether everything checked is valid.
    valid: bool,
    /// Whether the live database was checked.
    database_checked: bool,
    /// Mistakes in the file (file, line, column, key, message).
    model_errors: Vec<Diagnostic>,
    /// Oddities in the file.
    model_warnings: Vec<Diagnostic>,
    /// Problems the live-catalog validation found.
    problems: Vec<ProblemJson>,
    /// Problems with Cohort's tables.
    readiness: Vec<String>,
    /// What only makes Cohort slower, with the statement that fixes it.
    warnings: Vec<ProblemJson>,
    /// Retained tables.
    retained: usize,
    /// Exempt tables.
    exempt: usize,
}

/// A problem the library reported.
#[derive(Debug, Serialize)]
struct ProblemJson {
    /// The table's name in the model, when the problem is about one.
    entity: Option<String>,
    /// The table, schema-qualified.
    table: Option<String>,
    /// The column.
    column: Option<String>,
    /// The setting, for a problem with the settings.
    option: Option<String>,
    /// What is wrong.
    problem: String,
    /// How to fix it.
    fix: String,
}

fn problem(p: &cohort::ValidationProblem) -> ProblemJson {
    ProblemJson {
        entity: p.type_name.clone(),
        table: p.table.clone(),
        column: p.column.clone(),
        option: p.option.map(str::to_owned),
        problem: p.problem.clone(),
        fix: p.fix.clone(),
    }
}

/// `validate`.
pub(crate) async fn run(ctx: &Ctx, args: &ValidateArgs) -> CliResult {
    let mut out = ValidateJson {
        file: ctx.model_path().display().to_string(),
        ..ValidateJson::default()
    };
    let model = match ctx.parse_model()? {
        Ok(m) => Some(m),
        Err(d) => {
            out.model_errors = d.errors;
            None
        }
    };
    if let Some(m) = &model {
        out.model_warnings = m.warnings.clone();
        out.retained = m.entities.len();
        out.exempt = m.exempt.len();
        if !args.offline {
            let pool = ctx.pool().await?;
            out.database_checked = true;
            match ctx.cohort(&pool, m, None).await {
                Ok(cohort) => out.warnings = cohort.warnings().iter().map(problem).collect(),
                Err(CliError::Cohort(cohort::Error::Validation(report))) => {
                    out.problems = report.problems.iter().map(problem).collect();
                    out.readiness = report.readiness.iter().map(ToString::to_string).collect();
                }
                Err(e) => return Err(e),
            }
        }
    }
    out.valid = out.model_errors.is_empty() && out.problems.is_empty() && out.readiness.is_empty();

    if ctx.json() {
        output::json(&out)?;
    } else {
        print(&out)?;
    }
    if out.valid {
        Ok(())
    } else {
        let n = out.model_errors.len() + out.problems.len() + out.readiness.len();
        Err(CliError::CheckFailed(format!(
            "validation failed: {n} problem(s)"
        )))
    }
}

fn print(out: &ValidateJson) -> CliResult {
    if !out.model_errors.is_empty() {
        output::line(format!(
            "the model file {} has {} mistake(s):",
            out.file,
            out.model_errors.len()
        ))?;
        for d in &out.model_errors {
            output::line(format!("  {d}"))?;
        }
    }
    for d in &out.model_warnings {
        output::line(format!("  {d}"))?;
    }
    if !out.problems.is_empty() || !out.readiness.is_empty() {
        output::line(format!(
            "the model does not fit the database: {} problem(s)",
            out.problems.len() + out.readiness.len()
        ))?;
        let mut t = output::table(&["table", "column", "problem", "fix"]);
        for p in &out.problems {
            let table = match (&p.entity, &p.table, &p.option) {
                (Some(e), Some(t), _) => format!("{e} ({t})"),
                (Some(e), None, _) => e.clone(),
                (None, Some(t), _) => t.clone(),
                (None, None, Some(o)) => format!("setting {o}"),
                (None, None, None) => "-".to_owned(),
            };
            t.add_row(vec![
                table,
                p.column.clone().unwrap_or_else(|| "-".into()),
                p.problem.clone(),
                p.fix.clone(),
            ]);
        }
        for r in &out.readiness {
            t.add_row(vec![
                "Cohort's tables".to_owned(),
                "-".to_owned(),
                r.clone(),
                "run `cohort schema migrate`".to_owned(),
            ]);
        }
        output::line(t.to_string())?;
    }
    for w in &out.warnings {
        output::line(format!(
            "warning: {}: {}; fix: {}",
            w.entity.as_deref().unwrap_or("-"),
            w.problem,
            w.fix
        ))?;
    }
    if out.valid {
        let checked = if out.database_checked {
            "against the live database"
        } else {
            "file only (--offline)"
        };
        output::line(format!(
            "valid: {} retained table(s), {} exempt, checked {checked}",
            out.retained, out.exempt
        ))?;
    }
    Ok(())
}
