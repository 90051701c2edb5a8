//! Disposition review and a category from a column (contracts DR1, DR2 with
//! SL3): each category of a split type has its own batches, bound to its
//! own rule; deciding one never touches another's.

use chrono::{DateTime, Duration, Utc};
use cohort::disposition::BatchStatus;
use cohort::{Capabilities, Cohort, Options, Period, Review, Rule, Strategy};
use uuid::Uuid;

use crate::support::fixtures::{now_s, scope_a, tenant_a};
use crate::support::{Answer, BuildEngine, TestDb, TestRules, db_with_cohort};

/// Invoices and receipts in one table, each class with its own rule.
#[derive(cohort::Retained)]
#[cohort(
    category_from = "kind",
    category_map("invoice" = "invoices", "receipt" = "receipts"),
    anchor = "created_at",
    id = "7a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
    table = "papers"
)]
#[allow(dead_code, reason = "only the descriptor is read")]
struct Paper {
    id: i64,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
    kind: String,
}

async fn papers_db(now: DateTime<Utc>) -> TestDb {
    let (db, _) = db_with_cohort("public").await;
    db.exec(
        "CREATE TABLE public.papers (
             id bigint PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz NOT NULL,
             kind text NOT NULL CHECK (kind IN ('invoice', 'receipt')));
         CREATE INDEX ON public.papers (tenant_id, created_at, id);",
    )
    .await;
    for (id, kind) in [
        (1, "invoice"),
        (2, "invoice"),
        (3, "receipt"),
        (4, "receipt"),
    ] {
        sqlx::query(
            "INSERT INTO public.papers (id, tenant_id, created_at, kind) VALUES ($1, $2, $3, $4)",
        )
        .bind(id)
        .bind(tenant_a())
        .bind(now - Duration::days(400))
        .bind(kind)
        .execute(db.pool())
        .await
        .expect("insert paper");
    }
    db
}

async fn left(db: &TestDb) -> Vec<i64> {
    sqlx::query_scalar("SELECT id FROM public.papers ORDER BY id")
        .fetch_all(db.pool())
        .await
        .expect("ids")
}

// contract: DR1, DR2
#[tokio::test]
async fn each_category_of_a_split_type_has_its_own_batches() {
    let now = now_s();
    let db = papers_db(now).await;
    // The same rule for both classes: the same hash, still two batches.
    let rule = Rule::new(Period::days(365), Strategy::Purge).with_review(Review::new());
    let rules = TestRules::new()
        .with(
            "invoices",
            Capabilities::only(Strategy::Purge),
            rule.clone(),
        )
        .with(
            "receipts",
            Capabilities::only(Strategy::Purge),
            rule.clone(),
        );
    let cohort = Cohort::builder(db.engine_pool().clone())
        .options(Options::default())
        .rules(rules.clone())
        .entity::<Paper>()
        .build_engine(&db)
        .await
        .expect("valid model");
    cohort.sweep(&scope_a(), now).await.expect("freeze");
    let mut conn = db.engine_pool().acquire().await.expect("connection");
    let d = cohort.dispositions();
    let batches = d.list(&mut conn, None).await.expect("list");
    assert_eq!(batches.len(), 2, "{batches:#?}");
    let invoices = batches
        .iter()
        .find(|b| b.category == "invoices")
        .expect("an invoices batch");
    let receipts = batches
        .iter()
        .find(|b| b.category == "receipts")
        .expect("a receipts batch");
    assert_eq!((invoices.rows, receipts.rows), (2, 2));

    // Approving the invoices lets the invoices go, not the receipts.
    d.approve(&mut conn, invoices.batch_id, "ann")
        .await
        .expect("approve");
    let result = cohort.sweep(&scope_a(), now).await.expect("sweep");
    assert_eq!(result.affected(), 2, "{result:#?}");
    assert_eq!(left(&db).await, vec![3, 4]);
    let receipts_now = d
        .get(&mut conn, receipts.batch_id)
        .await
        .expect("get")
        .expect("batch");
    assert_eq!(receipts_now.status, BatchStatus::Pending);

    // A changed rule for the invoices voids nothing of the receipts.
    rules.set(
        "invoices",
        Answer::Rule(rule.clone().with_provenance("v2", "changed")),
    );
    cohort.sweep(&scope_a(), now).await.expect("sweep");
    let receipts_now = d
        .get(&mut conn, receipts.batch_id)
        .await
        .expect("get")
        .expect("batch");
    assert_eq!(receipts_now.status, BatchStatus::Pending);
    d.approve(&mut conn, receipts.batch_id, "bob")
        .await
        .expect("approve");
    let result = cohort.sweep(&scope_a(), now).await.expect("sweep");
    assert_eq!(result.affected(), 2, "{result:#?}");
    assert!(left(&db).await.is_empty());
}
