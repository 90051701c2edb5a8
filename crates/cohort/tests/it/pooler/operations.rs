//! Every operation through a real PgBouncer in transaction mode with a
//! server pool of two and round-robin server selection (contract CO1): each
//! of the handle's transactions may land on either server connection, and a
//! statement sent outside a transaction fails there (its Parse and its
//! Execute reach different servers), so these tests also catch any statement
//! Cohort sends outside a transaction of its own.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration as StdDuration;

use crate::support::fixtures::*;
use crate::support::models::*;
use crate::support::{TestDb, TestRules, count};
use chrono::{Duration, Utc};
use cohort::handlers::{CapturedRow, HandlerContext, HandlerError, RowHandler};
use cohort::holds::{DeletionOutcome, HoldRequest, Target};
use cohort::schema::SchemaName;
use cohort::{
    Capabilities, Cohort, ConnectionMode, ErasureRequest, Options, Period, Rule, RunStatus,
    Strategy, TenantContext,
};
use cohort_testdb::Bouncer;
use sqlx::Connection;
use uuid::Uuid;

/// Options for a handle behind the pooler: small batches, so a sweep is
/// many transactions.
pub(super) fn pooled() -> Options {
    Options {
        batch_size: 3,
        observer_timeout: StdDuration::from_secs(600),
        connection_mode: ConnectionMode::TransactionPooled,
        poll_interval: StdDuration::from_millis(100),
        ..Options::default()
    }
}

fn rules() -> TestRules {
    readme_rules()
        .with(
            "tickets",
            Capabilities::only(Strategy::SoftDelete),
            Rule::new(Period::days(30), Strategy::SoftDelete),
        )
        .with(
            "user-data",
            Capabilities::only(Strategy::Purge),
            Rule::new(Period::years(5), Strategy::Purge),
        )
        .with(
            "messages",
            Capabilities::only(Strategy::Purge),
            Rule::new(Period::years(10), Strategy::Purge),
        )
}

/// A database with the shared tables and a PgBouncer of two server
/// connections in front of it.
async fn behind_pooler() -> (TestDb, Bouncer) {
    let db = db_with_tables().await;
    let bouncer = Bouncer::start(&db, 2).await.expect("PgBouncer starts");
    (db, bouncer)
}

async fn handle(
    bouncer: &Bouncer,
    builder: impl FnOnce(cohort::CohortBuilder) -> cohort::CohortBuilder,
) -> Cohort {
    builder(
        Cohort::builder(bouncer.pool(4))
            .options(pooled())
            .rules(rules()),
    )
    .build()
    .await
    .unwrap_or_else(|e| panic!("builds through the pooler: {e}\n{}", bouncer.log()))
}

async fn old_notes(db: &TestDb, n: u32) {
    db.exec(&format!(
        "INSERT INTO session_notes (id, tenant_id, created_at, body) \
         SELECT gen_random_uuid(), '{}', '{}'::timestamptz - interval '100 days' + g * interval '1 second', 'x' \
         FROM generate_series(1, {n}) g",
        tenant_a(),
        fixed_now().to_rfc3339()
    ))
    .await;
}

/// Two runs left `Started` by owners that are gone: one whose lease expired,
/// one written before leases (no lease, started an hour ago, its owner's
/// session lock free). Housekeeping through the pooler must settle both.
async fn abandoned_runs(db: &TestDb) -> [Uuid; 2] {
    let (expired, legacy) = (Uuid::new_v4(), Uuid::new_v4());
    sqlx::query(
        "INSERT INTO sweep_run (run_id, run_kind, trigger, dry_run, tenant_id, logical_now, status, started_at, \
                                owner_token, lease_expires_at) \
         VALUES ($1, 'Sweep', 'Manual', false, $3, now(), 'Started', now() - interval '1 hour', \
                 gen_random_uuid(), now() - interval '1 minute'), \
                ($2, 'Sweep', 'Manual', false, $3, now(), 'Started', now() - interval '1 hour', NULL, NULL)",
    )
    .bind(expired)
    .bind(legacy)
    .bind(tenant_a())
    .execute(db.pool())
    .await
    .expect("abandoned runs");
    [expired, legacy]
}

