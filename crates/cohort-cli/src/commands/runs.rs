//! `runs list|show`: the audit ledger, read with read-only SQL. Table names
//! are quoted and schema-qualified, operators and functions named through
//! `pg_catalog`, and every value bound.

use chrono::{DateTime, Utc};
use cohort::schema::{SchemaName, check_readiness};
use serde::Serialize;
use sqlx::postgres::PgRow;
use sqlx::{AssertSqlSafe, PgPool, Row};
use uuid::Uuid;

use super::Ctx;
use super::rows::SummaryJson;
use crate::cli::{Output, RunsCommand, RunsListArgs, RunsShowArgs};
use crate::db::qualified;
use crate::error::{CliError, CliResult};
use crate::output::{self, opt, time};

const STATUSES: &[&str] = &[
    "Started",
    "Succeeded",
    "PartiallyFailed",
    "Failed",
    "Cancelled",
];
const KINDS: &[&str] = &["Sweep", "Erasure"];

/// A run as JSON (`runs list`, `runs show`): a run as the ledger keeps it.
/// `sweep` and `erase` print the run they just finished instead
/// ([`super::sweep::RunJson`]), a different shape: there the logical time is
/// `now` (here `logical_now`), the summaries and exempt tables are inline,
/// and the trigger, the tenant, the database's times, the run's error and
/// its held total are not given. The per-table counts are one type,
/// [`SummaryJson`], in both.
#[derive(Debug, Serialize)]
pub(crate) struct RunRowJson {
    /// The run's id.
    pub(crate) run_id: Uuid,
    /// `Sweep` or `Erasure`.
    pub(crate) kind: String,
    /// `Manual` or `Scheduled`.
    pub(crate) trigger: String,
    /// `Started`, `Succeeded`, `PartiallyFailed`, `Failed` or `Cancelled`.
    pub(crate) status: String,
    /// Whether nothing was changed.
    pub(crate) dry_run: bool,
    /// The tenant (the nil UUID for tenantless runs).
    pub(crate) tenant_id: Uuid,
    /// The logical time the run judged ages at.
    pub(crate) logical_now: String,
    /// When it started (database clock).
    pub(crate) started_at: String,
    /// When it settled (null while `Started`).
    pub(crate) settled_at: Option<String>,
    /// Rows changed, summed over its summaries.
    pub(crate) affected: i64,
    /// Rows held, summed over its summaries.
    pub(crate) held: i64,
    /// The sanitized error, if any.
    pub(crate) error: Option<String>,
}

/// One per-row audit record (`runs show --rows N`).
#[derive(Debug, Serialize)]
pub(crate) struct RowJson {
    /// The table's name as the run recorded it.
    pub(crate) entity: String,
    /// The row's canonical record id.
    pub(crate) record_id: String,
    /// The row's tenant.
    pub(crate) tenant_id: Uuid,
    /// What was done (`Purge`, `SoftDelete`, `Anonymise`).
    pub(crate) action: String,
    /// When.
    pub(crate) created_at: String,
}

/// `runs show` as JSON.
#[derive(Debug, Serialize)]
pub(crate) struct RunShowJson {
    /// The run.
    pub(crate) run: RunRowJson,
    /// One summary per table.
    pub(crate) summaries: Vec<SummaryJson>,
    /// How many per-row audit records the run has.
    pub(crate) row_details: i64,
    /// The first of them, when asked for.
    pub(crate) rows: Vec<RowJson>,
}

struct Tables {
    run: String,
    summary: String,
    detail: String,
}

impl Tables {
    fn of(schema: &SchemaName) -> CliResult<Tables> {
        Ok(Tables {
            run: qualified(schema.as_str(), "sweep_run")?,
            summary: qualified(schema.as_str(), "sweep_run_entity_summary")?,
            detail: qualified(schema.as_str(), "sweep_run_row_detail")?,
        })
    }

