//! A category from a column (contract SL3): one `documents` table holding
//! invoices, receipts and drafts, each class swept by its own rule with a
//! summary and a preview entry of its own, holds and erasure across the
//! classes, a row judged by its class at the statement, a partitioned
//! variant, and start-up's checks of the map.

use chrono::{DateTime, Duration, Utc};
use cohort::{
    Capabilities, Cohort, CohortBuilder, ErasureRequest, Error, Options, Period, Rule, RunStatus,
    Strategy,
};
use uuid::Uuid;

use crate::support::fixtures::{fixed_now, hold_sql, scope_a, tenant_a};
use crate::support::{BuildEngine, TestDb, TestRules, count, db_with_cohort};

const DOCUMENT_ID: &str = "5c2d8e1f-4a6b-4c7d-9e0f-1a2b3c4d5e6f";

/// Invoices kept 400 days, receipts 200, everything else (drafts) 30.
#[derive(cohort::Retained)]
#[cohort(
    category_from = "kind",
    category_map("invoice" = "invoices", "receipt" = "receipts"),
    category = "drafts",
    anchor = "created_at",
    id = "5c2d8e1f-4a6b-4c7d-9e0f-1a2b3c4d5e6f",
    table = "documents"
)]
#[allow(dead_code, reason = "only the descriptor is read")]
struct Document {
    id: i64,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
    kind: Option<String>,
    #[cohort(erasure_subject)]
    owner_email: Option<String>,
}

const DOCUMENTS: &str = "
    CREATE TABLE public.documents (
        id bigint PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz NOT NULL,
        kind text, owner_email text);
    CREATE INDEX ON public.documents (tenant_id, created_at, id);";

fn rules() -> TestRules {
    let purge = Capabilities::only(Strategy::Purge);
    TestRules::new()
        .with(
            "invoices",
            purge.clone(),
            Rule::new(Period::days(400), Strategy::Purge),
        )
        .with(
            "receipts",
            purge.clone(),
            Rule::new(Period::days(200), Strategy::Purge),
        )
        .with(
            "drafts",
            purge,
            Rule::new(Period::days(30), Strategy::Purge),
        )
}

fn builder(db: &TestDb) -> CohortBuilder {
    Cohort::builder(db.engine_pool().clone())
        .options(Options {
            batch_size: 2,
            ..Options::default()
        })
        .rules(rules())
        .entity::<Document>()
}

async fn document(db: &TestDb, id: i64, kind: Option<&str>, age_days: i64) {
    sqlx::query(
        "INSERT INTO public.documents (id, tenant_id, created_at, kind, owner_email) \
         VALUES ($1, $2, $3, $4, 'owner@example.org')",
    )
    .bind(id)
    .bind(tenant_a())
    .bind(fixed_now() - Duration::days(age_days))
    .bind(kind)
    .execute(db.pool())
    .await
    .expect("insert document");
}

async fn left(db: &TestDb) -> Vec<i64> {
    sqlx::query_scalar("SELECT id FROM public.documents ORDER BY id")
        .fetch_all(db.pool())
        .await
        .expect("documents")
}

/// Rows of each class: (id, kind, age in days).
const ROWS: &[(i64, Option<&str>, i64)] = &[
    (1, Some("invoice"), 450),
    (2, Some("invoice"), 300),
    (3, Some("invoice"), 500),
    (11, Some("receipt"), 300),
    (12, Some("receipt"), 100),
    (13, Some("receipt"), 250),
    (21, Some("draft"), 40),
    (22, None, 40),
    (23, Some("memo"), 40),
    (24, Some("draft"), 10),
    (25, Some("draft"), 60),
];

async fn load(db: &TestDb) {
    for (id, kind, age) in ROWS {
        document(db, *id, *kind, *age).await;
    }
}

