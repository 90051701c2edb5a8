//! `holds` as operators meet it (issue 26): refusals name the table as the
//! model file does and a malformed record id is a usage error (exit 2); a
//! second hold on a held row says so; removing a removed hold says nothing
//! changed; `holds list --all` shows the holds that stopped protecting.

use crate::common::*;

const TENANT: &str = "2b0c6e1e-5d4c-4a8e-9a59-1f3c1d0e7a21";
const BOB: &str = "b0b00000-0000-4000-8000-000000000002";
const USERS_ID: &str = "6b619c19-6e3c-44e8-a87f-975c68fd3988";

async fn project() -> Project {
    let p = Project::new().await;
    p.sample().await;
    p.db.exec(&format!(
        "INSERT INTO users (id, tenant_id, email, full_name, phone, last_seen_at) VALUES \
           ('{BOB}', '{TENANT}', 'bob@example.org', 'Bob', NULL, '2029-12-01T00:00:00Z');"
    ))
    .await;
    p
}

fn add(p: &Project, record: &str) -> std::process::Output {
    p.cohort(&[
        "holds",
        "add",
        "--entity",
        "users",
        "--record",
        record,
        "--tenant",
        TENANT,
        "--reason",
        "litigation",
        "--json",
    ])
}

#[tokio::test]
async fn a_refused_hold_names_the_table_and_a_malformed_record_id_is_a_usage_error() {
    let p = project().await;
    let out = add(&p, "not-a-uuid");
    assert_code(&out, 2);
    let err = stderr(&out);
    assert!(err.contains("users"), "{err}");
    assert!(
        !err.contains(USERS_ID),
        "the table by its name, not its id: {err}"
    );
    // A well-formed id of no row: an error (exit 1), in the same words.
    let out = add(&p, "c0000000-0000-4000-8000-000000000009");
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("table users") && !err.contains(USERS_ID),
        "{err}"
    );
}

#[tokio::test]
async fn a_second_hold_on_a_held_row_and_a_second_removal_say_what_they_did() {
    let p = project().await;
    let first = add(&p, BOB);
    assert_success(&first);
    assert!(
        !stderr(&first).contains("already covers"),
        "{}",
        stderr(&first)
    );
    let hold = json(&first)["hold_id"]
        .as_str()
        .expect("hold id")
        .to_owned();
    let second = add(&p, BOB);
    assert_success(&second);
    assert!(
        stderr(&second).contains("another active hold already covers this row"),
        "{}",
        stderr(&second)
    );

    let out = p.cohort(&["holds", "remove", &hold]);
    assert_success(&out);
    assert!(
        stdout(&out).contains("removed: it stops protecting at"),
        "{}",
        stdout(&out)
    );
    let again = p.cohort(&["holds", "remove", &hold]);
    assert_success(&again);
    assert!(
        stdout(&again).contains("was already removed")
            && stdout(&again).contains("nothing changed"),
        "{}",
        stdout(&again)
    );

    // The removed hold is no longer active, and `--all` still shows it.
    let active = json(&p.cohort(&["holds", "list", "--json"]));
    assert_eq!(active.as_array().map(Vec::len), Some(1), "{active}");
    let all = json(&p.cohort(&["holds", "list", "--all", "--json"]));
    let all = all.as_array().expect("holds");
    assert_eq!(all.len(), 2, "{all:?}");
    assert!(
        all.iter()
            .any(|h| h["hold_id"] == hold.as_str() && h["removed_at"].is_string())
    );
}
