//! A sweep through PgBouncer in transaction mode against the same sweep on
//! a direct connection, and the worker's per-pass cost both ways (issue 24,
//! `docs/performance.md`, "Through a connection pooler"). Not a test:
//!
//! ```text
//! cargo run --release -p cohort-bench --bin pooler                  # 100,000 rows, batch 1,000, 3 runs
//! cargo run --release -p cohort-bench --bin pooler -- --rows 1000000 --runs 5
//! ```
//!
//! Each run refills the table with the same expired rows and measures, in
//! turn: the raw `DELETE` (the reference), Cohort's purge on a direct
//! connection (`ConnectionMode::Direct`), the purge on the direct connection
//! with `ConnectionMode::TransactionPooled` (unnamed statements: the cost of
//! the mode alone), and the purge through PgBouncer (two server connections,
//! `pool_mode = transaction`, started by `cohort_testdb::Bouncer`). Then the
//! worker's occurrences on the emptied table, direct and through the
//! pooler. PgBouncer must be installed (Debian: `apt-get install pgbouncer`).

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use cohort::{Cohort, ConnectionMode, Options, Scope, Strategy, TenantContext};
use cohort_testdb::{Bouncer, TestDb};
use sqlx::PgPool;
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
    id: Uuid,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
    body: String,
}

/// Notes are purged after 30 days.
struct Args {
    rows: u64,
    batch: u32,
    runs: u32,
    passes: u32,
}

fn parse_args() -> Result<Args, BoxError> {
    let mut args = Args {
        rows: 100_000,
        batch: 1_000,
        runs: 3,
        passes: 30,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--rows" => args.rows = value()?.replace(['_', ','], "").parse()?,
            "--batch" => args.batch = value()?.parse()?,
            "--runs" => args.runs = value()?.parse()?,
            "--passes" => args.passes = value()?.parse()?,
            other => return Err(format!("unknown argument {other} (see the file's docs)").into()),
        }
    }
    Ok(args)
}

/// Empties and refills `notes` with `rows` expired rows of the tenant.
async fn refill(pool: &PgPool, rows: u64) -> Result<(), sqlx::Error> {
    exec(
        pool,
        &format!(
            "TRUNCATE notes; \
             INSERT INTO notes (id, tenant_id, created_at, body) \
             SELECT gen_random_uuid(), '{TENANT}', now() - interval '400 days' + g * interval '1 second', 'x' \
             FROM generate_series(1, {rows}) g"
        ),
    )
    .await?;
    exec(pool, "VACUUM ANALYZE notes").await
}

fn options(batch: u32, mode: ConnectionMode) -> Options {
    Options {
        batch_size: batch,
        connection_mode: mode,
        ..Options::default()
    }
}

async fn handle(pool: PgPool, batch: u32, mode: ConnectionMode) -> Result<Cohort, BoxError> {
    Ok(Cohort::builder(pool)
        .options(options(batch, mode))
        .rules(ThirtyDays(Strategy::Purge))
        .entity::<Note>()
        .build()
        .await?)
}

fn tenant() -> Result<Uuid, BoxError> {
    Ok(Uuid::parse_str(TENANT)?)
}

/// Seconds of one Cohort purge of the whole table; checks it purged `rows`.
async fn sweep(cohort: &Cohort, rows: u64) -> Result<f64, BoxError> {
    let scope = Scope::Tenant(TenantContext::new(tenant()?));
    let started = Instant::now();
    let result = cohort.sweep(&scope, Utc::now()).await?;
    let seconds = started.elapsed().as_secs_f64();
    if result.affected() != rows {
        return Err(format!("the sweep purged {} of {rows} rows", result.affected()).into());
    }
    Ok(seconds)
}

/// Mean milliseconds of one worker occurrence on the empty table.
async fn passes(cohort: &Cohort, n: u32, days_ahead: i64) -> Result<f64, BoxError> {
    let worker = cohort.worker().tenants(vec![TenantContext::new(tenant()?)]);
    let shutdown = cohort::CancellationToken::new();
    // Occurrences of their own (a later one than any scheduled run so far).
    let base = Utc::now() + chrono::Duration::days(days_ahead);
    let mut total = Duration::ZERO;
    for i in 0..n {
        let occurrence = base + chrono::Duration::minutes(i64::from(i) + 1);
        let started = Instant::now();
        let report = worker.run_occurrence(occurrence, &shutdown).await?;
        total += started.elapsed();
        if report.already_swept || report.failed_passes() > 0 {
            return Err(format!("occurrence {i}: {report:?}").into());
        }
    }
    Ok(total.as_secs_f64() * 1000.0 / f64::from(n.max(1)))
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = parse_args()?;
    let db = TestDb::try_new().await?;
    let pool = db.pool().clone();
    exec(
        &pool,
        &cohort::schema::ddl(&cohort::schema::SchemaName::public()),
    )
    .await?;
    exec(
        &pool,
        "CREATE TABLE notes (id uuid PRIMARY KEY, tenant_id uuid NOT NULL, \
         created_at timestamptz NOT NULL, body text NOT NULL); \
         CREATE INDEX ON notes (tenant_id, created_at, id)",
    )
    .await?;
    let bouncer = Bouncer::start(&db, 2).await?;
    let direct = handle(pool.clone(), args.batch, ConnectionMode::Direct).await?;
    let unnamed = handle(pool.clone(), args.batch, ConnectionMode::TransactionPooled).await?;
    let pooled = handle(
        bouncer.pool(4),
        args.batch,
        ConnectionMode::TransactionPooled,
    )
    .await?;
    let (mut raw, mut d, mut u, mut p) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for run in 0..args.runs {
        refill(&pool, args.rows).await?;
        let started = Instant::now();
        exec(&pool, &format!("DELETE FROM notes WHERE tenant_id = '{TENANT}' AND created_at < now() - interval '30 days'")).await?;
        raw.push(started.elapsed().as_secs_f64());
        refill(&pool, args.rows).await?;
        d.push(sweep(&direct, args.rows).await?);
        refill(&pool, args.rows).await?;
        u.push(sweep(&unnamed, args.rows).await?);
        refill(&pool, args.rows).await?;
        p.push(sweep(&pooled, args.rows).await?);
        eprintln!(
            "run {run}: raw {:.3} s, direct {:.3} s, unnamed {:.3} s, through PgBouncer {:.3} s",
            raw[raw.len() - 1],
            d[d.len() - 1],
            u[u.len() - 1],
            p[p.len() - 1]
        );
    }
    let (raw, d, u, p) = (median(raw), median(d), median(u), median(p));
    let direct_pass = passes(&direct, args.passes, 1).await?;
    let pooled_pass = passes(&pooled, args.passes, 2).await?;
    println!(
        "purge of {} rows, batch {}, median of {} runs",
        args.rows, args.batch, args.runs
    );
    println!("  raw DELETE (one statement)          {raw:8.3} s");
    println!(
        "  Cohort, direct                      {d:8.3} s   raw/cohort {:.2}",
        raw / d
    );
    println!(
        "  Cohort, direct, TransactionPooled   {u:8.3} s   raw/cohort {:.2}   direct/this {:.2}",
        raw / u,
        d / u
    );
    println!(
        "  Cohort, through PgBouncer           {p:8.3} s   raw/cohort {:.2}   direct/this {:.2}",
        raw / p,
        d / p
    );
    println!(
        "worker occurrence on an empty table, mean of {}: direct {direct_pass:.1} ms, through PgBouncer {pooled_pass:.1} ms (ratio {:.2})",
        args.passes,
        direct_pass / pooled_pass
    );
    Ok(())
}