// contract: SL3
#[tokio::test]
async fn each_class_is_swept_by_its_own_rule_with_a_summary_and_a_preview_each() {
    let (db, _) = db_with_cohort("public").await;
    db.exec(DOCUMENTS).await;
    load(&db).await;
    let cohort = builder(&db).build_engine(&db).await.expect("valid model");
    // One held row of each class, each old enough to go otherwise.
    for id in [3, 13, 25] {
        hold_sql(&db, DOCUMENT_ID, id, tenant_a()).await;
    }

    let preview = cohort
        .preview(&scope_a(), fixed_now())
        .await
        .expect("preview");
    let entries: Vec<_> = preview
        .entries
        .iter()
        .map(|e| (e.category, e.eligible, e.held))
        .collect();
    assert_eq!(
        entries,
        vec![("invoices", 1, 1), ("receipts", 1, 1), ("drafts", 3, 1)],
        "{preview:#?}"
    );

    let result = cohort.sweep(&scope_a(), fixed_now()).await.expect("sweep");
    assert_eq!(result.status, RunStatus::Succeeded, "{result:#?}");
    let summaries: Vec<_> = result
        .summaries
        .iter()
        .map(|s| {
            (
                s.category,
                s.affected,
                s.held,
                s.cutoff.map(|c| (fixed_now() - c).num_days()),
            )
        })
        .collect();
    assert_eq!(
        summaries,
        vec![
            ("invoices", 1, 1, Some(400)),
            ("receipts", 1, 1, Some(200)),
            ("drafts", 3, 1, Some(30)),
        ]
    );
    // Gone: the old invoice (1), the old receipt (11), the old draft (21),
    // the NULL-class (22) and unmapped-class (23) rows, which are drafts.
    assert_eq!(left(&db).await, vec![2, 3, 12, 13, 24, 25]);
    let ledger: Vec<(String, i64)> = sqlx::query_as(
        "SELECT category, affected_count FROM sweep_run_entity_summary WHERE run_id = $1 \
         ORDER BY summary_id",
    )
    .bind(result.run_id)
    .fetch_all(db.pool())
    .await
    .expect("ledger");
    assert_eq!(
        ledger,
        vec![
            ("invoices".to_owned(), 1),
            ("receipts".to_owned(), 1),
            ("drafts".to_owned(), 3)
        ]
    );
}

// contract: SL3
#[tokio::test]
async fn a_row_is_judged_by_its_class_at_the_statement() {
    let (db, _) = db_with_cohort("public").await;
    db.exec(DOCUMENTS).await;
    document(&db, 1, Some("receipt"), 300).await;
    document(&db, 2, Some("invoice"), 300).await;
    let cohort = builder(&db).build_engine(&db).await.expect("valid model");
    // Reclassified after the handle was built: each goes by its class now.
    db.exec("UPDATE public.documents SET kind = CASE id WHEN 1 THEN 'invoice' ELSE 'receipt' END")
        .await;
    cohort.sweep(&scope_a(), fixed_now()).await.expect("sweep");
    assert_eq!(
        left(&db).await,
        vec![1],
        "the former receipt is an invoice now"
    );
}

// contract: SL3
#[tokio::test]
async fn erasure_erases_every_class_by_its_own_rule() {
    let (db, _) = db_with_cohort("public").await;
    db.exec(DOCUMENTS).await;
    load(&db).await;
    let cohort = builder(&db).build_engine(&db).await.expect("valid model");
    hold_sql(&db, DOCUMENT_ID, 12, tenant_a()).await;
    let result = cohort
        .erase(
            &scope_a(),
            fixed_now(),
            ErasureRequest::new("owner@example.org"),
        )
        .await
        .expect("erasure");
    assert_eq!(result.status, RunStatus::Succeeded, "{result:#?}");
    let by_class: Vec<_> = result
        .summaries
        .iter()
        .map(|s| (s.category, s.affected, s.held))
        .collect();
    assert_eq!(
        by_class,
        vec![("invoices", 3, 0), ("receipts", 2, 1), ("drafts", 5, 0)]
    );
    assert_eq!(left(&db).await, vec![12]);
}

