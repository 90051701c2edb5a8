//! The batch protocol under the entity fence: range statements, rows other
//! transactions hold locked, deadlocks with host transactions, the bounded
//! fence wait, and partitioned tables, whose partitions reuse each other's
//! ctids. The hold races themselves are in `holds::races`.

use std::sync::{Arc, Mutex};
use std::time::Duration as StdDuration;

use crate::support::fixtures::{db_with_tables, note_id, scope_a, tenant_a};
use crate::support::models::*;
use crate::support::{TestDb, TestRules, count, db_with_cohort};
use chrono::{DateTime, Utc};
use cohort::holds::{DeletionOutcome, HoldRequest, Target};
use cohort::ledger::{AuditEvent, AuditObserver, FailureKind};
use cohort::policy::ProviderError;
use cohort::{
    BatchOrder, Capabilities, Cohort, ErasureRequest, Options, Period, Rule, RunStatus, Strategy,
};
use futures_util::future::BoxFuture;
use sqlx::Acquire;
use uuid::Uuid;

fn purge_rules() -> TestRules {
    TestRules::new()
        .with(
            "session-notes",
            Capabilities::only(Strategy::Purge),
            Rule::new(Period::days(30), Strategy::Purge),
        )
        .with(
            "tickets",
            Capabilities::only(Strategy::SoftDelete),
            Rule::new(Period::days(30), Strategy::SoftDelete),
        )
}

/// Cohort's tables, the shared models' tables and `n` expired notes (ids 1..n).
async fn setup(n: u32) -> TestDb {
    let db = db_with_tables().await;
    db.exec(&format!(
        "INSERT INTO session_notes (id, tenant_id, created_at, body) \
         SELECT ('00000000-0000-0000-0000-' || lpad(g::text, 12, '0'))::uuid, \
                '11111111-1111-1111-1111-111111111111', \
                now() - interval '100 days' + g * interval '1 second', 'b' \
         FROM generate_series(1, {n}) g; \
         INSERT INTO tickets (id, tenant_id, opened_at) \
         SELECT g, '11111111-1111-1111-1111-111111111111', now() - interval '100 days' \
         FROM generate_series(1, 3) g;"
    ))
    .await;
    db
}

async fn notes_left(db: &TestDb) -> i64 {
    count(db, "SELECT count(*) FROM session_notes").await
}

/// Waits until some backend of this database other than `except` waits for
/// a row (a transaction id or a tuple lock).
async fn wait_for_row_lock_waiter(db: &TestDb) {
    for _ in 0..3000 {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype IN ('transactionid', 'tuple') \
             AND pid IN (SELECT pid FROM pg_stat_activity WHERE datname = current_database())",
        )
        .fetch_one(db.pool())
        .await
        .expect("pg_locks");
        if waiting > 0 {
            return;
        }
        tokio::time::sleep(StdDuration::from_millis(10)).await;
    }
    panic!("nobody ever waited for a row lock");
}

// contract: X18, H11
#[tokio::test]
async fn each_purge_batch_is_one_range_statement_under_the_shared_fence() {
    one_range_statement_per_batch(BatchOrder::Anchor).await;
}

// contract: X18, H11, X1
#[tokio::test]
async fn in_physical_order_each_batch_is_one_page_range_statement_under_the_shared_fence() {
    one_range_statement_per_batch(BatchOrder::Physical).await;
}

