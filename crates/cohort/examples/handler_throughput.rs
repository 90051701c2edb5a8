//! Row handlers' costs (issue: row handlers): the sweep's throughput with a
//! capturing handler registered against the same sweep without one, and the
//! dispatcher's deliveries per second with one and with four dispatchers.
//!
//! ```sh
//! cargo run --release -p cohort --example handler_throughput -- 20000
//! ```
//!
//! Argument: expired rows (default 20,000). Each measurement runs on a fresh
//! copy of the data (`VACUUM ANALYZE`, `CHECKPOINT` first). The handler
//! captures one text column and its delivery does nothing, so the figures
//! are Cohort's own cost: capture, queue, claim, settle.

use std::sync::Arc;
use std::time::Instant;

use chrono::{DateTime, Utc};
use cohort::handlers::{CapturedRow, HandlerContext, HandlerError, RowHandler, RowHandlerOptions};
use cohort::policy::ProviderError;
use cohort::{
    BoxFuture, Capabilities, Cohort, Options, Period, ResolutionContext, Rule, RuleProvider, Scope,
    Strategy, TenantContext,
};
use cohort_testdb::TestDb;
use sqlx::PgPool;
use uuid::Uuid;

#[allow(dead_code, reason = "mirrors the table; Cohort reads its descriptor")]
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
    body: String,
}

struct Rules;

impl RuleProvider for Rules {
    fn capabilities(&self, _category: &str) -> Option<Capabilities> {
        Some(Capabilities::only(Strategy::Purge))
    }

    fn resolve<'a>(
        &'a self,
        _ctx: ResolutionContext<'a>,
    ) -> BoxFuture<'a, Result<Option<Rule>, ProviderError>> {
        Box::pin(async { Ok(Some(Rule::new(Period::days(30), Strategy::Purge))) })
    }
}

/// Captures the body; delivers nothing.
struct KeepBody;

impl RowHandler for KeepBody {
    type Snapshot = String;

    fn capture(&self, row: &CapturedRow) -> Result<String, HandlerError> {
        row.get("body")
    }

    fn deliver<'a>(
        &'a self,
        _ctx: &'a HandlerContext,
        _body: String,
    ) -> BoxFuture<'a, Result<(), HandlerError>> {
        Box::pin(async { Ok(()) })
    }
}

const TENANT: Uuid = Uuid::from_u64_pair(0x1000, 1);

async fn exec(pool: &PgPool, sql: &str) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(pool)
        .await
        .map(|_| ())
}

async fn load(pool: &PgPool, rows: i64) -> Result<(), sqlx::Error> {
    exec(
        pool,
        "CREATE TABLE IF NOT EXISTS notes (id bigint PRIMARY KEY, tenant_id uuid NOT NULL, \
                             created_at timestamptz NOT NULL, body text NOT NULL); \
         CREATE INDEX IF NOT EXISTS notes_tenant_created ON notes (tenant_id, created_at, id); \
         TRUNCATE notes, sweep_run_row_detail, sweep_row_handler_status, sweep_run_entity_summary, sweep_run CASCADE;",
    )
    .await?;
    sqlx::query(
        "INSERT INTO notes SELECT g, $2, now() - interval '60 days' + g * interval '1 ms', \
                'note body number ' || g FROM generate_series(1, $1) g",
    )
    .bind(rows)
    .bind(TENANT)
    .execute(pool)
    .await?;
    // One statement per call: VACUUM cannot run in the implicit transaction
    // of a multi-statement message.
    exec(pool, "VACUUM ANALYZE notes").await?;
    exec(pool, "CHECKPOINT").await
}

async fn build(pool: &PgPool, handler: bool) -> Result<Cohort, cohort::Error> {
    let mut b = Cohort::builder(pool.clone())
        .options(Options::default())
        .rules(Rules)
        .entity::<Note>();
    if handler {
        b = b.row_handler_with::<Note, _>(
            KeepBody,
            RowHandlerOptions::new().id(uuid::uuid!("0c6f4e2a-8d1b-4f3a-9e57-2a1c9b7d3e64")),
        );
    }
    b.build().await
}

/// Sweeps the loaded rows; rows per second.
async fn sweep(cohort: &Cohort, rows: i64) -> Result<f64, Box<dyn std::error::Error>> {
    let started = Instant::now();
    let result = cohort
        .sweep(&Scope::Tenant(TenantContext::new(TENANT)), Utc::now())
        .await?;
    let secs = started.elapsed().as_secs_f64();
    assert_eq!(result.affected(), u64::try_from(rows)?);
    Ok(rows as f64 / secs)
}

/// Drains the queue with `n` dispatchers; deliveries per second.
async fn drain(cohort: &Cohort, n: usize, rows: i64) -> Result<f64, Box<dyn std::error::Error>> {
    let cohort = Arc::new(cohort.clone());
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..n {
        let cohort = Arc::clone(&cohort);
        tasks.push(tokio::spawn(async move {
            let dispatcher = cohort.dispatcher();
            let mut succeeded = 0u64;
            loop {
                let report = dispatcher.run_once().await?;
                succeeded += report.succeeded;
                if report.claimed == 0 {
                    return Ok::<u64, cohort::Error>(succeeded);
                }
            }
        }));
    }
    let mut delivered = 0u64;
    for t in tasks {
        delivered += t.await??;
    }
    let secs = started.elapsed().as_secs_f64();
    assert_eq!(delivered, u64::try_from(rows)?);
    Ok(rows as f64 / secs)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rows: i64 = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(20_000);
    let db = TestDb::try_new().await?;
    exec(
        db.pool(),
        &cohort::schema::ddl(&cohort::schema::SchemaName::public()),
    )
    .await?;
    load(db.pool(), rows).await?;
    let plain = build(db.pool(), false).await?;
    let capturing = build(db.pool(), true).await?;

    let without = sweep(&plain, rows).await?;
    load(db.pool(), rows).await?;
    let with = sweep(&capturing, rows).await?;
    println!(
        "sweep, {rows} rows: {without:.0} rows/s without a handler, {with:.0} rows/s with a \
         capturing handler: ratio {:.2}",
        with / without
    );
    let one = drain(&capturing, 1, rows).await?;
    println!("dispatch, 1 dispatcher: {one:.0} deliveries/s");
    load(db.pool(), rows).await?;
    sweep(&capturing, rows).await?;
    let four = drain(&capturing, 4, rows).await?;
    println!(
        "dispatch, 4 dispatchers: {four:.0} deliveries/s ({:.2} x one)",
        four / one
    );
    Ok(())
}
