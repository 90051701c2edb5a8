//! Guarded tables through the command (contract H17): `guard = true` in the
//! model file, `cohort schema guards` prints the triggers, the command
//! refuses to run until they are installed, and then plain SQL cannot
//! delete a held row while `cohort sweep` still sweeps the rest.

use crate::common::*;

const TENANT: &str = "2b0c6e1e-5d4c-4a8e-9a59-1f3c1d0e7a21";
const NOW: &str = "2030-01-01T00:00:00Z";
const HELD: &str = "5e551000-0000-4000-8000-000000000001";

// contract: H17
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guarded_table_of_the_model_file_refuses_plain_sql_deletes_of_held_rows() {
    let p = Project::new().await;
    p.sample().await;
    p.db.exec(&format!(
        "INSERT INTO users (id, tenant_id, email, full_name, phone, last_seen_at) VALUES \
           ('b0b00000-0000-4000-8000-000000000002', '{TENANT}', 'bob@example.org', 'Bob', NULL, '2029-12-01T00:00:00Z'); \
         INSERT INTO sessions (id, tenant_id, user_id, ip, user_agent, created_at) VALUES \
           ('{HELD}', '{TENANT}', 'b0b00000-0000-4000-8000-000000000002', '10.0.0.1', 'x', '2029-11-01T00:00:00Z'), \
           ('5e551000-0000-4000-8000-000000000002', '{TENANT}', 'b0b00000-0000-4000-8000-000000000002', '10.0.0.2', 'x', '2029-11-02T00:00:00Z');"
    ))
    .await;
    let model = std::fs::read_to_string(p.dir.join("cohort-model.toml")).expect("model");
    let guarded = model.replacen(
        "table = \"sessions\"\n",
        "table = \"sessions\"\nguard = true\nguard_allow = [\"user_agent\"]\n",
        1,
    );
    assert_ne!(guarded, model, "the sample model names the sessions table");
    p.write("cohort-model.toml", &guarded);

    // Not installed yet: the command refuses, naming the guard.
    let out = p.cohort(&["validate"]);
    assert_ne!(code(&out), Some(0), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("cohort_guard_delete is missing")
            || stdout(&out).contains("cohort_guard_delete is missing"),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let out = p.cohort(&["schema", "guards"]);
    assert_success(&out);
    let sql = stdout(&out);
    assert!(
        sql.contains(
            "CREATE TRIGGER \"cohort_guard_delete\" AFTER DELETE ON \"public\".\"sessions\""
        ),
        "{sql}"
    );
    p.db.exec(&sql).await;
    assert_success(&p.cohort(&["validate"]));

    assert_success(&p.cohort(&[
        "holds",
        "add",
        "--entity",
        "sessions",
        "--record",
        HELD,
        "--tenant",
        TENANT,
        "--reason",
        "litigation",
    ]));
    let refused = sqlx::query("DELETE FROM sessions WHERE id = $1::uuid")
        .bind(HELD)
        .execute(p.db.pool())
        .await;
    let Err(sqlx::Error::Database(e)) = &refused else {
        panic!("a held session was deleted: {refused:?}");
    };
    assert_eq!(e.code().as_deref(), Some("23000"), "{e}");
    assert!(e.message().contains("legal hold"), "{e}");
    sqlx::query("UPDATE sessions SET user_agent = 'y' WHERE id = $1::uuid")
        .bind(HELD)
        .execute(p.db.pool())
        .await
        .expect("an allowed column of a held row changes");

    let out = p.cohort(&["sweep", "--tenant", TENANT, "--now", NOW, "--json"]);
    assert_success(&out);
    let left: Vec<String> = sqlx::query_scalar("SELECT id::text FROM sessions ORDER BY id")
        .fetch_all(p.db.pool())
        .await
        .expect("sessions");
    assert_eq!(left, vec![HELD.to_owned()]);
}
