//! The auditor's commands: `verify` (exit 3 on a broken chain), `runs
//! export` (JSON Lines and CSV), `report` (one HTML file) and
//! `certificate` (the subject only as an HMAC unless asked; signed when a
//! key is given).

use crate::common::*;

const TENANT: &str = "2b0c6e1e-5d4c-4a8e-9a59-1f3c1d0e7a21";
const EVENTS: &str = "4e5f6a7b-8c9d-4e0f-a1b2-c3d4e5f6a7b8";
const NOW: &str = "2030-01-01T00:00:00Z";

/// Five old rows, one of them the subject `ann`'s; a sweep and an erasure
/// in the ledger.
async fn setup(p: &Project) {
    assert_success(&p.cohort(&["schema", "migrate"]));
    p.db.exec(&format!(
        "CREATE TABLE events (id bigint PRIMARY KEY, tenant_id uuid NOT NULL, owner text, \
                              created_at timestamptz NOT NULL); \
         INSERT INTO events SELECT i, '{TENANT}', 'user' || i, '2020-01-01'::timestamptz + i * interval '1 day' \
         FROM generate_series(1, 4) AS i; \
         INSERT INTO events VALUES (10, '{TENANT}', 'ann', '2029-12-31'), (11, '{TENANT}', 'bob', '2029-12-31');"
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
erasure_subjects = ["owner"]

[rules.events]
strategy = "purge"
period = "30d"
audit = "per-row"
"#
        ),
    );
    assert_success(&p.cohort(&["sweep", "--tenant", TENANT, "--now", NOW]));
    // The erasure records ann's hash under the certificate key.
    let mut erase = p.command(&[
        "erase",
        "--tenant",
        TENANT,
        "--subject",
        "ann",
        "--now",
        NOW,
    ]);
    erase.env("COHORT_CERTIFICATE_KEY", "the-certificate-key");
    assert_success(&run(erase));
}

// contract: K1 (verify: exit 0 on an intact chain, 3 naming the row when a
// ledger row was changed behind Cohort's back)
#[tokio::test]
async fn verify_passes_then_names_a_tampered_row() {
    let p = Project::new().await;
    setup(&p).await;
    let out = p.cohort(&["verify", "--json"]);
    assert_success(&out);
    let j = json(&out);
    assert_eq!(j["intact"], true, "{j}");
    assert_eq!(j["runs"], 2, "{j}");
    assert!(
        j["head"]["hash"].as_str().is_some_and(|h| h.len() == 64),
        "{j}"
    );
    let text = p.cohort(&["verify"]);
    assert_success(&text);
    assert!(stdout(&text).contains("intact"), "{}", stdout(&text));

    // Tamper with a summary's count, as an owner of the table could.
    p.db.exec(
        "ALTER TABLE sweep_run_entity_summary DISABLE TRIGGER USER; \
         UPDATE sweep_run_entity_summary SET affected_count = affected_count + 1 \
         WHERE summary_id = (SELECT min(summary_id) FROM sweep_run_entity_summary); \
         ALTER TABLE sweep_run_entity_summary ENABLE TRIGGER USER;",
    )
    .await;
    let out = p.cohort(&["verify", "--json"]);
    assert_code(&out, 3);
    let j = json(&out);
    assert_eq!(j["intact"], false, "{j}");
    let problems = j["problems"].as_array().expect("problems");
    assert_eq!(problems.len(), 1, "{j}");
    assert_eq!(problems[0]["table"], "sweep_run_entity_summary");
    assert!(
        problems[0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("changed after it was chained")),
        "{j}"
    );
}

// contract: K1 (runs export: every run, summary or row detail of the range,
// as JSON Lines or CSV, to stdout or a file)
#[tokio::test]
async fn runs_export_writes_json_lines_and_csv() {
    let p = Project::new().await;
    setup(&p).await;
    let out = p.cohort(&["runs", "export"]);
    assert_success(&out);
    let runs: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(runs.len(), 2);
    assert!(runs.iter().any(|r| r["run_kind"] == "Erasure"));
    assert!(runs.iter().all(|r| r["chain_hash"].is_string()));

    let out = p.cohort(&[
        "runs",
        "export",
        "--records",
        "row-details",
        "--format",
        "csv",
        "-o",
        "details.csv",
    ]);
    assert_success(&out);
    assert!(
        stderr(&out).contains("wrote 5 record(s)"),
        "{}",
        stderr(&out)
    );
    let csv = std::fs::read_to_string(p.dir.join("details.csv")).expect("the export");
    let lines: Vec<&str> = csv.split("\r\n").filter(|l| !l.is_empty()).collect();
    assert_eq!(lines.len(), 6, "{csv}");
    assert!(lines[0].contains("record_id"), "{csv}");
    assert!(!csv.contains("captured_payload,"), "{csv}");

    // A range with no run in it.
    let out = p.cohort(&[
        "runs",
        "export",
        "--from",
        "2000-01-01T00:00:00Z",
        "--to",
        "2000-02-01T00:00:00Z",
    ]);
    assert_success(&out);
    assert_eq!(stdout(&out), "");
    // An empty range is a usage error.
    let out = p.cohort(&[
        "runs",
        "export",
        "--from",
        "2000-02-01T00:00:00Z",
        "--to",
        "2000-01-01T00:00:00Z",
    ]);
    assert_code(&out, 2);
}

