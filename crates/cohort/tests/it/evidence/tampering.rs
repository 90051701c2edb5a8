//! Tampering with every hashed column of every kind of link (contract EV1).
//!
//! For each field of each link's canonical encoding, and each stored link
//! hash, in turn: one row's column is changed with plain SQL as the
//! superuser, with Cohort's triggers (and foreign keys) off
//! (`session_replication_role = replica`), so nothing re-chains the row and
//! the change is a pure tampering; `verify` must report the chain broken and
//! name exactly that row; the column is then put back and the chain must
//! verify again. A field left out of the encoding (say `status`: a failed
//! run rewritten as succeeded) would verify and fail this test.
//!
//! The field lists below mirror `src/schema/evidence.rs` (`RUN_FIELDS`,
//! `SUMMARY_FIELDS`, `DETAIL_FIELDS`, `HOLD_CREATED_FIELDS`,
//! `HOLD_REMOVAL_FIELDS`, `RUN_OPTIONAL_FIELDS`), which are `pub(crate)`:
//! `the_tampered_columns_mirror_the_canonical_encoding` reads that file and
//! checks that the lists are the same, so neither can change alone.

use std::collections::BTreeSet;

use crate::support::fixtures::tenant_a;
use crate::support::models::*;
use crate::support::{TestDb, TestRules, db_with_cohort};
use chrono::{Duration, Utc};
use cohort::evidence::{ChainTable, ProblemKind, VerifyReport, verify};
use cohort::holds::HoldRequest;
use cohort::schema::SchemaName;
use cohort::{
    Capabilities, Cohort, ErasureRequest, Period, Rule, RunStatus, Scope, Strategy, TenantContext,
};
use sqlx::{AssertSqlSafe, Connection, PgConnection, Row};
use uuid::Uuid;

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

// Mirrors of src/schema/evidence.rs, in its order (checked against it below).
const RUN_FIELDS: &[(&str, Ty)] = &[
    ("chain_seq", Int),
    ("chain_prev", Hash),
    ("run_id", U),
    ("run_kind", Text),
    ("trigger", Text),
    ("dry_run", Bool),
    ("tenant_id", U),
    ("logical_now", Time),
    ("status", Text),
    ("started_at", Time),
    ("settled_at", Time),
    ("error", Text),
    ("chain_summaries", Int),
    ("chain_summaries_head", Hash),
    ("chain_details", Int),
    ("chain_details_head", Hash),
];
const RUN_OPTIONAL_FIELDS: &[(&str, Ty)] = &[("subject_hmac", Hash)];
const SUMMARY_FIELDS: &[(&str, Ty)] = &[
    ("run_id", U),
    ("chain_seq", Int),
    ("chain_prev", Hash),
    ("summary_id", Int),
    ("retained_entity_id", U),
    ("entity_type", Text),
    ("category", Text),
    ("tenant_id", U),
    ("strategy", Text),
    ("status", Text),
    ("affected_count", Int),
    ("held_count", Int),
    ("skipped_count", Int),
    ("null_anchor_count", Int),
    ("legal_minimum_count", Int),
    ("applied_period", Text),
    ("cutoff", Time),
    ("rule_source", Text),
    ("rule_reason", Text),
    ("error", Text),
    ("updated_at", Time),
];
const DETAIL_FIELDS: &[(&str, Ty)] = &[
    ("run_id", U),
    ("chain_seq", Int),
    ("chain_prev", Hash),
    ("detail_id", Int),
    ("retained_entity_id", U),
    ("entity_type", Text),
    ("record_id", Text),
    ("tenant_id", U),
    ("action", Text),
    ("chain_payload", Hash),
    ("created_at", Time),
];
const HOLD_CREATED_FIELDS: &[(&str, Ty)] = &[
    ("retained_entity_id", U),
    ("chain_seq", Int),
    ("chain_prev", Hash),
    ("hold_id", U),
    ("record_id", Text),
    ("tenant_id", U),
    ("reason", Text),
    ("created_at", Time),
    ("expires_at", Time),
];
const HOLD_REMOVAL_FIELDS: &[(&str, Ty)] = &[
    ("retained_entity_id", U),
    ("removal_seq", Int),
    ("removal_prev", Hash),
    ("hold_id", U),
    ("chain_hash", Hash),
    ("removed_at", Time),
];

