//! The locked path against a raw reference (issue 23, item 4): an
//! anonymisation whose value is computed in Rust (a custom anonymiser, so
//! every batch reads the rows, computes, and writes them back) against the
//! fastest raw SQL an application could send with the same result: the new
//! values computed beforehand (not timed), then one `UPDATE ... FROM
//! unnest(ids, values)` with the same hold check. Not a test:
//!
//! ```text
//! cargo run --release -p cohort-bench --bin locked                 # 100,000 rows, batch 1,000, 3 runs
//! cargo run --release -p cohort-bench --bin locked -- --rows 1000000 --runs 3
//! ```

use std::time::Instant;

use chrono::{DateTime, Utc};
use cohort::{Cohort, Options, Scope, Strategy, TenantContext};
use cohort_testdb::TestDb;
use sqlx::{AssertSqlSafe, PgPool};
use uuid::Uuid;

use cohort_bench::{BoxError, ThirtyDays, exec, median};

const TENANT: &str = "11111111-1111-1111-1111-111111111111";
const ENTITY: &str = "a3f467fe-c5d0-4f17-9897-83c373cc1dc8";
const HOLDS: i64 = 1_000;

/// Keeps the domain of an e-mail address, in Rust.
struct KeepDomain;

impl cohort::Anonymiser for KeepDomain {
    fn anonymise(original: Option<&str>) -> Option<String> {
        let domain = original?.rsplit_once('@')?.1;
        Some(format!("redacted@{domain}"))
    }
}

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
    anonymised_at: Option<DateTime<Utc>>,
    #[cohort(anonymise_with = KeepDomain)]
    email: Option<String>,
}

/// Puts every row back as it was: expired, not yet anonymised.
async fn refill(pool: &PgPool, rows: i64) -> Result<(), sqlx::Error> {
    exec(
        pool,
        &format!(
            "TRUNCATE notes; \
             INSERT INTO notes SELECT g, '{TENANT}', now() - interval '400 days' + g * interval '1 second', \
                    NULL, 'person' || g || '@example.org' FROM generate_series(1, {rows}) g"
        ),
    )
    .await?;
    exec(pool, "VACUUM ANALYZE notes").await
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
         anonymised_at timestamptz, email text); \
         CREATE INDEX ON notes (tenant_id, created_at, id)",
    )
    .await?;
    let cohort = Cohort::builder(pool.clone())
        .options(Options {
            batch_size: batch,
            ..Options::default()
        })
        .rules(ThirtyDays(Strategy::Anonymise))
        .entity::<Note>()
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
    let (mut raw, mut swept) = (Vec::new(), Vec::new());
    for run in 0..runs {
        // The raw reference: values computed beforehand, one statement.
        refill(&pool, rows).await?;
        let held = not_held();
        let source: Vec<(i64, Option<String>)> = sqlx::query_as(AssertSqlSafe(format!(
            "SELECT t.id, t.email FROM notes t WHERE t.tenant_id = '{TENANT}' \
             AND t.created_at < now() - interval '30 days' AND t.anonymised_at IS NULL AND {held}"
        )))
        .fetch_all(&pool)
        .await?;
        let ids: Vec<i64> = source.iter().map(|(id, _)| *id).collect();
        let values: Vec<Option<String>> = source
            .iter()
            .map(|(_, e)| <KeepDomain as cohort::Anonymiser>::anonymise(e.as_deref()))
            .collect();
        let started = Instant::now();
        let done = sqlx::query(AssertSqlSafe(format!(
            "UPDATE notes t SET email = u.e, anonymised_at = statement_timestamp() \
             FROM unnest($1::bigint[], $2::text[]) AS u(id, e) \
             WHERE t.id = u.id AND t.tenant_id = '{TENANT}' AND t.anonymised_at IS NULL AND {held}"
        )))
        .bind(&ids)
        .bind(&values)
        .execute(&pool)
        .await?;
        raw.push(started.elapsed().as_secs_f64());
        if done.rows_affected() != expected {
            return Err(format!("raw: {} of {expected} rows", done.rows_affected()).into());
        }
        // Cohort's locked path.
        refill(&pool, rows).await?;
        let started = Instant::now();
        let result = cohort.sweep(&scope, Utc::now()).await?;
        swept.push(started.elapsed().as_secs_f64());
        if result.affected() != expected {
            return Err(format!("sweep: {} of {expected} rows", result.affected()).into());
        }
        eprintln!(
            "run {run}: raw {:.3} s, Cohort {:.3} s",
            raw[raw.len() - 1],
            swept[swept.len() - 1]
        );
    }
    let (r, c) = (median(raw), median(swept));
    println!(
        "custom anonymiser, {rows} rows ({HOLDS} held), batch {batch}, median of {runs} runs: \
         raw UPDATE FROM unnest {r:.3} s, Cohort {c:.3} s, raw/cohort {:.2}",
        r / c
    );
    Ok(())
}
