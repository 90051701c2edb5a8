//! The execution model: batches, locks, races, cancellation, stale runs,
//! readiness at every entry point.

use std::sync::{Arc, Mutex};
use std::time::Duration as StdDuration;

use crate::support;
use crate::support::fixtures::{db_with_tables, note_id, scope_a, tenant_a};
use crate::support::models::*;
use crate::support::observers::CancelAfterFirstBatch;
use crate::support::{TestDb, TestRules, count, db_with_cohort};
use chrono::{Duration, Utc};
use cohort::ledger::{AuditEvent, AuditObserver};
use cohort::policy::ProviderError;
use cohort::{Capabilities, Cohort, Options, Period, Rule, RunStatus, Strategy, SweepOptions};
use futures_util::future::BoxFuture;
use sqlx::{Connection, PgConnection};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

fn rules(strategy: Strategy) -> TestRules {
    TestRules::new()
        .with(
            "session-notes",
            Capabilities::only(Strategy::Purge),
            Rule::new(Period::days(30), Strategy::Purge),
        )
        .with(
            "tickets",
            Capabilities::only(strategy),
            Rule::new(Period::days(30), strategy).with_per_row_audit(),
        )
        .with(
            "case-contacts",
            Capabilities::only(Strategy::Anonymise),
            Rule::new(Period::days(30), Strategy::Anonymise).with_per_row_audit(),
        )
}

async fn cohort_with(db: &TestDb, rules: TestRules, batch_size: u32) -> Cohort {
    Cohort::builder(db.pool().clone())
        .options(Options {
            batch_size,
            ..Options::default()
        })
        .rules(rules)
        .entity::<SessionNote>()
        .entity::<Ticket>()
        .entity::<CaseContact>()
        .build()
        .await
        .expect("model")
}

/// `n` expired notes with ids 1..n as UUIDs in anchor order.
async fn notes(db: &TestDb, n: i64) {
    sqlx::query(
        "INSERT INTO session_notes (id, tenant_id, created_at, body) \
         SELECT ('00000000-0000-0000-0000-' || lpad(g::text, 12, '0'))::uuid, $1, \
                now() - interval '100 days' + g * interval '1 second', 'x' \
         FROM generate_series(1, $2) g",
    )
    .bind(tenant_a())
    .bind(n)
    .execute(db.pool())
    .await
    .expect("notes");
}

/// Records every event it hears.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<AuditEvent>>>);

impl AuditObserver for Recorder {
    fn on_event<'a>(&'a self, event: &'a AuditEvent) -> BoxFuture<'a, Result<(), ProviderError>> {
        self.0.lock().expect("events").push(event.clone());
        Box::pin(async { Ok(()) })
    }
}

/// Creates and commits a hold on note 5 the way hold creation does: the row
/// read `FOR SHARE` first, then the hold inserted, judged from the database clock.
async fn hold_row_five_as_hold_creation_does(db: &TestDb) {
    let mut holder = db.connect().await;
    let mut tx = holder.begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM session_notes WHERE id = $1 FOR SHARE")
        .bind(note_id(5))
        .execute(&mut *tx)
        .await
        .expect("share lock");
    sqlx::query(
        "INSERT INTO retention_holds (hold_id, retained_entity_id, record_id, tenant_id, reason, created_at) \
         VALUES (gen_random_uuid(), $1, $2, $3, 'race', statement_timestamp())",
    )
    .bind(uuid(NOTE_ID))
    .bind(note_id(5).to_string())
    .bind(tenant_a())
    .execute(&mut *tx)
    .await
    .expect("hold");
    tx.commit().await.expect("commit hold");
}