async fn assert_settled(db: &TestDb, runs: [Uuid; 2]) {
    for run in runs {
        assert_eq!(
            run_status(db, run).await,
            "Failed",
            "abandoned run {run} settled"
        );
    }
}

// contract: CO1
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preview_and_a_sweep_of_every_strategy_are_correct_through_the_pooler() {
    let (db, bouncer) = behind_pooler().await;
    old_notes(&db, 10).await;
    let young = note_days_old(&db, tenant_a(), 1).await;
    let held = note_days_old(&db, tenant_a(), 200).await;
    for i in 0..7 {
        contact_days_old(&db, tenant_a(), 400 + i).await;
    }
    let fresh_contact = contact_days_old(&db, tenant_a(), 10).await;
    sqlx::query(
        "INSERT INTO tickets (id, tenant_id, opened_at) \
         SELECT g, $1, $2 - interval '40 days' FROM generate_series(1, 8) g \
         UNION ALL SELECT 9, $1, $2 - interval '1 day'",
    )
    .bind(tenant_a())
    .bind(fixed_now())
    .execute(db.pool())
    .await
    .expect("tickets");
    let cohort = handle(&bouncer, |b| {
        b.entity::<SessionNote>()
            .entity::<CaseContact>()
            .entity::<Ticket>()
    })
    .await;
    hold_sql(&db, NOTE_ID, held, tenant_a()).await;

    let preview = cohort
        .preview(&scope_a(), fixed_now())
        .await
        .unwrap_or_else(|e| panic!("preview: {e}\n{}", bouncer.log()));
    let notes = preview_entry(&preview, "SessionNote");
    assert_eq!((notes.eligible, notes.held), (10, 1), "{notes:?}");
    assert_eq!(preview_entry(&preview, "CaseContact").eligible, 7);
    assert_eq!(preview_entry(&preview, "Ticket").eligible, 8);

    let result = cohort
        .sweep(&scope_a(), fixed_now())
        .await
        .unwrap_or_else(|e| panic!("sweep: {e}\n{}", bouncer.log()));
    assert_eq!(result.status, RunStatus::Succeeded, "{result:?}");
    let notes = entity_summary(&result, "SessionNote");
    assert_eq!((notes.affected, notes.held), (10, 1));
    assert_eq!(entity_summary(&result, "CaseContact").affected, 7);
    assert_eq!(entity_summary(&result, "Ticket").affected, 8);
    // The rows themselves, read directly.
    assert_eq!(count(&db, "SELECT count(*) FROM session_notes").await, 2);
    assert!(note_exists(&db, young).await && note_exists(&db, held).await);
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM case_contacts WHERE anonymised_at IS NOT NULL"
        )
        .await,
        7
    );
    assert!(!contact_anonymised(&db, fresh_contact).await);
    assert_eq!(
        count(&db, "SELECT count(*) FROM tickets WHERE is_deleted").await,
        8
    );
    // The ledger agrees with what was done, and its chain verifies through
    // the pooler too.
    assert_eq!(run_status(&db, result.run_id).await, "Succeeded");
    assert_eq!(
        ledger_summary(&db, result.run_id, "SessionNote").await.1,
        10
    );
    let mut conn = bouncer.pool(1).acquire().await.expect("conn");
    let report = cohort::evidence::verify(&mut conn, &SchemaName::public())
        .await
        .unwrap_or_else(|e| panic!("verify: {e}\n{}", bouncer.log()));
    assert!(report.is_intact(), "{report}");
    assert_eq!(report.runs, 1);
    let mut out = Vec::new();
    let written = cohort::evidence::export(
        &mut conn,
        &SchemaName::public(),
        cohort::evidence::ExportRecords::Runs,
        cohort::evidence::TimeRange::all(),
        cohort::evidence::ExportFormat::JsonLines,
        &mut out,
    )
    .await
    .unwrap_or_else(|e| panic!("export: {e}\n{}", bouncer.log()));
    assert_eq!(written.records, 1);
}

