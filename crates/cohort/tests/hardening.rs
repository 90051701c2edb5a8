//! Regression tests for issue 8 ("Hardening"): sweeps, previews, runs and the
//! ledger. Erasure is in `hardening_erasure.rs`, holds and host deletions in
//! `hardening_holds.rs`, quoted schemas under a hostile `search_path` in
//! `hardening_schema.rs`.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration, FixedOffset, NaiveDate, TimeZone, Utc};
use cohort::holds::{HoldFilter, HoldRequest, Target};
use cohort::ledger::{AuditEvent, AuditObserver, EntitySummary, FailureKind};
use cohort::policy::ProviderError;
use cohort::{
    Capabilities, Cohort, Conventions, ErasureRequest, Error, Options, Period, Preview,
    PreviewEntry, ResolutionContext, Rule, RuleProvider, RunResult, RunStatus, Scope, Strategy,
    SweepOptions, TenantContext,
};
use common::models::*;
use common::{Answer, LogCapture, TestDb, TestRules, count, db_with_cohort};
use futures_util::future::BoxFuture;
use sqlx::{Connection, Row};
use uuid::Uuid;

// ---------------------------------------------------------------------------
// Set-up and helpers.

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 6, 1, 12, 0, 0)
        .single()
        .expect("valid")
}

/// PostgreSQL's earliest `timestamptz`: 4714-11-24 00:00 UTC BC (year -4713
/// in chrono's astronomical numbering).
fn pg_earliest() -> DateTime<Utc> {
    NaiveDate::from_ymd_opt(-4713, 11, 24)
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .expect("valid")
        .and_utc()
}

fn tenant_a() -> Uuid {
    uuid("11111111-1111-1111-1111-111111111111")
}

fn tenant_b() -> Uuid {
    uuid("22222222-2222-2222-2222-222222222222")
}

fn scope_a() -> Scope {
    Scope::Tenant(TenantContext::new(tenant_a()))
}

/// Session notes purged after 30 days, case contacts anonymised after 365.
fn readme_rules() -> TestRules {
    TestRules::new()
        .with(
            "session-notes",
            Capabilities::only(Strategy::Purge),
            Rule::new(Period::days(30), Strategy::Purge),
        )
        .with(
            "case-contacts",
            Capabilities::only(Strategy::Anonymise),
            Rule::new(Period::days(365), Strategy::Anonymise),
        )
}

async fn setup() -> TestDb {
    let (db, _) = db_with_cohort("public").await;
    db.exec(TABLES).await;
    db
}

/// Session notes, then case contacts.
async fn build(db: &TestDb, rules: impl RuleProvider, options: Options) -> Cohort {
    Cohort::builder(db.pool().clone())
        .options(options)
        .rules(rules)
        .entity::<SessionNote>()
        .entity::<CaseContact>()
        .build()
        .await
        .expect("valid model")
}

/// A note anchored at `anchor` (a `timestamptz` literal: `-infinity`, ...).
async fn note_at(db: &TestDb, tenant: Uuid, anchor: &str) -> Uuid {
    let id = Uuid::new_v4();
    sqlx::query(
        "INSERT INTO session_notes (id, tenant_id, created_at, body) VALUES ($1, $2, $3::timestamptz, 'private')",
    )
    .bind(id)
    .bind(tenant)
    .bind(anchor)
    .execute(db.pool())
    .await
    .expect("insert note");
    id
}

/// A note anchored at `at`.
async fn note_when(db: &TestDb, tenant: Uuid, at: DateTime<Utc>) -> Uuid {
    let id = Uuid::new_v4();
    sqlx::query(
        "INSERT INTO session_notes (id, tenant_id, created_at, body) VALUES ($1, $2, $3, 'private')",
    )
    .bind(id)
    .bind(tenant)
    .bind(at)
    .execute(db.pool())
    .await
    .expect("insert note");
    id
}

/// A note `age_days` before [`now`].
async fn note(db: &TestDb, tenant: Uuid, age_days: i64) -> Uuid {
    note_when(db, tenant, now() - Duration::days(age_days)).await
}

async fn contact(db: &TestDb, tenant: Uuid, age_days: i64) -> Uuid {
    let id = Uuid::new_v4();
    sqlx::query(
        "INSERT INTO case_contacts (id, tenant_id, created_at, email, full_name, phone, external_ref) \
         VALUES ($1, $2, $3, 'ann@example.org', 'Ann Example', '+44 1234', 'REF-12345')",
    )
    .bind(id)
    .bind(tenant)
    .bind(now() - Duration::days(age_days))
    .execute(db.pool())
    .await
    .expect("insert contact");
    id
}

/// A hold written with plain SQL, active since yesterday by the database clock.
async fn hold(db: &TestDb, entity: &str, record: Uuid, tenant: Uuid) {
    sqlx::query(
        "INSERT INTO retention_holds (hold_id, retained_entity_id, record_id, tenant_id, reason, created_at) \
         VALUES ($1, $2, $3, $4, 'litigation', now() - interval '1 day')",
    )
    .bind(Uuid::new_v4())
    .bind(uuid(entity))
    .bind(record.to_string())
    .bind(tenant)
    .execute(db.pool())
    .await
    .expect("insert hold");
}

async fn note_exists(db: &TestDb, id: Uuid) -> bool {
    count(
        db,
        &format!("SELECT count(*) FROM session_notes WHERE id = '{id}'"),
    )
    .await
        == 1
}

async fn contact_anonymised(db: &TestDb, id: Uuid) -> bool {
    count(
        db,
        &format!(
            "SELECT count(*) FROM case_contacts WHERE id = '{id}' AND anonymised_at IS NOT NULL AND email IS NULL"
        ),
    )
    .await
        == 1
}

fn summary<'r>(result: &'r RunResult, entity_type: &str) -> &'r EntitySummary {
    result
        .summaries
        .iter()
        .find(|s| s.entity_type == entity_type)
        .unwrap_or_else(|| panic!("no summary for {entity_type}: {result:#?}"))
}

fn entry<'p>(preview: &'p Preview, entity_type: &str) -> &'p PreviewEntry {
    preview
        .entries
        .iter()
        .find(|e| e.entity_type == entity_type)
        .unwrap_or_else(|| panic!("no preview entry for {entity_type}: {preview:#?}"))
}

async fn run_status(db: &TestDb, run_id: Uuid) -> String {
    sqlx::query_scalar("SELECT status FROM sweep_run WHERE run_id = $1")
        .bind(run_id)
        .fetch_one(db.pool())
        .await
        .expect("run row")
}

/// The ledger summary of `entity_type` in `run_id`: status, affected, held,
/// skipped, applied period, rule source, rule reason, error.
type LedgerSummary = (
    String,
    i64,
    i64,
    i64,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
);