// contract: X1, X14
#[tokio::test]
async fn batches_are_bounded_and_commit_one_by_one() {
    let db = db_with_tables().await;
    // A statement-level trigger records how many rows each DELETE removed.
    db.exec(
        r#"
        CREATE TABLE delete_sizes (n bigint);
        CREATE FUNCTION record_delete_size() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN INSERT INTO delete_sizes SELECT count(*) FROM gone; RETURN NULL; END $$;
        CREATE TRIGGER sizes AFTER DELETE ON session_notes REFERENCING OLD TABLE AS gone
            FOR EACH STATEMENT EXECUTE FUNCTION record_delete_size();
        "#,
    )
    .await;
    notes(&db, 25).await;
    let recorder = Recorder::default();
    let cohort = Cohort::builder(db.pool().clone())
        .options(Options {
            batch_size: 10,
            ..Options::default()
        })
        .rules(rules(Strategy::Purge))
        .entity::<SessionNote>()
        .observer(recorder.clone())
        .build()
        .await
        .expect("model");
    let result = cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    assert_eq!(result.affected(), 25);
    let sizes: Vec<i64> =
        sqlx::query_scalar("SELECT n FROM delete_sizes WHERE n > 0 ORDER BY n DESC")
            .fetch_all(db.pool())
            .await
            .expect("sizes");
    assert_eq!(sizes, vec![10, 10, 5], "one bounded DELETE per batch");
    let progress: Vec<u64> = recorder
        .0
        .lock()
        .expect("events")
        .iter()
        .filter_map(|e| match e {
            AuditEvent::EntityProgress { batch_affected, .. } => Some(*batch_affected),
            _ => None,
        })
        .collect();
    assert_eq!(progress, vec![10, 10, 5]);
}

// contract: X1, X5
#[tokio::test]
async fn a_failing_batch_loses_only_itself() {
    let db = db_with_tables().await;
    notes(&db, 25).await;
    // The 15th row refuses to be deleted: the second batch fails and rolls back.
    db.exec(
        r#"
        CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN IF OLD.id = '00000000-0000-0000-0000-000000000015' THEN RAISE EXCEPTION 'no'; END IF; RETURN OLD; END $$;
        CREATE TRIGGER refuse BEFORE DELETE ON session_notes FOR EACH ROW EXECUTE FUNCTION refuse();
        "#,
    )
    .await;
    let cohort = cohort_with(&db, rules(Strategy::Purge), 10).await;
    let result = cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    assert_eq!(result.status, RunStatus::PartiallyFailed);
    assert_eq!(
        count(&db, "SELECT count(*) FROM session_notes").await,
        15,
        "first batch committed, second rolled back"
    );
    let summary = result
        .summaries
        .iter()
        .find(|s| s.entity_type == "SessionNote")
        .expect("notes");
    assert_eq!(summary.affected, 10);
    assert_eq!(
        result.entity_failures[0].failure.sqlstate.as_deref(),
        Some("P0001")
    );
    assert_eq!(
        count(
            &db,
            "SELECT affected_count FROM sweep_run_entity_summary WHERE entity_type = 'SessionNote'"
        )
        .await,
        10
    );
}

/// Looks at the ledger from another connection when the run starts.
struct StartedProbe {
    url: String,
    seen: Arc<Mutex<Option<(String, bool, i64)>>>,
}

impl AuditObserver for StartedProbe {
    fn on_event<'a>(&'a self, event: &'a AuditEvent) -> BoxFuture<'a, Result<(), ProviderError>> {
        Box::pin(async move {
            if let AuditEvent::Started { run_id, .. } = event {
                let mut conn = PgConnection::connect(&self.url).await?;
                let (status, unsettled): (String, bool) = sqlx::query_as(
                    "SELECT status, settled_at IS NULL FROM sweep_run WHERE run_id = $1",
                )
                .bind(run_id)
                .fetch_one(&mut conn)
                .await?;
                let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM session_notes")
                    .fetch_one(&mut conn)
                    .await?;
                *self.seen.lock().expect("seen") = Some((status, unsettled, rows));
            }
            Ok(())
        })
    }
}

