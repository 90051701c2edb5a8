//! Row handlers: capture in the batch, delivery after commit from the queue,
//! at least once, with claims, retries, dead letters and payload hygiene.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration as StdDuration, Instant};

use crate::support;
use crate::support::fixtures::{db_with_tables, note_id, scope_a, tenant_a};
use crate::support::models::*;
use crate::support::{TestDb, TestRules, count};
use chrono::Utc;
use cohort::handlers::{
    CapturedRow, Dispatch, HandlerContext, HandlerError, RowHandler, RowHandlerOptions,
};
use cohort::ledger::{AuditEvent, AuditObserver};
use cohort::policy::ProviderError;
use cohort::{
    BoxFuture, Capabilities, Cohort, ErasureRequest, Options, Period, Rule, RunStatus, Strategy,
    SweepOptions,
};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

const RECORDER_ID: &str = "9b2e6c61-3a3f-4c61-9d39-2b7a8d4c1e55";

/// One delivery as the test handler saw it.
#[derive(Debug, Clone)]
struct Seen {
    handler: &'static str,
    record_id: String,
    attempt: u32,
    run_id: Uuid,
    entity_id: Uuid,
    tenant_id: Uuid,
    strategy: Strategy,
    body: String,
    started: Instant,
    finished: Instant,
}

#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<Seen>>>);

impl Log {
    fn all(&self) -> Vec<Seen> {
        self.0.lock().expect("log").clone()
    }
}

/// What a note's handlers keep from before the change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct NoteSnapshot {
    body: String,
}

/// How the test handler behaves on delivery.
#[derive(Clone)]
enum Behaviour {
    Succeed,
    /// Fails with an error whose text is a secret.
    Fail,
    /// Waits forever on the first attempt (until its future is dropped).
    HangFirst,
    /// Blocks its thread (ignoring cancellation) on the first attempt until
    /// the test opens the gate (sends on, or drops, its sender).
    BlockThreadFirstUntil(Gate),
    /// Waits for its cancellation, then fails.
    AwaitCancel,
    /// On the first attempt it is given, says so on `started` (with the
    /// context's claim times), then waits (asynchronously) until the test
    /// sends on `go`.
    AwaitGate(AsyncGate),
    /// Waits for its cancellation, records when it came and the context's
    /// claim times, then fails.
    RecordCancel(Arc<Mutex<Option<CancelSeen>>>),
}

/// When a handler saw its cancellation, with the context's claim times.
#[derive(Debug, Clone, Copy)]
struct CancelSeen {
    claimed_at: Instant,
    cancel_at: Instant,
    seen_at: Instant,
}

/// An asynchronous gate: the handler reports that it started, then waits.
#[derive(Clone)]
struct AsyncGate {
    started: Arc<Mutex<Option<tokio::sync::oneshot::Sender<()>>>>,
    go: Arc<tokio::sync::Mutex<Option<tokio::sync::oneshot::Receiver<()>>>>,
}

impl AsyncGate {
    fn new() -> (
        AsyncGate,
        tokio::sync::oneshot::Receiver<()>,
        tokio::sync::oneshot::Sender<()>,
    ) {
        let (started_tx, started_rx) = tokio::sync::oneshot::channel();
        let (go_tx, go_rx) = tokio::sync::oneshot::channel();
        (
            AsyncGate {
                started: Arc::new(Mutex::new(Some(started_tx))),
                go: Arc::new(tokio::sync::Mutex::new(Some(go_rx))),
            },
            started_rx,
            go_tx,
        )
    }
}

/// A gate a handler's thread waits at until the test opens it.
#[derive(Clone)]
struct Gate(Arc<Mutex<std::sync::mpsc::Receiver<()>>>);

impl Gate {
    fn new() -> (std::sync::mpsc::Sender<()>, Gate) {
        let (open, wait) = std::sync::mpsc::channel();
        (open, Gate(Arc::new(Mutex::new(wait))))
    }
}

struct Recorder {
    name: &'static str,
    log: Log,
    behaviour: Behaviour,
}

impl Recorder {
    fn new(name: &'static str, log: &Log, behaviour: Behaviour) -> Recorder {
        Recorder {
            name,
            log: log.clone(),
            behaviour,
        }
    }
}

impl RowHandler for Recorder {
    type Snapshot = NoteSnapshot;

    fn capture(&self, row: &CapturedRow) -> Result<NoteSnapshot, HandlerError> {
        let body: String = row.get("body")?;
        if body == "poison" {
            return Err("this row cannot be captured".into());
        }
        Ok(NoteSnapshot { body })
    }

    fn deliver<'a>(
        &'a self,
        ctx: &'a HandlerContext,
        snapshot: NoteSnapshot,
    ) -> BoxFuture<'a, Result<(), HandlerError>> {
        Box::pin(async move {
            let started = Instant::now();
            let outcome: Result<(), HandlerError> = match &self.behaviour {
                Behaviour::Succeed => Ok(()),
                Behaviour::Fail => Err("the blob store said no: secret-token-123".into()),
                Behaviour::HangFirst if ctx.attempt == 1 => {
                    std::future::pending::<()>().await;
                    Ok(())
                }
                Behaviour::BlockThreadFirstUntil(gate) if ctx.attempt == 1 => {
                    // Err means the sender was dropped: the gate is open too.
                    let _ = gate.0.lock().expect("gate").recv();
                    Ok(())
                }
                Behaviour::AwaitCancel => {
                    ctx.cancellation.cancelled().await;
                    Err("cancelled".into())
                }
                Behaviour::AwaitGate(gate) => {
                    let started = gate.started.lock().expect("gate").take();
                    if let Some(started) = started {
                        let _ = started.send(());
                        if let Some(go) = gate.go.lock().await.take() {
                            let _ = go.await;
                        }
                    }
                    Ok(())
                }
                Behaviour::RecordCancel(seen) => {
                    ctx.cancellation.cancelled().await;
                    *seen.lock().expect("seen") = Some(CancelSeen {
                        claimed_at: ctx.claimed_at,
                        cancel_at: ctx.cancel_at,
                        seen_at: Instant::now(),
                    });
                    Err("cancelled".into())
                }
                _ => Ok(()),
            };
            self.log.0.lock().expect("log").push(Seen {
                handler: self.name,
                record_id: ctx.record_id.clone(),
                attempt: ctx.attempt,
                run_id: ctx.run_id,
                entity_id: ctx.entity_id,
                tenant_id: ctx.tenant_id,
                strategy: ctx.strategy,
                body: snapshot.body,
                started,
                finished: Instant::now(),
            });
            outcome
        })
    }
}