async fn ledger_summary(db: &TestDb, run_id: Uuid, entity_type: &str) -> LedgerSummary {
    sqlx::query_as(
        "SELECT status, affected_count, held_count, skipped_count, applied_period, rule_source, rule_reason, error \
         FROM sweep_run_entity_summary WHERE run_id = $1 AND entity_type = $2",
    )
    .bind(run_id)
    .bind(entity_type)
    .fetch_one(db.pool())
    .await
    .unwrap_or_else(|e| panic!("no ledger summary for {entity_type}: {e}"))
}

/// The keys of a JSON object, sorted.
fn keys(value: &serde_json::Value) -> Vec<String> {
    let mut keys: Vec<String> = value
        .as_object()
        .unwrap_or_else(|| panic!("not a JSON object: {value}"))
        .keys()
        .cloned()
        .collect();
    keys.sort();
    keys
}

// ---------------------------------------------------------------------------
// X20: periods, clocks and rule text that PostgreSQL cannot hold.

// contract: X20
#[tokio::test]
async fn a_period_whose_cutoff_falls_before_postgres_earliest_time_means_nothing_is_old_enough() {
    let db = setup().await;
    let rules = readme_rules();
    let cohort = build(&db, rules.clone(), Options::default()).await;
    for period in [
        Period::years(10_000),
        Period::days(u32::MAX),
        Period::fixed(StdDuration::MAX),
    ] {
        rules.set(
            "session-notes",
            Answer::Rule(Rule::new(period, Strategy::Purge)),
        );
        let old = note(&db, tenant_a(), 400).await;
        // As old as PostgreSQL can store: still not older than "before 4714 BC".
        let ancient = note_at(&db, tenant_a(), "4713-12-01 00:00:00+00 BC").await;
        let old_contact = contact(&db, tenant_a(), 400).await;

        let preview = cohort
            .preview(&scope_a(), now())
            .await
            .unwrap_or_else(|e| panic!("{period}: preview failed: {e}"));
        let notes = entry(&preview, "SessionNote");
        assert_eq!(
            (
                notes.eligible,
                notes.held,
                notes.cutoff,
                notes.failure.clone()
            ),
            (0, 0, None, None),
            "{period}: {preview:#?}"
        );
        assert_eq!(entry(&preview, "CaseContact").eligible, 1, "{period}");

        let result = cohort
            .sweep(&scope_a(), now())
            .await
            .unwrap_or_else(|e| panic!("{period}: sweep failed: {e}"));
        assert_eq!(result.status, RunStatus::Succeeded, "{period}: {result:#?}");
        assert!(result.entity_failures.is_empty(), "{period}: {result:#?}");
        let notes = summary(&result, "SessionNote");
        assert_eq!(
            (
                notes.affected,
                notes.cutoff,
                notes.applied_period,
                notes.error.clone()
            ),
            (0, None, Some(period), None),
            "{period}"
        );
        assert_eq!(
            summary(&result, "CaseContact").affected,
            1,
            "{period}: the other entity of the run is swept"
        );
        assert!(note_exists(&db, old).await, "{period}");
        assert!(note_exists(&db, ancient).await, "{period}");
        assert!(contact_anonymised(&db, old_contact).await, "{period}");

        assert_eq!(run_status(&db, result.run_id).await, "Succeeded");
        let (status, affected, ..) = ledger_summary(&db, result.run_id, "SessionNote").await;
        assert_eq!((status.as_str(), affected), ("Succeeded", 0), "{period}");
        // Stored as no cutoff, or as -infinity: never a finite instant.
        let finite_cutoff = count(
            &db,
            &format!(
                "SELECT count(*) FROM sweep_run_entity_summary WHERE run_id = '{}' \
                 AND entity_type = 'SessionNote' AND isfinite(cutoff)",
                result.run_id
            ),
        )
        .await;
        assert_eq!(finite_cutoff, 0, "{period}");
        let (status, affected, ..) = ledger_summary(&db, result.run_id, "CaseContact").await;
        assert_eq!((status.as_str(), affected), ("Succeeded", 1), "{period}");
    }
}

// contract: X20
#[tokio::test]
async fn the_earliest_and_latest_instants_postgres_can_store_are_valid_clocks() {
    let db = setup().await;
    let cohort = build(&db, readme_rules(), Options::default()).await;
    let old = note(&db, tenant_a(), 400).await;
    let forever = note_at(&db, tenant_a(), "infinity").await;
    let old_contact = contact(&db, tenant_a(), 400).await;

    // At PostgreSQL's earliest instant every cutoff falls before it: nothing
    // is old enough, and nothing fails.
    let earliest = pg_earliest();
    let preview = cohort
        .preview(&scope_a(), earliest)
        .await
        .expect("preview at the earliest instant");
    assert_eq!(preview.now, earliest);
    assert!(
        preview
            .entries
            .iter()
            .all(|e| e.eligible == 0 && e.cutoff.is_none() && e.failure.is_none())
    );
    let result = cohort
        .sweep(&scope_a(), earliest)
        .await
        .expect("sweep at the earliest instant");
    assert_eq!(result.status, RunStatus::Succeeded, "{result:#?}");
    assert_eq!(result.now, earliest);
    assert_eq!(result.affected(), 0);
    assert!(result.summaries.iter().all(|s| s.cutoff.is_none()));
    let stored: DateTime<Utc> =
        sqlx::query_scalar("SELECT logical_now FROM sweep_run WHERE run_id = $1")
            .bind(result.run_id)
            .fetch_one(db.pool())
            .await
            .expect("logical_now");
    assert_eq!(stored, earliest);

    // One microsecond earlier is outside PostgreSQL's range: refused, typed.
    let before = earliest - Duration::microseconds(1);
    assert!(matches!(
        cohort.sweep(&scope_a(), before).await,
        Err(Error::TimeOutOfRange { what: "now" })
    ));

    // chrono's latest instant is inside PostgreSQL's range: a valid clock,
    // truncated to microseconds; every finite anchor is old enough.
    let latest = DateTime::<Utc>::MAX_UTC;
    let result = cohort
        .sweep(&scope_a(), latest)
        .await
        .expect("sweep at the latest instant");
    assert_eq!(result.status, RunStatus::Succeeded, "{result:#?}");
    assert_eq!(
        result.now.timestamp_micros(),
        latest.timestamp_micros(),
        "microseconds kept"
    );
    assert_eq!(result.now.timestamp_subsec_nanos() % 1_000, 0, "truncated");
    assert!(!note_exists(&db, old).await);
    assert!(
        note_exists(&db, forever).await,
        "infinity is never old enough"
    );
    assert!(contact_anonymised(&db, old_contact).await);
    let stored: DateTime<Utc> =
        sqlx::query_scalar("SELECT logical_now FROM sweep_run WHERE run_id = $1")
            .bind(result.run_id)
            .fetch_one(db.pool())
            .await
            .expect("logical_now");
    assert_eq!(stored, result.now);
}

