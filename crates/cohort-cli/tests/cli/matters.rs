//! `matters` (issue 25, MH2/MH3): put a data subject on hold, see what it
//! protects per table, sweep around it, release it; bad requests are usage
//! errors (exit 2) in the model file's words.

use crate::common::*;

const TENANT: &str = "2b0c6e1e-5d4c-4a8e-9a59-1f3c1d0e7a21";
const BOB: &str = "b0b00000-0000-4000-8000-000000000002";
const EVE: &str = "e0e00000-0000-4000-8000-000000000005";

async fn count(p: &Project, sql: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
        .fetch_one(p.db.pool())
        .await
        .expect("count")
}

async fn project() -> Project {
    let p = Project::new().await;
    p.sample().await;
    p.db.exec(&format!(
        "INSERT INTO sessions (id, tenant_id, user_id, created_at) VALUES \
           ('50000000-0000-4000-8000-000000000001', '{TENANT}', '{BOB}', now() - interval '200 days'), \
           ('50000000-0000-4000-8000-000000000002', '{TENANT}', '{EVE}', now() - interval '200 days');"
    ))
    .await;
    p
}

// contract: MH2, MH3
#[tokio::test]
async fn a_subject_matter_is_added_shown_swept_around_and_released() {
    let p = project().await;
    let out = p.cohort(&[
        "matters",
        "add",
        "--subject",
        BOB,
        "--tenant",
        TENANT,
        "--reason",
        "case 12345",
        "--owner",
        "legal@example.com",
        "--json",
    ]);
    assert_success(&out);
    let added = json(&out);
    let id = added["matter_id"].as_str().expect("id").to_owned();
    assert_eq!(added["scope"], "subject");
    assert_eq!(added["owner"], "legal@example.com");
    assert_eq!(added["active"], true);

    let out = p.cohort(&["matters", "show", &id, "--json"]);
    assert_success(&out);
    let shown = json(&out);
    let sessions = shown["tables"]
        .as_array()
        .expect("tables")
        .iter()
        .find(|t| t["entity"] == "sessions")
        .expect("sessions")
        .clone();
    assert_eq!(sessions["protected_rows"], 1, "{shown}");

    assert_success(&p.cohort(&["sweep", "--tenant", TENANT]));
    let left = count(
        &p,
        "SELECT count(*) FROM sessions WHERE user_id = 'b0b00000-0000-4000-8000-000000000002'",
    )
    .await;
    assert_eq!(left, 1, "the subject's session stays");
    let gone = count(
        &p,
        "SELECT count(*) FROM sessions WHERE user_id = 'e0e00000-0000-4000-8000-000000000005'",
    )
    .await;
    assert_eq!(gone, 0, "another user's session goes");

    let out = p.cohort(&["matters", "list", "--json"]);
    assert_success(&out);
    assert_eq!(json(&out).as_array().expect("list").len(), 1);
    let out = p.cohort(&["matters", "release", &id]);
    assert_success(&out);
    assert!(stdout(&out).contains("released"), "{}", stdout(&out));
    let out = p.cohort(&["matters", "list", "--json"]);
    assert_eq!(json(&out).as_array().expect("list").len(), 0);
    let out = p.cohort(&["matters", "list", "--all", "--json"]);
    assert_eq!(json(&out).as_array().expect("list").len(), 1);
    // Releasing twice is refused (exit 1).
    assert_code(&p.cohort(&["matters", "release", &id]), 1);
    assert_success(&p.cohort(&["sweep", "--tenant", TENANT]));
    let left = count(
        &p,
        "SELECT count(*) FROM sessions WHERE user_id = 'b0b00000-0000-4000-8000-000000000002'",
    )
    .await;
    assert_eq!(left, 0, "released: the next sweep takes it");
}

// contract: MH2
#[tokio::test]
async fn bad_matters_are_usage_errors_in_the_model_files_words() {
    let p = project().await;
    let out = p.cohort(&[
        "matters", "add", "--tenant", TENANT, "--reason", "r", "--owner", "o",
    ]);
    assert_code(&out, 2);
    assert!(stderr(&out).contains("--subject"), "{}", stderr(&out));
    let out = p.cohort(&[
        "matters",
        "add",
        "--subject",
        BOB,
        "--tenant",
        TENANT,
        "--reason",
        " ",
        "--owner",
        "o",
    ]);
    assert_code(&out, 2);
    assert!(stderr(&out).contains("reason"), "{}", stderr(&out));
    let out = p.cohort(&[
        "matters", "add", "--entity", "sessions", "--reason", "r", "--owner", "o",
    ]);
    assert_code(&out, 2);
    let err = stderr(&out);
    assert!(
        err.contains("table sessions") && err.contains("tenant"),
        "{err}"
    );
    let out = p.cohort(&[
        "matters",
        "add",
        "--entity",
        "sessions",
        "--tenant",
        TENANT,
        "--from",
        "2026-01-01T00:00:00Z",
        "--to",
        "2025-01-01T00:00:00Z",
        "--reason",
        "r",
        "--owner",
        "o",
    ]);
    assert_code(&out, 2);
    assert!(
        stderr(&out).contains("before it starts"),
        "{}",
        stderr(&out)
    );
    assert_eq!(count(&p, "SELECT count(*) FROM retention_matters").await, 0);
}
