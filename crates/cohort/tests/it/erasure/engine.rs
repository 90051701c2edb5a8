//! Right to erasure.

use std::time::Duration as StdDuration;

use crate::support;
use crate::support::fixtures::{
    db_with_tables, hold_sql, scope_a, someone_else, subject, tenant_a, tenant_b, user_record_ids,
};
use crate::support::models::*;
use crate::support::{BuildEngine, TestDb, TestRules, count};
use chrono::{DateTime, Duration, Utc};
use cohort::{Capabilities, Cohort, ErasureRequest, Period, Rule, RunKind, RunStatus, Strategy};
use uuid::Uuid;

fn rules(user_data: Rule) -> TestRules {
    TestRules::new()
        .with(
            "user-data",
            Capabilities::only(Strategy::Purge)
                .and(Strategy::Anonymise)
                .and(Strategy::SoftDelete),
            user_data,
        )
        .with(
            "messages",
            Capabilities::only(Strategy::Purge),
            Rule::new(Period::years(10), Strategy::Purge),
        )
}

async fn cohort(db: &TestDb, rules: TestRules) -> Cohort {
    Cohort::builder(db.engine_pool().clone())
        .rules(rules)
        .entity::<UserRecord>()
        .entity::<Message>()
        .build_engine(db)
        .await
        .expect("model")
}

async fn record(
    db: &TestDb,
    id: i64,
    tenant: Uuid,
    user: Uuid,
    delegate: Option<Uuid>,
    age_days: Option<i64>,
) {
    sqlx::query(
        "INSERT INTO user_records (id, tenant_id, created_at, user_id, delegate_user_id, notes) VALUES ($1, $2, $3, $4, $5, 'private')",
    )
    .bind(id)
    .bind(tenant)
    .bind(age_days.map(|d| Utc::now() - Duration::days(d)))
    .bind(user)
    .bind(delegate)
    .execute(db.pool())
    .await
    .expect("record");
}

// contract: E1, E2, M7, H1
#[tokio::test]
async fn erasure_matches_any_subject_column_in_the_tenant_whatever_the_age_except_held_rows() {
    let db = db_with_tables().await;
    let cohort = cohort(&db, rules(Rule::new(Period::years(5), Strategy::Purge))).await;
    record(&db, 1, tenant_a(), subject(), None, Some(1)).await; // young: the period never delays erasure
    record(&db, 2, tenant_a(), someone_else(), Some(subject()), Some(1)).await; // subject as delegate
    record(&db, 3, tenant_a(), subject(), None, None).await; // NULL anchor: eligible without a legal minimum
    record(&db, 4, tenant_a(), subject(), None, Some(-30)).await; // future anchor: eligible too
    record(&db, 5, tenant_a(), someone_else(), None, Some(400)).await; // not the subject
    record(&db, 6, tenant_b(), subject(), None, Some(400)).await; // another tenant
    record(&db, 7, tenant_a(), subject(), None, Some(400)).await; // held
    hold_sql(&db, "6b619c19-6e3c-44e8-a87f-975c68fd3988", "7", tenant_a()).await;
    sqlx::query("INSERT INTO messages VALUES (1, $1, now(), $2), (2, $1, now(), 'x@example.org')")
        .bind(tenant_a())
        .bind(subject().to_string())
        .execute(db.pool())
        .await
        .expect("messages");

    let result = cohort
        .erase(&scope_a(), Utc::now(), ErasureRequest::new(subject()))
        .await
        .expect("erase");
    assert_eq!(result.kind, RunKind::Erasure);
    assert_eq!(result.status, RunStatus::Succeeded);
    assert!(!result.dry_run);
    assert_eq!(user_record_ids(&db).await, vec![5, 6, 7]);
    // The text subject column compared through its own type.
    assert_eq!(count(&db, "SELECT count(*) FROM messages").await, 1);
    let users = result
        .summaries
        .iter()
        .find(|s| s.entity_type == "UserRecord")
        .expect("users");
    assert_eq!((users.affected, users.held, users.null_anchor), (4, 1, 0));
    assert_eq!(
        users.applied_period, None,
        "no legal minimum, no age condition"
    );
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM sweep_run WHERE run_kind = 'Erasure' AND status = 'Succeeded'"
        )
        .await,
        1
    );
}