// contract: X20, P1, A1
#[tokio::test]
async fn a_nul_byte_in_rule_provenance_is_stored_replaced_and_fails_nothing() {
    let db = setup().await;
    let rules = readme_rules();
    rules.set(
        "session-notes",
        Answer::Rule(
            Rule::new(Period::days(30), Strategy::Purge)
                .with_provenance("policy\0-7", "GDPR\0 5(1)(e)"),
        ),
    );
    let cohort = build(&db, rules, Options::default()).await;
    let old = note(&db, tenant_a(), 40).await;
    let old_contact = contact(&db, tenant_a(), 400).await;
    let result = cohort.sweep(&scope_a(), now()).await.expect("sweep");
    assert_eq!(result.status, RunStatus::Succeeded, "{result:#?}");
    assert!(!note_exists(&db, old).await);
    assert!(contact_anonymised(&db, old_contact).await);
    assert_eq!(run_status(&db, result.run_id).await, "Succeeded");
    let (status, affected, _, _, _, source, reason, error) =
        ledger_summary(&db, result.run_id, "SessionNote").await;
    assert_eq!((status.as_str(), affected, error), ("Succeeded", 1, None));
    assert_eq!(source.as_deref(), Some("policy\u{FFFD}-7"));
    assert_eq!(reason.as_deref(), Some("GDPR\u{FFFD} 5(1)(e)"));
}

// ---------------------------------------------------------------------------
// X21: providers and observers that panic before returning their future.

/// Answers like `inner`, but panics synchronously (before building a future)
/// for `category`.
struct PanicsBeforeItsFuture {
    inner: TestRules,
    category: &'static str,
}

impl RuleProvider for PanicsBeforeItsFuture {
    fn capabilities(&self, category: &str) -> Option<Capabilities> {
        self.inner.capabilities(category)
    }

    fn resolve<'a>(
        &'a self,
        ctx: ResolutionContext<'a>,
    ) -> BoxFuture<'a, Result<Option<Rule>, ProviderError>> {
        if ctx.category == self.category {
            panic!("provider bug, before any future");
        }
        self.inner.resolve(ctx)
    }
}

// contract: X21, X5
#[tokio::test]
async fn a_provider_that_panics_synchronously_fails_only_its_own_entity() {
    let db = setup().await;
    let provider = PanicsBeforeItsFuture {
        inner: readme_rules(),
        category: "session-notes",
    };
    let cohort = build(&db, provider, Options::default()).await;
    let old = note(&db, tenant_a(), 40).await;
    let old_contact = contact(&db, tenant_a(), 400).await;

    let preview = cohort.preview(&scope_a(), now()).await.expect("preview");
    assert_eq!(
        entry(&preview, "SessionNote")
            .failure
            .as_ref()
            .map(|f| f.kind),
        Some(FailureKind::RuleProviderPanic)
    );
    assert_eq!(entry(&preview, "CaseContact").eligible, 1);

    // Spawned, so that a panic escaping the sweep fails this test with a
    // message instead of unwinding through it.
    let sweeping = cohort.clone();
    let result = tokio::spawn(async move { sweeping.sweep(&scope_a(), now()).await })
        .await
        .expect("the provider's panic does not escape the sweep")
        .expect("sweep");
    assert_eq!(result.status, RunStatus::PartiallyFailed, "{result:#?}");
    assert_eq!(result.entity_failures.len(), 1, "{result:#?}");
    assert_eq!(result.entity_failures[0].entity_type, "SessionNote");
    assert_eq!(
        result.entity_failures[0].failure.kind,
        FailureKind::RuleProviderPanic
    );
    assert!(
        note_exists(&db, old).await,
        "the failed entity is untouched"
    );
    assert!(
        contact_anonymised(&db, old_contact).await,
        "the other entity is swept"
    );
    assert_eq!(run_status(&db, result.run_id).await, "PartiallyFailed");
    let (status, ..) = ledger_summary(&db, result.run_id, "SessionNote").await;
    assert_eq!(status, "Failed");
    let (status, affected, ..) = ledger_summary(&db, result.run_id, "CaseContact").await;
    assert_eq!((status.as_str(), affected), ("Succeeded", 1));
}

/// Panics in `on_event` itself, before returning a future; counts its calls.
struct ObserverPanicsBeforeItsFuture(Arc<AtomicUsize>);

impl AuditObserver for ObserverPanicsBeforeItsFuture {
    fn on_event<'a>(&'a self, _event: &'a AuditEvent) -> BoxFuture<'a, Result<(), ProviderError>> {
        self.0.fetch_add(1, Ordering::SeqCst);
        panic!("observer bug, before any future");
    }
}

/// Records the kind of every event it hears.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<&'static str>>>);

impl AuditObserver for Recorder {
    fn on_event<'a>(&'a self, event: &'a AuditEvent) -> BoxFuture<'a, Result<(), ProviderError>> {
        let kind = match event {
            AuditEvent::Started { .. } => "Started",
            AuditEvent::EntityProgress { .. } => "EntityProgress",
            AuditEvent::RowDetail { .. } => "RowDetail",
            AuditEvent::EntitySummary { .. } => "EntitySummary",
            AuditEvent::Settled { .. } => "Settled",
            _ => "other",
        };
        self.0.lock().expect("events").push(kind);
        Box::pin(async { Ok(()) })
    }
}

// contract: X21, A7
#[tokio::test]
async fn an_observer_that_panics_synchronously_changes_nothing_and_the_run_settles() {
    let db = setup().await;
    let calls = Arc::new(AtomicUsize::new(0));
    let healthy = Recorder::default();
    let cohort = Cohort::builder(db.pool().clone())
        .options(Options {
            batch_size: 2,
            ..Options::default()
        })
        .rules(readme_rules())
        .entity::<SessionNote>()
        .entity::<CaseContact>()
        .observer(ObserverPanicsBeforeItsFuture(calls.clone()))
        .observer(healthy.clone())
        .build()
        .await
        .expect("model");
    for _ in 0..3 {
        note(&db, tenant_a(), 40).await;
    }
    let old_contact = contact(&db, tenant_a(), 400).await;

    let sweeping = cohort.clone();
    let result = tokio::spawn(async move { sweeping.sweep(&scope_a(), now()).await })
        .await
        .expect("the observer's panic does not escape the sweep")
        .expect("sweep");
    assert_eq!(result.status, RunStatus::Succeeded, "{result:#?}");
    assert_eq!(result.affected(), 4);
    assert_eq!(count(&db, "SELECT count(*) FROM session_notes").await, 0);
    assert!(contact_anonymised(&db, old_contact).await);
    assert_eq!(run_status(&db, result.run_id).await, "Succeeded");
    assert!(calls.load(Ordering::SeqCst) >= 1, "the observer was called");
    // The other observer heard the whole run, in order.
    let heard = healthy.0.lock().expect("events").clone();
    assert_eq!(heard.first(), Some(&"Started"), "{heard:?}");
    assert_eq!(heard.last(), Some(&"Settled"), "{heard:?}");
    assert_eq!(
        heard.iter().filter(|k| **k == "EntitySummary").count(),
        2,
        "{heard:?}"
    );
}

