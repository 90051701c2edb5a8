//! The command through a real PgBouncer in transaction mode (contract CO1):
//! with `connection_mode = "transaction_pooled"` every command a sample
//! application's operator runs works; left at `direct`, the command is
//! refused at start-up and says which setting to change. PgBouncer runs
//! with two server connections and round-robin server selection
//! (`cohort_testdb::Bouncer`), so consecutive transactions change server
//! connections and any statement sent outside a transaction fails.

use crate::common::*;
use cohort_testdb::Bouncer;

const TENANT: &str = "2b0c6e1e-5d4c-4a8e-9a59-1f3c1d0e7a21";
const NOW: &str = "2030-01-01T00:00:00Z";
const BOB: &str = "b0b00000-0000-4000-8000-000000000002";
const CAROL: &str = "ca201000-0000-4000-8000-000000000003";

fn data() -> String {
    format!(
        "INSERT INTO users (id, tenant_id, email, full_name, phone, last_seen_at) VALUES \
           ('a11ce000-0000-4000-8000-000000000001', '{TENANT}', 'alice@example.org', 'Alice Archer', NULL, '2027-01-01T00:00:00Z'), \
           ('{BOB}', '{TENANT}', 'bob@example.org', 'Bob Baker', NULL, '2029-12-01T00:00:00Z'), \
           ('{CAROL}', '{TENANT}', 'carol@example.org', 'Carol Cooper', NULL, '2027-06-01T00:00:00Z'); \
         INSERT INTO sessions (id, tenant_id, user_id, ip, user_agent, created_at) VALUES \
           ('5e551000-0000-4000-8000-000000000001', '{TENANT}', '{BOB}', '10.0.0.1', 'Mozilla/5.0', '2029-11-01T00:00:00Z'), \
           ('5e551000-0000-4000-8000-000000000003', '{TENANT}', '{CAROL}', '10.0.0.3', 'Mozilla/5.0', '2029-10-01T00:00:00Z');"
    )
}

// contract: CO1
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operator_command_works_through_a_transaction_pooler() {
    let p = Project::new().await;
    p.sample().await;
    p.db.exec(&data()).await;
    let bouncer = Bouncer::start(&p.db, 2).await.expect("PgBouncer starts");
    let url = bouncer.url();
    let pooled = |args: &[&str]| {
        let mut c = command_in(&p.dir, Some(&url), args);
        c.env("COHORT_CONNECTION_MODE", "transaction_pooled");
        let out = run(c);
        assert_success(&out);
        out
    };

    pooled(&["schema", "check"]);
    pooled(&["validate"]);
    let preview = json(&pooled(&[
        "preview", "--tenant", TENANT, "--now", NOW, "--json",
    ]));
    pooled(&[
        "holds",
        "add",
        "--entity",
        "users",
        "--record",
        CAROL,
        "--tenant",
        TENANT,
        "--reason",
        "litigation",
    ]);
    let holds = json(&pooled(&["holds", "list", "--json"]));
    assert_eq!(holds.as_array().map(Vec::len), Some(1), "{holds}");
    let sweep = json(&pooled(&[
        "sweep", "--tenant", TENANT, "--now", NOW, "--json",
    ]));
    assert_eq!(sweep["status"], "Succeeded", "{sweep}");
    pooled(&["erase", "--tenant", TENANT, "--subject", BOB, "--now", NOW]);
    let runs = json(&pooled(&["runs", "list", "--json"]));
    assert_eq!(runs.as_array().map(Vec::len), Some(2), "{runs}");
    let latest = json(&pooled(&["runs", "show", "latest", "--json"]));
    assert_eq!(latest["run"]["kind"], "Erasure", "{latest}");
    let verify = json(&pooled(&["verify", "--json"]));
    assert_eq!(verify["intact"], true, "{verify}");
    pooled(&["coverage", "--json"]);
    pooled(&["runs", "export"]);
    pooled(&[
        "worker",
        "--once",
        "--at",
        "2030-01-02T02:00:00Z",
        "--tenant",
        TENANT,
    ]);
    // The sweep did what the preview said, less the held row.
    let eligible: u64 = preview["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter_map(|e| e["eligible"].as_u64())
        .sum();
    assert!(eligible > 0, "{preview}");
    assert_eq!(
        sweep["affected"].as_u64(),
        Some(eligible - 1),
        "{sweep}\n{preview}"
    );
}

// contract: CO1
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_connection_mode_behind_a_transaction_pooler_is_refused_with_the_setting_to_change()
 {
    let p = Project::new().await;
    p.sample().await;
    let bouncer = Bouncer::start(&p.db, 2).await.expect("PgBouncer starts");
    let out = run(command_in(
        &p.dir,
        Some(&bouncer.url()),
        &["sweep", "--tenant", TENANT, "--now", NOW],
    ));
    assert_ne!(code(&out), Some(0), "{}", stdout(&out));
    let err = stderr(&out);
    assert!(err.contains("connection_mode"), "{err}");
    assert!(err.contains("transaction_pooled"), "{err}");
}
