//! Exports (contract EV2) and erasure certificates (contract EV4).

use crate::support::fixtures::{db_with_tables, scope_a, tenant_a};
use crate::support::models::*;
use crate::support::{TestDb, TestRules};
use chrono::{Duration, Utc};
use cohort::evidence::{
    CertificateOptions, EvidenceError, ExportFormat, ExportRecords, SignedCertificate, TimeRange,
    certificate, chain_link_at, export, subject_hmac, verify,
};
use cohort::holds::HoldRequest;
use cohort::schema::SchemaName;
use cohort::{Capabilities, Cohort, ErasureRequest, Period, Rule, Strategy};
use ed25519_dalek::SigningKey;
use sqlx::Row;
use uuid::Uuid;

async fn swept() -> (TestDb, Cohort) {
    let db = db_with_tables().await;
    db.exec(&format!(
        "INSERT INTO tickets (id, tenant_id, opened_at) \
         SELECT g, '{t}', now() - interval '100 days' + g * interval '1 second' FROM generate_series(1, 30) g",
        t = tenant_a()
    ))
    .await;
    let c = Cohort::builder(db.pool().clone())
        .rules(
            TestRules::new().with(
                "tickets",
                Capabilities::only(Strategy::Purge),
                Rule::new(Period::days(30), Strategy::Purge)
                    .with_per_row_audit()
                    .with_provenance("policy, \"v2\"", "line one\nline two"),
            ),
        )
        .entity::<Ticket>()
        .build()
        .await
        .expect("model");
    c.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    db.exec(&format!(
        "INSERT INTO tickets (id, tenant_id, opened_at) \
         SELECT 100 + g, '{t}', now() - interval '100 days' FROM generate_series(1, 4) g",
        t = tenant_a()
    ))
    .await;
    c.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    (db, c)
}

async fn exported(db: &TestDb, records: ExportRecords, format: ExportFormat) -> String {
    let mut conn = db.pool().acquire().await.expect("conn");
    let mut out = Vec::new();
    let summary = export(
        &mut conn,
        &SchemaName::public(),
        records,
        TimeRange::all(),
        format,
        &mut out,
    )
    .await
    .expect("export");
    let text = String::from_utf8(out).expect("utf-8");
    let lines = match format {
        ExportFormat::JsonLines => text.lines().count(),
        _ => text.split("\r\n").filter(|l| !l.is_empty()).count() - 1,
    };
    // (CSV fields with line breaks are quoted; these have none but the
    // provenance, which is in summaries only.)
    if records != ExportRecords::Summaries || format == ExportFormat::JsonLines {
        assert_eq!(summary.records as usize, lines);
    }
    text
}

/// Every row of a ledger table as JSON, read independently of the export.
async fn ledger_rows(db: &TestDb, table: &str, order: &str) -> Vec<serde_json::Value> {
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT to_jsonb(t) AS j FROM {table} t ORDER BY {order}"
    )))
    .fetch_all(db.pool())
    .await
    .expect("rows")
    .iter()
    .map(|r| r.get::<serde_json::Value, _>("j"))
    .collect()
}

fn hex_of(v: &serde_json::Value) -> serde_json::Value {
    // to_jsonb writes bytea as "\\x...".
    match v.as_str() {
        Some(s) => serde_json::Value::String(s.trim_start_matches("\\x").to_owned()),
        None => serde_json::Value::Null,
    }
}

/// Microseconds since the epoch of an RFC 3339 UTC timestamp.
fn micros(v: &serde_json::Value) -> Option<i64> {
    v.as_str()
        .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.timestamp_micros())
}

