//! The proof of disposition (contract DR3): every decision is a link of
//! the evidence chain, verification names a tampered decision or batch, and
//! a batch marked approved by hand is not carried out.

use cohort::Review;
use cohort::disposition::BatchStatus;
use cohort::evidence::{ChainTable, ProblemKind, verify};
use cohort::schema::SchemaName;

use super::*;
use crate::support::fixtures::{now_s, scope_a};

async fn problems(db: &TestDb) -> Vec<cohort::evidence::ChainProblem> {
    let mut conn = db.pool().acquire().await.expect("connection");
    let report = verify(&mut conn, &SchemaName::public())
        .await
        .expect("verify");
    report.problems
}

/// A batch frozen, approved by ann and carried out; another frozen and
/// rejected. Returns the handle and the two batches' ids.
async fn decided(db: &TestDb) -> (Cohort, Uuid, Uuid) {
    let now = now_s();
    for id in 1..=3 {
        invoice(db, id, now, 400).await;
    }
    let cohort = build_with(db, rules(reviewed(Review::new()))).await;
    cohort.sweep(&scope_a(), now).await.expect("freeze");
    let first = only_batch(&cohort, db).await.batch_id;
    let mut conn = db.engine_pool().acquire().await.expect("connection");
    let d = cohort.dispositions();
    d.approve(&mut conn, first, "ann").await.expect("approve");
    cohort.sweep(&scope_a(), now).await.expect("carry out");
    invoice(db, 9, now, 400).await;
    cohort.sweep(&scope_a(), now).await.expect("freeze again");
    let second = batches(&cohort, db).await[1].batch_id;
    d.reject(&mut conn, second, "bob", "still needed")
        .await
        .expect("reject");
    (cohort, first, second)
}

// contract: DR3
#[tokio::test]
async fn every_decision_is_a_link_and_the_chain_verifies() {
    let db = invoices_db().await;
    let (_cohort, _, _) = decided(&db).await;
    let mut conn = db.pool().acquire().await.expect("connection");
    let report = verify(&mut conn, &SchemaName::public())
        .await
        .expect("verify");
    assert!(report.is_intact(), "{report}");
    // Frozen, approved, carried out; frozen, rejected.
    assert_eq!(report.disposition_links, 5, "{report}");
    let linked = count(
        &db,
        "SELECT count(*) FROM retention_disposition_decisions \
         WHERE chain_hash IS NOT NULL AND chain_seq BETWEEN 1 AND 5",
    )
    .await;
    assert_eq!(linked, 5);
}

// contract: DR3
#[tokio::test]
async fn verification_names_a_tampered_decision() {
    let db = invoices_db().await;
    let (_cohort, first, _) = decided(&db).await;
    // Who approved is rewritten: the link no longer hashes to its content.
    db.exec(&format!(
        "UPDATE retention_disposition_decisions SET decided_by = 'mallory' \
         WHERE batch_id = '{first}' AND decision = 'Approved'"
    ))
    .await;
    let found = problems(&db).await;
    assert!(
        found.iter().any(|p| p.table == ChainTable::Disposition
            && p.row == first.to_string()
            && p.kind == ProblemKind::Changed),
        "{found:#?}"
    );
}

// contract: DR3
#[tokio::test]
async fn verification_names_a_deleted_decision_and_a_batch_changed_behind_its_decisions() {
    let db = invoices_db().await;
    let (_cohort, first, second) = decided(&db).await;
    db.exec(&format!(
        "DELETE FROM retention_disposition_decisions WHERE batch_id = '{first}' AND decision = 'Approved'"
    ))
    .await;
    db.exec(&format!(
        "UPDATE retention_disposition_batches SET status = 'Pending' WHERE batch_id = '{second}'"
    ))
    .await;
    let found = problems(&db).await;
    assert!(
        found
            .iter()
            .any(|p| p.table == ChainTable::Disposition
                && matches!(p.kind, ProblemKind::Missing { .. })),
        "{found:#?}"
    );
    assert!(
        found.iter().any(|p| p.table == ChainTable::Disposition
            && p.row == second.to_string()
            && p.kind == ProblemKind::Changed),
        "the rejected batch set back to pending: {found:#?}"
    );
}

// contract: DR2, DR3
#[tokio::test]
async fn a_batch_marked_approved_by_hand_is_not_carried_out_and_verification_says_so() {
    let db = invoices_db().await;
    let now = now_s();
    for id in 1..=2 {
        invoice(&db, id, now, 400).await;
    }
    let cohort = build_with(&db, rules(reviewed(Review::new()))).await;
    cohort.sweep(&scope_a(), now).await.expect("freeze");
    let batch = only_batch(&cohort, &db).await;
    db.exec(&format!(
        "UPDATE retention_disposition_batches SET status = 'Approved' WHERE batch_id = '{}'",
        batch.batch_id
    ))
    .await;
    let result = cohort.sweep(&scope_a(), now).await.expect("sweep");
    assert_eq!(result.affected(), 0, "no recorded approval: {result:#?}");
    assert_eq!(ids(&db).await, vec![1, 2]);
    assert_eq!(only_batch(&cohort, &db).await.status, BatchStatus::Approved);
    let found = problems(&db).await;
    assert!(
        found.iter().any(|p| p.table == ChainTable::Disposition
            && p.row == batch.batch_id.to_string()
            && p.kind == ProblemKind::Changed),
        "{found:#?}"
    );
}