async fn one_range_statement_per_batch(order: BatchOrder) {
    let db = setup(25).await;
    // Every DELETE statement on the table logs its transaction, its row
    // count, whether its backend held a shared entity fence, and the text of
    // the statement the client sent.
    db.exec(
        r#"
        CREATE TABLE public.stmt_log (txid bigint, n bigint, fenced boolean, query text);
        CREATE FUNCTION public.log_stmt() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          INSERT INTO public.stmt_log
          SELECT txid_current(), (SELECT count(*) FROM changed),
                 EXISTS (SELECT 1 FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory'
                         AND classid = 1131376754 AND objsubid = 2 AND mode = 'ShareLock' AND granted),
                 current_query();
          RETURN NULL;
        END $$;
        CREATE TRIGGER log_delete AFTER DELETE ON public.session_notes
          REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION public.log_stmt();
        CREATE TRIGGER log_update AFTER UPDATE ON public.tickets
          REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION public.log_stmt();
        "#,
    )
    .await;
    let cohort = Cohort::builder(db.pool().clone())
        .options(Options {
            batch_size: 10,
            batch_order: order,
            ..Options::default()
        })
        .rules(purge_rules())
        .entity::<SessionNote>()
        .entity::<Ticket>()
        .build()
        .await
        .expect("model");
    let result = cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    assert_eq!(result.status, RunStatus::Succeeded);
    assert_eq!(notes_left(&db).await, 0);
    let log: Vec<(i64, i64, bool, String)> =
        sqlx::query_as("SELECT txid, n, fenced, query FROM stmt_log ORDER BY txid")
            .fetch_all(db.pool())
            .await
            .expect("log");
    let counts: Vec<i64> = log.iter().map(|(_, n, _, _)| *n).collect();
    // Three note batches (10, 10, 5) and one ticket batch (3): statement-level
    // triggers fire once per statement, even when it changes no row.
    assert_eq!(counts, vec![10, 10, 5, 3], "{log:?}");
    let txids: std::collections::HashSet<i64> = log.iter().map(|(t, _, _, _)| *t).collect();
    assert_eq!(
        txids.len(),
        log.len(),
        "one statement per batch transaction"
    );
    for (_, _, fenced, query) in &log {
        assert!(fenced, "every batch holds its entity fence shared");
        assert!(
            query.starts_with("WITH g AS MATERIALIZED") && query.contains("hi AS MATERIALIZED"),
            "the batch is the range statement: {query}"
        );
        assert_eq!(
            query.contains("t.ctid OPERATOR(pg_catalog.>)"),
            order == BatchOrder::Physical,
            "{order:?}: the batch's range is of pages only in physical order: {query}"
        );
    }
}

// contract: X17
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadlock_with_a_host_that_locks_a_row_then_creates_a_hold_costs_a_retry_not_a_row() {
    deadlock_with_a_host_creating_a_hold(BatchOrder::Anchor).await;
}

// contract: X17, H11
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_physical_order_a_deadlock_with_a_host_creating_a_hold_costs_a_retry_not_a_row() {
    deadlock_with_a_host_creating_a_hold(BatchOrder::Physical).await;
}

async fn deadlock_with_a_host_creating_a_hold(order: BatchOrder) {
    let db = setup(10).await;
    // The range statement may wait for row locks longer than the server's
    // deadlock_timeout (1 s), so the deadlock detector settles it.
    let cohort = Cohort::builder(db.pool().clone())
        .options(Options {
            lock_wait: StdDuration::from_secs(5),
            batch_order: order,
            ..Options::default()
        })
        .rules(purge_rules())
        .entity::<SessionNote>()
        .build()
        .await
        .expect("model");
    // The host locks row 5 first; its own deadlock check is slower than the
    // sweep's, so the sweep is the one PostgreSQL picks as the victim.
    let mut tx = db.pool().begin().await.expect("begin");
    sqlx::query("SET LOCAL deadlock_timeout = '30s'")
        .execute(&mut *tx)
        .await
        .expect("set");
    sqlx::query("SELECT 1 FROM session_notes WHERE id = $1 FOR UPDATE")
        .bind(note_id(5))
        .execute(&mut *tx)
        .await
        .expect("lock");
    let sweep = tokio::spawn({
        let cohort = cohort.clone();
        async move { cohort.sweep(&scope_a(), Utc::now()).await }
    });
    // The batch holds the fence shared and waits for row 5.
    wait_for_row_lock_waiter(&db).await;
    // Now the host creates a hold on that row: it waits for the fence, the
    // batch waits for the host's row: a deadlock.
    let holding = tokio::spawn({
        let cohort = cohort.clone();
        async move {
            let hold = cohort
                .holds()
                .create(
                    &mut tx,
                    HoldRequest::new(
                        uuid(NOTE_ID),
                        note_id(5).to_string(),
                        Some(tenant_a()),
                        "case",
                        Utc::now(),
                    ),
                )
                .await;
            tx.commit().await.expect("commit");
            hold
        }
    });
    holding
        .await
        .expect("join")
        .expect("the host's hold is created once the batch backs off");
    let result = sweep.await.expect("join").expect("the run does not fail");
    assert_eq!(result.status, RunStatus::Succeeded);
    assert_eq!(result.affected(), 9);
    assert_eq!(result.summaries[0].held, 1);
    let left: Vec<Uuid> = sqlx::query_scalar("SELECT id FROM session_notes")
        .fetch_all(db.pool())
        .await
        .expect("left");
    assert_eq!(left, vec![note_id(5)], "no row lost, the held row kept");
}