// contract: CO1
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_erasure_and_its_certificate_are_correct_through_the_pooler() {
    let (db, bouncer) = behind_pooler().await;
    for id in 1..=7 {
        user_record_days_old(&db, id, tenant_a(), subject(), Some(1)).await;
    }
    user_record_days_old(&db, 8, tenant_a(), someone_else(), Some(1)).await;
    user_record_days_old(&db, 9, tenant_a(), subject(), Some(1)).await;
    let cohort = handle(&bouncer, |b| {
        b.entity::<UserRecord>()
            .entity::<Message>()
            .subject_key(b"pooler test key".to_vec())
    })
    .await;
    hold_sql(&db, "6b619c19-6e3c-44e8-a87f-975c68fd3988", 9, tenant_a()).await;
    let result = cohort
        .erase(&scope_a(), Utc::now(), ErasureRequest::new(subject()))
        .await
        .unwrap_or_else(|e| panic!("erase: {e}\n{}", bouncer.log()));
    assert_eq!(result.status, RunStatus::Succeeded, "{result:?}");
    assert_eq!(user_record_ids(&db).await, vec![8, 9]);
    let users = entity_summary(&result, "UserRecord");
    assert_eq!((users.affected, users.held), (7, 1));

    let mut conn = bouncer.pool(1).acquire().await.expect("conn");
    let subject_text = subject().to_string();
    let certificate = cohort::evidence::certificate(
        &mut conn,
        &SchemaName::public(),
        result.run_id,
        &cohort::evidence::CertificateOptions {
            subject: &subject_text,
            subject_key: b"pooler test key",
            subject_in_clear: false,
        },
    )
    .await
    .unwrap_or_else(|e| panic!("certificate: {e}\n{}", bouncer.log()));
    let text = certificate.to_string();
    assert!(text.contains(&result.run_id.to_string()), "{text}");
}

// contract: CO1
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_in_the_hosts_transaction_and_host_deletions_are_correct_through_the_pooler() {
    let (db, bouncer) = behind_pooler().await;
    let kept = note_days_old(&db, tenant_a(), 200).await;
    let deletable = note_days_old(&db, tenant_a(), 200).await;
    let cohort = handle(&bouncer, |b| b.entity::<SessionNote>()).await;
    let host = bouncer.pool(2);

    // The host's own transaction: its write and the hold commit together.
    let mut tx = host.begin().await.expect("begin");
    sqlx::query("UPDATE session_notes SET body = 'under investigation' WHERE id = $1")
        .persistent(false)
        .bind(kept)
        .execute(&mut *tx)
        .await
        .expect("the host's write");
    let hold = cohort
        .holds()
        .create(
            &mut tx,
            HoldRequest::new(
                uuid(NOTE_ID),
                kept.to_string(),
                Some(tenant_a()),
                "litigation",
                Utc::now(),
            ),
        )
        .await
        .unwrap_or_else(|e| panic!("hold: {e}\n{}", bouncer.log()));
    tx.commit().await.expect("commit");

    // A host deletion of the held row is refused; of the other, it runs.
    let delete = |id: Uuid| {
        let cohort = cohort.clone();
        let host = host.clone();
        async move {
            let mut conn = host.acquire().await.expect("conn");
            cohort
                .deletion()
                .execute(
                    &mut conn,
                    &[Target::new(uuid(NOTE_ID), id.to_string(), Some(tenant_a()))],
                    move |c| {
                        Box::pin(async move {
                            sqlx::query("DELETE FROM session_notes WHERE id = $1")
                                .persistent(false)
                                .bind(id)
                                .execute(&mut *c)
                                .await?;
                            Ok::<_, sqlx::Error>(())
                        })
                    },
                )
                .await
        }
    };
    let refused = delete(kept).await.expect("deletion of the held row");
    assert!(
        matches!(refused, DeletionOutcome::Protected { .. }),
        "{refused:?}"
    );
    let done = delete(deletable).await.expect("deletion of the other row");
    assert!(matches!(done, DeletionOutcome::Deleted(())), "{done:?}");
    assert!(note_exists(&db, kept).await);
    assert!(!note_exists(&db, deletable).await);

    // The sweep keeps the held row; once the hold is removed, it goes.
    let result = cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    assert_eq!(entity_summary(&result, "SessionNote").held, 1);
    assert!(note_exists(&db, kept).await);
    let mut conn = host.acquire().await.expect("conn");
    cohort
        .holds()
        .remove(&mut conn, hold.hold_id, Utc::now() - Duration::seconds(1))
        .await
        .unwrap_or_else(|e| panic!("remove: {e}\n{}", bouncer.log()));
    let result = cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    assert_eq!(entity_summary(&result, "SessionNote").affected, 1);
    assert!(!note_exists(&db, kept).await);
}

