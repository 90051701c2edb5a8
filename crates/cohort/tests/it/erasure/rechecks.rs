//! After waiting for a lock, the final statement rechecks (contract E8): a
//! hold committed while the candidate select waited protects its row.

use std::time::Duration as StdDuration;

use crate::support::fixtures::{
    db_with_tables, entity_summary, scope_a, someone_else, subject, tenant_a, user_data_rules,
    user_record_days_old, user_record_ids,
};
use crate::support::models::*;
use chrono::Utc;
use cohort::{Cohort, ErasureRequest, Period, Rule, RunKind, RunStatus, Strategy};
use sqlx::Connection;

const USER_RECORD_ID: &str = "6b619c19-6e3c-44e8-a87f-975c68fd3988";

// contract: E8, E7, H1
#[tokio::test]
async fn the_final_statement_rechecks_holds_committed_while_the_candidate_select_waited() {
    let db = db_with_tables().await;
    let cohort = Cohort::builder(db.pool().clone())
        .rules(user_data_rules(Rule::new(
            Period::days(30),
            Strategy::Purge,
        )))
        .entity::<UserRecord>()
        .build()
        .await
        .expect("model");
    for id in 1..=3 {
        user_record_days_old(&db, id, tenant_a(), subject(), Some(400)).await;
    }
    user_record_days_old(&db, 4, tenant_a(), someone_else(), Some(400)).await;

    // The host locks row 2 in a transaction of its own.
    let mut host = db.connect().await;
    let host_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut host)
        .await
        .expect("pid");
    let mut tx = host.begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM user_records WHERE id = 2 FOR UPDATE")
        .execute(&mut *tx)
        .await
        .expect("lock row 2");

    let erasing = cohort.clone();
    let erasure = tokio::spawn(async move {
        erasing
            .erase(&scope_a(), Utc::now(), ErasureRequest::new(subject()))
            .await
    });

    // Wait until the erasure's candidate select waits for row 2's lock.
    let mut waiting = false;
    for _ in 0..3000 {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_catalog.pg_locks l \
             JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid \
             WHERE NOT l.granted AND l.locktype IN ('transactionid', 'tuple') \
               AND a.datname = pg_catalog.current_database() AND l.pid <> $1",
        )
        .bind(host_pid)
        .fetch_one(db.pool())
        .await
        .expect("pg_locks");
        if n > 0 {
            waiting = true;
            break;
        }
        assert!(!erasure.is_finished(), "the erasure ended without waiting");
        tokio::time::sleep(StdDuration::from_millis(10)).await;
    }
    assert!(waiting, "the erasure never waited for row 2");

    // Now the host holds row 2 and commits. The erasure batch holds the
    // entity fence shared, and hold creation (or the fence trigger on
    // retention_holds, for plain SQL) takes it exclusively: a hold created
    // the normal way would wait for the batch, which waits for this
    // transaction, and one of them would die in a deadlock. With the replica
    // role (superuser only) the trigger does not fire, so the hold commits
    // while the erasure's candidate select, whose snapshot predates it, still
    // waits: only the final statement's re-check can then see the hold.
    sqlx::query("SET LOCAL session_replication_role = replica")
        .execute(&mut *tx)
        .await
        .expect("replica role");
    sqlx::query(
        "INSERT INTO retention_holds (hold_id, retained_entity_id, record_id, tenant_id, reason, created_at) \
         VALUES (gen_random_uuid(), $1, '2', $2, 'litigation', now() - interval '1 day')",
    )
    .bind(uuid(USER_RECORD_ID))
    .bind(tenant_a())
    .execute(&mut *tx)
    .await
    .expect("hold");
    tx.commit().await.expect("commit");

    let result = tokio::time::timeout(StdDuration::from_secs(60), erasure)
        .await
        .expect("the erasure ends")
        .expect("the erasure does not panic")
        .expect("erase");
    assert_eq!(result.kind, RunKind::Erasure);
    assert_eq!(result.status, RunStatus::Succeeded, "{result:#?}");
    assert_eq!(
        user_record_ids(&db).await,
        vec![2, 4],
        "the held row is left"
    );
    let users = entity_summary(&result, "UserRecord");
    assert_eq!((users.affected, users.held), (2, 1));
}
