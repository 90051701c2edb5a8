//! Values PostgreSQL cannot hold (contract X20): periods whose cutoff falls
//! before its earliest time, clocks at its earliest and latest instants, a
//! NUL byte in rule text, infinite anchors (X12) and a `now` finer than its
//! microseconds (X8).

use std::time::Duration as StdDuration;

use crate::support::fixtures::{
    build_notes_and_contacts, contact_anonymised, contact_days_old, db_with_tables, entity_summary,
    fixed_now, ledger_summary, note_at, note_days_old, note_exists, note_when, pg_earliest,
    preview_entry, readme_rules, run_status, scope_a, tenant_a, tenant_b,
};
use crate::support::{Answer, count};
use chrono::{DateTime, Duration, FixedOffset, Utc};
use cohort::{Error, Options, Period, Rule, RunStatus, Strategy};

// ---------------------------------------------------------------------------
// X20: periods, clocks and rule text that PostgreSQL cannot hold.

// contract: X20
#[tokio::test]
async fn a_period_whose_cutoff_falls_before_postgres_earliest_time_means_nothing_is_old_enough() {
    let db = db_with_tables().await;
    let rules = readme_rules();
    let cohort = build_notes_and_contacts(&db, rules.clone(), Options::default()).await;
    for period in [
        Period::years(10_000),
        Period::days(u32::MAX),
        Period::fixed(StdDuration::MAX),
    ] {
        rules.set(
            "session-notes",
            Answer::Rule(Rule::new(period, Strategy::Purge)),
        );
        let old = note_days_old(&db, tenant_a(), 400).await;
        // As old as PostgreSQL can store: still not older than "before 4714 BC".
        let ancient = note_at(&db, tenant_a(), "4713-12-01 00:00:00+00 BC").await;
        let old_contact = contact_days_old(&db, tenant_a(), 400).await;

        let preview = cohort
            .preview(&scope_a(), fixed_now())
            .await
            .unwrap_or_else(|e| panic!("{period}: preview failed: {e}"));
        let notes = preview_entry(&preview, "SessionNote");
        assert_eq!(
            (
                notes.eligible,
                notes.held,
                notes.cutoff,
                notes.failure.clone()
            ),
            (0, 0, None, None),
            "{period}: {preview:#?}"
        );
        assert_eq!(
            preview_entry(&preview, "CaseContact").eligible,
            1,
            "{period}"
        );

        let result = cohort
            .sweep(&scope_a(), fixed_now())
            .await
            .unwrap_or_else(|e| panic!("{period}: sweep failed: {e}"));
        assert_eq!(result.status, RunStatus::Succeeded, "{period}: {result:#?}");
        assert!(result.entity_failures.is_empty(), "{period}: {result:#?}");
        let notes = entity_summary(&result, "SessionNote");
        assert_eq!(
            (
                notes.affected,
                notes.cutoff,
                notes.applied_period,
                notes.error.clone()
            ),
            (0, None, Some(period), None),
            "{period}"
        );
        assert_eq!(
            entity_summary(&result, "CaseContact").affected,
            1,
            "{period}: the other entity of the run is swept"
        );
        assert!(note_exists(&db, old).await, "{period}");
        assert!(note_exists(&db, ancient).await, "{period}");
        assert!(contact_anonymised(&db, old_contact).await, "{period}");

        assert_eq!(run_status(&db, result.run_id).await, "Succeeded");
        let (status, affected, ..) = ledger_summary(&db, result.run_id, "SessionNote").await;
        assert_eq!((status.as_str(), affected), ("Succeeded", 0), "{period}");
        // Stored as no cutoff, or as -infinity: never a finite instant.
        let finite_cutoff = count(
            &db,
            &format!(
                "SELECT count(*) FROM sweep_run_entity_summary WHERE run_id = '{}' \
                 AND entity_type = 'SessionNote' AND isfinite(cutoff)",
                result.run_id
            ),
        )
        .await;
        assert_eq!(finite_cutoff, 0, "{period}");
        let (status, affected, ..) = ledger_summary(&db, result.run_id, "CaseContact").await;
        assert_eq!((status.as_str(), affected), ("Succeeded", 1), "{period}");
    }
}

