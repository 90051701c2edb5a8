//! The archive strategy (contract SL2): rows copied into the archive table
//! and deleted from their own in one batch transaction, under the fence,
//! with the hold check in the statement; each batch's count and checksum in
//! the ledger; a purge stage that empties the archive after its period;
//! start-up checks of the archive table; erasure of archived copies; a
//! partitioned source; row handlers; concurrent sweeps and a killed
//! sweeping process never lose or duplicate a row.

use std::sync::{Arc, Mutex};
use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration, Utc};
use cohort::handlers::{CapturedRow, HandlerContext, HandlerError, RowHandler};
use cohort::{
    BoxFuture, Capabilities, Cohort, CohortBuilder, ErasureRequest, Error, Options, Period, Rule,
    RunStatus, Strategy,
};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::support::child::test_path;
use crate::support::fixtures::{fixed_now, hold_sql, scope_a, tenant_a};
use crate::support::{BuildEngine, TestDb, TestRules, count, db_with_cohort};

const DOCUMENT_ID: &str = "1e0a3b5c-7d9f-4e21-8a43-6c5b7d9e0f12";

/// Documents: archived after 30 days, purged from the archive 60 days later.
#[derive(cohort::Retained)]
#[cohort(
    category = "documents",
    anchor = "created_at",
    id = "1e0a3b5c-7d9f-4e21-8a43-6c5b7d9e0f12",
    table = "documents"
)]
#[allow(dead_code, reason = "only the descriptor is read")]
struct Document {
    id: i64,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
    title: Option<String>,
    tags: Option<Vec<String>>,
    #[cohort(erasure_subject)]
    owner_email: Option<String>,
}

/// Every kind of value the archive must copy exactly: NULLs, arrays, JSON
/// and JSONB, numeric, bytea, dates, booleans, an enum.
const DOCUMENTS: &str = "
    CREATE TYPE public.doc_kind AS ENUM ('invoice', 'receipt');
    CREATE TABLE public.documents (
        id bigint PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz NOT NULL,
        title text, tags text[], meta jsonb, raw json, amount numeric(12,2), blob bytea,
        due date, flag boolean, kind public.doc_kind, owner_email text);
    CREATE INDEX ON public.documents (tenant_id, created_at, id);";

fn caps() -> Capabilities {
    Capabilities::only(Strategy::Archive)
        .and(Strategy::Purge)
        .staged()
        .archive_into("archive")
}

fn archive_then_purge() -> Rule {
    Rule::new(Period::days(30), Strategy::Archive).then(Period::days(60), Strategy::Purge)
}

fn builder(db: &TestDb, batch: u32) -> CohortBuilder {
    Cohort::builder(db.engine_pool().clone())
        .options(Options {
            batch_size: batch,
            ..Options::default()
        })
        .rules(TestRules::new().with("documents", caps(), archive_then_purge()))
        .entity::<Document>()
}

/// A database with the documents table and its archive table, made from
/// the handle's own DDL.
async fn documents_db() -> TestDb {
    let (db, _) = db_with_cohort("public").await;
    db.exec(DOCUMENTS).await;
    let ddl = builder(&db, 3).archive_sql().expect("archive DDL");
    db.exec(&ddl).await;
    db
}

async fn document(db: &TestDb, id: i64, created: DateTime<Utc>) {
    sqlx::query(
        "INSERT INTO public.documents (id, tenant_id, created_at, title, tags, meta, raw, amount, \
         blob, due, flag, kind, owner_email) \
         VALUES ($1, $2, $3, \
                 CASE WHEN $1 % 3 = 0 THEN NULL ELSE 'Doc \"' || $1 || '\" ünïcode' END, \
                 CASE WHEN $1 % 2 = 0 THEN ARRAY['a', NULL, 'c,d'] END, \
                 jsonb_build_object('n', $1, 'nested', jsonb_build_array(1.5, 'x', NULL)), \
                 '{\"b\": 1,   \"a\": [true]}'::json, \
                 ($1 * 1.25)::numeric(12,2), \
                 CASE WHEN $1 % 2 = 1 THEN '\\x00ff10'::bytea END, \
                 DATE '2026-01-31' + $1::int, $1 % 2 = 0, \
                 CASE WHEN $1 % 2 = 0 THEN 'invoice' ELSE 'receipt' END::public.doc_kind, \
                 'owner' || $1 || '@example.org')",
    )
    .bind(id)
    .bind(tenant_a())
    .bind(created)
    .execute(db.pool())
    .await
    .expect("insert document");
}

