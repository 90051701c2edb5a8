//! A subject matches a column only by exact equality in the column's own
//! type (contract E9): a subject the column cannot hold matches nothing, a
//! subject no column can read is refused, and a citext column matches with
//! the extension off the `search_path`.

use crate::support::fixtures::{db_with_tables, run_status, scope_a};
use crate::support::{TestDb, TestRules, count};
use chrono::{DateTime, Utc};
use cohort::{Capabilities, Cohort, ErasureRequest, Error, Period, Rule, RunStatus, Strategy};
use uuid::Uuid;

// ---------------------------------------------------------------------------
// E9: exact equality in the column's own type.

#[allow(dead_code, reason = "mirrors a table; only its descriptor is read")]
#[derive(cohort::Retained)]
#[cohort(
    category = "handles",
    anchor = "created_at",
    id = "e9e9e9e9-0001-4000-8000-000000000001",
    table = "short_handles"
)]
struct ShortHandle {
    id: i32,
    tenant_id: Uuid,
    created_at: Option<DateTime<Utc>>,
    #[cohort(erasure_subject)]
    login: Option<String>,
    #[cohort(erasure_subject)]
    account_no: Option<String>,
}

#[allow(dead_code, reason = "mirrors a table; only its descriptor is read")]
#[derive(cohort::Retained)]
#[cohort(
    category = "balances",
    anchor = "created_at",
    id = "e9e9e9e9-0002-4000-8000-000000000002",
    table = "balances"
)]
struct Balance {
    id: i32,
    tenant_id: Uuid,
    created_at: Option<DateTime<Utc>>,
    #[cohort(erasure_subject)]
    account_no: Option<String>,
}

fn purge_rules(categories: &[&str]) -> TestRules {
    categories.iter().fold(TestRules::new(), |rules, c| {
        rules.with(
            c,
            Capabilities::only(Strategy::Purge),
            Rule::new(Period::days(30), Strategy::Purge),
        )
    })
}

async fn handles(db: &TestDb) -> Vec<i32> {
    sqlx::query_scalar("SELECT id FROM short_handles ORDER BY id")
        .fetch_all(db.pool())
        .await
        .expect("handles")
}

// contract: E9, M7, E5
#[tokio::test]
async fn a_subject_a_column_cannot_hold_exactly_matches_nothing() {
    let db = db_with_tables().await;
    db.exec(
        "CREATE TABLE public.short_handles (id int PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz, \
            login varchar(5), account_no numeric(10,2)); \
         INSERT INTO public.short_handles VALUES \
            (1, '11111111-1111-1111-1111-111111111111', now(), 'alice', 1.56), \
            (2, '11111111-1111-1111-1111-111111111111', now(), 'bob', 7.00);",
    )
    .await;
    let cohort = Cohort::builder(db.pool().clone())
        .rules(purge_rules(&["handles"]))
        .entity::<ShortHandle>()
        .build()
        .await
        .expect("model");

    // "alice-b" is readable as text (login) but not as a number: login alone
    // is compared, and a varchar(5) must not truncate it to "alice".
    let result = cohort
        .erase(&scope_a(), Utc::now(), ErasureRequest::new("alice-b"))
        .await
        .expect("a subject login can read is not refused");
    assert_eq!(
        (result.status, result.affected()),
        (RunStatus::Succeeded, 0)
    );
    assert_eq!(handles(&db).await, vec![1, 2], "alice's row stays");
    assert_eq!(run_status(&db, result.run_id).await, "Succeeded");

    // "1.555" is readable by both columns; numeric(10,2) must not round it
    // to 1.56.
    let dry = cohort
        .erase(
            &scope_a(),
            Utc::now(),
            ErasureRequest::new("1.555").dry_run(),
        )
        .await
        .expect("dry run");
    assert!(dry.dry_run);
    assert_eq!(dry.affected(), 0);
    // The exact value, in any spelling numeric reads, does match.
    for spelling in ["1.56", "1.560"] {
        let dry = cohort
            .erase(
                &scope_a(),
                Utc::now(),
                ErasureRequest::new(spelling).dry_run(),
            )
            .await
            .expect("dry run");
        assert_eq!(dry.affected(), 1, "{spelling}");
    }
    let dry = cohort
        .erase(
            &scope_a(),
            Utc::now(),
            ErasureRequest::new("7.00").dry_run(),
        )
        .await
        .expect("dry run");
    assert_eq!(dry.affected(), 1, "7.00 equals bob's 7.00");
    assert_eq!(handles(&db).await, vec![1, 2], "dry runs change nothing");

    let result = cohort
        .erase(&scope_a(), Utc::now(), ErasureRequest::new("alice"))
        .await
        .expect("erase alice");
    assert_eq!(result.affected(), 1);
    assert_eq!(handles(&db).await, vec![2]);
    let result = cohort
        .erase(&scope_a(), Utc::now(), ErasureRequest::new("7"))
        .await
        .expect("erase 7");
    assert_eq!(result.affected(), 1, "7 equals 7.00 as a number");
    assert_eq!(handles(&db).await, Vec::<i32>::new());
}