// contract: E3
#[tokio::test]
async fn a_positive_legal_minimum_adds_a_strict_anchor_predicate_and_counts_blocked_null_anchors() {
    let db = db_with_tables().await;
    let cohort = cohort(
        &db,
        rules(Rule::new(Period::days(1), Strategy::Purge).with_legal_minimum(Period::days(30))),
    )
    .await;
    let now: DateTime<Utc> = sqlx::query_scalar("SELECT date_trunc('second', now())")
        .fetch_one(db.pool())
        .await
        .expect("now");
    let boundary = now - Duration::days(30);
    sqlx::query(
        "INSERT INTO user_records (id, tenant_id, created_at, user_id) VALUES \
         (1, $1, $2, $3), (2, $1, $2 - interval '1 microsecond', $3), (3, $1, NULL, $3), (4, $1, $2 + interval '1 day', $3)",
    )
    .bind(tenant_a())
    .bind(boundary)
    .bind(subject())
    .execute(db.pool())
    .await
    .expect("records");
    let result = cohort
        .erase(&scope_a(), now, ErasureRequest::new(subject()))
        .await
        .expect("erase");
    assert_eq!(
        user_record_ids(&db).await,
        vec![1, 3, 4],
        "exact boundary, NULL and young anchors stay"
    );
    let users = result
        .summaries
        .iter()
        .find(|s| s.entity_type == "UserRecord")
        .expect("users");
    assert_eq!((users.affected, users.null_anchor), (1, 1));
    // Rows 1 (at the boundary) and 4 (young) are what the legal minimum keeps.
    assert_eq!(users.legal_minimum, 2);
    assert_eq!(users.applied_period, Some(cohort::Period::days(30)));
    assert_eq!(users.cutoff, Some(boundary));
    let stored: i64 = sqlx::query_scalar(
        "SELECT legal_minimum_count FROM sweep_run_entity_summary \
         WHERE run_id = $1 AND entity_type = 'UserRecord'",
    )
    .bind(result.run_id)
    .fetch_one(db.pool())
    .await
    .expect("summary");
    assert_eq!(stored, 2);
}

// contract: E4
#[tokio::test]
async fn soft_delete_categories_are_refused_unless_opted_in() {
    let db = db_with_tables().await;
    let cohort = cohort(
        &db,
        rules(Rule::new(Period::days(30), Strategy::SoftDelete)),
    )
    .await;
    record(&db, 1, tenant_a(), subject(), None, Some(400)).await;
    let err = cohort
        .erase(&scope_a(), Utc::now(), ErasureRequest::new(subject()))
        .await
        .expect_err("refused");
    assert!(
        matches!(&err, cohort::Error::SoftDeleteErasureRefused { entity_types } if entity_types == &vec!["UserRecord"]),
        "{err}"
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM sweep_run").await,
        0,
        "no ledger row"
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM user_records WHERE is_deleted").await,
        0,
        "no mutation"
    );

    let result = cohort
        .erase(
            &scope_a(),
            Utc::now(),
            ErasureRequest::new(subject()).allow_soft_delete(),
        )
        .await
        .expect("opted in");
    assert_eq!(result.affected(), 1);
    assert_eq!(
        count(&db, "SELECT count(*) FROM user_records WHERE is_deleted").await,
        1
    );
}

// contract: E5
#[tokio::test]
async fn a_dry_run_erasure_counts_writes_the_ledger_and_changes_nothing() {
    let db = db_with_tables().await;
    let cohort = cohort(&db, rules(Rule::new(Period::days(30), Strategy::Anonymise))).await;
    record(&db, 1, tenant_a(), subject(), None, Some(1)).await;
    record(&db, 2, tenant_a(), subject(), None, Some(1)).await;
    hold_sql(&db, "6b619c19-6e3c-44e8-a87f-975c68fd3988", "2", tenant_a()).await;
    let result = cohort
        .erase(
            &scope_a(),
            Utc::now(),
            ErasureRequest::new(subject()).dry_run(),
        )
        .await
        .expect("dry run");
    assert!(result.dry_run);
    let users = result
        .summaries
        .iter()
        .find(|s| s.entity_type == "UserRecord")
        .expect("users");
    assert_eq!(
        (users.affected, users.held),
        (1, 1),
        "held counted in dry runs too"
    );
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM user_records WHERE notes IS NULL OR anonymised_at IS NOT NULL"
        )
        .await,
        0
    );
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM sweep_run WHERE dry_run AND run_kind = 'Erasure'"
        )
        .await,
        1
    );
    assert_eq!(
        count(
            &db,
            "SELECT held_count FROM sweep_run_entity_summary WHERE entity_type = 'UserRecord'"
        )
        .await,
        1
    );
}

// contract: E6
#[tokio::test]
async fn erasure_runs_on_the_sweep_execution_model_one_entity_failing() {
    let db = db_with_tables().await;
    let rules = rules(Rule::new(Period::days(30), Strategy::Anonymise));
    let cohort = cohort(&db, rules.clone()).await;
    record(&db, 1, tenant_a(), subject(), None, Some(1)).await;
    sqlx::query("INSERT INTO messages VALUES (1, $1, now(), $2)")
        .bind(tenant_a())
        .bind(subject().to_string())
        .execute(db.pool())
        .await
        .expect("message");
    rules.set("messages", support::Answer::Error);
    let result = cohort
        .erase(&scope_a(), Utc::now(), ErasureRequest::new(subject()))
        .await
        .expect("erase");
    assert_eq!(result.status, RunStatus::PartiallyFailed);
    assert_eq!(result.entity_failures.len(), 1);
    assert_eq!(result.entity_failures[0].entity_type, "Message");
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM user_records WHERE notes IS NULL AND anonymised_at IS NOT NULL"
        )
        .await,
        1
    );
    assert_eq!(count(&db, "SELECT count(*) FROM messages").await, 1);
    let (status, settled): (String, bool) =
        sqlx::query_as("SELECT status, settled_at IS NOT NULL FROM sweep_run")
            .fetch_one(db.pool())
            .await
            .expect("run");
    assert_eq!((status.as_str(), settled), ("PartiallyFailed", true));
}

