//! After a sweep (contract OB3): the dead tuples of the tables it changed,
//! and on request `VACUUM (ANALYZE)` of those it changed enough rows in.
//! In the suite's least-privileged pass (COHORT_TEST_ROLE=least) the engine
//! does not own the tables, and the `VACUUM` is reported as not permitted.

use crate::support::fixtures::{db_with_tables, readme_rules, scope_a, tenant_a};
use crate::support::{BuildEngine, TestDb, count};
use chrono::Utc;
use cohort::{Cohort, SweepOptions, TableMaintenance, VacuumOptions, VacuumOutcome};

async fn old_rows(db: &TestDb, notes: u32, contacts: u32) {
    db.exec(&format!(
        "INSERT INTO session_notes (id, tenant_id, created_at, body) \
         SELECT gen_random_uuid(), '{t}', now() - interval '100 days', 'x' FROM generate_series(1, {notes}); \
         INSERT INTO case_contacts (id, tenant_id, created_at, email, full_name, phone, external_ref) \
         SELECT gen_random_uuid(), '{t}', now() - interval '400 days', 'a@example.org', 'A', '1', 'R' \
         FROM generate_series(1, {contacts});",
        t = tenant_a()
    ))
    .await;
}

fn table<'r>(tables: &'r [TableMaintenance], name: &str) -> &'r TableMaintenance {
    tables
        .iter()
        .find(|t| t.table == name)
        .unwrap_or_else(|| panic!("no {name} in {tables:?}"))
}

// contract: OB3
#[tokio::test]
async fn a_sweep_reports_dead_tuples_and_on_request_vacuums_the_tables_it_changed() {
    let db = db_with_tables().await;
    db.exec(
        "ALTER TABLE session_notes SET (autovacuum_enabled = false); \
         ALTER TABLE case_contacts SET (autovacuum_enabled = false);",
    )
    .await;
    old_rows(&db, 3_000, 50).await;
    let cohort = Cohort::builder(db.engine_pool().clone())
        .rules(readme_rules())
        .entity::<crate::support::models::SessionNote>()
        .entity::<crate::support::models::CaseContact>()
        .build_engine(&db)
        .await
        .expect("model");

    // A dry run changes nothing and reports nothing.
    let dry = cohort
        .sweep_with(&scope_a(), Utc::now(), SweepOptions::default().dry_run())
        .await
        .expect("dry run");
    assert!(dry.tables.is_empty(), "{:?}", dry.tables);

    // Without VACUUM: the dead tuples the sweep left, per table.
    let first = cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    let notes = table(&first.tables, "public.session_notes");
    assert_eq!(
        (notes.changed, &notes.vacuum),
        (3_000, &VacuumOutcome::NotRequested)
    );
    assert!(notes.dead_tuples.is_some_and(|d| d >= 3_000), "{notes:?}");
    let contacts = table(&first.tables, "public.case_contacts");
    assert_eq!(
        (contacts.changed, &contacts.vacuum),
        (50, &VacuumOutcome::NotRequested)
    );
    // Updated in place (HOT), the page pruning that follows may already
    // have reclaimed some: reported, without a lower bound.
    assert!(contacts.dead_tuples.is_some(), "{contacts:?}");

    // With VACUUM above a threshold: the notes table (3,000 changed) is
    // vacuumed when the role may, the contacts (50) are below it.
    old_rows(&db, 3_000, 50).await;
    let second = cohort
        .sweep_with(
            &scope_a(),
            Utc::now(),
            SweepOptions::default().vacuum(VacuumOptions::default().min_rows(1_000)),
        )
        .await
        .expect("sweep with vacuum");
    let notes = table(&second.tables, "public.session_notes");
    let contacts = table(&second.tables, "public.case_contacts");
    assert_eq!(
        (contacts.changed, &contacts.vacuum),
        (50, &VacuumOutcome::BelowThreshold)
    );
    let vacuumed = count(
        &db,
        "SELECT count(*) FROM pg_stat_user_tables WHERE relname = 'session_notes' \
         AND last_vacuum IS NOT NULL AND last_analyze IS NOT NULL",
    )
    .await;
    if db.engine_role().is_some() {
        // The least-privileged role does not own the table.
        assert_eq!(notes.vacuum, VacuumOutcome::NotPermitted, "{notes:?}");
        assert!(notes.dead_tuples.is_some_and(|d| d >= 3_000), "{notes:?}");
        assert_eq!(vacuumed, 0);
    } else {
        assert!(
            matches!(notes.vacuum, VacuumOutcome::Vacuumed { .. }),
            "{notes:?}"
        );
        assert_eq!(notes.dead_tuples, Some(0), "{notes:?}");
        assert_eq!(
            vacuumed, 1,
            "pg_stat_user_tables records the VACUUM and the ANALYZE"
        );
    }
}
