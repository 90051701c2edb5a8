//! Holds written with plain SQL, whichever way they spell the record id
//! (contract H16): stored as the row's canonical text, or refused.

use crate::support::models::*;
use crate::support::{BuildEngine, TestDb, TestRules, count, db_with_cohort};
use chrono::{Duration, Utc};
use cohort::holds::{DeletionOutcome, Target};
use cohort::{Capabilities, Cohort, Period, Rule, Scope, Strategy, TenantContext};
use uuid::Uuid;

const TICKET_ID: &str = "5d1c1b8e-2f7a-4b7e-9d8a-0c2a44f0e001";

fn tenant() -> Uuid {
    uuid("11111111-1111-1111-1111-111111111111")
}

fn scope() -> Scope {
    Scope::Tenant(TenantContext::new(tenant()))
}

fn rules() -> TestRules {
    TestRules::new()
        .with(
            "session-notes",
            Capabilities::only(Strategy::Purge),
            Rule::new(Period::days(30), Strategy::Purge),
        )
        .with(
            "tickets",
            Capabilities::only(Strategy::Purge),
            Rule::new(Period::days(30), Strategy::Purge),
        )
}

async fn setup() -> (TestDb, Cohort) {
    let (db, _) = db_with_cohort("public").await;
    db.exec(TABLES).await;
    let cohort = Cohort::builder(db.engine_pool().clone())
        .rules(rules())
        .entity::<SessionNote>()
        .entity::<Ticket>()
        .build_engine(&db)
        .await
        .expect("model");
    (db, cohort)
}

async fn note(db: &TestDb, id: Uuid) {
    sqlx::query("INSERT INTO session_notes VALUES ($1, $2, now() - interval '40 days', 'x')")
        .bind(id)
        .bind(tenant())
        .execute(db.pool())
        .await
        .expect("note");
}

async fn ticket(db: &TestDb, id: i64) {
    sqlx::query("INSERT INTO tickets (id, tenant_id, opened_at) VALUES ($1, $2, now() - interval '40 days')")
        .bind(id)
        .bind(tenant())
        .execute(db.pool())
        .await
        .expect("ticket");
}

/// A hold inserted with plain SQL, as an operator in `psql` would.
async fn plain_hold(db: &TestDb, entity: &str, record: &str) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO retention_holds (hold_id, retained_entity_id, record_id, tenant_id, reason, created_at) \
         VALUES (gen_random_uuid(), $1, $2, $3, 'litigation', now() - interval '1 day')",
    )
    .bind(uuid(entity))
    .bind(record)
    .bind(tenant())
    .execute(db.pool())
    .await
    .map(|_| ())
}

async fn stored_record_ids(db: &TestDb) -> Vec<String> {
    sqlx::query_scalar("SELECT record_id FROM retention_holds ORDER BY record_id")
        .fetch_all(db.pool())
        .await
        .expect("holds")
}

async fn is_held(cohort: &Cohort, db: &TestDb, entity: &str, record: &str) -> bool {
    let mut conn = db.engine_pool().acquire().await.expect("connection");
    cohort
        .holds()
        .is_held(
            &mut conn,
            &Target::new(uuid(entity), record, Some(tenant())),
            Utc::now(),
        )
        .await
        .expect("is_held")
}