fn purge_rules() -> TestRules {
    TestRules::new()
        .with(
            "session-notes",
            Capabilities::only(Strategy::Purge),
            Rule::new(Period::days(30), Strategy::Purge),
        )
        .with(
            "user-data",
            Capabilities::only(Strategy::Purge),
            Rule::new(Period::days(30), Strategy::Purge),
        )
}

/// Cohort's tables, the shared models' tables, `n` expired notes.
async fn setup(n: u32) -> TestDb {
    let db = db_with_tables().await;
    db.exec(&format!(
        "INSERT INTO session_notes (id, tenant_id, created_at, body) \
         SELECT ('00000000-0000-0000-0000-' || lpad(g::text, 12, '0'))::uuid, \
                '11111111-1111-1111-1111-111111111111', \
                now() - interval '100 days' + g * interval '1 second', 'body ' || g \
         FROM generate_series(1, {n}) g"
    ))
    .await;
    db
}

fn options() -> Options {
    Options {
        batch_size: 3,
        claim_timeout: StdDuration::from_secs(2),
        ..Options::default()
    }
}

async fn build(
    db: &TestDb,
    options: Options,
    handlers: Vec<(Recorder, RowHandlerOptions)>,
) -> Cohort {
    build_on(db.pool().clone(), options, handlers).await
}

/// [`build`] on a pool of the caller's.
async fn build_on(
    pool: sqlx::PgPool,
    options: Options,
    handlers: Vec<(Recorder, RowHandlerOptions)>,
) -> Cohort {
    let mut builder = Cohort::builder(pool)
        .options(options)
        .rules(purge_rules())
        .entity::<SessionNote>();
    for (h, o) in handlers {
        builder = builder.row_handler_with::<SessionNote, _>(h, o);
    }
    builder.build().await.expect("model")
}

fn with_id() -> RowHandlerOptions {
    RowHandlerOptions::new().id(uuid(RECORDER_ID))
}

async fn states(db: &TestDb) -> Vec<(String, i32)> {
    sqlx::query_as("SELECT state, attempts FROM sweep_row_handler_status ORDER BY work_id")
        .fetch_all(db.pool())
        .await
        .expect("states")
}

/// Waits (polling the database clock) until every in-flight claim expired.
async fn until_claims_expire(db: &TestDb) {
    for _ in 0..1000 {
        let live = count(
            db,
            "SELECT count(*) FROM sweep_row_handler_status \
             WHERE state = 'InFlight' AND claim_expires_at >= clock_timestamp()",
        )
        .await;
        if live == 0 {
            return;
        }
        tokio::time::sleep(StdDuration::from_millis(20)).await;
    }
    panic!("claims never expired");
}

// contract: RH1, RH2, RH3, RH7
#[tokio::test]
async fn a_handler_captures_in_the_batch_and_delivers_after_commit_with_the_rows_identity() {
    let db = setup(5).await;
    let log = Log::default();
    let cohort = build(
        &db,
        options(),
        vec![
            (Recorder::new("audit", &log, Behaviour::Succeed), with_id()),
            (
                Recorder::new("unnamed", &log, Behaviour::Succeed),
                RowHandlerOptions::new(),
            ),
        ],
    )
    .await;
    let result = cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    assert_eq!(result.affected(), 5);
    assert!(
        log.all().is_empty(),
        "nothing is delivered by the sweep itself"
    );
    // The work is queued in the batches' transactions, under the handlers'
    // identities: the id given, or the type's name (with its module path:
    // `it::handlers::delivery::Recorder` in this binary).
    let ids: Vec<String> =
        sqlx::query_scalar("SELECT DISTINCT handler_id FROM sweep_row_handler_status")
            .fetch_all(db.pool())
            .await
            .expect("ids");
    let ids: HashSet<String> = ids.into_iter().collect();
    assert_eq!(
        ids,
        HashSet::from([
            RECORDER_ID.to_owned(),
            std::any::type_name::<Recorder>().to_owned()
        ])
    );
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM sweep_run_row_detail WHERE captured_payload IS NOT NULL"
        )
        .await,
        5
    );

    let report = cohort.dispatcher().run_once().await.expect("dispatch");
    assert_eq!((report.claimed, report.succeeded), (10, 10));
    let seen = log.all();
    assert_eq!(seen.len(), 10);
    for s in &seen {
        let n: u32 = s.body.trim_start_matches("body ").parse().expect("body");
        assert_eq!(
            s.record_id,
            note_id(n).to_string(),
            "the snapshot is the row's own"
        );
        assert_eq!(s.attempt, 1);
        assert_eq!(s.run_id, result.run_id);
        assert_eq!(s.entity_id, SessionNote::ENTITY_ID);
        assert_eq!(s.tenant_id, tenant_a());
        assert_eq!(s.strategy, Strategy::Purge);
    }
    // Every handler of each row is done: the payloads are gone.
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM sweep_run_row_detail WHERE captured_payload IS NOT NULL"
        )
        .await,
        0
    );
    let done = states(&db).await;
    assert!(!done.is_empty());
    assert!(
        done.iter().all(|(s, a)| s == "Succeeded" && *a == 1),
        "{done:?}"
    );
}

// contract: RH2
#[tokio::test]
async fn capture_belongs_to_the_batch_transaction_and_sees_the_row_before_the_change() {
    let db = setup(3).await;
    // The third note's delete fails: its batch rolls back, capture and all.
    db.exec(
        "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN IF OLD.body = 'body 3' THEN RAISE EXCEPTION 'no'; END IF; RETURN OLD; END $$; \
         CREATE TRIGGER refuse BEFORE DELETE ON session_notes FOR EACH ROW EXECUTE FUNCTION refuse();",
    )
    .await;
    let log = Log::default();
    let cohort = build(
        &db,
        Options {
            batch_size: 2,
            ..options()
        },
        vec![(Recorder::new("audit", &log, Behaviour::Succeed), with_id())],
    )
    .await;
    let result = cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    assert_eq!(result.status, RunStatus::Failed);
    assert_eq!(result.affected(), 2, "the first batch committed");
    assert_eq!(
        count(&db, "SELECT count(*) FROM sweep_row_handler_status").await,
        2,
        "the failed batch queued nothing"
    );
    cohort.dispatcher().run_once().await.expect("dispatch");
    let bodies: HashSet<String> = log.all().into_iter().map(|s| s.body).collect();
    assert_eq!(
        bodies,
        HashSet::from(["body 1".to_owned(), "body 2".to_owned()])
    );
}

