//! One measurement, in a child process of its own: a fresh copy of the data,
//! the timed operation, then a check of what it did.

use std::time::{Duration, Instant};

use chrono::Utc;
use cohort::{Cohort, Options, RunStatus, Scope, Strategy, SweepOptions, TenantContext};
use serde_json::json;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{AssertSqlSafe, PgPool, Row};
use uuid::Uuid;

use crate::data::{self, TENANT_A, TENANT_B};
use crate::model::{CustomNote, ENTITY_ID, Note, Rules};
use crate::plan::{Kind, Spec};
use crate::profile;

/// The `application_name` of a measuring child's connections.
const APPLICATION: &str = "cohort-bench-measure";

/// What the child was asked to do.
#[derive(Debug, Clone)]
pub(crate) struct Job {
    /// The measurement.
    pub(crate) spec: &'static Spec,
    /// The database.
    pub(crate) url: String,
    /// Tenant A's expired rows in the data (`--rows`).
    pub(crate) rows: u64,
    /// The batch size (sweeps).
    pub(crate) batch: u32,
    /// The longest the timed operation may take before it is stopped
    /// (`None`: as long as it takes).
    pub(crate) max: Option<Duration>,
    /// How many times a read-only measurement is repeated (the best counts).
    pub(crate) repeat: u32,
    /// How many of tenant A's rows are held (`--holds`).
    pub(crate) holds: u64,
    /// The sweeps' batch order (`--order`).
    pub(crate) order: cohort::BatchOrder,
}

type BoxError = Box<dyn std::error::Error>;

/// The hold anti-join of the raw statements: the same predicate as Cohort's
/// (`NOT EXISTS` an active hold, by the database clock), on alias `t`.
fn not_held() -> String {
    format!(
        "NOT EXISTS (SELECT 1 FROM retention_holds h WHERE h.retained_entity_id = '{ENTITY_ID}' \
         AND h.record_id = t.id::text AND h.tenant_id = t.tenant_id \
         AND h.created_at <= statement_timestamp() \
         AND (h.expires_at IS NULL OR h.expires_at > statement_timestamp()) \
         AND (h.removed_at IS NULL OR h.removed_at > statement_timestamp()))"
    )
}

/// The raw statement of `kind` (`$1` tenant, `$2` cutoff).
fn raw_sql(kind: Kind) -> Option<String> {
    let scope = "t.tenant_id = $1 AND t.created_at < $2";
    let held = not_held();
    Some(match kind {
        Kind::RawDelete => format!("DELETE FROM notes t WHERE {scope}"),
        Kind::RawDeleteHolds => format!("DELETE FROM notes t WHERE {scope} AND {held}"),
        Kind::RawSoftDelete => format!(
            "UPDATE notes t SET is_deleted = true, deleted_at = statement_timestamp() \
             WHERE {scope} AND t.is_deleted IS NOT TRUE AND {held}"
        ),
        Kind::RawUpdate => format!(
            "UPDATE notes t SET email = NULL, body = '[redacted]', anonymised_at = statement_timestamp() \
             WHERE {scope} AND t.anonymised_at IS NULL AND {held}"
        ),
        Kind::RawCount => format!("SELECT count(*) FROM notes t WHERE {scope} AND {held}"),
        Kind::Sweep(_) | Kind::SweepCustom | Kind::Preview => return None,
    })
}

/// How many rows the operation should report: all of tenant A's expired rows
/// for the raw `DELETE` without the hold check, all but the held ones for
/// everything else.
fn expected(kind: Kind, rows: u64, holds: u64) -> u64 {
    match kind {
        Kind::RawDelete => rows,
        _ => rows.saturating_sub(holds),
    }
}

/// What one timed operation did.
struct Outcome {
    rows: u64,
    seconds: f64,
    /// Every attempt's seconds (read-only measurements repeat).
    attempts: Vec<f64>,
    timed_out: bool,
    extra: serde_json::Value,
}

