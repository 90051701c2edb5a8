//! The ledger-heavy paths against raw references (issue 23, item 4):
//!
//! - **per-row audit**: a purge whose rule records every row
//!   (`Rule::with_per_row_audit`, the range path plus a row detail per row,
//!   chained by the details' evidence trigger) against
//!   `WITH d AS (DELETE ... RETURNING id) INSERT INTO sweep_run_row_detail ...`,
//!   one statement into the same table with the same trigger;
//! - **capturing row handler**: a purge whose type has a row handler that
//!   captures the whole row (the locked path: rows read `FOR UPDATE`, their
//!   snapshots checked in Rust, then deleted with their details and queued
//!   work) against `WITH d AS (DELETE ... RETURNING to_jsonb(t)), det AS
//!   (INSERT INTO sweep_run_row_detail ... captured_payload) INSERT INTO
//!   sweep_row_handler_status ...`: the same rows, payloads and work rows in
//!   one statement. The handler is never dispatched: only the sweep is timed.
//!
//! Both with the same hold check as Cohort's statements, on the same data
//! (1,000 held rows), median of `--runs`. Not a test:
//!
//! ```text
//! cargo run --release -p cohort-bench --bin ledgered                 # 100,000 rows, batch 1,000, 3 runs
//! cargo run --release -p cohort-bench --bin ledgered -- --rows 1000000 --runs 3
//! ```

use std::time::Instant;

use chrono::{DateTime, Utc};
use cohort::handlers::{CapturedRow, HandlerContext, HandlerError, RowHandler};
use cohort::policy::ProviderError;
use cohort::{
    Capabilities, Cohort, Options, Period, ResolutionContext, Rule, RuleProvider, RunResult, Scope,
    Strategy, SweepOptions, TenantContext,
};
use cohort_testdb::TestDb;
use futures_util::future::BoxFuture;
use sqlx::{AssertSqlSafe, PgPool};
use uuid::Uuid;

use cohort_bench::{BoxError, exec, median};

const TENANT: &str = "11111111-1111-1111-1111-111111111111";
const ENTITY: &str = "a3f467fe-c5d0-4f17-9897-83c373cc1dc8";
const HOLDS: i64 = 1_000;

#[allow(
    dead_code,
    reason = "mirrors the table; Cohort reads its descriptor, never its values"
)]
#[derive(cohort::Retained)]
#[cohort(
    category = "notes",
    anchor = "created_at",
    id = "a3f467fe-c5d0-4f17-9897-83c373cc1dc8",
    table = "notes"
)]
struct Note {
    id: i64,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
    email: Option<String>,
}

/// Purge after 30 days, every row recorded in the ledger.
struct PerRow;

impl RuleProvider for PerRow {
    fn resolve<'a>(
        &'a self,
        _ctx: ResolutionContext<'a>,
    ) -> BoxFuture<'a, Result<Option<Rule>, ProviderError>> {
        Box::pin(async {
            Ok(Some(
                Rule::new(Period::days(30), Strategy::Purge).with_per_row_audit(),
            ))
        })
    }

    fn capabilities(&self, _category: &str) -> Option<Capabilities> {
        Some(Capabilities::only(Strategy::Purge))
    }
}

/// Purge after 30 days, counts only (the handler's capture adds the details).
struct Counts;

impl RuleProvider for Counts {
    fn resolve<'a>(
        &'a self,
        _ctx: ResolutionContext<'a>,
    ) -> BoxFuture<'a, Result<Option<Rule>, ProviderError>> {
        Box::pin(async { Ok(Some(Rule::new(Period::days(30), Strategy::Purge))) })
    }

    fn capabilities(&self, _category: &str) -> Option<Capabilities> {
        Some(Capabilities::only(Strategy::Purge))
    }
}

/// Captures the whole row, as a mirror or an export would.
struct WholeRow;

