//! `cohort worker`: one occurrence with `--once`, the claim across runs,
//! the kill-switch file, and the long-running worker stopping cleanly on
//! SIGTERM.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common::*;

const TENANT: &str = "2b0c6e1e-5d4c-4a8e-9a59-1f3c1d0e7a21";
const OTHER: &str = "7d1e0f5e-0c3b-4d8e-9a1b-2c3d4e5f6a7b";
const EVENTS: &str = "4e5f6a7b-8c9d-4e0f-a1b2-c3d4e5f6a7b8";
const AT: &str = "2030-01-01T02:00:00Z";

/// Ten old rows per tenant for two tenants, and two recent ones for `TENANT`.
async fn setup(p: &Project, worker_section: &str) {
    assert_success(&p.cohort(&["schema", "migrate"]));
    p.db.exec(&format!(
        "CREATE TABLE events (id bigint PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz NOT NULL); \
         INSERT INTO events SELECT i, CASE WHEN i <= 10 THEN '{TENANT}'::uuid ELSE '{OTHER}'::uuid END, \
                '2020-01-01'::timestamptz + i * interval '1 second' FROM generate_series(1, 20) AS i; \
         INSERT INTO events VALUES (21, '{TENANT}', '2029-12-31'), (22, '{TENANT}', '2029-12-30');"
    ))
    .await;
    p.write(
        "cohort-model.toml",
        &format!(
            r#"
[[entity]]
id = "{EVENTS}"
table = "events"
category = "events"
anchor = "created_at"

[rules.events]
strategy = "purge"
period = "30d"
"#
        ),
    );
    p.write("cohort.toml", worker_section);
}

async fn count(p: &Project, sql: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
        .fetch_one(p.db.pool())
        .await
        .expect("count")
}

// contract: K1 (the `worker` subcommand runs the library's worker: one pass
// per tenant at the occurrence's time, recorded as Scheduled; a second run
// of the same occurrence finds it claimed and sweeps nothing)
#[tokio::test]
async fn worker_once_sweeps_each_tenant_at_the_occurrence_and_claims_it() {
    let p = Project::new().await;
    setup(&p, &format!("[worker]\ntenants = [\"{TENANT}\"]\n")).await;
    // The flag's tenants replace the settings' list.
    let out = p.cohort(&[
        "worker", "--once", "--at", AT, "--tenant", TENANT, "--tenant", OTHER, "--json",
    ]);
    assert_success(&out);
    let j = json(&out);
    assert_eq!(j["occurrence"], "2030-01-01T02:00:00.000000Z", "{j}");
    assert_eq!(j["already_swept"], false, "{j}");
    assert_eq!(j["affected"], 20, "{j}");
    let passes = j["passes"].as_array().expect("passes");
    // Two tenant passes (no tenantless pass: the model has no tenantless
    // table).
    assert_eq!(passes.len(), 2, "{j}");
    assert_eq!(passes[0]["tenant_id"], TENANT);
    assert_eq!(passes[0]["affected"], 10);
    assert_eq!(passes[0]["status"], "Succeeded");
    assert_eq!(passes[1]["tenant_id"], OTHER);
    assert_eq!(passes[1]["affected"], 10);
    // The recent rows stay; the ledger says Scheduled, at the occurrence.
    assert_eq!(count(&p, "SELECT count(*) FROM events").await, 2);
    assert_eq!(
        count(
            &p,
            "SELECT count(*) FROM sweep_run WHERE trigger = 'Scheduled' \
             AND logical_now = '2030-01-01T02:00:00Z' AND status = 'Succeeded'"
        )
        .await,
        2
    );

    // The same occurrence again: claimed, nothing swept, success.
    p.db.exec(&format!(
        "INSERT INTO events VALUES (30, '{TENANT}', '2020-01-01')"
    ))
    .await;
    let again = p.cohort(&["worker", "--once", "--at", AT, "--json"]);
    assert_success(&again);
    let j = json(&again);
    assert_eq!(j["already_swept"], true, "{j}");
    assert_eq!(j["passes"].as_array().map(Vec::len), Some(0), "{j}");
    assert_eq!(count(&p, "SELECT count(*) FROM events").await, 3);

    // A later occurrence, tenants from the settings this time.
    let later = p.cohort(&["worker", "--once", "--at", "2030-01-02T02:00:00Z"]);
    assert_success(&later);
    let text = stdout(&later);
    assert!(
        text.contains("1 pass(es), 1 row(s) changed, 0 failed"),
        "{text}"
    );
    assert!(text.contains(&format!("tenant {TENANT}: run ")), "{text}");
    assert_eq!(count(&p, "SELECT count(*) FROM events").await, 2);
}