#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Body {
    body: String,
}

/// Counts deliveries.
struct Deliveries(Arc<AtomicUsize>);

impl RowHandler for Deliveries {
    type Snapshot = Body;

    fn capture(&self, row: &CapturedRow) -> Result<Body, HandlerError> {
        Ok(Body {
            body: row.get("body")?,
        })
    }

    fn deliver<'a>(
        &'a self,
        _ctx: &'a HandlerContext,
        _snapshot: Body,
    ) -> cohort::BoxFuture<'a, Result<(), HandlerError>> {
        Box::pin(async move {
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
    }
}

// contract: CO1, CO3
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_and_the_dispatcher_are_correct_through_the_pooler() {
    let (db, bouncer) = behind_pooler().await;
    old_notes(&db, 8).await;
    let delivered = Arc::new(AtomicUsize::new(0));
    let cohort = handle(&bouncer, |b| {
        b.entity::<SessionNote>()
            .row_handler::<SessionNote, _>(Deliveries(delivered.clone()))
    })
    .await;
    let abandoned = abandoned_runs(&db).await;
    let shutdown = cohort::CancellationToken::new();
    let occurrence = Utc::now();
    let worker = || {
        cohort
            .worker()
            .tenants(vec![TenantContext::new(tenant_a())])
    };
    let first = worker()
        .run_occurrence(occurrence, &shutdown)
        .await
        .unwrap_or_else(|e| panic!("occurrence: {e}\n{}", bouncer.log()));
    assert!(!first.already_swept, "{first:?}");
    assert_eq!(first.failed_passes(), 0, "{first:?}");
    assert_eq!(first.affected(), 8, "{first:?}");
    let again = worker()
        .run_occurrence(occurrence, &shutdown)
        .await
        .unwrap_or_else(|e| panic!("claim check: {e}\n{}", bouncer.log()));
    assert!(again.already_swept, "{again:?}");
    // The occurrence's housekeeping settled the abandoned runs.
    assert_settled(&db, abandoned).await;

    let report = cohort
        .dispatcher()
        .run_once()
        .await
        .unwrap_or_else(|e| panic!("dispatch: {e}\n{}", bouncer.log()));
    assert_eq!(report.succeeded, 8, "{report:?}");
    assert_eq!(delivered.load(Ordering::SeqCst), 8);
    let report = cohort.dispatcher().run_once().await.expect("again");
    assert_eq!(report.claimed, 0, "{report:?}");
}

