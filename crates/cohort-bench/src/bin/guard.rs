//! What a guard (contract H17, `#[cohort(guard)]`) costs the host's own
//! statements: a 10,000-row `DELETE` and a 10,000-row `UPDATE` of unheld
//! rows, on a table of 100,000 rows with 1,000 active holds, with and
//! without the guard's triggers (`docs/performance.md`, "Guarded types").
//! Not a test:
//!
//! ```text
//! cargo run --release -p cohort-bench --bin guard                 # 5 runs of each
//! cargo run --release -p cohort-bench --bin guard -- --runs 11 --holds 100000
//! ```

use std::time::Instant;

use chrono::{DateTime, Utc};
use cohort::holds::HoldRequest;
use cohort::{Cohort, Strategy};
use cohort_testdb::TestDb;
use sqlx::PgPool;
use uuid::Uuid;

use cohort_bench::{BoxError, ThirtyDays, exec, median};

const TENANT: &str = "11111111-1111-1111-1111-111111111111";
const ROWS: i64 = 100_000;
const CHANGED: i64 = 10_000;

#[allow(
    dead_code,
    reason = "mirrors the table; Cohort reads its descriptor, never its values"
)]
#[derive(cohort::Retained)]
#[cohort(
    category = "notes",
    anchor = "created_at",
    id = "a3f467fe-c5d0-4f17-9897-83c373cc1dc8",
    table = "notes",
    guard
)]
struct Note {
    id: i64,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
    body: String,
}

/// Puts rows `first..=last` back as they were (the measured statements
/// delete or change only those), then vacuums.
async fn refill(pool: &PgPool, first: i64, last: i64) -> Result<(), sqlx::Error> {
    exec(
        pool,
        &format!(
            "INSERT INTO notes SELECT g, '{TENANT}', now() - interval '400 days', 'x' \
             FROM generate_series({first}, {last}) g \
             ON CONFLICT (id) DO UPDATE SET body = EXCLUDED.body"
        ),
    )
    .await?;
    exec(pool, "VACUUM ANALYZE notes").await
}

/// Seconds of `sql`, one statement.
async fn timed(pool: &PgPool, sql: &str) -> Result<f64, BoxError> {
    let started = Instant::now();
    exec(pool, sql).await?;
    Ok(started.elapsed().as_secs_f64())
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let mut runs = 5u32;
    let mut holds = 1_000i64;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--runs" => runs = value()?.parse()?,
            "--holds" => holds = value()?.parse()?,
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
         created_at timestamptz NOT NULL, body text NOT NULL)",
    )
    .await?;
    refill(&pool, 1, ROWS).await?;
    let builder = Cohort::builder(pool.clone())
        .rules(ThirtyDays(Strategy::Purge))
        .entity::<Note>();
    let guards = builder.guards()?;
    exec(&pool, &guards.sql()).await?;
    let cohort = Cohort::builder(pool.clone())
        .rules(ThirtyDays(Strategy::Purge))
        .entity::<Note>()
        .build()
        .await?;
    // The holds, on rows the measured statements never touch.
    let mut conn = pool.acquire().await?;
    let tenant = Uuid::parse_str(TENANT)?;
    let entity = Uuid::parse_str("a3f467fe-c5d0-4f17-9897-83c373cc1dc8")?;
    for id in 1..=holds.min(1_000) {
        cohort
            .holds()
            .create(
                &mut conn,
                HoldRequest::new(entity, id.to_string(), Some(tenant), "bench", Utc::now()),
            )
            .await?;
    }
    drop(conn);
    if holds > 1_000 {
        // The rest with plain SQL: the registry canonicalises them.
        exec(
            &pool,
            &format!(
                "INSERT INTO retention_holds (hold_id, retained_entity_id, record_id, tenant_id, reason, created_at) \
                 SELECT gen_random_uuid(), '{entity}', g::text, '{TENANT}', 'bench', now() - interval '1 day' \
                 FROM generate_series(1001, {holds}) g"
            ),
        )
        .await?;
    }
    exec(&pool, "ANALYZE retention_holds").await?;
    let first = holds + 1;
    let last = holds + CHANGED;
    let delete = format!("DELETE FROM notes WHERE id BETWEEN {first} AND {last}");
    let update = format!("UPDATE notes SET body = 'y' WHERE id BETWEEN {first} AND {last}");
    let toggle = |on: bool| {
        let verb = if on { "ENABLE" } else { "DISABLE" };
        format!(
            "ALTER TABLE notes {verb} TRIGGER cohort_guard_delete; \
             ALTER TABLE notes {verb} TRIGGER cohort_guard_update"
        )
    };
    let (mut del_on, mut del_off, mut upd_on, mut upd_off) = (vec![], vec![], vec![], vec![]);
    for _ in 0..runs {
        for on in [false, true] {
            exec(&pool, &toggle(on)).await?;
            refill(&pool, first, last).await?;
            let d = timed(&pool, &delete).await?;
            refill(&pool, first, last).await?;
            let u = timed(&pool, &update).await?;
            if on {
                del_on.push(d);
                upd_on.push(u);
            } else {
                del_off.push(d);
                upd_off.push(u);
            }
        }
    }
    // The guard must have been on, and have protected: a held row's delete fails.
    exec(&pool, &toggle(true)).await?;
    let refused = exec(&pool, "DELETE FROM notes WHERE id = 1").await.is_err();
    let (d0, d1, u0, u1) = (
        median(del_off),
        median(del_on),
        median(upd_off),
        median(upd_on),
    );
    println!(
        "{CHANGED}-row statements on {ROWS} rows with {holds} active holds, median of {runs} runs"
    );
    println!(
        "  DELETE  without guard {:7.1} ms   with guard {:7.1} ms   without/with {:.2}",
        d0 * 1e3,
        d1 * 1e3,
        d0 / d1
    );
    println!(
        "  UPDATE  without guard {:7.1} ms   with guard {:7.1} ms   without/with {:.2}",
        u0 * 1e3,
        u1 * 1e3,
        u0 / u1
    );
    println!("  a held row's DELETE refused by the guard: {refused}");
    Ok(())
}
