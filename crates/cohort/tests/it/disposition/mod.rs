//! Disposition review (contracts DR1-DR3): what a sweep freezes for review
//! and changes only once approved (`sweeps`), the decisions and their
//! refusals (`decisions`), approvals and sweeps racing (`races`), and the
//! proof of disposition in the evidence chain (`proof`).

mod categories;
mod decisions;
mod proof;
mod races;
mod sweeps;

use chrono::{DateTime, Duration, Utc};
use cohort::disposition::{Decision, DispositionBatch};
use cohort::{Capabilities, Cohort, Options, Period, Review, Rule, Strategy};
use uuid::Uuid;

use crate::support::fixtures::tenant_a;
use crate::support::{BuildEngine, TestDb, TestRules, count, db_with_cohort};

pub(super) const INVOICE_ID: &str = "5f0c3e1a-7b2d-4c8e-9a1f-2d3e4f5a6b70";

/// Invoices: purged (or soft-deleted, then purged) once reviewed.
#[derive(cohort::Retained)]
#[cohort(
    category = "invoices",
    anchor = "issued_at",
    id = "5f0c3e1a-7b2d-4c8e-9a1f-2d3e4f5a6b70",
    table = "invoices"
)]
#[allow(dead_code, reason = "only the descriptor is read")]
pub(super) struct Invoice {
    id: i64,
    tenant_id: Uuid,
    issued_at: DateTime<Utc>,
    is_deleted: bool,
    deleted_at: Option<DateTime<Utc>>,
    #[cohort(erasure_subject)]
    email: String,
}

pub(super) const INVOICES: &str = "
    CREATE TABLE public.invoices (
        id bigint PRIMARY KEY, tenant_id uuid NOT NULL, issued_at timestamptz,
        is_deleted boolean NOT NULL DEFAULT false, deleted_at timestamptz, email text NOT NULL);
    CREATE INDEX ON public.invoices (tenant_id, issued_at, id);
    CREATE INDEX ON public.invoices (tenant_id, deleted_at, id);";

/// Purge after a year, under review with `review`.
pub(super) fn reviewed(review: Review) -> Rule {
    Rule::new(Period::days(365), Strategy::Purge).with_review(review)
}

pub(super) fn caps() -> Capabilities {
    Capabilities::only(Strategy::Purge)
        .and(Strategy::SoftDelete)
        .staged()
}

pub(super) async fn invoices_db() -> TestDb {
    let (db, _) = db_with_cohort("public").await;
    db.exec(INVOICES).await;
    db
}

/// A handle over invoices answering `rules` (category `invoices`).
pub(super) async fn build_with(db: &TestDb, rules: TestRules) -> Cohort {
    build_opts(db, rules, Options::default()).await
}

pub(super) async fn build_opts(db: &TestDb, rules: TestRules, options: Options) -> Cohort {
    Cohort::builder(db.engine_pool().clone())
        .options(options)
        .rules(rules)
        .entity::<Invoice>()
        .build_engine(db)
        .await
        .expect("valid model")
}

pub(super) fn rules(rule: Rule) -> TestRules {
    TestRules::new().with("invoices", caps(), rule)
}

/// An invoice issued `age_days` before `now`, in tenant A.
pub(super) async fn invoice(db: &TestDb, id: i64, now: DateTime<Utc>, age_days: i64) {
    sqlx::query(
        "INSERT INTO public.invoices (id, tenant_id, issued_at, email) VALUES ($1, $2, $3, $4)",
    )
    .bind(id)
    .bind(tenant_a())
    .bind(now - Duration::days(age_days))
    .bind(format!("customer{id}@example.org"))
    .execute(db.pool())
    .await
    .expect("insert invoice");
}

/// The invoice ids left, in order.
pub(super) async fn ids(db: &TestDb) -> Vec<i64> {
    sqlx::query_scalar("SELECT id FROM public.invoices ORDER BY id")
        .fetch_all(db.pool())
        .await
        .expect("ids")
}

/// A hold on invoice `id` written with plain SQL, active since yesterday.
pub(super) async fn hold(db: &TestDb, id: i64) {
    crate::support::fixtures::hold_sql(db, INVOICE_ID, id, tenant_a()).await;
}

/// Every batch, oldest first.
pub(super) async fn batches(cohort: &Cohort, db: &TestDb) -> Vec<DispositionBatch> {
    let mut conn = db.engine_pool().acquire().await.expect("connection");
    cohort
        .dispositions()
        .list(&mut conn, None)
        .await
        .expect("list batches")
}

/// The only batch; panics unless there is exactly one.
pub(super) async fn only_batch(cohort: &Cohort, db: &TestDb) -> DispositionBatch {
    let all = batches(cohort, db).await;
    assert_eq!(all.len(), 1, "{all:#?}");
    all.into_iter().next().expect("one batch")
}

/// A batch's frozen record ids, in text order.
pub(super) async fn frozen(cohort: &Cohort, db: &TestDb, batch: Uuid) -> Vec<String> {
    let mut conn = db.engine_pool().acquire().await.expect("connection");
    cohort
        .dispositions()
        .record_ids(&mut conn, batch, None, 1_000_000)
        .await
        .expect("record ids")
}

/// A batch's decisions, in chain order.
pub(super) async fn decisions(cohort: &Cohort, db: &TestDb, batch: Uuid) -> Vec<Decision> {
    let mut conn = db.engine_pool().acquire().await.expect("connection");
    cohort
        .dispositions()
        .decisions(&mut conn, batch)
        .await
        .expect("decisions")
}

/// How many decisions the install has recorded.
pub(super) async fn decision_count(db: &TestDb) -> i64 {
    count(db, "SELECT count(*) FROM retention_disposition_decisions").await
}

/// Waits until some backend of `conn`'s database waits for a row lock
/// (another transaction's, on a row it wants to lock).
pub(super) async fn wait_for_row_lock(conn: &mut sqlx::PgConnection) {
    wait_for_row_lock_waiters(conn, 1).await;
}

/// Waits until `n` backends of `conn`'s database wait for row locks.
pub(super) async fn wait_for_row_lock_waiters(conn: &mut sqlx::PgConnection, n: i64) {
    for _ in 0..3000 {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(DISTINCT pid) FROM pg_catalog.pg_locks \
             WHERE locktype IN ('transactionid', 'tuple') AND NOT granted \
               AND (database IS NULL OR database = (SELECT oid FROM pg_catalog.pg_database \
                               WHERE datname = pg_catalog.current_database())) \
               AND pid IN (SELECT pid FROM pg_catalog.pg_stat_activity \
                           WHERE datname = pg_catalog.current_database())",
        )
        .fetch_one(&mut *conn)
        .await
        .expect("pg_locks");
        if waiting >= n {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("nobody ever waited on a row lock");
}
