//! The proof of disposition (contract DR3): every decision is a link of
//! the evidence chain, verification names a tampered decision or batch, and
//! a batch marked approved by hand is not carried out.

use cohort::Review;
use cohort::disposition::BatchStatus;
use cohort::evidence::{ChainTable, ProblemKind, verify};
use cohort::schema::SchemaName;

use super::*;
use crate::support::fixtures::{now_s, scope_a};

async fn problems(db: &TestDb) -> Vec<cohort::evidence::ChainProblem> {
    let mut conn = db.pool().acquire().await.expect("connection");
    let report = verify(&mut conn, &SchemaName::public())
        .await
        .expect("verify");
    report.problems
}

/// A batch frozen, approved by ann and carried out; another frozen and
/// rejected. Returns the handle and the two batches' ids.
async fn decided(db: &TestDb) -> (Cohort, Uuid, Uuid) {
    let now = now_s();
    for id in 1..=3 {
        invoice(db, id, now, 400).await;
    }
    let cohort = build_with(db, rules(reviewed(Review::new()))).await;
    cohort.sweep(&scope_a(), now).await.expect("freeze");
    let first = only_batch(&cohort, db).await.batch_id;
    let mut conn = db.engine_pool().acquire().await.expect("connection");
    let d = cohort.dispositions();
    d.approve(&mut conn, first, "ann").await.expect("approve");
    cohort.sweep(&scope_a(), now).await.expect("carry out");
    invoice(db, 9, now, 400).await;
    cohort.sweep(&scope_a(), now).await.expect("freeze again");
    let second = batches(&cohort, db).await[1].batch_id;
    d.reject(&mut conn, second, "bob", "still needed").await.expect("reject");
    (cohort, first, second)
}

// contract: DR3
#[tokio::test]
async fn every_decision_is_a_link_and_the_chain_verifies() {
    let db = invoices_db().await;
    let (_cohort, _, _) = decided(&db).await;
    let mut conn = db.pool().acquire().await.expect("connection");
    let report = verify(&mut conn, &SchemaName::public())
        .await
        .expect("verify");
    assert!(report.is_intact(), "{report}");
    // Frozen, approved, carried out; frozen, rejected.
    assert_eq!(report.disposition_links, 5, "{report}");
    let linked = count(
        &db,
        "SELECT count(*) FROM retention_disposition_decisions \
         WHERE chain_hash IS NOT NULL AND chain_seq BETWEEN 1 AND 5",
    )
    .await;
    assert_eq!(linked, 5);
}

// contract: DR3
#[tokio::test]
async fn verification_names_a_tampered_decision() {
    let db = invoices_db().await;
    let (_cohort, first, _) = decided(&db).await;
    // Who approved is rewritten: the link no longer hashes to its content.
    db.exec(&format!(
        "UPDATE retention_disposition_decisions SET decided_by = 'mallory' \
         WHERE batch_id = '{first}' AND decision = 'Approved'"
    ))
    .await;
    let found = problems(&db).await;
    assert!(
        found.iter().any(|p| p.table == ChainTable::Disposition
            && p.row == first.to_string()
            && p.kind == ProblemKind::Changed),
        "{found:#?}"
    );
}

// contract: DR3
#[tokio::test]
async fn verification_names_a_deleted_decision_and_a_batch_changed_behind_its_decisions() {
    let db = invoices_db().await;
    let (_cohort, first, second) = decided(&db).await;
    db.exec(&format!(
        "DELETE FROM retention_disposition_decisions WHERE batch_id = '{first}' AND decision = 'Approved'"
    ))
    .await;
    db.exec(&format!(
        "UPDATE retention_disposition_batches SET status = 'Pending' WHERE batch_id = '{second}'"
    ))
    .await;
    let found = problems(&db).await;
    assert!(
        found
            .iter()
            .any(|p| p.table == ChainTable::Disposition
                && matches!(p.kind, ProblemKind::Missing { .. })),
        "{found:#?}"
    );
    assert!(
        found.iter().any(|p| p.table == ChainTable::Disposition
            && p.row == second.to_string()
            && p.kind == ProblemKind::Changed),
        "the rejected batch set back to pending: {found:#?}"
    );
}

// contract: DR2, DR3
#[tokio::test]
async fn a_batch_marked_approved_by_hand_is_not_carried_out_and_verification_says_so() {
    let db = invoices_db().await;
    let now = now_s();
    for id in 1..=2 {
        invoice(&db, id, now, 400).await;
    }
    let cohort = build_with(&db, rules(reviewed(Review::new()))).await;
    cohort.sweep(&scope_a(), now).await.expect("freeze");
    let batch = only_batch(&cohort, &db).await;
    db.exec(&format!(
        "UPDATE retention_disposition_batches SET status = 'Approved' WHERE batch_id = '{}'",
        batch.batch_id
    ))
    .await;
    let result = cohort.sweep(&scope_a(), now).await.expect("sweep");
    assert_eq!(result.affected(), 0, "no recorded approval: {result:#?}");
    assert_eq!(ids(&db).await, vec![1, 2]);
    assert_eq!(only_batch(&cohort, &db).await.status, BatchStatus::Approved);
    let found = problems(&db).await;
    assert!(
        found.iter().any(|p| p.table == ChainTable::Disposition
            && p.row == batch.batch_id.to_string()
            && p.kind == ProblemKind::Changed),
        "{found:#?}"
    );
}