// contract: CO3
// The long-running dispatcher behind the pooler cannot LISTEN; it finds work
// a sweep captured after it started by polling. The sweep is started only
// once the dispatcher has run a round and found nothing (its first poll
// came and went), so the delivery can only come from a later poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatcher_behind_the_pooler_finds_new_work_by_polling() {
    let (db, bouncer) = behind_pooler().await;
    let delivered = Arc::new(AtomicUsize::new(0));
    let cohort = handle(&bouncer, |b| {
        b.entity::<SessionNote>()
            .row_handler::<SessionNote, _>(Deliveries(delivered.clone()))
    })
    .await;
    let abandoned = abandoned_runs(&db).await;
    let shutdown = cohort::CancellationToken::new();
    let dispatcher = tokio::spawn({
        let cohort = cohort.clone();
        let shutdown = shutdown.clone();
        async move { cohort.dispatcher().run(shutdown).await }
    });
    // Its first round has run: the dispatch rounds are counted in
    // `pg_stat_user_tables` scans of the handler status table.
    let scans = "SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) FROM pg_stat_user_tables \
                 WHERE relname = 'sweep_row_handler_status'";
    let before = count(&db, scans).await;
    let mut rounds = false;
    for _ in 0..3000 {
        db.exec("SELECT pg_stat_clear_snapshot()").await;
        if count(&db, scans).await > before {
            rounds = true;
            break;
        }
        tokio::time::sleep(StdDuration::from_millis(10)).await;
    }
    assert!(rounds, "the dispatcher never polled");
    old_notes(&db, 4).await;
    let result = cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    assert_eq!(result.affected(), 4);
    let mut seen = 0;
    for _ in 0..3000 {
        seen = delivered.load(Ordering::SeqCst);
        if seen == 4 {
            break;
        }
        tokio::time::sleep(StdDuration::from_millis(10)).await;
    }
    shutdown.cancel();
    dispatcher
        .await
        .expect("join")
        .unwrap_or_else(|e| panic!("dispatcher: {e}\n{}", bouncer.log()));
    assert_eq!(seen, 4, "the polling dispatcher delivered the new rows");
    // Its rounds settled the abandoned runs first.
    assert_settled(&db, abandoned).await;
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM pg_stat_activity WHERE query ILIKE 'LISTEN%'"
        )
        .await,
        0,
        "no LISTEN was sent through the pooler"
    );
}

// contract: CO3, W2
// Two replicas behind the pooler race for one occurrence: one sweeps it, the
// other finds it swept. The first replica is held at its run's `Started`
// event (it holds the worker lease then) while the second tries, so the
// second's attempt really overlaps the first's; were the lease not kept
// through the pooler, the second would start a run of its own meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_behind_the_pooler_take_an_occurrence_once() {
    let (db, bouncer) = behind_pooler().await;
    old_notes(&db, 6).await;
    let (started_tx, started_rx) = tokio::sync::oneshot::channel();
    let go = Arc::new(tokio::sync::Notify::new());
    let a = handle(&bouncer, |b| {
        b.entity::<SessionNote>().observer(HoldAtStart {
            started: std::sync::Mutex::new(Some(started_tx)),
            go: go.clone(),
        })
    })
    .await;
    let b = handle(&bouncer, |b| b.entity::<SessionNote>()).await;
    let occurrence = Utc::now();
    let shutdown = cohort::CancellationToken::new();
    let replica = |c: Cohort| {
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            c.worker()
                .tenants(vec![TenantContext::new(tenant_a())])
                .run_occurrence(occurrence, &shutdown)
                .await
        })
    };
    let first = replica(a);
    tokio::time::timeout(StdDuration::from_secs(120), started_rx)
        .await
        .expect("the first replica's run started")
        .expect("its id");
    let second = replica(b);
    // The second polls for the lease every poll interval (100 ms) meanwhile.
    tokio::time::sleep(StdDuration::from_millis(500)).await;
    assert_eq!(
        count(&db, "SELECT count(*) FROM sweep_run").await,
        1,
        "the second replica started no run while the first holds the lease"
    );
    go.notify_one();
    let first = first.await.expect("join").expect("first replica");
    let second = second.await.expect("join").expect("second replica");
    assert!(!first.already_swept, "{first:?}");
    assert_eq!(first.affected(), 6, "{first:?}");
    assert!(second.already_swept, "{second:?}");
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM sweep_run WHERE trigger = 'Scheduled'"
        )
        .await,
        1,
        "one run for the occurrence"
    );
}

