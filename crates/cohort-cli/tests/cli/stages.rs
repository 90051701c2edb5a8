//! Staged rules in the model file (contract SL1): `[[rules.<category>.stage]]`
//! lists every stage; the sweep runs them in order with a summary each; the
//! schedule shows them; a bad stage list is refused at its lines.

use crate::common::*;

const TENANT: &str = "2b0c6e1e-5d4c-4a8e-9a59-1f3c1d0e7a21";
const NOW: &str = "2030-01-01T00:00:00Z";

const SINGLE: &str = "[rules.audit-notes]\nstrategy = \"soft-delete\"\nperiod = \"P1Y\"\n";
const STAGED: &str = "[rules.audit-notes]\nsource = \"notes-policy\"\n\n\
[[rules.audit-notes.stage]]\nstrategy = \"soft-delete\"\nperiod = \"P1Y\"\n\n\
[[rules.audit-notes.stage]]\nstrategy = \"purge\"\nperiod = \"30 days\"\n";

fn stage_the_audit_notes(p: &Project, rules: &str) {
    let path = p.dir.join("cohort-model.toml");
    let model = std::fs::read_to_string(&path).expect("model file");
    assert!(
        model.contains(SINGLE),
        "the sample's audit-notes rule changed"
    );
    std::fs::write(&path, model.replace(SINGLE, rules)).expect("write model");
}

// contract: SL1
#[tokio::test]
async fn a_staged_rule_in_the_model_file_soft_deletes_then_purges() {
    let p = Project::new().await;
    p.sample().await;
    stage_the_audit_notes(&p, STAGED);
    sqlx::query(
        "INSERT INTO audit_notes (id, tenant_id, body, created_at, is_deleted, deleted_at) VALUES \
         (1, $1, 'old, live', '2027-01-01', false, NULL), \
         (2, $1, 'soft-deleted 40 days ago', '2026-01-01', true, '2029-11-22'), \
         (3, $1, 'soft-deleted 20 days ago', '2026-01-01', true, '2029-12-12')",
    )
    .bind(uuid::Uuid::parse_str(TENANT).expect("tenant"))
    .execute(p.db.pool())
    .await
    .expect("insert notes");

    assert_success(&p.cohort(&["validate"]));
    let out = p.cohort(&["sweep", "--tenant", TENANT, "--now", NOW, "--json"]);
    assert_success(&out);
    let v = json(&out);
    let notes: Vec<(String, u64)> = v["summaries"]
        .as_array()
        .expect("summaries")
        .iter()
        .filter(|s| s["entity"] == "audit_notes")
        .map(|s| {
            (
                s["strategy"].as_str().unwrap_or_default().to_owned(),
                s["affected"].as_u64().unwrap_or(u64::MAX),
            )
        })
        .collect();
    assert_eq!(
        notes,
        vec![("SoftDelete".to_owned(), 1), ("Purge".to_owned(), 1)],
        "{v:#}"
    );
    let left: Vec<(i64, bool)> =
        sqlx::query_as("SELECT id, is_deleted FROM audit_notes ORDER BY id")
            .fetch_all(p.db.pool())
            .await
            .expect("notes");
    assert_eq!(left, vec![(1, true), (3, true)]);

    let out = p.cohort(&["schedule"]);
    assert_success(&out);
    let md = stdout(&out);
    for needle in [
        "| audit-notes | `public.audit_notes` | soft-delete → purge | 1 year (`P1Y`), then 30 days (`P30D`) |",
        "  1. soft-delete, 1 year (`P1Y`) after the anchor",
        "  2. purge, 30 days (`P30D`) after the soft-delete stage's deleted_at",
    ] {
        assert!(md.contains(needle), "missing {needle:?} in:\n{md}");
    }
    let out = p.cohort(&["schedule", "--json"]);
    let v = json(&out);
    let notes = v["categories"]
        .as_array()
        .expect("categories")
        .iter()
        .find(|c| c["category"] == "audit-notes")
        .expect("audit-notes");
    assert_eq!(notes["stages"][1]["strategy"], "Purge", "{notes:#}");
    assert_eq!(notes["stages"][1]["after"], "deleted_at", "{notes:#}");
}