// contract: X6, RH10
#[tokio::test]
async fn a_row_whose_capture_fails_is_left_dead_lettered_once_and_the_rest_go_on() {
    let db = setup(7).await;
    db.exec("UPDATE session_notes SET body = 'poison' WHERE id = '00000000-0000-0000-0000-000000000004'")
        .await;
    let log = Log::default();
    let cohort = build(
        &db,
        Options {
            batch_size: 1,
            ..options()
        },
        vec![(Recorder::new("audit", &log, Behaviour::Succeed), with_id())],
    )
    .await;
    let result = cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    assert_eq!(result.status, RunStatus::Succeeded);
    assert_eq!(result.affected(), 6);
    assert_eq!(
        result.summaries[0].skipped, 1,
        "the row is counted as skipped"
    );
    assert_eq!(count(&db, "SELECT count(*) FROM session_notes").await, 1);
    let dead: Vec<(Option<i64>, String, String, String)> = sqlx::query_as(
        "SELECT detail_id, record_id, state, last_error FROM sweep_row_handler_status WHERE state = 'DeadLettered'",
    )
    .fetch_all(db.pool())
    .await
    .expect("dead letters");
    assert_eq!(dead.len(), 1, "dead-lettered once: {dead:?}");
    assert_eq!(dead[0].0, None, "the row was not changed: no row detail");
    assert_eq!(dead[0].1, note_id(4).to_string());
    let error: serde_json::Value = serde_json::from_str(&dead[0].3).expect("envelope");
    assert_eq!(error["kind"], "HandlerCapture");
    // The next run tries again, and dead-letters it once more.
    cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM sweep_row_handler_status WHERE state = 'DeadLettered'"
        )
        .await,
        2
    );
}

/// A snapshot that does not come back from JSON equal to itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Lossy {
    body: String,
    #[serde(skip)]
    lost: u32,
}

struct LossyHandler;

impl RowHandler for LossyHandler {
    type Snapshot = Lossy;

    fn capture(&self, row: &CapturedRow) -> Result<Lossy, HandlerError> {
        Ok(Lossy {
            body: row.get("body")?,
            lost: 7,
        })
    }

    fn deliver<'a>(
        &'a self,
        _: &'a HandlerContext,
        _: Lossy,
    ) -> BoxFuture<'a, Result<(), HandlerError>> {
        Box::pin(async { Ok(()) })
    }
}

// contract: RH10
#[tokio::test]
async fn a_snapshot_that_does_not_round_trip_fails_at_capture_before_the_row_changes() {
    let db = setup(2).await;
    let cohort = Cohort::builder(db.pool().clone())
        .rules(purge_rules())
        .entity::<SessionNote>()
        .row_handler::<SessionNote, _>(LossyHandler)
        .build()
        .await
        .expect("model");
    let result = cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    assert_eq!(result.affected(), 0);
    assert_eq!(count(&db, "SELECT count(*) FROM session_notes").await, 2);
    let errors: Vec<String> = sqlx::query_scalar(
        "SELECT last_error FROM sweep_row_handler_status WHERE state = 'DeadLettered'",
    )
    .fetch_all(db.pool())
    .await
    .expect("errors");
    assert_eq!(errors.len(), 2);
    assert!(
        errors.iter().all(|e| e.contains("SnapshotRoundTrip")),
        "{errors:?}"
    );
}

// contract: RH4
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_whose_dispatcher_dies_is_reclaimed_after_the_timeout_and_delivered_again() {
    let db = setup(1).await;
    let log = Log::default();
    let cohort = build(
        &db,
        options(),
        vec![(
            Recorder::new("audit", &log, Behaviour::HangFirst),
            with_id(),
        )],
    )
    .await;
    cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    let first = tokio::spawn({
        let cohort = cohort.clone();
        async move { cohort.dispatcher().run_once().await }
    });
    // Wait until the delivery is in flight, then kill its dispatcher: the
    // future and its connection are dropped mid-delivery.
    let deadline = Instant::now() + StdDuration::from_secs(120);
    while states(&db).await != vec![("InFlight".to_owned(), 1)] {
        assert!(Instant::now() < deadline, "the dispatcher never claimed");
        tokio::time::sleep(StdDuration::from_millis(10)).await;
    }
    first.abort();
    assert!(first.await.expect_err("killed").is_cancelled());
    assert_eq!(states(&db).await, vec![("InFlight".to_owned(), 1)]);
    // Nobody can take it before its claim expires.
    let early = cohort.dispatcher().run_once().await.expect("dispatch");
    assert_eq!((early.reclaimed, early.claimed), (0, 0));
    until_claims_expire(&db).await;
    let report = cohort.dispatcher().run_once().await.expect("dispatch");
    assert_eq!((report.reclaimed, report.succeeded), (1, 1));
    assert_eq!(
        states(&db).await,
        vec![("Succeeded".to_owned(), 2)],
        "the reclaim counts as an attempt"
    );
    let seen = log.all();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].attempt, 2);
}

// contract: RH4
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_whose_claim_was_reclaimed_cannot_settle_the_row() {
    let db = setup(1).await;
    let log = Log::default();
    // The first attempt blocks its thread, ignoring its cancellation, until
    // the test opens the gate; meanwhile its claim expires and another
    // dispatcher reclaims and delivers. The order is forced, not timed.
    let (open, gate) = Gate::new();
    let cohort = build(
        &db,
        options(),
        vec![(Recorder::new("audit", &log, Behaviour::Succeed), with_id())],
    )
    .await;
    cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    // The stalled dispatcher runs on a thread of its own, with a runtime and
    // a pool of its own: a connection it hands back while its runtime is
    // blocked must not starve the test's pool.
    let stalled = {
        let url = db.url();
        let log = log.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let pool = sqlx::PgPool::connect(&url).await.expect("pool");
                let stalled = build_on(
                    pool,
                    options(),
                    vec![(
                        Recorder::new("audit", &log, Behaviour::BlockThreadFirstUntil(gate)),
                        with_id(),
                    )],
                )
                .await;
                stalled.dispatcher().run_once().await
            })
        })
    };
    // The first dispatcher must hold the claim before the wait for its
    // expiry starts (under load its claim can take seconds).
    let deadline = Instant::now() + StdDuration::from_secs(120);
    while states(&db).await != vec![("InFlight".to_owned(), 1)] {
        assert!(
            Instant::now() < deadline,
            "the first dispatcher never claimed the row"
        );
        tokio::time::sleep(StdDuration::from_millis(10)).await;
    }
    until_claims_expire(&db).await;
    let second = cohort.dispatcher().run_once().await.expect("dispatch");
    assert_eq!((second.reclaimed, second.succeeded), (1, 1));
    assert_eq!(states(&db).await, vec![("Succeeded".to_owned(), 2)]);
    // Only now does the stale first attempt finish and try to settle.
    open.send(())
        .expect("the stalled handler waits at the gate");
    let first = stalled.join().expect("thread").expect("dispatch");
    assert_eq!(
        first.unsettled, 1,
        "the stale outcome is discarded: {first:?}"
    );
    assert_eq!(first.succeeded + first.retried + first.dead_lettered, 0);
    assert_eq!(
        states(&db).await,
        vec![("Succeeded".to_owned(), 2)],
        "the stale outcome changed nothing"
    );
}