// contract: X17, E7, H11
// The same deadlock on the locked path: an erasure waits for a row a host
// transaction holds locked (erasures wait, they never skip), and the host
// then creates a hold on that row, which waits for the erasure's fence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadlock_on_the_locked_path_costs_a_retry_of_the_batch_not_the_entity() {
    let db = db_with_tables().await;
    let subject = Uuid::new_v4();
    sqlx::query(
        "INSERT INTO user_records (id, tenant_id, created_at, user_id) \
         SELECT g, $1, now() - interval '3 years', $2 FROM generate_series(1, 10) g",
    )
    .bind(tenant_a())
    .bind(subject)
    .execute(db.pool())
    .await
    .expect("records");
    let cohort = Cohort::builder(db.pool().clone())
        .rules(TestRules::new().with(
            "user-data",
            Capabilities::only(Strategy::Purge),
            Rule::new(Period::days(30), Strategy::Purge),
        ))
        .entity::<UserRecord>()
        .build()
        .await
        .expect("model");
    // The host locks record 5; its own deadlock check is slower than the
    // erasure's, so the erasure's batch is the one PostgreSQL cancels.
    let mut tx = db.pool().begin().await.expect("begin");
    sqlx::query("SET LOCAL deadlock_timeout = '30s'")
        .execute(&mut *tx)
        .await
        .expect("set");
    sqlx::query("SELECT 1 FROM user_records WHERE id = 5 FOR UPDATE")
        .execute(&mut *tx)
        .await
        .expect("lock");
    let erasure = tokio::spawn({
        let cohort = cohort.clone();
        async move {
            cohort
                .erase(&scope_a(), Utc::now(), ErasureRequest::new(subject))
                .await
        }
    });
    // The erasure's batch holds the fence shared and waits for record 5.
    wait_for_row_lock_waiter(&db).await;
    let holding = tokio::spawn({
        let cohort = cohort.clone();
        async move {
            let hold = cohort
                .holds()
                .create(
                    &mut tx,
                    HoldRequest::new(
                        uuid("6b619c19-6e3c-44e8-a87f-975c68fd3988"),
                        "5",
                        Some(tenant_a()),
                        "case",
                        Utc::now(),
                    ),
                )
                .await;
            tx.commit().await.expect("commit");
            hold
        }
    });
    holding
        .await
        .expect("join")
        .expect("the host's hold is created once the erasure's batch backs off");
    let result = erasure.await.expect("join").expect("the run does not fail");
    assert_eq!(result.status, RunStatus::Succeeded, "{result:?}");
    assert!(result.entity_failures.is_empty(), "{result:?}");
    assert_eq!(result.affected(), 9);
    assert_eq!(result.summaries[0].held, 1);
    let left: Vec<i64> = sqlx::query_scalar("SELECT id FROM user_records")
        .fetch_all(db.pool())
        .await
        .expect("left");
    assert_eq!(left, vec![5], "no row lost, the held row kept");
}

// contract: X17
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_locked_longer_than_the_lock_wait_are_left_and_counted_and_the_rest_go() {
    locked_rows_are_left_and_counted(BatchOrder::Anchor).await;
}