// contract: K1 (dry runs and the kill switch reach the worker from the
// settings file: a dry occurrence changes no row; while the kill-switch file
// exists no pass starts)
#[tokio::test]
async fn worker_settings_dry_run_and_kill_switch_file() {
    let p = Project::new().await;
    setup(
        &p,
        &format!(
            "[worker]\ntenants = [\"{TENANT}\"]\ndry_run = true\nkill_switch_file = \"stop\"\n"
        ),
    )
    .await;
    p.write("stop", "");
    let out = p.cohort(&["worker", "--once", "--at", AT, "--json"]);
    assert_success(&out);
    let j = json(&out);
    assert_eq!(j["stopped_by_kill_switch"], true, "{j}");
    assert_eq!(j["passes"].as_array().map(Vec::len), Some(0), "{j}");
    assert_eq!(count(&p, "SELECT count(*) FROM sweep_run").await, 0);

    std::fs::remove_file(p.dir.join("stop")).expect("lift the switch");
    let out = p.cohort(&["worker", "--once", "--at", AT, "--json"]);
    assert_success(&out);
    let j = json(&out);
    assert_eq!(j["dry_run"], true, "{j}");
    assert_eq!(j["affected"], 10, "{j}");
    // A dry run: every row is still there.
    assert_eq!(count(&p, "SELECT count(*) FROM events").await, 22);
    assert_eq!(
        count(
            &p,
            "SELECT count(*) FROM sweep_run WHERE dry_run AND trigger = 'Scheduled'"
        )
        .await,
        1
    );
}

// contract: K1 (a bad schedule is a settings error listed before anything
// runs, exit 1)
#[tokio::test]
async fn a_bad_schedule_is_reported_before_anything_runs() {
    let p = Project::new().await;
    setup(
        &p,
        "[worker]\nschedule = \"every day\"\ntime_zone = \"Mars/Olympus\"\n",
    )
    .await;
    let out = p.cohort(&["worker", "--once"]);
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(err.contains("schedule"), "{err}");
    assert!(err.contains("Mars/Olympus"), "{err}");
    assert_eq!(count(&p, "SELECT count(*) FROM sweep_run").await, 0);
}

// contract: K1 (the long-running worker sweeps on its schedule and exits 0
// on SIGTERM)
#[tokio::test]
async fn the_worker_runs_on_its_schedule_until_sigterm() {
    let p = Project::new().await;
    // Every second (six fields: seconds first).
    setup(
        &p,
        &format!("[worker]\nschedule = \"* * * * * *\"\ntenants = [\"{TENANT}\"]\n"),
    )
    .await;
    let mut child = p
        .command(&["worker", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the worker");
    let deadline = Instant::now() + Duration::from_secs(60);
    while count(
        &p,
        "SELECT count(*) FROM sweep_run WHERE trigger = 'Scheduled' AND status = 'Succeeded'",
    )
    .await
        < 2
    {
        assert!(
            Instant::now() < deadline,
            "no scheduled run within a minute"
        );
        if let Some(status) = child.try_wait().expect("poll the worker") {
            let out = child.wait_with_output().expect("output");
            panic!("the worker exited early ({status}): {}", stderr(&out));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, out) = terminate(child);
    assert_eq!(status.code(), Some(0), "stderr:\n{}", stderr(&out));
    // One JSON line per occurrence.
    let lines: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert!(!lines.is_empty(), "{}", stdout(&out));
    assert!(lines.iter().all(|l| l["occurrence"].is_string()));
    assert_eq!(
        count(
            &p,
            "SELECT count(*) FROM sweep_run WHERE status = 'Started'"
        )
        .await,
        0
    );
    // Only the recent rows are left.
    assert_eq!(
        count(
            &p,
            "SELECT count(*) FROM events WHERE tenant_id = '2b0c6e1e-5d4c-4a8e-9a59-1f3c1d0e7a21'"
        )
        .await,
        2
    );
}