// contract: SL3
#[tokio::test]
async fn a_partitioned_table_is_swept_class_by_class_never_by_dropping_a_partition() {
    let (db, _) = db_with_cohort("public").await;
    db.exec(
        "CREATE TABLE public.documents (
             id bigint NOT NULL, tenant_id uuid NOT NULL, created_at timestamptz NOT NULL,
             kind text, owner_email text, PRIMARY KEY (id, created_at)) PARTITION BY RANGE (created_at);
         CREATE TABLE public.documents_old PARTITION OF public.documents
             FOR VALUES FROM (MINVALUE) TO ('2025-06-01');
         CREATE TABLE public.documents_new PARTITION OF public.documents
             FOR VALUES FROM ('2025-06-01') TO (MAXVALUE);
         CREATE INDEX ON public.documents (tenant_id, created_at, id);",
    )
    .await;
    load(&db).await;
    document(&db, 4, Some("invoice"), 380).await;
    let cohort = builder(&db).build_engine(&db).await.expect("valid model");
    let result = cohort.sweep(&scope_a(), fixed_now()).await.expect("sweep");
    assert_eq!(result.status, RunStatus::Succeeded, "{result:#?}");
    // The old partition (before 2025-06-01: invoices of 380, 450 and 500
    // days) is wholly expired for drafts' 30 days, but its rows are
    // invoices: they go by the invoices' 400 days, one by one, and the
    // 380-day invoice stays.
    assert_eq!(left(&db).await, vec![2, 4, 12, 24]);
    assert!(
        result.summaries.iter().all(|s| s.partitions.is_empty()),
        "{result:#?}"
    );
    let partitions = count(
        &db,
        "SELECT count(*) FROM pg_inherits WHERE inhparent = 'public.documents'::regclass",
    )
    .await;
    assert_eq!(partitions, 2);
}

/// A build's validation report as text.
async fn refused(builder: CohortBuilder, db: &TestDb) -> String {
    match builder.build_engine(db).await {
        Err(Error::Validation(report)) => report.to_string(),
        other => panic!("expected a validation report, got {other:?}"),
    }
}

/// The same documents without a default category, the class an enum.
#[derive(cohort::Retained)]
#[cohort(
    category_from = "kind",
    category_map("invoice" = "invoices", "receipt" = "receipts", "bill" = "invoices"),
    anchor = "created_at",
    id = "5c2d8e1f-4a6b-4c7d-9e0f-1a2b3c4d5e70",
    table = "typed_documents"
)]
#[allow(dead_code, reason = "only the descriptor is read")]
struct TypedDocument {
    id: i64,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
    kind: String,
}

/// A boolean class, both values mapped.
#[derive(cohort::Retained)]
#[cohort(
    category_from = "signed",
    category_map("true" = "invoices", "false" = "drafts"),
    anchor = "created_at",
    id = "5c2d8e1f-4a6b-4c7d-9e0f-1a2b3c4d5e71",
    table = "flagged_documents"
)]
#[allow(dead_code, reason = "only the descriptor is read")]
struct FlaggedDocument {
    id: i64,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
    signed: bool,
}

/// A category with no rule in its map.
#[derive(cohort::Retained)]
#[cohort(
    category_from = "kind",
    category_map("invoice" = "invoices", "note" = "notes"),
    category = "drafts",
    anchor = "created_at",
    id = "5c2d8e1f-4a6b-4c7d-9e0f-1a2b3c4d5e72",
    table = "documents"
)]
#[allow(dead_code, reason = "only the descriptor is read")]
struct NotedDocument {
    id: i64,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
    kind: Option<String>,
}

// contract: SL3
#[tokio::test]
async fn start_up_refuses_a_map_that_leaves_values_without_a_category_all_at_once() {
    let (db, _) = db_with_cohort("public").await;
    db.exec(DOCUMENTS).await;
    let build = |entity: fn(CohortBuilder) -> CohortBuilder| {
        entity(Cohort::builder(db.engine_pool().clone()).rules(rules()))
    };

    // An enum with a label the map leaves out, and a value that is no label.
    db.exec(
        "CREATE TYPE public.doc_kind AS ENUM ('invoice', 'receipt', 'memo');
         CREATE TABLE public.typed_documents (id bigint PRIMARY KEY, tenant_id uuid NOT NULL,
             created_at timestamptz NOT NULL, kind public.doc_kind NOT NULL);",
    )
    .await;
    let text = refused(build(|b| b.entity::<TypedDocument>()), &db).await;
    for needle in [
        "maps value \"bill\" to \"invoices\", which is not a label of the column's enum type",
        "has no default, and the category column kind can hold the values memo",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in {text}");
    }

    // Text: any value at all; and NULL when it is nullable.
    db.exec(
        "DROP TABLE public.typed_documents;
         CREATE TABLE public.typed_documents (id bigint PRIMARY KEY, tenant_id uuid NOT NULL,
             created_at timestamptz NOT NULL, kind text);",
    )
    .await;
    let text = refused(build(|b| b.entity::<TypedDocument>()), &db).await;
    for needle in ["can hold NULL", "can hold any value of its type text"] {
        assert!(text.contains(needle), "missing {needle:?} in {text}");
    }

    // A CHECK list the map covers, NOT NULL: accepted.
    db.exec(
        "DROP TABLE public.typed_documents;
         CREATE TABLE public.typed_documents (id bigint PRIMARY KEY, tenant_id uuid NOT NULL,
             created_at timestamptz NOT NULL,
             kind text NOT NULL CHECK (kind IN ('invoice', 'receipt', 'bill')));",
    )
    .await;
    build(|b| b.entity::<TypedDocument>())
        .build_engine(&db)
        .await
        .expect("every value the CHECK allows is mapped");

    // A boolean with both values mapped, NOT NULL: accepted.
    db.exec(
        "CREATE TABLE public.flagged_documents (id bigint PRIMARY KEY, tenant_id uuid NOT NULL,
             created_at timestamptz NOT NULL, signed boolean NOT NULL);",
    )
    .await;
    build(|b| b.entity::<FlaggedDocument>())
        .build_engine(&db)
        .await
        .expect("both booleans are mapped");

    // A category of the map without a rule.
    let text = refused(build(|b| b.entity::<NotedDocument>()), &db).await;
    assert!(
        text.contains("declares no capabilities for category \"notes\""),
        "{text}"
    );
}

