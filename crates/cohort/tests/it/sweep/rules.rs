//! Rules as a sweep applies and records them: the longer of period and legal
//! minimum (P6), and the rule's provenance in the result and the ledger (P1,
//! A1).

use crate::support::Answer;
use crate::support::fixtures::{
    build_notes_and_contacts, db_with_tables, entity_summary, fixed_now, ledger_summary,
    note_days_old, note_exists, preview_entry, readme_rules, scope_a, tenant_a,
};
use chrono::Duration;
use cohort::{Options, Period, Rule, Strategy, SweepOptions};

// contract: P6
#[tokio::test]
async fn a_legal_minimum_shorter_than_the_period_does_not_shorten_it() {
    let db = db_with_tables().await;
    let rules = readme_rules();
    rules.set(
        "session-notes",
        Answer::Rule(
            Rule::new(Period::days(90), Strategy::Purge).with_legal_minimum(Period::days(30)),
        ),
    );
    let cohort = build_notes_and_contacts(&db, rules, Options::default()).await;
    let sixty = note_days_old(&db, tenant_a(), 60).await;
    let hundred = note_days_old(&db, tenant_a(), 100).await;
    let preview = cohort
        .preview(&scope_a(), fixed_now())
        .await
        .expect("preview");
    let notes = preview_entry(&preview, "SessionNote");
    assert_eq!(
        (notes.cutoff, notes.eligible),
        (Some(fixed_now() - Duration::days(90)), 1)
    );
    let result = cohort.sweep(&scope_a(), fixed_now()).await.expect("sweep");
    let notes = entity_summary(&result, "SessionNote");
    assert_eq!(notes.applied_period, Some(Period::days(90)));
    assert_eq!(notes.cutoff, Some(fixed_now() - Duration::days(90)));
    assert_eq!(notes.affected, 1);
    assert!(note_exists(&db, sixty).await, "60 days: kept by the period");
    assert!(
        !note_exists(&db, hundred).await,
        "100 days: past the period"
    );
    let (_, _, _, _, period, ..) = ledger_summary(&db, result.run_id, "SessionNote").await;
    assert_eq!(period.as_deref(), Some("P90D"));
}

// contract: P1, A1
#[tokio::test]
async fn rule_provenance_is_recorded_in_the_result_and_the_ledger() {
    let db = db_with_tables().await;
    let rules = readme_rules();
    rules.set(
        "session-notes",
        Answer::Rule(
            Rule::new(Period::days(30), Strategy::Purge)
                .with_provenance("policy-7", "GDPR 5(1)(e)"),
        ),
    );
    let cohort = build_notes_and_contacts(&db, rules, Options::default()).await;
    note_days_old(&db, tenant_a(), 40).await;
    for dry_run in [true, false] {
        let options = if dry_run {
            SweepOptions::default().dry_run()
        } else {
            SweepOptions::default()
        };
        let result = cohort
            .sweep_with(&scope_a(), fixed_now(), options)
            .await
            .expect("sweep");
        let notes = entity_summary(&result, "SessionNote");
        assert_eq!(notes.affected, 1, "dry run {dry_run}");
        assert_eq!(notes.rule_source.as_deref(), Some("policy-7"));
        assert_eq!(notes.rule_reason.as_deref(), Some("GDPR 5(1)(e)"));
        let contacts = entity_summary(&result, "CaseContact");
        assert_eq!(
            (&contacts.rule_source, &contacts.rule_reason),
            (&None, &None)
        );
        let (_, _, _, _, _, source, reason, _) =
            ledger_summary(&db, result.run_id, "SessionNote").await;
        assert_eq!(
            (source.as_deref(), reason.as_deref()),
            (Some("policy-7"), Some("GDPR 5(1)(e)")),
            "dry run {dry_run}"
        );
        let (_, _, _, _, _, source, reason, _) =
            ledger_summary(&db, result.run_id, "CaseContact").await;
        assert_eq!((source, reason), (None, None));
    }
}