// contract: RH9
// Work queued for a retained type that this application's dispatcher has
// no handler for (another application sharing the install queued it, or
// the type's handlers are gone) is never claimed here: it is left for the
// dispatcher that serves it, counted in the report and logged, naming the
// type, once it has waited longer than the claim timeout.
#[tokio::test]
async fn work_for_a_type_this_dispatcher_does_not_serve_is_left_counted_and_logged() {
    let db = setup(3).await;
    let log = Log::default();
    let logs = support::LogCapture::start();
    let serving = build(
        &db,
        options(),
        vec![(Recorder::new("audit", &log, Behaviour::Succeed), with_id())],
    )
    .await;
    serving.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    assert_eq!(states(&db).await.len(), 3);
    // Another application on the same install, with no row handler at all.
    let other = Cohort::builder(db.pool().clone())
        .options(options())
        .rules(purge_rules())
        .entity::<SessionNote>()
        .build()
        .await
        .expect("model");
    // Due for less than the claim timeout: not reported yet.
    let report = other.dispatcher().run_once().await.expect("dispatch");
    assert_eq!((report.claimed, report.unserved), (0, 0), "{report:?}");
    // Due for an hour: reported, still not touched.
    db.exec("UPDATE sweep_row_handler_status SET not_before = now() - interval '1 hour'")
        .await;
    let report = other.dispatcher().run_once().await.expect("dispatch");
    assert_eq!(
        (report.claimed, report.dead_lettered, report.unserved),
        (0, 0, 3),
        "{report:?}"
    );
    assert_eq!(
        states(&db).await,
        vec![("Pending".to_owned(), 0); 3],
        "left for the dispatcher that serves the type"
    );
    let text = logs.text();
    assert!(
        text.contains("registers no handler for") && text.contains(NOTE_ID),
        "{text}"
    );
    // The serving application's dispatcher delivers it.
    let report = serving.dispatcher().run_once().await.expect("dispatch");
    assert_eq!((report.succeeded, report.unserved), (3, 0), "{report:?}");
}

// contract: RH4
// The stale attempt settles while the re-delivery is still in flight: only
// its claim token tells the two apart (the row is `InFlight` either way).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reclaimed_attempt_cannot_settle_a_redelivery_still_in_flight() {
    let db = setup(1).await;
    let log = Log::default();
    let (open, gate) = Gate::new();
    let (relay_gate, relay_started, relay_go) = AsyncGate::new();
    let cohort = build(
        &db,
        options(),
        vec![(Recorder::new("audit", &log, Behaviour::Succeed), with_id())],
    )
    .await;
    cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    // The first dispatcher's handler blocks its thread until `open` (its own
    // runtime and pool, as in the test above).
    let stalled = {
        let url = db.url();
        let log = log.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let pool = sqlx::PgPool::connect(&url).await.expect("pool");
                let stalled = build_on(
                    pool,
                    options(),
                    vec![(
                        Recorder::new("audit", &log, Behaviour::BlockThreadFirstUntil(gate)),
                        with_id(),
                    )],
                )
                .await;
                stalled.dispatcher().run_once().await
            })
        })
    };
    let deadline = Instant::now() + StdDuration::from_secs(120);
    while states(&db).await != vec![("InFlight".to_owned(), 1)] {
        assert!(
            Instant::now() < deadline,
            "the first dispatcher never claimed the row"
        );
        tokio::time::sleep(StdDuration::from_millis(10)).await;
    }
    let first_token: Uuid = sqlx::query_scalar("SELECT claim_token FROM sweep_row_handler_status")
        .fetch_one(db.pool())
        .await
        .expect("first claim");
    until_claims_expire(&db).await;
    // A second dispatcher reclaims, claims again and delivers; its handler
    // says it started and waits at its gate: the row is in flight again,
    // under a new token.
    let relay = build(
        &db,
        options(),
        vec![(
            Recorder::new("audit", &log, Behaviour::AwaitGate(relay_gate)),
            with_id(),
        )],
    )
    .await;
    let redelivery = {
        let relay = relay.clone();
        tokio::spawn(async move { relay.dispatcher().run_once().await })
    };
    tokio::time::timeout(StdDuration::from_secs(120), relay_started)
        .await
        .expect("the re-delivery started within 120 s")
        .expect("started");
    let (state, second_token, attempts): (String, Option<Uuid>, i32) =
        sqlx::query_as("SELECT state, claim_token, attempts FROM sweep_row_handler_status")
            .fetch_one(db.pool())
            .await
            .expect("second claim");
    assert_eq!((state.as_str(), attempts), ("InFlight", 2));
    let second_token = second_token.expect("a claim token");
    assert_ne!(second_token, first_token);

    // Now the stale first attempt finishes and tries to settle with its
    // old token: it must change nothing.
    open.send(())
        .expect("the stalled handler waits at the gate");
    let first = stalled.join().expect("thread").expect("dispatch");
    assert_eq!(
        (
            first.unsettled,
            first.succeeded,
            first.retried,
            first.dead_lettered
        ),
        (1, 0, 0, 0),
        "the stale outcome is discarded: {first:?}"
    );
    let (state, token, attempts): (String, Option<Uuid>, i32) =
        sqlx::query_as("SELECT state, claim_token, attempts FROM sweep_row_handler_status")
            .fetch_one(db.pool())
            .await
            .expect("still in flight");
    assert_eq!(
        (state.as_str(), token, attempts),
        ("InFlight", Some(second_token), 2),
        "the re-delivery's claim is untouched"
    );

    // The re-delivery then settles with its own token.
    relay_go.send(()).expect("the re-delivery waits");
    let second = redelivery.await.expect("task").expect("dispatch");
    assert_eq!(
        (second.reclaimed, second.succeeded, second.unsettled),
        (1, 1, 0)
    );
    assert_eq!(states(&db).await, vec![("Succeeded".to_owned(), 2)]);
}