/// A field's type, named as the library's `Enc` names its encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ty {
    Text,
    Uuid,
    Int,
    Bool,
    Time,
    Hash,
}

use Ty::{Bool, Hash, Int, Text, Time, Uuid as U};

/// Mirror of `DISPOSITION_FIELDS` in src/schema/evidence.rs (checked
/// against it below).
const DISPOSITION_FIELDS: &[(&str, Ty)] = &[
    ("chain_seq", Int),
    ("chain_prev", Hash),
    ("decision_id", U),
    ("batch_id", U),
    ("decision", Text),
    ("decided_by", Text),
    ("automatic", Bool),
    ("retained_entity_id", U),
    ("tenant_id", U),
    ("stage", Int),
    ("rule_hash", Hash),
    ("approvers_required", Int),
    ("reason", Text),
    ("keep_until", Time),
    ("run_id", U),
    ("row_count", Int),
    ("changed_count", Int),
    ("held_count", Int),
    ("left_count", Int),
    ("ineligible_count", Int),
    ("decided_at", Time),
];

fn sql_type(ty: Ty) -> &'static str {
    match ty {
        Text => "text",
        U => "uuid",
        Int => "bigint",
        Bool => "boolean",
        Time => "timestamptz",
        Hash => "bytea",
    }
}

/// An expression that changes `column` (of type `ty`), NULL or not.
fn tampered(column: &str, ty: Ty) -> String {
    match (column, ty) {
        // A free position (one taken is refused by the primary key).
        ("chain_seq", _) => "chain_seq + 1000".into(),
        ("decision", _) => {
            "CASE WHEN decision = 'Extended' THEN 'Rejected' ELSE 'Extended' END".into()
        }
        (_, Text) => format!("COALESCE({column} || 'x', 'x')"),
        (_, U) => "gen_random_uuid()".into(),
        (_, Int) => format!("COALESCE({column} + 1, 1)"),
        (_, Bool) => format!("NOT {column}"),
        (_, Time) => format!("COALESCE({column} + interval '1 microsecond', now())"),
        (_, Hash) => format!("sha256(COALESCE({column}, '\\x00'::bytea) || '\\x01'::bytea)"),
    }
}

// contract: DR3
#[tokio::test]
async fn every_hashed_field_of_a_decision_changed_alone_is_named_and_restoring_it_verifies() {
    let db = invoices_db().await;
    let (_cohort, first, _) = decided(&db).await;
    // The carried-out decision: every count set.
    let seq: i64 = sqlx::query_scalar(
        "SELECT chain_seq FROM retention_disposition_decisions \
         WHERE batch_id = $1 AND decision = 'CarriedOut'",
    )
    .bind(first)
    .fetch_one(db.pool())
    .await
    .expect("carried out decision");
    assert!(problems(&db).await.is_empty());
    let mut tried = 0;
    let columns = DISPOSITION_FIELDS
        .iter()
        .copied()
        .chain([("chain_hash", Hash)]);
    for (column, ty) in columns {
        let original: Option<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT {column}::text FROM retention_disposition_decisions WHERE chain_seq = $1"
        )))
        .bind(seq)
        .fetch_one(db.pool())
        .await
        .expect("read");
        // The row is found again by its decision id (unless that is the
        // column changed: then by its position).
        let id: Uuid = sqlx::query_scalar(
            "SELECT decision_id FROM retention_disposition_decisions WHERE chain_seq = $1",
        )
        .bind(seq)
        .fetch_one(db.pool())
        .await
        .expect("id");
        db.exec(&format!(
            "UPDATE retention_disposition_decisions SET {column} = {} WHERE chain_seq = {seq}",
            tampered(column, ty)
        ))
        .await;
        let found = problems(&db).await;
        assert!(
            found.iter().any(|p| p.table == ChainTable::Disposition),
            "{column} changed and not named: {found:#?}"
        );
        let key = if column == "decision_id" {
            format!("chain_seq = {seq}")
        } else if column == "chain_seq" {
            format!("decision_id = '{id}'")
        } else {
            format!("chain_seq = {seq}")
        };
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE retention_disposition_decisions SET {column} = $1::{} WHERE {key}",
            sql_type(ty)
        )))
        .bind(original.clone())
        .execute(db.pool())
        .await
        .expect("restore");
        let left = problems(&db).await;
        assert!(left.is_empty(), "{column} restored: {left:#?}");
        tried += 1;
    }
    assert_eq!(tried, DISPOSITION_FIELDS.len() + 1);
}

