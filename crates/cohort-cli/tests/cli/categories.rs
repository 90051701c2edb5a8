//! A category from a column in the model file (contract SL3):
//! `category_from` and `[entity.category_map]`, swept class by class, shown
//! by the schedule and coverage, and mistakes at their lines.

use crate::common::*;

const TENANT: &str = "2b0c6e1e-5d4c-4a8e-9a59-1f3c1d0e7a21";
const NOW: &str = "2030-01-01T00:00:00Z";

const MODEL: &str = r#"[[entity]]
id = "7a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
table = "documents"
category_from = "kind"
category = "drafts"
anchor = "created_at"
erasure_subjects = ["owner_email"]

[entity.category_map]
invoice = "invoices"
receipt = "receipts"

[rules.invoices]
strategy = "purge"
period = "400 days"

[rules.receipts]
strategy = "purge"
period = "200 days"

[rules.drafts]
strategy = "purge"
period = "30 days"
"#;

async fn project() -> Project {
    let p = Project::new().await;
    assert_success(&p.cohort(&["init"]));
    assert_success(&p.cohort(&["schema", "migrate"]));
    p.write("cohort-model.toml", MODEL);
    p.db.exec(
        "CREATE TABLE documents (id bigint PRIMARY KEY, tenant_id uuid NOT NULL, \
         created_at timestamptz NOT NULL, kind text, owner_email text); \
         CREATE INDEX ON documents (tenant_id, created_at, id);",
    )
    .await;
    p
}

// contract: SL3
#[tokio::test]
async fn the_model_files_category_map_sweeps_each_class_by_its_rule() {
    let p = project().await;
    sqlx::query(
        "INSERT INTO documents (id, tenant_id, created_at, kind) VALUES \
         (1, $1, '2028-10-01', 'invoice'), (2, $1, '2029-06-01', 'invoice'), \
         (3, $1, '2029-06-01', 'receipt'), (4, $1, '2029-11-01', 'memo'), \
         (5, $1, '2029-12-20', NULL)",
    )
    .bind(uuid::Uuid::parse_str(TENANT).expect("tenant"))
    .execute(p.db.pool())
    .await
    .expect("insert documents");
    assert_success(&p.cohort(&["validate"]));

    let out = p.cohort(&["sweep", "--tenant", TENANT, "--now", NOW, "--json"]);
    assert_success(&out);
    let v = json(&out);
    let by_class: Vec<(String, u64)> = v["summaries"]
        .as_array()
        .expect("summaries")
        .iter()
        .map(|s| {
            (
                s["category"].as_str().unwrap_or_default().to_owned(),
                s["affected"].as_u64().unwrap_or(u64::MAX),
            )
        })
        .collect();
    assert_eq!(
        by_class,
        vec![
            ("invoices".to_owned(), 1),
            ("receipts".to_owned(), 1),
            ("drafts".to_owned(), 1)
        ],
        "{v:#}"
    );
    let left: Vec<i64> = sqlx::query_scalar("SELECT id FROM documents ORDER BY id")
        .fetch_all(p.db.pool())
        .await
        .expect("documents");
    assert_eq!(left, vec![2, 5]);

    let out = p.cohort(&["schedule"]);
    assert_success(&out);
    let md = stdout(&out);
    for needle in [
        "| invoices | `public.documents` | purge |",
        "- Only the rows whose `kind` is `invoice` (each row's category comes from it).",
        "- Only the rows whose `kind` is a value no other category names (empty included)",
    ] {
        assert!(md.contains(needle), "missing {needle:?} in:\n{md}");
    }
}

// contract: SL3
#[tokio::test]
async fn a_category_map_naming_a_category_without_a_rule_is_refused_at_its_line() {
    let p = project().await;
    p.write(
        "cohort-model.toml",
        &MODEL.replace(
            "receipt = \"receipts\"",
            "receipt = \"receipts\"\nnote = \"notes\"",
        ),
    );
    let out = p.cohort(&["validate", "--offline"]);
    assert_code(&out, 3);
    let text = stdout(&out);
    assert!(
        text.contains("cohort-model.toml:12:") && text.contains("no rule for category \"notes\""),
        "{text}"
    );
    // Without a default, a text column can hold values no category maps.
    p.write(
        "cohort-model.toml",
        &MODEL.replace("category = \"drafts\"\n", ""),
    );
    let out = p.cohort(&["validate"]);
    assert_code(&out, 3);
    let text = stdout(&out);
    assert!(text.contains("the category map has no default"), "{text}");
}
