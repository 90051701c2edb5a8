//! Hold creation racing every mutation, forced deterministically: the
//! mutation's candidate select is stopped (after its snapshot) at the first
//! row by a row-level-security gate, a hold on a later row is created through
//! the holds API and committed, then the gate opens.

mod common;

use chrono::Utc;
use cohort::holds::HoldRequest;
use cohort::{
    Capabilities, Cohort, ErasureRequest, Period, Rule, RunResult, Scope, Strategy, TenantContext,
};
use common::models::*;
use common::{TestDb, TestRules, app_pool, count, db_with_cohort};
use uuid::Uuid;

fn tenant() -> Uuid {
    uuid("11111111-1111-1111-1111-111111111111")
}

fn scope() -> Scope {
    Scope::Tenant(TenantContext::new(tenant()))
}

fn subject() -> Uuid {
    uuid("aaaaaaaa-0000-0000-0000-000000000001")
}

fn rules() -> TestRules {
    TestRules::new()
        .with(
            "tickets",
            Capabilities::only(Strategy::SoftDelete),
            Rule::new(Period::days(30), Strategy::SoftDelete),
        )
        .with(
            "case-contacts",
            Capabilities::only(Strategy::Anonymise),
            Rule::new(Period::days(30), Strategy::Anonymise),
        )
        .with(
            "user-data",
            Capabilities::only(Strategy::Purge),
            Rule::new(Period::days(30), Strategy::Purge),
        )
        .with(
            "session-notes",
            Capabilities::only(Strategy::Purge),
            Rule::new(Period::days(30), Strategy::Purge),
        )
}

/// Ten expired rows in each table; ids 1..10 (uuids ending in 1..10 for contacts).
async fn setup() -> (TestDb, Cohort) {
    let (db, _) = db_with_cohort("public").await;
    db.exec(TABLES).await;
    db.exec(
        r#"
        INSERT INTO tickets (id, tenant_id, opened_at)
            SELECT g, '11111111-1111-1111-1111-111111111111', now() - interval '100 days' + g * interval '1 second'
            FROM generate_series(1, 10) g;
        INSERT INTO case_contacts (id, tenant_id, created_at, email, full_name, phone, external_ref)
            SELECT ('00000000-0000-0000-0000-' || lpad(g::text, 12, '0'))::uuid, '11111111-1111-1111-1111-111111111111',
                   now() - interval '100 days' + g * interval '1 second', 'e', 'n', 'p', 'r'
            FROM generate_series(1, 10) g;
        INSERT INTO user_records (id, tenant_id, created_at, user_id)
            SELECT g, '11111111-1111-1111-1111-111111111111', now() - interval '100 days' + g * interval '1 second',
                   'aaaaaaaa-0000-0000-0000-000000000001'
            FROM generate_series(1, 10) g;
        "#,
    )
    .await;
    common::install_gate(
        &db,
        &["tickets", "case_contacts", "user_records"],
        &["1", "00000000-0000-0000-0000-000000000001"],
    )
    .await;
    // The engine acts as an unprivileged role: superusers bypass row-level security.
    let cohort = Cohort::builder(app_pool(&db).await)
        .rules(rules())
        .entity::<Ticket>()
        .entity::<CaseContact>()
        .entity::<UserRecord>()
        .build()
        .await
        .expect("model");
    (db, cohort)
}

/// Runs `mutation` gated at row 1, creates a hold on `held` (record id text)
/// of `entity` meanwhile, opens the gate, and returns the mutation's result.
async fn race<F>(db: &TestDb, cohort: &Cohort, entity: &str, held: &str, mutation: F) -> RunResult
where
    F: std::future::Future<Output = Result<RunResult, cohort::Error>> + Send + 'static,
{
    let mut gate = db.connect().await;
    sqlx::query("SELECT pg_advisory_lock(4242)")
        .execute(&mut gate)
        .await
        .expect("gate");
    let run = tokio::spawn(mutation);
    // Wait until the mutation's candidate select stands at row 1.
    common::wait_for_gate(&mut gate).await;
    let mut creator = db.connect().await;
    cohort
        .holds()
        .create(
            &mut creator,
            HoldRequest::new(uuid(entity), held, Some(tenant()), "race", Utc::now()),
        )
        .await
        .expect("the hold is created while the select is stopped");
    sqlx::query("SELECT pg_advisory_unlock(4242)")
        .execute(&mut gate)
        .await
        .expect("open gate");
    run.await.expect("join").expect("mutation")
}

// contract: H1, H11
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_created_mid_select_protects_its_row_from_a_soft_delete_sweep() {
    let (db, cohort) = setup().await;
    let c = cohort.clone();
    let result = race(
        &db,
        &cohort,
        "5d1c1b8e-2f7a-4b7e-9d8a-0c2a44f0e001",
        "5",
        async move { c.sweep(&scope(), Utc::now()).await },
    )
    .await;
    assert_eq!(
        count(&db, "SELECT count(*) FROM tickets WHERE is_deleted").await,
        9
    );
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM tickets WHERE id = 5 AND NOT is_deleted AND deleted_at IS NULL"
        )
        .await,
        1
    );
    let s = result
        .summaries
        .iter()
        .find(|s| s.entity_type == "Ticket")
        .expect("tickets");
    assert_eq!(
        (s.affected, s.held),
        (9, 1),
        "the counts are the committed ones"
    );
}

// contract: H1, H11
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_created_mid_select_protects_its_row_from_an_anonymise_sweep() {
    let (db, cohort) = setup().await;
    let c = cohort.clone();
    let result = race(
        &db,
        &cohort,
        CONTACT_ID,
        "00000000-0000-0000-0000-000000000005",
        async move { c.sweep(&scope(), Utc::now()).await },
    )
    .await;
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM case_contacts WHERE anonymised_at IS NOT NULL"
        )
        .await,
        9
    );
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM case_contacts WHERE id = '00000000-0000-0000-0000-000000000005' \
             AND anonymised_at IS NULL AND email = 'e'"
        )
        .await,
        1
    );
    let s = result
        .summaries
        .iter()
        .find(|s| s.entity_type == "CaseContact")
        .expect("contacts");
    assert_eq!((s.affected, s.held), (9, 1));
}

// contract: H1, H11, E1
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_created_mid_select_protects_its_row_from_an_erasure() {
    let (db, cohort) = setup().await;
    let c = cohort.clone();
    let result = race(
        &db,
        &cohort,
        "6b619c19-6e3c-44e8-a87f-975c68fd3988",
        "5",
        async move {
            c.erase(&scope(), ErasureRequest::new(subject()), Utc::now())
                .await
        },
    )
    .await;
    let left: Vec<i64> = sqlx::query_scalar("SELECT id FROM user_records")
        .fetch_all(db.pool())
        .await
        .expect("left");
    assert_eq!(left, vec![5]);
    let s = result
        .summaries
        .iter()
        .find(|s| s.entity_type == "UserRecord")
        .expect("users");
    assert_eq!((s.affected, s.held), (9, 1));
}