// contract: RH4
// The boundary itself, from the dispatcher's own clock values rather than
// a wall-clock window: the context says when the cancellation fires, it is
// nine tenths of the claim after the claim was taken, and the handler sees
// the cancellation no sooner.
#[tokio::test]
async fn the_cancellation_fires_at_exactly_nine_tenths_of_the_claim() {
    let db = setup(1).await;
    let log = Log::default();
    let seen = Arc::new(Mutex::new(None));
    let claim = StdDuration::from_millis(1500);
    let cohort = build(
        &db,
        Options {
            claim_timeout: claim,
            ..options()
        },
        vec![(
            Recorder::new("audit", &log, Behaviour::RecordCancel(seen.clone())),
            with_id(),
        )],
    )
    .await;
    cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    let report = cohort.dispatcher().run_once().await.expect("dispatch");
    assert_eq!(report.retried, 1);
    let seen = seen
        .lock()
        .expect("seen")
        .expect("the handler saw its cancellation");
    assert_eq!(
        seen.cancel_at - seen.claimed_at,
        claim.mul_f64(0.9),
        "the cancellation is set for nine tenths of the claim"
    );
    assert!(
        seen.seen_at >= seen.cancel_at,
        "and fires no sooner: {seen:?}"
    );
}

// contract: RH4, RH8
#[tokio::test]
async fn a_handler_is_cancelled_at_nine_tenths_of_the_claim_and_the_attempt_fails() {
    let db = setup(1).await;
    let log = Log::default();
    let cohort = build(
        &db,
        Options {
            claim_timeout: StdDuration::from_secs(3),
            ..options()
        },
        vec![(
            Recorder::new("audit", &log, Behaviour::AwaitCancel),
            with_id(),
        )],
    )
    .await;
    cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    let started = Instant::now();
    let report = cohort.dispatcher().run_once().await.expect("dispatch");
    let took = started.elapsed();
    assert_eq!(report.retried, 1);
    // The claim starts after `started`, so the cancellation (2.7 s into the
    // claim) cannot come sooner than this.
    assert!(
        took >= StdDuration::from_millis(2700),
        "cancelled at 0.9 of the 3 s claim, not sooner: {took:?}"
    );
    // The handler saw its cancellation and returned on its own. Its
    // delivery began after the claim, so it was cancelled before the claim
    // expired (0.3 s of slack for the timer).
    let seen = log.all();
    assert_eq!(seen.len(), 1, "the cancelled handler returned by itself");
    let delivered_for = seen[0].finished - seen[0].started;
    assert!(
        delivered_for < StdDuration::from_secs(3),
        "cancelled before the 3 s claim expired: {delivered_for:?}"
    );
    let (state, attempts, error): (String, i32, String) =
        sqlx::query_as("SELECT state, attempts, last_error FROM sweep_row_handler_status")
            .fetch_one(db.pool())
            .await
            .expect("work");
    assert_eq!((state.as_str(), attempts), ("Pending", 1));
    assert!(error.contains("HandlerTimeout"), "{error}");
}

// contract: RH4
#[tokio::test]
async fn a_handler_that_ignores_its_cancellation_is_dropped_and_its_attempt_fails() {
    let db = setup(1).await;
    let log = Log::default();
    let cohort = build(
        &db,
        options(),
        vec![(
            Recorder::new("audit", &log, Behaviour::HangFirst),
            with_id(),
        )],
    )
    .await;
    cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    // The first attempt never returns: the dispatcher drops it (0.95 of the
    // 2 s claim) and settles the failure itself.
    let report = cohort.dispatcher().run_once().await.expect("dispatch");
    assert_eq!((report.retried, report.unsettled), (1, 0));
    assert!(log.all().is_empty(), "the hung future never finished");
    let (state, attempts, error): (String, i32, String) =
        sqlx::query_as("SELECT state, attempts, last_error FROM sweep_row_handler_status")
            .fetch_one(db.pool())
            .await
            .expect("work");
    assert_eq!((state.as_str(), attempts), ("Pending", 1));
    assert!(error.contains("HandlerTimeout"), "{error}");
}

// contract: RH5
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_to_record_an_outcome_leaves_the_delivery_in_flight_until_reclaimed() {
    let db = setup(1).await;
    let app = support::app_pool(&db).await;
    let log = Log::default();
    // The handler revokes the dispatcher's right to update the queue while
    // it runs (through the superuser's pool), so recording its outcome fails.
    struct Revoker(sqlx::PgPool, Log);
    impl RowHandler for Revoker {
        type Snapshot = NoteSnapshot;
        fn capture(&self, row: &CapturedRow) -> Result<NoteSnapshot, HandlerError> {
            Ok(NoteSnapshot {
                body: row.get("body")?,
            })
        }
        fn deliver<'a>(
            &'a self,
            ctx: &'a HandlerContext,
            s: NoteSnapshot,
        ) -> BoxFuture<'a, Result<(), HandlerError>> {
            Box::pin(async move {
                if ctx.attempt == 1 {
                    sqlx::raw_sql("REVOKE UPDATE ON sweep_row_handler_status FROM cohort_test_app")
                        .execute(&self.0)
                        .await?;
                }
                self.1.0.lock().expect("log").push(Seen {
                    handler: "revoker",
                    record_id: ctx.record_id.clone(),
                    attempt: ctx.attempt,
                    run_id: ctx.run_id,
                    entity_id: ctx.entity_id,
                    tenant_id: ctx.tenant_id,
                    strategy: ctx.strategy,
                    body: s.body,
                    started: Instant::now(),
                    finished: Instant::now(),
                });
                Ok(())
            })
        }
    }
    let cohort = Cohort::builder(app)
        .options(options())
        .rules(purge_rules())
        .entity::<SessionNote>()
        .row_handler::<SessionNote, _>(Revoker(db.pool().clone(), log.clone()))
        .build()
        .await
        .expect("model");
    cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    let report = cohort
        .dispatcher()
        .run_once()
        .await
        .expect("a failed record is not an error of the round");
    assert_eq!(
        (report.claimed, report.unsettled, report.succeeded),
        (1, 1, 0)
    );
    assert_eq!(
        states(&db).await,
        vec![("InFlight".to_owned(), 1)],
        "not recorded as a handler failure"
    );
    db.exec("GRANT UPDATE ON sweep_row_handler_status TO cohort_test_app")
        .await;
    until_claims_expire(&db).await;
    let report = cohort.dispatcher().run_once().await.expect("dispatch");
    assert_eq!((report.reclaimed, report.succeeded), (1, 1));
    assert_eq!(states(&db).await, vec![("Succeeded".to_owned(), 2)]);
    assert_eq!(log.all().len(), 2);
}

/// Calls the dispatcher on every batch the run commits.
struct DispatchOnProgress(Cohort, Arc<Mutex<Vec<u64>>>);

