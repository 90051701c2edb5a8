//! K3: every reading command prints a human table by default and `--json`
//! for scripts, with stable field names: snapshots of both, with run ids,
//! hold creation times and other database-clock times redacted. Along the
//! way: holds add/list/remove/prune, sweep, erase and runs list/show (K1).

use crate::common::*;

const TENANT: &str = "2b0c6e1e-5d4c-4a8e-9a59-1f3c1d0e7a21";
const NOW: &str = "2030-01-01T00:00:00Z";
const HOLD: &str = "7d1f0f5e-0c3b-4d8e-9a1b-2c3d4e5f6a7b";
const CAROL: &str = "ca201000-0000-4000-8000-000000000003";
const BOB: &str = "b0b00000-0000-4000-8000-000000000002";

/// Data at fixed times before `NOW`.
fn data() -> String {
    format!(
        "INSERT INTO users (id, tenant_id, email, full_name, phone, last_seen_at) VALUES \
           ('a11ce000-0000-4000-8000-000000000001', '{TENANT}', 'alice@example.org', 'Alice Archer', '+44 20 7946 0001', '2027-01-01T00:00:00Z'), \
           ('{BOB}', '{TENANT}', 'bob@example.org', 'Bob Baker', '+44 20 7946 0002', '2029-12-01T00:00:00Z'), \
           ('{CAROL}', '{TENANT}', 'carol@example.org', 'Carol Cooper', NULL, '2027-06-01T00:00:00Z'), \
           ('e7e00000-0000-4000-8000-000000000005', '{TENANT}', 'eve@example.org', 'Eve Evans', NULL, NULL); \
         INSERT INTO orders (id, tenant_id, user_id, total_cents, shipping_address, placed_at) VALUES \
           (1, '{TENANT}', '{BOB}', 4200, '2 Baker Lane', '2021-06-01T00:00:00Z'), \
           (2, '{TENANT}', '{BOB}', 1500, '2 Baker Lane', '2025-01-01T00:00:00Z'); \
         INSERT INTO sessions (id, tenant_id, user_id, ip, user_agent, created_at) VALUES \
           ('5e551000-0000-4000-8000-000000000001', '{TENANT}', '{BOB}', '10.0.0.1', 'Mozilla/5.0', '2029-11-01T00:00:00Z'), \
           ('5e551000-0000-4000-8000-000000000002', '{TENANT}', '{BOB}', '10.0.0.2', 'Mozilla/5.0', '2029-12-20T00:00:00Z'), \
           ('5e551000-0000-4000-8000-000000000003', '{TENANT}', '{CAROL}', '10.0.0.3', 'Mozilla/5.0', '2029-10-01T00:00:00Z'); \
         INSERT INTO audit_notes (id, tenant_id, body, created_at) VALUES \
           (1, '{TENANT}', 'old', '2028-06-01T00:00:00Z'), (2, '{TENANT}', 'new', '2029-06-01T00:00:00Z'); \
         INSERT INTO countries (code, name) VALUES ('DE', 'Germany');"
    )
}

/// Redacts what changes from run to run: run ids, every time the database
/// clock gave (today's and yesterday's dates; the data's own times are
/// fixed and years away), and Cohort's schema version.
fn settings(runs: &[(&str, &str)]) -> insta::Settings {
    let mut s = insta::Settings::clone_current();
    s.set_prepend_module_to_snapshot(false);
    for (id, name) in runs {
        s.add_filter(&regex_escape(id), *name);
        // The short form narrow tables show (the first 8 hex digits).
        if let Some(short) = id.get(..8) {
            s.add_filter(&format!(r"\b{}\b", regex_escape(short)), "[run id]");
        }
    }
    // Cohort's schema version grows with the library's migrations; the
    // shape of the output does not.
    s.add_filter(
        r"installed version: \d+, required: \d+",
        "installed version: [N], required: [N]",
    );
    s.add_filter(
        r#""(installed|required)_version": \d+"#,
        r#""${1}_version": [N]"#,
    );
    let today = chrono::Utc::now().date_naive();
    for d in [
        today,
        today.pred_opt().unwrap_or(today),
        today.succ_opt().unwrap_or(today),
    ] {
        s.add_filter(
            &format!(r"{d}T\d\d:\d\d:\d\d\.\d{{6}}Z"),
            "[database clock           ]",
        );
        s.add_filter(&format!(r"{d} \d\d:\d\d:\d\dZ"), "[database clock    ]");
    }
    s
}

fn regex_escape(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c.to_string()
            } else {
                format!("\\{c}")
            }
        })
        .collect()
}