// contract: X20
#[tokio::test]
async fn the_earliest_and_latest_instants_postgres_can_store_are_valid_clocks() {
    let db = db_with_tables().await;
    let cohort = build_notes_and_contacts(&db, readme_rules(), Options::default()).await;
    let old = note_days_old(&db, tenant_a(), 400).await;
    let forever = note_at(&db, tenant_a(), "infinity").await;
    let old_contact = contact_days_old(&db, tenant_a(), 400).await;

    // At PostgreSQL's earliest instant every cutoff falls before it: nothing
    // is old enough, and nothing fails.
    let earliest = pg_earliest();
    let preview = cohort
        .preview(&scope_a(), earliest)
        .await
        .expect("preview at the earliest instant");
    assert_eq!(preview.now, earliest);
    assert!(!preview.entries.is_empty());
    assert!(
        preview
            .entries
            .iter()
            .all(|e| e.eligible == 0 && e.cutoff.is_none() && e.failure.is_none())
    );
    let result = cohort
        .sweep(&scope_a(), earliest)
        .await
        .expect("sweep at the earliest instant");
    assert_eq!(result.status, RunStatus::Succeeded, "{result:#?}");
    assert_eq!(result.now, earliest);
    assert_eq!(result.affected(), 0);
    assert!(!result.summaries.is_empty());
    assert!(result.summaries.iter().all(|s| s.cutoff.is_none()));
    let stored: DateTime<Utc> =
        sqlx::query_scalar("SELECT logical_now FROM sweep_run WHERE run_id = $1")
            .bind(result.run_id)
            .fetch_one(db.pool())
            .await
            .expect("logical_now");
    assert_eq!(stored, earliest);

    // One microsecond earlier is outside PostgreSQL's range: refused, typed.
    let before = earliest - Duration::microseconds(1);
    assert!(matches!(
        cohort.sweep(&scope_a(), before).await,
        Err(Error::TimeOutOfRange { what: "now" })
    ));

    // chrono's latest instant is inside PostgreSQL's range: a valid clock,
    // truncated to microseconds; every finite anchor is old enough.
    let latest = DateTime::<Utc>::MAX_UTC;
    let result = cohort
        .sweep(&scope_a(), latest)
        .await
        .expect("sweep at the latest instant");
    assert_eq!(result.status, RunStatus::Succeeded, "{result:#?}");
    assert_eq!(
        result.now.timestamp_micros(),
        latest.timestamp_micros(),
        "microseconds kept"
    );
    assert_eq!(result.now.timestamp_subsec_nanos() % 1_000, 0, "truncated");
    assert!(!note_exists(&db, old).await);
    assert!(
        note_exists(&db, forever).await,
        "infinity is never old enough"
    );
    assert!(contact_anonymised(&db, old_contact).await);
    let stored: DateTime<Utc> =
        sqlx::query_scalar("SELECT logical_now FROM sweep_run WHERE run_id = $1")
            .bind(result.run_id)
            .fetch_one(db.pool())
            .await
            .expect("logical_now");
    assert_eq!(stored, result.now);
}

// contract: X20, P1, A1
#[tokio::test]
async fn a_nul_byte_in_rule_provenance_is_stored_replaced_and_fails_nothing() {
    let db = db_with_tables().await;
    let rules = readme_rules();
    rules.set(
        "session-notes",
        Answer::Rule(
            Rule::new(Period::days(30), Strategy::Purge)
                .with_provenance("policy\0-7", "GDPR\0 5(1)(e)"),
        ),
    );
    let cohort = build_notes_and_contacts(&db, rules, Options::default()).await;
    let old = note_days_old(&db, tenant_a(), 40).await;
    let old_contact = contact_days_old(&db, tenant_a(), 400).await;
    let result = cohort.sweep(&scope_a(), fixed_now()).await.expect("sweep");
    assert_eq!(result.status, RunStatus::Succeeded, "{result:#?}");
    assert!(!note_exists(&db, old).await);
    assert!(contact_anonymised(&db, old_contact).await);
    assert_eq!(run_status(&db, result.run_id).await, "Succeeded");
    let (status, affected, _, _, _, source, reason, error) =
        ledger_summary(&db, result.run_id, "SessionNote").await;
    assert_eq!((status.as_str(), affected, error), ("Succeeded", 1, None));
    assert_eq!(source.as_deref(), Some("policy\u{FFFD}-7"));
    assert_eq!(reason.as_deref(), Some("GDPR\u{FFFD} 5(1)(e)"));
}

// ---------------------------------------------------------------------------
// X12, X20: infinite anchors.