    fn run_select(&self) -> String {
        format!(
            "SELECT r.run_id, r.run_kind, r.trigger, r.dry_run, r.tenant_id, r.logical_now, r.status, \
                    r.started_at, r.settled_at, r.error, \
                    (SELECT pg_catalog.sum(s.affected_count)::pg_catalog.int8 FROM {s} s \
                      WHERE s.run_id OPERATOR(pg_catalog.=) r.run_id) AS affected, \
                    (SELECT pg_catalog.sum(s.held_count)::pg_catalog.int8 FROM {s} s \
                      WHERE s.run_id OPERATOR(pg_catalog.=) r.run_id) AS held \
             FROM {r} r",
            r = self.run,
            s = self.summary
        )
    }
}

fn t(d: DateTime<Utc>) -> String {
    time(&d)
}

/// A count column of the ledger (`bigint`, never negative: a check
/// constraint says so), as the `u64` a run's result has.
fn count(r: &PgRow, column: &str) -> Result<u64, sqlx::Error> {
    let n: i64 = r.try_get(column)?;
    u64::try_from(n).map_err(|e| sqlx::Error::ColumnDecode {
        index: column.to_owned(),
        source: Box::new(e),
    })
}

fn run_row(r: &PgRow) -> Result<RunRowJson, sqlx::Error> {
    Ok(RunRowJson {
        run_id: r.try_get("run_id")?,
        kind: r.try_get("run_kind")?,
        trigger: r.try_get("trigger")?,
        status: r.try_get("status")?,
        dry_run: r.try_get("dry_run")?,
        tenant_id: r.try_get("tenant_id")?,
        logical_now: t(r.try_get("logical_now")?),
        started_at: t(r.try_get("started_at")?),
        settled_at: r.try_get::<Option<DateTime<Utc>>, _>("settled_at")?.map(t),
        affected: r.try_get::<Option<i64>, _>("affected")?.unwrap_or(0),
        held: r.try_get::<Option<i64>, _>("held")?.unwrap_or(0),
        error: r.try_get("error")?,
    })
}

async fn ready(pool: &PgPool, schema: &SchemaName) -> CliResult {
    let mut conn = pool.acquire().await?;
    check_readiness(&mut conn, schema).await?.into_result()?;
    Ok(())
}

fn one_of(value: Option<&String>, allowed: &[&str], what: &str) -> CliResult<Option<String>> {
    match value {
        None => Ok(None),
        Some(v) => allowed
            .iter()
            .find(|a| a.eq_ignore_ascii_case(v))
            .map(|a| Some((*a).to_owned()))
            .ok_or_else(|| {
                CliError::Usage(format!(
                    "unknown {what} {v:?}; use one of: {}",
                    allowed.join(", ")
                ))
            }),
    }
}

/// The latest runs, newest first.
pub(crate) async fn list(
    pool: &PgPool,
    schema: &SchemaName,
    a: &RunsListArgs,
) -> CliResult<Vec<RunRowJson>> {
    let status = one_of(a.status.as_ref(), STATUSES, "status")?;
    let kind = one_of(a.kind.as_ref(), KINDS, "kind")?;
    if a.limit < 1 {
        return Err(CliError::Usage("--limit must be at least 1".into()));
    }
    ready(pool, schema).await?;
    let tables = Tables::of(schema)?;
    // Every read in one transaction, each statement unnamed: through a
    // pooler in transaction mode they stay on one server connection.
    let mut tx = pool.begin().await?;
    let sql = format!(
        "{} WHERE ($1::pg_catalog.text IS NULL OR r.status OPERATOR(pg_catalog.=) $1) \
           AND ($2::pg_catalog.text IS NULL OR r.run_kind OPERATOR(pg_catalog.=) $2) \
           AND ($3::pg_catalog.uuid IS NULL OR r.tenant_id OPERATOR(pg_catalog.=) $3) \
         ORDER BY r.started_at DESC, r.run_id LIMIT $4",
        tables.run_select()
    );
    let rows = sqlx::query(AssertSqlSafe(sql))
        .bind(status)
        .bind(kind)
        .bind(a.tenant)
        .bind(a.limit)
        .persistent(false)
        .fetch_all(&mut *tx)
        .await?;
    Ok(rows.iter().map(run_row).collect::<Result<Vec<_>, _>>()?)
}