impl AuditObserver for DispatchOnProgress {
    fn on_event<'a>(&'a self, event: &'a AuditEvent) -> BoxFuture<'a, Result<(), ProviderError>> {
        Box::pin(async move {
            if matches!(event, AuditEvent::EntityProgress { .. }) {
                let report = self.0.dispatcher().run_once().await?;
                self.1.lock().expect("claims").push(report.claimed);
            }
            Ok(())
        })
    }
}

// contract: RH6
#[tokio::test]
async fn work_that_waits_for_the_sweep_to_settle_is_not_delivered_before() {
    let db = setup(4).await;
    let log = Log::default();
    let later_id = uuid("0c4b1f6e-1d2a-4e5b-8f9c-0a1b2c3d4e5f");
    let handlers = |log: &Log| {
        vec![
            (Recorder::new("now", log, Behaviour::Succeed), with_id()),
            (
                Recorder::new("later", log, Behaviour::Succeed),
                RowHandlerOptions::new()
                    .id(later_id)
                    .dispatch(Dispatch::AfterSweepSettled),
            ),
        ]
    };
    // One handle dispatches; the other sweeps, and its observer calls the
    // first one's dispatcher after every committed batch, mid-run.
    let dispatching = build(&db, options(), handlers(&log)).await;
    let claims = Arc::new(Mutex::new(Vec::new()));
    let mut builder = Cohort::builder(db.pool().clone())
        .options(Options {
            batch_size: 2,
            ..options()
        })
        .rules(purge_rules())
        .entity::<SessionNote>()
        .observer(DispatchOnProgress(dispatching.clone(), claims.clone()));
    for (h, o) in handlers(&log) {
        builder = builder.row_handler_with::<SessionNote, _>(h, o);
    }
    let sweeping = builder.build().await.expect("model");
    sweeping.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    let mid_run: Vec<&'static str> = log.all().iter().map(|s| s.handler).collect();
    assert_eq!(
        mid_run.len(),
        4,
        "work that need not wait went mid-run: {mid_run:?}"
    );
    assert!(
        mid_run.iter().all(|h| *h == "now"),
        "nothing waiting for the settle was delivered before it: {mid_run:?}"
    );
    dispatching.dispatcher().run_once().await.expect("dispatch");
    let later = log.all().iter().filter(|s| s.handler == "later").count();
    assert_eq!(later, 4, "delivered once the run settled");
}

/// Signals the first batch's progress, then never returns.
struct HangOnProgress(Mutex<Option<tokio::sync::oneshot::Sender<()>>>);

impl AuditObserver for HangOnProgress {
    fn on_event<'a>(&'a self, event: &'a AuditEvent) -> BoxFuture<'a, Result<(), ProviderError>> {
        Box::pin(async move {
            if matches!(event, AuditEvent::EntityProgress { .. }) {
                if let Some(tx) = self.0.lock().expect("signal").take() {
                    let _ = tx.send(());
                }
                std::future::pending::<()>().await;
            }
            Ok(())
        })
    }
}

// contract: RH6, X4
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dispatcher_settles_an_abandoned_run_so_its_waiting_work_can_go() {
    let db = setup(4).await;
    let log = Log::default();
    let opts = Options {
        batch_size: 2,
        settle_timeout: StdDuration::from_secs(1),
        run_lease: StdDuration::from_secs(1),
        ..options()
    };
    let waiting = RowHandlerOptions::new()
        .id(uuid(RECORDER_ID))
        .dispatch(Dispatch::AfterSweepSettled);
    let cohort = build(
        &db,
        opts,
        vec![(Recorder::new("later", &log, Behaviour::Succeed), waiting)],
    )
    .await;
    // A run that dies after its first batch committed: its observer hangs
    // on that batch's progress, and the run's future is dropped there.
    let (committed_tx, committed_rx) = tokio::sync::oneshot::channel::<()>();
    let hanging = Cohort::builder(db.pool().clone())
        .options(Options {
            batch_size: 2,
            settle_timeout: StdDuration::from_secs(1),
            run_lease: StdDuration::from_secs(1),
            observer_timeout: StdDuration::from_secs(600),
            ..options()
        })
        .rules(purge_rules())
        .entity::<SessionNote>()
        .observer(HangOnProgress(Mutex::new(Some(committed_tx))))
        .row_handler_with::<SessionNote, _>(
            Recorder::new("later", &log, Behaviour::Succeed),
            RowHandlerOptions::new()
                .id(uuid(RECORDER_ID))
                .dispatch(Dispatch::AfterSweepSettled),
        )
        .build()
        .await
        .expect("model");
    let run = tokio::spawn(async move { hanging.sweep(&scope_a(), Utc::now()).await });
    committed_rx.await.expect("the first batch committed");
    run.abort();
    assert!(run.await.expect_err("killed").is_cancelled());
    assert_eq!(
        count(&db, "SELECT count(*) FROM sweep_row_handler_status").await,
        2
    );
    // The dispatcher waits for the run to settle; once the run's owner is
    // gone and the settle timeout passed, it settles the run itself.
    let mut delivered = 0;
    let mut settled = 0;
    for _ in 0..300 {
        let report = cohort.dispatcher().run_once().await.expect("dispatch");
        delivered += report.succeeded;
        settled += report.runs_settled;
        if delivered == 2 {
            break;
        }
        tokio::time::sleep(StdDuration::from_millis(50)).await;
    }
    assert_eq!(settled, 1, "the dispatcher settled the abandoned run, once");
    assert_eq!(delivered, 2);
    let status: String = sqlx::query_scalar("SELECT status FROM sweep_run")
        .fetch_one(db.pool())
        .await
        .expect("run");
    assert_eq!(status, "Failed");
}

// contract: RH7
#[tokio::test]
async fn a_payload_past_the_retention_is_scrubbed_and_its_work_dead_letters_naming_the_scrub() {
    let db = setup(2).await;
    let log = Log::default();
    let cohort = build(
        &db,
        Options {
            payload_retention: StdDuration::from_secs(1),
            ..options()
        },
        vec![(Recorder::new("audit", &log, Behaviour::Succeed), with_id())],
    )
    .await;
    cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    db.exec("UPDATE sweep_run_row_detail SET created_at = now() - interval '2 seconds'")
        .await;
    let report = cohort.dispatcher().run_once().await.expect("dispatch");
    assert_eq!((report.scrubbed, report.dead_lettered), (2, 2));
    assert!(log.all().is_empty());
    let errors: Vec<String> = sqlx::query_scalar("SELECT last_error FROM sweep_row_handler_status")
        .fetch_all(db.pool())
        .await
        .expect("errors");
    assert!(!errors.is_empty());
    assert!(
        errors.iter().all(|e| e.contains("PayloadScrubbed")),
        "{errors:?}"
    );
    let attempts: Vec<i32> = sqlx::query_scalar("SELECT attempts FROM sweep_row_handler_status")
        .fetch_all(db.pool())
        .await
        .expect("attempts");
    assert_eq!(attempts, vec![1, 1], "at once, not after the retry budget");
}