/// Runs the job and returns its JSON line (without `peak_rss_kib`).
pub(crate) async fn run(job: &Job) -> Result<serde_json::Value, BoxError> {
    let options: PgConnectOptions = job.url.parse()?;
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .connect_with(options.application_name(APPLICATION))
        .await?;
    let copy_started = Instant::now();
    data::fresh_copy(&pool, job.spec.data).await?;
    let copy_seconds = copy_started.elapsed().as_secs_f64();
    let tenant = Uuid::parse_str(TENANT_A)?;
    let now = Utc::now();
    let cutoff = now - chrono::Duration::days(30);
    let outcome = if job.spec.kind.is_cohort() {
        cohort_op(job, &pool, tenant, now).await?
    } else {
        raw_op(job, &pool, tenant, cutoff).await?
    };
    let profile = profile::take().map(|p| {
        let statements: Vec<serde_json::Value> = p
            .statements
            .iter()
            .map(|(k, t)| json!({"kind": k, "count": t.count, "seconds": t.seconds, "sample": t.sample}))
            .collect();
        let messages: Vec<serde_json::Value> = p
            .messages
            .iter()
            .map(|(k, t)| json!({"message": k, "count": t.count}))
            .collect();
        json!({"statements": statements, "messages": messages})
    });
    let mut problems = Vec::new();
    let mut rows_done = outcome.rows;
    if outcome.timed_out {
        rows_done = done_so_far(&pool, job).await?;
    } else {
        let want = expected(job.spec.kind, job.rows, job.holds);
        if outcome.rows != want {
            problems.push(format!("reported {} rows, expected {want}", outcome.rows));
        }
        if let Some(p) = check_table(&pool, job).await? {
            problems.push(p);
        }
    }
    if let Some(extra) = outcome.extra.get("problems").and_then(|p| p.as_array()) {
        problems.extend(extra.iter().filter_map(|p| p.as_str().map(str::to_owned)));
    }
    Ok(json!({
        "what": job.spec.name,
        "data": job.spec.data.name(),
        "batch": if job.spec.kind.batched() { Some(job.batch) } else { None },
        "rows": outcome.rows,
        "rows_done": rows_done,
        "seconds": outcome.seconds,
        "attempts": outcome.attempts,
        "rows_per_second": outcome.rows as f64 / outcome.seconds,
        "timed_out": outcome.timed_out,
        "max_seconds": job.max.map(|m| m.as_secs_f64()),
        "copy_seconds": copy_seconds,
        "problems": problems,
        "result": outcome.extra,
        "profile": profile,
    }))
}