// ---------------------------------------------------------------------------
// A11: abandoned runs and lost connections.

// contract: A11, X4
#[tokio::test]
async fn settling_an_abandoned_run_also_settles_its_running_summaries() {
    let db = setup().await;
    let cohort = build(
        &db,
        readme_rules(),
        Options {
            settle_timeout: StdDuration::from_secs(1),
            ..Options::default()
        },
    )
    .await;
    let run_id = Uuid::new_v4();
    sqlx::query(
        "INSERT INTO sweep_run (run_id, run_kind, trigger, dry_run, tenant_id, logical_now, status, started_at) \
         VALUES ($1, 'Sweep', 'Manual', false, $2, now(), 'Started', now() - interval '1 hour')",
    )
    .bind(run_id)
    .bind(tenant_a())
    .execute(db.pool())
    .await
    .expect("run");
    // One entity finished before the owner died, one was running.
    sqlx::query(
        "INSERT INTO sweep_run_entity_summary (run_id, retained_entity_id, entity_type, category, tenant_id, \
            strategy, status, affected_count, held_count, skipped_count, null_anchor_count, applied_period, \
            cutoff, updated_at) \
         VALUES ($1, $2, 'SessionNote', 'session-notes', $4, 'Purge', 'Running', 3, 0, 0, 0, 'P30D', \
                 now() - interval '30 days', now() - interval '1 hour'), \
                ($1, $3, 'CaseContact', 'case-contacts', $4, 'Anonymise', 'Succeeded', 2, 1, 0, 0, 'P365D', \
                 now() - interval '365 days', now() - interval '1 hour')",
    )
    .bind(run_id)
    .bind(uuid(NOTE_ID))
    .bind(uuid(CONTACT_ID))
    .bind(tenant_a())
    .execute(db.pool())
    .await
    .expect("summaries");

    assert_eq!(cohort.settle_abandoned_runs().await.expect("settle"), 1);

    let run = sqlx::query("SELECT status, settled_at, error FROM sweep_run WHERE run_id = $1")
        .bind(run_id)
        .fetch_one(db.pool())
        .await
        .expect("run");
    assert_eq!(run.get::<String, _>("status"), "Failed");
    assert!(run.get::<Option<DateTime<Utc>>, _>("settled_at").is_some());
    let run_error: serde_json::Value =
        serde_json::from_str(&run.get::<String, _>("error")).expect("JSON error");
    assert_eq!(keys(&run_error), ["diagnostic_id", "kind", "sqlstate"]);
    assert_eq!(run_error["kind"], "Abandoned");

    let (status, affected, _, _, period, _, _, error) =
        ledger_summary(&db, run_id, "SessionNote").await;
    assert_eq!(
        (status.as_str(), affected, period.as_deref()),
        ("Failed", 3, Some("P30D")),
        "the running summary is settled, keeping what its batches committed"
    );
    let error: serde_json::Value =
        serde_json::from_str(&error.expect("summary error")).expect("JSON error");
    assert_eq!(keys(&error), ["diagnostic_id", "kind", "sqlstate"]);
    assert_eq!(error["kind"], "Abandoned");
    assert_eq!(error["sqlstate"], serde_json::Value::Null);
    let (status, affected, held, _, _, _, _, error) =
        ledger_summary(&db, run_id, "CaseContact").await;
    assert_eq!(
        (status.as_str(), affected, held, error),
        ("Succeeded", 2, 1, None),
        "a finished summary is left as it was"
    );
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM sweep_run_entity_summary WHERE status = 'Running'"
        )
        .await,
        0
    );
}

/// On the first batch's progress, terminates the backend that holds the run's
/// lock (the run's own connection), from a connection of its own, and waits
/// for it to exit. Records what it did.
struct TerminateTheRun {
    pool: sqlx::PgPool,
    done: AtomicBool,
    terminated: Arc<Mutex<Option<(Uuid, i64)>>>,
}

impl AuditObserver for TerminateTheRun {
    fn on_event<'a>(&'a self, event: &'a AuditEvent) -> BoxFuture<'a, Result<(), ProviderError>> {
        Box::pin(async move {
            let AuditEvent::EntityProgress { run_id, .. } = event else {
                return Ok(());
            };
            if self.done.swap(true, Ordering::SeqCst) {
                return Ok(());
            }
            // A run lock is a single-bigint advisory lock: pg_locks shows its
            // high 32 bits as classid, the low ones as objid, objsubid 1.
            let terminated: i64 = sqlx::query_scalar(
                "WITH k AS (SELECT pg_catalog.hashtextextended('cohort-run|' || $1::text, 0) AS k) \
                 SELECT count(*) FILTER (WHERE pg_catalog.pg_terminate_backend(l.pid, 10000)) \
                 FROM pg_catalog.pg_locks l, k \
                 WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 \
                   AND l.database = (SELECT oid FROM pg_catalog.pg_database \
                                     WHERE datname = pg_catalog.current_database()) \
                   AND l.classid = ((k.k >> 32) & 4294967295)::int8::oid \
                   AND l.objid = (k.k & 4294967295)::int8::oid",
            )
            .bind(run_id)
            .fetch_one(&self.pool)
            .await?;
            *self.terminated.lock().expect("terminated") = Some((*run_id, terminated));
            Ok(())
        })
    }
}

// contract: A11, X4
#[tokio::test]
async fn a_run_whose_connection_is_lost_returns_an_error_naming_the_run() {
    let db = setup().await;
    let terminated = Arc::new(Mutex::new(None));
    let cohort = Cohort::builder(db.pool().clone())
        .options(Options {
            batch_size: 2,
            settle_timeout: StdDuration::from_secs(1),
            observer_timeout: StdDuration::from_secs(60),
            ..Options::default()
        })
        .rules(readme_rules())
        .entity::<SessionNote>()
        .observer(TerminateTheRun {
            pool: db.pool().clone(),
            done: AtomicBool::new(false),
            terminated: terminated.clone(),
        })
        .build()
        .await
        .expect("model");
    for _ in 0..6 {
        note(&db, tenant_a(), 40).await;
    }

    let outcome = cohort.sweep(&scope_a(), now()).await;
    let seen = *terminated.lock().expect("terminated");
    let (killed_run, backends) = seen.expect("the observer saw the first batch");
    assert_eq!(backends, 1, "exactly the run's backend was terminated");
    let run_id = match outcome {
        Err(Error::RunInterrupted { run_id, .. }) => run_id,
        other => panic!("expected RunInterrupted, got {other:?}"),
    };
    assert_eq!(run_id, killed_run, "the error names the run");
    assert_eq!(run_status(&db, run_id).await, "Started");
    assert_eq!(
        count(&db, "SELECT count(*) FROM session_notes").await,
        4,
        "the first batch stays committed, nothing after it ran"
    );

    // The run is then settled like any abandoned one, its summary too.
    sqlx::query("UPDATE sweep_run SET started_at = now() - interval '1 hour' WHERE run_id = $1")
        .bind(run_id)
        .execute(db.pool())
        .await
        .expect("age the run");
    assert_eq!(cohort.settle_abandoned_runs().await.expect("settle"), 1);
    assert_eq!(run_status(&db, run_id).await, "Failed");
    let (status, affected, ..) = ledger_summary(&db, run_id, "SessionNote").await;
    assert_eq!((status.as_str(), affected), ("Failed", 2));
}

