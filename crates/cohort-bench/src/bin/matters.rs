//! What matter holds (contract MH4) cost a sweep, against one raw `DELETE`
//! with the same predicate on the same data (`docs/performance.md`,
//! "Matter holds"). Not a test:
//!
//! ```text
//! cargo run --release -p cohort-bench --bin matters              # 3 runs of each
//! cargo run --release -p cohort-bench --bin matters -- --runs 5 --covered 1000000 --others 200000
//! ```
//!
//! Two shapes, both on a table of `covered + others` expired rows of one
//! tenant:
//!
//! * **one big matter**: a subject matter covers `covered` rows (one
//!   customer's); the sweep purges the `others` and must pass every covered
//!   row; raw: `DELETE ... WHERE created_at < cutoff AND customer <> 'big'`;
//! * **many matters**: 1,000 subject matters over customers with no row in
//!   the table; the sweep purges every row; raw: `DELETE ... WHERE
//!   created_at < cutoff`.
//!
//! It writes no per-row hold: `retention_holds` stays empty (checked).

use std::time::Instant;

use chrono::{DateTime, Utc};
use cohort::holds::MatterRequest;
use cohort::{Cohort, Scope, Strategy, TenantContext};
use cohort_testdb::TestDb;
use sqlx::{AssertSqlSafe, PgPool};
use uuid::Uuid;

use cohort_bench::{BoxError, ThirtyDays, exec, median};

const TENANT: &str = "11111111-1111-1111-1111-111111111111";

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
    #[cohort(erasure_subject)]
    customer: String,
}

async fn scalar(pool: &PgPool, sql: &str) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(AssertSqlSafe(sql.to_owned()))
        .fetch_one(pool)
        .await
}

/// Rows `first..=last`, 400 days old, of `customer` (`NULL`: one each).
async fn fill(
    pool: &PgPool,
    first: i64,
    last: i64,
    customer: Option<&str>,
) -> Result<(), sqlx::Error> {
    let who = customer.map_or("'c' || g".to_owned(), |c| format!("'{c}'"));
    exec(
        pool,
        &format!(
            "INSERT INTO notes SELECT g, '{TENANT}', now() - interval '400 days' + g * interval '1 ms', {who} \
             FROM generate_series({first}, {last}) g ON CONFLICT (id) DO NOTHING"
        ),
    )
    .await?;
    exec(pool, "VACUUM ANALYZE notes").await
}

async fn timed_sql(pool: &PgPool, sql: &str) -> Result<f64, BoxError> {
    let started = Instant::now();
    exec(pool, sql).await?;
    Ok(started.elapsed().as_secs_f64())
}

