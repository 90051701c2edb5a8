//! `schema sql|check|migrate`: Cohort's own tables. Only `migrate` changes
//! the database, and only when asked; no other command ever does.

use cohort::schema::{self, ReadinessReport, SchemaName, check_readiness};
use serde::Serialize;
use sqlx::{AssertSqlSafe, PgPool};

use super::Ctx;
use crate::cli::SchemaCommand;
use crate::error::{CliError, CliResult};
use crate::output;

/// One migration as JSON (`schema sql --json`).
#[derive(Debug, Serialize)]
struct MigrationJson {
    version: i64,
    name: &'static str,
    summary: &'static str,
    up: String,
    down: Option<String>,
}

/// Readiness as JSON (`schema check --json`).
#[derive(Debug, Serialize)]
pub(crate) struct ReadinessJson {
    /// The schema of Cohort's tables.
    pub(crate) schema: String,
    /// Whether Cohort can run.
    pub(crate) ready: bool,
    /// The version recorded in the database (null: none).
    pub(crate) installed_version: Option<i64>,
    /// The version this build needs.
    pub(crate) required_version: i64,
    /// Migrations to apply, in order.
    pub(crate) missing_migrations: Vec<MigrationIdJson>,
    /// What stops Cohort from running.
    pub(crate) problems: Vec<String>,
    /// What only slows it down.
    pub(crate) warnings: Vec<String>,
}

/// A migration's number and name.
#[derive(Debug, Serialize)]
pub(crate) struct MigrationIdJson {
    /// Its number.
    pub(crate) version: i64,
    /// Its name.
    pub(crate) name: &'static str,
}

/// The report as JSON.
pub(crate) fn readiness_json(r: &ReadinessReport) -> ReadinessJson {
    ReadinessJson {
        schema: r.schema.as_str().to_owned(),
        ready: r.is_ready(),
        installed_version: r.installed_version,
        required_version: r.required_version,
        missing_migrations: r
            .missing_migrations
            .iter()
            .map(|m| MigrationIdJson {
                version: m.version,
                name: m.name,
            })
            .collect(),
        problems: r.problems.iter().map(ToString::to_string).collect(),
        warnings: r.warnings.iter().map(ToString::to_string).collect(),
    }
}

/// The report for people.
pub(crate) fn print_readiness(j: &ReadinessJson) -> CliResult {
    let installed = j
        .installed_version
        .map_or_else(|| "none".to_owned(), |v| v.to_string());
    output::line(format!(
        "schema {:?}: {} (installed version: {installed}, required: {})",
        j.schema,
        if j.ready { "ready" } else { "NOT READY" },
        j.required_version
    ))?;
    for m in &j.missing_migrations {
        output::line(format!("  missing migration {} ({})", m.version, m.name))?;
    }
    for p in &j.problems {
        output::line(format!("  problem: {p}"))?;
    }
    for w in &j.warnings {
        output::line(format!("  warning: {w}"))?;
    }
    if !j.ready {
        output::line(
            "  fix: run `cohort schema migrate`, or apply `cohort schema sql` with your migration tool",
        )?;
    }
    Ok(())
}

async fn readiness(pool: &PgPool, schema: &SchemaName) -> CliResult<ReadinessReport> {
    let mut conn = pool.acquire().await?;
    Ok(check_readiness(&mut conn, schema).await?)
}