/// One raw statement, under `statement_timeout = max`.
async fn raw_op(
    job: &Job,
    pool: &PgPool,
    tenant: Uuid,
    cutoff: chrono::DateTime<Utc>,
) -> Result<Outcome, BoxError> {
    let sql = raw_sql(job.spec.kind).ok_or("not a raw measurement")?;
    let mut conn = pool.acquire().await?;
    // 0 turns the timeout off.
    let timeout = job.max.map_or(0, |m| m.as_millis().max(1));
    sqlx::raw_sql(AssertSqlSafe(format!("SET statement_timeout = {timeout}")))
        .execute(&mut *conn)
        .await?;
    let tries = if job.spec.kind.read_only() {
        job.repeat.max(1)
    } else {
        1
    };
    let mut attempts = Vec::new();
    let mut rows = 0;
    profile::reset();
    for _ in 0..tries {
        let started = Instant::now();
        let q = sqlx::query(AssertSqlSafe(sql.clone()))
            .bind(tenant)
            .bind(cutoff);
        let result = if job.spec.kind == Kind::RawCount {
            q.fetch_one(&mut *conn).await.and_then(|r| {
                r.try_get::<i64, _>(0)
                    .map(|n| u64::try_from(n).unwrap_or(0))
            })
        } else {
            q.execute(&mut *conn).await.map(|r| r.rows_affected())
        };
        let seconds = started.elapsed().as_secs_f64();
        match result {
            Ok(n) => {
                rows = n;
                attempts.push(seconds);
            }
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("57014") => {
                return Ok(Outcome {
                    rows: 0,
                    seconds,
                    attempts,
                    timed_out: true,
                    extra: json!({}),
                });
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Outcome {
        rows,
        seconds: attempts.iter().copied().fold(f64::INFINITY, f64::min),
        attempts,
        timed_out: false,
        extra: json!({}),
    })
}

/// A sweep or a preview through Cohort's public API.
async fn cohort_op(
    job: &Job,
    pool: &PgPool,
    tenant: Uuid,
    now: chrono::DateTime<Utc>,
) -> Result<Outcome, BoxError> {
    let strategy = match job.spec.kind {
        Kind::Sweep(s) => s,
        Kind::SweepCustom => Strategy::Anonymise,
        // A preview counts what a purge would do.
        _ => Strategy::Purge,
    };
    let builder = Cohort::builder(pool.clone())
        .options(Options {
            batch_size: job.batch,
            batch_order: job.order,
            ..Options::default()
        })
        .rules(Rules(strategy));
    let builder = if job.spec.kind == Kind::SweepCustom {
        builder.entity::<CustomNote>()
    } else {
        builder.entity::<Note>()
    };
    let cohort = builder.build().await?;
    let scope = Scope::Tenant(TenantContext::new(tenant));
    let want = expected(job.spec.kind, job.rows, job.holds);
    profile::reset();
    if job.spec.kind == Kind::Preview {
        let mut attempts = Vec::new();
        let mut problems = Vec::new();
        let mut rows = 0;
        for _ in 0..job.repeat.max(1) {
            let started = Instant::now();
            let preview = cohort.preview(&scope, now).await?;
            attempts.push(started.elapsed().as_secs_f64());
            let Some(entry) = preview.entries.first() else {
                return Err("the preview has no entry".into());
            };
            rows = entry.eligible;
            if let Some(f) = &entry.failure {
                problems.push(format!("preview failed: {f}"));
            }
            if entry.held != job.holds || entry.null_anchor != 0 {
                problems.push(format!(
                    "preview: held {} (expected {}), NULL anchor {} (expected 0)",
                    entry.held, job.holds, entry.null_anchor
                ));
            }
        }
        problems.dedup();
        return Ok(Outcome {
            rows,
            seconds: attempts.iter().copied().fold(f64::INFINITY, f64::min),
            attempts,
            timed_out: false,
            extra: json!({"eligible": rows, "expected": want, "problems": problems}),
        });
    }
    // The time bound: cancel at the next batch boundary.
    let token = cohort::CancellationToken::new();
    let canceller = job.max.map(|max| {
        let token = token.clone();
        tokio::spawn(async move {
            tokio::time::sleep(max).await;
            token.cancel();
        })
    });
    let started = Instant::now();
    let result = cohort
        .sweep_with(&scope, now, SweepOptions::default().cancel_on(token))
        .await?;
    let seconds = started.elapsed().as_secs_f64();
    if let Some(c) = canceller {
        c.abort();
    }
    let timed_out = result.status == RunStatus::Cancelled;
    let mut problems = Vec::new();
    let summary = result.summaries.first();
    if !timed_out {
        if result.status != RunStatus::Succeeded {
            problems.push(format!(
                "status {:?}, expected Succeeded; failures: {:?}",
                result.status, result.entity_failures
            ));
        }
        match summary {
            None => problems.push("the run has no entity summary".to_owned()),
            Some(s) => {
                if s.held != job.holds {
                    problems.push(format!("held {}, expected {}", s.held, job.holds));
                }
                if s.skipped != 0 || s.null_anchor != 0 {
                    problems.push(format!(
                        "skipped {} and NULL anchor {}, expected 0 and 0",
                        s.skipped, s.null_anchor
                    ));
                }
            }
        }
    }
    Ok(Outcome {
        rows: result.affected(),
        seconds,
        attempts: vec![seconds],
        timed_out,
        extra: json!({
            "status": format!("{:?}", result.status),
            "held": summary.map(|s| s.held),
            "skipped": summary.map(|s| s.skipped),
            "null_anchor": summary.map(|s| s.null_anchor),
            "problems": problems,
        }),
    })
}

/// After a stopped measurement: how many of tenant A's rows it had changed.
async fn done_so_far(pool: &PgPool, job: &Job) -> Result<u64, BoxError> {
    // Stop whatever statement of ours may still run (a raw statement stopped
    // by its timeout already has; a cancelled sweep stops between batches).
    sqlx::query(
        "SELECT pg_cancel_backend(pid) FROM pg_stat_activity \
         WHERE datname = current_database() AND application_name = $1 AND pid <> pg_backend_pid()",
    )
    .bind(APPLICATION)
    .execute(pool)
    .await?;
    let changed = match job.spec.kind {
        Kind::Sweep(Strategy::Purge) | Kind::RawDelete | Kind::RawDeleteHolds => {
            let left: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
                "SELECT count(*) FROM notes WHERE tenant_id = '{TENANT_A}'"
            )))
            .fetch_one(pool)
            .await?;
            job.rows.saturating_sub(u64::try_from(left).unwrap_or(0))
        }
        _ => 0,
    };
    Ok(changed)
}

