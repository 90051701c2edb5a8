//! Cohort's throughput against raw SQL on the same data.
//!
//! ```sh
//! cargo run --release -p cohort-bench -- --rows 1000000 --batch 1000
//! cargo run --release -p cohort-bench -- --rows 5000000 --batch 1000 --only raw-delete,sweep-purge
//! ```
//!
//! One table of `--rows` expired rows of tenant A (1,000 of them held) plus
//! 10% as many rows of tenant B, an index on (tenant_id, created_at, id), rows
//! inserted in anchor order. Each measurement runs in a child process of its
//! own on a fresh copy of the table, so the peak memory reported (VmHWM) is
//! that of the sweeping process alone. Prints one JSON line per measurement
//! and a summary with ratios to raw SQL. Not a test: numbers depend on the
//! machine; read the ratios.

use std::process::Command;
use std::time::Instant;

use chrono::{DateTime, Utc};
use cohort::policy::ProviderError;
use cohort::{
    Capabilities, Cohort, Options, Period, ResolutionContext, Rule, RuleProvider, Scope, Strategy,
    TenantContext,
};
use futures_util::future::BoxFuture;
use sqlx::{AssertSqlSafe, PgPool};
use uuid::Uuid;

const TENANT_A: &str = "11111111-1111-1111-1111-111111111111";

/// The benchmark's row type.
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
    id: Uuid,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
    anonymised_at: Option<DateTime<Utc>>,
    #[cohort(anonymise = "null")]
    email: Option<String>,
    #[cohort(anonymise(literal = "[redacted]"))]
    body: String,
}

struct Rules(Strategy);

impl RuleProvider for Rules {
    fn capabilities(&self, _category: &str) -> Option<Capabilities> {
        Some(Capabilities::only(Strategy::Purge).and(Strategy::Anonymise))
    }

    fn resolve<'a>(
        &'a self,
        _ctx: ResolutionContext<'a>,
    ) -> BoxFuture<'a, Result<Option<Rule>, ProviderError>> {
        let strategy = self.0;
        Box::pin(async move { Ok(Some(Rule::new(Period::days(30), strategy))) })
    }
}

fn arg(name: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| default.to_owned())
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .map(str::to_owned)
        })
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

async fn exec(pool: &PgPool, sql: &str) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(AssertSqlSafe(sql.to_owned()))
        .execute(pool)
        .await
        .map(|_| ())
}

/// Builds the template table once.
async fn setup(pool: &PgPool, rows: i64) -> Result<(), Box<dyn std::error::Error>> {
    let schema = cohort::schema::SchemaName::public();
    exec(pool, &cohort::schema::ddl(&schema)).await?;
    exec(
        pool,
        &format!(
            "CREATE TABLE template (id uuid NOT NULL, tenant_id uuid NOT NULL, created_at timestamptz NOT NULL, \
               anonymised_at timestamptz, email text, body text NOT NULL);
             INSERT INTO template (id, tenant_id, created_at, email, body) SELECT gen_random_uuid(), '{TENANT_A}', \
               now() - interval '400 days' + (i::float / {rows}) * interval '300 days', 'person@example.org', repeat('x', 100) \
               FROM generate_series(1, {rows}) i;
             INSERT INTO template (id, tenant_id, created_at, email, body) SELECT gen_random_uuid(), '22222222-2222-2222-2222-222222222222', \
               now() - interval '400 days', 'person@example.org', repeat('x', 100) FROM generate_series(1, {rows} / 10) i;
             INSERT INTO retention_holds SELECT gen_random_uuid(), 'a3f467fe-c5d0-4f17-9897-83c373cc1dc8', id::text, tenant_id, \
               'bench', now() - interval '1 day', NULL, NULL \
               FROM template WHERE tenant_id = '{TENANT_A}' ORDER BY random() LIMIT 1000;"
        ),
    )
    .await?;
    exec(pool, "VACUUM ANALYZE retention_holds").await?;
    Ok(())
}

/// A fresh copy of the template as `notes`.
async fn fresh_copy(pool: &PgPool) -> Result<(), sqlx::Error> {
    exec(
        pool,
        "DROP TABLE IF EXISTS notes;
         CREATE TABLE notes (LIKE template INCLUDING ALL);
         INSERT INTO notes SELECT * FROM template;
         ALTER TABLE notes ADD PRIMARY KEY (id);
         CREATE INDEX ON notes (tenant_id, created_at, id);",
    )
    .await?;
    exec(pool, "VACUUM ANALYZE notes").await?;
    exec(pool, "CHECKPOINT").await
}