async fn timed_sweep(cohort: &Cohort, expect: i64) -> Result<f64, BoxError> {
    let scope = Scope::Tenant(TenantContext::new(Uuid::parse_str(TENANT)?));
    let started = Instant::now();
    let result = cohort.sweep(&scope, Utc::now()).await?;
    let took = started.elapsed().as_secs_f64();
    if i64::try_from(result.affected())? != expect {
        return Err(format!("the sweep changed {} rows, not {expect}", result.affected()).into());
    }
    Ok(took)
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let mut runs = 3u32;
    let mut covered = 1_000_000i64;
    let mut others = 200_000i64;
    let mut matters = 1_000u32;
    let mut batch = 5_000u32;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--runs" => runs = value()?.parse()?,
            "--covered" => covered = value()?.parse()?,
            "--others" => others = value()?.parse()?,
            "--matters" => matters = value()?.parse()?,
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
        "CREATE TABLE notes (id bigint PRIMARY KEY, tenant_id uuid NOT NULL, \
         created_at timestamptz NOT NULL, customer text NOT NULL); \
         CREATE INDEX ON notes (tenant_id, created_at, id)",
    )
    .await?;
    let options = cohort::Options {
        batch_size: batch,
        ..cohort::Options::default()
    };
    let cohort = Cohort::builder(pool.clone())
        .options(options)
        .rules(ThirtyDays(Strategy::Purge))
        .entity::<Note>()
        .build()
        .await?;
    let tenant = Uuid::parse_str(TENANT)?;
    let mut conn = pool.acquire().await?;

    // 0. No matter: the sweep's own cost on the rows it purges.
    let raw0 = format!(
        "DELETE FROM notes WHERE tenant_id = '{TENANT}' AND created_at < now() - interval '30 days'"
    );
    let (mut raw_none, mut sweep_none) = (vec![], vec![]);
    for _ in 0..runs {
        fill(&pool, 1, others, None).await?;
        raw_none.push(timed_sql(&pool, &raw0).await?);
        fill(&pool, 1, others, None).await?;
        sweep_none.push(timed_sweep(&cohort, others).await?);
    }

    // 1. One matter over `covered` rows.
    fill(&pool, 1, covered, Some("big")).await?;
    let big = cohort
        .matters()
        .create(
            &mut conn,
            MatterRequest::subject("big", Some(tenant), "bench", "bench"),
        )
        .await?;
    let (first, last) = (covered + 1, covered + others);
    let raw = format!(
        "DELETE FROM notes WHERE tenant_id = '{TENANT}' AND created_at < now() - interval '30 days' \
         AND customer <> 'big'"
    );
    let (mut raw1, mut sweep1) = (vec![], vec![]);
    for _ in 0..runs {
        fill(&pool, first, last, None).await?;
        raw1.push(timed_sql(&pool, &raw).await?);
        fill(&pool, first, last, None).await?;
        sweep1.push(timed_sweep(&cohort, others).await?);
    }
    let left = scalar(&pool, "SELECT count(*) FROM notes").await?;
    cohort.matters().release(&mut conn, big.matter_id).await?;
    exec(&pool, "TRUNCATE notes").await?;

    // 2. Many matters over other subjects.
    for i in 0..matters {
        cohort
            .matters()
            .create(
                &mut conn,
                MatterRequest::subject(format!("absent-{i}"), Some(tenant), "bench", "bench"),
            )
            .await?;
    }
    drop(conn);
    let raw = format!(
        "DELETE FROM notes WHERE tenant_id = '{TENANT}' AND created_at < now() - interval '30 days'"
    );
    let (mut raw2, mut sweep2) = (vec![], vec![]);
    for _ in 0..runs {
        fill(&pool, 1, others, None).await?;
        raw2.push(timed_sql(&pool, &raw).await?);
        fill(&pool, 1, others, None).await?;
        sweep2.push(timed_sweep(&cohort, others).await?);
    }
    let hold_rows = scalar(&pool, "SELECT count(*) FROM retention_holds").await?;

    let (r1, s1, r2, s2) = (median(raw1), median(sweep1), median(raw2), median(sweep2));
    let (r0, s0) = (median(raw_none), median(sweep_none));
    println!(
        "matter holds, batch {batch}, median of {runs} runs (raw DELETE / sweep: higher is better)"
    );
    println!(
        "  no matter, {others} purged:                 raw {:8.1} ms  sweep {:8.1} ms  raw/sweep {:.2}",
        r0 * 1e3,
        s0 * 1e3,
        r0 / s0
    );
    println!(
        "  one matter over {covered} rows, {others} purged: raw {:8.1} ms  sweep {:8.1} ms  raw/sweep {:.2}  (rows left {left})",
        r1 * 1e3,
        s1 * 1e3,
        r1 / s1
    );
    println!(
        "    the matter's own cost: sweep without / with it {:.2}",
        s0 / s1
    );
    println!(
        "  {matters} matters over other subjects, {others} purged: raw {:8.1} ms  sweep {:8.1} ms  raw/sweep {:.2}",
        r2 * 1e3,
        s2 * 1e3,
        r2 / s2
    );
    println!(
        "    the matters' own cost: sweep without / with them {:.2}",
        s0 / s2
    );
    println!("  per-row hold rows written: {hold_rows}");
    Ok(())
}