// contract: X2
#[tokio::test]
async fn the_started_row_commits_before_any_mutation_and_the_run_holds_its_lock() {
    let db = db_with_tables().await;
    notes(&db, 5).await;
    let seen = Arc::new(Mutex::new(None));
    let cohort = Cohort::builder(db.pool().clone())
        .rules(rules(Strategy::Purge))
        .entity::<SessionNote>()
        .observer(StartedProbe {
            url: db.url(),
            seen: seen.clone(),
        })
        .build()
        .await
        .expect("model");
    let result = cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    assert_eq!(result.affected(), 5);
    assert_eq!(
        seen.lock().expect("seen").clone(),
        Some(("Started".to_string(), true, 5)),
        "another connection saw the committed Started row, settled_at NULL, before any row changed"
    );
}

// contract: X4
#[tokio::test]
async fn abandoned_runs_are_settled_failed_but_a_live_run_is_never_recovered() {
    let db = db_with_tables().await;
    let cohort = Cohort::builder(db.pool().clone())
        .options(Options {
            settle_timeout: StdDuration::from_secs(60),
            ..Options::default()
        })
        .rules(rules(Strategy::Purge))
        .entity::<SessionNote>()
        .build()
        .await
        .expect("model");
    let abandoned = Uuid::new_v4();
    let live = Uuid::new_v4();
    let recent = Uuid::new_v4();
    for (id, age) in [
        (abandoned, "2 hours"),
        (live, "2 hours"),
        (recent, "10 seconds"),
    ] {
        sqlx::query(
            "INSERT INTO sweep_run (run_id, run_kind, trigger, dry_run, tenant_id, logical_now, status, started_at) \
             VALUES ($1, 'Sweep', 'Manual', false, $2, now(), 'Started', now() - $3::interval)",
        )
        .bind(id)
        .bind(tenant_a())
        .bind(age)
        .execute(db.pool())
        .await
        .expect("run");
    }
    // The live run's owner still holds its run lock.
    let mut owner = db.connect().await;
    sqlx::query("SELECT pg_advisory_lock(hashtextextended('cohort-run|' || $1::text, 0))")
        .bind(live)
        .execute(&mut owner)
        .await
        .expect("lock");
    assert_eq!(cohort.settle_abandoned_runs().await.expect("settle"), 1);
    let statuses: Vec<(Uuid, String, bool)> =
        sqlx::query_as("SELECT run_id, status, settled_at IS NOT NULL FROM sweep_run")
            .fetch_all(db.pool())
            .await
            .expect("runs");
    for (id, status, settled) in statuses {
        if id == abandoned {
            assert_eq!((status.as_str(), settled), ("Failed", true));
        } else {
            assert_eq!(
                (status.as_str(), settled),
                ("Started", false),
                "live or recent run untouched"
            );
        }
    }
    let error: String = sqlx::query_scalar("SELECT error FROM sweep_run WHERE run_id = $1")
        .bind(abandoned)
        .fetch_one(db.pool())
        .await
        .expect("error");
    assert!(error.contains("Abandoned"), "{error}");
    // Once the owner is gone, the run can be recovered. Its backend drops
    // the run lock as it exits, a moment after the client closes: wait for
    // exactly that (the lock gone from pg_locks), not for some time.
    let owner_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut owner)
        .await
        .expect("pid");
    owner.close().await.expect("close");
    let mut gone = false;
    for _ in 0..2000 {
        let held: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_locks WHERE pid = $1")
            .bind(owner_pid)
            .fetch_one(db.pool())
            .await
            .expect("pg_locks");
        if held == 0 {
            gone = true;
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(gone, "the owner's backend never released its locks");
    sqlx::query("UPDATE sweep_run SET started_at = now() - interval '2 hours' WHERE run_id = $1")
        .bind(recent)
        .execute(db.pool())
        .await
        .expect("age");
    assert_eq!(cohort.settle_abandoned_runs().await.expect("settle"), 2);
}

// contract: X10
#[tokio::test]
async fn cancellation_ends_the_run_cancelled_and_keeps_committed_batches() {
    let db = db_with_tables().await;
    notes(&db, 30).await;
    let token = CancellationToken::new();
    let cohort = Cohort::builder(db.pool().clone())
        .options(Options {
            batch_size: 10,
            ..Options::default()
        })
        .rules(rules(Strategy::Purge))
        .entity::<SessionNote>()
        .entity::<Ticket>()
        .observer(CancelAfterFirstBatch(token.clone()))
        .build()
        .await
        .expect("model");
    let result = cohort
        .sweep_with(
            &scope_a(),
            Utc::now(),
            SweepOptions::default().cancel_on(token),
        )
        .await
        .expect("sweep");
    assert_eq!(result.status, RunStatus::Cancelled);
    assert_eq!(
        count(&db, "SELECT count(*) FROM session_notes").await,
        20,
        "exactly one whole batch went"
    );
    assert_eq!(
        result.summaries.len(),
        1,
        "no entity started after cancellation"
    );
    let (status, settled): (String, bool) =
        sqlx::query_as("SELECT status, settled_at IS NOT NULL FROM sweep_run")
            .fetch_one(db.pool())
            .await
            .expect("run");
    assert_eq!((status.as_str(), settled), ("Cancelled", true));
    assert_eq!(
        count(
            &db,
            "SELECT affected_count FROM sweep_run_entity_summary WHERE status = 'Cancelled'"
        )
        .await,
        10
    );
}

// contract: X17
#[tokio::test]
async fn a_row_locked_by_another_transaction_is_skipped_not_waited_for() {
    let db = db_with_tables().await;
    notes(&db, 5).await;
    let cohort = cohort_with(&db, rules(Strategy::Purge), 2).await;
    let mut other = db.connect().await;
    let mut tx = other.begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM session_notes WHERE id = $1 FOR UPDATE")
        .bind(note_id(1))
        .execute(&mut *tx)
        .await
        .expect("lock");
    let result = tokio::time::timeout(
        StdDuration::from_secs(20),
        cohort.sweep(&scope_a(), Utc::now()),
    )
    .await
    .expect("the sweep does not wait for the locked row")
    .expect("sweep");
    assert_eq!(result.affected(), 4);
    let notes = result
        .summaries
        .iter()
        .find(|s| s.entity_type == "SessionNote")
        .expect("notes");
    assert_eq!(
        notes.skipped, 1,
        "the locked row is reported as left behind"
    );
    tx.rollback().await.expect("rollback");
    assert_eq!(count(&db, "SELECT count(*) FROM session_notes").await, 1);
}

// The control for the fence (holds::races): through the same gate, a
// single statement that checks holds, run without the entity fence, passes a
// hold that commits while it runs. The fence is what prevents this: a batch
// holds it shared, and hold creation (and the holds table's trigger, which
// this hand-made creation fires) waits for it exclusively.
#[tokio::test]
async fn control_a_single_statement_delete_passes_a_hold_committed_mid_statement() {
    let db = db_with_tables().await;
    // Building a handle registers the type, which the plain-SQL hold's
    // trigger reads the record id through (contract H16).
    let _cohort = cohort_with(&db, rules(Strategy::Purge), 100).await;
    notes(&db, 10).await;
    support::install_gate(
        &db,
        &["session_notes"],
        &["00000000-0000-0000-0000-000000000001"],
    )
    .await;
    let app = support::app_pool(&db).await;
    let mut gate = db.connect().await;
    sqlx::query("SELECT pg_advisory_lock(4242)")
        .execute(&mut gate)
        .await
        .expect("gate");
    let delete = tokio::spawn(async move {
        sqlx::query(
            "DELETE FROM session_notes t WHERE t.id IN (SELECT id FROM session_notes ORDER BY created_at FOR UPDATE SKIP LOCKED) \
             AND NOT EXISTS (SELECT 1 FROM retention_holds h WHERE h.record_id = t.id::text)",
        )
        .execute(&app)
        .await
    });
    support::wait_for_gate(&mut gate).await;
    hold_row_five_as_hold_creation_does(&db).await;
    sqlx::query("SELECT pg_advisory_unlock(4242)")
        .execute(&mut gate)
        .await
        .expect("open gate");
    delete.await.expect("join").expect("delete");
    assert_eq!(
        count(&db, "SELECT count(*) FROM session_notes").await,
        0,
        "the single statement passed the hold"
    );
}

/// Seeds 10,000 expired rows of each strategy's table.
async fn ten_thousand(db: &TestDb) {
    sqlx::query(
        "INSERT INTO tickets (id, tenant_id, opened_at) \
         SELECT g, $1, now() - interval '100 days' + g * interval '1 second' FROM generate_series(1, 10000) g",
    )
    .bind(tenant_a())
    .execute(db.pool())
    .await
    .expect("tickets");
    sqlx::query(
        "INSERT INTO case_contacts (id, tenant_id, created_at, email, full_name, phone, external_ref) \
         SELECT gen_random_uuid(), $1, now() - interval '100 days' + g * interval '1 second', 'e', 'n', 'p', 'r' \
         FROM generate_series(1, 10000) g",
    )
    .bind(tenant_a())
    .execute(db.pool())
    .await
    .expect("contacts");
}

async fn race(db: &TestDb, strategy: Strategy) -> (cohort::RunResult, cohort::RunResult) {
    let a = cohort_with(db, rules(strategy), 500).await;
    let pool_b = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .connect_with(db.options())
        .await
        .expect("pool");
    let b = Cohort::builder(pool_b)
        .options(Options {
            batch_size: 700,
            ..Options::default()
        })
        .rules(rules(strategy))
        .entity::<SessionNote>()
        .entity::<Ticket>()
        .entity::<CaseContact>()
        .build()
        .await
        .expect("model");
    let s = scope_a();
    let (ra, rb) = tokio::join!(
        a.sweep(&s, Utc::now()),
        b.sweep(&s, Utc::now() + Duration::milliseconds(1))
    );
    (ra.expect("sweep a"), rb.expect("sweep b"))
}

fn affected(r: &cohort::RunResult, entity: &str) -> u64 {
    r.summaries
        .iter()
        .filter(|s| s.entity_type == entity)
        .map(|s| s.affected)
        .sum()
}

// contract: X15
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sweeps_racing_change_and_report_each_row_once_for_every_strategy() {
    for strategy in [Strategy::Purge, Strategy::SoftDelete] {
        let db = db_with_tables().await;
        ten_thousand(&db).await;
        let (a, b) = race(&db, strategy).await;
        assert_eq!(
            affected(&a, "Ticket") + affected(&b, "Ticket"),
            10_000,
            "{strategy}"
        );
        let remaining = match strategy {
            Strategy::Purge => count(&db, "SELECT count(*) FROM tickets").await,
            _ => {
                count(
                    &db,
                    "SELECT count(*) FROM tickets WHERE NOT is_deleted OR deleted_at IS NULL",
                )
                .await
            }
        };
        assert_eq!(remaining, 0, "{strategy}");
        assert_eq!(count(&db, "SELECT count(DISTINCT record_id) FROM sweep_run_row_detail WHERE entity_type = 'Ticket'").await, 10_000);
        assert_eq!(
            count(
                &db,
                "SELECT count(*) FROM sweep_run_row_detail WHERE entity_type = 'Ticket'"
            )
            .await,
            10_000
        );
        // Anonymise raced in the same runs.
        assert_eq!(
            affected(&a, "CaseContact") + affected(&b, "CaseContact"),
            10_000
        );
        assert_eq!(count(&db, "SELECT count(*) FROM case_contacts WHERE anonymised_at IS NULL OR email IS NOT NULL").await, 0);
        assert_eq!(
            count(
                &db,
                "SELECT count(*) FROM sweep_run_row_detail WHERE entity_type = 'CaseContact'"
            )
            .await,
            10_000
        );
        assert_eq!(
            count(&db, "SELECT count(DISTINCT record_id) FROM sweep_run_row_detail WHERE entity_type = 'CaseContact'").await,
            10_000
        );
        assert_eq!(
            count(&db, "SELECT sum(affected_count)::bigint FROM sweep_run_entity_summary WHERE entity_type = 'Ticket'").await,
            10_000,
            "the ledger agrees"
        );
    }
}

// contract: D5, D9
#[tokio::test]
async fn readiness_is_checked_before_the_started_row_and_only_success_is_cached() {
    let db = db_with_tables().await;
    notes(&db, 3).await;
    let cohort = cohort_with(&db, rules(Strategy::Purge), 100).await;
    // The schema breaks after start-up: every entry point refuses before writing.
    db.exec("ALTER TABLE sweep_run_row_detail DROP CONSTRAINT sweep_run_row_detail_action_check")
        .await;
    for attempt in 0..2 {
        let err = cohort
            .sweep(&scope_a(), Utc::now())
            .await
            .expect_err("not ready");
        assert!(
            matches!(err, cohort::Error::SchemaNotReady(_)),
            "attempt {attempt}: {err}"
        );
        let err = cohort
            .preview(&scope_a(), Utc::now())
            .await
            .expect_err("not ready");
        assert!(matches!(err, cohort::Error::SchemaNotReady(_)));
        let err = cohort.settle_abandoned_runs().await.expect_err("not ready");
        assert!(matches!(err, cohort::Error::SchemaNotReady(_)));
    }
    assert_eq!(
        count(&db, "SELECT count(*) FROM sweep_run").await,
        0,
        "no Started row"
    );
    assert_eq!(count(&db, "SELECT count(*) FROM session_notes").await, 3);
    // The failure was not cached: once repaired, the next call runs.
    db.exec(
        "ALTER TABLE sweep_run_row_detail ADD CONSTRAINT sweep_run_row_detail_action_check \
         CHECK (action IN ('Purge', 'SoftDelete', 'Anonymise'))",
    )
    .await;
    let result = cohort
        .sweep(&scope_a(), Utc::now())
        .await
        .expect("ready again");
    assert_eq!(result.affected(), 3);
    // Success is cached: a later break is not re-checked (the run fails on the
    // missing table instead, after readiness).
    db.exec("ALTER TABLE sweep_run_row_detail DROP CONSTRAINT sweep_run_row_detail_action_check")
        .await;
    assert!(cohort.preview(&scope_a(), Utc::now()).await.is_ok());
}

// contract: X9
#[tokio::test]
async fn a_sweep_never_joins_the_callers_transaction() {
    let db = db_with_tables().await;
    notes(&db, 2).await;
    let cohort = cohort_with(&db, rules(Strategy::Purge), 100).await;
    let mut caller = db.pool().begin().await.expect("begin");
    // Uncommitted work of the caller: invisible to the sweep and not committed by it.
    sqlx::query(
        "INSERT INTO session_notes VALUES ('00000000-0000-0000-0000-000000000099', $1, now() - interval '99 days', 'x')",
    )
    .bind(tenant_a())
    .execute(&mut *caller)
    .await
    .expect("insert");
    let result = cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    assert_eq!(result.affected(), 2);
    caller.rollback().await.expect("rollback");
    assert_eq!(
        count(&db, "SELECT count(*) FROM session_notes").await,
        0,
        "the sweep's own work stayed committed"
    );
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM sweep_run WHERE status = 'Succeeded'"
        )
        .await,
        1
    );
}