// contract: CO3, W4
// A replica behind the pooler dies mid-occurrence (its future dropped while
// its run waits at `Started`: its connections close, its keepers stop, the
// worker lease and the run's lease are left to expire). Another replica
// takes the occurrence once the worker lease expired, finds the run still
// `Started` without an owner, and sweeps the occurrence again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_killed_mid_occurrence_behind_the_pooler_is_replaced() {
    let (db, bouncer) = behind_pooler().await;
    old_notes(&db, 6).await;
    let short = Options {
        run_lease: StdDuration::from_secs(1),
        ..pooled()
    };
    let (started_tx, started_rx) = tokio::sync::oneshot::channel();
    let go = Arc::new(tokio::sync::Notify::new());
    let doomed = Cohort::builder(bouncer.pool(4))
        .options(short.clone())
        .rules(rules())
        .entity::<SessionNote>()
        .observer(HoldAtStart {
            started: std::sync::Mutex::new(Some(started_tx)),
            go,
        })
        .build()
        .await
        .expect("build");
    let occurrence = Utc::now();
    let shutdown = cohort::CancellationToken::new();
    let first = tokio::spawn({
        let shutdown = shutdown.clone();
        async move {
            doomed
                .worker()
                .tenants(vec![TenantContext::new(tenant_a())])
                .run_occurrence(occurrence, &shutdown)
                .await
        }
    });
    tokio::time::timeout(StdDuration::from_secs(120), started_rx)
        .await
        .expect("the doomed replica's run started")
        .expect("its id");
    first.abort();
    assert!(first.await.is_err_and(|e| e.is_cancelled()));
    assert_eq!(count(&db, "SELECT count(*) FROM session_notes").await, 6);

    let replacement = Cohort::builder(bouncer.pool(4))
        .options(short)
        .rules(rules())
        .entity::<SessionNote>()
        .build()
        .await
        .expect("build");
    let worker = || {
        replacement
            .worker()
            .tenants(vec![TenantContext::new(tenant_a())])
    };
    let report = worker()
        .run_occurrence(occurrence, &shutdown)
        .await
        .unwrap_or_else(|e| panic!("replacement: {e}\n{}", bouncer.log()));
    assert!(!report.already_swept, "{report:?}");
    assert_eq!(report.affected(), 6, "{report:?}");
    assert_eq!(count(&db, "SELECT count(*) FROM session_notes").await, 0);
    let again = worker()
        .run_occurrence(occurrence, &shutdown)
        .await
        .expect("claim check");
    assert!(again.already_swept, "{again:?}");
}

/// Holds a run at its `Started` event until the test says go.
struct HoldAtStart {
    started: std::sync::Mutex<Option<tokio::sync::oneshot::Sender<Uuid>>>,
    go: Arc<tokio::sync::Notify>,
}

impl cohort::ledger::AuditObserver for HoldAtStart {
    fn on_event<'a>(
        &'a self,
        event: &'a cohort::ledger::AuditEvent,
    ) -> cohort::BoxFuture<'a, Result<(), cohort::policy::ProviderError>> {
        Box::pin(async move {
            if let cohort::ledger::AuditEvent::Started { run_id, .. } = event {
                let started = self.started.lock().expect("started").take();
                if let Some(started) = started {
                    let _ = started.send(*run_id);
                    self.go.notified().await;
                }
            }
            Ok(())
        })
    }
}

// contract: CO1
// The default mode (named, cached statements, one server connection per
// client connection) is refused at build behind a transaction pooler: the
// probe sees its statements land on different server connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn building_in_direct_mode_behind_a_transaction_pooler_is_refused() {
    let (_db, bouncer) = behind_pooler().await;
    let built = Cohort::builder(bouncer.pool(4))
        .rules(rules())
        .entity::<SessionNote>()
        .build()
        .await;
    let Err(cohort::Error::Validation(problems)) = &built else {
        panic!(
            "a direct-mode handle behind a transaction pooler built: {:?}",
            built.err()
        );
    };
    let text = problems.to_string();
    assert!(text.contains("connection_mode"), "{text}");
}

// ---------------------------------------------------------------------------
// Types the driver does not know. sqlx looks an unknown type up with a
// simple query, which drops the unnamed statement it is preparing; every
// client connection through the pooler starts with an empty type cache, so
// a statement of Cohort's that returned a host type would fail here.