// contract: K1 (report: the auditor's HTML report, written whole to a file,
// with the model file's exempt tables)
#[tokio::test]
async fn report_writes_one_html_file() {
    let p = Project::new().await;
    setup(&p).await;
    let model = std::fs::read_to_string(p.dir.join("cohort-model.toml")).expect("model");
    p.db.exec("CREATE TABLE countries (code text PRIMARY KEY)")
        .await;
    p.write(
        "cohort-model.toml",
        &format!(
            "{model}\n[[exempt]]\ntable = \"countries\"\nreason = \"reference data: no personal data\"\n"
        ),
    );
    let out = p.cohort(&[
        "report",
        "-o",
        "report.html",
        "--title",
        "Acme retention 2030",
    ]);
    assert_success(&out);
    assert!(
        stderr(&out).contains("the chain is intact"),
        "{}",
        stderr(&out)
    );
    let html = std::fs::read_to_string(p.dir.join("report.html")).expect("the report");
    assert!(html.contains("<html"), "{html}");
    assert!(html.contains("Acme retention 2030"));
    assert!(!p.dir.join("report.html.partial").exists());
    // The model's exempt table, with its reason; the retained table by its
    // model name.
    assert!(html.contains("public.countries"), "{html}");
    assert!(html.contains("reference data: no personal data"));
    assert!(!html.contains(EVENTS), "the entity id instead of its name");
    assert!(!p.dir.join("report.html.sig").exists(), "signed unasked");

    // Without the model: said so in the report, not an empty list.
    let out = p.cohort(&["report", "--no-model", "-o", "bare.html"]);
    assert_success(&out);
    let bare = std::fs::read_to_string(p.dir.join("bare.html")).expect("the report");
    assert!(bare.contains("Not given"), "{bare}");
    assert!(!bare.contains("public.countries"));
}

// contract: EV3 (report --sign writes a detached signature by the
// certificates' key; verify-report accepts the file as written and refuses
// it once one byte changed, exit 3; no database needed to check)
#[tokio::test]
async fn a_signed_report_verifies_until_a_byte_changes() {
    let p = Project::new().await;
    setup(&p).await;
    p.write("signing.key", &"07".repeat(32));
    let public = hex::encode(
        ed25519_dalek::SigningKey::from_bytes(&[7u8; 32])
            .verifying_key()
            .as_bytes(),
    );
    // The signature goes beside a file: --sign without --output is a usage error.
    let out = p.cohort(&["report", "--sign", "signing.key"]);
    assert_code(&out, 2);
    assert!(stdout(&out).is_empty());

    let out = p.cohort(&["report", "--sign", "signing.key", "-o", "signed.html"]);
    assert_success(&out);
    assert!(stderr(&out).contains(&public), "{}", stderr(&out));
    let html = std::fs::read(p.dir.join("signed.html")).expect("the report");
    let sig = std::fs::read_to_string(p.dir.join("signed.html.sig")).expect("the signature");
    assert!(
        String::from_utf8_lossy(&html).contains(&public),
        "the report names its key"
    );
    let verifying = ed25519_dalek::SigningKey::from_bytes(&[7u8; 32]).verifying_key();
    cohort::evidence::verify_report_signature(&html, &sig, &verifying)
        .expect("the written files verify through the library");

    // The command, without a database.
    let mut check = p.command(&["verify-report", "signed.html", "--public-key", &public]);
    check.env("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none");
    let out = run(check);
    assert_success(&out);
    assert!(stdout(&out).contains("signed by"), "{}", stdout(&out));
    let out = p.cohort(&[
        "verify-report",
        "signed.html",
        "--signing-key",
        "signing.key",
        "--json",
    ]);
    assert_success(&out);
    assert_eq!(json(&out)["valid"], true);

    // Another key.
    let other = hex::encode(
        ed25519_dalek::SigningKey::from_bytes(&[8u8; 32])
            .verifying_key()
            .as_bytes(),
    );
    let out = p.cohort(&["verify-report", "signed.html", "--public-key", &other]);
    assert_code(&out, 3);

    // One byte changed.
    let mut changed = html.clone();
    let middle = changed.len() / 2;
    changed[middle] ^= 0x01;
    std::fs::write(p.dir.join("signed.html"), &changed).expect("write");
    let out = p.cohort(&[
        "verify-report",
        "signed.html",
        "--public-key",
        &public,
        "--json",
    ]);
    assert_code(&out, 3);
    let j = json(&out);
    assert_eq!(j["valid"], false, "{j}");
    assert!(
        stderr(&out).contains("changed since it was signed"),
        "{}",
        stderr(&out)
    );
}

