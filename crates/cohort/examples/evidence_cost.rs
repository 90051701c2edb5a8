//! The evidence chain's cost on a sweep (contract EV1): the same purge of the
//! same rows with the chain's triggers on and off.
//!
//! ```sh
//! cargo run --release -p cohort --example evidence_cost -- 200000
//! ```
//!
//! One table of N expired rows (and N/10 of another tenant), an index on
//! (tenant_id, created_at, id), a fresh copy for every measurement
//! (`VACUUM ANALYZE`, `CHECKPOINT` first). Each case runs twice, alternating
//! on and off; the best of the two is kept. "off" builds the handle and
//! checks readiness with the triggers on (readiness requires them, and a
//! handle caches its first success), then disables the run and row-detail
//! chain triggers for the measured sweep. Prints one line per measurement
//! and the ratios (rows per second with the chain / without).

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

const TENANT: &str = "11111111-1111-1111-1111-111111111111";

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

struct Rules {
    per_row: bool,
}

impl RuleProvider for Rules {
    fn capabilities(&self, _category: &str) -> Option<Capabilities> {
        Some(Capabilities::only(Strategy::Purge))
    }

    fn resolve<'a>(
        &'a self,
        _ctx: ResolutionContext<'a>,
    ) -> BoxFuture<'a, Result<Option<Rule>, ProviderError>> {
        let rule = Rule::new(Period::days(30), Strategy::Purge);
        let rule = if self.per_row {
            rule.with_per_row_audit()
        } else {
            rule
        };
        Box::pin(async move { Ok(Some(rule)) })
    }
}

async fn exec(pool: &PgPool, sql: &str) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(AssertSqlSafe(sql.to_owned()))
        .execute(pool)
        .await
        .map(|_| ())
}

const TRIGGERS: &str = "ALTER TABLE sweep_run {} TRIGGER sweep_run_evidence_chain; \
                        ALTER TABLE sweep_run_row_detail {} TRIGGER sweep_run_row_detail_evidence_chain;";

async fn measure(
    pool: &PgPool,
    chain: bool,
    per_row: bool,
) -> Result<(u64, f64), Box<dyn std::error::Error>> {
    exec(
        pool,
        "DROP TABLE IF EXISTS notes; CREATE TABLE notes (LIKE template INCLUDING ALL); \
         INSERT INTO notes SELECT * FROM template; ALTER TABLE notes ADD PRIMARY KEY (id); \
         CREATE INDEX ON notes (tenant_id, created_at, id); \
         TRUNCATE sweep_row_handler_status, sweep_run_row_detail, sweep_run_entity_summary, sweep_run;",
    )
    .await?;
    exec(pool, "VACUUM ANALYZE notes").await?;
    exec(pool, "CHECKPOINT").await?;
    let cohort = Cohort::builder(pool.clone())
        .options(Options {
            batch_size: 1000,
            ..Options::default()
        })
        .rules(Rules { per_row })
        .entity::<Note>()
        .build()
        .await?;
    cohort.settle_abandoned_runs().await?;
    if !chain {
        exec(pool, &TRIGGERS.replace("{}", "DISABLE")).await?;
    }
    let started = Instant::now();
    let result = cohort
        .sweep(
            &Scope::Tenant(TenantContext::new(Uuid::parse_str(TENANT)?)),
            Utc::now(),
        )
        .await?;
    let secs = started.elapsed().as_secs_f64();
    if !chain {
        exec(pool, &TRIGGERS.replace("{}", "ENABLE")).await?;
    }
    Ok((result.affected(), secs))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rows: i64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200_000);
    let db = TestDb::new().await;
    let pool = db.pool().clone();
    exec(
        &pool,
        &cohort::schema::ddl(&cohort::schema::SchemaName::public()),
    )
    .await?;
    exec(
        &pool,
        &format!(
            "CREATE TABLE template (id uuid NOT NULL, tenant_id uuid NOT NULL, created_at timestamptz NOT NULL); \
             INSERT INTO template SELECT gen_random_uuid(), '{TENANT}', \
               now() - interval '400 days' + (i::float / {rows}) * interval '300 days' FROM generate_series(1, {rows}) i; \
             INSERT INTO template SELECT gen_random_uuid(), '22222222-2222-2222-2222-222222222222', now() - interval '400 days' \
               FROM generate_series(1, {rows} / 10) i;"
        ),
    )
    .await?;
    for per_row in [true, false] {
        let audit = if per_row {
            "per-row audit"
        } else {
            "counts only"
        };
        let mut best = [f64::MAX, f64::MAX];
        for _ in 0..2 {
            for (i, chain) in [true, false].into_iter().enumerate() {
                let (affected, secs) = measure(&pool, chain, per_row).await?;
                println!(
                    "{audit:14} chain={:3} rows={affected} seconds={secs:.2} rows/s={:.0}",
                    if chain { "on" } else { "off" },
                    affected as f64 / secs
                );
                best[i] = best[i].min(secs);
            }
        }
        println!(
            "{audit}: best on {:.2} s, best off {:.2} s, ratio (rows/s on / off) {:.2}",
            best[0],
            best[1],
            best[1] / best[0]
        );
    }
    Ok(())
}