#[allow(dead_code, reason = "mirrors a table; only its descriptor is read")]
#[derive(cohort::Retained)]
#[cohort(
    category = "handles",
    anchor = "created_at",
    id = "c0c0c0c0-0001-4000-8000-000000000001",
    table = "handles"
)]
struct Handle {
    id: String,
    tenant_id: Uuid,
    created_at: chrono::DateTime<Utc>,
    #[cohort(erasure_subject)]
    email: String,
}

#[allow(dead_code, reason = "mirrors a table; only its descriptor is read")]
#[derive(cohort::Retained)]
#[cohort(
    category = "profiles",
    anchor = "created_at",
    id = "c0c0c0c0-0002-4000-8000-000000000002",
    table = "profiles"
)]
struct Profile {
    id: String,
    tenant_id: Uuid,
    created_at: chrono::DateTime<Utc>,
    anonymised_at: Option<chrono::DateTime<Utc>>,
    #[cohort(anonymise_with = Scramble)]
    nick: String,
}

#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Email {
    email: String,
}

/// Captures each purged handle's e-mail (a citext column).
struct Emails(Arc<std::sync::Mutex<Vec<String>>>);

impl RowHandler for Emails {
    type Snapshot = Email;

    fn capture(&self, row: &CapturedRow) -> Result<Email, HandlerError> {
        Ok(Email {
            email: row.get("email")?,
        })
    }

    fn deliver<'a>(
        &'a self,
        _ctx: &'a HandlerContext,
        snapshot: Email,
    ) -> cohort::BoxFuture<'a, Result<(), HandlerError>> {
        Box::pin(async move {
            self.0.lock().expect("emails").push(snapshot.email);
            Ok(())
        })
    }
}