impl RowHandler for WholeRow {
    type Snapshot = serde_json::Map<String, serde_json::Value>;

    fn capture(&self, row: &CapturedRow) -> Result<Self::Snapshot, HandlerError> {
        Ok(row.columns().clone())
    }

    fn deliver<'a>(
        &'a self,
        _ctx: &'a HandlerContext,
        _snapshot: Self::Snapshot,
    ) -> BoxFuture<'a, Result<(), HandlerError>> {
        Box::pin(async { Ok(()) })
    }
}

/// Puts every row back as it was, and empties the ledger's details and work.
async fn refill(pool: &PgPool, rows: i64) -> Result<(), sqlx::Error> {
    exec(
        pool,
        &format!(
            "TRUNCATE notes; \
             INSERT INTO notes SELECT g, '{TENANT}', now() - interval '400 days' + g * interval '1 second', \
                    'person' || g || '@example.org' FROM generate_series(1, {rows}) g"
        ),
    )
    .await?;
    exec(pool, "VACUUM ANALYZE notes").await?;
    exec(pool, "CHECKPOINT").await
}

/// The hold check of Cohort's statements, on alias `t`.
fn not_held() -> String {
    format!(
        "NOT EXISTS (SELECT 1 FROM retention_holds h WHERE h.retained_entity_id = '{ENTITY}' \
         AND h.record_id = t.id::text AND h.tenant_id = t.tenant_id \
         AND h.created_at <= statement_timestamp() \
         AND (h.expires_at IS NULL OR h.expires_at > statement_timestamp()) \
         AND (h.removed_at IS NULL OR h.removed_at > statement_timestamp()))"
    )
}

fn scope_sql() -> String {
    format!(
        "t.tenant_id = '{TENANT}' AND t.created_at < now() - interval '30 days' AND {}",
        not_held()
    )
}

/// A run for the raw statement's details to belong to: a dry run of the
/// same type writes one (and changes nothing).
async fn a_run(cohort: &Cohort, scope: &Scope) -> Result<Uuid, BoxError> {
    let result: RunResult = cohort
        .sweep_with(scope, Utc::now(), SweepOptions::default().dry_run())
        .await?;
    Ok(result.run_id)
}