// contract: X12, X20, S7
#[tokio::test]
async fn infinite_anchors_sweep_without_panicking_at_any_batch_boundary() {
    for batch_size in [1, 2, 3] {
        let db = db_with_tables().await;
        let cohort = build_notes_and_contacts(
            &db,
            readme_rules(),
            Options {
                batch_size,
                ..Options::default()
            },
        )
        .await;
        // Sorted by anchor: two -infinity rows (so that one ends a batch of
        // two), two old rows, one young, one infinity.
        let minus_1 = note_at(&db, tenant_a(), "-infinity").await;
        let minus_2 = note_at(&db, tenant_a(), "-infinity").await;
        let old_1 = note_days_old(&db, tenant_a(), 40).await;
        let old_2 = note_days_old(&db, tenant_a(), 50).await;
        let young = note_days_old(&db, tenant_a(), 10).await;
        let forever = note_at(&db, tenant_a(), "infinity").await;
        let other_tenant = note_at(&db, tenant_b(), "-infinity").await;

        let preview = cohort
            .preview(&scope_a(), fixed_now())
            .await
            .expect("preview");
        let notes = preview_entry(&preview, "SessionNote");
        assert_eq!(
            (
                notes.eligible,
                notes.held,
                notes.null_anchor,
                notes.failure.clone()
            ),
            (4, 0, 0, None),
            "batch {batch_size}: -infinity is old enough, infinity never"
        );

        let sweeping = cohort.clone();
        let result = tokio::spawn(async move { sweeping.sweep(&scope_a(), fixed_now()).await })
            .await
            .unwrap_or_else(|e| panic!("batch {batch_size}: the sweep panicked: {e}"))
            .expect("sweep");
        assert_eq!(
            result.status,
            RunStatus::Succeeded,
            "batch {batch_size}: {result:#?}"
        );
        let notes = entity_summary(&result, "SessionNote");
        assert_eq!(
            (notes.affected, notes.skipped, notes.held),
            (4, 0, 0),
            "batch {batch_size}"
        );
        for gone in [minus_1, minus_2, old_1, old_2] {
            assert!(!note_exists(&db, gone).await, "batch {batch_size}");
        }
        for kept in [young, forever, other_tenant] {
            assert!(note_exists(&db, kept).await, "batch {batch_size}");
        }
        assert_eq!(run_status(&db, result.run_id).await, "Succeeded");
        // A second run finds nothing and ends.
        let again = cohort.sweep(&scope_a(), fixed_now()).await.expect("again");
        assert_eq!((again.status, again.affected()), (RunStatus::Succeeded, 0));
    }
}

// ---------------------------------------------------------------------------
// Sub-microsecond `now`.

// contract: X12, X8
#[tokio::test]
async fn a_now_with_nanoseconds_is_truncated_to_microseconds_everywhere() {
    let db = db_with_tables().await;
    let cohort = build_notes_and_contacts(&db, readme_rules(), Options::default()).await;
    // 1,999 ns past the second: truncated it is 1 µs, rounded it would be 2.
    // Given at UTC+02:00, reported in UTC.
    let plus_two = FixedOffset::east_opt(2 * 3600).expect("offset");
    let given = (fixed_now() + Duration::nanoseconds(1_999)).with_timezone(&plus_two);
    let truncated = fixed_now() + Duration::microseconds(1);
    let cutoff = truncated - Duration::days(30);
    let at_cutoff = note_when(&db, tenant_a(), cutoff).await;
    let older = note_when(&db, tenant_a(), cutoff - Duration::microseconds(1)).await;

    let preview = cohort.preview(&scope_a(), given).await.expect("preview");
    assert_eq!(preview.now, truncated);
    let notes = preview_entry(&preview, "SessionNote");
    assert_eq!((notes.cutoff, notes.eligible), (Some(cutoff), 1));

    let result = cohort.sweep(&scope_a(), given).await.expect("sweep");
    assert_eq!(result.status, RunStatus::Succeeded);
    assert_eq!(result.now, truncated);
    assert_eq!(entity_summary(&result, "SessionNote").cutoff, Some(cutoff));
    let (logical_now, stored_cutoff): (DateTime<Utc>, DateTime<Utc>) = sqlx::query_as(
        "SELECT r.logical_now, s.cutoff FROM sweep_run r \
         JOIN sweep_run_entity_summary s ON s.run_id = r.run_id AND s.entity_type = 'SessionNote' \
         WHERE r.run_id = $1",
    )
    .bind(result.run_id)
    .fetch_one(db.pool())
    .await
    .expect("ledger");
    assert_eq!(logical_now, result.now, "the result and the ledger agree");
    assert_eq!(stored_cutoff, cutoff);
    assert!(
        note_exists(&db, at_cutoff).await,
        "a row exactly at the cutoff is kept (strict <)"
    );
    assert!(!note_exists(&db, older).await, "one microsecond older goes");
    assert_eq!(entity_summary(&result, "SessionNote").affected, 1);
}
