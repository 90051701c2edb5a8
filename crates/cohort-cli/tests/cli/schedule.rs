//! K6: the retention schedule, in Markdown, from the model and its rules.

use crate::common::*;

// contract: K6
#[tokio::test]
async fn schedule_documents_every_category_from_the_model() {
    let p = Project::new().await;
    // No database needed: the schedule comes from the files alone.
    assert_success(&p.cohort(&["init"]));
    let out = run(command_in(&p.dir, None, &["schedule"]));
    assert_success(&out);
    let md = stdout(&out);
    // Per category: its tables, period, legal minimum and strategy.
    for needle in [
        "# Retention schedule",
        "| accounts | `public.users` | anonymise | 2 years (`P2Y`) | 30 days (`P30D`) | 1 |",
        "| orders | `public.orders` | purge | 7 years (`P7Y`) | 7 years (`P7Y`) | 0 |",
        "| sessions | `public.sessions` | purge | 30 days (`P30D`) | none | 0 |",
        "| audit-notes | `public.audit_notes` | soft-delete | 1 year (`P1Y`) | none | 0 |",
        "## Category `accounts`",
        "- **Override for jurisdiction DE:** period 1 year (`P1Y`).",
        "- `email`: keyed hash (HMAC-SHA256, hex).",
        "- **Legal basis / reason:** GDPR art. 5(1)(e): storage limitation.",
        // How holds and erasure apply.
        "- Legal holds: a held row is never changed by a sweep or an erasure while its hold is active.",
        "- Erasure: rows where `user_id` equals the data subject: rows are deleted, once older than the legal minimum of 7 years.",
        "- Erasure: no subject column, so erasure requests do not touch this table.",
        "| `public.countries` | reference data: no personal data |",
        "**Legal holds** freeze single rows",
        "**Erasure** (`cohort erase`)",
    ] {
        assert!(md.contains(needle), "missing {needle:?} in:\n{md}");
    }
    insta::assert_snapshot!("schedule_markdown", md);

    // --json: the same facts for scripts.
    let out = run(command_in(&p.dir, None, &["schedule", "--json"]));
    assert_success(&out);
    insta::assert_snapshot!("schedule_json", stdout(&out));
    let v = json(&out);
    assert_eq!(v["categories"][0]["category"], "accounts");
    assert_eq!(v["categories"][0]["period"], "P2Y");
    assert_eq!(
        v["categories"][0]["overrides"][0]["applies_to"],
        "jurisdiction DE"
    );
    assert_eq!(v["categories"][0]["overrides"][0]["period"], "P1Y");
    assert_eq!(v["exempt"][0]["table"], "public.countries");

    // --output writes the same document to a file.
    let out = run(command_in(
        &p.dir,
        None,
        &["schedule", "--output", "schedule.md"],
    ));
    assert_success(&out);
    let file = std::fs::read_to_string(p.dir.join("schedule.md")).expect("written");
    assert_eq!(file.trim_end(), md.trim_end());
}