/// Each row of `table` (without Cohort's columns) as JSON, by id.
async fn rows_as_json(db: &TestDb, table: &str) -> Vec<(i64, serde_json::Value)> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT t.id, to_jsonb(t) - 'cohort_run_id' - 'cohort_batch' - 'cohort_archived_at' \
         FROM {table} AS t ORDER BY t.id"
    )))
    .fetch_all(db.pool())
    .await
    .expect("rows")
}

/// Each archive batch's recorded count and checksum beside those computed
/// again from the archive table's rows of that batch.
async fn batches(db: &TestDb) -> Vec<(i64, i64, Vec<u8>, i64, Option<Vec<u8>>)> {
    sqlx::query_as(
        "SELECT b.batch, b.row_count, b.checksum, \
                (SELECT count(*) FROM archive.documents a WHERE a.cohort_run_id = b.run_id \
                   AND a.cohort_batch = b.batch), \
                (SELECT sha256(string_agg(record_send(a), '\\x0a'::bytea ORDER BY a.id)) \
                   FROM archive.documents a WHERE a.cohort_run_id = b.run_id AND a.cohort_batch = b.batch) \
         FROM retention_archive_batches b ORDER BY b.run_id, b.batch",
    )
    .fetch_all(db.pool())
    .await
    .expect("archive batches")
}

// contract: SL2
#[tokio::test]
async fn archiving_copies_every_column_exactly_and_records_each_batch() {
    let db = documents_db().await;
    let now = fixed_now();
    for id in 1..=9 {
        document(&db, id, now - Duration::days(40 + id)).await;
    }
    document(&db, 10, now - Duration::days(5)).await;
    let before = rows_as_json(&db, "public.documents").await;
    let cohort = builder(&db, 3)
        .build_engine(&db)
        .await
        .expect("valid model");
    hold_sql(&db, DOCUMENT_ID, 4, tenant_a()).await;

    let result = cohort.sweep(&scope_a(), now).await.expect("sweep");
    assert_eq!(result.status, RunStatus::Succeeded, "{result:#?}");
    let archive = &result.summaries[0];
    assert_eq!(archive.strategy, Some(Strategy::Archive));
    assert_eq!((archive.affected, archive.held), (8, 1), "{result:#?}");

    // The young and the held rows stay; the others moved, every value
    // exactly as it was.
    let left: Vec<i64> = rows_as_json(&db, "public.documents")
        .await
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert_eq!(left, vec![4, 10]);
    let archived = rows_as_json(&db, "archive.documents").await;
    let expected: Vec<_> = before
        .into_iter()
        .filter(|(id, _)| *id != 4 && *id != 10)
        .collect();
    assert_eq!(archived, expected);
    let runs = count(
        &db,
        &format!(
            "SELECT count(*) FROM archive.documents WHERE cohort_run_id = '{}'",
            result.run_id
        ),
    )
    .await;
    assert_eq!(runs, 8);

    // Three batches of at most 3, each recorded with a count and checksum the
    // archive table's rows reproduce.
    let recorded = batches(&db).await;
    assert_eq!(
        recorded.iter().map(|b| b.0).collect::<Vec<_>>(),
        vec![1, 2, 3],
        "{recorded:?}"
    );
    assert!(
        recorded.iter().all(|b| (1..=3).contains(&b.1)),
        "{recorded:?}"
    );
    assert_eq!(recorded.iter().map(|b| b.1).sum::<i64>(), 8);
    for (batch, rows, checksum, found, recomputed) in &recorded {
        assert_eq!(rows, found, "batch {batch}");
        assert_eq!(Some(checksum), recomputed.as_ref(), "batch {batch}");
    }
    // The checksum covers the values: one changed archived value no longer
    // matches its batch's.
    db.exec(
        "UPDATE archive.documents SET amount = amount + 0.01 \
         WHERE id = (SELECT min(id) FROM archive.documents WHERE cohort_batch = 1)",
    )
    .await;
    let changed = batches(&db).await;
    assert_ne!(Some(&changed[0].2), changed[0].4.as_ref());
    assert_eq!(Some(&changed[1].2), changed[1].4.as_ref());
}