/// Runs a command twice, for people and with `--json`; both must succeed.
fn both(p: &Project, args: &[&str]) -> (String, String) {
    let out = p.cohort(args);
    assert_success(&out);
    let human = stdout(&out);
    let mut j: Vec<&str> = args.to_vec();
    j.push("--json");
    let out = p.cohort(&j);
    assert_success(&out);
    // Valid JSON, kept as the command printed it.
    let _ = json(&out);
    (human, stdout(&out))
}

// contract: K3
#[tokio::test]
async fn reading_commands_print_tables_and_stable_json() {
    let p = Project::new().await;
    p.sample().await;
    p.db.exec(&data()).await;

    let mut human: Vec<(&str, String)> = Vec::new();
    let mut machine: Vec<(&str, String)> = Vec::new();
    let (h, m) = both(&p, &["schema", "check"]);
    human.push(("schema_check", h));
    machine.push(("schema_check", m));
    let (h, m) = both(&p, &["validate"]);
    human.push(("validate", h));
    machine.push(("validate", m));
    let (h, m) = both(&p, &["preview", "--tenant", TENANT, "--now", NOW]);
    human.push(("preview", h));
    machine.push(("preview", m));
    let out = p.cohort(&[
        "holds",
        "add",
        "--entity",
        "users",
        "--record",
        CAROL,
        "--tenant",
        TENANT,
        "--reason",
        "Litigation hold - case #12345",
        "--expires",
        "2031-01-01T00:00:00Z",
        "--hold-id",
        HOLD,
    ]);
    assert_success(&out);
    human.push(("holds_add", stdout(&out)));
    let (h, m) = both(&p, &["holds", "list"]);
    human.push(("holds_list", h));
    machine.push(("holds_list", m));
    let (h, m) = both(&p, &["preview", "--tenant", TENANT, "--now", NOW]);
    human.push(("preview_with_hold", h));
    machine.push(("preview_with_hold", m));

    let out = p.cohort(&["sweep", "--tenant", TENANT, "--now", NOW, "--json"]);
    assert_success(&out);
    let sweep = json(&out);
    let sweep_id = sweep["run_id"].as_str().expect("run_id").to_owned();
    machine.push(("sweep", stdout(&out)));
    let out = p.cohort(&["erase", "--tenant", TENANT, "--subject", BOB, "--now", NOW]);
    assert_success(&out);
    let erase_id = stdout(&out)
        .split_whitespace()
        .nth(2)
        .expect("Erasure run <id>")
        .to_owned();
    human.push(("erase", stdout(&out)));

    let (h, m) = both(&p, &["runs", "list"]);
    human.push(("runs_list", h));
    machine.push(("runs_list", m));
    let (h, m) = both(&p, &["runs", "show", &sweep_id, "--rows", "5"]);
    human.push(("runs_show", h));
    machine.push(("runs_show", m));
    let (h, m) = both(&p, &["coverage"]);
    human.push(("coverage", h));
    machine.push(("coverage", m));
    let out = p.cohort(&["holds", "remove", HOLD, "--at", "2030-06-01T00:00:00Z"]);
    assert_success(&out);
    human.push(("holds_remove", stdout(&out)));
    let (h, m) = both(&p, &["holds", "prune"]);
    human.push(("holds_prune", h));
    machine.push(("holds_prune", m));
    let out = p.cohort(&["schema", "sql", "--json"]);
    assert_success(&out);
    let migrations = json(&out);
    assert_eq!(migrations[0]["version"], 1);
    assert!(
        migrations[0]["up"]
            .as_str()
            .is_some_and(|s| s.contains("CREATE TABLE IF NOT EXISTS \"public\".\"sweep_run\""))
    );

    // What happened, independently of the snapshots.
    assert_eq!(sweep["status"], "Succeeded");
    let users = sweep["summaries"]
        .as_array()
        .and_then(|a| a.iter().find(|s| s["entity"] == "users"))
        .expect("users");
    assert_eq!(
        (users["affected"].as_u64(), users["held"].as_u64()),
        (Some(1), Some(1))
    );
    let carol: Option<String> = sqlx::query_scalar("SELECT email FROM users WHERE id = $1::uuid")
        .bind(CAROL)
        .fetch_one(p.db.pool())
        .await
        .expect("carol");
    assert_eq!(
        carol.as_deref(),
        Some("carol@example.org"),
        "held row untouched"
    );

    settings(&[
        (&sweep_id, "[sweep run id                      ]"),
        (&erase_id, "[erasure run id                    ]"),
    ])
    .bind(|| {
        for (name, text) in &human {
            insta::assert_snapshot!(format!("{name}_human"), text);
        }
        for (name, text) in &machine {
            insta::assert_snapshot!(format!("{name}_json"), text);
        }
    });
}
