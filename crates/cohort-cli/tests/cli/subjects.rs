//! `cohort subject export` (contract SA1) and `cohort erase --vacuum`
//! (contract SA3), run for real on the sample application.

use crate::common::*;

const TENANT: &str = "2b0c6e1e-5d4c-4a8e-9a59-1f3c1d0e7a21";
const OTHER: &str = "7d1e0000-0000-4000-8000-000000000009";
const ANN: &str = "a0a00000-0000-4000-8000-000000000001";
const NOW: &str = "2030-01-01T00:00:00Z";
const KEY: &str = "the-certificate-key";

/// Runs the binary with the certificate key in the environment.
fn keyed(p: &Project, args: &[&str]) -> std::process::Output {
    let mut c = p.command(args);
    c.env("COHORT_CERTIFICATE_KEY", KEY);
    run(c)
}

async fn ann_everywhere(p: &Project) {
    p.db.exec(&format!(
        "INSERT INTO users (id, tenant_id, email, full_name, phone, last_seen_at) VALUES \
           ('{ANN}', '{TENANT}', 'ann@example.org', 'Ann, \"A\"', NULL, '2029-12-30T00:00:00Z'); \
         INSERT INTO orders (id, tenant_id, user_id, total_cents, shipping_address, placed_at) VALUES \
           (1, '{TENANT}', '{ANN}', 1200, '1 Main St', '2029-12-01T00:00:00Z'), \
           (2, '{OTHER}', '{ANN}', 99, 'elsewhere', '2029-12-01T00:00:00Z'); \
         INSERT INTO sessions (id, tenant_id, user_id, ip, user_agent, created_at) VALUES \
           (gen_random_uuid(), '{TENANT}', '{ANN}', '10.0.0.1', 'x', '2029-12-31T00:00:00Z'), \
           (gen_random_uuid(), '{TENANT}', gen_random_uuid(), '10.0.0.2', 'y', '2029-12-31T00:00:00Z');"
    ))
    .await;
}