// contract: SL2, SL1
#[tokio::test]
async fn the_purge_stage_empties_the_archive_after_its_period_never_in_the_same_sweep() {
    let db = documents_db().await;
    // A logical time ahead of the database clock: the rows this sweep
    // archives would already be past the purge stage's period.
    let now = Utc::now() + Duration::days(100);
    for id in 1..=4 {
        document(&db, id, now - Duration::days(40)).await;
    }
    let cohort = builder(&db, 3)
        .build_engine(&db)
        .await
        .expect("valid model");
    let first = cohort.sweep(&scope_a(), now).await.expect("sweep");
    let strategies: Vec<_> = first
        .summaries
        .iter()
        .map(|s| (s.category, s.strategy, s.affected))
        .collect();
    assert_eq!(
        strategies,
        vec![
            ("documents", Some(Strategy::Archive), 4),
            ("documents:archive", Some(Strategy::Purge), 0)
        ],
        "{first:#?}"
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM archive.documents").await,
        4
    );

    // Two archived rows are made older than the purge stage's period.
    db.exec(
        "UPDATE archive.documents SET cohort_archived_at = cohort_archived_at - interval '1 year' \
         WHERE id IN (1, 2)",
    )
    .await;
    let second = cohort
        .sweep(&scope_a(), Utc::now())
        .await
        .expect("second sweep");
    assert_eq!(second.status, RunStatus::Succeeded, "{second:#?}");
    let left: Vec<i64> = sqlx::query_scalar("SELECT id FROM archive.documents ORDER BY id")
        .fetch_all(db.pool())
        .await
        .expect("archive");
    assert_eq!(left, vec![3, 4]);
    assert_eq!(second.summaries[1].affected, 2, "{second:#?}");
}

// contract: SL2
#[tokio::test]
async fn start_up_checks_the_archive_table_and_gives_its_ddl() {
    let (db, _) = db_with_cohort("public").await;
    db.exec(DOCUMENTS).await;
    // As the administrative user: what is checked here is the archive
    // table, not the role's grants (which name the archive schema).
    let builder = |db: &TestDb, batch: u32| {
        Cohort::builder(db.pool().clone())
            .options(Options {
                batch_size: batch,
                ..Options::default()
            })
            .rules(TestRules::new().with("documents", caps(), archive_then_purge()))
            .entity::<Document>()
    };
    let refused = |err: Error| match err {
        Error::Validation(report) => report.to_string(),
        other => panic!("expected a validation report, got {other:?}"),
    };
    // Missing: the fix is the DDL.
    let text = refused(builder(&db, 3).build().await.expect_err("no archive table"));
    assert!(
        text.contains("the archive table archive.documents does not exist")
            && text.contains("CREATE TABLE IF NOT EXISTS \"archive\".\"documents\" (LIKE \"public\".\"documents\")"),
        "{text}"
    );
    // A column of another type, one missing, and no unique key: all listed.
    db.exec(
        "CREATE SCHEMA archive;
         CREATE TABLE archive.documents (LIKE public.documents);
         ALTER TABLE archive.documents ALTER COLUMN amount TYPE text, DROP COLUMN kind,
             ADD COLUMN cohort_run_id uuid NOT NULL, ADD COLUMN cohort_batch bigint NOT NULL,
             ADD COLUMN cohort_archived_at timestamptz NOT NULL;",
    )
    .await;
    let text = refused(
        builder(&db, 3)
            .build()
            .await
            .expect_err("a bad archive table"),
    );
    for needle in [
        "has column amount as text, the table has numeric(12,2)",
        "has no column kind (",
        "has no unique key on the record id id",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in {text}");
    }
    // Made from the handle's DDL, it is accepted.
    db.exec("DROP TABLE archive.documents").await;
    db.exec(&builder(&db, 3).archive_sql().expect("DDL")).await;
    builder(&db, 3)
        .build()
        .await
        .expect("the archive table is right");
}