/// The kinds of link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Link {
    Run,
    Summary,
    Detail,
    HoldCreated,
    HoldRemoval,
}

const LINKS: [Link; 5] = [
    Link::Run,
    Link::Summary,
    Link::Detail,
    Link::HoldCreated,
    Link::HoldRemoval,
];

impl Link {
    /// The fields its hash covers (the encoding's, then the optional ones).
    fn fields(self) -> Vec<(&'static str, Ty)> {
        match self {
            Link::Run => [RUN_FIELDS, RUN_OPTIONAL_FIELDS].concat(),
            Link::Summary => SUMMARY_FIELDS.to_vec(),
            Link::Detail => DETAIL_FIELDS.to_vec(),
            Link::HoldCreated => HOLD_CREATED_FIELDS.to_vec(),
            Link::HoldRemoval => HOLD_REMOVAL_FIELDS.to_vec(),
        }
    }

    /// The column holding the link's own hash: not hashed, but changing it
    /// is a tampering too.
    fn hash_column(self) -> &'static str {
        match self {
            Link::HoldRemoval => "removal_hash",
            _ => "chain_hash",
        }
    }

    fn table(self) -> ChainTable {
        match self {
            Link::Run => ChainTable::Run,
            Link::Summary => ChainTable::Summary,
            Link::Detail => ChainTable::RowDetail,
            Link::HoldCreated | Link::HoldRemoval => ChainTable::Hold,
        }
    }

    /// The row's key column, which `ChainProblem::row` reports.
    fn key(self) -> &'static str {
        match self {
            Link::Run => "run_id",
            Link::Summary => "summary_id",
            Link::Detail => "detail_id",
            Link::HoldCreated | Link::HoldRemoval => "hold_id",
        }
    }

    /// `ChainProblem::row` for the link of the row whose key is `key`.
    fn row_name(self, key: &str) -> String {
        match self {
            Link::HoldRemoval => format!("{key}/removal"),
            _ => key.to_owned(),
        }
    }
}

/// The tampered value of `column` (SQL): type-correct, never the stored
/// value. Columns under a CHECK constraint take another allowed value.
fn tampered(table: &str, column: &str, ty: Ty) -> String {
    let c = format!("t.{column}");
    match (table, column) {
        ("sweep_run", "run_kind") => {
            return format!("CASE WHEN {c} = 'Erasure' THEN 'Sweep' ELSE 'Erasure' END");
        }
        ("sweep_run", "trigger") => {
            return format!("CASE WHEN {c} = 'Manual' THEN 'Scheduled' ELSE 'Manual' END");
        }
        ("sweep_run" | "sweep_run_entity_summary", "status") => {
            return format!("CASE WHEN {c} = 'Succeeded' THEN 'Failed' ELSE 'Succeeded' END");
        }
        ("sweep_run_entity_summary", "strategy") | ("sweep_run_row_detail", "action") => {
            return format!("CASE WHEN {c} = 'Purge' THEN 'SoftDelete' ELSE 'Purge' END");
        }
        _ => {}
    }
    match ty {
        Text => format!("COALESCE({c} || 'x', 'x')"),
        Int => format!("COALESCE({c} + 1, 1)"),
        Bool => format!("NOT {c}"),
        Time => format!("COALESCE({c} + interval '1 microsecond', now())"),
        U => "gen_random_uuid()".to_owned(),
        Hash => format!("COALESCE(set_byte({c}, 0, get_byte({c}, 0) # 1), '\\x01'::bytea)"),
    }
}

/// The original value (as text) back in its type, as SQL.
fn restore(original: Option<&str>, ty: Ty) -> String {
    match original {
        Some(v) => format!("CAST('{}' AS {})", v.replace('\'', "''"), sql_type(ty)),
        None => format!("CAST(NULL AS {})", sql_type(ty)),
    }
}