// contract: SA1
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subject_export_writes_the_subjects_rows_and_records_who_asked() {
    let p = Project::new().await;
    p.sample().await;
    ann_everywhere(&p).await;
    let out = keyed(
        &p,
        &[
            "subject",
            "export",
            "--tenant",
            TENANT,
            "--subject",
            ANN,
            "--requested-by",
            "ticket DSAR-7",
            "--now",
            NOW,
            "-o",
            "ann.jsonl",
        ],
    );
    assert_success(&out);
    let said = stdout(&out);
    assert!(
        said.starts_with("wrote ann.jsonl: 3 row(s) of the subject (0 held)"),
        "{said}"
    );
    let text = std::fs::read_to_string(p.dir.join("ann.jsonl")).expect("the export file");
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    let tables: Vec<&str> = lines
        .iter()
        .map(|l| l["table"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        tables,
        ["public.users", "public.orders", "public.sessions"],
        "{text}"
    );
    assert_eq!(lines[0]["row"]["full_name"], "Ann, \"A\"");
    assert_eq!(lines[1]["record_id"], "1", "not the other tenant's order");
    assert!(!p.dir.join("ann.jsonl.partial").exists());

    // Recorded, the subject only as its keyed hash.
    let recorded: Vec<(String, i64, String)> = sqlx::query_as(
        "SELECT requested_by, row_count, encode(subject_hmac, 'hex') FROM retention_subject_access",
    )
    .fetch_all(p.db.pool())
    .await
    .expect("record");
    assert_eq!(recorded.len(), 1);
    assert_eq!(
        (recorded[0].0.as_str(), recorded[0].1),
        ("ticket DSAR-7", 3)
    );
    assert_eq!(
        recorded[0].2,
        cohort::evidence::subject_hmac(KEY.as_bytes(), ANN)
    );

    // CSV on stdout, the summary on stderr.
    let out = keyed(
        &p,
        &[
            "subject",
            "export",
            "--tenant",
            TENANT,
            "--subject",
            ANN,
            "--requested-by",
            "dpo",
            "--format",
            "csv",
            "--now",
            NOW,
        ],
    );
    assert_success(&out);
    let text = stdout(&out);
    assert!(
        text.starts_with("type,table,record_id,held,column,value\r\n"),
        "{text}"
    );
    assert!(text.contains(",public.users,a0a00000-0000-4000-8000-000000000001,false,full_name,\"Ann, \"\"A\"\"\"\r\n"), "{text}");
    assert!(
        stderr(&out).contains("3 row(s) of the subject"),
        "{}",
        stderr(&out)
    );

    // Without the key: refused, in the operator's words, nothing written.
    let settings = std::fs::read_to_string(p.dir.join("cohort.toml")).expect("cohort.toml");
    let without: String = settings
        .lines()
        .filter(|l| !l.starts_with("certificate_key"))
        .map(|l| format!("{l}\n"))
        .collect();
    p.write("cohort.toml", &without);
    let out = p.cohort(&[
        "subject",
        "export",
        "--tenant",
        TENANT,
        "--subject",
        ANN,
        "--requested-by",
        "dpo",
        "-o",
        "nokey.jsonl",
    ]);
    assert_eq!(code(&out), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("COHORT_CERTIFICATE_KEY"),
        "{}",
        stderr(&out)
    );
    assert!(!p.dir.join("nokey.jsonl").exists());
    assert!(!p.dir.join("nokey.jsonl.partial").exists());
}

// contract: SA3
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erase_vacuum_vacuums_the_tables_it_changed_and_says_so() {
    let p = Project::new().await;
    p.sample().await;
    ann_everywhere(&p).await;
    let out = keyed(
        &p,
        &[
            "erase",
            "--tenant",
            TENANT,
            "--subject",
            ANN,
            "--now",
            NOW,
            "--vacuum",
            "--json",
        ],
    );
    assert_success(&out);
    let result = json(&out);
    let tables = result["tables"].as_array().expect("tables with --vacuum");
    assert!(!tables.is_empty(), "{result}");
    for t in tables {
        assert!(t["vacuum"]["Vacuumed"]["millis"].is_u64(), "{result}");
    }
    let out = keyed(&p, &["certificate", "latest", "--subject", ANN]);
    assert_success(&out);
    let cert = json(&out);
    let physical: Vec<&serde_json::Value> = cert["certificate"]["types"]
        .as_array()
        .or_else(|| cert["types"].as_array())
        .expect("types")
        .iter()
        .filter_map(|t| t.get("physical"))
        .collect();
    assert!(!physical.is_empty(), "{cert}");
    for ph in physical {
        assert_eq!(ph["vacuumed_since_erasure"], true, "{cert}");
    }
}

// contract: SA2 (the command's side: erase --register appends the erasure,
// erasures register writes the same entry, erasures replay runs it again,
// idempotently, says when there is nothing to replay, and fails naming an
// erasure whose subject is not in the host's list)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erasures_are_registered_outside_the_database_and_replayed() {
    let p = Project::new().await;
    p.sample().await;
    ann_everywhere(&p).await;
    let out = keyed(
        &p,
        &[
            "erase",
            "--tenant",
            TENANT,
            "--subject",
            ANN,
            "--now",
            NOW,
            "--register",
            "erasures.jsonl",
        ],
    );
    assert_success(&out);
    assert!(
        stderr(&out).contains("registered erasure"),
        "{}",
        stderr(&out)
    );
    let appended = std::fs::read_to_string(p.dir.join("erasures.jsonl")).expect("register");
    assert_eq!(appended.lines().count(), 1, "{appended}");
    assert!(!appended.contains(ANN), "{appended}");
    let out = keyed(&p, &["erasures", "register", "-o", "again.jsonl"]);
    assert_success(&out);
    assert_eq!(
        std::fs::read_to_string(p.dir.join("again.jsonl")).expect("register"),
        appended
    );

    p.write(
        "requests.jsonl",
        &format!("{{\"tenant\": \"{TENANT}\", \"subject\": \"{ANN}\"}}\n"),
    );
    let out = keyed(
        &p,
        &[
            "erasures",
            "replay",
            "--register",
            "erasures.jsonl",
            "--subjects",
            "requests.jsonl",
            "--since",
            "2000-01-01T00:00:00Z",
        ],
    );
    assert_success(&out);
    let said = stdout(&out);
    assert!(
        said.contains("0 row(s) erased again"),
        "nothing came back: {said}"
    );
    let out = keyed(
        &p,
        &[
            "erasures",
            "replay",
            "--register",
            "erasures.jsonl",
            "--subjects",
            "requests.jsonl",
            "--since",
            "2999-01-01T00:00:00Z",
        ],
    );
    assert_success(&out);
    assert!(
        stdout(&out).contains("nothing to replay"),
        "{}",
        stdout(&out)
    );
    p.write("requests.jsonl", "");
    let out = keyed(
        &p,
        &[
            "erasures",
            "replay",
            "--register",
            "erasures.jsonl",
            "--subjects",
            "requests.jsonl",
            "--since",
            "2000-01-01T00:00:00Z",
        ],
    );
    assert_eq!(code(&out), Some(3), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("not replayed: erasure"),
        "{}",
        stdout(&out)
    );
}