// contract: CO1
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_types_the_driver_does_not_know_work_through_the_pooler() {
    let (db, bouncer) = behind_pooler().await;
    db.exec(&format!(
        "CREATE EXTENSION IF NOT EXISTS citext; \
         CREATE TABLE handles (id citext PRIMARY KEY, tenant_id uuid NOT NULL, \
             created_at timestamptz NOT NULL, email citext NOT NULL); \
         CREATE TABLE profiles (id citext PRIMARY KEY, tenant_id uuid NOT NULL, \
             created_at timestamptz NOT NULL, anonymised_at timestamptz, nick citext NOT NULL); \
         INSERT INTO handles SELECT 'H-' || g, '{t}', now() - interval '40 days', 'user' || g || '@Example.org' \
             FROM generate_series(1, 7) g; \
         INSERT INTO handles VALUES ('Ann.Lee', '{t}', now() - interval '40 days', 'Ann@Example.org'), \
             ('young', '{t}', now(), 'ann@example.org'); \
         INSERT INTO profiles SELECT 'P-' || g, '{t}', now() - interval '40 days', NULL, 'Nick' || g \
             FROM generate_series(1, 5) g;",
        t = tenant_a()
    ))
    .await;
    let emails = Arc::new(std::sync::Mutex::new(Vec::new()));
    let rules = TestRules::new()
        .with(
            "handles",
            Capabilities::only(Strategy::Purge),
            Rule::new(Period::days(30), Strategy::Purge),
        )
        .with(
            "profiles",
            Capabilities::only(Strategy::Anonymise),
            Rule::new(Period::days(30), Strategy::Anonymise),
        );
    let cohort = Cohort::builder(bouncer.pool(4))
        .options(pooled())
        .rules(rules)
        .entity::<Handle>()
        .entity::<Profile>()
        .row_handler::<Handle, _>(Emails(emails.clone()))
        .build()
        .await
        .unwrap_or_else(|e| panic!("build: {e}\n{}", bouncer.log()));
    let handle_type = uuid("c0c0c0c0-0001-4000-8000-000000000001");

    // A hold on a citext key, in another spelling than the row's.
    let host = bouncer.pool(2);
    let mut conn = host.acquire().await.expect("conn");
    cohort
        .holds()
        .create(
            &mut conn,
            HoldRequest::new(
                handle_type,
                "ANN.LEE",
                Some(tenant_a()),
                "litigation",
                Utc::now(),
            ),
        )
        .await
        .unwrap_or_else(|e| panic!("hold: {e}\n{}", bouncer.log()));
    // A host deletion of a held citext key is refused.
    let refused = cohort
        .deletion()
        .execute(
            &mut conn,
            &[Target::new(handle_type, "ann.lee", Some(tenant_a()))],
            |_c| Box::pin(async { Ok::<_, sqlx::Error>(()) }),
        )
        .await
        .unwrap_or_else(|e| panic!("deletion: {e:?}\n{}", bouncer.log()));
    assert!(
        matches!(refused, DeletionOutcome::Protected { .. }),
        "{refused:?}"
    );
    drop(conn);

    let preview = cohort
        .preview(&scope_a(), Utc::now())
        .await
        .unwrap_or_else(|e| panic!("preview: {e}\n{}", bouncer.log()));
    let handles = preview_entry(&preview, "Handle");
    assert_eq!((handles.eligible, handles.held), (7, 1), "{handles:?}");
    let result = cohort
        .sweep(&scope_a(), Utc::now())
        .await
        .unwrap_or_else(|e| panic!("sweep: {e}\n{}", bouncer.log()));
    assert_eq!(result.status, RunStatus::Succeeded, "{result:?}");
    assert_eq!(entity_summary(&result, "Handle").affected, 7);
    assert_eq!(entity_summary(&result, "Profile").affected, 5);
    assert_eq!(
        count(&db, "SELECT count(*) FROM profiles WHERE nick::text LIKE 'anon-%' AND anonymised_at IS NOT NULL").await,
        5
    );
    let report = cohort
        .dispatcher()
        .run_once()
        .await
        .unwrap_or_else(|e| panic!("dispatch: {e}\n{}", bouncer.log()));
    assert_eq!(report.succeeded, 7, "{report:?}");
    assert_eq!(emails.lock().expect("emails").len(), 7);

    // Erasure by a citext subject: both spellings of Ann's address match,
    // the held row stays.
    let erased = cohort
        .erase(
            &scope_a(),
            Utc::now(),
            ErasureRequest::new("ANN@example.ORG"),
        )
        .await
        .unwrap_or_else(|e| panic!("erase: {e}\n{}", bouncer.log()));
    let h = entity_summary(&erased, "Handle");
    assert_eq!((h.affected, h.held), (1, 1), "{h:?}");
    let left: Vec<String> = sqlx::query_scalar("SELECT id::text FROM handles ORDER BY id")
        .fetch_all(db.pool())
        .await
        .expect("handles");
    assert_eq!(left, vec!["Ann.Lee".to_owned()]);
}

// contract: CO1
// The same, with the pooler unable to alternate: another client holds one
// of the two server connections in an open transaction, so every statement
// of the probe lands on the other. The takeover probe still sees it: a
// second client takes the server the handle's connection used, and the
// handle's next statement has to wait for it (directly, a connection's
// backend is its own and never waits for another client).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_handle_is_refused_behind_a_pooler_even_when_it_cannot_alternate() {
    let (_db, bouncer) = behind_pooler().await;
    let mut blocker = sqlx::PgConnection::connect_with(&bouncer.options())
        .await
        .expect("a client of the pooler");
    sqlx::raw_sql("BEGIN; SELECT 1")
        .execute(&mut blocker)
        .await
        .expect("hold one server connection");
    let built = Cohort::builder(bouncer.pool(4))
        .rules(rules())
        .entity::<SessionNote>()
        .build()
        .await;
    let _ = sqlx::raw_sql("ROLLBACK").execute(&mut blocker).await;
    let Err(cohort::Error::Validation(problems)) = &built else {
        panic!(
            "a direct-mode handle behind a transaction pooler built: {:?}",
            built.err()
        );
    };
    assert!(
        problems.to_string().contains("connection_mode"),
        "{problems}"
    );
}