// contract: H16, H1, S6, S7, DL1
#[tokio::test]
async fn plain_sql_holds_spelled_otherwise_are_stored_canonically_and_protect_their_rows() {
    let (db, cohort) = setup().await;
    let upper = Uuid::new_v4();
    let braced = Uuid::new_v4();
    let free = Uuid::new_v4();
    for id in [upper, braced, free] {
        note(&db, id).await;
    }
    for id in [8, 9, 10] {
        ticket(&db, id).await;
    }
    plain_hold(&db, NOTE_ID, &upper.to_string().to_uppercase())
        .await
        .expect("upper-case uuid");
    plain_hold(&db, NOTE_ID, &format!("{{{braced}}}"))
        .await
        .expect("braced uuid");
    plain_hold(&db, TICKET_ID, "008").await.expect("'008'");
    plain_hold(&db, TICKET_ID, " 9").await.expect("' 9'");

    // Stored as each row's own text: what every mutation compares with.
    let mut expected = vec![
        upper.to_string(),
        braced.to_string(),
        "8".to_owned(),
        "9".to_owned(),
    ];
    expected.sort();
    assert_eq!(stored_record_ids(&db).await, expected);

    // is_held, the preview and the sweep agree: held, held, kept.
    assert!(is_held(&cohort, &db, NOTE_ID, &upper.to_string()).await);
    assert!(is_held(&cohort, &db, NOTE_ID, &upper.to_string().to_uppercase()).await);
    assert!(is_held(&cohort, &db, TICKET_ID, "8").await);
    assert!(is_held(&cohort, &db, TICKET_ID, "0009").await);
    assert!(!is_held(&cohort, &db, TICKET_ID, "10").await);
    let preview = cohort.preview(&scope(), Utc::now()).await.expect("preview");
    for e in &preview.entries {
        assert_eq!((e.eligible, e.held), (1, 2), "{}", e.entity_type);
    }
    let mut conn = db.engine_pool().acquire().await.expect("connection");
    let outcome = cohort
        .deletion()
        .execute(
            &mut conn,
            &[Target::new(uuid(TICKET_ID), "8", Some(tenant()))],
            |c| {
                Box::pin(async move {
                    sqlx::query("DELETE FROM tickets WHERE id = 8")
                        .execute(&mut *c)
                        .await?;
                    Ok::<_, sqlx::Error>(())
                })
            },
        )
        .await
        .expect("deletion");
    assert!(matches!(outcome, DeletionOutcome::Protected { .. }));
    drop(conn);

    let result = cohort.sweep(&scope(), Utc::now()).await.expect("sweep");
    assert_eq!(result.affected(), 2, "only the unheld note and ticket go");
    assert_eq!(count(&db, "SELECT count(*) FROM session_notes").await, 2);
    let left: Vec<i64> = sqlx::query_scalar("SELECT id FROM tickets ORDER BY id")
        .fetch_all(db.pool())
        .await
        .expect("tickets");
    assert_eq!(left, vec![8, 9]);
    let notes: Vec<Uuid> = sqlx::query_scalar("SELECT id FROM session_notes ORDER BY id")
        .fetch_all(db.pool())
        .await
        .expect("notes");
    let mut kept = vec![upper, braced];
    kept.sort();
    assert_eq!(notes, kept);
}

// contract: H16
#[tokio::test]
async fn a_plain_sql_hold_whose_record_id_the_key_type_cannot_read_is_refused_at_insert() {
    let (db, _cohort) = setup().await;
    ticket(&db, 1).await;
    let err = plain_hold(&db, TICKET_ID, "abc")
        .await
        .expect_err("'abc' is no bigint");
    let db_err = err.as_database_error().expect("a database error");
    assert_eq!(db_err.code().as_deref(), Some("22P02"));
    let message = db_err.message();
    assert!(
        message.contains("record id 'abc' is not a valid bigint"),
        "{message}"
    );
    let err = plain_hold(&db, NOTE_ID, "not-a-uuid")
        .await
        .expect_err("no uuid");
    assert_eq!(
        err.as_database_error().and_then(|e| e.code()).as_deref(),
        Some("22P02")
    );
    assert!(stored_record_ids(&db).await.is_empty());
}

// contract: H16, H7
#[tokio::test]
async fn a_plain_sql_hold_for_a_type_no_handle_registered_is_refused() {
    let (db, _cohort) = setup().await;
    let err = plain_hold(&db, "0f0f0f0f-0000-4000-8000-000000000000", "1")
        .await
        .expect_err("unknown type");
    let db_err = err.as_database_error().expect("a database error");
    assert_eq!(db_err.code().as_deref(), Some("23503"));
    assert!(
        db_err.message().contains("is not registered"),
        "{}",
        db_err.message()
    );
    assert!(stored_record_ids(&db).await.is_empty());
}