// contract: E9
#[tokio::test]
async fn a_subject_no_column_can_read_is_refused_and_one_it_can_read_matches_exactly() {
    let db = db_with_tables().await;
    db.exec(
        "CREATE TABLE public.balances (id int PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz, \
            account_no numeric(10,2)); \
         INSERT INTO public.balances VALUES (1, '11111111-1111-1111-1111-111111111111', now(), 1.56);",
    )
    .await;
    let cohort = Cohort::builder(db.pool().clone())
        .rules(purge_rules(&["balances"]))
        .entity::<Balance>()
        .build()
        .await
        .expect("model");
    let refused = cohort
        .erase(&scope_a(), Utc::now(), ErasureRequest::new("alice-b"))
        .await;
    assert!(
        matches!(refused, Err(Error::InvalidSubject { .. })),
        "{refused:?}"
    );
    assert_eq!(count(&db, "SELECT count(*) FROM sweep_run").await, 0);
    let result = cohort
        .erase(&scope_a(), Utc::now(), ErasureRequest::new("1.555"))
        .await
        .expect("a number numeric can read is a subject");
    assert_eq!(
        (result.status, result.affected()),
        (RunStatus::Succeeded, 0)
    );
    assert_eq!(count(&db, "SELECT count(*) FROM balances").await, 1);
}

#[allow(dead_code, reason = "mirrors a table; only its descriptor is read")]
#[derive(cohort::Retained)]
#[cohort(
    category = "people",
    anchor = "created_at",
    id = "e9e9e9e9-0003-4000-8000-000000000003",
    table = "people"
)]
struct Person {
    id: i32,
    tenant_id: Uuid,
    created_at: Option<DateTime<Utc>>,
    #[cohort(erasure_subject)]
    email: String,
}

// contract: E9
#[tokio::test]
async fn a_citext_subject_matches_when_the_extension_lives_off_the_search_path() {
    let db = db_with_tables().await;
    // No IF NOT EXISTS and no fallback: without citext this test must fail.
    db.exec(
        "CREATE SCHEMA ext; \
         CREATE EXTENSION citext SCHEMA ext; \
         CREATE TABLE public.people (id int PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz, \
            email ext.citext NOT NULL); \
         INSERT INTO public.people VALUES \
            (1, '11111111-1111-1111-1111-111111111111', now(), 'alice@example.org'), \
            (2, '11111111-1111-1111-1111-111111111111', now(), 'bob@example.org'), \
            (3, '22222222-2222-2222-2222-222222222222', now(), 'alice@example.org');",
    )
    .await;
    let path: String = sqlx::query_scalar("SELECT current_setting('search_path')")
        .fetch_one(db.pool())
        .await
        .expect("search_path");
    assert!(!path.contains("ext"), "ext must be off the path: {path}");
    let cohort = Cohort::builder(db.pool().clone())
        .rules(purge_rules(&["people"]))
        .entity::<Person>()
        .build()
        .await
        .expect("model");
    let dry = cohort
        .erase(
            &scope_a(),
            Utc::now(),
            ErasureRequest::new("ALICE@Example.org").dry_run(),
        )
        .await
        .expect("dry run");
    assert_eq!(dry.affected(), 1);
    let result = cohort
        .erase(
            &scope_a(),
            Utc::now(),
            ErasureRequest::new("ALICE@Example.org"),
        )
        .await
        .expect("erase");
    assert_eq!(
        (result.status, result.affected()),
        (RunStatus::Succeeded, 1)
    );
    let left: Vec<i32> = sqlx::query_scalar("SELECT id FROM people ORDER BY id")
        .fetch_all(db.pool())
        .await
        .expect("people");
    assert_eq!(left, vec![2, 3], "alice erased in this tenant only");
}