// contract: EV2
#[tokio::test]
async fn exports_round_trip_to_what_the_ledger_holds() {
    let (db, _c) = swept().await;
    // Row details: every column, every row, in chain order.
    let text = exported(&db, ExportRecords::RowDetails, ExportFormat::JsonLines).await;
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    let ledger = ledger_rows(
        &db,
        "sweep_run_row_detail",
        "(SELECT started_at FROM sweep_run r WHERE r.run_id = t.run_id), chain_seq",
    )
    .await;
    assert_eq!(lines.len(), 34); // 30 in the first sweep, 4 in the second
    assert_eq!(lines.len(), ledger.len());
    for (e, l) in lines.iter().zip(&ledger) {
        for key in [
            "detail_id",
            "run_id",
            "retained_entity_id",
            "entity_type",
            "record_id",
            "tenant_id",
            "action",
            "chain_seq",
        ] {
            assert_eq!(e[key], l[key], "{key}");
        }
        // Captured payloads (row snapshots kept for handlers) are personal
        // data, not evidence: exports carry their digest only.
        assert!(e.get("captured_payload").is_none(), "{e}");
        assert_eq!(e["chain_payload"], hex_of(&l["chain_payload"]));
        for key in ["chain_prev", "chain_hash"] {
            assert_eq!(e[key], hex_of(&l[key]), "{key}");
        }
        assert!(micros(&e["created_at"]).is_some(), "{}", e["created_at"]);
    }
    // Runs and summaries, JSON Lines.
    let runs: Vec<serde_json::Value> = exported(&db, ExportRecords::Runs, ExportFormat::JsonLines)
        .await
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    let ledger = ledger_rows(&db, "sweep_run", "started_at, run_id").await;
    assert_eq!(runs.len(), 2);
    for (e, l) in runs.iter().zip(&ledger) {
        for key in [
            "run_id",
            "run_kind",
            "trigger",
            "dry_run",
            "tenant_id",
            "status",
            "error",
            "chain_seq",
            "chain_summaries",
            "chain_details",
        ] {
            assert_eq!(e[key], l[key], "{key}");
        }
        assert_eq!(e["chain_hash"], hex_of(&l["chain_hash"]));
    }
    let summaries: Vec<serde_json::Value> =
        exported(&db, ExportRecords::Summaries, ExportFormat::JsonLines)
            .await
            .lines()
            .map(|l| serde_json::from_str(l).expect("json"))
            .collect();
    let ledger = ledger_rows(&db, "sweep_run_entity_summary", "summary_id").await;
    assert_eq!(summaries.len(), 2);
    for (e, l) in summaries.iter().zip(&ledger) {
        for key in [
            "summary_id",
            "run_id",
            "category",
            "strategy",
            "status",
            "affected_count",
            "held_count",
            "legal_minimum_count",
            "rule_source",
            "rule_reason",
            "applied_period",
        ] {
            assert_eq!(e[key], l[key], "{key}");
        }
    }
    assert_eq!(summaries[0]["rule_reason"], "line one\nline two");

    // CSV of the same summaries: a quoted field keeps its comma, quotes and line break.
    let csv = exported(&db, ExportRecords::Summaries, ExportFormat::Csv).await;
    let header = csv.split("\r\n").next().expect("header");
    assert!(
        header.starts_with("summary_id,run_id,retained_entity_id,"),
        "{header}"
    );
    assert!(
        csv.contains("\"policy, \"\"v2\"\"\",\"line one\nline two\""),
        "{csv}"
    );
    let csv_details = exported(&db, ExportRecords::RowDetails, ExportFormat::Csv).await;
    let rows: Vec<&str> = csv_details
        .split("\r\n")
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(rows.len(), 1 + 34);
    let first: Vec<&str> = rows[1].split(',').collect();
    assert_eq!(first[0], lines[0]["detail_id"].to_string());
    assert_eq!(first[4], lines[0]["record_id"].as_str().expect("record"));

    // A range that holds nothing exports nothing.
    let mut conn = db.pool().acquire().await.expect("conn");
    let mut out = Vec::new();
    let none = export(
        &mut conn,
        &SchemaName::public(),
        ExportRecords::RowDetails,
        TimeRange::new(
            Utc::now() - Duration::days(3),
            Utc::now() - Duration::days(2),
        ),
        ExportFormat::JsonLines,
        &mut out,
    )
    .await
    .expect("export");
    assert_eq!(none.records, 0);
    assert!(out.is_empty());
}

/// The host's subject key: erasures record their subject's hash under it.
const KEY: &[u8] = b"host certificate key";

