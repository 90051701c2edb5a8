//! Event-based retention in the model file and `cohort events` (contract
//! SL4): `event_key` and `after_event`, events recorded, listed and
//! withdrawn by the command, the sweep counting from them, the schedule
//! saying so, and refusals in the command's words.

use crate::common::*;

const TENANT: &str = "2b0c6e1e-5d4c-4a8e-9a59-1f3c1d0e7a21";
const NOW: &str = "2030-01-01T00:00:00Z";

const MODEL: &str = r#"[[entity]]
id = "8b1c2d3e-4f5a-4b6c-8d7e-9f0a1b2c3d4e"
table = "orders"
category = "closed-accounts"
anchor = "placed_at"
event_key = "customer_id"

[rules.closed-accounts]
strategy = "purge"
period = "2 years"
after_event = "account-closed"
"#;

async fn project() -> Project {
    let p = Project::new().await;
    assert_success(&p.cohort(&["init"]));
    assert_success(&p.cohort(&["schema", "migrate"]));
    p.write("cohort-model.toml", MODEL);
    p.db.exec(
        "CREATE TABLE orders (id bigint PRIMARY KEY, tenant_id uuid NOT NULL, \
         placed_at timestamptz NOT NULL, customer_id text NOT NULL); \
         CREATE INDEX ON orders (tenant_id, placed_at, id);",
    )
    .await;
    sqlx::query(
        "INSERT INTO orders VALUES (1, $1, '2020-01-01', 'c-1'), (2, $1, '2020-01-01', 'c-2'), \
         (3, $1, '2020-01-01', 'c-3')",
    )
    .bind(uuid::Uuid::parse_str(TENANT).expect("tenant"))
    .execute(p.db.pool())
    .await
    .expect("insert orders");
    p
}

fn add(p: &Project, subject: &str, at: &str) -> std::process::Output {
    p.cohort(&[
        "events",
        "add",
        "--type",
        "account-closed",
        "--subject",
        subject,
        "--tenant",
        TENANT,
        "--at",
        at,
        "--by",
        "crm-sync",
        "--json",
    ])
}

// contract: SL4
#[tokio::test]
async fn events_recorded_by_the_command_start_the_clock_and_a_withdrawal_stops_it() {
    let p = project().await;
    assert_success(&p.cohort(&["validate"]));
    // c-1 closed long enough ago, c-2 too recently, c-3 still open; c-1's
    // first event is withdrawn, then recorded again.
    let first = add(&p, "c-1", "2027-06-01T00:00:00Z");
    assert_success(&first);
    let id = json(&first)["event_id"].as_str().expect("id").to_owned();
    let out = p.cohort(&[
        "events", "withdraw", &id, "--by", "ann", "--reason", "reopened",
    ]);
    assert_success(&out);
    assert!(
        stdout(&out).contains(&format!("withdrew event {id}")),
        "{}",
        stdout(&out)
    );
    let out = p.cohort(&["sweep", "--tenant", TENANT, "--now", NOW, "--json"]);
    assert_success(&out);
    assert_eq!(json(&out)["summaries"][0]["affected"], 0);

    assert_success(&add(&p, "c-1", "2027-06-01T00:00:00Z"));
    assert_success(&add(&p, "c-2", "2029-06-01T00:00:00Z"));
    let out = p.cohort(&["sweep", "--tenant", TENANT, "--now", NOW, "--json"]);
    assert_success(&out);
    let v = json(&out);
    assert_eq!(v["summaries"][0]["affected"], 1, "{v:#}");
    assert_eq!(
        v["summaries"][0]["null_anchor"], 1,
        "c-3's account is open: {v:#}"
    );
    let left: Vec<i64> = sqlx::query_scalar("SELECT id FROM orders ORDER BY id")
        .fetch_all(p.db.pool())
        .await
        .expect("orders");
    assert_eq!(left, vec![2, 3]);

    let out = p.cohort(&["events", "list", "--subject", "c-1", "--all", "--json"]);
    assert_success(&out);
    let list = json(&out);
    assert_eq!(list.as_array().map(Vec::len), Some(2), "{list:#}");
    let out = p.cohort(&["events", "list"]);
    assert_success(&out);
    assert!(stdout(&out).contains("account-closed"), "{}", stdout(&out));

    let out = p.cohort(&["schedule"]);
    assert_success(&out);
    let md = stdout(&out);
    assert!(
        md.contains(
            "| closed-accounts | `public.orders` | purge | 2 years (`P2Y`) after account-closed |"
        ),
        "{md}"
    );
}

// contract: SL4
#[tokio::test]
async fn an_event_no_rule_counts_from_is_a_usage_error_and_a_second_withdrawal_a_refusal() {
    let p = project().await;
    let out = p.cohort(&[
        "events",
        "add",
        "--type",
        "contract-ended",
        "--subject",
        "c-1",
        "--tenant",
        TENANT,
        "--by",
        "crm",
    ]);
    assert_code(&out, 2);
    assert!(
        stderr(&out).contains("no category counts its period from event type \"contract-ended\"")
            && stderr(&out).contains("after_event"),
        "{}",
        stderr(&out)
    );
    let first = add(&p, "c-1", "2027-06-01T00:00:00Z");
    let id = json(&first)["event_id"].as_str().expect("id").to_owned();
    assert_success(&p.cohort(&["events", "withdraw", &id, "--by", "ann", "--reason", "x"]));
    let out = p.cohort(&["events", "withdraw", &id, "--by", "ann", "--reason", "x"]);
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("already withdrawn"),
        "{}",
        stderr(&out)
    );
}
