//! Approvals and sweeps at once (contract DR2): gated on the batch's row
//! lock, never timed.

use cohort::Review;
use cohort::disposition::{BatchStatus, DecisionKind};

use super::*;
use crate::support::fixtures::{now_s, scope_a};

// contract: DR2
#[tokio::test]
async fn an_approval_and_a_sweep_at_once_act_once() {
    let db = invoices_db().await;
    let now = now_s();
    for id in 1..=3 {
        invoice(&db, id, now, 400).await;
    }
    let cohort = build_with(&db, rules(reviewed(Review::new()))).await;
    cohort.sweep(&scope_a(), now).await.expect("freeze");
    let batch = only_batch(&cohort, &db).await;

    // The approval's transaction holds the batch's row; the sweep that
    // starts meanwhile waits for it, then sees the approval.
    let mut tx = db.engine_pool().begin().await.expect("begin");
    cohort
        .dispositions()
        .approve(&mut tx, batch.batch_id, "ann")
        .await
        .expect("approve");
    let sweeper = cohort.clone();
    let sweep = tokio::spawn(async move { sweeper.sweep(&scope_a(), now).await });
    let mut observer = db.pool().acquire().await.expect("observer");
    wait_for_row_lock(&mut observer).await;
    assert_eq!(ids(&db).await, vec![1, 2, 3], "the sweep waits");
    tx.commit().await.expect("commit the approval");
    let result = sweep.await.expect("join").expect("sweep");
    assert_eq!(result.affected(), 3, "{result:#?}");
    assert!(ids(&db).await.is_empty());

    let again = cohort.sweep(&scope_a(), now).await.expect("sweep");
    assert_eq!(again.affected(), 0);
    let kinds: Vec<DecisionKind> = decisions(&cohort, &db, batch.batch_id)
        .await
        .iter()
        .map(|d| d.kind)
        .collect();
    assert_eq!(
        kinds,
        [
            DecisionKind::Frozen,
            DecisionKind::Approved,
            DecisionKind::CarriedOut
        ],
        "approved once, carried out once"
    );
}

// contract: DR2
#[tokio::test]
async fn two_sweeps_at_once_carry_an_approved_batch_out_once() {
    let db = invoices_db().await;
    let now = now_s();
    for id in 1..=3 {
        invoice(&db, id, now, 400).await;
    }
    let cohort = build_with(&db, rules(reviewed(Review::new()))).await;
    cohort.sweep(&scope_a(), now).await.expect("freeze");
    let batch = only_batch(&cohort, &db).await;
    let mut conn = db.engine_pool().acquire().await.expect("connection");
    cohort
        .dispositions()
        .approve(&mut conn, batch.batch_id, "ann")
        .await
        .expect("approve");

    // A gate on the batch's row: both sweeps wait for it, then one claims
    // the batch and the other finds it being carried out by a live run.
    let mut gate = db.pool().begin().await.expect("gate");
    sqlx::query("SELECT 1 FROM retention_disposition_batches WHERE batch_id = $1 FOR UPDATE")
        .bind(batch.batch_id)
        .execute(&mut *gate)
        .await
        .expect("lock the batch");
    let (a, b) = (cohort.clone(), cohort.clone());
    let first = tokio::spawn(async move { a.sweep(&scope_a(), now).await });
    let second = tokio::spawn(async move { b.sweep(&scope_a(), now).await });
    let mut observer = db.pool().acquire().await.expect("observer");
    wait_for_row_lock_waiters(&mut observer, 2).await;
    gate.rollback().await.expect("open the gate");
    let first = first.await.expect("join").expect("sweep");
    let second = second.await.expect("join").expect("sweep");
    assert_eq!(
        first.affected() + second.affected(),
        3,
        "{first:#?} {second:#?}"
    );
    assert!(ids(&db).await.is_empty());
    let carried: Vec<_> = decisions(&cohort, &db, batch.batch_id)
        .await
        .into_iter()
        .filter(|d| d.kind == DecisionKind::CarriedOut)
        .collect();
    assert_eq!(carried.len(), 1, "{carried:#?}");
    assert_eq!(carried[0].changed, Some(3));
    assert_eq!(
        only_batch(&cohort, &db).await.status,
        BatchStatus::CarriedOut
    );
}