async fn erased() -> (TestDb, Uuid) {
    let db = db_with_tables().await;
    let subject = uuid("aaaaaaaa-0000-0000-0000-000000000001");
    db.exec(&format!(
        "INSERT INTO user_records (id, tenant_id, created_at, user_id) \
         SELECT g, '{t}', now() - interval '3 years', '{subject}' FROM generate_series(1, 6) g; \
         INSERT INTO user_records (id, tenant_id, created_at, user_id) \
         VALUES (7, '{t}', now() - interval '1 day', '{subject}'), (8, '{t}', NULL, '{subject}')",
        t = tenant_a()
    ))
    .await;
    let c = Cohort::builder(db.pool().clone())
        .rules(
            TestRules::new().with(
                "user-data",
                Capabilities::only(Strategy::Purge),
                Rule::new(Period::days(30), Strategy::Purge)
                    .with_legal_minimum(Period::days(365))
                    .with_provenance("retention policy", "GDPR art. 17"),
            ),
        )
        .entity::<UserRecord>()
        .subject_key(KEY)
        .build()
        .await
        .expect("model");
    let mut conn = db.pool().acquire().await.expect("conn");
    c.holds()
        .create(
            &mut conn,
            HoldRequest::new(
                uuid("6b619c19-6e3c-44e8-a87f-975c68fd3988"),
                "2",
                Some(tenant_a()),
                "case 9",
                Utc::now(),
            ),
        )
        .await
        .expect("hold");
    let result = c
        .erase(&scope_a(), Utc::now(), ErasureRequest::new(subject))
        .await
        .expect("erase");
    (db, result.run_id)
}

// contract: EV4
#[tokio::test]
async fn an_erasure_certificate_states_counts_reasons_rules_and_the_chain_head() {
    let (db, run_id) = erased().await;
    let mut conn = db.pool().acquire().await.expect("conn");
    let key = KEY;
    let subject = "aaaaaaaa-0000-0000-0000-000000000001";
    let options = CertificateOptions {
        subject,
        subject_key: key,
        subject_in_clear: false,
    };
    let cert = certificate(&mut conn, &SchemaName::public(), run_id, &options)
        .await
        .expect("certificate");
    assert_eq!(cert.run_id, run_id);
    assert_eq!(cert.status, "Succeeded");
    assert!(!cert.dry_run);
    assert_eq!(cert.subject, None);
    assert_eq!(cert.subject_hmac, subject_hmac(key, subject));
    assert!(!cert.to_json().contains(subject));
    assert_eq!(cert.types.len(), 1);
    let t = &cert.types[0];
    assert_eq!(t.entity_type, "UserRecord");
    assert_eq!(t.strategy, "Purge");
    // Rows 1..6 are past the legal minimum; row 2 is held; row 7 is too
    // recent and row 8 has no anchor.
    assert_eq!(t.erased, 5);
    let blocked: Vec<(&str, i64)> = t
        .blocked
        .iter()
        .map(|b| (b.reason.as_str(), b.count))
        .collect();
    assert_eq!(blocked[0], ("hold", 1));
    assert_eq!(blocked[1].0, "legal_minimum");
    assert_eq!(blocked[2].0, "null_anchor");
    // The NULL anchor (row 8) and the row the legal minimum keeps (row 7)
    // are each counted.
    assert_eq!(blocked[2].1, 1, "{blocked:?}");
    assert_eq!(blocked[1].1, 1, "{blocked:?}");
    assert_eq!(t.applied_period.as_deref(), Some("P365D"));
    assert!(t.cutoff.is_some());
    assert_eq!(t.rule_source.as_deref(), Some("retention policy"));
    assert_eq!(t.rule_reason.as_deref(), Some("GDPR art. 17"));
    // The chain head is the run's link, and the chain verifies up to it.
    let report = verify(&mut conn, &SchemaName::public())
        .await
        .expect("verify");
    assert!(report.is_intact(), "{report}");
    assert_eq!(report.head.as_ref(), Some(&cert.chain_head));
    assert_eq!(
        chain_link_at(&mut conn, &SchemaName::public(), cert.chain_head.seq)
            .await
            .expect("link"),
        Some(cert.chain_head.clone())
    );
    let text = cert.to_string();
    assert!(text.contains("ERASURE CERTIFICATE"), "{text}");
    assert!(
        text.contains("left: an active legal hold or matter: 1"),
        "{text}"
    );
    assert!(text.contains(&cert.chain_head.hash), "{text}");
    assert!(!text.contains(subject), "{text}");

    // In clear only when asked.
    let clear = certificate(
        &mut conn,
        &SchemaName::public(),
        run_id,
        &CertificateOptions {
            subject_in_clear: true,
            ..options
        },
    )
    .await
    .expect("certificate");
    assert_eq!(clear.subject.as_deref(), Some(subject));

    // The legal-minimum count as the ledger holds it (a ledger written by
    // hand, through the chain's triggers).
    let manual = Uuid::new_v4();
    db.exec(&format!(
        "INSERT INTO sweep_run (run_id, run_kind, trigger, dry_run, tenant_id, logical_now, status, started_at, \
                                subject_hmac) \
         VALUES ('{manual}', 'Erasure', 'Manual', false, '{t}', now(), 'Started', now(), \
                 decode('{hmac}', 'hex')); \
         INSERT INTO sweep_run_entity_summary (run_id, retained_entity_id, entity_type, category, tenant_id, strategy, \
             status, affected_count, held_count, skipped_count, null_anchor_count, legal_minimum_count, updated_at) \
         VALUES ('{manual}', '6b619c19-6e3c-44e8-a87f-975c68fd3988', 'UserRecord', 'user-data', '{t}', 'Purge', \
                 'Succeeded', 3, 1, 0, 2, 4, now()); \
         UPDATE sweep_run SET status = 'Succeeded', settled_at = now() WHERE run_id = '{manual}'",
        t = tenant_a(),
        hmac = subject_hmac(key, subject),
    ))
    .await;
    let by_hand = certificate(&mut conn, &SchemaName::public(), manual, &options)
        .await
        .expect("certificate");
    let counts: Vec<(&str, i64)> = by_hand.types[0]
        .blocked
        .iter()
        .map(|b| (b.reason.as_str(), b.count))
        .collect();
    assert_eq!(
        counts,
        vec![("hold", 1), ("legal_minimum", 4), ("null_anchor", 2)]
    );
    assert!(
        by_hand
            .to_string()
            .contains("left: the legal minimum has not passed: 4")
    );

    // Not an erasure: refused.
    db.exec(
        "INSERT INTO sweep_run (run_id, run_kind, trigger, dry_run, tenant_id, logical_now, status, started_at) \
         VALUES ('00000000-0000-0000-0000-0000000000aa', 'Sweep', 'Manual', false, \
                 '00000000-0000-0000-0000-000000000000', now(), 'Started', now())",
    )
    .await;
    let refused = certificate(
        &mut conn,
        &SchemaName::public(),
        uuid("00000000-0000-0000-0000-0000000000aa"),
        &options,
    )
    .await;
    assert!(matches!(
        refused,
        Err(cohort::Error::Evidence(EvidenceError::NotAnErasure { .. }))
    ));
    let missing = certificate(&mut conn, &SchemaName::public(), Uuid::new_v4(), &options).await;
    assert!(matches!(
        missing,
        Err(cohort::Error::Evidence(EvidenceError::NoSuchRun { .. }))
    ));
}