async fn wait_for_lock_waiter(conn: &mut sqlx::PgConnection) {
    for _ in 0..3000 {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()",
        )
        .fetch_one(&mut *conn)
        .await
        .expect("activity");
        if waiting > 0 {
            return;
        }
        tokio::time::sleep(StdDuration::from_millis(10)).await;
    }
    panic!("the erasure never waited");
}

/// Two records of the subject; another transaction holds row 1 locked while
/// an erasure starts and waits for it. Returns the lock holder's open
/// transaction and the erasure's task.
async fn erasure_waiting_on_row_one() -> (
    TestDb,
    sqlx::Transaction<'static, sqlx::Postgres>,
    tokio::task::JoinHandle<Result<cohort::RunResult, cohort::Error>>,
) {
    let db = db_with_tables().await;
    let cohort = cohort(&db, rules(Rule::new(Period::days(30), Strategy::Purge))).await;
    record(&db, 1, tenant_a(), subject(), None, Some(1)).await;
    record(&db, 2, tenant_a(), subject(), None, Some(1)).await;
    let mut tx = db.pool().begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM user_records WHERE id = 1 FOR UPDATE")
        .execute(&mut *tx)
        .await
        .expect("lock");
    let erase = tokio::spawn(async move {
        cohort
            .erase(&scope_a(), Utc::now(), ErasureRequest::new(subject()))
            .await
    });
    let mut watcher = db.connect().await;
    wait_for_lock_waiter(&mut watcher).await;
    (db, tx, erase)
}

// contract: E7
#[tokio::test]
async fn erasure_waits_for_a_locked_row_instead_of_missing_it() {
    let (db, tx, erase) = erasure_waiting_on_row_one().await;
    tx.commit().await.expect("release");
    let result = erase.await.expect("join").expect("erase");
    assert_eq!(result.affected(), 2);
    assert!(
        user_record_ids(&db).await.is_empty(),
        "the locked row was waited for, not missed"
    );
}

// contract: E8
#[tokio::test]
async fn a_row_whose_subject_changed_while_the_erasure_waited_is_left_alone() {
    let (db, mut tx, erase) = erasure_waiting_on_row_one().await;
    sqlx::query("UPDATE user_records SET user_id = $1 WHERE id = 1")
        .bind(someone_else())
        .execute(&mut *tx)
        .await
        .expect("reassign");
    tx.commit().await.expect("commit");
    let result = erase.await.expect("join").expect("erase");
    assert_eq!(result.affected(), 1);
    assert_eq!(
        user_record_ids(&db).await,
        vec![1],
        "the reassigned row stays"
    );
}

#[tokio::test]
async fn bad_subjects_are_typed_errors_and_write_nothing() {
    let db = db_with_tables().await;
    let cohort = cohort(&db, rules(Rule::new(Period::days(30), Strategy::Purge))).await;
    record(&db, 1, tenant_a(), subject(), None, Some(1)).await;
    for bad in [String::new(), "x".repeat(2000), "a\0b".to_string()] {
        let err = cohort
            .erase(&scope_a(), Utc::now(), ErasureRequest::new(bad))
            .await
            .expect_err("refused");
        assert!(matches!(err, cohort::Error::InvalidSubject { .. }), "{err}");
    }
    // A subject that only the text column accepts erases there, and is no match for the uuid columns.
    sqlx::query("INSERT INTO messages VALUES (1, $1, now(), 'ann@example.org')")
        .bind(tenant_a())
        .execute(db.pool())
        .await
        .expect("message");
    let result = cohort
        .erase(
            &scope_a(),
            Utc::now(),
            ErasureRequest::new("ann@example.org"),
        )
        .await
        .expect("erase by email");
    assert_eq!(result.affected(), 1);
    assert_eq!(user_record_ids(&db).await, vec![1]);
    assert_eq!(count(&db, "SELECT count(*) FROM sweep_run").await, 1);
    // A quote-laden subject is just a value.
    let result = cohort
        .erase(
            &scope_a(),
            Utc::now(),
            ErasureRequest::new("'; DROP TABLE user_records; --"),
        )
        .await
        .expect("erase");
    assert_eq!(result.affected(), 0);
    assert_eq!(user_record_ids(&db).await, vec![1]);
}