// contract: DR3
#[test]
fn the_tampered_fields_mirror_the_canonical_encoding() {
    let source = include_str!("../../../src/schema/evidence.rs");
    let start = source
        .find("const DISPOSITION_FIELDS: &[(&str, Enc)] = &[")
        .expect("DISPOSITION_FIELDS in src/schema/evidence.rs");
    let body = &source[start..];
    let body = &body[body.find("= &[").expect("list") + 4..body.find("];").expect("end")];
    let library: Vec<(String, String)> = body
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("(\""))
        .map(|l| {
            let l = l.trim_start_matches('(').trim_end_matches("),");
            let (name, enc) = l.split_once(',').expect("(name, Enc)");
            (
                name.trim().trim_matches('"').to_owned(),
                enc.trim().to_owned(),
            )
        })
        .collect();
    let mirror: Vec<(String, String)> = DISPOSITION_FIELDS
        .iter()
        .map(|(name, ty)| ((*name).to_owned(), format!("{ty:?}")))
        .collect();
    assert_eq!(mirror, library);
}

// contract: DR3
#[tokio::test]
async fn the_auditors_report_lists_batches_decisions_and_what_was_carried_out() {
    use cohort::evidence::{ReportOptions, TimeRange, audit_report};
    let db = invoices_db().await;
    let (cohort, first, second) = decided(&db).await;
    let report = cohort
        .audit_report(&ReportOptions::new(TimeRange::all()))
        .await
        .expect("report");
    assert_eq!(report.dispositions.total, 2);
    assert_eq!(report.disposition_totals.batches, 2);
    assert_eq!(report.disposition_totals.frozen, 4);
    assert_eq!(report.disposition_totals.changed, 3);
    assert_eq!(report.disposition_totals.pending, 0);
    let carried = &report.dispositions.items[0];
    assert_eq!(carried.batch_id, first);
    assert_eq!(carried.entity, "Invoice");
    assert_eq!(carried.status, "CarriedOut");
    assert_eq!(carried.carried_out, Some([3, 0, 0, 0]));
    let kinds: Vec<&str> = carried
        .decisions
        .iter()
        .map(|d| d.decision.as_str())
        .collect();
    assert_eq!(kinds, ["Frozen", "Approved", "CarriedOut"]);
    assert_eq!(carried.decisions[1].decided_by, "ann");
    let rejected = &report.dispositions.items[1];
    assert_eq!(rejected.batch_id, second);
    assert_eq!(
        rejected.decisions[1].reason.as_deref(),
        Some("still needed")
    );

    // In Chromium: the section is there, one row per batch, decisions in
    // words, counts as the ledger has them.
    let rendered = crate::evidence::report::render(&report);
    let rows = crate::evidence::report::rows(&rendered.dom, "disposition-batches");
    assert_eq!(rows.len(), 2, "{rows:#?}");
    assert_eq!(rows[0][1], "Invoice");
    assert_eq!(rows[0][6], "3", "rows frozen");
    assert_eq!(rows[0][8], "CarriedOut");
    assert_eq!(rows[0][9], "3", "changed");
    assert!(rows[0][13].contains("approved by ann"), "{:?}", rows[0][13]);
    assert!(rows[0][13].contains("carried out"), "{:?}", rows[0][13]);
    assert!(
        rows[1][13].contains("rejected by bob (still needed)"),
        "{:?}",
        rows[1][13]
    );
    assert!(rendered.html.contains(&first.to_string()));

    // The same without a handle (an auditor's tool).
    let mut conn = db.pool().acquire().await.expect("connection");
    let plain = audit_report(
        &mut conn,
        &SchemaName::public(),
        &ReportOptions::new(TimeRange::all()),
    )
    .await
    .expect("report");
    assert_eq!(plain.dispositions.total, 2);
}

// contract: DR3
#[tokio::test]
async fn exports_include_the_decisions() {
    use cohort::evidence::{ExportFormat, ExportRecords, TimeRange, export};
    let db = invoices_db().await;
    let (_cohort, first, _) = decided(&db).await;
    let mut conn = db.pool().acquire().await.expect("connection");
    let mut out = Vec::new();
    let written = export(
        &mut conn,
        &SchemaName::public(),
        ExportRecords::Decisions,
        TimeRange::all(),
        ExportFormat::JsonLines,
        &mut out,
    )
    .await
    .expect("export");
    assert_eq!(written.records, 5);
    let lines: Vec<serde_json::Value> = String::from_utf8(out)
        .expect("utf-8")
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    assert_eq!(lines[0]["decision"], "Frozen");
    assert_eq!(lines[0]["chain_seq"], 1);
    assert_eq!(lines[1]["decided_by"], "ann");
    assert_eq!(lines[1]["batch_id"], first.to_string());
    assert_eq!(lines[1]["automatic"], false);
    assert_eq!(lines[2]["decision"], "CarriedOut");
    assert_eq!(lines[2]["changed_count"], 3);
    assert_eq!(lines[4]["decision"], "Rejected");
    assert_eq!(lines[4]["reason"], "still needed");
    assert!(
        lines[4]["keep_until"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z') && t.len() == 27),
        "{}",
        lines[4]["keep_until"]
    );
    assert_eq!(lines[1]["chain_prev"], lines[0]["chain_hash"]);
}