// ---------------------------------------------------------------------------
// H15: times outside PostgreSQL's range.

// contract: H15
#[tokio::test]
async fn times_outside_postgres_range_are_refused_typed_and_write_nothing() {
    let db = setup().await;
    let rules = readme_rules().with(
        "user-data",
        Capabilities::only(Strategy::Purge),
        Rule::new(Period::days(30), Strategy::Purge),
    );
    let cohort = Cohort::builder(db.pool().clone())
        .rules(rules)
        .entity::<SessionNote>()
        .entity::<CaseContact>()
        .entity::<UserRecord>()
        .build()
        .await
        .expect("model");
    let id = note(&db, tenant_a(), 40).await;
    let subject = Uuid::new_v4();
    sqlx::query(
        "INSERT INTO user_records (id, tenant_id, created_at, user_id) VALUES (1, $1, now() - interval '400 days', $2)",
    )
    .bind(tenant_a())
    .bind(subject)
    .execute(db.pool())
    .await
    .expect("record");
    let mut conn = db.connect().await;
    let held = cohort
        .holds()
        .create(
            &mut conn,
            HoldRequest::new(
                uuid(NOTE_ID),
                id.to_string(),
                Some(tenant_a()),
                "litigation",
                Utc::now(),
            ),
        )
        .await
        .expect("hold");
    let out = DateTime::<Utc>::MIN_UTC;
    let just_out = pg_earliest() - Duration::microseconds(1);

    for created_at in [out, just_out] {
        let refused = cohort
            .holds()
            .create(
                &mut conn,
                HoldRequest::new(
                    uuid(NOTE_ID),
                    id.to_string(),
                    Some(tenant_a()),
                    "litigation",
                    created_at,
                )
                .expires_at(created_at + Duration::days(1)),
            )
            .await;
        assert!(
            matches!(refused, Err(Error::TimeOutOfRange { what: "created_at" })),
            "{created_at}: {refused:?}"
        );
    }
    // An expiry out of range needs a creation time before it, which is out of
    // range itself (chrono's latest instant is inside PostgreSQL's range):
    // the request is refused either way.
    let refused = cohort
        .holds()
        .create(
            &mut conn,
            HoldRequest::new(
                uuid(NOTE_ID),
                id.to_string(),
                Some(tenant_a()),
                "litigation",
                out,
            )
            .expires_at(just_out),
        )
        .await;
    assert!(
        matches!(refused, Err(Error::TimeOutOfRange { .. })),
        "{refused:?}"
    );
    let removed = cohort.holds().remove(&mut conn, held.hold_id, out).await;
    assert!(
        matches!(removed, Err(Error::TimeOutOfRange { what: "removed_at" })),
        "{removed:?}"
    );
    let listed = cohort
        .holds()
        .list_active(&mut conn, out, &HoldFilter::all())
        .await;
    assert!(
        matches!(listed, Err(Error::TimeOutOfRange { .. })),
        "{listed:?}"
    );
    let asked = cohort
        .holds()
        .is_held(
            &mut conn,
            &Target::new(uuid(NOTE_ID), id.to_string(), Some(tenant_a())),
            out,
        )
        .await;
    assert!(
        matches!(asked, Err(Error::TimeOutOfRange { .. })),
        "{asked:?}"
    );
    for t in [out, just_out] {
        let swept = cohort.sweep(&scope_a(), t).await;
        assert!(
            matches!(swept, Err(Error::TimeOutOfRange { what: "now" })),
            "{t}: {swept:?}"
        );
        let dry = cohort
            .sweep_with(&scope_a(), t, SweepOptions::default().dry_run())
            .await;
        assert!(
            matches!(dry, Err(Error::TimeOutOfRange { what: "now" })),
            "{t}: {dry:?}"
        );
        let previewed = cohort.preview(&scope_a(), t).await;
        assert!(
            matches!(previewed, Err(Error::TimeOutOfRange { what: "now" })),
            "{t}: {previewed:?}"
        );
        let erased = cohort
            .erase(&scope_a(), t, ErasureRequest::new(subject))
            .await;
        assert!(
            matches!(erased, Err(Error::TimeOutOfRange { what: "now" })),
            "{t}: {erased:?}"
        );
    }

    // Nothing was written: no run, one hold (not removed), every row there.
    assert_eq!(count(&db, "SELECT count(*) FROM sweep_run").await, 0);
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM retention_holds WHERE removed_at IS NULL"
        )
        .await,
        1
    );
    assert_eq!(count(&db, "SELECT count(*) FROM retention_holds").await, 1);
    assert!(note_exists(&db, id).await);
    assert_eq!(count(&db, "SELECT count(*) FROM user_records").await, 1);
    // The connection is still usable.
    assert!(
        cohort
            .holds()
            .is_held(
                &mut conn,
                &Target::new(uuid(NOTE_ID), id.to_string(), Some(tenant_a())),
                Utc::now()
            )
            .await
            .expect("is_held")
    );
}

// ---------------------------------------------------------------------------
// X12, X20: infinite anchors.

// contract: X12, X20, S7
#[tokio::test]
async fn infinite_anchors_sweep_without_panicking_at_any_batch_boundary() {
    for batch_size in [1, 2, 3] {
        let db = setup().await;
        let cohort = build(
            &db,
            readme_rules(),
            Options {
                batch_size,
                ..Options::default()
            },
        )
        .await;
        // Sorted by anchor: two -infinity rows (so that one ends a batch of
        // two), two old rows, one young, one infinity.
        let minus_1 = note_at(&db, tenant_a(), "-infinity").await;
        let minus_2 = note_at(&db, tenant_a(), "-infinity").await;
        let old_1 = note(&db, tenant_a(), 40).await;
        let old_2 = note(&db, tenant_a(), 50).await;
        let young = note(&db, tenant_a(), 10).await;
        let forever = note_at(&db, tenant_a(), "infinity").await;
        let other_tenant = note_at(&db, tenant_b(), "-infinity").await;

        let preview = cohort.preview(&scope_a(), now()).await.expect("preview");
        let notes = entry(&preview, "SessionNote");
        assert_eq!(
            (
                notes.eligible,
                notes.held,
                notes.null_anchor,
                notes.failure.clone()
            ),
            (4, 0, 0, None),
            "batch {batch_size}: -infinity is old enough, infinity never"
        );

        let sweeping = cohort.clone();
        let result = tokio::spawn(async move { sweeping.sweep(&scope_a(), now()).await })
            .await
            .unwrap_or_else(|e| panic!("batch {batch_size}: the sweep panicked: {e}"))
            .expect("sweep");
        assert_eq!(
            result.status,
            RunStatus::Succeeded,
            "batch {batch_size}: {result:#?}"
        );
        let notes = summary(&result, "SessionNote");
        assert_eq!(
            (notes.affected, notes.skipped, notes.held),
            (4, 0, 0),
            "batch {batch_size}"
        );
        for gone in [minus_1, minus_2, old_1, old_2] {
            assert!(!note_exists(&db, gone).await, "batch {batch_size}");
        }
        for kept in [young, forever, other_tenant] {
            assert!(note_exists(&db, kept).await, "batch {batch_size}");
        }
        assert_eq!(run_status(&db, result.run_id).await, "Succeeded");
        // A second run finds nothing and ends.
        let again = cohort.sweep(&scope_a(), now()).await.expect("again");
        assert_eq!((again.status, again.affected()), (RunStatus::Succeeded, 0));
    }
}