// contract: SL2
#[tokio::test]
async fn erasure_deletes_the_subjects_rows_and_their_archived_copies() {
    let db = documents_db().await;
    let now = fixed_now();
    document(&db, 1, now - Duration::days(400)).await;
    document(&db, 2, now - Duration::days(1)).await;
    document(&db, 3, now - Duration::days(400)).await;
    let cohort = builder(&db, 3)
        .build_engine(&db)
        .await
        .expect("valid model");
    cohort.sweep(&scope_a(), now).await.expect("sweep");
    // Row 2 (young) is in the table; 1 and 3 are archived. Owner 2 and owner
    // 1 ask to be erased.
    db.exec("UPDATE public.documents SET owner_email = 'owner1@example.org' WHERE id = 2")
        .await;
    let result = cohort
        .erase(&scope_a(), now, ErasureRequest::new("owner1@example.org"))
        .await
        .expect("erasure");
    assert_eq!(result.status, RunStatus::Succeeded, "{result:#?}");
    let erased: Vec<_> = result
        .summaries
        .iter()
        .map(|s| (s.category, s.strategy, s.affected))
        .collect();
    assert_eq!(
        erased,
        vec![
            ("documents", Some(Strategy::Purge), 1),
            ("documents:archive", Some(Strategy::Purge), 1)
        ]
    );
    assert_eq!(count(&db, "SELECT count(*) FROM public.documents").await, 0);
    let left: Vec<i64> = sqlx::query_scalar("SELECT id FROM archive.documents")
        .fetch_all(db.pool())
        .await
        .expect("archive");
    assert_eq!(left, vec![3], "another owner's archived row stays");
}

// contract: SL2
#[tokio::test]
async fn a_partitioned_table_archives_from_every_partition() {
    let (db, _) = db_with_cohort("public").await;
    db.exec(
        "CREATE TYPE public.doc_kind AS ENUM ('invoice', 'receipt');
         CREATE TABLE public.documents (
             id bigint NOT NULL, tenant_id uuid NOT NULL, created_at timestamptz NOT NULL,
             title text, tags text[], meta jsonb, raw json, amount numeric(12,2), blob bytea,
             due date, flag boolean, kind public.doc_kind, owner_email text,
             PRIMARY KEY (id, created_at)) PARTITION BY RANGE (created_at);
         CREATE TABLE public.documents_old PARTITION OF public.documents
             FOR VALUES FROM (MINVALUE) TO ('2026-01-01');
         CREATE TABLE public.documents_new PARTITION OF public.documents
             FOR VALUES FROM ('2026-01-01') TO (MAXVALUE);
         CREATE INDEX ON public.documents (tenant_id, created_at, id);",
    )
    .await;
    db.exec(&builder(&db, 2).archive_sql().expect("DDL")).await;
    let now = fixed_now();
    for (id, age) in [(1, 400), (2, 300), (3, 60), (4, 45), (5, 3)] {
        document(&db, id, now - Duration::days(age)).await;
    }
    let cohort = builder(&db, 2)
        .build_engine(&db)
        .await
        .expect("valid model");
    let result = cohort.sweep(&scope_a(), now).await.expect("sweep");
    assert_eq!(result.summaries[0].affected, 4, "{result:#?}");
    let archived: Vec<i64> = sqlx::query_scalar("SELECT id FROM archive.documents ORDER BY id")
        .fetch_all(db.pool())
        .await
        .expect("archive");
    assert_eq!(archived, vec![1, 2, 3, 4]);
    assert_eq!(count(&db, "SELECT count(*) FROM public.documents").await, 1);
    assert!(
        result.summaries.iter().all(|s| s.partitions.is_empty()),
        "an archiving type never drops a partition: {result:#?}"
    );
}

