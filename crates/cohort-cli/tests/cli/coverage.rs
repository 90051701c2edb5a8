//! K5: coverage classifies every table as retained, exempt (with its
//! reason) or unclassified, flags personal data in unclassified tables by
//! column name and type, and `--fail-on-unclassified` is a CI gate.

use crate::common::*;

fn table<'a>(v: &'a serde_json::Value, schema: &str, name: &str) -> &'a serde_json::Value {
    v["tables"]
        .as_array()
        .and_then(|a| {
            a.iter()
                .find(|t| t["schema"] == schema && t["table"] == name)
        })
        .unwrap_or_else(|| panic!("{schema}.{name} not listed: {v:#}"))
}

// contract: K5
#[tokio::test]
async fn coverage_classifies_every_table_and_flags_personal_data() {
    let p = Project::new().await;
    p.sample().await;
    p.db.exec(
        "CREATE EXTENSION IF NOT EXISTS citext; \
         CREATE TABLE newsletter_signups (id bigint PRIMARY KEY, contact citext, first_name text, client_ip inet, signed_up_at timestamptz); \
         CREATE TABLE feature_flags (key text PRIMARY KEY, enabled boolean NOT NULL); \
         CREATE SCHEMA crm; \
         CREATE TABLE crm.contacts (id bigint PRIMARY KEY, \"PhoneNumber\" text, date_of_birth date, notes text); \
         CREATE TABLE \"Odd \"\"Name\"\"\" (iban text);",
    )
    .await;

    let out = p.cohort(&["coverage", "--json"]);
    assert_success(&out);
    let v = json(&out);

    for t in ["users", "orders", "sessions", "audit_notes"] {
        let row = table(&v, "public", t);
        assert_eq!(row["class"], "retained", "{row}");
        assert!(
            row["category"].is_string() && row["strategy"].is_string(),
            "{row}"
        );
    }
    let countries = table(&v, "public", "countries");
    assert_eq!(countries["class"], "exempt");
    assert_eq!(countries["reason"], "reference data: no personal data");
    for t in ["sweep_run", "retention_holds"] {
        let row = table(&v, "public", t);
        assert_eq!(row["class"], "exempt");
        assert!(
            row["reason"]
                .as_str()
                .is_some_and(|r| r.contains("Cohort's own")),
            "{row}"
        );
    }

    let hints = |schema: &str, t: &str| -> Vec<(String, String, String)> {
        let row = table(&v, schema, t);
        assert_eq!(row["class"], "unclassified", "{row}");
        row["personal_data_hints"]
            .as_array()
            .expect("hints")
            .iter()
            .map(|h| {
                (
                    h["column"].as_str().unwrap_or_default().to_owned(),
                    h["looks_like"].as_str().unwrap_or_default().to_owned(),
                    h["by"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    };
    let s = |a: &str, b: &str, c: &str| (a.to_owned(), b.to_owned(), c.to_owned());
    assert_eq!(
        hints("public", "newsletter_signups"),
        vec![
            s("contact", "email (case-insensitive text)", "type"),
            s("first_name", "name", "name"),
            s("client_ip", "ip address", "name"),
        ]
    );
    assert_eq!(hints("public", "feature_flags"), vec![]);
    assert_eq!(
        hints("crm", "contacts"),
        vec![
            s("PhoneNumber", "phone", "name"),
            s("date_of_birth", "birth date", "name")
        ]
    );
    assert_eq!(
        hints("public", "Odd \"Name\""),
        vec![s("iban", "bank account", "name")]
    );
    assert_eq!(v["counts"]["retained"], 4);
    assert_eq!(v["counts"]["unclassified"], 4);
    assert_eq!(v["counts"]["unclassified_with_personal_data_hints"], 3);

    // For people: the flagged tables stand out.
    let out = p.cohort(&["coverage"]);
    assert_success(&out);
    let text = stdout(&out);
    assert!(
        text.contains("PERSONAL DATA? contact (email (case-insensitive text), by type)"),
        "{text}"
    );
    assert!(
        text.contains("4 unclassified (3 with personal-data hints)"),
        "{text}"
    );

    // The CI gate.
    let out = p.cohort(&["coverage", "--fail-on-unclassified"]);
    assert_code(&out, 3);
    assert!(
        stderr(&out).contains("4 table(s) unclassified"),
        "{}",
        stderr(&out)
    );

    // Classify the rest: the gate opens.
    let mut model = std::fs::read_to_string(p.dir.join("cohort-model.toml")).expect("model");
    for (schema, t) in [
        ("public", "newsletter_signups"),
        ("public", "feature_flags"),
        ("crm", "contacts"),
        ("public", "Odd \\\"Name\\\""),
    ] {
        model.push_str(&format!(
            "\n[[exempt]]\nname = \"{schema}-{}\"\nschema = \"{schema}\"\ntable = \"{t}\"\nreason = \"reviewed: handled elsewhere\"\n",
            t.replace(['"', '\\'], "")
        ));
    }
    p.write("cohort-model.toml", &model);
    let out = p.cohort(&["coverage", "--fail-on-unclassified"]);
    assert_success(&out);
    assert!(stdout(&out).contains("0 unclassified"), "{}", stdout(&out));
}