// ---------------------------------------------------------------------------
// Sub-microsecond `now`.

// contract: X12, X8
#[tokio::test]
async fn a_now_with_nanoseconds_is_truncated_to_microseconds_everywhere() {
    let db = setup().await;
    let cohort = build(&db, readme_rules(), Options::default()).await;
    // 1,999 ns past the second: truncated it is 1 µs, rounded it would be 2.
    // Given at UTC+02:00, reported in UTC.
    let plus_two = FixedOffset::east_opt(2 * 3600).expect("offset");
    let given = (now() + Duration::nanoseconds(1_999)).with_timezone(&plus_two);
    let truncated = now() + Duration::microseconds(1);
    let cutoff = truncated - Duration::days(30);
    let at_cutoff = note_when(&db, tenant_a(), cutoff).await;
    let older = note_when(&db, tenant_a(), cutoff - Duration::microseconds(1)).await;

    let preview = cohort.preview(&scope_a(), given).await.expect("preview");
    assert_eq!(preview.now, truncated);
    let notes = entry(&preview, "SessionNote");
    assert_eq!((notes.cutoff, notes.eligible), (Some(cutoff), 1));

    let result = cohort.sweep(&scope_a(), given).await.expect("sweep");
    assert_eq!(result.status, RunStatus::Succeeded);
    assert_eq!(result.now, truncated);
    assert_eq!(summary(&result, "SessionNote").cutoff, Some(cutoff));
    let (logical_now, stored_cutoff): (DateTime<Utc>, DateTime<Utc>) = sqlx::query_as(
        "SELECT r.logical_now, s.cutoff FROM sweep_run r \
         JOIN sweep_run_entity_summary s ON s.run_id = r.run_id AND s.entity_type = 'SessionNote' \
         WHERE r.run_id = $1",
    )
    .bind(result.run_id)
    .fetch_one(db.pool())
    .await
    .expect("ledger");
    assert_eq!(logical_now, result.now, "the result and the ledger agree");
    assert_eq!(stored_cutoff, cutoff);
    assert!(
        note_exists(&db, at_cutoff).await,
        "a row exactly at the cutoff is kept (strict <)"
    );
    assert!(!note_exists(&db, older).await, "one microsecond older goes");
    assert_eq!(summary(&result, "SessionNote").affected, 1);
}

// ---------------------------------------------------------------------------
// Test gaps.

// contract: X7, X17
#[tokio::test]
async fn held_is_measured_directly_when_a_locked_row_is_left_behind() {
    let db = setup().await;
    let cohort = build(
        &db,
        readme_rules(),
        Options {
            lock_wait: StdDuration::from_millis(50),
            ..Options::default()
        },
    )
    .await;
    let held = note(&db, tenant_a(), 40).await;
    hold(&db, NOTE_ID, held, tenant_a()).await;
    let locked = note(&db, tenant_a(), 41).await;
    let mut free = Vec::new();
    for age in [42, 43, 44] {
        free.push(note(&db, tenant_a(), age).await);
    }
    let young = note(&db, tenant_a(), 10).await;

    let mut other = db.connect().await;
    let mut tx = other.begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM session_notes WHERE id = $1 FOR UPDATE")
        .bind(locked)
        .execute(&mut *tx)
        .await
        .expect("lock");
    let result = tokio::time::timeout(StdDuration::from_secs(60), cohort.sweep(&scope_a(), now()))
        .await
        .expect("the sweep does not wait for the locked row")
        .expect("sweep");
    tx.rollback().await.expect("rollback");

    assert_eq!(result.status, RunStatus::Succeeded, "{result:#?}");
    let notes = summary(&result, "SessionNote");
    assert_eq!(
        (notes.affected, notes.held, notes.skipped),
        (3, 1, 1),
        "held counts only the held row, skipped only the locked one"
    );
    let (_, affected, held_count, skipped, ..) =
        ledger_summary(&db, result.run_id, "SessionNote").await;
    assert_eq!((affected, held_count, skipped), (3, 1, 1));
    for gone in free {
        assert!(!note_exists(&db, gone).await);
    }
    for kept in [held, locked, young] {
        assert!(note_exists(&db, kept).await);
    }
}

// contract: P6
#[tokio::test]
async fn a_legal_minimum_shorter_than_the_period_does_not_shorten_it() {
    let db = setup().await;
    let rules = readme_rules();
    rules.set(
        "session-notes",
        Answer::Rule(
            Rule::new(Period::days(90), Strategy::Purge).with_legal_minimum(Period::days(30)),
        ),
    );
    let cohort = build(&db, rules, Options::default()).await;
    let sixty = note(&db, tenant_a(), 60).await;
    let hundred = note(&db, tenant_a(), 100).await;
    let preview = cohort.preview(&scope_a(), now()).await.expect("preview");
    let notes = entry(&preview, "SessionNote");
    assert_eq!(
        (notes.cutoff, notes.eligible),
        (Some(now() - Duration::days(90)), 1)
    );
    let result = cohort.sweep(&scope_a(), now()).await.expect("sweep");
    let notes = summary(&result, "SessionNote");
    assert_eq!(notes.applied_period, Some(Period::days(90)));
    assert_eq!(notes.cutoff, Some(now() - Duration::days(90)));
    assert_eq!(notes.affected, 1);
    assert!(note_exists(&db, sixty).await, "60 days: kept by the period");
    assert!(
        !note_exists(&db, hundred).await,
        "100 days: past the period"
    );
    let (_, _, _, _, period, ..) = ledger_summary(&db, result.run_id, "SessionNote").await;
    assert_eq!(period.as_deref(), Some("P90D"));
}