// contract: EV4
#[tokio::test]
async fn a_signed_certificate_verifies_and_is_rejected_after_one_byte_changes() {
    let (db, run_id) = erased().await;
    let mut conn = db.pool().acquire().await.expect("conn");
    let cert = certificate(
        &mut conn,
        &SchemaName::public(),
        run_id,
        &CertificateOptions {
            subject: "aaaaaaaa-0000-0000-0000-000000000001",
            subject_key: KEY,
            subject_in_clear: false,
        },
    )
    .await
    .expect("certificate");
    let signing = SigningKey::from_bytes(&[7u8; 32]);
    let verifying = signing.verifying_key();
    let document = cert.clone().sign(&signing).to_json();
    let verified = SignedCertificate::verify(&document, &verifying).expect("verifies");
    assert_eq!(verified, cert);

    // Every single-byte change is refused: a count, the run id, a hash, the
    // signature itself, even JSON whitespace.
    let erased_at = document.find("\"erased\":5").expect("count") + "\"erased\":".len();
    let positions = [
        erased_at,
        document.find(&run_id.to_string()).expect("run") + 3,
        document.find("\"value\":\"").expect("signature") + 12,
        document.find("\"chain_head\"").expect("head") + 30,
    ];
    for at in positions {
        let mut bytes = document.clone().into_bytes();
        bytes[at] = if bytes[at] == b'1' { b'2' } else { b'1' };
        let changed = String::from_utf8(bytes).expect("utf-8");
        assert!(
            SignedCertificate::verify(&changed, &verifying).is_err(),
            "a change at byte {at} was accepted"
        );
    }
    let spaced = document.replacen(',', ", ", 1);
    assert!(matches!(
        SignedCertificate::verify(&spaced, &verifying),
        Err(EvidenceError::MalformedCertificate { .. })
    ));
    // Another key, or no signature: refused.
    let other = SigningKey::from_bytes(&[8u8; 32]).verifying_key();
    assert!(matches!(
        SignedCertificate::verify(&document, &other),
        Err(EvidenceError::BadSignature)
    ));
    let unsigned = cert.unsigned().to_json();
    assert!(matches!(
        SignedCertificate::verify(&unsigned, &verifying),
        Err(EvidenceError::BadSignature)
    ));
}
