//! K2: the model file. Its mistakes are reported all at once, each with
//! file, line and key; on top of them, the library's live-catalog
//! validation; and it has the derive's power (conventions, anonymise
//! methods, subjects, tenantless, exemptions) plus a static rule provider
//! with per-tenant overrides.

use crate::common::*;

/// Five mistakes, one per marked line.
const FIVE_MISTAKES: &str = r#"# five mistakes, one per marked line
[[entity]]
id = "not-a-uuid"
table = "users"
category = "accounts"
anchor = "last_seen_at"
tenantles = true

[[entity]]
id = "0f1b7e52-6a3d-4c1e-9b8a-7d2c5e4f3a10"
table = "orders"
category = "billing"
anchor = "placed_at"

[entity.anonymise]
shipping_address = "scramble"

[rules.accounts]
strategy = "anonymise"
period = "18 mnths"
"#;

const EXPECTED: &[(usize, &str, &str)] = &[
    (3, "entity[0].id", "is not a UUID"),
    (
        7,
        "entity[0].tenantles",
        "unknown key `tenantles`; did you mean `tenantless`?",
    ),
    (12, "entity[1].category", "no rule for category \"billing\""),
    (
        16,
        "entity[1].anonymise.shipping_address",
        "unknown anonymise method \"scramble\"",
    ),
    (20, "rules.accounts.period", "unknown unit \"mnths\""),
];

// contract: K2
#[tokio::test]
async fn five_mistakes_are_reported_at_once_with_file_line_and_key() {
    let p = Project::new().await;
    p.write("cohort-model.toml", FIVE_MISTAKES);

    let out = p.cohort(&["validate", "--offline"]);
    assert_code(&out, 3);
    let text = stdout(&out);
    assert!(
        text.contains("the model file cohort-model.toml has 5 mistake(s):"),
        "{text}"
    );
    let lines: Vec<&str> = text.lines().filter(|l| l.contains(": error: ")).collect();
    assert_eq!(lines.len(), 5, "{text}");
    for ((line, key, says), shown) in EXPECTED.iter().zip(&lines) {
        let prefix = format!("cohort-model.toml:{line}:");
        assert!(
            shown.trim_start().starts_with(&prefix),
            "{shown} should start with {prefix}"
        );
        assert!(
            shown.contains(&format!(": error: {key}: ")),
            "{shown} should name {key}"
        );
        assert!(shown.contains(says), "{shown} should say {says:?}");
    }

    let out = p.cohort(&["validate", "--offline", "--json"]);
    assert_code(&out, 3);
    let v = json(&out);
    let errors = v["model_errors"].as_array().expect("model_errors");
    assert_eq!(errors.len(), 5, "{v:#}");
    for ((line, key, _), e) in EXPECTED.iter().zip(errors) {
        assert_eq!(e["file"], "cohort-model.toml");
        assert_eq!(e["line"].as_u64(), Some(*line as u64), "{e}");
        assert_eq!(e["key"], *key);
        assert!(e["column"].as_u64().is_some_and(|c| c >= 1));
        assert_eq!(e["severity"], "error");
    }
    assert_eq!(v["valid"], false);

    // Any other command refuses the file the same way, as an error (exit 1).
    let out = p.cohort(&["preview", "--tenantless"]);
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(err.contains("has 5 mistake(s)"), "{err}");
    for (line, key, _) in EXPECTED {
        assert!(
            err.contains(&format!("cohort-model.toml:{line}:")) && err.contains(key),
            "{err}"
        );
    }
}

// contract: K2
#[tokio::test]
async fn the_live_catalog_validation_lists_its_own_problems_by_table_and_column() {
    let p = Project::new().await;
    p.sample().await;
    // A model that parses but does not fit the database: an anchor that does
    // not exist, an anchor of the wrong type, a subject column missing, and
    // anonymise without an anonymised-at column.
    p.write(
        "cohort-model.toml",
        r#"
[[entity]]
id = "6b619c19-6e3c-44e8-a87f-975c68fd3988"
table = "users"
category = "accounts"
anchor = "last_login_at"
erasure_subjects = ["user_ref"]

[[entity]]
id = "0f1b7e52-6a3d-4c1e-9b8a-7d2c5e4f3a10"
table = "orders"
category = "orders"
anchor = "shipping_address"

[entity.anonymise]
user_id = "null"

[rules.accounts]
strategy = "purge"
period = "30d"

[rules.orders]
strategy = "anonymise"
period = "1y"
"#,
    );
    let out = p.cohort(&["validate", "--json"]);
    assert_code(&out, 3);
    let v = json(&out);
    assert_eq!(v["model_errors"].as_array().map(Vec::len), Some(0), "{v:#}");
    let problems = v["problems"].as_array().expect("problems");
    let has = |table: &str, column: Option<&str>, says: &str| {
        problems.iter().any(|p| {
            p["table"] == table
                && column.is_none_or(|c| p["column"] == c)
                && p["problem"].as_str().is_some_and(|t| t.contains(says))
        })
    };
    assert!(
        has("public.users", Some("last_login_at"), "missing")
            || has("public.users", Some("last_login_at"), "does not exist"),
        "{v:#}"
    );
    assert!(has("public.users", Some("user_ref"), ""), "{v:#}");
    assert!(
        has(
            "public.orders",
            Some("shipping_address"),
            "timestamp with time zone"
        ),
        "{v:#}"
    );
    assert!(has("public.orders", None, "anonymised-at"), "{v:#}");
    assert!(has("public.orders", Some("user_id"), "NULL"), "{v:#}");
    // The same, for people: one table, every problem at once.
    let out = p.cohort(&["validate"]);
    assert_code(&out, 3);
    let text = stdout(&out);
    assert!(
        text.contains("the model does not fit the database"),
        "{text}"
    );
    assert!(
        text.contains("last_login_at") && text.contains("user_ref"),
        "{text}"
    );
}