// contract: K1 (certificate: the erasure's counts, the subject as an HMAC,
// signed when a key is given; no key configured is a settings error)
#[tokio::test]
async fn certificate_of_the_latest_erasure() {
    let p = Project::new().await;
    setup(&p).await;
    let out = p.cohort(&["certificate", "latest", "--subject", "ann"]);
    assert_code(&out, 1);
    assert!(stderr(&out).contains("certificate_key"), "{}", stderr(&out));

    p.write("signing.key", &"07".repeat(32));
    let mut c = p.command(&[
        "certificate",
        "latest",
        "--subject",
        "ann",
        "--signing-key",
        "signing.key",
    ]);
    c.env("COHORT_CERTIFICATE_KEY", "the-certificate-key");
    let out = run(c);
    assert_success(&out);
    let j = json(&out);
    let cert = &j["certificate"];
    assert_eq!(cert["status"], "Succeeded", "{j}");
    assert!(!stdout(&out).contains("\"ann\""), "{j}");
    assert!(!stdout(&out).contains("the-certificate-key"), "{j}");
    assert_eq!(j["signature"]["algorithm"], "Ed25519", "{j}");
    let erased: i64 = cert["types"]
        .as_array()
        .expect("types")
        .iter()
        .filter_map(|t| t["erased"].as_i64())
        .sum();
    assert_eq!(erased, 1, "{j}");

    // contract: EV4 (a certificate only for the subject the run erased;
    // another subject, or another key, is a failed check, exit 3)
    for (subject, key) in [("bob", "the-certificate-key"), ("ann", "another-key")] {
        let mut c = p.command(&["certificate", "latest", "--subject", subject]);
        c.env("COHORT_CERTIFICATE_KEY", key);
        let out = run(c);
        assert_code(&out, 3);
        assert!(
            stderr(&out).contains("did not erase this subject"),
            "{}",
            stderr(&out)
        );
        assert!(stdout(&out).is_empty(), "{}", stdout(&out));
    }

    // contract: EV4 (the file the command writes verifies through the
    // library as it is, its final newline included)
    let mut c = p.command(&[
        "certificate",
        "latest",
        "--subject",
        "ann",
        "--signing-key",
        "signing.key",
        "-o",
        "cert.json",
    ]);
    c.env("COHORT_CERTIFICATE_KEY", "the-certificate-key");
    assert_success(&run(c));
    let document = std::fs::read_to_string(p.dir.join("cert.json")).expect("cert.json");
    assert!(document.ends_with('\n'));
    let verifying = ed25519_dalek::SigningKey::from_bytes(&[7u8; 32]).verifying_key();
    let verified = cohort::evidence::SignedCertificate::verify(&document, &verifying)
        .expect("the written file verifies");
    assert_eq!(verified.types.len(), 1);
}

// contract: EV4 (an erasure without certificate_key says at once that it
// cannot be certified later, and certifying it is a failed check)
#[tokio::test]
async fn an_erasure_without_a_certificate_key_warns_and_cannot_be_certified() {
    let p = Project::new().await;
    setup(&p).await;
    let out = p.cohort(&[
        "erase",
        "--tenant",
        TENANT,
        "--subject",
        "bob",
        "--now",
        NOW,
    ]);
    assert_success(&out);
    assert!(
        stderr(&out).contains("certificate_key is not set"),
        "{}",
        stderr(&out)
    );
    let mut c = p.command(&["certificate", "latest", "--subject", "bob"]);
    c.env("COHORT_CERTIFICATE_KEY", "the-certificate-key");
    let out = run(c);
    assert_code(&out, 3);
    assert!(
        stderr(&out).contains("recorded no subject hash"),
        "{}",
        stderr(&out)
    );
}