// contract: X17
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_physical_order_rows_locked_longer_than_the_lock_wait_are_left_and_counted() {
    locked_rows_are_left_and_counted(BatchOrder::Physical).await;
}

async fn locked_rows_are_left_and_counted(order: BatchOrder) {
    let db = setup(30).await;
    let cohort = Cohort::builder(db.pool().clone())
        .options(Options {
            batch_size: 4,
            lock_wait: StdDuration::from_millis(50),
            batch_order: order,
            ..Options::default()
        })
        .rules(purge_rules())
        .entity::<SessionNote>()
        .build()
        .await
        .expect("model");
    let mut host = db.connect().await;
    let mut tx = host.begin().await.expect("begin");
    for n in [2, 3, 17] {
        sqlx::query("SELECT 1 FROM session_notes WHERE id = $1 FOR UPDATE")
            .bind(note_id(n))
            .execute(&mut *tx)
            .await
            .expect("lock");
    }
    let result = tokio::time::timeout(
        StdDuration::from_secs(60),
        cohort.sweep(&scope_a(), Utc::now()),
    )
    .await
    .expect("the sweep is never stalled for long")
    .expect("sweep");
    assert_eq!(result.status, RunStatus::Succeeded);
    assert_eq!(result.affected(), 27);
    assert_eq!(
        result.summaries[0].skipped, 3,
        "the locked rows are counted"
    );
    tx.rollback().await.expect("release");
    assert_eq!(notes_left(&db).await, 3);
    let again = cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    assert_eq!(again.affected(), 3, "a later run takes them");
}

// contract: H11, X5
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_held_longer_than_the_fence_wait_fails_that_type_and_the_run_goes_on() {
    let db = setup(5).await;
    let cohort = Cohort::builder(db.pool().clone())
        .options(Options {
            fence_wait: StdDuration::from_millis(300),
            ..Options::default()
        })
        .rules(purge_rules())
        .entity::<SessionNote>()
        .entity::<Ticket>()
        .build()
        .await
        .expect("model");
    // A long host transaction that created a hold on a note holds the notes'
    // fence until it ends.
    let mut host = db.connect().await;
    let mut tx = host.begin().await.expect("begin");
    cohort
        .holds()
        .create(
            &mut tx,
            HoldRequest::new(
                uuid(NOTE_ID),
                note_id(1).to_string(),
                Some(tenant_a()),
                "case",
                Utc::now(),
            ),
        )
        .await
        .expect("hold");
    let result = cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    assert_eq!(result.status, RunStatus::PartiallyFailed);
    assert_eq!(result.entity_failures.len(), 1);
    let failed = &result.entity_failures[0];
    assert_eq!(failed.entity_type, "SessionNote");
    assert_eq!(failed.failure.kind, FailureKind::FenceTimeout);
    assert_eq!(failed.failure.sqlstate.as_deref(), Some("55P03"));
    assert_eq!(notes_left(&db).await, 5, "no note touched");
    assert_eq!(
        count(&db, "SELECT count(*) FROM tickets WHERE is_deleted").await,
        3,
        "the other type was swept"
    );
    let stored: String = sqlx::query_scalar(
        "SELECT error FROM sweep_run_entity_summary WHERE entity_type = 'SessionNote'",
    )
    .fetch_one(db.pool())
    .await
    .expect("summary");
    assert!(stored.contains("FenceTimeout"), "{stored}");
    tx.commit().await.expect("commit");
    let again = cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    assert_eq!((again.affected(), again.summaries[0].held), (4, 1));
}

// ---------------------------------------------------------------------------
// Partitioned tables: partitions reuse each other's ctids ((0,1) is the first
// row of every partition), so no mutation may address a row by ctid alone.

/// Keeps the domain of an e-mail address.
struct KeepDomain;
impl cohort::Anonymiser for KeepDomain {
    fn anonymise(original: Option<&str>) -> Option<String> {
        let domain = original?.rsplit_once('@')?.1;
        Some(format!("redacted@{domain}"))
    }
}