/// One run with its summaries (and the first `rows` row details).
pub(crate) async fn show(
    pool: &PgPool,
    schema: &SchemaName,
    a: &RunsShowArgs,
) -> CliResult<RunShowJson> {
    ready(pool, schema).await?;
    let tables = Tables::of(schema)?;
    // Every read in one transaction, each statement unnamed: through a
    // pooler in transaction mode they stay on one server connection.
    let mut tx = pool.begin().await?;
    let run = if a.run.eq_ignore_ascii_case("latest") {
        let sql = format!(
            "{} ORDER BY r.started_at DESC, r.run_id LIMIT 1",
            tables.run_select()
        );
        sqlx::query(AssertSqlSafe(sql))
            .persistent(false)
            .fetch_optional(&mut *tx)
            .await?
    } else if let Ok(id) = Uuid::parse_str(a.run.trim()) {
        let sql = format!(
            "{} WHERE r.run_id OPERATOR(pg_catalog.=) $1",
            tables.run_select()
        );
        sqlx::query(AssertSqlSafe(sql))
            .bind(id)
            .persistent(false)
            .fetch_optional(&mut *tx)
            .await?
    } else {
        // A prefix, as `runs list` shows ids: hex digits (dashes ignored).
        let prefix: String = a.run.trim().chars().filter(|c| *c != '-').collect();
        if prefix.len() < 4 || prefix.len() > 32 || !prefix.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(CliError::Usage(format!(
                "{:?} is not a run id; give a run's UUID, at least its first 4 hex digits (as \
                 `cohort runs list` shows them), or `latest`",
                a.run
            )));
        }
        let sql = format!(
            "{} WHERE pg_catalog.replace(r.run_id::pg_catalog.text, '-', '') \
                   LIKE pg_catalog.lower($1) OPERATOR(pg_catalog.||) '%' \
             ORDER BY r.started_at DESC, r.run_id LIMIT 2",
            tables.run_select()
        );
        let found = sqlx::query(AssertSqlSafe(sql))
            .bind(&prefix)
            .persistent(false)
            .fetch_all(&mut *tx)
            .await?;
        if found.len() > 1 {
            return Err(CliError::Usage(format!(
                "{:?} is the start of more than one run id; give more of it",
                a.run
            )));
        }
        found.into_iter().next()
    };
    let Some(run) = run else {
        return Err(CliError::Usage(format!(
            "no run {} in the ledger (schema {:?}); `cohort runs list` shows the latest",
            a.run,
            schema.as_str()
        )));
    };
    let run = run_row(&run)?;
    let sql = format!(
        "SELECT retained_entity_id, entity_type, category, tenant_id, strategy, status, affected_count, \
                held_count, skipped_count, null_anchor_count, legal_minimum_count, applied_period, cutoff, rule_source, rule_reason, error \
         FROM {} WHERE run_id OPERATOR(pg_catalog.=) $1 ORDER BY summary_id",
        tables.summary
    );
    let summaries = sqlx::query(AssertSqlSafe(sql))
        .bind(run.run_id)
        .persistent(false)
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(|r| {
            Ok(SummaryJson {
                entity: r.try_get("entity_type")?,
                entity_id: r.try_get("retained_entity_id")?,
                category: r.try_get("category")?,
                tenant_id: r.try_get("tenant_id")?,
                strategy: Some(r.try_get("strategy")?),
                status: Some(r.try_get("status")?),
                affected: count(r, "affected_count")?,
                held: count(r, "held_count")?,
                skipped: count(r, "skipped_count")?,
                null_anchor: count(r, "null_anchor_count")?,
                legal_minimum: count(r, "legal_minimum_count")?,
                applied_period: r.try_get("applied_period")?,
                cutoff: r.try_get::<Option<DateTime<Utc>>, _>("cutoff")?.map(t),
                rule_source: r.try_get("rule_source")?,
                rule_reason: r.try_get("rule_reason")?,
                error: r.try_get("error")?,
            })
        })
        .collect::<Result<Vec<_>, sqlx::Error>>()?;
    let count_sql = format!(
        "SELECT pg_catalog.count(*) FROM {} WHERE run_id OPERATOR(pg_catalog.=) $1",
        tables.detail
    );
    let row_details: i64 = sqlx::query_scalar(AssertSqlSafe(count_sql))
        .bind(run.run_id)
        .persistent(false)
        .fetch_one(&mut *tx)
        .await?;
    let mut rows = Vec::new();
    if a.rows > 0 {
        let sql = format!(
            "SELECT entity_type, record_id, tenant_id, action, created_at FROM {} \
             WHERE run_id OPERATOR(pg_catalog.=) $1 ORDER BY detail_id LIMIT $2",
            tables.detail
        );
        rows = sqlx::query(AssertSqlSafe(sql))
            .bind(run.run_id)
            .bind(a.rows)
            .persistent(false)
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(|r| {
                Ok(RowJson {
                    entity: r.try_get("entity_type")?,
                    record_id: r.try_get("record_id")?,
                    tenant_id: r.try_get("tenant_id")?,
                    action: r.try_get("action")?,
                    created_at: t(r.try_get("created_at")?),
                })
            })
            .collect::<Result<Vec<_>, sqlx::Error>>()?;
    }
    Ok(RunShowJson {
        run,
        summaries,
        row_details,
        rows,
    })
}

