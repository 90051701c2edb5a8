//! The worker over many tenants (issue: the scheduled worker): one
//! occurrence over N tenants with a few expired rows each, against one sweep
//! of the same rows in a single tenant, and where the per-tenant overhead
//! goes.
//!
//! ```sh
//! cargo run --release -p cohort --example many_tenants -- 10000 3
//! ```
//!
//! Arguments: tenants (default 10,000), expired rows per tenant (default 3).
//! Each measurement runs on a fresh copy of the data (`VACUUM ANALYZE`,
//! `CHECKPOINT` first). Prints the time of
//!
//! * `occurrence`: `Worker::run_occurrence` over the N tenants (one pass per
//!   tenant, one tenantless pass);
//! * `empty occurrence`: the same over N tenants with no rows at all, which
//!   is the passes' fixed cost;
//! * `single tenant`: one `Cohort::sweep` of the same N×K rows in one tenant;
//!
//! and, per pass, the transactions committed and the ledger rows written
//! (from `pg_stat_database` and the ledger tables).

use std::time::Instant;

use chrono::{DateTime, Utc};
use cohort::policy::ProviderError;
use cohort::{
    CancellationToken, Capabilities, Cohort, Options, Period, ResolutionContext, Rule,
    RuleProvider, Scope, Strategy, TenantContext,
};
use cohort_testdb::TestDb;
use futures_util::future::BoxFuture;
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
    id: Uuid,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
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

fn tenant(i: u64) -> Uuid {
    Uuid::from_u64_pair(0x1000, i)
}

async fn exec(pool: &PgPool, sql: &str) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(pool)
        .await
        .map(|_| ())
}

/// A fresh table: `per_tenant` expired rows for each of `tenants` tenants,
/// or all of them in one tenant when `single`.
async fn load(
    pool: &PgPool,
    tenants: u64,
    per_tenant: u64,
    single: bool,
) -> Result<(), sqlx::Error> {
    exec(
        pool,
        "DROP TABLE IF EXISTS notes; \
         CREATE TABLE notes (id uuid PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz NOT NULL); \
         TRUNCATE sweep_run_row_detail, sweep_row_handler_status, sweep_run_entity_summary, sweep_run CASCADE;",
    )
    .await?;
    sqlx::query(
        "INSERT INTO notes \
         SELECT gen_random_uuid(), \
                CASE WHEN $3 THEN '00000000-0000-1000-0000-000000000000'::uuid \
                     ELSE ('00000000-0000-1000-0000-' || lpad(to_hex(g), 12, '0'))::uuid END, \
                now() - interval '60 days' \
         FROM generate_series(0, $1 - 1) g, generate_series(1, $2)",
    )
    .bind(i64::try_from(tenants).unwrap_or(i64::MAX))
    .bind(i64::try_from(per_tenant).unwrap_or(i64::MAX))
    .bind(single)
    .execute(pool)
    .await?;
    // One statement per call: VACUUM cannot run in the implicit transaction
    // of a multi-statement message.
    exec(pool, "CREATE INDEX ON notes (tenant_id, created_at, id)").await?;
    exec(pool, "VACUUM ANALYZE notes").await?;
    exec(pool, "CHECKPOINT").await
}

async fn commits(pool: &PgPool) -> Result<i64, sqlx::Error> {
    // pg_stat_database lags by up to the stats flush interval; force it.
    sqlx::query("SELECT pg_stat_force_next_flush()")
        .execute(pool)
        .await?;
    sqlx::query_scalar(
        "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()",
    )
    .fetch_one(pool)
    .await
}

async fn ledger_rows(pool: &PgPool) -> Result<(i64, i64), sqlx::Error> {
    sqlx::query_as(
        "SELECT (SELECT count(*) FROM sweep_run), (SELECT count(*) FROM sweep_run_entity_summary)",
    )
    .fetch_one(pool)
    .await
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let tenants: u64 = args
        .next()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(10_000);
    let per_tenant: u64 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(3);
    let db = TestDb::try_new().await?;
    exec(
        db.pool(),
        &cohort::schema::ddl(&cohort::schema::SchemaName::public()),
    )
    .await?;
    load(db.pool(), tenants, per_tenant, false).await?;
    let cohort = Cohort::builder(db.pool().clone())
        .options(Options::default())
        .rules(Rules)
        .entity::<Note>()
        .build()
        .await?;
    let list: Vec<TenantContext> = (0..tenants)
        .map(|i| TenantContext::new(tenant(i)))
        .collect();
    let worker = cohort.worker().tenants(list.clone());
    let shutdown = CancellationToken::new();
    let at = Utc::now();

    let c0 = commits(db.pool()).await?;
    let started = Instant::now();
    let report = worker.run_occurrence(at, &shutdown).await?;
    let occurrence = started.elapsed();
    let c1 = commits(db.pool()).await?;
    let (runs, summaries) = ledger_rows(db.pool()).await?;
    assert_eq!(report.affected(), tenants * per_tenant, "{report:?}");
    assert_eq!(report.failed_passes(), 0);
    let passes = report.passes.len() as f64;
    println!(
        "occurrence: {tenants} tenants x {per_tenant} rows: {:.2} s, {} passes, {:.2} ms per pass, \
         {:.1} commits per pass, {runs} runs, {summaries} summaries",
        occurrence.as_secs_f64(),
        report.passes.len(),
        occurrence.as_secs_f64() * 1000.0 / passes,
        (c1 - c0) as f64 / passes,
    );

    load(db.pool(), tenants, 0, false).await?;
    let started = Instant::now();
    let empty = cohort
        .worker()
        .tenants(list)
        .run_occurrence(at + chrono::Duration::days(1), &shutdown)
        .await?;
    let fixed = started.elapsed();
    println!(
        "empty occurrence: {tenants} tenants: {:.2} s, {:.2} ms per pass",
        fixed.as_secs_f64(),
        fixed.as_secs_f64() * 1000.0 / empty.passes.len() as f64
    );

    load(db.pool(), 1, tenants * per_tenant, true).await?;
    let single = TenantContext::new(tenant(0));
    let started = Instant::now();
    let result = cohort.sweep(&Scope::Tenant(single), at).await?;
    let one = started.elapsed();
    assert_eq!(result.affected(), tenants * per_tenant);
    println!(
        "single tenant: {} rows: {:.2} s",
        tenants * per_tenant,
        one.as_secs_f64()
    );
    println!(
        "per-tenant overhead: {:.2} ms ((occurrence - single tenant) / tenants); ratio occurrence / single = {:.1}",
        (occurrence.as_secs_f64() - one.as_secs_f64()) * 1000.0 / tenants as f64,
        occurrence.as_secs_f64() / one.as_secs_f64()
    );
    Ok(())
}