// contract: K2
// The descriptor builder's checks (the derive's) apply to the model file's
// entries too: a column name PostgreSQL would truncate, which the file's own
// checks let through, is a problem of its entry, not a crash.
#[tokio::test]
async fn a_name_the_descriptor_builder_refuses_is_a_problem_of_its_entry() {
    let p = Project::new().await;
    p.sample().await;
    let long = "c".repeat(64);
    p.write(
        "cohort-model.toml",
        &format!(
            r#"
[[entity]]
name = "Users"
id = "6b619c19-6e3c-44e8-a87f-975c68fd3988"
table = "users"
category = "accounts"
anchor = "{long}"

[rules.accounts]
strategy = "purge"
period = "30d"
"#
        ),
    );
    let out = p.cohort(&["validate", "--json"]);
    assert_code(&out, 3);
    let v = json(&out);
    assert_eq!(v["model_errors"].as_array().map(Vec::len), Some(0), "{v:#}");
    let problems = v["problems"].as_array().expect("problems");
    assert_eq!(problems.len(), 1, "{v:#}");
    assert_eq!(problems[0]["entity"], "Users", "{v:#}");
    assert_eq!(problems[0]["column"], long.as_str(), "{v:#}");
    assert!(
        problems[0]["problem"]
            .as_str()
            .is_some_and(|t| t.contains("is longer than 63 bytes")),
        "{v:#}"
    );
}