/// A run's tenant for people: `-` for the tenantless pass (the ledger
/// keeps the nil UUID there; holds show `-` alike). JSON keeps the id.
fn tenant_text(id: Uuid) -> String {
    if id.is_nil() {
        "-".to_owned()
    } else {
        id.to_string()
    }
}

/// A tenant for a narrow table: `-`, or its id's first 8 characters.
fn short_tenant(id: Uuid) -> String {
    if id.is_nil() {
        "-".to_owned()
    } else {
        output::short_id(&id)
    }
}

/// Runs as a table: by default the columns that fit a terminal (short ids,
/// times to the second); `wide`, every column in full.
pub(crate) fn print_list(runs: &[RunRowJson], wide: bool) -> CliResult {
    if !wide {
        let mut t = output::table(&[
            "run", "kind", "status", "tenant", "started", "affected", "held",
        ]);
        for r in runs {
            let status = if r.dry_run {
                format!("{} (dry run)", r.status)
            } else {
                r.status.clone()
            };
            t.add_row(vec![
                output::short_id(&r.run_id),
                r.kind.clone(),
                status,
                short_tenant(r.tenant_id),
                output::short_time(&r.started_at),
                r.affected.to_string(),
                r.held.to_string(),
            ]);
        }
        return output::line(t.to_string());
    }
    let mut t = output::table(&[
        "run", "kind", "trigger", "status", "dry run", "tenant", "started", "settled", "affected",
        "held",
    ]);
    for r in runs {
        t.add_row(vec![
            r.run_id.to_string(),
            r.kind.clone(),
            r.trigger.clone(),
            r.status.clone(),
            if r.dry_run { "yes" } else { "no" }.to_owned(),
            tenant_text(r.tenant_id),
            r.started_at.clone(),
            opt(r.settled_at.as_deref()),
            r.affected.to_string(),
            r.held.to_string(),
        ]);
    }
    output::line(t.to_string())
}

/// One run for people: by default the summary columns that fit a
/// terminal (errors below the table); `wide`, every column.
pub(crate) fn print_show(s: &RunShowJson, wide: bool) -> CliResult {
    let r = &s.run;
    let when = |t: &str| {
        if wide {
            t.to_owned()
        } else {
            output::short_time(t)
        }
    };
    output::line(format!(
        "run {}: {} {} ({}{})",
        r.run_id,
        r.kind,
        r.status,
        r.trigger,
        if r.dry_run { ", dry run" } else { "" },
    ))?;
    output::line(format!("  tenant {}", tenant_text(r.tenant_id)))?;
    output::line(format!(
        "  logical now {}, started {}, settled {}",
        when(&r.logical_now),
        when(&r.started_at),
        r.settled_at.as_deref().map_or_else(|| "-".to_owned(), when)
    ))?;
    if let Some(e) = &r.error {
        output::line(format!("  error: {e}"))?;
    }
    if !wide {
        let mut t = output::table(&[
            "table",
            "strategy",
            "status",
            "affected",
            "held",
            "skipped",
            "legal min.",
            "cutoff",
        ]);
        for x in &s.summaries {
            t.add_row(vec![
                x.entity.clone(),
                opt(x.strategy.as_deref()),
                opt(x.status.as_deref()),
                x.affected.to_string(),
                x.held.to_string(),
                x.skipped.to_string(),
                x.legal_minimum.to_string(),
                x.cutoff
                    .as_deref()
                    .map_or_else(|| "-".to_owned(), output::short_time),
            ]);
        }
        output::line(t.to_string())?;
        for x in s.summaries.iter().filter(|x| x.error.is_some()) {
            output::line(format!(
                "  error in {}: {}",
                x.entity,
                opt(x.error.as_deref())
            ))?;
        }
        output::line("  (--wide: category, NULL anchors, period, the rule's source and reason)")?;
    } else {
        print_summaries_wide(s)?;
    }
    print_rest(s, wide)
}