#[allow(dead_code, reason = "mirrors a table; only its descriptor is read")]
#[derive(cohort::Retained)]
#[cohort(
    category = "orders",
    anchor = "placed_at",
    id = "7c0f9a52-1b2d-4c3e-8f4a-5b6c7d8e9f01",
    table = "orders"
)]
struct Order {
    id: i64,
    tenant_id: Uuid,
    placed_at: chrono::DateTime<Utc>,
}

#[allow(dead_code, reason = "mirrors a table; only its descriptor is read")]
#[derive(cohort::Retained)]
#[cohort(
    category = "orders",
    anchor = "placed_at",
    id = "7c0f9a52-1b2d-4c3e-8f4a-5b6c7d8e9f02",
    table = "order_lines"
)]
struct OrderLine {
    id: i64,
    tenant_id: Uuid,
    placed_at: chrono::DateTime<Utc>,
    order_id: i64,
}

// contract: X16
#[tokio::test]
async fn referencing_types_are_processed_before_the_types_they_reference() {
    let (db, _) = db_with_cohort("public").await;
    db.exec(
        "CREATE TABLE orders (id bigint PRIMARY KEY, tenant_id uuid NOT NULL, placed_at timestamptz NOT NULL);
         CREATE TABLE order_lines (id bigint PRIMARY KEY, tenant_id uuid NOT NULL, placed_at timestamptz NOT NULL,
             order_id bigint NOT NULL REFERENCES orders (id));
         INSERT INTO orders SELECT g, '11111111-1111-1111-1111-111111111111', now() - interval '400 days' FROM generate_series(1, 3) g;
         INSERT INTO order_lines SELECT g, '11111111-1111-1111-1111-111111111111', now() - interval '400 days', 1 + g % 3
             FROM generate_series(1, 9) g;",
    )
    .await;
    let rules = TestRules::new().with(
        "orders",
        Capabilities::only(Strategy::Purge),
        Rule::new(Period::days(30), Strategy::Purge),
    );
    // The parent is registered first; the child still goes first.
    let cohort = Cohort::builder(db.pool().clone())
        .rules(rules)
        .entity::<Order>()
        .entity::<OrderLine>()
        .build()
        .await
        .expect("model");
    let result = cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    assert_eq!(result.status, RunStatus::Succeeded, "{result:#?}");
    let order: Vec<&str> = result.summaries.iter().map(|s| s.entity_type).collect();
    assert_eq!(order, vec!["OrderLine", "Order"]);
    assert_eq!(
        count(&db, "SELECT count(*) FROM orders").await
            + count(&db, "SELECT count(*) FROM order_lines").await,
        0
    );
}

