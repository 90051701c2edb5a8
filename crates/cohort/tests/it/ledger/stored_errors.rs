//! Stored errors (contract A9): a database failure is stored as a sanitized
//! envelope and logged in full under the same diagnostic id.

use crate::support::LogCapture;
use crate::support::fixtures::{
    build_notes_and_contacts, contact_anonymised, contact_days_old, db_with_tables, fixed_now,
    json_keys, ledger_summary, note_days_old, note_exists, readme_rules, scope_a, tenant_a,
};
use crate::support::models::*;
use cohort::ledger::FailureKind;
use cohort::{Options, RunStatus};

// contract: A9, X5
#[tokio::test]
async fn a_database_failure_is_stored_as_a_sanitized_envelope_and_logged_in_full() {
    let db = db_with_tables().await;
    db.exec(
        "CREATE FUNCTION public.refuse_delete() RETURNS trigger LANGUAGE plpgsql AS \
         $$ BEGIN RAISE EXCEPTION 'secret-value-42'; END $$; \
         CREATE TRIGGER refuse_delete BEFORE DELETE ON public.session_notes \
         FOR EACH ROW EXECUTE FUNCTION public.refuse_delete();",
    )
    .await;
    let cohort = build_notes_and_contacts(&db, readme_rules(), Options::default()).await;
    let old = note_days_old(&db, tenant_a(), 40).await;
    let old_contact = contact_days_old(&db, tenant_a(), 400).await;
    let logs = LogCapture::start();
    let result = cohort.sweep(&scope_a(), fixed_now()).await.expect("sweep");
    assert_eq!(result.status, RunStatus::PartiallyFailed, "{result:#?}");
    assert!(note_exists(&db, old).await);
    assert!(contact_anonymised(&db, old_contact).await);
    assert_eq!(result.entity_failures.len(), 1);
    let failure = &result.entity_failures[0].failure;
    assert_eq!(failure.kind, FailureKind::Database);
    assert_eq!(failure.sqlstate.as_deref(), Some("P0001"));
    let diagnostic_id = failure.diagnostic_id.to_string();

    let run_error: String = sqlx::query_scalar("SELECT error FROM sweep_run WHERE run_id = $1")
        .bind(result.run_id)
        .fetch_one(db.pool())
        .await
        .expect("run error");
    let (status, _, _, _, _, _, _, summary_error) =
        ledger_summary(&db, result.run_id, "SessionNote").await;
    assert_eq!(status, "Failed");
    let summary_error = summary_error.expect("summary error");
    for stored in [&run_error, &summary_error] {
        assert!(!stored.contains("secret"), "{stored}");
        assert!(!stored.contains("RAISE"), "{stored}");
    }
    let envelope: serde_json::Value = serde_json::from_str(&summary_error).expect("JSON");
    assert_eq!(json_keys(&envelope), ["diagnostic_id", "kind", "sqlstate"]);
    assert_eq!(envelope["kind"], "Database");
    assert_eq!(envelope["sqlstate"], "P0001");
    assert_eq!(envelope["diagnostic_id"], diagnostic_id.as_str());
    let run_error: serde_json::Value = serde_json::from_str(&run_error).expect("JSON");
    let entries = run_error.as_array().expect("a list of failed entities");
    assert_eq!(entries.len(), 1);
    assert_eq!(json_keys(&entries[0]), ["entity_id", "failure"]);
    assert_eq!(entries[0]["entity_id"], NOTE_ID);
    assert_eq!(entries[0]["failure"], envelope);

    // The log carries the full error under the same diagnostic id.
    let logged = logs.text();
    let line = logged
        .lines()
        .find(|l| l.contains(&diagnostic_id))
        .unwrap_or_else(|| panic!("no log line with {diagnostic_id}: {logged}"));
    assert!(line.contains("secret-value-42"), "{line}");
}
