//! The hold check's cost follows the batch, not the holds (contract X22):
//! whatever plan the planner picks (a generic plan, forced) and whatever
//! it knows of the holds (never analysed), a sweep's batches read a number
//! of hold rows bounded by their own rows, never every hold of the type on
//! every batch. Measured from PostgreSQL's own counters of rows read from
//! `retention_holds` (sequential and index scans), not from time.

use std::time::Duration as StdDuration;

use crate::support::models::*;
use crate::support::{TestRules, count, db_with_cohort};
use chrono::Utc;
use cohort::{
    BatchOrder, Capabilities, Cohort, Options, Period, Rule, Scope, Strategy, TenantContext,
};
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgConnection};
use uuid::Uuid;

const ROWS: i64 = 20_000;
const HOLDS: i64 = 1_000;
const BATCH: u32 = 1_000;

fn tenant() -> Uuid {
    uuid("11111111-1111-1111-1111-111111111111")
}

/// Rows read from `retention_holds` so far: by sequential scans, and by
/// its indexes' scans, as the cumulative statistics hold them.
async fn hold_rows_read(conn: &mut PgConnection) -> i64 {
    sqlx::query("SET stats_fetch_consistency = none")
        .execute(&mut *conn)
        .await
        .expect("no stats snapshot");
    sqlx::query_scalar(
        "SELECT COALESCE(t.seq_tup_read, 0) \
                + COALESCE((SELECT sum(i.idx_tup_read) FROM pg_stat_user_indexes i \
                            WHERE i.relid = t.relid), 0)::bigint \
         FROM pg_stat_user_tables t WHERE t.relname = 'retention_holds' AND t.schemaname = 'public'",
    )
    .fetch_one(&mut *conn)
    .await
    .expect("statistics")
}

/// The name the test's own reading connections carry.
const APP: &str = "cohort-x22-reader";

/// Waits (bounded, asserted) until no backend named `APP` is left: a
/// backend's statistics are flushed when it exits.
async fn wait_for_readers_to_exit(conn: &mut PgConnection) {
    for _ in 0..6000 {
        let left: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
             AND application_name = $1",
        )
        .bind(APP)
        .fetch_one(&mut *conn)
        .await
        .expect("activity");
        if left == 0 {
            return;
        }
        tokio::time::sleep(StdDuration::from_millis(10)).await;
    }
    panic!("the connections that read the holds never went away");
}

// contract: X22, X18, S6
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_stale_statistics_and_a_generic_plan_a_batch_reads_hold_rows_in_proportion_to_its_own()
{
    hold_rows_read_follow_the_batches(BatchOrder::Anchor).await;
}

// contract: X22, X18
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_physical_order_a_batch_reads_hold_rows_in_proportion_to_its_own() {
    hold_rows_read_follow_the_batches(BatchOrder::Physical).await;
}

