//! `disposition` (issue 29, DR1-DR3): a rule under review in the model file
//! (`review = { approvers = 2, ... }`) makes the sweep freeze instead of
//! purge; `disposition list|show|approve|reject|extend` decide; the next
//! sweep carries the approved batch out; bad decisions are refused with
//! the documented exit codes; `runs export --records decisions`.

use crate::common::*;

const TENANT: &str = "2b0c6e1e-5d4c-4a8e-9a59-1f3c1d0e7a21";
const SESSIONS: &str = "[rules.sessions]\nstrategy = \"purge\"\nperiod = \"30d\"\n";

async fn project(review: &str) -> Project {
    let p = Project::new().await;
    p.sample().await;
    let path = p.dir.join("cohort-model.toml");
    let model = std::fs::read_to_string(&path).expect("model file");
    assert!(
        model.contains(SESSIONS),
        "the sample's sessions rule changed"
    );
    std::fs::write(
        &path,
        model.replace(SESSIONS, &format!("{SESSIONS}review = {review}\n")),
    )
    .expect("write model");
    p.db.exec(&format!(
        "INSERT INTO sessions (id, tenant_id, user_id, created_at) VALUES \
           ('50000000-0000-4000-8000-000000000001', '{TENANT}', gen_random_uuid(), now() - interval '200 days'), \
           ('50000000-0000-4000-8000-000000000002', '{TENANT}', gen_random_uuid(), now() - interval '100 days'), \
           ('50000000-0000-4000-8000-000000000003', '{TENANT}', gen_random_uuid(), now() - interval '1 day');"
    ))
    .await;
    p
}

async fn sessions(p: &Project) -> i64 {
    count_rows(p, "sessions").await
}

