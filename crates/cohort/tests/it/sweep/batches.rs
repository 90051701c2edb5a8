//! What a batch measures and when the entity loop ends: held rows counted by
//! a query when a locked row is left behind (X7, X17), and batches that
//! change nothing (X6).

use std::time::Duration as StdDuration;

use crate::support::count;
use crate::support::fixtures::{
    build_notes_and_contacts, contact_days_old, db_with_tables, entity_summary, fixed_now,
    hold_sql, ledger_summary, note_days_old, note_exists, readme_rules, run_status, scope_a,
    tenant_a,
};
use crate::support::models::*;
use cohort::{Options, RunStatus};
use sqlx::Connection;

// contract: X7, X17
#[tokio::test]
async fn held_is_measured_directly_when_a_locked_row_is_left_behind() {
    let db = db_with_tables().await;
    let cohort = build_notes_and_contacts(
        &db,
        readme_rules(),
        Options {
            lock_wait: StdDuration::from_millis(50),
            ..Options::default()
        },
    )
    .await;
    let held = note_days_old(&db, tenant_a(), 40).await;
    hold_sql(&db, NOTE_ID, held, tenant_a()).await;
    let locked = note_days_old(&db, tenant_a(), 41).await;
    let mut free = Vec::new();
    for age in [42, 43, 44] {
        free.push(note_days_old(&db, tenant_a(), age).await);
    }
    let young = note_days_old(&db, tenant_a(), 10).await;

    let mut other = db.connect().await;
    let mut tx = other.begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM session_notes WHERE id = $1 FOR UPDATE")
        .bind(locked)
        .execute(&mut *tx)
        .await
        .expect("lock");
    let result = tokio::time::timeout(
        StdDuration::from_secs(60),
        cohort.sweep(&scope_a(), fixed_now()),
    )
    .await
    .expect("the sweep does not wait for the locked row")
    .expect("sweep");
    tx.rollback().await.expect("rollback");

    assert_eq!(result.status, RunStatus::Succeeded, "{result:#?}");
    let notes = entity_summary(&result, "SessionNote");
    assert_eq!(
        (notes.affected, notes.held, notes.skipped),
        (3, 1, 1),
        "held counts only the held row, skipped only the locked one"
    );
    let (_, affected, held_count, skipped, ..) =
        ledger_summary(&db, result.run_id, "SessionNote").await;
    assert_eq!((affected, held_count, skipped), (3, 1, 1));
    for gone in free {
        assert!(!note_exists(&db, gone).await);
    }
    for kept in [held, locked, young] {
        assert!(note_exists(&db, kept).await);
    }
}

// contract: X6
#[tokio::test]
async fn batches_that_change_nothing_end_the_entity_loop() {
    let db = db_with_tables().await;
    // Triggers that cancel every delete of a note and every update of a
    // contact: each batch finds rows and changes none.
    db.exec(
        "CREATE FUNCTION public.cancel() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$; \
         CREATE TRIGGER cancel_delete BEFORE DELETE ON public.session_notes \
         FOR EACH ROW EXECUTE FUNCTION public.cancel(); \
         CREATE TRIGGER cancel_update BEFORE UPDATE ON public.case_contacts \
         FOR EACH ROW EXECUTE FUNCTION public.cancel();",
    )
    .await;
    let cohort = build_notes_and_contacts(
        &db,
        readme_rules(),
        Options {
            batch_size: 2,
            ..Options::default()
        },
    )
    .await;
    for _ in 0..7 {
        note_days_old(&db, tenant_a(), 40).await;
    }
    for _ in 0..5 {
        contact_days_old(&db, tenant_a(), 400).await;
    }
    let result = tokio::time::timeout(
        StdDuration::from_secs(120),
        cohort.sweep(&scope_a(), fixed_now()),
    )
    .await
    .expect("the sweep ends")
    .expect("sweep");
    assert_eq!(result.status, RunStatus::Succeeded, "{result:#?}");
    let notes = entity_summary(&result, "SessionNote");
    assert_eq!((notes.affected, notes.skipped), (0, 7));
    // Custom anonymisers take the locked path.
    let contacts = entity_summary(&result, "CaseContact");
    assert_eq!((contacts.affected, contacts.skipped), (0, 5));
    assert_eq!(count(&db, "SELECT count(*) FROM session_notes").await, 7);
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM case_contacts WHERE anonymised_at IS NULL"
        )
        .await,
        5
    );
    assert_eq!(run_status(&db, result.run_id).await, "Succeeded");
}