/// Every summary column.
fn print_summaries_wide(s: &RunShowJson) -> CliResult {
    let mut t = output::table(&[
        "table",
        "category",
        "strategy",
        "status",
        "affected",
        "held",
        "skipped",
        "null anchor",
        "legal min.",
        "period",
        "cutoff",
        "rule source",
        "rule reason",
        "error",
    ]);
    for x in &s.summaries {
        t.add_row(vec![
            x.entity.clone(),
            x.category.clone(),
            opt(x.strategy.as_deref()),
            opt(x.status.as_deref()),
            x.affected.to_string(),
            x.held.to_string(),
            x.skipped.to_string(),
            x.null_anchor.to_string(),
            x.legal_minimum.to_string(),
            opt(x.applied_period.as_deref()),
            opt(x.cutoff.as_deref()),
            opt(x.rule_source.as_deref()),
            opt(x.rule_reason.as_deref()),
            opt(x.error.as_deref()),
        ]);
    }
    output::line(t.to_string())
}

/// What follows the summaries: the cancellation note and the row details.
fn print_rest(s: &RunShowJson, wide: bool) -> CliResult {
    let r = &s.run;
    if r.status == "Cancelled" {
        output::line(format!("  {}", super::sweep::CANCELLED_SKIPPED))?;
    }
    output::line(format!("  per-row audit records: {}", s.row_details))?;
    if !s.rows.is_empty() {
        let mut t = output::table(&["table", "record", "tenant", "action", "at"]);
        for x in &s.rows {
            t.add_row(vec![
                x.entity.clone(),
                x.record_id.clone(),
                if wide {
                    tenant_text(x.tenant_id)
                } else {
                    short_tenant(x.tenant_id)
                },
                x.action.clone(),
                if wide {
                    x.created_at.clone()
                } else {
                    output::short_time(&x.created_at)
                },
            ]);
        }
        output::line(t.to_string())?;
    }
    Ok(())
}

/// `runs ...`.
pub(crate) async fn run(ctx: &Ctx, cmd: &RunsCommand) -> CliResult {
    let schema = ctx.settings.schema_name()?;
    let pool = ctx.pool().await?;
    match cmd {
        RunsCommand::List(a) => {
            let runs = list(&pool, &schema, a).await?;
            if ctx.json() || a.output == Some(Output::Json) {
                output::json(&runs)
            } else {
                print_list(&runs, a.wide || a.output == Some(Output::Wide))
            }
        }
        RunsCommand::Show(a) => {
            let s = show(&pool, &schema, a).await?;
            if ctx.json() || a.output == Some(Output::Json) {
                output::json(&s)
            } else {
                print_show(&s, a.wide || a.output == Some(Output::Wide))
            }
        }
        RunsCommand::Export(a) => super::evidence::export(&pool, &schema, a).await,
        RunsCommand::Settle => {
            let model = ctx.model()?;
            let cohort = ctx.cohort(&pool, &model, None).await?;
            let settled = cohort.settle_abandoned_runs().await?;
            if ctx.json() {
                #[derive(serde::Serialize)]
                struct Settled {
                    settled: u64,
                }
                output::json(&Settled { settled })
            } else {
                output::line(format!(
                    "settled {settled} run(s) whose owner is gone (runs whose owner still renews its lease are left alone)"
                ))
            }
        }
    }
}