// contract: RH8, RH11
#[tokio::test]
async fn a_failing_handler_is_retried_then_dead_lettered_with_a_sanitized_error() {
    let db = setup(1).await;
    let log = Log::default();
    let cohort = build(
        &db,
        Options {
            max_attempts: 3,
            ..options()
        },
        vec![(Recorder::new("audit", &log, Behaviour::Fail), with_id())],
    )
    .await;
    cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    for attempt in 1..=3 {
        // Skip the backoff: the test is about the budget, not the clock.
        db.exec("UPDATE sweep_row_handler_status SET not_before = now() - interval '1 second'")
            .await;
        let report = cohort.dispatcher().run_once().await.expect("dispatch");
        if attempt < 3 {
            assert_eq!(report.retried, 1, "attempt {attempt}");
            let not_before_in_future = count(
                &db,
                "SELECT count(*) FROM sweep_row_handler_status WHERE not_before > clock_timestamp()",
            )
            .await;
            assert_eq!(not_before_in_future, 1, "a retry waits for its backoff");
        } else {
            assert_eq!(report.dead_lettered, 1);
        }
    }
    let (state, attempts, error): (String, i32, String) =
        sqlx::query_as("SELECT state, attempts, last_error FROM sweep_row_handler_status")
            .fetch_one(db.pool())
            .await
            .expect("work");
    assert_eq!((state.as_str(), attempts), ("DeadLettered", 3));
    let envelope: serde_json::Value = serde_json::from_str(&error).expect("envelope");
    assert_eq!(envelope["kind"], "Handler");
    assert!(envelope["diagnostic_id"].is_string());
    assert!(!error.contains("secret"), "{error}");
    assert_eq!(log.all().len(), 3);
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM sweep_run_row_detail WHERE captured_payload IS NOT NULL"
        )
        .await,
        0,
        "a dead letter is terminal: the payload is cleared"
    );
}

// contract: RH9
#[tokio::test]
async fn a_poisoned_payload_or_an_unknown_handler_dead_letters() {
    let db = setup(2).await;
    let log = Log::default();
    let cohort = build(
        &db,
        options(),
        vec![(Recorder::new("audit", &log, Behaviour::Succeed), with_id())],
    )
    .await;
    cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    // One payload is tampered with; one delivery names a handler nobody
    // registers (a renamed type).
    sqlx::query(
        "UPDATE sweep_run_row_detail SET captured_payload = jsonb_build_object($1::text, 'not a snapshot') \
         WHERE record_id = $2",
    )
    .bind(RECORDER_ID)
    .bind(note_id(1).to_string())
    .execute(db.pool())
    .await
    .expect("poison");
    sqlx::query(
        "UPDATE sweep_row_handler_status SET handler_id = 'old::Name' WHERE record_id = $1",
    )
    .bind(note_id(2).to_string())
    .execute(db.pool())
    .await
    .expect("rename");
    let report = cohort.dispatcher().run_once().await.expect("dispatch");
    assert_eq!(report.dead_lettered, 2);
    assert!(log.all().is_empty());
    let errors: Vec<(String, String)> = sqlx::query_as(
        "SELECT record_id, last_error FROM sweep_row_handler_status ORDER BY record_id",
    )
    .fetch_all(db.pool())
    .await
    .expect("errors");
    assert!(errors[0].1.contains("PayloadUndecodable"), "{errors:?}");
    assert!(errors[1].1.contains("UnknownHandler"), "{errors:?}");
}

// contract: RH12
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rows_handlers_run_in_priority_order_one_at_a_time() {
    let db = setup(12).await;
    let log = Log::default();
    let cohort = build(
        &db,
        options(),
        vec![
            (
                Recorder::new("second", &log, Behaviour::Succeed),
                RowHandlerOptions::new().id(Uuid::new_v4()).priority(5),
            ),
            (
                Recorder::new("first", &log, Behaviour::Succeed),
                RowHandlerOptions::new().id(Uuid::new_v4()).priority(-1),
            ),
            (
                Recorder::new("third", &log, Behaviour::Succeed),
                RowHandlerOptions::new().id(Uuid::new_v4()).priority(5),
            ),
        ],
    )
    .await;
    cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    // Before the first handler of a row is done, nothing else of the row is claimable.
    let claimable: Vec<i32> =
        sqlx::query_scalar("SELECT DISTINCT priority FROM sweep_row_handler_status ORDER BY 1")
            .fetch_all(db.pool())
            .await
            .expect("ranks");
    assert_eq!(claimable, vec![0, 1, 2]);
    // Three dispatchers at once, until everything is delivered.
    for _ in 0..20 {
        let (da, db_, dc) = (
            cohort.dispatcher(),
            cohort.dispatcher(),
            cohort.dispatcher(),
        );
        let (a, b, c) = tokio::join!(da.run_once(), db_.run_once(), dc.run_once());
        let claimed = a.expect("a").claimed + b.expect("b").claimed + c.expect("c").claimed;
        if claimed == 0 {
            break;
        }
    }
    let seen = log.all();
    assert_eq!(seen.len(), 36);
    let mut by_row: HashMap<String, Vec<Seen>> = HashMap::new();
    for s in seen {
        by_row.entry(s.record_id.clone()).or_default().push(s);
    }
    for (row, mut deliveries) in by_row {
        deliveries.sort_by_key(|s| s.started);
        let order: Vec<&str> = deliveries.iter().map(|s| s.handler).collect();
        assert_eq!(order, ["first", "second", "third"], "row {row}");
        for pair in deliveries.windows(2) {
            assert!(
                pair[0].finished <= pair[1].started,
                "row {row}: overlapping deliveries"
            );
        }
    }
}