// contract: DR1, DR2, DR3
#[tokio::test]
async fn a_reviewed_rule_freezes_then_two_approvers_let_the_next_sweep_purge() {
    let p = project("{ approvers = 2 }").await;
    assert_success(&p.cohort(&["validate"]));
    let out = p.cohort(&["schedule"]);
    assert_success(&out);
    assert!(
        stdout(&out).contains(
            "- **Disposition review:** a sweep freezes what it would change for review; \
             two distinct approvers approve before it goes."
        ),
        "{}",
        stdout(&out)
    );
    let out = p.cohort(&["preview", "--tenant", TENANT]);
    assert_success(&out);
    assert!(
        stdout(&out).contains("under review: sessions"),
        "{}",
        stdout(&out)
    );

    let out = p.cohort(&["sweep", "--tenant", TENANT, "--json"]);
    assert_success(&out);
    let swept = json(&out);
    let frozen: Vec<&serde_json::Value> = swept["dispositions"]
        .as_array()
        .expect("dispositions")
        .iter()
        .filter(|d| d["action"] == "frozen")
        .collect();
    assert_eq!(frozen.len(), 1, "{swept:#}");
    assert_eq!(frozen[0]["entity"], "sessions");
    assert_eq!(frozen[0]["rows"], 2);
    assert_eq!(sessions(&p).await, 3, "nothing purged");
    let batch = frozen[0]["batch_id"].as_str().expect("batch").to_owned();

    let out = p.cohort(&["disposition", "list", "--json"]);
    assert_success(&out);
    let listed = json(&out);
    assert_eq!(listed[0]["batch_id"], batch.as_str());
    assert_eq!(listed[0]["status"], "Pending");
    assert_eq!(listed[0]["approvers_required"], 2);
    assert_eq!(listed[0]["rule"]["stages"][0]["review"]["approvers"], 2);

    // The first approval, by a short id; the same person again is refused.
    let short = &batch[..8];
    let out = p.cohort(&["disposition", "approve", short, "--by", "Ann"]);
    assert_success(&out);
    assert!(
        stdout(&out).contains("1 of 2 approvers"),
        "{}",
        stdout(&out)
    );
    let out = p.cohort(&["disposition", "approve", &batch, "--by", " ann "]);
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("already approved"),
        "{}",
        stderr(&out)
    );
    let out = p.cohort(&["disposition", "approve", &batch, "--by", ""]);
    assert_code(&out, 2);
    // One approval of two lets nothing go.
    assert_success(&p.cohort(&["sweep", "--tenant", TENANT]));
    assert_eq!(sessions(&p).await, 3);

    let out = p.cohort(&["disposition", "approve", &batch, "--by", "Bob", "--json"]);
    assert_success(&out);
    assert_eq!(json(&out)["status"], "Approved");
    let out = p.cohort(&["sweep", "--tenant", TENANT]);
    assert_success(&out);
    assert!(
        stdout(&out).contains("carried out: 2 changed"),
        "{}",
        stdout(&out)
    );
    assert_eq!(sessions(&p).await, 1, "the two approved rows purged");

    let out = p.cohort(&["disposition", "show", &batch, "--json"]);
    assert_success(&out);
    let shown = json(&out);
    assert_eq!(shown["batch"]["status"], "CarriedOut");
    let decisions: Vec<&str> = shown["decisions"]
        .as_array()
        .expect("decisions")
        .iter()
        .map(|d| d["decision"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(decisions, ["Frozen", "Approved", "Approved", "CarriedOut"]);
    assert_eq!(shown["record_ids"].as_array().map(Vec::len), Some(2));
    // Approving a carried-out batch is refused.
    let out = p.cohort(&["disposition", "approve", &batch, "--by", "Cy"]);
    assert_code(&out, 1);
    assert!(stderr(&out).contains("CarriedOut"), "{}", stderr(&out));

    let out = p.cohort(&["verify", "--json"]);
    assert_success(&out);
    assert_eq!(json(&out)["intact"], true);
    let out = p.cohort(&["runs", "export", "--records", "decisions"]);
    assert_success(&out);
    assert_eq!(stdout(&out).lines().count(), 4);
}

// contract: DR2
#[tokio::test]
async fn rejected_and_extended_batches_keep_their_rows() {
    let p = project("true").await;
    assert_success(&p.cohort(&["sweep", "--tenant", TENANT]));
    let out = p.cohort(&["disposition", "list", "--json"]);
    let batch = json(&out)[0]["batch_id"]
        .as_str()
        .expect("batch")
        .to_owned();
    let out = p.cohort(&[
        "disposition",
        "reject",
        &batch,
        "--by",
        "bob",
        "--reason",
        "",
    ]);
    assert_code(&out, 2);
    let out = p.cohort(&[
        "disposition",
        "reject",
        &batch,
        "--by",
        "bob",
        "--reason",
        "audit open",
    ]);
    assert_success(&out);
    assert!(stdout(&out).contains("rejected by bob"), "{}", stdout(&out));
    assert_success(&p.cohort(&["sweep", "--tenant", TENANT]));
    assert_eq!(sessions(&p).await, 3);
    let out = p.cohort(&["disposition", "list"]);
    assert_success(&out);
    assert!(
        stdout(&out).contains("0 disposition batch(es) waiting"),
        "{}",
        stdout(&out)
    );
    let out = p.cohort(&["disposition", "list", "--all", "--json"]);
    assert_eq!(json(&out)[0]["status"], "Rejected");

    let q = project("{ auto_approve_after = \"90d\", reoffer_after = \"1d\" }").await;
    assert_success(&q.cohort(&["sweep", "--tenant", TENANT]));
    let out = q.cohort(&["disposition", "list", "--json"]);
    let listed = json(&out);
    let batch = listed[0]["batch_id"].as_str().expect("batch").to_owned();
    assert!(listed[0]["auto_approve_at"].is_string(), "{listed:#}");
    let out = q.cohort(&[
        "disposition",
        "extend",
        &batch,
        "--by",
        "bob",
        "--until",
        "2001-01-01T00:00:00Z",
    ]);
    assert_code(&out, 2);
    let out = q.cohort(&[
        "disposition",
        "extend",
        &batch,
        "--by",
        "bob",
        "--until",
        "2099-01-01T00:00:00Z",
        "--json",
    ]);
    assert_success(&out);
    assert_eq!(json(&out)["status"], "Extended");
    assert_eq!(json(&out)["keep_until"], "2099-01-01T00:00:00.000000Z");
    assert_success(&q.cohort(&["sweep", "--tenant", TENANT]));
    assert_eq!(sessions(&q).await, 3);
}

// contract: K2
#[test]
fn review_mistakes_in_the_model_file_are_reported_at_their_line() {
    let dir = std::env::temp_dir().join(format!(
        "cohort-cli-review-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir).expect("dir");
    let out = run(command_in(&dir, None, &["init"]));
    assert_success(&out);
    let path = dir.join("cohort-model.toml");
    let model = std::fs::read_to_string(&path).expect("model");
    std::fs::write(
        &path,
        model.replace(
            SESSIONS,
            &format!("{SESSIONS}review = {{ approvers = 3, auto_approve = \"30d\" }}\n"),
        ),
    )
    .expect("write");
    let out = run(command_in(&dir, None, &["validate", "--offline"]));
    let _ = std::fs::remove_dir_all(&dir);
    assert_code(&out, 3);
    let text = stderr(&out) + &stdout(&out);
    assert!(text.contains("rules.sessions.review.approvers"), "{text}");
    assert!(text.contains("expected 1 or 2"), "{text}");
    assert!(text.contains("auto_approve"), "{text}");
}
