//! Regressions found by the reliability suite (`docs/reliability.md`).

mod common;

use chrono::{DateTime, Utc};
use cohort::{Capabilities, Cohort, Period, Rule, RunStatus, Scope, Strategy, TenantContext};
use common::{TestDb, TestRules};
use uuid::Uuid;

#[derive(cohort::Retained)]
#[cohort(
    category = "least-notes",
    anchor = "created_at",
    id = "f1000000-0000-4000-8000-000000000001",
    table = "least_notes"
)]
#[allow(dead_code, reason = "mirrors the table; Cohort reads its descriptor")]
struct LeastNote {
    id: i64,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
}

/// Found by the R1 history run as a least-privileged role
/// (`COHORT_TEST_ROLE=least`): the generated grants gave no `SELECT` on
/// `sweep_run_entity_summary.legal_minimum_count`, which the final summary's
/// `INSERT ... ON CONFLICT DO UPDATE` reads through `EXCLUDED`. Every
/// entity's final summary write then failed with 42501: every run ended
/// `Failed` after its batches had committed, and its summaries stayed
/// `Running`.
// contract: SEC1, A1, X3
#[tokio::test]
async fn a_sweep_as_the_least_privileged_role_settles_its_summaries() {
    let db = TestDb::least_privileged().await;
    db.exec(&cohort::schema::ddl(&cohort::schema::SchemaName::public()))
        .await;
    let tenant = Uuid::from_u128(0x3333_3333_3333_3333_3333_3333_3333_3333);
    db.exec(&format!(
        "CREATE TABLE public.least_notes (id bigint PRIMARY KEY, tenant_id uuid NOT NULL, \
           created_at timestamptz NOT NULL); \
         INSERT INTO public.least_notes SELECT g, '{tenant}', now() - interval '40 days' \
           FROM generate_series(1, 5) g"
    ))
    .await;
    let rules = TestRules::new().with(
        "least-notes",
        Capabilities::only(Strategy::Purge),
        Rule::new(Period::days(30), Strategy::Purge).with_legal_minimum(Period::days(10)),
    );
    let builder = Cohort::builder(db.engine_pool().clone())
        .rules(rules)
        .entity::<LeastNote>();
    let cohort = common::build_engine(&db, builder)
        .await
        .expect("the role has exactly the generated grants");
    let result = cohort
        .sweep(&Scope::Tenant(TenantContext::new(tenant)), Utc::now())
        .await
        .expect("sweep");
    assert!(result.entity_failures.is_empty(), "{result:?}");
    assert_eq!(result.status, RunStatus::Succeeded);
    assert_eq!(result.affected(), 5);
    let (run, summary): (String, String) = sqlx::query_as(
        "SELECT r.status, s.status FROM public.sweep_run r \
         JOIN public.sweep_run_entity_summary s USING (run_id)",
    )
    .fetch_one(db.pool())
    .await
    .expect("ledger");
    assert_eq!((run.as_str(), summary.as_str()), ("Succeeded", "Succeeded"));
}