// contract: H16
#[tokio::test]
async fn an_unreadable_hold_left_from_before_the_trigger_breaks_no_lookup() {
    let (db, cohort) = setup().await;
    ticket(&db, 1).await;
    ticket(&db, 2).await;
    plain_hold(&db, TICKET_ID, "2").await.expect("hold");
    // A hold written before migration 5 (triggers off for this session,
    // as a superuser restoring a dump would).
    let mut raw = db.connect().await;
    sqlx::query("SET session_replication_role = replica")
        .execute(&mut raw)
        .await
        .expect("replica role");
    sqlx::query(
        "INSERT INTO retention_holds (hold_id, retained_entity_id, record_id, tenant_id, reason, created_at) \
         VALUES (gen_random_uuid(), $1, 'abc', $2, 'legacy', now() - interval '1 day')",
    )
    .bind(uuid(TICKET_ID))
    .bind(tenant())
    .execute(&mut raw)
    .await
    .expect("legacy hold");
    drop(raw);

    assert!(!is_held(&cohort, &db, TICKET_ID, "1").await);
    assert!(is_held(&cohort, &db, TICKET_ID, "2").await);
    let result = cohort
        .sweep(&scope(), Utc::now() + Duration::seconds(1))
        .await
        .expect("sweep");
    assert_eq!(result.affected(), 1);
    let left: Vec<i64> = sqlx::query_scalar("SELECT id FROM tickets")
        .fetch_all(db.pool())
        .await
        .expect("tickets");
    assert_eq!(left, vec![2]);
}

#[derive(cohort::Retained)]
#[cohort(
    category = "handles",
    anchor = "created_at",
    id = "7a1f4c20-3b9e-4d55-8f0a-2c6b1e9d4a77",
    table = "handles"
)]
#[allow(dead_code, reason = "mirrors a table; only its descriptor is read")]
struct HandleRow {
    id: String,
    tenant_id: Uuid,
    created_at: chrono::DateTime<Utc>,
}

// contract: H16, H8
#[tokio::test]
async fn a_plain_sql_hold_on_a_citext_key_stores_the_rows_own_spelling() {
    let (db, _) = db_with_cohort("public").await;
    db.exec(
        "CREATE EXTENSION IF NOT EXISTS citext; \
         CREATE TABLE handles (id citext PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz NOT NULL)",
    )
    .await;
    let cohort = Cohort::builder(db.engine_pool().clone())
        .rules(TestRules::new().with(
            "handles",
            Capabilities::only(Strategy::Purge),
            Rule::new(Period::days(30), Strategy::Purge),
        ))
        .entity::<HandleRow>()
        .build_engine(&db)
        .await
        .expect("model");
    sqlx::query(
        "INSERT INTO handles VALUES ('Ann.Lee', $1, now() - interval '40 days'), ('bob', $1, now() - interval '40 days')",
    )
    .bind(tenant())
    .execute(db.pool())
    .await
    .expect("rows");
    let entity = "7a1f4c20-3b9e-4d55-8f0a-2c6b1e9d4a77";
    plain_hold(&db, entity, "ANN.LEE").await.expect("hold");
    assert_eq!(stored_record_ids(&db).await, vec!["Ann.Lee".to_owned()]);
    assert!(is_held(&cohort, &db, entity, "ann.lee").await);
    let result = cohort.sweep(&scope(), Utc::now()).await.expect("sweep");
    assert_eq!(result.affected(), 1);
    let left: Vec<String> = sqlx::query_scalar("SELECT id::text FROM handles")
        .fetch_all(db.pool())
        .await
        .expect("handles");
    assert_eq!(left, vec!["Ann.Lee".to_owned()]);
}