// contract: SL1
#[tokio::test]
async fn a_bad_stage_list_is_refused_at_its_lines_all_at_once() {
    let p = Project::new().await;
    p.sample().await;
    stage_the_audit_notes(
        &p,
        "[rules.audit-notes]\nstrategy = \"purge\"\n\n\
         [[rules.audit-notes.stage]]\nstrategy = \"purge\"\nperiod = \"30d\"\n\n\
         [[rules.audit-notes.stage]]\nstrategy = \"soft-delete\"\nperiod = \"0\"\n",
    );
    let out = p.cohort(&["validate", "--offline"]);
    assert_code(&out, 3);
    let text = stdout(&out);
    for needle in [
        "rules.audit-notes.strategy: a staged rule lists every stage under [[rules.audit-notes.stage]]",
        "rules.audit-notes.stage[1]: stage 2 has a zero period",
        "rules.audit-notes.stage[1]: stage 2 follows a purge",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
}

const ARCHIVED: &str = "[rules.audit-notes]\narchive = \"archive\"\n\n\
[[rules.audit-notes.stage]]\nstrategy = \"archive\"\nperiod = \"P1Y\"\n\n\
[[rules.audit-notes.stage]]\nstrategy = \"purge\"\nperiod = \"30 days\"\n";

// contract: SL2
#[tokio::test]
async fn the_model_files_archive_rule_gets_its_ddl_and_moves_rows_to_the_archive() {
    let p = Project::new().await;
    p.sample().await;
    stage_the_audit_notes(&p, ARCHIVED);
    sqlx::query(
        "INSERT INTO audit_notes (id, tenant_id, body, created_at) VALUES \
         (1, $1, 'old', '2027-01-01'), (2, $1, 'young', '2029-12-01')",
    )
    .bind(uuid::Uuid::parse_str(TENANT).expect("tenant"))
    .execute(p.db.pool())
    .await
    .expect("insert notes");

    // Before its archive table exists, validate says so and gives the DDL.
    let out = p.cohort(&["validate"]);
    assert_code(&out, 3);
    let text = stdout(&out);
    assert!(
        text.contains("the archive table archive.audit_notes does not exist"),
        "{text}"
    );
    let out = p.cohort(&["schema", "archive"]);
    assert_success(&out);
    let ddl = stdout(&out);
    assert!(
        ddl.contains(
            "CREATE TABLE IF NOT EXISTS \"archive\".\"audit_notes\" (LIKE \"public\".\"audit_notes\");"
        ),
        "{ddl}"
    );
    p.db.exec(&ddl).await;
    // Idempotent: applying it again changes nothing.
    p.db.exec(&ddl).await;
    assert_success(&p.cohort(&["validate"]));

    let out = p.cohort(&["sweep", "--tenant", TENANT, "--now", NOW, "--json"]);
    assert_success(&out);
    let v = json(&out);
    let notes: Vec<(String, String, u64)> = v["summaries"]
        .as_array()
        .expect("summaries")
        .iter()
        .filter(|s| s["entity"] == "audit_notes")
        .map(|s| {
            (
                s["category"].as_str().unwrap_or_default().to_owned(),
                s["strategy"].as_str().unwrap_or_default().to_owned(),
                s["affected"].as_u64().unwrap_or(u64::MAX),
            )
        })
        .collect();
    assert_eq!(
        notes,
        vec![
            ("audit-notes".to_owned(), "Archive".to_owned(), 1),
            ("audit-notes:archive".to_owned(), "Purge".to_owned(), 0),
        ],
        "{v:#}"
    );
    let archived: Vec<(i64, String)> =
        sqlx::query_as("SELECT id, body FROM archive.audit_notes ORDER BY id")
            .fetch_all(p.db.pool())
            .await
            .expect("archive");
    assert_eq!(archived, vec![(1, "old".to_owned())]);
}

// contract: SL2
#[tokio::test]
async fn an_archive_rule_without_its_schema_and_a_schema_without_archiving_are_refused() {
    let p = Project::new().await;
    p.sample().await;
    stage_the_audit_notes(
        &p,
        "[rules.audit-notes]\nstrategy = \"archive\"\nperiod = \"P1Y\"\n",
    );
    let out = p.cohort(&["validate", "--offline"]);
    assert_code(&out, 3);
    let text = stdout(&out);
    assert!(
        text.contains("rules.audit-notes.archive: the category may archive: name the schema"),
        "{text}"
    );
    stage_the_audit_notes_again(
        &p,
        "[rules.audit-notes]\nstrategy = \"archive\"\nperiod = \"P1Y\"\n",
        "[rules.audit-notes]\nstrategy = \"purge\"\nperiod = \"P1Y\"\narchive = \"archive\"\n",
    );
    let out = p.cohort(&["validate", "--offline"]);
    assert_code(&out, 3);
    let text = stdout(&out);
    assert!(
        text.contains("but no strategy of the category archives"),
        "{text}"
    );
}

fn stage_the_audit_notes_again(p: &Project, from: &str, to: &str) {
    let path = p.dir.join("cohort-model.toml");
    let model = std::fs::read_to_string(&path).expect("model file");
    assert!(model.contains(from), "the rule to replace is not there");
    std::fs::write(&path, model.replace(from, to)).expect("write model");
}