/// The per-row audit's raw reference; returns the rows deleted.
async fn raw_audit(pool: &PgPool, run: Uuid) -> Result<u64, sqlx::Error> {
    let done = sqlx::query(AssertSqlSafe(format!(
        "WITH d AS (DELETE FROM notes t WHERE {} RETURNING t.id::text AS rid) \
         INSERT INTO sweep_run_row_detail (run_id, retained_entity_id, entity_type, record_id, tenant_id, \
                                           action, created_at) \
         SELECT $1, '{ENTITY}', 'Note', d.rid, '{TENANT}', 'Purge', statement_timestamp() FROM d",
        scope_sql()
    )))
    .bind(run)
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

/// The capturing handler's raw reference; returns the work rows queued.
async fn raw_capture(pool: &PgPool, run: Uuid) -> Result<u64, sqlx::Error> {
    let done = sqlx::query(AssertSqlSafe(format!(
        "WITH d AS (DELETE FROM notes t WHERE {} RETURNING t.id::text AS rid, to_jsonb(t) AS payload), \
         det AS (INSERT INTO sweep_run_row_detail (run_id, retained_entity_id, entity_type, record_id, \
                                                   tenant_id, action, created_at, captured_payload) \
                 SELECT $1, '{ENTITY}', 'Note', d.rid, '{TENANT}', 'Purge', statement_timestamp(), d.payload \
                 FROM d RETURNING detail_id, record_id) \
         INSERT INTO sweep_row_handler_status (detail_id, run_id, retained_entity_id, record_id, tenant_id, \
                 handler_id, priority, state, attempts, not_before, after_sweep_settled, created_at, updated_at) \
         SELECT det.detail_id, $1, '{ENTITY}', det.record_id, '{TENANT}', 'bench', 0, 'Pending', 0, \
                statement_timestamp(), false, statement_timestamp(), statement_timestamp() FROM det",
        scope_sql()
    )))
    .bind(run)
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let (mut rows, mut runs, mut batch) = (100_000i64, 3u32, 1_000u32);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--rows" => rows = value()?.replace(['_', ','], "").parse()?,
            "--runs" => runs = value()?.parse()?,
            "--batch" => batch = value()?.parse()?,
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    let db = TestDb::try_new().await?;
    let pool = db.pool().clone();
    exec(
        &pool,
        &cohort::schema::ddl(&cohort::schema::SchemaName::public()),
    )
    .await?;
    exec(
        &pool,
        "CREATE TABLE notes (id bigint PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz NOT NULL, \
         email text); \
         CREATE INDEX ON notes (tenant_id, created_at, id)",
    )
    .await?;
    let options = Options {
        batch_size: batch,
        ..Options::default()
    };
    let audited = Cohort::builder(pool.clone())
        .options(options.clone())
        .rules(PerRow)
        .entity::<Note>()
        .build()
        .await?;
    let captured = Cohort::builder(pool.clone())
        .options(options)
        .rules(Counts)
        .entity::<Note>()
        .row_handler::<Note, _>(WholeRow)
        .build()
        .await?;
    // Holds on every hundredth row (the registry knows the type now).
    exec(
        &pool,
        &format!(
            "INSERT INTO retention_holds (hold_id, retained_entity_id, record_id, tenant_id, reason, created_at) \
             SELECT gen_random_uuid(), '{ENTITY}', (g * 100)::text, '{TENANT}', 'bench', now() - interval '1 day' \
             FROM generate_series(1, {HOLDS}) g; ANALYZE retention_holds"
        ),
    )
    .await?;
    let expected = u64::try_from(rows - HOLDS.min(rows / 100)).unwrap_or(0);
    let scope = Scope::Tenant(TenantContext::new(Uuid::parse_str(TENANT)?));
    for (name, cohort, capture) in [
        ("per-row audit", &audited, false),
        ("capturing row handler", &captured, true),
    ] {
        let (mut raw, mut swept) = (Vec::new(), Vec::new());
        for run in 0..runs {
            refill(&pool, rows).await?;
            let run_id = a_run(cohort, &scope).await?;
            let started = Instant::now();
            let done = if capture {
                raw_capture(&pool, run_id).await?
            } else {
                raw_audit(&pool, run_id).await?
            };
            raw.push(started.elapsed().as_secs_f64());
            if done != expected {
                return Err(format!("{name}, raw: {done} of {expected} rows").into());
            }
            refill(&pool, rows).await?;
            let started = Instant::now();
            let result = cohort.sweep(&scope, Utc::now()).await?;
            swept.push(started.elapsed().as_secs_f64());
            if result.affected() != expected {
                return Err(
                    format!("{name}, sweep: {} of {expected} rows", result.affected()).into(),
                );
            }
            let details: i64 =
                sqlx::query_scalar("SELECT count(*) FROM sweep_run_row_detail WHERE run_id = $1")
                    .bind(result.run_id)
                    .fetch_one(&pool)
                    .await?;
            if u64::try_from(details).unwrap_or(0) != expected {
                return Err(format!("{name}, sweep: {details} details of {expected}").into());
            }
            eprintln!(
                "{name}, run {run}: raw {:.3} s, Cohort {:.3} s",
                raw[raw.len() - 1],
                swept[swept.len() - 1]
            );
        }
        let (r, c) = (median(raw), median(swept));
        println!(
            "{name}, {rows} rows ({HOLDS} held), batch {batch}, median of {runs} runs: \
             raw {r:.3} s, Cohort {c:.3} s, Cohort's rows/s over the raw statement's {:.2} (target 0.5)",
            r / c
        );
    }
    Ok(())
}