fn sql_type(ty: Ty) -> &'static str {
    match ty {
        Text => "text",
        Int => "bigint",
        Bool => "boolean",
        Time => "timestamptz",
        U => "uuid",
        Hash => "bytea",
    }
}

const KEY: &[u8] = b"the host's subject key";
const ERASED: &str = "aaaaaaaa-0000-0000-0000-000000000534";
const OTHER: &str = "aaaaaaaa-0000-0000-0000-000000000999";
const TICKETS: &str = "5d1c1b8e-2f7a-4b7e-9d8a-0c2a44f0e001";
const USER_RECORDS: &str = "6b619c19-6e3c-44e8-a87f-975c68fd3988";

/// The rows tampered with: the last link of each chain, so that a
/// position + 1 is free (each chain's unique index) and a changed link hash
/// has no successor whose predecessor would then mismatch.
struct Targets {
    /// The erasure run: the run chain's head, with summaries, row details
    /// and a subject hash.
    run: Uuid,
    /// Its last summary (the highest `summary_id`).
    summary: i64,
    /// Its last row detail (the highest `detail_id`).
    detail: i64,
    /// The last hold created on tickets (no removal link; it expires).
    hold: Uuid,
    /// The hold on user records whose removal is that chain's last link.
    removed: Uuid,
}

impl Targets {
    fn key(&self, link: Link) -> String {
        match link {
            Link::Run => self.run.to_string(),
            Link::Summary => self.summary.to_string(),
            Link::Detail => self.detail.to_string(),
            Link::HoldCreated => self.hold.to_string(),
            Link::HoldRemoval => self.removed.to_string(),
        }
    }
}