#[allow(dead_code, reason = "mirrors the table; Cohort reads its descriptor")]
#[derive(cohort::Retained)]
#[cohort(
    category = "parted",
    anchor = "created_at",
    id = "7a0b2c4d-1e3f-4a5b-8c6d-9e0f1a2b3c4d",
    table = "parted_notes"
)]
struct PartedNote {
    id: i64,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
    anonymised_at: Option<DateTime<Utc>>,
    #[cohort(anonymise_with = KeepDomain)]
    email: Option<String>,
    is_deleted: bool,
    #[cohort(erasure_subject)]
    subject: Option<Uuid>,
}

const PARTED_ID: &str = "7a0b2c4d-1e3f-4a5b-8c6d-9e0f1a2b3c4d";

fn parted_rules(strategy: Strategy) -> TestRules {
    TestRules::new().with(
        "parted",
        Capabilities::only(Strategy::Purge)
            .and(Strategy::SoftDelete)
            .and(Strategy::Anonymise),
        Rule::new(Period::days(30), strategy).with_per_row_audit(),
    )
}

/// Rows 1..=5 in partition a (alpha.example) and 100..=104 in partition b
/// (beta.example), all expired, all of one subject.
async fn parted_db() -> TestDb {
    let (db, _) = db_with_cohort("public").await;
    db.exec(
        r#"
        CREATE TABLE public.parted_notes (
            id bigint NOT NULL, tenant_id uuid NOT NULL, created_at timestamptz NOT NULL,
            anonymised_at timestamptz, email text, is_deleted boolean NOT NULL DEFAULT false,
            subject uuid, PRIMARY KEY (id)) PARTITION BY RANGE (id);
        CREATE TABLE public.parted_notes_a PARTITION OF public.parted_notes FOR VALUES FROM (1) TO (100);
        CREATE TABLE public.parted_notes_b PARTITION OF public.parted_notes FOR VALUES FROM (100) TO (200);
        CREATE INDEX ON public.parted_notes (tenant_id, created_at, id);
        INSERT INTO public.parted_notes (id, tenant_id, created_at, email, subject)
            SELECT g, '11111111-1111-1111-1111-111111111111', now() - interval '100 days' + g * interval '1 second',
                   CASE WHEN g < 100 THEN 'u' || g || '@alpha.example' ELSE 'u' || g || '@beta.example' END,
                   'aaaaaaaa-0000-0000-0000-000000000001'
            FROM (SELECT generate_series(1, 5) UNION ALL SELECT generate_series(100, 104)) AS s(g);
        "#,
    )
    .await;
    // The premise: rows of the two partitions share ctids.
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM public.parted_notes a JOIN public.parted_notes b \
             ON a.ctid = b.ctid AND a.tableoid <> b.tableoid WHERE a.id = 1 AND b.id = 100"
        )
        .await,
        1
    );
    db
}

async fn parted_cohort(db: &TestDb, strategy: Strategy, observer: Events) -> Cohort {
    Cohort::builder(db.pool().clone())
        .options(Options {
            batch_size: 2,
            lock_wait: StdDuration::from_millis(50),
            ..Options::default()
        })
        .rules(parted_rules(strategy))
        .entity::<PartedNote>()
        .observer(observer)
        .build()
        .await
        .expect("a partitioned table is accepted")
}

#[derive(Clone, Default)]
struct Events(Arc<Mutex<Vec<AuditEvent>>>);

impl AuditObserver for Events {
    fn on_event<'a>(&'a self, event: &'a AuditEvent) -> BoxFuture<'a, Result<(), ProviderError>> {
        self.0.lock().expect("events").push(event.clone());
        Box::pin(async { Ok(()) })
    }
}

impl Events {
    fn largest_batch(&self) -> u64 {
        self.0
            .lock()
            .expect("events")
            .iter()
            .filter_map(|e| match e {
                AuditEvent::EntityProgress { batch_affected, .. } => Some(*batch_affected),
                _ => None,
            })
            .max()
            .unwrap_or(0)
    }
}

