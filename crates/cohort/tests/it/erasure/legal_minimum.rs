//! The legal minimum and the anchor in an erasure (contract E2, E3): a legal
//! minimum beyond PostgreSQL's range (X20) blocks every anchored row, a zero
//! one adds no anchor condition, infinite anchors (X12) with and without one.

use std::time::Duration as StdDuration;

use crate::support::fixtures::{
    db_with_tables, entity_summary, fixed_now, run_status, scope_a, someone_else, subject,
    tenant_a, tenant_b, user_data_rules, user_record_at, user_record_days_old, user_record_ids,
};
use crate::support::models::*;
use crate::support::{Answer, TestDb, TestRules, count};
use cohort::{Cohort, ErasureRequest, Options, Period, Rule, RunStatus, Strategy};
use uuid::Uuid;

async fn users_and_messages(db: &TestDb, rules: TestRules, batch_size: u32) -> Cohort {
    Cohort::builder(db.pool().clone())
        .options(Options {
            batch_size,
            ..Options::default()
        })
        .rules(rules)
        .entity::<UserRecord>()
        .entity::<Message>()
        .build()
        .await
        .expect("model")
}

/// The ledger's applied period and cutoff of `entity_type` in `run_id`.
async fn ledger_period_and_cutoff(
    db: &TestDb,
    run_id: Uuid,
    entity_type: &str,
) -> (Option<String>, Option<String>) {
    sqlx::query_as(
        "SELECT applied_period, cutoff::text FROM sweep_run_entity_summary \
         WHERE run_id = $1 AND entity_type = $2",
    )
    .bind(run_id)
    .bind(entity_type)
    .fetch_one(db.pool())
    .await
    .expect("summary")
}

// contract: X20, E3
#[tokio::test]
async fn a_legal_minimum_beyond_postgres_range_blocks_every_anchored_row_and_fails_nothing() {
    let db = db_with_tables().await;
    let rules = user_data_rules(Rule::new(Period::days(30), Strategy::Purge));
    let cohort = users_and_messages(&db, rules.clone(), 1_000).await;
    for minimum in [
        Period::years(10_000),
        Period::days(u32::MAX),
        Period::fixed(StdDuration::MAX),
    ] {
        rules.set(
            "user-data",
            Answer::Rule(Rule::new(Period::days(30), Strategy::Purge).with_legal_minimum(minimum)),
        );
        db.exec("DELETE FROM user_records; DELETE FROM messages;")
            .await;
        user_record_days_old(&db, 1, tenant_a(), subject(), Some(400)).await;
        user_record_at(
            &db,
            2,
            tenant_a(),
            subject(),
            Some("4713-12-01 00:00:00+00 BC"),
        )
        .await;
        user_record_days_old(&db, 3, tenant_a(), subject(), None).await;
        sqlx::query("INSERT INTO messages VALUES ($1, $2, now(), $3)")
            .bind(1_i64)
            .bind(tenant_a())
            .bind(subject().to_string())
            .execute(db.pool())
            .await
            .expect("message");

        let result = cohort
            .erase(&scope_a(), fixed_now(), ErasureRequest::new(subject()))
            .await
            .unwrap_or_else(|e| panic!("{minimum}: erase failed: {e}"));
        assert_eq!(
            result.status,
            RunStatus::Succeeded,
            "{minimum}: {result:#?}"
        );
        assert!(result.entity_failures.is_empty(), "{minimum}");
        let users = entity_summary(&result, "UserRecord");
        assert_eq!(
            (
                users.affected,
                users.null_anchor,
                users.cutoff,
                users.applied_period,
                users.error.clone()
            ),
            (0, 1, None, Some(minimum), None),
            "{minimum}"
        );
        assert_eq!(
            user_record_ids(&db).await,
            vec![1, 2, 3],
            "{minimum}: nothing is old enough"
        );
        assert_eq!(
            entity_summary(&result, "Message").affected,
            1,
            "{minimum}: the other entity of the run is erased"
        );
        assert_eq!(count(&db, "SELECT count(*) FROM messages").await, 0);
        assert_eq!(run_status(&db, result.run_id).await, "Succeeded");
        let finite = count(
            &db,
            &format!(
                "SELECT count(*) FROM sweep_run_entity_summary WHERE run_id = '{}' \
                 AND entity_type = 'UserRecord' AND isfinite(cutoff)",
                result.run_id
            ),
        )
        .await;
        assert_eq!(finite, 0, "{minimum}");
    }
}