// contract: K2
#[tokio::test]
async fn overrides_conventions_and_built_in_anonymisers_work_like_the_derive() {
    let p = Project::new().await;
    p.sample().await;
    let tenant = "2b0c6e1e-5d4c-4a8e-9a59-1f3c1d0e7a21";
    p.db.exec(&format!(
        "INSERT INTO users (id, tenant_id, email, full_name, phone, last_seen_at) VALUES \
         ('a11ce000-0000-4000-8000-000000000001', '{tenant}', 'alice@example.org', 'Alice', '+44 1234', '2028-06-01T00:00:00Z'), \
         ('b0b00000-0000-4000-8000-000000000002', '{tenant}', 'bob@example.org', 'Bob', '+44 5678', '2026-06-01T00:00:00Z')"
    ))
    .await;
    let now = "2030-01-01T00:00:00Z";
    // Base rule: 2 years, so only bob (2026) is eligible; the DE override
    // (1 year) makes alice (2028-06) eligible too.
    let base = json(&p.cohort(&["preview", "--tenant", tenant, "--now", now, "--json"]));
    let users = |v: &serde_json::Value| {
        v["entries"]
            .as_array()
            .and_then(|a| a.iter().find(|e| e["entity"] == "users").cloned())
            .expect("users entry")
    };
    assert_eq!(users(&base)["eligible"], 1, "{base:#}");
    assert_eq!(users(&base)["cutoff"], "2028-01-01T00:00:00.000000Z");
    let de = json(&p.cohort(&[
        "preview",
        "--tenant",
        tenant,
        "--jurisdiction",
        "DE",
        "--now",
        now,
        "--json",
    ]));
    assert_eq!(users(&de)["eligible"], 2, "{de:#}");
    assert_eq!(users(&de)["cutoff"], "2029-01-01T00:00:00.000000Z");

    // The sweep anonymises with the built-in keyed hash, literal and mask.
    let out = p.cohort(&[
        "sweep",
        "--tenant",
        tenant,
        "--jurisdiction",
        "DE",
        "--now",
        now,
        "--json",
    ]);
    assert_success(&out);
    let v = json(&out);
    assert_eq!(v["status"], "Succeeded");
    let row: (Option<String>, String, Option<String>, bool) = sqlx::query_as(
        "SELECT email, full_name, phone, anonymised_at IS NOT NULL FROM users WHERE id = 'a11ce000-0000-4000-8000-000000000001'",
    )
    .fetch_one(p.db.pool())
    .await
    .expect("alice");
    let email = row.0.expect("hashed, not NULL");
    assert_eq!(email.len(), 64, "HMAC-SHA256 hex: {email}");
    assert!(email.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(row.1, "former user");
    assert_eq!(row.2.as_deref(), Some("******34"));
    assert!(row.3, "anonymised_at stamped (found by convention)");
}

// contract: K2
// Tenantless tables, explicit role columns, soft-delete (refused for
// erasure unless accepted, as the library decides) and per-row audit, all
// from the file.
#[tokio::test]
async fn tenantless_tables_explicit_roles_and_soft_delete_erasure() {
    let p = Project::new().await;
    assert_success(&p.cohort(&["schema", "migrate"]));
    p.db.exec(
        "CREATE TABLE announcements (ref text PRIMARY KEY, author text NOT NULL, published timestamptz, \
                                     hidden boolean NOT NULL DEFAULT false, hidden_at timestamptz); \
         CREATE INDEX announcements_published ON announcements (published); \
         CREATE INDEX announcements_author ON announcements (author); \
         INSERT INTO announcements VALUES ('a-1', 'ann', '2020-01-01T00:00:00Z'), ('a-2', 'ann', '2029-12-31T00:00:00Z'), \
                                          ('a-3', 'bob', '2020-01-01T00:00:00Z'), ('a-4', 'bob', NULL);",
    )
    .await;
    p.write(
        "cohort-model.toml",
        r#"
[[entity]]
name = "Announcement"
id = "5d0c1c2e-8f6b-4c55-9d1e-2f7b6a9c3e10"
table = "announcements"
category = "announcements"
anchor = "published"
record_id = "ref"
tenantless = true
soft_delete = "hidden"
deleted_at = "hidden_at"
erasure_subjects = ["author"]

[rules.announcements]
strategy = "soft-delete"
period = "90 days"
audit = "per-row"
"#,
    );
    let now = "2030-01-01T00:00:00Z";
    let out = p.cohort(&["preview", "--tenantless", "--now", now, "--json"]);
    assert_success(&out);
    let v = json(&out);
    assert_eq!(v["tenant_id"], serde_json::Value::Null);
    assert_eq!(v["entries"][0]["entity"], "Announcement");
    assert_eq!(v["entries"][0]["eligible"], 2);
    assert_eq!(v["entries"][0]["null_anchor"], 1);

    // Erasure of a soft-delete category is refused unless accepted.
    let out = p.cohort(&["erase", "--tenantless", "--subject", "bob", "--now", now]);
    assert_code(&out, 1);
    assert!(stderr(&out).contains("SoftDelete"), "{}", stderr(&out));
    let out = p.cohort(&[
        "erase",
        "--tenantless",
        "--subject",
        "bob",
        "--allow-soft-delete",
        "--now",
        now,
        "--json",
    ]);
    assert_success(&out);
    assert_eq!(
        json(&out)["affected"],
        2,
        "bob's rows, NULL anchor included (no legal minimum)"
    );

    let out = p.cohort(&["sweep", "--tenantless", "--now", now, "--json"]);
    assert_success(&out);
    assert_eq!(json(&out)["affected"], 1, "ann's old announcement");
    let hidden: Vec<(String, bool, bool)> =
        sqlx::query_as("SELECT ref, hidden, hidden_at IS NOT NULL FROM announcements ORDER BY ref")
            .fetch_all(p.db.pool())
            .await
            .expect("rows");
    assert_eq!(
        hidden,
        vec![
            ("a-1".into(), true, true),
            ("a-2".into(), false, false),
            ("a-3".into(), true, true),
            ("a-4".into(), true, true),
        ]
    );
    // Per-row audit: the ledger names each row, for the tenantless nil tenant.
    let out = p.cohort(&["runs", "show", "latest", "--rows", "10", "--json"]);
    assert_success(&out);
    let v = json(&out);
    assert_eq!(
        v["run"]["tenant_id"],
        "00000000-0000-0000-0000-000000000000"
    );
    assert_eq!(v["row_details"], 1);
    assert_eq!(v["rows"][0]["record_id"], "a-1");
    assert_eq!(v["rows"][0]["action"], "SoftDelete");
}

/// `anchor = ["last_login_at", "created_at"]`: the natural way to ask for a
/// fallback is answered with the migration that makes it (a generated
/// column and its index), at the anchor's line.
#[tokio::test]
async fn a_fallback_anchor_list_is_answered_with_the_generated_column_to_add() {
    let p = Project::new().await;
    p.write(
        "cohort-model.toml",
        r#"[[entity]]
id = "0f1b7e52-6a3d-4c1e-9b8a-7d2c5e4f3a11"
table = "customers"
category = "accounts"
anchor = ["last_login_at", "created_at"]
tenantless = true

[rules.accounts]
strategy = "purge"
period = "2 years"
"#,
    );
    let out = p.cohort(&["validate", "--offline"]);
    assert_code(&out, 3);
    let text = stdout(&out);
    assert!(
        text.contains("cohort-model.toml:5:") && text.contains("entity[0].anchor"),
        "{text}"
    );
    assert!(
        text.contains(
            "ALTER TABLE customers ADD COLUMN retention_anchor timestamptz GENERATED ALWAYS AS \
             (COALESCE(last_login_at, created_at)) STORED;"
        ) && text.contains("anchor = \"retention_anchor\""),
        "{text}"
    );
}