async fn hold_rows_read_follow_the_batches(order: BatchOrder) {
    let (db, _) = db_with_cohort("public").await;
    db.exec(TABLES).await;
    let rules = TestRules::new().with(
        "session-notes",
        Capabilities::only(Strategy::Purge),
        Rule::new(Period::days(30), Strategy::Purge),
    );
    let options = Options {
        batch_size: BATCH,
        batch_order: order,
        ..Options::default()
    };
    // Build once so the type is registered (plain-SQL holds go through it).
    Cohort::builder(db.pool().clone())
        .options(options.clone())
        .rules(rules.clone())
        .entity::<SessionNote>()
        .build()
        .await
        .expect("model");

    // The data and the holds, written on a connection of their own; the
    // holds table is never analysed (autovacuum off for it), and every new
    // connection of the database plans generically from the first run.
    let mut writer = PgConnection::connect_with(&db.options().application_name(APP))
        .await
        .expect("writer");
    let dbname = format!("\"{}\"", db.name());
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "ALTER TABLE public.retention_holds SET (autovacuum_enabled = false); \
         INSERT INTO session_notes (id, tenant_id, created_at, body) \
         SELECT gen_random_uuid(), '{t}', now() - interval '400 days' + g * interval '1 second', 'x' \
         FROM generate_series(1, {ROWS}) g; \
         ANALYZE session_notes; \
         INSERT INTO retention_holds (hold_id, retained_entity_id, record_id, tenant_id, reason, created_at) \
         SELECT gen_random_uuid(), '{NOTE_ID}', n.id::text, n.tenant_id, 'bench', now() - interval '1 day' \
         FROM (SELECT id, tenant_id, row_number() OVER (ORDER BY created_at) AS r FROM session_notes) n \
         WHERE n.r % {every} = 0; \
         ALTER DATABASE {dbname} SET plan_cache_mode = force_generic_plan;",
        t = tenant(),
        every = ROWS / HOLDS,
    )))
    .execute(&mut writer)
    .await
    .expect("data");
    writer.close().await.expect("close");
    let mut observer = db.connect().await;
    let analysed: bool = sqlx::query_scalar(
        "SELECT last_analyze IS NOT NULL OR last_autoanalyze IS NOT NULL FROM pg_stat_user_tables \
         WHERE relname = 'retention_holds' AND schemaname = 'public'",
    )
    .fetch_one(&mut observer)
    .await
    .expect("analysed?");
    assert!(!analysed, "the holds must not have statistics");
    let generic: String = sqlx::query_scalar("SHOW plan_cache_mode")
        .fetch_one(&mut observer)
        .await
        .expect("plan_cache_mode");
    assert_eq!(generic, "force_generic_plan");

    // Every DELETE statement's text, to see which order the batches took.
    db.exec(
        r#"
        CREATE TABLE public.stmt_log (query text);
        CREATE FUNCTION public.log_stmt() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          INSERT INTO public.stmt_log VALUES (current_query());
          RETURN NULL;
        END $$;
        CREATE TRIGGER log_delete AFTER DELETE ON public.session_notes
          FOR EACH STATEMENT EXECUTE FUNCTION public.log_stmt();
        "#,
    )
    .await;

    // The engine on a pool of its own, closed after the sweep so its
    // backends exit and their statistics are flushed.
    wait_for_readers_to_exit(&mut observer).await;
    let before = hold_rows_read(&mut observer).await;
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .connect_with(db.options().application_name(APP))
        .await
        .expect("pool");
    let cohort = Cohort::builder(pool.clone())
        .options(options)
        .rules(rules)
        .entity::<SessionNote>()
        .build()
        .await
        .expect("model");
    let scope = Scope::Tenant(TenantContext::new(tenant()));
    let result = cohort.sweep(&scope, Utc::now()).await.expect("sweep");
    assert_eq!(result.affected(), (ROWS - HOLDS) as u64);
    let summary = &result.summaries[0];
    assert_eq!(summary.held, HOLDS as u64);
    drop(cohort);
    pool.close().await;
    wait_for_readers_to_exit(&mut observer).await;
    let read = hold_rows_read(&mut observer).await - before;
    eprintln!("hold rows read by the sweep: {read}");

    // Outside the batches the run reads every hold a bounded number of
    // times: the filter's count and stream, and the final held count.
    let outside = 3 * HOLDS;
    let batches = ROWS / i64::from(BATCH);
    // A batch asks about its held rows (50 here) and about the rows whose
    // filter bit is set by chance (about 3% of 1,000): far below 150. The
    // old anti-join read all 1,000 holds on every batch (20,000 in all).
    let per_batch = 150;
    assert!(
        read <= outside + batches * per_batch,
        "the sweep read {read} hold rows: more than {outside} outside its {batches} batches \
         plus {per_batch} a batch"
    );
    assert!(read >= HOLDS, "the counters saw the sweep: {read}");
    let queries: Vec<String> = sqlx::query_scalar("SELECT query FROM public.stmt_log")
        .fetch_all(db.pool())
        .await
        .expect("log");
    assert!(queries.len() >= batches as usize, "{}", queries.len());
    for q in &queries {
        assert_eq!(
            q.contains("t.ctid OPERATOR(pg_catalog.>)"),
            order == BatchOrder::Physical,
            "{order:?}: {q}"
        );
    }
    db.exec(&format!(
        "ALTER DATABASE \"{}\" RESET plan_cache_mode",
        db.name()
    ))
    .await;
    assert_eq!(
        count(&db, "SELECT count(*) FROM session_notes").await,
        HOLDS
    );
}