// contract: E2
#[tokio::test]
async fn a_zero_legal_minimum_adds_no_anchor_condition_to_an_erasure() {
    let db = db_with_tables().await;
    let cohort = users_and_messages(
        &db,
        user_data_rules(
            Rule::new(Period::years(5), Strategy::Purge).with_legal_minimum(Period::ZERO),
        ),
        1_000,
    )
    .await;
    user_record_days_old(&db, 1, tenant_a(), subject(), Some(400)).await;
    user_record_days_old(&db, 2, tenant_a(), subject(), None).await;
    user_record_days_old(&db, 3, tenant_a(), subject(), Some(-30)).await;
    user_record_days_old(&db, 4, tenant_a(), subject(), Some(1)).await;
    user_record_days_old(&db, 5, tenant_a(), someone_else(), None).await;
    let result = cohort
        .erase(&scope_a(), fixed_now(), ErasureRequest::new(subject()))
        .await
        .expect("erase");
    assert_eq!(result.status, RunStatus::Succeeded);
    let users = entity_summary(&result, "UserRecord");
    assert_eq!(
        (
            users.affected,
            users.null_anchor,
            users.cutoff,
            users.applied_period
        ),
        (4, 0, None, None)
    );
    assert_eq!(
        user_record_ids(&db).await,
        vec![5],
        "NULL, future and young anchors go"
    );
    assert_eq!(
        ledger_period_and_cutoff(&db, result.run_id, "UserRecord").await,
        (None, None)
    );
}

// ---------------------------------------------------------------------------
// X12, X20: infinite anchors in erasure.

// contract: X12, X20, E2, E3
#[tokio::test]
async fn erasure_handles_infinite_anchors_with_and_without_a_legal_minimum() {
    for batch_size in [1, 2] {
        for legal_minimum in [None, Some(Period::days(30))] {
            let label = format!("batch {batch_size}, legal minimum {legal_minimum:?}");
            let db = db_with_tables().await;
            let mut rule = Rule::new(Period::days(30), Strategy::Purge);
            if let Some(m) = legal_minimum {
                rule = rule.with_legal_minimum(m);
            }
            let cohort = users_and_messages(&db, user_data_rules(rule), batch_size).await;
            // In record-id order, so that with batches of two both infinities
            // end a batch (1-2, 3-4) without a legal minimum, and -infinity
            // ends the only batch (1-2) with one.
            user_record_days_old(&db, 1, tenant_a(), subject(), Some(400)).await;
            user_record_at(&db, 2, tenant_a(), subject(), Some("-infinity")).await;
            user_record_days_old(&db, 3, tenant_a(), subject(), None).await;
            user_record_at(&db, 4, tenant_a(), subject(), Some("infinity")).await;
            user_record_days_old(&db, 5, tenant_a(), subject(), Some(1)).await;
            user_record_at(&db, 6, tenant_a(), someone_else(), Some("-infinity")).await;
            user_record_at(&db, 7, tenant_b(), subject(), Some("infinity")).await;

            let erasing = cohort.clone();
            let result = tokio::spawn(async move {
                erasing
                    .erase(&scope_a(), fixed_now(), ErasureRequest::new(subject()))
                    .await
            })
            .await
            .unwrap_or_else(|e| panic!("{label}: the erasure panicked: {e}"))
            .unwrap_or_else(|e| panic!("{label}: {e}"));
            assert_eq!(result.status, RunStatus::Succeeded, "{label}: {result:#?}");
            assert_eq!(run_status(&db, result.run_id).await, "Succeeded");
            let users = entity_summary(&result, "UserRecord");
            match legal_minimum {
                None => {
                    assert_eq!((users.affected, users.null_anchor), (5, 0), "{label}");
                    assert_eq!(user_record_ids(&db).await, vec![6, 7], "{label}");
                }
                Some(_) => {
                    // -infinity is older than any cutoff; infinity is never
                    // old enough, and it is not a NULL anchor.
                    assert_eq!((users.affected, users.null_anchor), (2, 1), "{label}");
                    assert_eq!(user_record_ids(&db).await, vec![3, 4, 5, 6, 7], "{label}");
                }
            }
        }
    }
}