// contract: X4
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_future_is_dropped_mid_batch_is_settled_once_its_connection_is_gone() {
    let db = db_with_tables().await;
    notes(&db, 10).await;
    support::install_gate(
        &db,
        &["session_notes"],
        &["00000000-0000-0000-0000-000000000001"],
    )
    .await;
    let cohort = Cohort::builder(support::app_pool(&db).await)
        .options(Options {
            settle_timeout: StdDuration::from_secs(1),
            // Settled once the lease of the dropped run expired (CO2).
            run_lease: StdDuration::from_secs(1),
            ..Options::default()
        })
        .rules(rules(Strategy::Purge))
        .entity::<SessionNote>()
        .build()
        .await
        .expect("model");
    let mut gate = db.connect().await;
    sqlx::query("SELECT pg_advisory_lock(4242)")
        .execute(&mut gate)
        .await
        .expect("gate");
    let sweep = tokio::spawn({
        let cohort = cohort.clone();
        async move { cohort.sweep(&scope_a(), Utc::now()).await }
    });
    support::wait_for_gate(&mut gate).await;
    // The host gives up on the sweep: its future is dropped mid-batch. (A
    // live run is never recovered: see the test above.)
    sweep.abort();
    assert!(sweep.await.expect_err("aborted").is_cancelled());
    sqlx::query("SELECT pg_advisory_unlock(4242)")
        .execute(&mut gate)
        .await
        .expect("open gate");
    let mut settled = 0;
    for _ in 0..300 {
        settled = cohort.settle_abandoned_runs().await.expect("settle");
        if settled > 0 {
            break;
        }
        tokio::time::sleep(StdDuration::from_millis(50)).await;
    }
    assert_eq!(
        settled, 1,
        "the abandoned run is settled once its connection is gone"
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM session_notes").await,
        10,
        "the batch in flight rolled back"
    );
    let status: String = sqlx::query_scalar("SELECT status FROM sweep_run")
        .fetch_one(db.pool())
        .await
        .expect("run");
    assert_eq!(status, "Failed");
    // contract: A11 — its summary is settled too, with what is known.
    let summary: (String, i64, Option<String>, bool) = sqlx::query_as(
        "SELECT status, affected_count, applied_period, error LIKE '%Abandoned%' FROM sweep_run_entity_summary",
    )
    .fetch_one(db.pool())
    .await
    .expect("summary");
    assert_eq!(summary, ("Failed".into(), 0, Some("P30D".into()), true));
}