/// A ledger with every kind of link: a sweep (tickets, per-row audit: row
/// details and summaries), an erasure (a subject hash, its own summary and
/// row details), holds on two entities, one of them removed.
async fn ledger() -> (TestDb, Targets) {
    let (db, _) = db_with_cohort("public").await;
    db.exec(TABLES).await;
    let t = tenant_a();
    db.exec(&format!(
        "INSERT INTO tickets (id, tenant_id, opened_at) \
         SELECT g, '{t}', now() - interval '100 days' + g * interval '1 second' \
         FROM generate_series(1, 8) g; \
         INSERT INTO user_records (id, tenant_id, created_at, user_id) VALUES \
         (1, '{t}', now() - interval '1 day', '{ERASED}'), \
         (2, '{t}', now() - interval '1 day', '{ERASED}'), \
         (3, '{t}', now() - interval '1 day', '{OTHER}'), \
         (4, '{t}', now() - interval '1 day', '{OTHER}')"
    ))
    .await;
    let c = Cohort::builder(db.pool().clone())
        .rules(
            TestRules::new()
                .with(
                    "tickets",
                    Capabilities::only(Strategy::Purge),
                    Rule::new(Period::days(30), Strategy::Purge).with_per_row_audit(),
                )
                .with(
                    "user-data",
                    Capabilities::only(Strategy::Purge),
                    Rule::new(Period::days(30), Strategy::Purge)
                        .with_per_row_audit()
                        .with_provenance("retention policy", "GDPR art. 17"),
                ),
        )
        .entity::<Ticket>()
        .entity::<UserRecord>()
        .subject_key(KEY)
        .build()
        .await
        .expect("model");
    let mut conn = db.pool().acquire().await.expect("conn");
    let now = Utc::now();
    let mut create = async |entity: &str, record: &str, expires: bool| {
        let mut request = HoldRequest::new(uuid(entity), record, Some(t), "case #1", now);
        if expires {
            request = request.expires_at(now + Duration::days(30));
        }
        c.holds()
            .create(&mut conn, request)
            .await
            .expect("hold")
            .hold_id
    };
    create(TICKETS, "1", false).await;
    let hold = create(TICKETS, "2", true).await;
    create(USER_RECORDS, "3", false).await;
    let removed = create(USER_RECORDS, "4", false).await;
    c.holds()
        .remove(&mut conn, removed, now + Duration::days(1))
        .await
        .expect("remove");
    let scope = Scope::Tenant(TenantContext::new(t));
    let sweep = c.sweep(&scope, Utc::now()).await.expect("sweep");
    assert_eq!(sweep.status, RunStatus::Succeeded);
    let erasure = c
        .erase(&scope, Utc::now(), ErasureRequest::new(uuid(ERASED)))
        .await
        .expect("erase");
    assert_eq!(erasure.status, RunStatus::Succeeded);
    assert_eq!(erasure.affected(), 2);

    let (head, summary, detail, hmac): (Uuid, i64, i64, Option<Vec<u8>>) = sqlx::query_as(
        "SELECT r.run_id, (SELECT max(summary_id) FROM sweep_run_entity_summary), \
                (SELECT max(detail_id) FROM sweep_run_row_detail), r.subject_hmac \
         FROM sweep_run r ORDER BY r.chain_seq DESC LIMIT 1",
    )
    .fetch_one(db.pool())
    .await
    .expect("targets");
    assert_eq!(head, erasure.run_id, "the erasure is the run chain's head");
    assert!(hmac.is_some(), "the erasure run records its subject hash");
    let runs: (Uuid, Uuid) = sqlx::query_as(
        "SELECT (SELECT run_id FROM sweep_run_entity_summary WHERE summary_id = $1), \
                (SELECT run_id FROM sweep_run_row_detail WHERE detail_id = $2)",
    )
    .bind(summary)
    .bind(detail)
    .fetch_one(db.pool())
    .await
    .expect("runs");
    assert_eq!(
        runs,
        (head, head),
        "the last summary and detail are the erasure's"
    );
    let (details, summaries): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM sweep_run_row_detail WHERE run_id = $1), \
                (SELECT count(*) FROM sweep_run_entity_summary WHERE run_id = $1)",
    )
    .bind(sweep.run_id)
    .fetch_one(db.pool())
    .await
    .expect("sweep");
    assert!(details > 0 && summaries > 0, "{details} {summaries}");
    // The hold chains' last links: the tickets' expiring hold, the user
    // records' removal.
    let last: (Option<Uuid>, Option<i64>, i64, i64) = sqlx::query_as(
        "SELECT (SELECT hold_id FROM retention_holds WHERE retained_entity_id = $1 \
                  ORDER BY chain_seq DESC LIMIT 1), \
                (SELECT removal_seq FROM retention_holds WHERE hold_id = $2), \
                (SELECT max(chain_seq) FROM retention_holds WHERE retained_entity_id = $3), \
                (SELECT count(*) FROM retention_holds WHERE removal_seq IS NOT NULL)",
    )
    .bind(uuid(TICKETS))
    .bind(removed)
    .bind(uuid(USER_RECORDS))
    .fetch_one(db.pool())
    .await
    .expect("holds");
    assert_eq!(last, (Some(hold), Some(3), 2, 1));
    let report = check(&db).await;
    assert!(report.is_intact(), "{report}");
    assert_eq!((report.runs, report.hold_links), (2, 5), "{report}");
    (
        db,
        Targets {
            run: head,
            summary,
            detail,
            hold,
            removed,
        },
    )
}

async fn check(db: &TestDb) -> VerifyReport {
    let mut conn = db.pool().acquire().await.expect("conn");
    verify(&mut conn, &SchemaName::public())
        .await
        .expect("verify")
}