// contract: A9, X5
#[tokio::test]
async fn a_database_failure_is_stored_as_a_sanitized_envelope_and_logged_in_full() {
    let db = setup().await;
    db.exec(
        "CREATE FUNCTION public.refuse_delete() RETURNS trigger LANGUAGE plpgsql AS \
         $$ BEGIN RAISE EXCEPTION 'secret-value-42'; END $$; \
         CREATE TRIGGER refuse_delete BEFORE DELETE ON public.session_notes \
         FOR EACH ROW EXECUTE FUNCTION public.refuse_delete();",
    )
    .await;
    let cohort = build(&db, readme_rules(), Options::default()).await;
    let old = note(&db, tenant_a(), 40).await;
    let old_contact = contact(&db, tenant_a(), 400).await;
    let logs = LogCapture::start();
    let result = cohort.sweep(&scope_a(), now()).await.expect("sweep");
    assert_eq!(result.status, RunStatus::PartiallyFailed, "{result:#?}");
    assert!(note_exists(&db, old).await);
    assert!(contact_anonymised(&db, old_contact).await);
    assert_eq!(result.entity_failures.len(), 1);
    let failure = &result.entity_failures[0].failure;
    assert_eq!(failure.kind, FailureKind::Database);
    assert_eq!(failure.sqlstate.as_deref(), Some("P0001"));
    let diagnostic_id = failure.diagnostic_id.to_string();

    let run_error: String = sqlx::query_scalar("SELECT error FROM sweep_run WHERE run_id = $1")
        .bind(result.run_id)
        .fetch_one(db.pool())
        .await
        .expect("run error");
    let (status, _, _, _, _, _, _, summary_error) =
        ledger_summary(&db, result.run_id, "SessionNote").await;
    assert_eq!(status, "Failed");
    let summary_error = summary_error.expect("summary error");
    for stored in [&run_error, &summary_error] {
        assert!(!stored.contains("secret"), "{stored}");
        assert!(!stored.contains("RAISE"), "{stored}");
    }
    let envelope: serde_json::Value = serde_json::from_str(&summary_error).expect("JSON");
    assert_eq!(keys(&envelope), ["diagnostic_id", "kind", "sqlstate"]);
    assert_eq!(envelope["kind"], "Database");
    assert_eq!(envelope["sqlstate"], "P0001");
    assert_eq!(envelope["diagnostic_id"], diagnostic_id.as_str());
    let run_error: serde_json::Value = serde_json::from_str(&run_error).expect("JSON");
    let entries = run_error.as_array().expect("a list of failed entities");
    assert_eq!(entries.len(), 1);
    assert_eq!(keys(&entries[0]), ["entity_id", "failure"]);
    assert_eq!(entries[0]["entity_id"], NOTE_ID);
    assert_eq!(entries[0]["failure"], envelope);

    // The log carries the full error under the same diagnostic id.
    let logged = logs.text();
    let line = logged
        .lines()
        .find(|l| l.contains(&diagnostic_id))
        .unwrap_or_else(|| panic!("no log line with {diagnostic_id}: {logged}"));
    assert!(line.contains("secret-value-42"), "{line}");
}

#[allow(dead_code, reason = "mirrors a table; only its descriptor is read")]
#[derive(cohort::Retained)]
#[cohort(
    exempt = "statutory accounting records, kept outside Cohort",
    table = "invoices"
)]
struct Invoice {
    id: Uuid,
    tenant_id: Uuid,
}

// contract: M1
#[tokio::test]
async fn exempt_types_are_reported_with_their_reason_by_preview_and_sweep() {
    let db = setup().await;
    db.exec("CREATE TABLE public.invoices (id uuid PRIMARY KEY, tenant_id uuid NOT NULL);")
        .await;
    let cohort = Cohort::builder(db.pool().clone())
        .rules(readme_rules())
        .entity::<SessionNote>()
        .entity::<Invoice>()
        .build()
        .await
        .expect("model");
    let reported = |exempt: &[cohort::ExemptType]| -> Vec<(&'static str, &'static str)> {
        exempt.iter().map(|e| (e.entity_type, e.reason)).collect()
    };
    let expected = vec![(
        "Invoice",
        "statutory accounting records, kept outside Cohort",
    )];
    let preview = cohort.preview(&scope_a(), now()).await.expect("preview");
    assert_eq!(reported(&preview.exempt), expected);
    assert!(preview.entries.iter().all(|e| e.entity_type != "Invoice"));
    let result = cohort.sweep(&scope_a(), now()).await.expect("sweep");
    assert_eq!(reported(&result.exempt), expected);
    assert!(result.summaries.iter().all(|s| s.entity_type != "Invoice"));
    let dry = cohort
        .sweep_with(&scope_a(), now(), SweepOptions::default().dry_run())
        .await
        .expect("dry run");
    assert_eq!(reported(&dry.exempt), expected);
}

// contract: P1, A1
#[tokio::test]
async fn rule_provenance_is_recorded_in_the_result_and_the_ledger() {
    let db = setup().await;
    let rules = readme_rules();
    rules.set(
        "session-notes",
        Answer::Rule(
            Rule::new(Period::days(30), Strategy::Purge)
                .with_provenance("policy-7", "GDPR 5(1)(e)"),
        ),
    );
    let cohort = build(&db, rules, Options::default()).await;
    note(&db, tenant_a(), 40).await;
    for dry_run in [true, false] {
        let options = if dry_run {
            SweepOptions::default().dry_run()
        } else {
            SweepOptions::default()
        };
        let result = cohort
            .sweep_with(&scope_a(), now(), options)
            .await
            .expect("sweep");
        let notes = summary(&result, "SessionNote");
        assert_eq!(notes.affected, 1, "dry run {dry_run}");
        assert_eq!(notes.rule_source.as_deref(), Some("policy-7"));
        assert_eq!(notes.rule_reason.as_deref(), Some("GDPR 5(1)(e)"));
        let contacts = summary(&result, "CaseContact");
        assert_eq!(
            (&contacts.rule_source, &contacts.rule_reason),
            (&None, &None)
        );
        let (_, _, _, _, _, source, reason, _) =
            ledger_summary(&db, result.run_id, "SessionNote").await;
        assert_eq!(
            (source.as_deref(), reason.as_deref()),
            (Some("policy-7"), Some("GDPR 5(1)(e)")),
            "dry run {dry_run}"
        );
        let (_, _, _, _, _, source, reason, _) =
            ledger_summary(&db, result.run_id, "CaseContact").await;
        assert_eq!((source, reason), (None, None));
    }
}

/// Soft-deleted through the global conventions: `gone` and `gone_at`; the
/// built-in names `is_deleted` and `deleted_at` are ordinary fields here.
#[allow(dead_code, reason = "mirrors a table; only its descriptor is read")]
#[derive(cohort::Retained)]
#[cohort(
    category = "parcels",
    anchor = "sent_at",
    id = "7a0d5c3e-1f2b-4c6d-8e9f-0a1b2c3d4e51",
    table = "parcels"
)]
struct Parcel {
    id: i64,
    tenant_id: Uuid,
    sent_at: DateTime<Utc>,
    gone: bool,
    gone_at: Option<DateTime<Utc>>,
    is_deleted: bool,
    deleted_at: Option<DateTime<Utc>>,
}