/// Checks the table after the operation: tenant A's rows changed except
/// exactly the held ones, tenant B's untouched. `Some(problem)` otherwise.
async fn check_table(pool: &PgPool, job: &Job) -> Result<Option<String>, BoxError> {
    let changed = match job.spec.kind {
        Kind::RawCount | Kind::Preview => return Ok(None),
        Kind::RawDelete | Kind::RawDeleteHolds | Kind::Sweep(Strategy::Purge) => None,
        Kind::RawSoftDelete | Kind::Sweep(Strategy::SoftDelete) => {
            Some("t.is_deleted AND t.deleted_at IS NOT NULL")
        }
        Kind::RawUpdate | Kind::Sweep(Strategy::Anonymise) => {
            Some("t.anonymised_at IS NOT NULL AND t.email IS NULL AND t.body = '[redacted]'")
        }
        Kind::SweepCustom => Some(
            "t.anonymised_at IS NOT NULL AND t.email = 'redacted@example.org' \
             AND t.body = '[redacted]'",
        ),
        Kind::Sweep(_) => return Ok(Some("unexpected strategy".to_owned())),
    };
    let is_held = format!("NOT {}", not_held());
    // Per tenant: rows changed, unchanged held rows, unchanged unheld rows.
    // A purge changes a row by deleting it: only unchanged rows remain.
    let changed_expr = changed.unwrap_or("false");
    let sql = format!(
        "SELECT t.tenant_id = '{TENANT_A}' AS a, \
                count(*) FILTER (WHERE {changed_expr}) AS changed, \
                count(*) FILTER (WHERE NOT ({changed_expr}) AND {is_held}) AS kept_held, \
                count(*) FILTER (WHERE NOT ({changed_expr}) AND NOT ({is_held})) AS kept \
         FROM notes t GROUP BY 1"
    );
    let rows = sqlx::query(AssertSqlSafe(sql)).fetch_all(pool).await?;
    let mut a = (0i64, 0i64, 0i64);
    let mut b = (0i64, 0i64, 0i64);
    for r in rows {
        let counts = (
            r.try_get("changed")?,
            r.try_get("kept_held")?,
            r.try_get("kept")?,
        );
        if r.try_get::<bool, _>("a")? {
            a = counts;
        } else {
            b = counts;
        }
    }
    let want_changed = if changed.is_some() {
        i64::try_from(expected(job.spec.kind, job.rows, job.holds))?
    } else {
        0
    };
    let want_held = if job.spec.kind == Kind::RawDelete {
        0
    } else {
        i64::try_from(job.holds)?
    };
    let want_b = i64::try_from(job.rows / 10)?;
    let ok_a = a == (want_changed, want_held, 0);
    let ok_b = b == (0, 0, want_b);
    Ok((!ok_a || !ok_b).then(|| {
        format!(
            "table after {}: tenant A (changed, kept held, kept unheld) = {a:?}, expected \
             ({want_changed}, {want_held}, 0); tenant {TENANT_B} = {b:?}, expected (0, 0, {want_b})",
            job.spec.name
        )
    }))
}
