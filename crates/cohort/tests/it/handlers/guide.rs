//! The row-handler guide's example (docs/handlers.md), run for real: a
//! purged document's file is deleted after the batch commits, and only the
//! purged ones.

use std::path::PathBuf;

use crate::support::{TestRules, count, db_with_cohort};
use chrono::{DateTime, Utc};
use cohort::handlers::{CapturedRow, HandlerContext, HandlerError, RowHandler, RowHandlerOptions};
use cohort::{BoxFuture, Capabilities, Cohort, Period, Rule, Scope, Strategy, TenantContext};
use uuid::Uuid;

#[derive(cohort::Retained)]
#[cohort(category = "documents", anchor = "uploaded_at")]
#[cohort(id = "5d0e8c1a-2b7f-4c3e-9a61-7f2d4b8e1c90", table = "documents")]
#[allow(dead_code)]
struct Document {
    id: Uuid,
    tenant_id: Uuid,
    uploaded_at: DateTime<Utc>,
    blob_key: String,
}

struct DeleteBlob {
    root: PathBuf,
}

impl RowHandler for DeleteBlob {
    type Snapshot = String;

    fn capture(&self, row: &CapturedRow) -> Result<String, HandlerError> {
        row.get("blob_key")
    }

    fn deliver<'a>(
        &'a self,
        ctx: &'a HandlerContext,
        blob_key: String,
    ) -> BoxFuture<'a, Result<(), HandlerError>> {
        Box::pin(async move {
            match tokio::fs::remove_file(self.root.join(&blob_key)).await {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => {
                    Err(format!("cannot delete {blob_key} for row {}: {e}", ctx.record_id).into())
                }
            }
        })
    }
}

// contract: RH3 (the guide's handler: delivered after commit, the side
// effect done for exactly the rows purged)
#[tokio::test]
async fn the_guides_handler_deletes_the_files_of_purged_documents() {
    let (db, _) = db_with_cohort("public").await;
    let tenant = Uuid::new_v4();
    let root = std::env::temp_dir().join(format!("cohort-blobs-{}", Uuid::new_v4().simple()));
    std::fs::create_dir_all(&root).expect("the blob root");
    db.exec(
        "CREATE TABLE documents (id uuid PRIMARY KEY, tenant_id uuid NOT NULL, \
                                 uploaded_at timestamptz NOT NULL, blob_key text NOT NULL)",
    )
    .await;
    for (i, days) in [(1, 400), (2, 300), (3, 10), (4, 5)] {
        let key = format!("doc-{i}.pdf");
        std::fs::write(root.join(&key), b"%PDF").expect("a blob");
        sqlx::query("INSERT INTO documents VALUES ($1, $2, now() - make_interval(days => $3), $4)")
            .bind(Uuid::new_v4())
            .bind(tenant)
            .bind(days)
            .bind(&key)
            .execute(db.pool())
            .await
            .expect("a document");
    }
    // doc-2's file is already gone: deliver treats that as done.
    std::fs::remove_file(root.join("doc-2.pdf")).expect("remove doc-2");

    let rules = TestRules::new().with(
        "documents",
        Capabilities::only(Strategy::Purge),
        Rule::new(Period::days(90), Strategy::Purge),
    );
    let cohort = Cohort::builder(db.pool().clone())
        .rules(rules)
        .entity::<Document>()
        .row_handler_with::<Document, _>(
            DeleteBlob { root: root.clone() },
            RowHandlerOptions::new().id(uuid::uuid!("0c6f4e2a-8d1b-4f3a-9e57-2a1c9b7d3e64")),
        )
        .build()
        .await
        .expect("the model");

    let result = cohort
        .sweep(&Scope::Tenant(TenantContext::new(tenant)), Utc::now())
        .await
        .expect("sweep");
    assert_eq!(result.affected(), 2);
    // Committed, queued, not delivered yet: the files are still there.
    assert!(root.join("doc-1.pdf").exists());

    let report = cohort.dispatcher().run_once().await.expect("dispatch");
    assert_eq!(report.succeeded, 2, "{report:?}");
    assert!(!root.join("doc-1.pdf").exists());
    assert!(root.join("doc-3.pdf").exists());
    assert!(root.join("doc-4.pdf").exists());
    assert_eq!(count(&db, "SELECT count(*) FROM documents").await, 2);
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM sweep_row_handler_status WHERE state = 'Succeeded'"
        )
        .await,
        2
    );
    let _ = std::fs::remove_dir_all(&root);
}
