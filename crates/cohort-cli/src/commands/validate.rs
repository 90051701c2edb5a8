//! `validate`: the model file, every mistake at once with file, line and
//! key; then the library's own start-up validation against the live
//! catalog (every problem at once, each naming its table and column), and
//! the readiness of Cohort's tables.

use serde::Serialize;

use super::Ctx;
use crate::cli::ValidateArgs;
use crate::error::{CliError, CliResult};
use crate::model::{Diagnostic, Model};
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

/// A problem the library reported, in the model file's words.
#[derive(Debug, Serialize)]
struct ProblemJson {
    /// The table's name in the model, when the problem is about one.
    entity: Option<String>,
    /// The line of that table's `[[entity]]` in the model file.
    line: Option<usize>,
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

fn problem(p: &cohort::ValidationProblem, model: &Model) -> ProblemJson {
    ProblemJson {
        entity: p.type_name.clone(),
        line: p
            .type_name
            .as_deref()
            .and_then(|n| model.entity(n))
            .map(|e| e.line),
        table: p.table.clone(),
        column: p.column.clone(),
        option: p.option.map(str::to_owned),
        problem: in_model_words(&p.problem),
        fix: in_model_words(&p.fix),
    }
}

/// The library speaks of Rust fields and `#[cohort(...)]` attributes; the
/// model file has columns and keys.
fn in_model_words(text: &str) -> String {
    let mut t = text.to_owned();
    for (derive, file) in [
        ("#[cohort(record_id)]", "record_id = \"<column>\""),
        ("#[cohort(tenant)]", "tenant = \"<column>\""),
        ("#[cohort(soft_delete)]", "soft_delete = \"<column>\""),
        ("#[cohort(deleted_at)]", "deleted_at = \"<column>\""),
        ("#[cohort(anonymised_at)]", "anonymised_at = \"<column>\""),
        ("#[cohort(tenantless)]", "tenantless = true"),
        (
            "#[cohort(erasure_subject)]",
            "erasure_subjects = [\"<column>\"]",
        ),
        (
            "#[cohort(table = \"...\", schema = \"...\")]",
            "table = \"...\" and schema = \"...\" of the model entry",
        ),
        ("#[cohort(guard)]", "guard = true"),
        ("#[cohort(guard_allow)]", "guard_allow = [\"<column>\"]"),
        ("options.conventions.", "cohort.toml's [conventions] "),
        (
            "options.default_table_schema",
            "default_table_schema in cohort.toml",
        ),
    ] {
        t = t.replace(derive, file);
    }
    // Fields are the model file's columns.
    t = t
        .replace(" fields ", " columns ")
        .replace(" field ", " column ")
        .replace("the type has", "the table has")
        .replace("The type has", "The table has");
    t
}

/// The live-catalog problems, in the model file's words and without the
/// problems that follow from a missing table (a table that does not exist
/// has no record id, no anchor, ...): for such a table only the missing
/// table is said, with the nearest existing name.
fn model_problems(
    report: &[cohort::ValidationProblem],
    model: &Model,
    tables: &[String],
) -> Vec<ProblemJson> {
    let missing: Vec<&str> = report
        .iter()
        .filter(|p| p.column.is_none() && p.problem.contains("does not exist"))
        .filter_map(|p| p.type_name.as_deref())
        .collect();
    report
        .iter()
        .filter(|p| {
            !p.type_name.as_deref().is_some_and(|n| {
                missing.contains(&n)
                    && !(p.column.is_none() && p.problem.contains("does not exist"))
            })
        })
        .map(|p| {
            let mut j = problem(p, model);
            if p.problem.contains("does not exist")
                && let Some(table) = &p.table
            {
                let known: Vec<&str> = tables.iter().map(String::as_str).collect();
                if let Some(near) = crate::model::parse::reader::closest(table, &known) {
                    j.fix = format!("did you mean {near}? {}", j.fix);
                }
            }
            j
        })
        .collect()
}

/// Every ordinary and partitioned table of the database, `schema.name`.
async fn catalog_tables(pool: &sqlx::PgPool) -> CliResult<Vec<String>> {
    let mut tx = pool.begin().await?;
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT n.nspname::pg_catalog.text OPERATOR(pg_catalog.||) '.' OPERATOR(pg_catalog.||) c.relname::pg_catalog.text \
         FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace \
         WHERE c.relkind OPERATOR(pg_catalog.=) ANY (ARRAY['r', 'p']::pg_catalog.\"char\"[]) \
           AND n.nspname OPERATOR(pg_catalog.<>) ALL (ARRAY['pg_catalog', 'information_schema']::pg_catalog.name[])",
    )
    .persistent(false)
    .fetch_all(&mut *tx)
    .await?;
    Ok(names)
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
                Ok(cohort) => {
                    out.warnings = cohort.warnings().iter().map(|w| problem(w, m)).collect();
                }
                Err(CliError::Cohort(cohort::Error::Validation(report))) => {
                    let tables = catalog_tables(&pool).await?;
                    out.problems = model_problems(&report.problems, m, &tables);
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
            let at = p
                .line
                .map(|l| format!("{}:{l}: ", out.file))
                .unwrap_or_default();
            let table = match (&p.entity, &p.table, &p.option) {
                (Some(e), Some(t), _) => format!("{at}{e} ({t})"),
                (Some(e), None, _) => format!("{at}{e}"),
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