/// Anonymised through the global convention `scrubbed_at`; `anonymised_at`
/// is an ordinary field here.
#[allow(dead_code, reason = "mirrors a table; only its descriptor is read")]
#[derive(cohort::Retained)]
#[cohort(
    category = "calls",
    anchor = "called_at",
    id = "7a0d5c3e-1f2b-4c6d-8e9f-0a1b2c3d4e52",
    table = "calls"
)]
struct Call {
    id: i64,
    tenant_id: Uuid,
    called_at: DateTime<Utc>,
    scrubbed_at: Option<DateTime<Utc>>,
    anonymised_at: Option<DateTime<Utc>>,
    #[cohort(anonymise = "null")]
    phone: Option<String>,
}

// contract: M3, S2, S3
#[tokio::test]
async fn global_conventions_name_the_soft_delete_and_anonymise_columns() {
    let db = setup().await;
    db.exec(
        "CREATE TABLE public.parcels (id bigint PRIMARY KEY, tenant_id uuid NOT NULL, sent_at timestamptz NOT NULL, \
            gone boolean NOT NULL DEFAULT false, gone_at timestamptz, \
            is_deleted boolean NOT NULL DEFAULT false, deleted_at timestamptz); \
         CREATE TABLE public.calls (id bigint PRIMARY KEY, tenant_id uuid NOT NULL, called_at timestamptz NOT NULL, \
            scrubbed_at timestamptz, anonymised_at timestamptz, phone text);",
    )
    .await;
    let t = tenant_a();
    let old = now() - Duration::days(400);
    let young = now() - Duration::days(1);
    for (id, sent_at, gone) in [(1, old, false), (2, old, true), (3, young, false)] {
        sqlx::query("INSERT INTO parcels (id, tenant_id, sent_at, gone) VALUES ($1, $2, $3, $4)")
            .bind(id)
            .bind(t)
            .bind(sent_at)
            .bind(gone)
            .execute(db.pool())
            .await
            .expect("parcel");
    }
    // Row 2 carries the built-in anonymised-at, which is not this type's marker.
    for (id, called_at, builtin_stamp) in [(1, old, false), (2, old, true), (3, young, false)] {
        sqlx::query(
            "INSERT INTO calls (id, tenant_id, called_at, anonymised_at, phone) \
             VALUES ($1, $2, $3, CASE WHEN $4 THEN now() END, '+44 1234')",
        )
        .bind(id)
        .bind(t)
        .bind(called_at)
        .bind(builtin_stamp)
        .execute(db.pool())
        .await
        .expect("call");
    }
    let rules = TestRules::new()
        .with(
            "parcels",
            Capabilities::only(Strategy::SoftDelete),
            Rule::new(Period::days(30), Strategy::SoftDelete),
        )
        .with(
            "calls",
            Capabilities::only(Strategy::Anonymise),
            Rule::new(Period::days(30), Strategy::Anonymise),
        );
    let cohort = Cohort::builder(db.pool().clone())
        .options(Options {
            conventions: Conventions {
                soft_delete: "gone".into(),
                deleted_at: "gone_at".into(),
                anonymised_at: "scrubbed_at".into(),
                ..Conventions::default()
            },
            ..Options::default()
        })
        .rules(rules)
        .entity::<Parcel>()
        .entity::<Call>()
        .build()
        .await
        .expect("model through the global conventions");

    let result = cohort.sweep(&scope_a(), now()).await.expect("sweep");
    assert_eq!(result.status, RunStatus::Succeeded, "{result:#?}");
    assert_eq!(
        summary(&result, "Parcel").affected,
        1,
        "an already gone parcel is not a candidate"
    );
    assert_eq!(
        summary(&result, "Call").affected,
        2,
        "the built-in anonymised_at does not mark a call done"
    );
    let parcels: Vec<(i64, bool, bool, bool, bool)> = sqlx::query_as(
        "SELECT id, gone, gone_at IS NOT NULL, is_deleted, deleted_at IS NOT NULL FROM parcels ORDER BY id",
    )
    .fetch_all(db.pool())
    .await
    .expect("parcels");
    assert_eq!(
        parcels,
        vec![
            (1, true, true, false, false),
            (2, true, false, false, false),
            (3, false, false, false, false)
        ]
    );
    let calls: Vec<(i64, bool, Option<String>)> =
        sqlx::query_as("SELECT id, scrubbed_at IS NOT NULL, phone FROM calls ORDER BY id")
            .fetch_all(db.pool())
            .await
            .expect("calls");
    assert_eq!(
        calls,
        vec![
            (1, true, None),
            (2, true, None),
            (3, false, Some("+44 1234".into()))
        ]
    );
    let again = cohort.sweep(&scope_a(), now()).await.expect("again");
    assert_eq!(again.affected(), 0, "a second sweep changes nothing");
}

// contract: X6
#[tokio::test]
async fn batches_that_change_nothing_end_the_entity_loop() {
    let db = setup().await;
    // Triggers that cancel every delete of a note and every update of a
    // contact: each batch finds rows and changes none.
    db.exec(
        "CREATE FUNCTION public.cancel() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$; \
         CREATE TRIGGER cancel_delete BEFORE DELETE ON public.session_notes \
         FOR EACH ROW EXECUTE FUNCTION public.cancel(); \
         CREATE TRIGGER cancel_update BEFORE UPDATE ON public.case_contacts \
         FOR EACH ROW EXECUTE FUNCTION public.cancel();",
    )
    .await;
    let cohort = build(
        &db,
        readme_rules(),
        Options {
            batch_size: 2,
            ..Options::default()
        },
    )
    .await;
    for _ in 0..7 {
        note(&db, tenant_a(), 40).await;
    }
    for _ in 0..5 {
        contact(&db, tenant_a(), 400).await;
    }
    let result = tokio::time::timeout(StdDuration::from_secs(120), cohort.sweep(&scope_a(), now()))
        .await
        .expect("the sweep ends")
        .expect("sweep");
    assert_eq!(result.status, RunStatus::Succeeded, "{result:#?}");
    let notes = summary(&result, "SessionNote");
    assert_eq!((notes.affected, notes.skipped), (0, 7));
    // Custom anonymisers take the locked path.
    let contacts = summary(&result, "CaseContact");
    assert_eq!((contacts.affected, contacts.skipped), (0, 5));
    assert_eq!(count(&db, "SELECT count(*) FROM session_notes").await, 7);
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM case_contacts WHERE anonymised_at IS NULL"
        )
        .await,
        5
    );
    assert_eq!(run_status(&db, result.run_id).await, "Succeeded");
}