/// What the archive's row handler keeps of a row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Kept {
    title: Option<String>,
}

/// Records each delivery's strategy and snapshot.
struct Keeper(Arc<Mutex<Vec<(Strategy, Kept)>>>);

impl RowHandler for Keeper {
    type Snapshot = Kept;

    fn capture(&self, row: &CapturedRow) -> Result<Kept, HandlerError> {
        Ok(Kept {
            title: row.get("title")?,
        })
    }

    fn deliver<'a>(
        &'a self,
        ctx: &'a HandlerContext,
        snapshot: Kept,
    ) -> BoxFuture<'a, Result<(), HandlerError>> {
        Box::pin(async move {
            self.0.lock().expect("log").push((ctx.strategy, snapshot));
            Ok(())
        })
    }
}

// contract: SL2
#[tokio::test]
async fn a_row_handler_gets_each_archived_row() {
    let db = documents_db().await;
    let now = fixed_now();
    document(&db, 1, now - Duration::days(40)).await;
    document(&db, 2, now - Duration::days(40)).await;
    let log = Arc::new(Mutex::new(Vec::new()));
    let cohort = builder(&db, 3)
        .row_handler::<Document, _>(Keeper(log.clone()))
        .build_engine(&db)
        .await
        .expect("valid model");
    let result = cohort.sweep(&scope_a(), now).await.expect("sweep");
    assert_eq!(result.summaries[0].affected, 2, "{result:#?}");
    cohort.dispatcher().run_once().await.expect("dispatch");
    let mut seen = log.lock().expect("log").clone();
    seen.sort_by(|a, b| a.1.title.cmp(&b.1.title));
    assert_eq!(
        seen,
        vec![
            (
                Strategy::Archive,
                Kept {
                    title: Some("Doc \"1\" ünïcode".to_owned())
                }
            ),
            (
                Strategy::Archive,
                Kept {
                    title: Some("Doc \"2\" ünïcode".to_owned())
                }
            ),
        ]
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM archive.documents").await,
        2
    );
}

// contract: SL2
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_sweeps_archive_each_row_once() {
    let db = documents_db().await;
    let now = fixed_now();
    for id in 1..=200 {
        document(&db, id, now - Duration::days(40 + id % 7)).await;
    }
    let a = builder(&db, 7).build_engine(&db).await.expect("handle a");
    let b = builder(&db, 5).build_engine(&db).await.expect("handle b");
    let scope = scope_a();
    let (ra, rb) = tokio::join!(a.sweep(&scope, now), b.sweep(&scope, now));
    let (ra, rb) = (ra.expect("sweep a"), rb.expect("sweep b"));
    assert_eq!(
        ra.summaries[0].affected + rb.summaries[0].affected,
        200,
        "{ra:#?} {rb:#?}"
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM archive.documents").await,
        200
    );
    assert_eq!(
        count(&db, "SELECT count(DISTINCT id) FROM archive.documents").await,
        200
    );
    assert_eq!(
        count(
            &db,
            "SELECT coalesce(sum(row_count), 0)::bigint FROM retention_archive_batches"
        )
        .await,
        200
    );
}

