//! `cohort sweep --vacuum ROWS` (contract OB3): the tables the sweep changed
//! at least ROWS rows in are vacuumed after it, and the result says so.

use crate::common::*;

const TENANT: &str = "2b0c6e1e-5d4c-4a8e-9a59-1f3c1d0e7a21";
const NOW: &str = "2030-01-01T00:00:00Z";

// contract: OB3
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweep_vacuum_vacuums_the_tables_the_sweep_changed_and_says_so() {
    let p = Project::new().await;
    p.sample().await;
    p.db.exec(&format!(
        "INSERT INTO users (id, tenant_id, email, full_name, phone, last_seen_at) VALUES \
           ('b0b00000-0000-4000-8000-000000000002', '{TENANT}', 'bob@example.org', 'Bob', NULL, '2029-12-01T00:00:00Z'); \
         INSERT INTO sessions (id, tenant_id, user_id, ip, user_agent, created_at) \
         SELECT gen_random_uuid(), '{TENANT}', 'b0b00000-0000-4000-8000-000000000002', '10.0.0.1', 'x', \
                '2029-11-01T00:00:00Z'::timestamptz + g * interval '1 second' FROM generate_series(1, 40) g;"
    ))
    .await;
    let out = p.cohort(&[
        "sweep", "--tenant", TENANT, "--now", NOW, "--vacuum", "10", "--json",
    ]);
    assert_success(&out);
    let run = json(&out);
    let tables = run["tables"].as_array().expect("tables with --vacuum");
    let sessions = tables
        .iter()
        .find(|t| t["table"] == "public.sessions")
        .expect("the sessions table");
    assert_eq!(sessions["changed"], 40, "{run}");
    assert!(sessions["vacuum"]["Vacuumed"]["millis"].is_u64(), "{run}");
    assert_eq!(sessions["dead_tuples"], 0, "{run}");
    // Without the flag, the JSON is as before.
    let out = p.cohort(&["sweep", "--tenant", TENANT, "--now", NOW, "--json"]);
    assert_success(&out);
    assert!(json(&out).get("tables").is_none());
    let text = p.cohort(&["sweep", "--tenant", TENANT, "--now", NOW, "--vacuum", "1"]);
    assert_success(&text);
}

// contract: OB2
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_the_backlog_and_fails_past_the_threshold() {
    let p = Project::new().await;
    p.sample().await;
    p.db.exec(&format!(
        "INSERT INTO sessions (id, tenant_id, user_id, ip, user_agent, created_at) \
         SELECT gen_random_uuid(), '{TENANT}', gen_random_uuid(), '10.0.0.1', 'x', \
                '2029-10-01T00:00:00Z'::timestamptz + g * interval '1 day' FROM generate_series(1, 6) g;"
    ))
    .await;
    let out = p.cohort(&["status", "--tenant", TENANT, "--now", NOW, "--json"]);
    assert_success(&out);
    let status = json(&out);
    let sessions = status["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .find(|e| e["entity"] == "sessions")
        .expect("sessions");
    // 30-day period at 2030-01-01: created 2029-10-02..07, all past the cutoff.
    assert_eq!(sessions["overdue"], 6, "{status}");
    assert_eq!(sessions["reason"], "never_swept", "{status}");
    assert_eq!(
        sessions["oldest_overdue"], "2029-10-02T00:00:00.000000Z",
        "{status}"
    );
    // 2029-10-02 is 61 days before the cutoff 2029-12-02.
    assert_eq!(sessions["overdue_days"], 61.0, "{status}");
    let out = p.cohort(&[
        "status",
        "--tenant",
        TENANT,
        "--now",
        NOW,
        "--max-overdue-days",
        "30",
    ]);
    assert_code(&out, 3);
    assert!(stdout(&out).contains("never_swept"), "{}", stdout(&out));

    assert_success(&p.cohort(&["sweep", "--tenant", TENANT, "--now", NOW]));
    let out = p.cohort(&[
        "status",
        "--tenant",
        TENANT,
        "--now",
        NOW,
        "--max-overdue-days",
        "30",
        "--json",
    ]);
    assert_success(&out);
    assert_eq!(json(&out)["overdue"], 0, "{}", stdout(&out));
}
