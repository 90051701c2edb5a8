//! Exempt types (contract M1): reported with their reason by preview and
//! sweep.

use crate::support::fixtures::{db_with_tables, fixed_now, readme_rules, scope_a};
use crate::support::models::*;
use cohort::{Cohort, SweepOptions};
use uuid::Uuid;

#[allow(dead_code, reason = "mirrors a table; only its descriptor is read")]
#[derive(cohort::Retained)]
#[cohort(
    exempt = "statutory accounting records, kept outside Cohort",
    table = "invoices"
)]
struct Invoice {
    id: Uuid,
    tenant_id: Uuid,
}

// contract: M1
#[tokio::test]
async fn exempt_types_are_reported_with_their_reason_by_preview_and_sweep() {
    let db = db_with_tables().await;
    db.exec("CREATE TABLE public.invoices (id uuid PRIMARY KEY, tenant_id uuid NOT NULL);")
        .await;
    let cohort = Cohort::builder(db.pool().clone())
        .rules(readme_rules())
        .entity::<SessionNote>()
        .entity::<Invoice>()
        .build()
        .await
        .expect("model");
    let reported = |exempt: &[cohort::ExemptType]| -> Vec<(&'static str, &'static str)> {
        exempt.iter().map(|e| (e.entity_type, e.reason)).collect()
    };
    let expected = vec![(
        "Invoice",
        "statutory accounting records, kept outside Cohort",
    )];
    let preview = cohort
        .preview(&scope_a(), fixed_now())
        .await
        .expect("preview");
    assert_eq!(reported(&preview.exempt), expected);
    assert!(!preview.entries.is_empty());
    assert!(preview.entries.iter().all(|e| e.entity_type != "Invoice"));
    let result = cohort.sweep(&scope_a(), fixed_now()).await.expect("sweep");
    assert_eq!(reported(&result.exempt), expected);
    assert!(!result.summaries.is_empty());
    assert!(result.summaries.iter().all(|s| s.entity_type != "Invoice"));
    let dry = cohort
        .sweep_with(&scope_a(), fixed_now(), SweepOptions::default().dry_run())
        .await
        .expect("dry run");
    assert_eq!(reported(&dry.exempt), expected);
}
