//! Event-based retention against its raw reference (issue 27, contract
//! SL4): a purge counting from an event ("30 days after account-closed")
//! over rows keyed by subjects of whom half have their event, against one
//! raw `DELETE ... WHERE EXISTS (the event)` with the same join and hold
//! check. Not a test:
//!
//! ```text
//! cargo run --release -p cohort-bench --bin events                  # 100,000 rows, 10,000 subjects
//! cargo run --release -p cohort-bench --bin events -- --rows 1000000 --subjects 100000 --runs 3
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
const EVENT: &str = "account-closed";

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
    #[cohort(event_key)]
    customer: String,
}

/// Purge 30 days after account-closed.
struct AfterClosing;

impl RuleProvider for AfterClosing {
    fn resolve<'a>(
        &'a self,
        _ctx: ResolutionContext<'a>,
    ) -> BoxFuture<'a, Result<Option<Rule>, ProviderError>> {
        Box::pin(async {
            Ok(Some(
                Rule::new(Period::days(30), Strategy::Purge).after_event(EVENT),
            ))
        })
    }

    fn capabilities(&self, _category: &str) -> Option<Capabilities> {
        Some(Capabilities::only(Strategy::Purge).after_event(EVENT))
    }
}

/// Every row back, in anchor order, each keyed by one of `subjects`.
async fn refill(pool: &PgPool, rows: i64, subjects: i64) -> Result<(), sqlx::Error> {
    exec(
        pool,
        &format!(
            "TRUNCATE notes; \
             INSERT INTO notes SELECT g, '{TENANT}', now() - interval '400 days' + g * interval '1 second', \
                    'customer-' || (g % {subjects}) FROM generate_series(1, {rows}) g"
        ),
    )
    .await?;
    exec(pool, "VACUUM ANALYZE notes").await?;
    exec(pool, "CHECKPOINT").await
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let (mut rows, mut subjects, mut runs, mut batch) = (100_000i64, 10_000i64, 3u32, 1_000u32);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--rows" => rows = value()?.replace(['_', ','], "").parse()?,
            "--subjects" => subjects = value()?.replace(['_', ','], "").parse()?,
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
         customer text NOT NULL); \
         CREATE INDEX ON notes (tenant_id, created_at, id)",
    )
    .await?;
    let cohort = Cohort::builder(pool.clone())
        .options(Options {
            batch_size: batch,
            ..Options::default()
        })
        .rules(AfterClosing)
        .entity::<Note>()
        .build()
        .await?;
    // Half the subjects have their event, long enough ago.
    exec(
        &pool,
        &format!(
            "INSERT INTO retention_events (event_id, event_type, subject_key, tenant_id, occurred_at, \
                                           recorded_by, recorded_at) \
             SELECT gen_random_uuid(), '{EVENT}', 'customer-' || s, '{TENANT}', now() - interval '60 days', \
                    'bench', now() FROM generate_series(0, {subjects} - 1, 2) s; \
             ANALYZE retention_events"
        ),
    )
    .await?;
    let expected: i64 = (0..rows)
        .map(|g| (g + 1) % subjects)
        .filter(|s| s % 2 == 0)
        .count() as i64;
    let expected = u64::try_from(expected).unwrap_or(0);
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
        refill(&pool, rows, subjects).await?;
        let started = Instant::now();
        let done = sqlx::query(AssertSqlSafe(format!(
            "DELETE FROM notes t WHERE t.tenant_id = '{TENANT}' \
               AND EXISTS (SELECT 1 FROM retention_events ev WHERE ev.event_type = '{EVENT}' \
                 AND ev.subject_key = t.customer AND ev.tenant_id = t.tenant_id \
                 AND ev.withdrawn_at IS NULL AND ev.occurred_at < now() - interval '30 days') \
               AND {held}"
        )))
        .execute(&pool)
        .await?;
        raw.push(started.elapsed().as_secs_f64());
        if done.rows_affected() != expected {
            return Err(format!("raw: {} of {expected} rows", done.rows_affected()).into());
        }
        refill(&pool, rows, subjects).await?;
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
        "events, {rows} rows of {subjects} subjects (half closed), batch {batch}, median of {runs} runs: \
         raw DELETE ... WHERE EXISTS (event) {r:.3} s, Cohort {c:.3} s, raw/cohort {:.2} (target >= 0.70)",
        r / c
    );
    Ok(())
}