/// A host callback that deletes one parted note.
fn delete(
    id: i64,
) -> impl for<'c> FnOnce(&'c mut sqlx::PgConnection) -> BoxFuture<'c, Result<u64, sqlx::Error>> {
    move |c| {
        Box::pin(async move {
            Ok(sqlx::query("DELETE FROM public.parted_notes WHERE id = $1")
                .bind(id)
                .execute(c)
                .await?
                .rows_affected())
        })
    }
}

async fn parted_ids(db: &TestDb, condition: &str) -> Vec<i64> {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT id FROM public.parted_notes WHERE {condition} ORDER BY id"
    )))
    .fetch_all(db.pool())
    .await
    .expect("ids")
}

async fn hold_parted(cohort: &Cohort, db: &TestDb, id: i64) {
    let mut conn = db.connect().await;
    cohort
        .holds()
        .create(
            &mut conn,
            HoldRequest::new(
                uuid(PARTED_ID),
                id.to_string(),
                Some(tenant_a()),
                "case",
                Utc::now(),
            ),
        )
        .await
        .expect("hold");
}

/// Every strategy on a partitioned table, with a held row in one partition
/// (101, whose ctid twin 2 is swept) and a row locked by a host transaction
/// in the other (1, whose twin 100 is swept), in batches of two: the held and
/// locked rows stay, every other row is changed once, no batch changes more
/// than two rows, and the ledger names exactly the changed rows.
async fn sweep_partitions(strategy: Strategy) {
    let db = parted_db().await;
    let events = Events::default();
    let cohort = parted_cohort(&db, strategy, events.clone()).await;
    hold_parted(&cohort, &db, 101).await;
    let mut host = db.connect().await;
    let mut tx = host.begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM public.parted_notes WHERE id = 1 FOR UPDATE")
        .execute(&mut *tx)
        .await
        .expect("lock");
    let result = cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    tx.rollback().await.expect("release");
    assert_eq!(result.status, RunStatus::Succeeded, "{strategy}");
    let s = &result.summaries[0];
    assert_eq!((s.affected, s.held, s.skipped), (8, 1, 1), "{strategy}");
    assert!(
        events.largest_batch() <= 2,
        "{strategy}: a batch changed more rows than its size"
    );
    let changed = match strategy {
        Strategy::Purge => "false",
        Strategy::SoftDelete => "is_deleted",
        _ => "anonymised_at IS NOT NULL",
    };
    let kept = match strategy {
        Strategy::Purge => "true",
        Strategy::SoftDelete => "NOT is_deleted",
        _ => "anonymised_at IS NULL AND email LIKE 'u%'",
    };
    assert_eq!(parted_ids(&db, kept).await, vec![1, 101], "{strategy}");
    if strategy != Strategy::Purge {
        assert_eq!(
            parted_ids(&db, changed).await,
            vec![2, 3, 4, 5, 100, 102, 103, 104],
            "{strategy}"
        );
    }
    let details: Vec<String> =
        sqlx::query_scalar("SELECT record_id FROM sweep_run_row_detail ORDER BY record_id::bigint")
            .fetch_all(db.pool())
            .await
            .expect("details");
    assert_eq!(
        details,
        vec!["2", "3", "4", "5", "100", "102", "103", "104"],
        "{strategy}: one row detail per changed row"
    );
}

// contract: H1, X1, X17
#[tokio::test]
async fn a_partitioned_table_is_purged_row_for_row_never_by_a_ctid_twin() {
    sweep_partitions(Strategy::Purge).await;
}

// contract: H1, X1, X17
#[tokio::test]
async fn a_partitioned_table_is_soft_deleted_row_for_row_never_by_a_ctid_twin() {
    sweep_partitions(Strategy::SoftDelete).await;
}