/// What the tampering names besides its own link (table, row), for the
/// columns whose change another link or seal necessarily exposes too; `new`
/// is the row's key after the change.
async fn also_named(
    db: &TestDb,
    targets: &Targets,
    link: Link,
    column: &str,
    new: &str,
) -> Vec<(ChainTable, String)> {
    let run = targets.run;
    let last = |table: &'static str, id: &'static str| {
        let sql = format!("SELECT max({id})::text FROM {table} WHERE run_id = $1");
        async move {
            sqlx::query_scalar::<_, String>(AssertSqlSafe(sql))
                .bind(run)
                .fetch_one(db.pool())
                .await
                .expect("last")
        }
    };
    match (link, column) {
        // The run's summaries and details now belong to no run, and the run
        // under its new id has neither of its sealed chains.
        (Link::Run, "run_id") => vec![
            (ChainTable::Summary, format!("run {new}")),
            (ChainTable::RowDetail, format!("run {new}")),
        ],
        // A sealed count one longer than its chain: the chain is short.
        (Link::Run, "chain_summaries") => vec![(ChainTable::Summary, format!("run {run}"))],
        (Link::Run, "chain_details") => vec![(ChainTable::RowDetail, format!("run {run}"))],
        // A sealed head that is not the chain's last link.
        (Link::Run, "chain_summaries_head") => vec![(
            ChainTable::Summary,
            last("sweep_run_entity_summary", "summary_id").await,
        )],
        (Link::Run, "chain_details_head") => vec![(
            ChainTable::RowDetail,
            last("sweep_run_row_detail", "detail_id").await,
        )],
        // Moved to another run: its own run's sealed chain is short.
        (Link::Summary, "run_id") => vec![(ChainTable::Summary, format!("run {run}"))],
        (Link::Detail, "run_id") => vec![(ChainTable::RowDetail, format!("run {run}"))],
        // Fields of the hold row the creation link covers too.
        (Link::HoldRemoval, "retained_entity_id" | "hold_id" | "chain_hash") => {
            vec![(ChainTable::Hold, new.to_owned())]
        }
        _ => Vec::new(),
    }
}

/// The (table, row) of every problem.
fn named(report: &VerifyReport) -> BTreeSet<(&'static str, String)> {
    report
        .problems
        .iter()
        .map(|p| (p.table.table(), p.row.clone()))
        .collect()
}

/// Every table of the ledger, as JSON, to check nothing is left changed.
async fn snapshot(db: &TestDb) -> Vec<String> {
    let mut all = Vec::new();
    for (table, key) in [
        ("sweep_run", "run_id"),
        ("sweep_run_entity_summary", "summary_id"),
        ("sweep_run_row_detail", "detail_id"),
        ("retention_holds", "hold_id"),
    ] {
        let rows: Vec<String> = sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT row_to_json(t)::text FROM {table} AS t ORDER BY {key}"
        )))
        .fetch_all(db.pool())
        .await
        .expect("snapshot");
        all.extend(rows);
    }
    all
}

/// Sets `column` of the row whose key is `key` to `value` (SQL over the row
/// `t`) on `conn` (triggers and foreign keys off). Identity columns are made
/// writable for the one statement, inside its transaction. Returns the
/// row's key and the column's value after the change, as text.
async fn set(
    conn: &mut PgConnection,
    table: &str,
    key_column: &str,
    key: &str,
    column: &str,
    value: &str,
) -> (String, Option<String>) {
    let identity = matches!(column, "summary_id" | "detail_id");
    let mut tx = conn.begin().await.expect("begin");
    if identity {
        sqlx::raw_sql(AssertSqlSafe(format!(
            "ALTER TABLE {table} ALTER COLUMN {column} SET GENERATED BY DEFAULT"
        )))
        .execute(&mut *tx)
        .await
        .expect("identity off");
    }
    let row = sqlx::query(AssertSqlSafe(format!(
        "UPDATE {table} AS t SET {column} = {value} WHERE t.{key_column}::text = $1 \
         RETURNING t.{key_column}::text AS key, t.{column}::text AS value"
    )))
    .bind(key)
    .fetch_one(&mut *tx)
    .await
    .unwrap_or_else(|e| panic!("{table}.{column} = {value}: {e}"));
    if identity {
        sqlx::raw_sql(AssertSqlSafe(format!(
            "ALTER TABLE {table} ALTER COLUMN {column} SET GENERATED ALWAYS"
        )))
        .execute(&mut *tx)
        .await
        .expect("identity on");
    }
    tx.commit().await.expect("commit");
    (
        row.try_get("key").expect("key"),
        row.try_get("value").expect("value"),
    )
}