/// Documents classed by a case-insensitive tier (`citext`): "Gold" is kept
/// as invoices are, whatever its case.
#[derive(cohort::Retained)]
#[cohort(
    category_from = "tier",
    category_map("Gold" = "invoices"),
    category = "drafts",
    anchor = "created_at",
    id = "5c2d8e1f-4a6b-4c7d-9e0f-1a2b3c4d5e73",
    table = "tiered_documents"
)]
#[allow(dead_code, reason = "only the descriptor is read")]
struct TieredDocument {
    id: i64,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
    tier: Option<String>,
}

// contract: SL3
#[tokio::test]
async fn a_class_column_is_compared_by_its_own_equality_and_warned_about_without_an_index() {
    let (db, _) = db_with_cohort("public").await;
    db.exec(
        "CREATE EXTENSION IF NOT EXISTS citext;
         CREATE TABLE public.tiered_documents (
             id bigint PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz NOT NULL,
             tier public.citext);
         CREATE INDEX ON public.tiered_documents (tenant_id, created_at, id);",
    )
    .await;
    // Each 100 days old: past the drafts' 30 days, within the invoices' 400.
    for (id, tier) in [
        (1, Some("Gold")),
        (2, Some("gold")),
        (3, Some("GOLD")),
        (4, Some("silver")),
        (5, None),
    ] {
        sqlx::query(
            "INSERT INTO public.tiered_documents (id, tenant_id, created_at, tier) VALUES ($1, $2, $3, $4)",
        )
        .bind(id)
        .bind(tenant_a())
        .bind(fixed_now() - Duration::days(100))
        .bind(tier)
        .execute(db.pool())
        .await
        .expect("insert");
    }
    let build = || {
        Cohort::builder(db.engine_pool().clone())
            .rules(rules())
            .entity::<TieredDocument>()
            .build_engine(&db)
    };
    // Only the anchor index: start-up warns that each class's batches walk
    // the other classes' rows, naming the index that fixes it.
    let cohort = build().await.expect("valid model");
    let fixes: Vec<String> = cohort.warnings().iter().map(|w| w.fix.clone()).collect();
    let index = "CREATE INDEX CONCURRENTLY ON \"public\".\"tiered_documents\" \
                 (\"tenant_id\", \"tier\", \"created_at\", \"id\")";
    assert_eq!(fixes, vec![index.to_owned()]);
    sqlx::raw_sql(sqlx::AssertSqlSafe(index))
        .execute(db.pool())
        .await
        .expect("the fix applies");
    let cohort = build().await.expect("valid model");
    assert!(cohort.warnings().is_empty(), "{:?}", cohort.warnings());
    let result = cohort.sweep(&scope_a(), fixed_now()).await.expect("sweep");
    assert_eq!(result.status, RunStatus::Succeeded, "{result:#?}");
    let kept: Vec<i64> = sqlx::query_scalar("SELECT id FROM public.tiered_documents ORDER BY id")
        .fetch_all(db.pool())
        .await
        .expect("left");
    assert_eq!(
        kept,
        vec![1, 2, 3],
        "every case of Gold is an invoice by citext's equality; the rest are drafts"
    );
}