// contract: H1, X1, S4
#[tokio::test]
async fn a_custom_anonymiser_on_a_partitioned_table_writes_each_row_its_own_value() {
    sweep_partitions(Strategy::Anonymise).await;
    // Each row got the value computed from its own original, not its twin's.
    let db = parted_db().await;
    let cohort = parted_cohort(&db, Strategy::Anonymise, Events::default()).await;
    cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    let emails: Vec<(i64, String)> =
        sqlx::query_as("SELECT id, email FROM public.parted_notes ORDER BY id")
            .fetch_all(db.pool())
            .await
            .expect("emails");
    for (id, email) in emails {
        let expected = if id < 100 {
            "redacted@alpha.example"
        } else {
            "redacted@beta.example"
        };
        assert_eq!(email, expected, "row {id}");
    }
}

// contract: H1, E1, DL1
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erasure_and_host_deletion_on_a_partitioned_table_respect_a_hold_in_either_partition() {
    let db = parted_db().await;
    let cohort = parted_cohort(&db, Strategy::Purge, Events::default()).await;
    hold_parted(&cohort, &db, 101).await;

    // Host deletions: the held row is protected, its ctid twin is not.
    let mut conn = db.pool().acquire().await.expect("connection");
    let target = |id: i64| Target::new(uuid(PARTED_ID), id.to_string(), Some(tenant_a()));
    let protected = cohort
        .deletion()
        .execute(&mut conn, &[target(101)], delete(101))
        .await
        .expect("deletion");
    assert!(matches!(protected, DeletionOutcome::Protected { .. }));
    let deleted = cohort
        .deletion()
        .execute(&mut conn, &[target(2)], delete(2))
        .await
        .expect("deletion");
    assert_eq!(deleted, DeletionOutcome::Deleted(1));

    // An erasure of the subject, in batches of two, while a host holds row 1
    // locked for a moment: the erasure waits for it (E7) and erases it.
    let mut host = db.connect().await;
    let mut tx = host.begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM public.parted_notes WHERE id = 100 FOR UPDATE")
        .execute(&mut *tx)
        .await
        .expect("lock");
    let erasure = tokio::spawn({
        let cohort = cohort.clone();
        async move {
            cohort
                .erase(
                    &scope_a(),
                    Utc::now(),
                    ErasureRequest::new(uuid("aaaaaaaa-0000-0000-0000-000000000001")),
                )
                .await
        }
    });
    wait_for_row_lock_waiter(&db).await;
    tx.rollback().await.expect("release");
    let result = erasure.await.expect("join").expect("erasure");
    assert_eq!(result.status, RunStatus::Succeeded);
    assert_eq!((result.affected(), result.summaries[0].held), (8, 1));
    assert_eq!(parted_ids(&db, "true").await, vec![101]);
    let details: Vec<String> =
        sqlx::query_scalar("SELECT record_id FROM sweep_run_row_detail ORDER BY record_id::bigint")
            .fetch_all(db.pool())
            .await
            .expect("details");
    assert_eq!(
        details,
        vec!["1", "3", "4", "5", "100", "102", "103", "104"]
    );
}

// contract: X15
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sweeps_of_a_partitioned_table_change_and_report_each_row_once() {
    for strategy in [Strategy::Purge, Strategy::SoftDelete, Strategy::Anonymise] {
        let db = parted_db().await;
        let a = parted_cohort(&db, strategy, Events::default()).await;
        let b = parted_cohort(&db, strategy, Events::default()).await;
        let (sa, sb) = (scope_a(), scope_a());
        let (ra, rb) = tokio::join!(a.sweep(&sa, Utc::now()), b.sweep(&sb, Utc::now()));
        let (ra, rb) = (ra.expect("sweep a"), rb.expect("sweep b"));
        assert_eq!(ra.affected() + rb.affected(), 10, "{strategy}");
        assert_eq!(
            count(&db, "SELECT count(*) FROM sweep_run_row_detail").await,
            10,
            "{strategy}"
        );
        assert_eq!(
            count(
                &db,
                "SELECT count(DISTINCT record_id) FROM sweep_run_row_detail"
            )
            .await,
            10,
            "{strategy}"
        );
    }
}
