//! The retention backlog (contract OB2): rows past their cutoff still
//! there, the oldest one's anchor, and why: never swept, locked or skipped
//! by the last sweep, the last sweep failed, or due since it; held rows
//! apart. Nothing is changed.

use crate::support::fixtures::{hold_sql, note_when, readme_rules, scope_a, tenant_a};
use crate::support::models::*;
use crate::support::{Answer, BuildEngine, TestDb, count, db_with_cohort};
use chrono::{Duration, DurationRound, Utc};
use cohort::{BacklogReason, Cohort, Period, Rule, Strategy};
use sqlx::Connection;

async fn entry(cohort: &Cohort) -> cohort::BacklogEntry {
    let backlog = cohort
        .backlog(&scope_a(), Utc::now())
        .await
        .expect("backlog");
    backlog
        .entries
        .into_iter()
        .find(|e| e.entity_type == "SessionNote")
        .expect("notes")
}

// contract: OB2
#[tokio::test]
async fn the_backlog_counts_overdue_rows_and_says_why_they_are_still_there() {
    let (db, _): (TestDb, _) = db_with_cohort("public").await;
    db.exec(crate::support::models::TABLES).await;
    let now = Utc::now()
        .duration_trunc(Duration::seconds(1))
        .expect("now");
    let oldest = now - Duration::days(100);
    let mut old = Vec::new();
    for age in [100, 90, 80, 70, 60] {
        old.push(note_when(&db, tenant_a(), now - Duration::days(age)).await);
    }
    let held = note_when(&db, tenant_a(), now - Duration::days(200)).await;
    note_when(&db, tenant_a(), now - Duration::days(1)).await; // young
    let rules = readme_rules();
    let cohort = Cohort::builder(db.engine_pool().clone())
        .options(cohort::Options {
            batch_size: 2,
            lock_wait: std::time::Duration::from_millis(50),
            ..cohort::Options::default()
        })
        .rules(rules.clone())
        .entity::<SessionNote>()
        .build_engine(&db)
        .await
        .expect("model");
    hold_sql(&db, NOTE_ID, held, tenant_a()).await;

    // Never swept: five overdue, the held one apart.
    let e = entry(&cohort).await;
    assert_eq!(
        (e.overdue, e.held, e.reason),
        (5, 1, Some(BacklogReason::NeverSwept))
    );
    assert_eq!(e.oldest_overdue, Some(oldest));
    assert_eq!(e.oldest_held, Some(now - Duration::days(200)));
    // 100 days old with a 30-day period: 70 days past its cutoff.
    let by = e.overdue_by().expect("overdue by");
    assert!((by - Duration::days(70)).num_seconds().abs() < 5, "{by:?}");
    assert_eq!(
        count(&db, "SELECT count(*) FROM sweep_run").await,
        0,
        "nothing is written"
    );

    // A sweep that finds one row locked leaves it: locked or skipped.
    let mut other = db.connect().await;
    let mut tx = other.begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM session_notes WHERE id = $1 FOR UPDATE")
        .bind(old[2])
        .execute(&mut *tx)
        .await
        .expect("lock");
    cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    tx.rollback().await.expect("rollback");
    let e = entry(&cohort).await;
    assert_eq!(
        (e.overdue, e.reason),
        (1, Some(BacklogReason::LockedOrSkipped))
    );
    assert!(e.last_sweep.is_some());

    // Swept clean: no backlog; a row that ages past the cutoff is due.
    cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    let e = entry(&cohort).await;
    assert_eq!((e.overdue, e.reason, e.held), (0, None, 1));
    note_when(&db, tenant_a(), now - Duration::days(45)).await;
    let e = entry(&cohort).await;
    assert_eq!(
        (e.overdue, e.reason),
        (1, Some(BacklogReason::DueSinceLastSweep))
    );

    // The last sweep failed for the type: said so once the rule answers again.
    rules.set("session-notes", Answer::Error);
    cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    rules.set(
        "session-notes",
        Answer::Rule(Rule::new(Period::days(30), Strategy::Purge)),
    );
    let e = entry(&cohort).await;
    assert_eq!(
        (e.overdue, e.reason),
        (1, Some(BacklogReason::LastSweepFailed))
    );

    // A row anchored at -infinity is overdue but has no date to show.
    let oldest_finite = e.oldest_overdue;
    crate::support::fixtures::note_at(&db, tenant_a(), "-infinity").await;
    let e = entry(&cohort).await;
    assert_eq!(e.overdue, 2);
    assert_eq!(e.oldest_overdue, oldest_finite);
}