/// Applies the migrations `schema` lacks, each in a transaction of its
/// own, under an advisory lock so two at once apply each migration once.
/// Returns the versions applied.
pub(crate) async fn migrate(
    pool: &PgPool,
    schema: &SchemaName,
) -> CliResult<Vec<(i64, &'static str)>> {
    let report = readiness(pool, schema).await?;
    let missing: Vec<i64> = report
        .missing_migrations
        .iter()
        .map(|m| m.version)
        .collect();
    let mut applied = Vec::new();
    for m in schema::migrations(schema) {
        if !missing.contains(&m.version) {
            continue;
        }
        let mut tx = pool.begin().await?;
        sqlx::query("SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext($1))")
            .persistent(false)
            .bind(format!("cohort schema migrate {}", schema.as_str()))
            .execute(&mut *tx)
            .await?;
        // Another `schema migrate` may have applied it while we waited.
        let installed: Option<i64> = {
            let r = check_readiness(&mut tx, schema).await?;
            r.installed_version
        };
        if installed.is_some_and(|v| v >= m.version) {
            tx.rollback().await?;
            continue;
        }
        // The migration's text is Cohort's own, generated for a validated
        // schema name with every identifier quoted.
        sqlx::raw_sql(AssertSqlSafe(m.up.clone()))
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        applied.push((m.version, m.name));
    }
    Ok(applied)
}

/// `schema ...`.
pub(crate) async fn run(ctx: &Ctx, cmd: &SchemaCommand) -> CliResult {
    let schema = ctx.settings.schema_name()?;
    match cmd {
        SchemaCommand::Sql => {
            if ctx.json() {
                let list: Vec<MigrationJson> = schema::migrations(&schema)
                    .into_iter()
                    .map(|m| MigrationJson {
                        version: m.version,
                        name: m.name,
                        summary: m.summary,
                        up: m.up,
                        down: m.down,
                    })
                    .collect();
                output::json(&list)
            } else {
                output::line(schema::ddl(&schema).trim_end())
            }
        }
        SchemaCommand::Check => {
            let pool = ctx.pool().await?;
            let report = readiness(&pool, &schema).await?;
            let json = readiness_json(&report);
            if ctx.json() {
                output::json(&json)?;
            } else {
                print_readiness(&json)?;
            }
            if report.is_ready() {
                Ok(())
            } else {
                Err(CliError::CheckFailed(format!(
                    "Cohort's tables in schema {:?} are not ready ({} problem(s))",
                    schema.as_str(),
                    report.problems.len()
                )))
            }
        }
        SchemaCommand::Guards => {
            let pool = ctx.pool().await?;
            let model = ctx.model()?;
            let builder = crate::model::build::builder(&pool, &model, &ctx.settings).await?;
            let guards = builder.guards()?;
            if ctx.json() {
                output::json(&guards.statements())
            } else if guards.is_empty() {
                output::line("-- no table of the model is guarded (guard = true)")
            } else {
                output::line(guards.sql().trim_end())
            }
        }
        SchemaCommand::Archive => {
            let pool = ctx.pool().await?;
            let model = ctx.model()?;
            let builder = crate::model::build::builder(&pool, &model, &ctx.settings).await?;
            let sql = builder.archive_sql()?;
            if ctx.json() {
                output::json(&sql)
            } else if sql.is_empty() {
                output::line("-- no rule of the model archives (archive = \"<schema>\")")
            } else {
                output::line(sql.trim_end())
            }
        }
        SchemaCommand::Migrate => {
            let pool = ctx.pool().await?;
            let applied = migrate(&pool, &schema).await?;
            let report = readiness(&pool, &schema).await?;
            let json = readiness_json(&report);
            if ctx.json() {
                #[derive(Serialize)]
                struct Out {
                    applied: Vec<MigrationIdJson>,
                    readiness: ReadinessJson,
                }
                output::json(&Out {
                    applied: applied
                        .iter()
                        .map(|(version, name)| MigrationIdJson {
                            version: *version,
                            name,
                        })
                        .collect(),
                    readiness: json,
                })?;
            } else {
                if applied.is_empty() {
                    output::line("nothing to apply")?;
                }
                for (v, name) in &applied {
                    output::line(format!("applied migration {v} ({name})"))?;
                }
                print_readiness(&json)?;
            }
            if report.is_ready() {
                Ok(())
            } else {
                Err(CliError::CheckFailed(
                    "the migrations are applied but Cohort's tables are still not ready; see the problems above".into(),
                ))
            }
        }
    }
}