/// One measurement, in this (child) process.
async fn measure(
    url: &str,
    what: &str,
    batch: u32,
) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect(url)
        .await?;
    fresh_copy(&pool).await?;
    let tenant = Uuid::parse_str(TENANT_A)?;
    let now = Utc::now();
    let cutoff = now - chrono::Duration::days(30);
    let started = Instant::now();
    let rows: u64 = match what {
        "raw-delete" => sqlx::query("DELETE FROM notes WHERE tenant_id = $1 AND created_at < $2")
            .bind(tenant)
            .bind(cutoff)
            .execute(&pool)
            .await?
            .rows_affected(),
        "raw-delete-holds" => sqlx::query(
            "DELETE FROM notes t WHERE tenant_id = $1 AND created_at < $2 AND NOT EXISTS (SELECT 1 FROM retention_holds h \
             WHERE h.retained_entity_id = 'a3f467fe-c5d0-4f17-9897-83c373cc1dc8' AND h.record_id = t.id::text \
             AND h.tenant_id = t.tenant_id AND h.created_at <= statement_timestamp() \
             AND (h.expires_at IS NULL OR h.expires_at > statement_timestamp()) \
             AND (h.removed_at IS NULL OR h.removed_at > statement_timestamp()))",
        )
        .bind(tenant)
        .bind(cutoff)
        .execute(&pool)
        .await?
        .rows_affected(),
        "raw-update" => sqlx::query(
            "UPDATE notes SET email = NULL, body = '[redacted]', anonymised_at = now() \
             WHERE tenant_id = $1 AND created_at < $2 AND anonymised_at IS NULL",
        )
        .bind(tenant)
        .bind(cutoff)
        .execute(&pool)
        .await?
        .rows_affected(),
        "sweep-purge" | "sweep-anonymise" => {
            let strategy = if what == "sweep-anonymise" { Strategy::Anonymise } else { Strategy::Purge };
            let cohort = Cohort::builder(pool.clone())
                .options(Options { batch_size: batch, ..Options::default() })
                .rules(Rules(strategy))
                .entity::<Note>()
                .build()
                .await?;
            let started = Instant::now();
            let result = cohort.sweep(&Scope::Tenant(TenantContext::new(tenant)), now).await?;
            let secs = started.elapsed().as_secs_f64();
            let affected = result.affected();
            return Ok(serde_json::json!({
                "what": what, "rows": affected, "seconds": secs, "rows_per_second": affected as f64 / secs,
                "batch": batch, "peak_rss_kib": peak_rss_kib(), "held": result.summaries[0].held,
            }));
        }
        other => return Err(format!("unknown measurement {other}").into()),
    };
    let secs = started.elapsed().as_secs_f64();
    Ok(serde_json::json!({
        "what": what, "rows": rows, "seconds": secs, "rows_per_second": rows as f64 / secs, "peak_rss_kib": peak_rss_kib(),
    }))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if let Some(i) = std::env::args().position(|a| a == "--measure") {
        let what = std::env::args()
            .nth(i + 1)
            .ok_or("--measure needs a name")?;
        let url = arg("--url", "");
        let batch: u32 = arg("--batch", "1000").parse()?;
        let line = measure(&url, &what, batch).await?;
        println!("{line}");
        return Ok(());
    }
    let rows: i64 = arg("--rows", "1000000").parse()?;
    let batches: Vec<String> = arg("--batch", "1000")
        .split(',')
        .map(str::to_owned)
        .collect();
    let db = cohort_testdb::TestDb::try_new().await?;
    eprintln!("setting up {rows} rows in {}", db.name());
    setup(db.pool(), rows).await?;
    let mut results = Vec::new();
    let mut plan: Vec<(String, String)> = vec![
        ("raw-delete".into(), "0".into()),
        ("raw-delete-holds".into(), "0".into()),
    ];
    for b in &batches {
        plan.push(("sweep-purge".into(), b.clone()));
    }
    plan.push(("raw-update".into(), "0".into()));
    for b in &batches {
        plan.push(("sweep-anonymise".into(), b.clone()));
    }
    let only = arg("--only", "");
    let plan: Vec<(String, String)> = if only.is_empty() {
        plan
    } else {
        plan.into_iter()
            .filter(|(w, _)| only.split(',').any(|o| o == w))
            .collect()
    };
    for (what, batch) in plan {
        let out = Command::new(std::env::current_exe()?)
            .args(["--measure", &what, "--url", &db.url(), "--batch", &batch])
            .output()?;
        if !out.status.success() {
            return Err(format!("{what}: {}", String::from_utf8_lossy(&out.stderr)).into());
        }
        let line = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        println!("{line}");
        results.push(serde_json::from_str::<serde_json::Value>(&line)?);
    }
    let rate = |w: &str| {
        results
            .iter()
            .find(|r| r["what"] == w)
            .and_then(|r| r["rows_per_second"].as_f64())
            .unwrap_or(f64::NAN)
    };
    println!("\nrows={rows}");
    for r in &results {
        let base = if r["what"]
            .as_str()
            .is_some_and(|w| w.contains("anonymise") || w.contains("update"))
        {
            rate("raw-update")
        } else {
            rate("raw-delete")
        };
        println!(
            "{:<18} batch={:<6} rows={:<8} {:>8.2}s {:>10.0} rows/s  ratio to raw {:.2}  peak RSS {} KiB",
            r["what"].as_str().unwrap_or(""),
            r["batch"]
                .as_u64()
                .map(|b| b.to_string())
                .unwrap_or_else(|| "-".into()),
            r["rows"],
            r["seconds"].as_f64().unwrap_or(0.0),
            r["rows_per_second"].as_f64().unwrap_or(0.0),
            r["rows_per_second"].as_f64().unwrap_or(0.0) / base,
            r["peak_rss_kib"],
        );
    }
    Ok(())
}
