//! An anchor that falls back to a second column (issue 26, item 12): the
//! anchor is a stored generated column, `COALESCE(last_login_at,
//! created_at)`, so a customer who never logged in ages from sign-up. Every
//! statement reads one indexed column; PostgreSQL keeps it right. A column
//! Cohort writes may not be generated: build says so.

use chrono::{DateTime, Duration, Utc};
use cohort::{Capabilities, Cohort, Error, Period, Rule, Strategy};
use uuid::Uuid;

use crate::support::fixtures::{fixed_now, scope_a, tenant_a};
use crate::support::{BuildEngine, TestDb, TestRules, count, db_with_cohort};

const CUSTOMERS: &str = "
    CREATE TABLE public.customers (
        id uuid PRIMARY KEY,
        tenant_id uuid NOT NULL,
        created_at timestamptz NOT NULL,
        last_login_at timestamptz,
        retention_anchor timestamptz
            GENERATED ALWAYS AS (COALESCE(last_login_at, created_at)) STORED,
        email text,
        anonymised_at timestamptz
    );
    CREATE INDEX customers_retention ON public.customers (tenant_id, retention_anchor, id);";

#[derive(cohort::Retained)]
#[cohort(
    category = "customers",
    anchor = "retention_anchor",
    id = "6f1c0f4e-7a43-4c56-9d6c-2f4c1b8a9e01",
    table = "customers"
)]
#[allow(dead_code, reason = "only the descriptor is read")]
struct Customer {
    id: Uuid,
    tenant_id: Uuid,
    retention_anchor: DateTime<Utc>,
    #[cohort(anonymise = "null")]
    email: Option<String>,
    anonymised_at: Option<DateTime<Utc>>,
}

/// The same table, but the anonymised-at stamp is mapped to the generated
/// column: Cohort would have to write it.
#[derive(cohort::Retained)]
#[cohort(
    category = "customers",
    anchor = "created_at",
    id = "6f1c0f4e-7a43-4c56-9d6c-2f4c1b8a9e02",
    table = "customers"
)]
#[allow(dead_code, reason = "only the descriptor is read")]
struct WritesGenerated {
    id: Uuid,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
    #[cohort(anonymised_at)]
    retention_anchor: Option<DateTime<Utc>>,
    #[cohort(anonymise = "null")]
    email: Option<String>,
}

async fn customer(db: &TestDb, created: DateTime<Utc>, login: Option<DateTime<Utc>>) -> Uuid {
    let id = Uuid::new_v4();
    sqlx::query(
        "INSERT INTO public.customers (id, tenant_id, created_at, last_login_at, email) \
         VALUES ($1, $2, $3, $4, 'x@example.org')",
    )
    .bind(id)
    .bind(tenant_a())
    .bind(created)
    .bind(login)
    .execute(db.pool())
    .await
    .expect("insert customer");
    id
}

async fn exists(db: &TestDb, id: Uuid) -> bool {
    count(
        db,
        &format!("SELECT count(*) FROM public.customers WHERE id = '{id}'"),
    )
    .await
        == 1
}

fn rules(strategy: Strategy) -> TestRules {
    TestRules::new().with(
        "customers",
        Capabilities::only(Strategy::Purge).and(Strategy::Anonymise),
        Rule::new(Period::days(365), strategy),
    )
}

#[tokio::test]
async fn a_generated_anchor_ages_a_never_logged_in_customer_from_sign_up() {
    let (db, _) = db_with_cohort("public").await;
    db.exec(CUSTOMERS).await;
    let now = fixed_now();
    let days = Duration::days;
    let never_logged_in_old = customer(&db, now - days(400), None).await;
    let never_logged_in_new = customer(&db, now - days(100), None).await;
    let logged_in_lately = customer(&db, now - days(400), Some(now - days(10))).await;
    let logged_in_long_ago = customer(&db, now - days(800), Some(now - days(400))).await;

    let cohort = Cohort::builder(db.engine_pool().clone())
        .rules(rules(Strategy::Purge))
        .entity::<Customer>()
        .build_engine(&db)
        .await
        .expect("a generated anchor is a valid anchor");
    let preview = cohort.preview(&scope_a(), now).await.expect("preview");
    assert_eq!(preview.entries[0].eligible, 2, "{preview:#?}");
    assert_eq!(
        preview.entries[0].null_anchor, 0,
        "the fallback leaves no NULL anchor"
    );

    let result = cohort.sweep(&scope_a(), now).await.expect("sweep");
    assert_eq!(result.summaries[0].affected, 2, "{result:#?}");
    assert!(!exists(&db, never_logged_in_old).await, "aged from sign-up");
    assert!(exists(&db, never_logged_in_new).await, "young from sign-up");
    assert!(
        exists(&db, logged_in_lately).await,
        "a recent login keeps it"
    );
    assert!(
        !exists(&db, logged_in_long_ago).await,
        "aged from the last login"
    );
}

#[tokio::test]
async fn anonymising_through_a_generated_anchor_leaves_the_anchor_to_postgres() {
    let (db, _) = db_with_cohort("public").await;
    db.exec(CUSTOMERS).await;
    let now = fixed_now();
    let old = customer(&db, now - Duration::days(400), None).await;
    let cohort = Cohort::builder(db.engine_pool().clone())
        .rules(rules(Strategy::Anonymise))
        .entity::<Customer>()
        .build_engine(&db)
        .await
        .expect("valid model");
    let result = cohort.sweep(&scope_a(), now).await.expect("sweep");
    assert_eq!(result.summaries[0].affected, 1, "{result:#?}");
    let (email, stamped): (Option<String>, bool) = sqlx::query_as(
        "SELECT email, anonymised_at IS NOT NULL FROM public.customers WHERE id = $1",
    )
    .bind(old)
    .fetch_one(db.pool())
    .await
    .expect("row");
    assert_eq!((email, stamped), (None, true));
}

#[tokio::test]
async fn a_column_cohort_writes_may_not_be_generated() {
    let (db, _) = db_with_cohort("public").await;
    db.exec(CUSTOMERS).await;
    let err = Cohort::builder(db.engine_pool().clone())
        .rules(rules(Strategy::Anonymise))
        .entity::<WritesGenerated>()
        .build_engine(&db)
        .await
        .expect_err("the anonymised-at stamp is a generated column");
    let Error::Validation(report) = &err else {
        panic!("expected a validation report, got {err:?}");
    };
    let text = report.to_string();
    assert!(
        text.contains("retention_anchor is a generated column")
            && text.contains("the anonymised-at"),
        "{text}"
    );
}