/// The child side of the kill test: when `COHORT_ARCHIVE_CHILD_URL` names
/// a database, archives it in batches of 3 until killed. Otherwise nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_archiver_process() {
    let Ok(url) = std::env::var("COHORT_ARCHIVE_CHILD_URL") else {
        return;
    };
    let connect: sqlx::postgres::PgConnectOptions = url.parse().expect("the parent's URL");
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect_with(connect.application_name("cohort-archiver"))
        .await
        .expect("child pool");
    let cohort = Cohort::builder(pool)
        .options(Options {
            batch_size: 3,
            ..Options::default()
        })
        .rules(TestRules::new().with("documents", caps(), archive_then_purge()))
        .entity::<Document>()
        .build()
        .await
        .expect("child handle");
    loop {
        let _ = cohort.sweep(&scope_a(), fixed_now()).await;
    }
}

// contract: SL2
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_archiving_process_loses_and_duplicates_nothing() {
    let db = documents_db().await;
    let now = fixed_now();
    const ROWS: i64 = 600;
    for id in 1..=ROWS {
        document(&db, id, now - Duration::days(40)).await;
    }
    // The parent's own handle registers the type (the child's may not get
    // that far) and finishes the job afterwards.
    let cohort = builder(&db, 50)
        .build_engine(&db)
        .await
        .expect("valid model");
    let exe = std::env::current_exe().expect("the test binary");
    let mut child = std::process::Command::new(&exe)
        .args([
            "--exact",
            test_path(module_path!(), "child_archiver_process").as_str(),
            "--nocapture",
            "--test-threads=1",
        ])
        .env("COHORT_ARCHIVE_CHILD_URL", db.url())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("child");
    // Wait for the child to be part way through, then SIGKILL it.
    let mut archived = 0;
    for _ in 0..6000 {
        archived = count(&db, "SELECT count(*) FROM archive.documents").await;
        if archived >= 30 {
            break;
        }
        tokio::time::sleep(StdDuration::from_millis(10)).await;
    }
    child.kill().expect("kill -9");
    child.wait().expect("reap");
    assert!(archived >= 30, "the child never archived");
    for _ in 0..3000 {
        let left = count(
            &db,
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'cohort-archiver'",
        )
        .await;
        if left == 0 {
            break;
        }
        tokio::time::sleep(StdDuration::from_millis(10)).await;
    }

    // What the killed process committed is whole: the table and the
    // archive hold every row once, and the batches' records match.
    let check = |stage: &'static str| {
        let db = &db;
        async move {
            let source = count(db, "SELECT count(*) FROM public.documents").await;
            let archive = count(db, "SELECT count(*) FROM archive.documents").await;
            let distinct = count(db, "SELECT count(DISTINCT id) FROM archive.documents").await;
            let both = count(
                db,
                "SELECT count(*) FROM public.documents d JOIN archive.documents a USING (id)",
            )
            .await;
            assert_eq!(source + archive, ROWS, "{stage}");
            assert_eq!((distinct, both), (archive, 0), "{stage}");
            let recorded = count(
                db,
                "SELECT coalesce(sum(row_count), 0)::bigint FROM retention_archive_batches",
            )
            .await;
            assert_eq!(recorded, archive, "{stage}");
            for (batch, rows, checksum, found, recomputed) in batches(db).await {
                assert_eq!(rows, found, "{stage}: batch {batch}");
                assert_eq!(Some(checksum), recomputed, "{stage}: batch {batch}");
            }
        }
    };
    check("after the kill").await;
    cohort.settle_abandoned_runs().await.ok();
    let result = cohort.sweep(&scope_a(), now).await.expect("sweep");
    assert_eq!(result.status, RunStatus::Succeeded, "{result:#?}");
    check("after the next sweep").await;
    assert_eq!(count(&db, "SELECT count(*) FROM public.documents").await, 0);
}
