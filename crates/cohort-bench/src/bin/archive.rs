//! The archive strategy against its raw reference (issue 28, contract SL2):
//! Cohort's archive sweep (batches that copy rows into the archive table and
//! delete them, with the hold check, the fence, the per-batch checksum and
//! the ledger) against one raw `WITH d AS (DELETE ... RETURNING *) INSERT
//! INTO archive SELECT ...` of the same rows with the same hold check.
//! Ordered data, 1,000 holds. Not a test:
//!
//! ```text
//! cargo run --release -p cohort-bench --bin archive                 # 100,000 rows, batch 1,000, 3 runs
//! cargo run --release -p cohort-bench --bin archive -- --rows 1000000 --batch 5000 --runs 3
//! ```

use std::time::Instant;

use chrono::{DateTime, Utc};
use cohort::policy::ProviderError;
use cohort::{
    Capabilities, Cohort, Options, Period, ResolutionContext, Rule, RuleProvider, Scope, Strategy,
    TenantContext,
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
    body: String,
}

/// Archive after 30 days, into schema `archive`.
struct Archive30;

impl RuleProvider for Archive30 {
    fn resolve<'a>(
        &'a self,
        _ctx: ResolutionContext<'a>,
    ) -> BoxFuture<'a, Result<Option<Rule>, ProviderError>> {
        Box::pin(async { Ok(Some(Rule::new(Period::days(30), Strategy::Archive))) })
    }

    fn capabilities(&self, _category: &str) -> Option<Capabilities> {
        Some(Capabilities::only(Strategy::Archive).archive_into("archive"))
    }
}

/// Puts every row back as it was, in anchor order, with an empty archive.
async fn refill(pool: &PgPool, rows: i64) -> Result<(), sqlx::Error> {
    exec(
        pool,
        &format!(
            "TRUNCATE notes; TRUNCATE archive.notes; \
             INSERT INTO notes SELECT g, '{TENANT}', now() - interval '400 days' + g * interval '1 second', \
                    'person' || g || '@example.org', repeat('note ', 10) || g \
             FROM generate_series(1, {rows}) g"
        ),
    )
    .await?;
    exec(pool, "VACUUM ANALYZE notes").await?;
    exec(pool, "VACUUM ANALYZE archive.notes").await?;
    exec(pool, "CHECKPOINT").await
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
         email text, body text NOT NULL); \
         CREATE INDEX ON notes (tenant_id, created_at, id)",
    )
    .await?;
    let builder = Cohort::builder(pool.clone())
        .options(Options {
            batch_size: batch,
            ..Options::default()
        })
        .rules(Archive30)
        .entity::<Note>();
    exec(&pool, &builder.archive_sql()?).await?;
    let cohort = builder.build().await?;
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
    let held = format!(
        "NOT EXISTS (SELECT 1 FROM retention_holds h WHERE h.retained_entity_id = '{ENTITY}' \
         AND h.record_id = t.id::text AND h.tenant_id = t.tenant_id \
         AND h.created_at <= statement_timestamp() \
         AND (h.expires_at IS NULL OR h.expires_at > statement_timestamp()) \
         AND (h.removed_at IS NULL OR h.removed_at > statement_timestamp()))"
    );
    let (mut raw, mut swept) = (Vec::new(), Vec::new());
    for run in 0..runs {
        refill(&pool, rows).await?;
        let run_id = Uuid::new_v4();
        let started = Instant::now();
        let done = sqlx::query(AssertSqlSafe(format!(
            "WITH d AS (DELETE FROM notes t WHERE t.tenant_id = '{TENANT}' \
               AND t.created_at < now() - interval '30 days' AND {held} RETURNING t.*) \
             INSERT INTO archive.notes SELECT d.*, $1, 1, statement_timestamp() FROM d"
        )))
        .bind(run_id)
        .execute(&pool)
        .await?;
        raw.push(started.elapsed().as_secs_f64());
        if done.rows_affected() != expected {
            return Err(format!("raw: {} of {expected} rows", done.rows_affected()).into());
        }
        refill(&pool, rows).await?;
        let started = Instant::now();
        let result = cohort.sweep(&scope, Utc::now()).await?;
        swept.push(started.elapsed().as_secs_f64());
        if result.affected() != expected {
            return Err(format!("sweep: {} of {expected} rows", result.affected()).into());
        }
        let archived: i64 = sqlx::query_scalar("SELECT count(*) FROM archive.notes")
            .fetch_one(&pool)
            .await?;
        if u64::try_from(archived).unwrap_or(0) != expected {
            return Err(format!("archive: {archived} of {expected} rows").into());
        }
        eprintln!(
            "run {run}: raw {:.3} s, Cohort {:.3} s",
            raw[raw.len() - 1],
            swept[swept.len() - 1]
        );
    }
    let (r, c) = (median(raw), median(swept));
    println!(
        "archive, {rows} rows ({HOLDS} held), batch {batch}, median of {runs} runs: \
         raw WITH d AS (DELETE ... RETURNING *) INSERT {r:.3} s, Cohort {c:.3} s, raw/cohort {:.2} (target >= 0.60)",
        r / c
    );
    Ok(())
}