// contract: EV1
#[tokio::test]
async fn every_hashed_column_of_every_link_changed_alone_is_named_and_restoring_it_verifies() {
    let (db, targets) = ledger().await;
    let before = snapshot(&db).await;
    let mut tamper = db.connect().await;
    sqlx::query("SET session_replication_role = replica")
        .execute(&mut tamper)
        .await
        .expect("replica");
    let mut tried = 0;
    for link in LINKS {
        let table = link.table().table();
        let mut columns = link.fields();
        columns.push((link.hash_column(), Hash));
        for (column, ty) in columns {
            let what = format!("{table}.{column} ({link:?} link)");
            let key = targets.key(link);
            let original: Option<String> = sqlx::query_scalar(AssertSqlSafe(format!(
                "SELECT {column}::text FROM {table} WHERE {k}::text = $1",
                k = link.key()
            )))
            .bind(&key)
            .fetch_one(&mut tamper)
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
            let (new_key, changed) = set(
                &mut tamper,
                table,
                link.key(),
                &key,
                column,
                &tampered(table, column, ty),
            )
            .await;
            assert_ne!(changed, original, "{what}: the value did not change");

            let report = check(&db).await;
            assert!(
                !report.is_intact(),
                "{what} changed from {original:?} to {changed:?}, and the chain still verifies:\n{report}"
            );
            let row = link.row_name(&new_key);
            assert!(
                report.problems.iter().any(|p| p.table == link.table()
                    && p.row == row
                    && p.kind == ProblemKind::Changed),
                "{what}: {table} row {row} is not named as changed:\n{report}"
            );
            let mut want: BTreeSet<(&'static str, String)> = [(table, row.clone())].into();
            for (t, r) in also_named(&db, &targets, link, column, &new_key).await {
                want.insert((t.table(), r));
            }
            assert_eq!(named(&report), want, "{what}:\n{report}");

            let (restored_key, restored) = set(
                &mut tamper,
                table,
                link.key(),
                &new_key,
                column,
                &restore(original.as_deref(), ty),
            )
            .await;
            assert_eq!((restored_key, restored), (key, original), "{what}");
            let report = check(&db).await;
            assert!(report.is_intact(), "{what} restored:\n{report}");
            tried += 1;
        }
    }
    // 17 + 21 + 11 + 9 + 6 hashed fields, and 5 stored link hashes.
    assert_eq!(tried, 17 + 21 + 11 + 9 + 6 + 5);
    assert_eq!(snapshot(&db).await, before, "every column was put back");
}

/// The `(name, Enc)` pairs of `const <list>` in the library's source.
fn library_list(source: &str, list: &str) -> Vec<(String, String)> {
    let start = source
        .find(&format!("const {list}: &[(&str, Enc)] = &["))
        .unwrap_or_else(|| panic!("{list} in src/schema/evidence.rs"));
    let body = &source[start..];
    let body = &body[body.find("= &[").expect("list") + 4..body.find("];").expect("end")];
    body.lines()
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
        .collect()
}

// contract: EV1
#[test]
fn the_tampered_columns_mirror_the_canonical_encoding() {
    let source = include_str!("../../../src/schema/evidence.rs");
    for (list, mirror) in [
        ("RUN_FIELDS", RUN_FIELDS),
        ("RUN_OPTIONAL_FIELDS", RUN_OPTIONAL_FIELDS),
        ("SUMMARY_FIELDS", SUMMARY_FIELDS),
        ("DETAIL_FIELDS", DETAIL_FIELDS),
        ("HOLD_CREATED_FIELDS", HOLD_CREATED_FIELDS),
        ("HOLD_REMOVAL_FIELDS", HOLD_REMOVAL_FIELDS),
    ] {
        let mirror: Vec<(String, String)> = mirror
            .iter()
            .map(|(name, ty)| ((*name).to_owned(), format!("{ty:?}")))
            .collect();
        assert_eq!(
            mirror,
            library_list(source, list),
            "{list}: the test's list differs from src/schema/evidence.rs"
        );
    }
}
