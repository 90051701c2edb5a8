//! Decisions that are refused (contract DR2, "bad input"): each a typed
//! error, nothing written.

use chrono::Duration;
use cohort::Error;
use cohort::Review;
use cohort::disposition::{BatchStatus, DispositionError};
use uuid::Uuid;

use super::*;
use crate::support::fixtures::{now_s, scope_a};

fn refused(err: &Error) -> &DispositionError {
    match err {
        Error::Disposition(d) => d,
        other => panic!("expected a disposition refusal, got {other:?}"),
    }
}

// contract: DR2
#[tokio::test]
async fn bad_decisions_are_typed_errors_and_change_nothing() {
    let db = invoices_db().await;
    let now = now_s();
    for id in 1..=2 {
        invoice(&db, id, now, 400).await;
    }
    let provider = rules(reviewed(Review::new()));
    let cohort = build_with(&db, provider.clone()).await;
    cohort.sweep(&scope_a(), now).await.expect("freeze");
    let batch = only_batch(&cohort, &db).await;
    let d = cohort.dispositions();
    let mut conn = db.engine_pool().acquire().await.expect("connection");
    let before = decision_count(&db).await;

    // An approver name that is empty or blank; too long; with NUL.
    for name in ["", "   "] {
        let err = d
            .approve(&mut conn, batch.batch_id, name)
            .await
            .expect_err("empty");
        assert_eq!(refused(&err), &DispositionError::EmptyDecider);
    }
    let err = d
        .approve(&mut conn, batch.batch_id, &"x".repeat(300))
        .await
        .expect_err("long");
    assert_eq!(refused(&err), &DispositionError::InvalidDecider);
    let err = d
        .approve(&mut conn, batch.batch_id, "a\0b")
        .await
        .expect_err("nul");
    assert_eq!(refused(&err), &DispositionError::InvalidDecider);
    // A batch that does not exist.
    let missing = Uuid::new_v4();
    for err in [
        d.approve(&mut conn, missing, "ann")
            .await
            .expect_err("approve"),
        d.reject(&mut conn, missing, "ann", "why")
            .await
            .expect_err("reject"),
        d.extend(&mut conn, missing, "ann", now + Duration::days(9))
            .await
            .expect_err("extend"),
    ] {
        assert_eq!(
            refused(&err),
            &DispositionError::NoSuchBatch { batch_id: missing }
        );
    }
    // A rejection without a reason; an extension into the past.
    let err = d
        .reject(&mut conn, batch.batch_id, "ann", " ")
        .await
        .expect_err("no reason");
    assert_eq!(refused(&err), &DispositionError::InvalidReason);
    let err = d
        .extend(&mut conn, batch.batch_id, "ann", now - Duration::days(1))
        .await
        .expect_err("past");
    assert_eq!(
        refused(&err),
        &DispositionError::ExtensionInPast {
            batch_id: batch.batch_id
        }
    );
    assert_eq!(decision_count(&db).await, before, "nothing was written");
    assert_eq!(only_batch(&cohort, &db).await.status, BatchStatus::Pending);

    // A rejected batch cannot be approved, rejected or extended.
    d.reject(&mut conn, batch.batch_id, "bob", "keep for the audit")
        .await
        .expect("reject");
    let after_reject = decision_count(&db).await;
    for err in [
        d.approve(&mut conn, batch.batch_id, "ann")
            .await
            .expect_err("approve"),
        d.reject(&mut conn, batch.batch_id, "ann", "again")
            .await
            .expect_err("reject"),
        d.extend(&mut conn, batch.batch_id, "ann", now + Duration::days(9))
            .await
            .expect_err("extend"),
    ] {
        assert_eq!(
            refused(&err),
            &DispositionError::NotPending {
                batch_id: batch.batch_id,
                status: BatchStatus::Rejected
            }
        );
    }
    assert_eq!(decision_count(&db).await, after_reject);
}

// contract: DR2
#[tokio::test]
async fn voided_and_carried_out_batches_refuse_approval() {
    let db = invoices_db().await;
    let now = now_s();
    invoice(&db, 1, now, 400).await;
    let rule = reviewed(Review::new());
    let provider = rules(rule.clone());
    let cohort = build_with(&db, provider.clone()).await;
    let d = cohort.dispositions();
    let mut conn = db.engine_pool().acquire().await.expect("connection");

    cohort.sweep(&scope_a(), now).await.expect("freeze");
    let first = only_batch(&cohort, &db).await;
    provider.set(
        "invoices",
        crate::support::Answer::Rule(rule.clone().with_provenance("v2", "changed")),
    );
    cohort
        .sweep(&scope_a(), now)
        .await
        .expect("void and freeze");
    let all = batches(&cohort, &db).await;
    assert_eq!(all[0].status, BatchStatus::Voided);
    let err = d
        .approve(&mut conn, first.batch_id, "ann")
        .await
        .expect_err("voided");
    assert_eq!(
        refused(&err),
        &DispositionError::NotPending {
            batch_id: first.batch_id,
            status: BatchStatus::Voided
        }
    );

    let second = all[1].batch_id;
    d.approve(&mut conn, second, "ann").await.expect("approve");
    let err = d
        .approve(&mut conn, second, "bob")
        .await
        .expect_err("approved");
    assert_eq!(
        refused(&err),
        &DispositionError::NotPending {
            batch_id: second,
            status: BatchStatus::Approved
        }
    );
    cohort.sweep(&scope_a(), now).await.expect("carry out");
    let before = decision_count(&db).await;
    let err = d
        .approve(&mut conn, second, "bob")
        .await
        .expect_err("carried out");
    assert_eq!(
        refused(&err),
        &DispositionError::NotPending {
            batch_id: second,
            status: BatchStatus::CarriedOut
        }
    );
    assert_eq!(decision_count(&db).await, before);
}

// contract: DR2
#[tokio::test]
async fn a_refused_decision_leaves_the_callers_transaction_usable() {
    let db = invoices_db().await;
    let now = now_s();
    invoice(&db, 1, now, 400).await;
    let cohort = build_with(&db, rules(reviewed(Review::new()))).await;
    cohort.sweep(&scope_a(), now).await.expect("freeze");
    let batch = only_batch(&cohort, &db).await;
    let mut tx = db.engine_pool().begin().await.expect("begin");
    let err = cohort
        .dispositions()
        .approve(&mut tx, Uuid::new_v4(), "ann")
        .await
        .expect_err("unknown");
    assert!(matches!(err, Error::Disposition(_)), "{err:?}");
    cohort
        .dispositions()
        .approve(&mut tx, batch.batch_id, "ann")
        .await
        .expect("approve in the same transaction");
    tx.rollback().await.expect("rollback");
    assert_eq!(only_batch(&cohort, &db).await.status, BatchStatus::Pending);
}