// contract: RH3, RH4
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn competing_dispatchers_deliver_each_row_once_and_drain_at_volume() {
    let db = setup(10_000).await;
    let log = Log::default();
    let cohort = build(
        &db,
        Options {
            batch_size: 1_000,
            ..options()
        },
        vec![
            (Recorder::new("blobs", &log, Behaviour::Succeed), with_id()),
            (
                Recorder::new("events", &log, Behaviour::Succeed),
                RowHandlerOptions::new().id(Uuid::new_v4()).priority(1),
            ),
        ],
    )
    .await;
    let result = cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    assert_eq!(result.affected(), 10_000);
    loop {
        let (da, db_) = (cohort.dispatcher(), cohort.dispatcher());
        let (a, b) = tokio::join!(da.run_once(), db_.run_once());
        if a.expect("a").claimed + b.expect("b").claimed == 0 {
            break;
        }
    }
    let seen = log.all();
    assert_eq!(seen.len(), 20_000, "no failures, so exactly once each");
    let distinct: HashSet<(String, &str)> = seen
        .iter()
        .map(|s| (s.record_id.clone(), s.handler))
        .collect();
    assert_eq!(distinct.len(), 20_000);
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM sweep_row_handler_status WHERE state <> 'Succeeded'"
        )
        .await,
        0
    );
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM sweep_run_row_detail WHERE captured_payload IS NOT NULL"
        )
        .await,
        0,
        "no live payload is left"
    );
}

// contract: RH3
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_dispatcher_is_woken_by_the_batch_that_queued_work_and_stops_on_shutdown() {
    let db = setup(3).await;
    let log = Log::default();
    let cohort = build(
        &db,
        Options {
            poll_interval: StdDuration::from_secs(600),
            ..options()
        },
        vec![(Recorder::new("audit", &log, Behaviour::Succeed), with_id())],
    )
    .await;
    let shutdown = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn({
        let cohort = cohort.clone();
        let shutdown = shutdown.clone();
        async move { cohort.dispatcher().run(shutdown).await }
    });
    // Let the loop reach its wait (its first round finds nothing).
    let deadline = Instant::now() + StdDuration::from_secs(120);
    while count(&db, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%'").await == 0 {
        assert!(Instant::now() < deadline, "the dispatcher never listened");
        tokio::time::sleep(StdDuration::from_millis(10)).await;
    }
    cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    // Woken by the notification, long before the 10-minute poll.
    let deadline = Instant::now() + StdDuration::from_secs(120);
    while log.all().len() < 3 {
        assert!(
            Instant::now() < deadline,
            "not woken: {} of 3 delivered",
            log.all().len()
        );
        tokio::time::sleep(StdDuration::from_millis(10)).await;
    }
    assert_eq!(log.all().len(), 3);
    shutdown.cancel();
    tokio::time::timeout(StdDuration::from_secs(10), running)
        .await
        .expect("run returns on shutdown")
        .expect("join")
        .expect("run");
}

// contract: S8, E5
#[tokio::test]
async fn dry_runs_never_capture_or_queue_and_erasures_run_handlers() {
    let db = setup(3).await;
    let log = Log::default();
    let cohort = build(
        &db,
        options(),
        vec![(Recorder::new("audit", &log, Behaviour::Succeed), with_id())],
    )
    .await;
    let dry = cohort
        .sweep_with(&scope_a(), Utc::now(), SweepOptions::default().dry_run())
        .await
        .expect("dry run");
    assert_eq!(dry.affected(), 3);
    assert_eq!(
        count(&db, "SELECT count(*) FROM sweep_row_handler_status").await,
        0
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM sweep_run_row_detail").await,
        0
    );

    // Erasure changes the subject's rows through the same batches, so its
    // rows' handlers run too.
    let db = db_with_tables().await;
    let subject = uuid("aaaaaaaa-0000-0000-0000-000000000001");
    sqlx::query("INSERT INTO user_records (id, tenant_id, created_at, user_id) VALUES (1, $1, now(), $2), (2, $1, now(), $2)")
        .bind(tenant_a())
        .bind(subject)
        .execute(db.pool())
        .await
        .expect("records");
    struct UserHandler(Log);
    impl RowHandler for UserHandler {
        type Snapshot = i64;
        fn capture(&self, row: &CapturedRow) -> Result<i64, HandlerError> {
            row.get("id")
        }
        fn deliver<'a>(
            &'a self,
            ctx: &'a HandlerContext,
            id: i64,
        ) -> BoxFuture<'a, Result<(), HandlerError>> {
            Box::pin(async move {
                self.0.0.lock().expect("log").push(Seen {
                    handler: "user",
                    record_id: ctx.record_id.clone(),
                    attempt: ctx.attempt,
                    run_id: ctx.run_id,
                    entity_id: ctx.entity_id,
                    tenant_id: ctx.tenant_id,
                    strategy: ctx.strategy,
                    body: id.to_string(),
                    started: Instant::now(),
                    finished: Instant::now(),
                });
                Ok(())
            })
        }
    }
    let users = Log::default();
    let cohort = Cohort::builder(db.pool().clone())
        .rules(purge_rules())
        .entity::<UserRecord>()
        .row_handler::<UserRecord, _>(UserHandler(users.clone()))
        .build()
        .await
        .expect("model");
    let erased = cohort
        .erase(&scope_a(), Utc::now(), ErasureRequest::new(subject))
        .await
        .expect("erase");
    assert_eq!(erased.affected(), 2);
    cohort.dispatcher().run_once().await.expect("dispatch");
    let mut ids: Vec<String> = users.all().into_iter().map(|s| s.body).collect();
    ids.sort();
    assert_eq!(ids, vec!["1", "2"]);
}

// contract: RH12 (the settle releases the next delivery of its own row, and
// of no other row)
#[tokio::test]
async fn settling_a_delivery_releases_the_next_handler_of_the_same_row_only() {
    let db = setup(3).await;
    let log = Log::default();
    let cohort = build(
        &db,
        Options {
            dispatch_limit: 1,
            ..options()
        },
        vec![
            (
                Recorder::new("first", &log, Behaviour::Succeed),
                RowHandlerOptions::new().id(Uuid::new_v4()).priority(0),
            ),
            (
                Recorder::new("second", &log, Behaviour::Succeed),
                RowHandlerOptions::new().id(Uuid::new_v4()).priority(1),
            ),
        ],
    )
    .await;
    cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    let report = cohort.dispatcher().run_once().await.expect("dispatch");
    assert_eq!(report.succeeded, 1, "{report:?}");
    // The row whose first handler is done, and the rows whose second
    // handler is now due.
    let done: Vec<i64> = sqlx::query_scalar(
        "SELECT detail_id FROM sweep_row_handler_status WHERE state = 'Succeeded'",
    )
    .fetch_all(db.pool())
    .await
    .expect("done");
    let released: Vec<i64> = sqlx::query_scalar(
        "SELECT detail_id FROM sweep_row_handler_status \
         WHERE priority = 1 AND not_before <> 'infinity' ORDER BY detail_id",
    )
    .fetch_all(db.pool())
    .await
    .expect("released");
    assert_eq!(done.len(), 1);
    assert_eq!(
        released, done,
        "the settle released another row's work, or none"
    );
}
