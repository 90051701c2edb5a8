//! Legal holds and host deletions that respect them, against a real PostgreSQL.
//!
//! The erasure half of H1 (erasure skips held rows) belongs with the erasure
//! engine's tests; everything else of H and DL is here.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::support;
use crate::support::fixtures::{
    db_with_tables, entity_summary, note_exists, now_s, scope_a, tenant_a, tenant_b,
};
use crate::support::models::*;
use crate::support::{BuildEngine, TestDb, TestRules, count};
use chrono::{DateTime, Duration, Utc};
use cohort::holds::{
    DeletionError, DeletionOutcome, Hold, HoldError, HoldFilter, HoldRequest, MAX_RECORD_ID_BYTES,
    RecordIdProblem, Target,
};
use cohort::{
    Capabilities, Cohort, Error, Options, Period, Rule, RunResult, RunStatus, Scope, Strategy,
};
use futures_util::future::BoxFuture;
use sqlx::PgConnection;
use uuid::Uuid;

// ---------------------------------------------------------------------------
// Models with keys of other types (H8), and an exempt type (H7).

const CITEXT_ID: &str = "c1c1c1c1-0000-4000-8000-000000000001";
const NUMERIC_ID: &str = "c1c1c1c1-0000-4000-8000-000000000002";
const TEXT_ID: &str = "c1c1c1c1-0000-4000-8000-000000000003";
const ORDER_ID: &str = "c1c1c1c1-0000-4000-8000-000000000004";
const SETTING_ID: &str = "c1c1c1c1-0000-4000-8000-0000000000ff";
const TICKET_ID: &str = "5d1c1b8e-2f7a-4b7e-9d8a-0c2a44f0e001";
const LOG_ID: &str = "9e7a3c52-6a1d-4f0c-8b1e-7d2f3a4b5c6d";

/// Row types whose fields only the derive reads.
#[allow(dead_code)]
mod keyed {
    use chrono::{DateTime, Utc};
    use uuid::Uuid;

    #[derive(cohort::Retained)]
    #[cohort(
        category = "keyed",
        anchor = "created_at",
        id = "c1c1c1c1-0000-4000-8000-000000000001",
        table = "citext_items"
    )]
    pub(crate) struct CitextItem {
        id: String,
        tenant_id: Uuid,
        created_at: DateTime<Utc>,
    }

    #[derive(cohort::Retained)]
    #[cohort(
        category = "keyed",
        anchor = "created_at",
        id = "c1c1c1c1-0000-4000-8000-000000000002",
        table = "numeric_items"
    )]
    pub(crate) struct NumericItem {
        id: String,
        tenant_id: Uuid,
        created_at: DateTime<Utc>,
    }

    #[derive(cohort::Retained)]
    #[cohort(
        category = "keyed",
        anchor = "created_at",
        id = "c1c1c1c1-0000-4000-8000-000000000003",
        table = "text_items"
    )]
    pub(crate) struct TextItem {
        id: String,
        tenant_id: Uuid,
        created_at: DateTime<Utc>,
    }

    /// Keyed by a domain over bigint with a CHECK.
    #[derive(cohort::Retained)]
    #[cohort(
        category = "keyed",
        anchor = "created_at",
        id = "c1c1c1c1-0000-4000-8000-000000000004",
        table = "orders"
    )]
    pub(crate) struct Order {
        id: i64,
        tenant_id: Uuid,
        created_at: DateTime<Utc>,
    }

    #[derive(cohort::Retained)]
    #[cohort(
        exempt = "configuration, not personal data",
        id = "c1c1c1c1-0000-4000-8000-0000000000ff",
        table = "app_settings"
    )]
    pub(crate) struct AppSetting {
        id: i64,
    }
}
use keyed::*;

const KEYED_TABLES: &str = r#"
CREATE EXTENSION IF NOT EXISTS citext;
CREATE TABLE public.citext_items (id public.citext PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz NOT NULL);
CREATE TABLE public.numeric_items (id numeric(10,2) PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz NOT NULL);
CREATE TABLE public.text_items (id text PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz NOT NULL);
CREATE DOMAIN public.order_no AS bigint CHECK (VALUE > 0);
CREATE TABLE public.orders (id public.order_no PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz NOT NULL);
CREATE TABLE public.app_settings (id bigint PRIMARY KEY);
CREATE TABLE public.host_audit (note uuid NOT NULL);
"#;

// ---------------------------------------------------------------------------
// Set-up and helpers.

fn rules() -> TestRules {
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
        .with(
            "tickets",
            Capabilities::only(Strategy::SoftDelete),
            Rule::new(Period::days(30), Strategy::SoftDelete),
        )
        .with(
            "audit-log",
            Capabilities::only(Strategy::Purge),
            Rule::new(Period::days(30), Strategy::Purge),
        )
        .with(
            "keyed",
            Capabilities::only(Strategy::Purge),
            Rule::new(Period::days(30), Strategy::Purge),
        )
}

async fn build(db: &TestDb, options: Options) -> Cohort {
    Cohort::builder(db.engine_pool().clone())
        .options(options)
        .rules(rules())
        .entity::<SessionNote>()
        .entity::<CaseContact>()
        .entity::<Ticket>()
        .entity::<SystemLog>()
        .entity::<CitextItem>()
        .entity::<NumericItem>()
        .entity::<TextItem>()
        .entity::<Order>()
        .entity::<AppSetting>()
        .build_engine(db)
        .await
        .expect("valid model")
}

async fn setup_with(options: Options) -> (TestDb, Cohort) {
    let db = db_with_tables().await;
    db.exec(KEYED_TABLES).await;
    let cohort = build(&db, options).await;
    (db, cohort)
}

async fn setup() -> (TestDb, Cohort) {
    setup_with(Options::default()).await
}

async fn note(db: &TestDb, tenant: Uuid, age_days: i64) -> Uuid {
    let id = Uuid::new_v4();
    sqlx::query(
        "INSERT INTO session_notes (id, tenant_id, created_at, body) VALUES ($1, $2, $3, 'private')",
    )
    .bind(id)
    .bind(tenant)
    .bind(Utc::now() - Duration::days(age_days))
    .execute(db.pool())
    .await
    .expect("insert note");
    id
}

async fn contact(db: &TestDb, tenant: Uuid, age_days: i64) -> Uuid {
    let id = Uuid::new_v4();
    sqlx::query(
        "INSERT INTO case_contacts (id, tenant_id, created_at, email, full_name, phone, external_ref) \
         VALUES ($1, $2, $3, 'ann@example.org', 'Ann Example', '+44 1234', 'REF-12345')",
    )
    .bind(id)
    .bind(tenant)
    .bind(Utc::now() - Duration::days(age_days))
    .execute(db.pool())
    .await
    .expect("insert contact");
    id
}

async fn ticket(db: &TestDb, id: i64, tenant: Uuid, age_days: i64) {
    sqlx::query("INSERT INTO tickets (id, tenant_id, opened_at) VALUES ($1, $2, $3)")
        .bind(id)
        .bind(tenant)
        .bind(Utc::now() - Duration::days(age_days))
        .execute(db.pool())
        .await
        .expect("insert ticket");
}

async fn log_line(db: &TestDb, id: i64, age_days: i64) {
    sqlx::query("INSERT INTO system_log (id, logged_at, line) VALUES ($1, $2, 'boot')")
        .bind(id)
        .bind(Utc::now() - Duration::days(age_days))
        .execute(db.pool())
        .await
        .expect("insert log line");
}

/// A row of one of the keyed tables; `id` is an SQL literal.
async fn keyed(db: &TestDb, table: &str, id_literal: &str, tenant: Uuid, age_days: i64) {
    db.exec(&format!(
        "INSERT INTO {table} (id, tenant_id, created_at) \
         VALUES ({id_literal}, '{tenant}', now() - interval '{age_days} days')"
    ))
    .await;
}

async fn exists_where(db: &TestDb, sql_condition: &str) -> bool {
    count(db, &format!("SELECT count(*) FROM {sql_condition}")).await == 1
}

async fn holds_count(db: &TestDb) -> i64 {
    count(db, "SELECT count(*) FROM retention_holds").await
}

fn request(entity: &str, record: impl Into<String>, tenant: Option<Uuid>) -> HoldRequest {
    HoldRequest::new(
        uuid(entity),
        record,
        tenant,
        "Litigation hold - case #12345",
        Utc::now(),
    )
}

async fn create(db: &TestDb, cohort: &Cohort, r: HoldRequest) -> Result<Hold, Error> {
    let mut conn = db.engine_pool().acquire().await.expect("connection");
    cohort.holds().create(&mut conn, r).await
}

async fn hold_on(
    db: &TestDb,
    cohort: &Cohort,
    entity: &str,
    record: &str,
    tenant: Option<Uuid>,
) -> Hold {
    create(db, cohort, request(entity, record, tenant))
        .await
        .expect("hold created")
}

fn hold_error(e: Error) -> HoldError {
    match e {
        Error::Hold(h) => h,
        other => panic!("expected a hold error, got {other:?}"),
    }
}

fn sqlstate(e: &Error) -> Option<String> {
    match e {
        Error::Database(sqlx::Error::Database(db)) => db.code().map(|c| c.into_owned()),
        _ => None,
    }
}

async fn sweep_a(cohort: &Cohort, now: DateTime<Utc>) -> RunResult {
    let result = cohort.sweep(&scope_a(), now).await.expect("sweep");
    assert_eq!(result.status, RunStatus::Succeeded, "{result:#?}");
    result
}

async fn is_held(db: &TestDb, cohort: &Cohort, target: &Target, as_of: DateTime<Utc>) -> bool {
    let mut conn = db.engine_pool().acquire().await.expect("connection");
    cohort
        .holds()
        .is_held(&mut conn, target, as_of)
        .await
        .expect("is_held")
}

async fn backend_pid(conn: &mut PgConnection) -> i32 {
    sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(conn)
        .await
        .expect("pid")
}

/// Waits until backend `pid` waits for a lock; returns the lock's type.
async fn wait_until_blocked(db: &TestDb, pid: i32) -> String {
    for _ in 0..1200 {
        let waiting: Option<String> = sqlx::query_scalar(
            "SELECT locktype FROM pg_locks WHERE pid = $1 AND NOT granted LIMIT 1",
        )
        .bind(pid)
        .fetch_optional(db.pool())
        .await
        .expect("pg_locks");
        if let Some(locktype) = waiting {
            return locktype;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    panic!("backend {pid} never waited for a lock");
}

async fn show_search_path(conn: &mut PgConnection) -> String {
    sqlx::query_scalar("SELECT current_setting('search_path')")
        .fetch_one(conn)
        .await
        .expect("search_path")
}

// ---------------------------------------------------------------------------
// H1, H2, H3: holds protect, in SQL, by the database clock.

// contract: H1, S6
#[tokio::test]
async fn held_rows_survive_purge_soft_delete_and_anonymise_sweeps_and_a_host_deletion() {
    let (db, cohort) = setup().await;
    let held_note = note(&db, tenant_a(), 40).await;
    let free_note = note(&db, tenant_a(), 40).await;
    let held_contact = contact(&db, tenant_a(), 400).await;
    let free_contact = contact(&db, tenant_a(), 400).await;
    ticket(&db, 1, tenant_a(), 40).await;
    ticket(&db, 2, tenant_a(), 40).await;
    log_line(&db, 1, 40).await;
    log_line(&db, 2, 40).await;
    hold_on(
        &db,
        &cohort,
        NOTE_ID,
        &held_note.to_string(),
        Some(tenant_a()),
    )
    .await;
    hold_on(
        &db,
        &cohort,
        CONTACT_ID,
        &held_contact.to_string(),
        Some(tenant_a()),
    )
    .await;
    hold_on(&db, &cohort, TICKET_ID, "1", Some(tenant_a())).await;
    hold_on(&db, &cohort, LOG_ID, "1", None).await;

    let result = sweep_a(&cohort, Utc::now()).await;
    assert_eq!(
        (
            entity_summary(&result, "SessionNote").affected,
            entity_summary(&result, "SessionNote").held
        ),
        (1, 1)
    );
    assert_eq!(
        (
            entity_summary(&result, "CaseContact").affected,
            entity_summary(&result, "CaseContact").held
        ),
        (1, 1)
    );
    assert_eq!(
        (
            entity_summary(&result, "Ticket").affected,
            entity_summary(&result, "Ticket").held
        ),
        (1, 1)
    );
    let tenantless = cohort
        .sweep(&Scope::Tenantless, Utc::now())
        .await
        .expect("tenantless sweep");
    assert_eq!(
        (
            entity_summary(&tenantless, "SystemLog").affected,
            entity_summary(&tenantless, "SystemLog").held
        ),
        (1, 1)
    );

    // Purge.
    assert!(note_exists(&db, held_note).await, "held note purged");
    assert!(!note_exists(&db, free_note).await, "free note kept");
    // Anonymise.
    assert!(
        exists_where(&db, &format!("case_contacts WHERE id = '{held_contact}' AND email = 'ann@example.org' AND anonymised_at IS NULL")).await,
        "held contact anonymised"
    );
    assert!(
        exists_where(&db, &format!("case_contacts WHERE id = '{free_contact}' AND email IS NULL AND anonymised_at IS NOT NULL")).await,
        "free contact not anonymised"
    );
    // Soft-delete.
    assert!(
        exists_where(&db, "tickets WHERE id = 1 AND NOT is_deleted").await,
        "held ticket soft-deleted"
    );
    assert!(
        exists_where(&db, "tickets WHERE id = 2 AND is_deleted").await,
        "free ticket kept"
    );
    // Tenantless purge.
    assert!(
        exists_where(&db, "system_log WHERE id = 1").await,
        "held log line purged"
    );
    assert!(
        !exists_where(&db, "system_log WHERE id = 2").await,
        "free log line kept"
    );

    // A host deletion through the deletion service.
    let called = Arc::new(AtomicBool::new(false));
    let flag = called.clone();
    let mut conn = db.engine_pool().acquire().await.expect("connection");
    let outcome = cohort
        .deletion()
        .execute(
            &mut conn,
            &[Target::new(
                uuid(NOTE_ID),
                held_note.to_string(),
                Some(tenant_a()),
            )],
            move |c| {
                Box::pin(async move {
                    flag.store(true, Ordering::SeqCst);
                    sqlx::query("DELETE FROM session_notes WHERE id = $1")
                        .bind(held_note)
                        .execute(&mut *c)
                        .await?;
                    Ok::<_, sqlx::Error>(())
                })
            },
        )
        .await
        .expect("deletion");
    assert!(
        matches!(outcome, DeletionOutcome::Protected { .. }),
        "{outcome:?}"
    );
    assert!(
        !called.load(Ordering::SeqCst),
        "callback ran for a held row"
    );
    assert!(note_exists(&db, held_note).await);
}

// contract: H2
#[tokio::test]
async fn holds_are_checked_in_sql_over_ten_thousand_rows() {
    let (db, cohort) = setup().await;
    db.exec(&format!(
        "INSERT INTO session_notes (id, tenant_id, created_at, body) \
         SELECT gen_random_uuid(), '{}', now() - interval '40 days' - g * interval '1 second', 'x' \
         FROM generate_series(1, 10000) g",
        tenant_a()
    ))
    .await;
    let chosen: Vec<Uuid> = sqlx::query_scalar("SELECT id FROM session_notes ORDER BY id LIMIT 5")
        .fetch_all(db.pool())
        .await
        .expect("ids");
    for id in &chosen {
        hold_on(&db, &cohort, NOTE_ID, &id.to_string(), Some(tenant_a())).await;
    }
    // A second hold on one row (plain SQL): the row still counts once.
    db.exec(&format!(
        "INSERT INTO retention_holds (hold_id, retained_entity_id, record_id, tenant_id, reason, created_at) \
         VALUES (gen_random_uuid(), '{NOTE_ID}', '{}', '{}', 'a second matter', now())",
        chosen[0],
        tenant_a()
    ))
    .await;
    let preview = cohort
        .preview(&scope_a(), Utc::now())
        .await
        .expect("preview");
    let notes = preview
        .entries
        .iter()
        .find(|e| e.entity_type == "SessionNote")
        .expect("notes");
    assert_eq!((notes.eligible, notes.held), (9_995, 5));
    let result = sweep_a(&cohort, Utc::now()).await;
    let notes = entity_summary(&result, "SessionNote");
    assert_eq!((notes.affected, notes.held), (9_995, 5));
    let mut left: Vec<Uuid> = sqlx::query_scalar("SELECT id FROM session_notes ORDER BY id")
        .fetch_all(db.pool())
        .await
        .expect("ids");
    left.sort();
    assert_eq!(left, chosen, "exactly the held rows are left");
}

// contract: H3, H5
#[tokio::test]
async fn a_backdated_sweep_judges_holds_by_the_database_clock() {
    let (db, cohort) = setup().await;
    let now = now_s();
    // Held since yesterday: after the sweep's logical now, but before the
    // database clock.
    let held = note(&db, tenant_a(), 40).await;
    create(
        &db,
        &cohort,
        HoldRequest::new(
            uuid(NOTE_ID),
            held.to_string(),
            Some(tenant_a()),
            "case",
            now - Duration::days(1),
        ),
    )
    .await
    .expect("hold");
    // Active at the logical now (three days ago), expired by the database clock.
    let expired = note(&db, tenant_a(), 40).await;
    create(
        &db,
        &cohort,
        HoldRequest::new(
            uuid(NOTE_ID),
            expired.to_string(),
            Some(tenant_a()),
            "case",
            now - Duration::days(10),
        )
        .expires_at(now - Duration::days(1)),
    )
    .await
    .expect("hold");
    let control = note(&db, tenant_a(), 40).await;

    let result = sweep_a(&cohort, now - Duration::days(2)).await;
    assert!(
        note_exists(&db, held).await,
        "a backdated sweep passed a hold created yesterday"
    );
    assert!(
        !note_exists(&db, expired).await,
        "an expired hold still protected"
    );
    assert!(!note_exists(&db, control).await);
    let notes = entity_summary(&result, "SessionNote");
    assert_eq!((notes.affected, notes.held), (2, 1));
}

// ---------------------------------------------------------------------------
// H4, H5, H6, H14: the stored times and how they are judged.

// contract: H4
#[tokio::test]
async fn the_stored_created_at_is_the_earlier_of_the_requested_one_and_the_database_clock() {
    let (db, cohort) = setup().await;
    let ahead_note = note(&db, tenant_a(), 40).await;
    let requested = Utc::now() + Duration::hours(1); // an application clock running ahead
    let before: DateTime<Utc> = sqlx::query_scalar("SELECT clock_timestamp()")
        .fetch_one(db.pool())
        .await
        .expect("clock");
    let hold = create(
        &db,
        &cohort,
        HoldRequest::new(
            uuid(NOTE_ID),
            ahead_note.to_string(),
            Some(tenant_a()),
            "case",
            requested,
        ),
    )
    .await
    .expect("hold");
    let after: DateTime<Utc> = sqlx::query_scalar("SELECT clock_timestamp()")
        .fetch_one(db.pool())
        .await
        .expect("clock");
    assert!(
        hold.created_at >= before && hold.created_at <= after,
        "{hold:?} not within [{before}, {after}]"
    );
    assert!(hold.created_at < requested);
    // It protects at once.
    sweep_a(&cohort, Utc::now()).await;
    assert!(note_exists(&db, ahead_note).await);

    // An earlier requested time is stored as requested.
    let past_note = note(&db, tenant_a(), 40).await;
    let past = now_s() - Duration::days(1);
    let hold = create(
        &db,
        &cohort,
        HoldRequest::new(
            uuid(NOTE_ID),
            past_note.to_string(),
            Some(tenant_a()),
            "case",
            past,
        ),
    )
    .await
    .expect("hold");
    assert_eq!(hold.created_at, past);
    let stored: DateTime<Utc> =
        sqlx::query_scalar("SELECT created_at FROM retention_holds WHERE hold_id = $1")
            .bind(hold.hold_id)
            .fetch_one(db.pool())
            .await
            .expect("stored");
    assert_eq!(stored, past);
}

// contract: H5, H13
#[tokio::test]
async fn expiry_and_removal_are_stored_as_given_and_end_protection_by_the_database_clock() {
    let (db, cohort) = setup().await;
    let now = now_s();
    let expiring = note(&db, tenant_a(), 40).await;
    let expired = note(&db, tenant_a(), 40).await;
    let forever = note(&db, tenant_a(), 40).await;
    let removed_later = note(&db, tenant_a(), 40).await;
    let in_a_year = now + Duration::days(365);
    let h = create(
        &db,
        &cohort,
        HoldRequest::new(
            uuid(NOTE_ID),
            expiring.to_string(),
            Some(tenant_a()),
            "case",
            now,
        )
        .expires_at(in_a_year),
    )
    .await
    .expect("hold");
    assert_eq!(h.expires_at, Some(in_a_year));
    create(
        &db,
        &cohort,
        HoldRequest::new(
            uuid(NOTE_ID),
            expired.to_string(),
            Some(tenant_a()),
            "case",
            now - Duration::days(2),
        )
        .expires_at(now - Duration::days(1)),
    )
    .await
    .expect("hold");
    let forever_hold = hold_on(
        &db,
        &cohort,
        NOTE_ID,
        &forever.to_string(),
        Some(tenant_a()),
    )
    .await;
    assert_eq!(forever_hold.expires_at, None);
    let later_hold = hold_on(
        &db,
        &cohort,
        NOTE_ID,
        &removed_later.to_string(),
        Some(tenant_a()),
    )
    .await;
    let mut conn = db.engine_pool().acquire().await.expect("connection");
    let removal = now + Duration::days(1);
    let removed = cohort
        .holds()
        .remove(&mut conn, later_hold.hold_id, removal)
        .await
        .expect("remove");
    assert_eq!(removed.removed_at, Some(removal));

    sweep_a(&cohort, Utc::now()).await;
    assert!(note_exists(&db, expiring).await);
    assert!(
        !note_exists(&db, expired).await,
        "an expired hold protected"
    );
    assert!(
        note_exists(&db, forever).await,
        "a hold without expiry stopped protecting"
    );
    assert!(
        note_exists(&db, removed_later).await,
        "a removal in the future already ended protection"
    );

    // Removing the hold without expiry (a second ago) ends its protection.
    let gone = now_s() - Duration::seconds(1);
    let removed = cohort
        .holds()
        .remove(&mut conn, forever_hold.hold_id, gone)
        .await
        .expect("remove");
    assert_eq!(removed.removed_at, Some(gone));
    sweep_a(&cohort, Utc::now()).await;
    assert!(
        !note_exists(&db, forever).await,
        "a removed hold still protected"
    );
    assert!(note_exists(&db, removed_later).await);
    assert!(note_exists(&db, expiring).await);
}

// contract: H6, H14
#[tokio::test]
async fn reporting_queries_judge_the_as_of_given_and_the_instant_of_expiry_or_removal_is_not_held()
{
    let (db, cohort) = setup().await;
    let now = now_s();
    let t0 = now - Duration::days(10);
    let t2 = now + Duration::days(10);
    let id = note(&db, tenant_a(), 40).await;
    let target = Target::new(uuid(NOTE_ID), id.to_string(), Some(tenant_a()));
    let hold = create(
        &db,
        &cohort,
        HoldRequest::new(uuid(NOTE_ID), id.to_string(), Some(tenant_a()), "case", t0)
            .expires_at(t2),
    )
    .await
    .expect("hold");
    let us = Duration::microseconds(1);
    assert!(!is_held(&db, &cohort, &target, t0 - us).await);
    assert!(is_held(&db, &cohort, &target, t0).await);
    assert!(is_held(&db, &cohort, &target, t2 - us).await);
    assert!(
        !is_held(&db, &cohort, &target, t2).await,
        "held at the instant of expiry"
    );

    let mut conn = db.engine_pool().acquire().await.expect("connection");
    let listed = |hs: Vec<Hold>| hs.into_iter().map(|h| h.hold_id).collect::<Vec<_>>();
    let all = HoldFilter::all();
    assert_eq!(
        listed(
            cohort
                .holds()
                .list_active(&mut conn, t0 - us, &all)
                .await
                .expect("list")
        ),
        Vec::<Uuid>::new()
    );
    assert_eq!(
        listed(
            cohort
                .holds()
                .list_active(&mut conn, t0, &all)
                .await
                .expect("list")
        ),
        vec![hold.hold_id]
    );
    assert_eq!(
        listed(
            cohort
                .holds()
                .list_active(&mut conn, t2, &all)
                .await
                .expect("list")
        ),
        Vec::<Uuid>::new()
    );

    let removal = now + Duration::days(5);
    cohort
        .holds()
        .remove(&mut conn, hold.hold_id, removal)
        .await
        .expect("remove");
    assert!(is_held(&db, &cohort, &target, removal - us).await);
    assert!(
        !is_held(&db, &cohort, &target, removal).await,
        "held at the instant of removal"
    );
    assert_eq!(
        listed(
            cohort
                .holds()
                .list_active(&mut conn, now, &all)
                .await
                .expect("list")
        ),
        vec![hold.hold_id]
    );
    assert_eq!(
        listed(
            cohort
                .holds()
                .list_active(&mut conn, removal, &all)
                .await
                .expect("list")
        ),
        Vec::<Uuid>::new()
    );

    // Filters.
    let other = note(&db, tenant_b(), 40).await;
    let other_hold = hold_on(&db, &cohort, NOTE_ID, &other.to_string(), Some(tenant_b())).await;
    ticket(&db, 9, tenant_a(), 1).await;
    let ticket_hold = hold_on(&db, &cohort, TICKET_ID, "9", Some(tenant_a())).await;
    let at = Utc::now();
    let mut by_tenant = listed(
        cohort
            .holds()
            .list_active(&mut conn, at, &HoldFilter::all().tenant(tenant_a()))
            .await
            .expect("list"),
    );
    by_tenant.sort();
    let mut expected = vec![hold.hold_id, ticket_hold.hold_id];
    expected.sort();
    assert_eq!(by_tenant, expected);
    assert_eq!(
        listed(
            cohort
                .holds()
                .list_active(
                    &mut conn,
                    at,
                    &HoldFilter::all().entity(uuid(NOTE_ID)).tenant(tenant_b())
                )
                .await
                .expect("list")
        ),
        vec![other_hold.hold_id]
    );
}

// ---------------------------------------------------------------------------
// H7 to H10: what creation validates.

// contract: H7
#[tokio::test]
async fn an_unknown_or_exempt_type_cannot_be_held() {
    let (db, cohort) = setup().await;
    db.exec("INSERT INTO app_settings VALUES (1)").await;
    for entity in [Uuid::new_v4(), uuid(SETTING_ID)] {
        let err = create(
            &db,
            &cohort,
            HoldRequest::new(entity, "1", None, "case", Utc::now()),
        )
        .await
        .expect_err("unknown type");
        assert_eq!(
            hold_error(err),
            HoldError::UnknownEntity { entity_id: entity }
        );
    }
    assert_eq!(holds_count(&db).await, 0);
}

// contract: H8
#[tokio::test]
async fn record_ids_are_read_through_the_key_type_stored_as_the_rows_text_and_honoured_by_sweeps() {
    let (db, cohort) = setup().await;
    let a = Some(tenant_a());
    ticket(&db, 7, tenant_a(), 40).await;
    ticket(&db, 8, tenant_a(), 40).await;
    keyed(&db, "citext_items", "'abc'", tenant_a(), 40).await;
    keyed(&db, "citext_items", "'other'", tenant_a(), 40).await;
    keyed(&db, "numeric_items", "1.50", tenant_a(), 40).await;
    keyed(&db, "numeric_items", "1.56", tenant_a(), 40).await;
    keyed(
        &db,
        "text_items",
        r#"'O''Brien; DROP TABLE text_items; --'"#,
        tenant_a(),
        40,
    )
    .await;
    keyed(&db, "text_items", "'plain'", tenant_a(), 40).await;
    keyed(&db, "orders", "42", tenant_a(), 40).await;
    keyed(&db, "orders", "43", tenant_a(), 40).await;

    let cases = [
        (TICKET_ID, "007", "7"),
        (CITEXT_ID, "ABC", "abc"),
        (NUMERIC_ID, "1.5", "1.50"),
        (
            TEXT_ID,
            "O'Brien; DROP TABLE text_items; --",
            "O'Brien; DROP TABLE text_items; --",
        ),
        (ORDER_ID, "0042", "42"),
    ];
    for (entity, spelled, canonical) in cases {
        let hold = hold_on(&db, &cohort, entity, spelled, a).await;
        assert_eq!(hold.record_id, canonical, "{entity} {spelled}");
        let stored: String =
            sqlx::query_scalar("SELECT record_id FROM retention_holds WHERE hold_id = $1")
                .bind(hold.hold_id)
                .fetch_one(db.pool())
                .await
                .expect("stored");
        assert_eq!(stored, canonical);
        // Asking in another spelling finds it too.
        assert!(
            is_held(
                &db,
                &cohort,
                &Target::new(uuid(entity), spelled, a),
                Utc::now()
            )
            .await
        );
        assert!(
            is_held(
                &db,
                &cohort,
                &Target::new(uuid(entity), canonical, a),
                Utc::now()
            )
            .await
        );
    }
    // An explicit cast to numeric(10,2) would round '1.555' onto the row
    // 1.56; the key is compared as unconstrained numeric, so no row matches.
    let err = create(&db, &cohort, request(NUMERIC_ID, "1.555", a))
        .await
        .expect_err("rounded onto another row");
    assert_eq!(
        hold_error(err),
        HoldError::NoSuchRow {
            entity_id: uuid(NUMERIC_ID)
        }
    );
    // text is case-sensitive: another spelling is another key.
    let err = create(&db, &cohort, request(TEXT_ID, "PLAIN", a))
        .await
        .expect_err("case-folded");
    assert_eq!(
        hold_error(err),
        HoldError::NoSuchRow {
            entity_id: uuid(TEXT_ID)
        }
    );

    let result = sweep_a(&cohort, Utc::now()).await;
    for entity_type in ["Ticket", "CitextItem", "NumericItem", "TextItem", "Order"] {
        let s = entity_summary(&result, entity_type);
        assert_eq!((s.affected, s.held), (1, 1), "{entity_type}: {s:?}");
    }
    assert!(exists_where(&db, "tickets WHERE id = 7 AND NOT is_deleted").await);
    assert!(exists_where(&db, "tickets WHERE id = 8 AND is_deleted").await);
    assert!(exists_where(&db, "citext_items WHERE id = 'abc'").await);
    assert!(!exists_where(&db, "citext_items WHERE id = 'other'").await);
    assert!(exists_where(&db, "numeric_items WHERE id = 1.50").await);
    assert!(!exists_where(&db, "numeric_items WHERE id = 1.56").await);
    assert!(
        exists_where(
            &db,
            "text_items WHERE id = 'O''Brien; DROP TABLE text_items; --'"
        )
        .await
    );
    assert!(!exists_where(&db, "text_items WHERE id = 'plain'").await);
    assert!(exists_where(&db, "orders WHERE id = 42").await);
    assert!(!exists_where(&db, "orders WHERE id = 43").await);
}

// contract: H8, H12
#[tokio::test]
async fn values_the_key_type_refuses_are_typed_errors() {
    let (db, cohort) = setup().await;
    let a = Some(tenant_a());
    note(&db, tenant_a(), 40).await;
    keyed(&db, "orders", "42", tenant_a(), 40).await;
    let cases = [
        (NOTE_ID, "not-a-uuid", "22P02"),
        (NOTE_ID, "'; DROP TABLE session_notes; --", "22P02"),
        (TICKET_ID, "99999999999999999999", "22003"),
        (TICKET_ID, "7.5", "22P02"),
        (ORDER_ID, "-5", "23514"),
        (ORDER_ID, "abc", "22P02"),
        (NUMERIC_ID, "abc", "22P02"),
        // Fits numeric, overflows the column's numeric(10,2).
        (NUMERIC_ID, "123456789012", "22003"),
    ];
    for (entity, record, code) in cases {
        let err = create(&db, &cohort, request(entity, record, a))
            .await
            .expect_err("malformed");
        let err = hold_error(err);
        match &err {
            HoldError::MalformedRecordId {
                entity_id,
                sqlstate,
            } => {
                assert_eq!(*entity_id, uuid(entity));
                assert_eq!(sqlstate, code, "{entity} {record}");
            }
            other => panic!("{entity} {record}: {other:?}"),
        }
        let mut conn = db.engine_pool().acquire().await.expect("connection");
        let err = cohort
            .holds()
            .is_held(&mut conn, &Target::new(uuid(entity), record, a), Utc::now())
            .await
            .expect_err("malformed");
        assert!(matches!(
            hold_error(err),
            HoldError::MalformedRecordId { .. }
        ));
    }
    assert_eq!(holds_count(&db).await, 0);
    assert_eq!(count(&db, "SELECT count(*) FROM session_notes").await, 1);
}

// contract: H9
#[tokio::test]
async fn in_a_repeatable_read_transaction_a_row_deleted_since_the_snapshot_is_a_serialization_failure()
 {
    let (db, cohort) = setup().await;
    let id = note(&db, tenant_a(), 40).await;
    let mut conn = db.engine_pool().acquire().await.expect("connection");
    let mut tx = sqlx::Acquire::begin(&mut *conn).await.expect("begin");
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .execute(&mut *tx)
        .await
        .expect("isolation");
    // The snapshot is taken here, with the row in it.
    assert_eq!(
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM session_notes")
            .fetch_one(&mut *tx)
            .await
            .expect("snapshot"),
        1
    );
    sqlx::query("DELETE FROM session_notes WHERE id = $1")
        .bind(id)
        .execute(db.pool())
        .await
        .expect("concurrent delete");

    let err = cohort
        .holds()
        .create(&mut tx, request(NOTE_ID, id.to_string(), Some(tenant_a())))
        .await
        .expect_err("serialization failure");
    assert_eq!(sqlstate(&err).as_deref(), Some("40001"), "{err:?}");
    // The savepoint was rolled back: the transaction still answers.
    let one: i32 = sqlx::query_scalar("SELECT 1")
        .fetch_one(&mut *tx)
        .await
        .expect("usable");
    assert_eq!(one, 1);
    tx.rollback().await.expect("rollback");
    assert_eq!(holds_count(&db).await, 0);
}

// contract: H9
#[tokio::test]
async fn a_row_that_does_not_exist_cannot_be_held() {
    let (db, cohort) = setup().await;
    let gone = note(&db, tenant_a(), 40).await;
    sqlx::query("DELETE FROM session_notes WHERE id = $1")
        .bind(gone)
        .execute(db.pool())
        .await
        .expect("delete");
    for (entity, record, tenant) in [
        (NOTE_ID, gone.to_string(), Some(tenant_a())),
        (NOTE_ID, Uuid::new_v4().to_string(), Some(tenant_a())),
        (TICKET_ID, "12345".to_owned(), Some(tenant_a())),
        (LOG_ID, "1".to_owned(), None),
    ] {
        let err = create(&db, &cohort, request(entity, record, tenant))
            .await
            .expect_err("no row");
        assert_eq!(
            hold_error(err),
            HoldError::NoSuchRow {
                entity_id: uuid(entity)
            }
        );
    }
    assert_eq!(holds_count(&db).await, 0);
}

// contract: H10
#[tokio::test]
async fn the_tenant_must_fit_the_type_and_match_the_row() {
    let (db, cohort) = setup().await;
    let id = note(&db, tenant_a(), 40).await;
    log_line(&db, 1, 40).await;
    let err = create(
        &db,
        &cohort,
        request(NOTE_ID, id.to_string(), Some(tenant_b())),
    )
    .await
    .expect_err("mismatch");
    // A row of another tenant is answered as a row that does not exist (H15).
    assert_eq!(
        hold_error(err),
        HoldError::NoSuchRow {
            entity_id: uuid(NOTE_ID)
        }
    );
    let err = create(&db, &cohort, request(NOTE_ID, id.to_string(), None))
        .await
        .expect_err("required");
    assert_eq!(
        hold_error(err),
        HoldError::TenantRequired {
            entity_id: uuid(NOTE_ID)
        }
    );
    let err = create(&db, &cohort, request(LOG_ID, "1", Some(tenant_a())))
        .await
        .expect_err("not allowed");
    assert_eq!(
        hold_error(err),
        HoldError::TenantNotAllowed {
            entity_id: uuid(LOG_ID)
        }
    );
    assert_eq!(holds_count(&db).await, 0);

    let hold = hold_on(&db, &cohort, LOG_ID, "1", None).await;
    assert_eq!(hold.tenant_id, None);
    let hold = hold_on(&db, &cohort, NOTE_ID, &id.to_string(), Some(tenant_a())).await;
    assert_eq!(hold.tenant_id, Some(tenant_a()));
}

// ---------------------------------------------------------------------------
// H11: races, forced deterministically with locks.

// contract: H11, H12
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncommitted_hold_in_a_callers_transaction_holds_the_fence_until_it_ends() {
    let (db, cohort) = setup().await;
    let kept = note(&db, tenant_a(), 40).await;
    let control = note(&db, tenant_a(), 40).await;
    let mut watcher = db.connect().await;

    // A hold created in the caller's transaction holds the type's fence
    // until that transaction ends: the sweep waits, then sees the hold.
    let mut c1 = db.engine_pool().acquire().await.expect("connection");
    let mut tx1 = sqlx::Acquire::begin(&mut *c1).await.expect("begin");
    cohort
        .holds()
        .create(
            &mut tx1,
            request(NOTE_ID, kept.to_string(), Some(tenant_a())),
        )
        .await
        .expect("hold");
    let sweep = tokio::spawn({
        let cohort = cohort.clone();
        async move { sweep_a(&cohort, Utc::now()).await }
    });
    support::wait_for_fence(&mut watcher).await;
    assert!(note_exists(&db, control).await, "the sweep waited");
    tx1.commit().await.expect("commit");
    let result = sweep.await.expect("join");
    assert_eq!(
        (
            entity_summary(&result, "SessionNote").affected,
            entity_summary(&result, "SessionNote").held
        ),
        (1, 1)
    );
    assert!(note_exists(&db, kept).await, "the committed hold protects");
    assert!(!note_exists(&db, control).await);

    // A hold whose transaction rolls back never existed.
    let rolled_back = note(&db, tenant_a(), 40).await;
    let mut c2 = db.engine_pool().acquire().await.expect("connection");
    let mut tx2 = sqlx::Acquire::begin(&mut *c2).await.expect("begin");
    cohort
        .holds()
        .create(
            &mut tx2,
            request(NOTE_ID, rolled_back.to_string(), Some(tenant_a())),
        )
        .await
        .expect("hold");
    let sweep = tokio::spawn({
        let cohort = cohort.clone();
        async move { sweep_a(&cohort, Utc::now()).await }
    });
    support::wait_for_fence(&mut watcher).await;
    tx2.rollback().await.expect("rollback");
    let result = sweep.await.expect("join");
    assert_eq!(entity_summary(&result, "SessionNote").affected, 1);
    assert!(
        !note_exists(&db, rolled_back).await,
        "the rolled-back hold never existed"
    );
    assert!(note_exists(&db, kept).await);
    assert_eq!(holds_count(&db).await, 1);
}

// contract: H9, H11
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_creation_waits_for_a_row_locked_by_a_mutation_and_then_sees_it_gone() {
    let (db, cohort) = setup().await;
    let id = note(&db, tenant_a(), 40).await;
    // A mutation in flight: the row deleted, not yet committed.
    let mut gate = db.connect().await;
    sqlx::query("BEGIN")
        .execute(&mut gate)
        .await
        .expect("begin");
    sqlx::query("DELETE FROM session_notes WHERE id = $1")
        .bind(id)
        .execute(&mut gate)
        .await
        .expect("delete");

    let mut creator = db.connect_engine().await;
    let pid = backend_pid(&mut creator).await;
    let handle = {
        let cohort = cohort.clone();
        tokio::spawn(async move {
            let r = cohort
                .holds()
                .create(
                    &mut creator,
                    request(NOTE_ID, id.to_string(), Some(tenant_a())),
                )
                .await;
            (creator, r)
        })
    };
    // It waits on the deleting transaction (FOR SHARE), not on a stale snapshot.
    assert_eq!(wait_until_blocked(&db, pid).await, "transactionid");
    sqlx::query("COMMIT")
        .execute(&mut gate)
        .await
        .expect("commit");
    let (_creator, created) = handle.await.expect("task");
    assert_eq!(
        hold_error(created.expect_err("no row")),
        HoldError::NoSuchRow {
            entity_id: uuid(NOTE_ID)
        }
    );
    assert_eq!(holds_count(&db).await, 0);
}

// contract: H11, DL1
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_deletion_and_hold_creation_on_the_same_row_exclude_each_other() {
    let (db, cohort) = setup().await;

    // 1. The deletion first: the creator waits for it, then finds no row.
    let id = note(&db, tenant_a(), 40).await;
    let (entered_tx, entered_rx) = tokio::sync::oneshot::channel::<()>();
    let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
    let deleting = {
        let cohort = cohort.clone();
        let pool = db.engine_pool().clone();
        tokio::spawn(async move {
            let mut conn = pool.acquire().await.expect("connection");
            cohort
                .deletion()
                .execute(
                    &mut conn,
                    &[Target::new(uuid(NOTE_ID), id.to_string(), Some(tenant_a()))],
                    move |c| {
                        Box::pin(async move {
                            let _ = entered_tx.send(());
                            let _ = go_rx.await;
                            sqlx::query("DELETE FROM session_notes WHERE id = $1")
                                .bind(id)
                                .execute(&mut *c)
                                .await?;
                            Ok::<_, sqlx::Error>("deleted")
                        })
                    },
                )
                .await
        })
    };
    entered_rx.await.expect("callback entered");
    let mut creator = db.connect_engine().await;
    let pid = backend_pid(&mut creator).await;
    let creating = {
        let cohort = cohort.clone();
        tokio::spawn(async move {
            let r = cohort
                .holds()
                .create(
                    &mut creator,
                    request(NOTE_ID, id.to_string(), Some(tenant_a())),
                )
                .await;
            (creator, r)
        })
    };
    assert_eq!(wait_until_blocked(&db, pid).await, "advisory");
    go_tx.send(()).expect("go");
    let outcome = deleting.await.expect("task").expect("deletion");
    assert_eq!(outcome, DeletionOutcome::Deleted("deleted"));
    let (_creator, created) = creating.await.expect("task");
    assert_eq!(
        hold_error(created.expect_err("no row")),
        HoldError::NoSuchRow {
            entity_id: uuid(NOTE_ID)
        }
    );
    assert!(!note_exists(&db, id).await);
    assert_eq!(holds_count(&db).await, 0);

    // 2. The creator first (uncommitted, in the caller's transaction): the
    //    deletion waits for it, then sees the hold.
    let id = note(&db, tenant_a(), 40).await;
    let mut c1 = db.engine_pool().acquire().await.expect("connection");
    let mut tx = sqlx::Acquire::begin(&mut *c1).await.expect("begin");
    cohort
        .holds()
        .create(&mut tx, request(NOTE_ID, id.to_string(), Some(tenant_a())))
        .await
        .expect("hold");
    let mut deleter = db.connect_engine().await;
    let pid = backend_pid(&mut deleter).await;
    let called = Arc::new(AtomicBool::new(false));
    let deleting = {
        let cohort = cohort.clone();
        let flag = called.clone();
        tokio::spawn(async move {
            let r = cohort
                .deletion()
                .execute(
                    &mut deleter,
                    &[Target::new(uuid(NOTE_ID), id.to_string(), Some(tenant_a()))],
                    move |c| {
                        Box::pin(async move {
                            flag.store(true, Ordering::SeqCst);
                            sqlx::query("DELETE FROM session_notes WHERE id = $1")
                                .bind(id)
                                .execute(&mut *c)
                                .await?;
                            Ok::<_, sqlx::Error>("deleted")
                        })
                    },
                )
                .await;
            (deleter, r)
        })
    };
    assert_eq!(wait_until_blocked(&db, pid).await, "advisory");
    tx.commit().await.expect("commit the hold");
    let (_deleter, outcome) = deleting.await.expect("task");
    let outcome = outcome.expect("deletion");
    assert_eq!(
        outcome,
        DeletionOutcome::Protected {
            held: vec![Target::new(uuid(NOTE_ID), id.to_string(), Some(tenant_a()))]
        }
    );
    assert!(!called.load(Ordering::SeqCst));
    assert!(note_exists(&db, id).await);
}

// ---------------------------------------------------------------------------
// H12: joining the caller's transaction.

// contract: H12
#[tokio::test]
async fn a_refused_record_id_leaves_the_callers_transaction_usable_and_search_path_is_put_back() {
    let (db, cohort) = setup().await;
    // The host's own insert below needs the host's own grant.
    support::grant_host(&db, "INSERT ON public.session_notes").await;
    let mut conn = db.engine_pool().acquire().await.expect("connection");
    let mut tx = sqlx::Acquire::begin(&mut *conn).await.expect("begin");
    sqlx::query("SELECT set_config('search_path', 'public, pg_temp', true)")
        .execute(&mut *tx)
        .await
        .expect("search_path");

    let err = cohort
        .holds()
        .create(&mut tx, request(NOTE_ID, "not-a-uuid", Some(tenant_a())))
        .await
        .expect_err("malformed");
    assert!(matches!(
        hold_error(err),
        HoldError::MalformedRecordId { .. }
    ));
    assert_eq!(show_search_path(&mut tx).await, "public, pg_temp");

    // The transaction goes on: an unqualified insert, then a good hold.
    let id = Uuid::new_v4();
    sqlx::query("INSERT INTO session_notes (id, tenant_id, created_at, body) VALUES ($1, $2, now() - interval '40 days', 'x')")
        .bind(id)
        .bind(tenant_a())
        .execute(&mut *tx)
        .await
        .expect("the transaction is still usable");
    let hold = cohort
        .holds()
        .create(&mut tx, request(NOTE_ID, id.to_string(), Some(tenant_a())))
        .await
        .expect("hold in the caller's transaction");
    assert_eq!(show_search_path(&mut tx).await, "public, pg_temp");
    assert!(
        cohort
            .holds()
            .is_held(
                &mut tx,
                &Target::new(uuid(NOTE_ID), id.to_string(), Some(tenant_a())),
                Utc::now()
            )
            .await
            .expect("is_held")
    );
    // Nothing is visible outside until the caller commits.
    assert_eq!(holds_count(&db).await, 0);
    tx.commit().await.expect("commit");
    assert_eq!(holds_count(&db).await, 1);
    assert!(note_exists(&db, id).await);
    assert_eq!(
        count(
            &db,
            &format!(
                "SELECT count(*) FROM retention_holds WHERE hold_id = '{}'",
                hold.hold_id
            )
        )
        .await,
        1
    );
}

/// A raw `BEGIN` that sqlx does not know about is refused, never committed.
#[tokio::test]
async fn holds_refuse_a_transaction_sqlx_did_not_start_and_leave_it_open() {
    let (db, cohort) = setup().await;
    let id = note(&db, tenant_a(), 40).await;
    let mut conn = db.connect().await;
    sqlx::query("BEGIN")
        .execute(&mut conn)
        .await
        .expect("begin");
    sqlx::query("INSERT INTO host_audit VALUES ($1)")
        .bind(id)
        .execute(&mut conn)
        .await
        .expect("insert");
    let err = cohort
        .holds()
        .create(
            &mut conn,
            request(NOTE_ID, id.to_string(), Some(tenant_a())),
        )
        .await
        .expect_err("untracked");
    assert!(matches!(err, Error::UntrackedTransaction), "{err:?}");
    // Still the caller's open transaction: rolling it back undoes the insert.
    sqlx::query("ROLLBACK")
        .execute(&mut conn)
        .await
        .expect("rollback");
    assert_eq!(count(&db, "SELECT count(*) FROM host_audit").await, 0);
    assert_eq!(holds_count(&db).await, 0);
}

// ---------------------------------------------------------------------------
// H13: remove, list, prune.

// contract: H13
#[tokio::test]
async fn holds_are_removed_listed_and_pruned_after_the_inactive_hold_retention() {
    let (db, cohort) = setup_with(Options {
        inactive_hold_retention: Some(std::time::Duration::from_secs(24 * 3600)),
        ..Options::default()
    })
    .await;
    let now = now_s();
    let mut ids = Vec::new();
    for _ in 0..6 {
        ids.push(note(&db, tenant_a(), 40).await.to_string());
    }
    let a = Some(tenant_a());
    let req = |i: usize, created: DateTime<Utc>| {
        HoldRequest::new(uuid(NOTE_ID), ids[i].clone(), a, "case", created)
    };
    let expired_long_ago = create(
        &db,
        &cohort,
        req(0, now - Duration::days(10)).expires_at(now - Duration::days(2)),
    )
    .await
    .expect("hold");
    let expired_recently = create(
        &db,
        &cohort,
        req(1, now - Duration::days(10)).expires_at(now - Duration::hours(1)),
    )
    .await
    .expect("hold");
    let removed_long_ago = create(&db, &cohort, req(2, now - Duration::days(10)))
        .await
        .expect("hold");
    let removed_recently = create(&db, &cohort, req(3, now - Duration::days(10)))
        .await
        .expect("hold");
    let active = create(&db, &cohort, req(4, now - Duration::days(10)))
        .await
        .expect("hold");
    let removal_ahead = create(&db, &cohort, req(5, now - Duration::days(10)))
        .await
        .expect("hold");
    let mut conn = db.engine_pool().acquire().await.expect("connection");
    let holds = cohort.holds();
    holds
        .remove(&mut conn, removed_long_ago.hold_id, now - Duration::days(2))
        .await
        .expect("remove");
    holds
        .remove(
            &mut conn,
            removed_recently.hold_id,
            now - Duration::hours(1),
        )
        .await
        .expect("remove");
    holds
        .remove(&mut conn, removal_ahead.hold_id, now + Duration::days(2))
        .await
        .expect("remove");
    // A second removal keeps the first instant.
    let again = holds
        .remove(&mut conn, removed_recently.hold_id, now)
        .await
        .expect("remove");
    assert_eq!(again.removed_at, Some(now - Duration::hours(1)));
    // An unknown hold.
    let unknown = Uuid::new_v4();
    assert_eq!(
        hold_error(
            holds
                .remove(&mut conn, unknown, now)
                .await
                .expect_err("unknown")
        ),
        HoldError::NoSuchHold { hold_id: unknown }
    );

    let mut listed: Vec<Uuid> = holds
        .list_active(&mut conn, Utc::now(), &HoldFilter::all())
        .await
        .expect("list")
        .into_iter()
        .map(|h| h.hold_id)
        .collect();
    listed.sort();
    let mut expected = vec![active.hold_id, removal_ahead.hold_id];
    expected.sort();
    assert_eq!(listed, expected);

    assert_eq!(holds.prune(&mut conn).await.expect("prune"), 2);
    let mut left: Vec<Uuid> = sqlx::query_scalar("SELECT hold_id FROM retention_holds")
        .fetch_all(db.pool())
        .await
        .expect("holds");
    left.sort();
    let mut expected = vec![
        expired_recently.hold_id,
        removed_recently.hold_id,
        active.hold_id,
        removal_ahead.hold_id,
    ];
    expected.sort();
    assert_eq!(left, expected);
    assert!(!left.contains(&expired_long_ago.hold_id));
    assert_eq!(holds.prune(&mut conn).await.expect("prune"), 0);
}

// contract: H13
#[tokio::test]
async fn without_an_inactive_hold_retention_prune_deletes_nothing() {
    let (db, cohort) = setup().await;
    let now = now_s();
    let id = note(&db, tenant_a(), 40).await;
    create(
        &db,
        &cohort,
        HoldRequest::new(
            uuid(NOTE_ID),
            id.to_string(),
            Some(tenant_a()),
            "case",
            now - Duration::days(3000),
        )
        .expires_at(now - Duration::days(2000)),
    )
    .await
    .expect("hold");
    let mut conn = db.engine_pool().acquire().await.expect("connection");
    assert_eq!(cohort.holds().prune(&mut conn).await.expect("prune"), 0);
    assert_eq!(holds_count(&db).await, 1);
}

// ---------------------------------------------------------------------------
// H14: what a hold covers.

// contract: H14
#[tokio::test]
async fn a_hold_covers_exactly_its_type_record_id_and_tenant() {
    let (db, cohort) = setup().await;
    // The same record id in two retained types.
    ticket(&db, 42, tenant_a(), 40).await;
    log_line(&db, 42, 40).await;
    hold_on(&db, &cohort, TICKET_ID, "42", Some(tenant_a())).await;
    assert!(
        is_held(
            &db,
            &cohort,
            &Target::new(uuid(TICKET_ID), "42", Some(tenant_a())),
            Utc::now()
        )
        .await
    );
    assert!(
        !is_held(
            &db,
            &cohort,
            &Target::new(uuid(LOG_ID), "42", None),
            Utc::now()
        )
        .await
    );
    assert!(
        !is_held(
            &db,
            &cohort,
            &Target::new(uuid(TICKET_ID), "42", Some(tenant_b())),
            Utc::now()
        )
        .await
    );
    sweep_a(&cohort, Utc::now()).await;
    let tenantless = cohort
        .sweep(&Scope::Tenantless, Utc::now())
        .await
        .expect("sweep");
    assert_eq!(entity_summary(&tenantless, "SystemLog").affected, 1);
    assert!(exists_where(&db, "tickets WHERE id = 42 AND NOT is_deleted").await);
    assert!(
        !exists_where(&db, "system_log WHERE id = 42").await,
        "a ticket's hold protected a log line"
    );

    // A hold of another tenant (written behind the API's back) protects nothing.
    let id = note(&db, tenant_a(), 40).await;
    sqlx::query(
        "INSERT INTO retention_holds (hold_id, retained_entity_id, record_id, tenant_id, reason, created_at) \
         VALUES ($1, $2, $3, $4, 'mis-scoped', now() - interval '1 day')",
    )
    .bind(Uuid::new_v4())
    .bind(uuid(NOTE_ID))
    .bind(id.to_string())
    .bind(tenant_b())
    .execute(db.pool())
    .await
    .expect("insert hold");
    sweep_a(&cohort, Utc::now()).await;
    assert!(
        !note_exists(&db, id).await,
        "another tenant's hold protected the row"
    );
}

// ---------------------------------------------------------------------------
// DL1 to DL3: host deletions.

// contract: DL1
#[tokio::test]
async fn a_deletion_with_a_held_target_is_protected_and_the_callback_never_runs() {
    let (db, cohort) = setup().await;
    let held = note(&db, tenant_a(), 1).await;
    let free = note(&db, tenant_a(), 1).await;
    ticket(&db, 7, tenant_a(), 1).await;
    hold_on(&db, &cohort, NOTE_ID, &held.to_string(), Some(tenant_a())).await;
    hold_on(&db, &cohort, TICKET_ID, "7", Some(tenant_a())).await;
    let targets = vec![
        Target::new(uuid(NOTE_ID), free.to_string(), Some(tenant_a())),
        Target::new(uuid(NOTE_ID), held.to_string(), Some(tenant_a())),
        // Spelled differently from the hold: canonicalised before the check.
        Target::new(uuid(TICKET_ID), "007", Some(tenant_a())),
        Target::new(uuid(NOTE_ID), held.to_string(), Some(tenant_a())),
    ];
    let called = Arc::new(AtomicBool::new(false));
    let flag = called.clone();
    let mut conn = db.engine_pool().acquire().await.expect("connection");
    let outcome = cohort
        .deletion()
        .execute(&mut conn, &targets, move |c| {
            Box::pin(async move {
                flag.store(true, Ordering::SeqCst);
                sqlx::query("DELETE FROM session_notes")
                    .execute(&mut *c)
                    .await?;
                sqlx::query("DELETE FROM tickets").execute(&mut *c).await?;
                Ok::<_, sqlx::Error>(())
            })
        })
        .await
        .expect("deletion");
    assert_eq!(
        outcome,
        DeletionOutcome::Protected {
            held: vec![targets[1].clone(), targets[2].clone()]
        }
    );
    assert!(!called.load(Ordering::SeqCst), "the callback ran");
    assert_eq!(count(&db, "SELECT count(*) FROM session_notes").await, 2);
    assert_eq!(count(&db, "SELECT count(*) FROM tickets").await, 1);
    // The connection is back out of any transaction.
    assert!(!sqlx::Connection::is_in_transaction(&*conn));
}

// contract: DL2, DL1
#[tokio::test]
async fn an_unheld_deletion_runs_the_callback_in_its_transaction_and_a_callback_error_rolls_back() {
    let (db, cohort) = setup().await;
    let now = now_s();
    let first = note(&db, tenant_a(), 1).await;
    let second = note(&db, tenant_a(), 1).await;
    // The callback's own audit insert needs the host's own grant.
    support::grant_host(&db, "INSERT ON public.host_audit").await;
    // An expired hold does not protect.
    create(
        &db,
        &cohort,
        HoldRequest::new(
            uuid(NOTE_ID),
            first.to_string(),
            Some(tenant_a()),
            "case",
            now - Duration::days(2),
        )
        .expires_at(now - Duration::days(1)),
    )
    .await
    .expect("hold");

    let mut conn = db.engine_pool().acquire().await.expect("connection");
    let outcome = cohort
        .deletion()
        .execute(
            &mut conn,
            &[Target::new(
                uuid(NOTE_ID),
                first.to_string().to_uppercase(),
                Some(tenant_a()),
            )],
            move |c| {
                Box::pin(async move {
                    // The caller's search_path is back: unqualified names work.
                    let deleted = sqlx::query("DELETE FROM session_notes WHERE id = $1")
                        .bind(first)
                        .execute(&mut *c)
                        .await?
                        .rows_affected();
                    sqlx::query("INSERT INTO host_audit VALUES ($1)")
                        .bind(first)
                        .execute(&mut *c)
                        .await?;
                    Ok::<_, sqlx::Error>(deleted)
                })
            },
        )
        .await
        .expect("deletion");
    assert_eq!(outcome, DeletionOutcome::Deleted(1));
    assert!(!note_exists(&db, first).await);
    assert_eq!(count(&db, "SELECT count(*) FROM host_audit").await, 1);

    // The callback fails after deleting: everything rolls back.
    let err = cohort
        .deletion()
        .execute(
            &mut conn,
            &[Target::new(
                uuid(NOTE_ID),
                second.to_string(),
                Some(tenant_a()),
            )],
            move |c| {
                Box::pin(async move {
                    sqlx::query("DELETE FROM session_notes WHERE id = $1")
                        .bind(second)
                        .execute(&mut *c)
                        .await?;
                    sqlx::query("INSERT INTO host_audit VALUES ($1)")
                        .bind(second)
                        .execute(&mut *c)
                        .await?;
                    Err::<(), _>(sqlx::Error::Protocol("the host gave up".into()))
                })
            },
        )
        .await
        .expect_err("callback error");
    match &err {
        DeletionError::Callback(sqlx::Error::Protocol(m)) => assert_eq!(m, "the host gave up"),
        other => panic!("{other:?}"),
    }
    assert!(
        note_exists(&db, second).await,
        "the failed callback's delete committed"
    );
    assert_eq!(count(&db, "SELECT count(*) FROM host_audit").await, 1);
    assert!(!sqlx::Connection::is_in_transaction(&*conn));

    // A target whose row belongs to another tenant is refused.
    let called = Arc::new(AtomicBool::new(false));
    let flag = called.clone();
    let err = cohort
        .deletion()
        .execute(
            &mut conn,
            &[Target::new(
                uuid(NOTE_ID),
                second.to_string(),
                Some(tenant_b()),
            )],
            move |_c| {
                Box::pin(async move {
                    flag.store(true, Ordering::SeqCst);
                    Ok::<_, sqlx::Error>(())
                })
            },
        )
        .await
        .expect_err("tenant mismatch");
    assert!(
        matches!(
            err,
            DeletionError::Cohort(Error::Hold(HoldError::NoSuchRow { .. }))
        ),
        "{err:?}"
    );
    assert!(!called.load(Ordering::SeqCst));
    assert!(note_exists(&db, second).await);

    // No targets: nothing can be held, so the callback runs.
    let outcome = cohort
        .deletion()
        .execute(&mut conn, &[], |c| {
            Box::pin(async move {
                sqlx::query("INSERT INTO host_audit VALUES (gen_random_uuid())")
                    .execute(&mut *c)
                    .await?;
                Ok::<_, sqlx::Error>("ran")
            })
        })
        .await
        .expect("deletion");
    assert_eq!(outcome, DeletionOutcome::Deleted("ran"));
    assert_eq!(count(&db, "SELECT count(*) FROM host_audit").await, 2);
}

/// A callback that records it ran and deletes every note.
fn delete_all_notes(
    flag: Arc<AtomicBool>,
) -> impl for<'c> FnOnce(&'c mut PgConnection) -> BoxFuture<'c, Result<(), sqlx::Error>> {
    move |c| {
        Box::pin(async move {
            flag.store(true, Ordering::SeqCst);
            sqlx::query("DELETE FROM session_notes")
                .execute(&mut *c)
                .await?;
            Ok(())
        })
    }
}

// contract: DL3
#[tokio::test]
async fn the_deletion_service_refuses_a_connection_with_a_transaction_open() {
    let (db, cohort) = setup().await;
    let id = note(&db, tenant_a(), 1).await;
    let target = [Target::new(uuid(NOTE_ID), id.to_string(), Some(tenant_a()))];
    let called = Arc::new(AtomicBool::new(false));

    // A transaction sqlx started.
    let mut conn = db.engine_pool().acquire().await.expect("connection");
    let mut tx = sqlx::Acquire::begin(&mut *conn).await.expect("begin");
    let err = cohort
        .deletion()
        .execute(&mut tx, &target, delete_all_notes(called.clone()))
        .await
        .expect_err("open transaction");
    assert!(
        matches!(err, DeletionError::Cohort(Error::TransactionAlreadyOpen)),
        "{err:?}"
    );
    let one: i32 = sqlx::query_scalar("SELECT 1")
        .fetch_one(&mut *tx)
        .await
        .expect("usable");
    assert_eq!(one, 1);
    tx.rollback().await.expect("rollback");

    // A raw BEGIN sqlx does not know about, with work in it.
    let mut raw = db.connect().await;
    sqlx::query("BEGIN").execute(&mut raw).await.expect("begin");
    sqlx::query("INSERT INTO host_audit VALUES ($1)")
        .bind(id)
        .execute(&mut raw)
        .await
        .expect("insert");
    let err = cohort
        .deletion()
        .execute(&mut raw, &target, delete_all_notes(called.clone()))
        .await
        .expect_err("open transaction");
    assert!(
        matches!(err, DeletionError::Cohort(Error::TransactionAlreadyOpen)),
        "{err:?}"
    );
    sqlx::query("ROLLBACK")
        .execute(&mut raw)
        .await
        .expect("rollback");
    assert_eq!(
        count(&db, "SELECT count(*) FROM host_audit").await,
        0,
        "the caller's transaction was committed"
    );

    // A raw transaction that already failed.
    sqlx::query("BEGIN").execute(&mut raw).await.expect("begin");
    let _ = sqlx::query("SELECT 1/0").execute(&mut raw).await;
    let err = cohort
        .deletion()
        .execute(&mut raw, &target, delete_all_notes(called.clone()))
        .await
        .expect_err("failed transaction");
    assert!(
        matches!(err, DeletionError::Cohort(Error::TransactionAlreadyOpen)),
        "{err:?}"
    );
    sqlx::query("ROLLBACK")
        .execute(&mut raw)
        .await
        .expect("rollback");

    assert!(!called.load(Ordering::SeqCst));
    assert!(note_exists(&db, id).await);

    // With no transaction open it runs.
    let outcome = cohort
        .deletion()
        .execute(&mut raw, &target, delete_all_notes(called.clone()))
        .await
        .expect("deletion");
    assert_eq!(outcome, DeletionOutcome::Deleted(()));
    assert!(called.load(Ordering::SeqCst));
    assert!(!note_exists(&db, id).await);
}

// ---------------------------------------------------------------------------
// Bad input, readiness, search_path.

// contract: H7, H10, H12
#[tokio::test]
async fn bad_input_is_a_typed_error_nothing_is_written_and_the_callers_transaction_stays_usable() {
    let (db, cohort) = setup().await;
    let id = note(&db, tenant_a(), 40).await;
    keyed(&db, "text_items", "'plain'", tenant_a(), 40).await;
    log_line(&db, 1, 40).await;
    let now = Utc::now();
    let a = Some(tenant_a());
    let note_req = |record: &str| request(NOTE_ID, record, a);
    let cases: Vec<(HoldRequest, HoldError)> = vec![
        (
            note_req(""),
            HoldError::InvalidRecordId {
                entity_id: uuid(NOTE_ID),
                problem: RecordIdProblem::Empty,
            },
        ),
        (
            note_req(&"7".repeat(MAX_RECORD_ID_BYTES + 1)),
            HoldError::InvalidRecordId {
                entity_id: uuid(NOTE_ID),
                problem: RecordIdProblem::TooLong {
                    bytes: MAX_RECORD_ID_BYTES + 1,
                },
            },
        ),
        (
            note_req("a\0b"),
            HoldError::InvalidRecordId {
                entity_id: uuid(NOTE_ID),
                problem: RecordIdProblem::ContainsNul,
            },
        ),
        (
            note_req("'; DROP TABLE session_notes; --"),
            HoldError::MalformedRecordId {
                entity_id: uuid(NOTE_ID),
                sqlstate: "22P02".into(),
            },
        ),
        (
            request(TEXT_ID, "'; DROP TABLE session_notes; --", a),
            HoldError::NoSuchRow {
                entity_id: uuid(TEXT_ID),
            },
        ),
        (
            request(LOG_ID, "1", a),
            HoldError::TenantNotAllowed {
                entity_id: uuid(LOG_ID),
            },
        ),
        (
            HoldRequest::new(uuid(NOTE_ID), id.to_string(), a, "case", now)
                .expires_at(now - Duration::days(1)),
            HoldError::ExpiryNotAfterCreation {
                created_at: now,
                expires_at: now - Duration::days(1),
            },
        ),
        (
            HoldRequest::new(uuid(NOTE_ID), id.to_string(), a, "case", now).expires_at(now),
            HoldError::ExpiryNotAfterCreation {
                created_at: now,
                expires_at: now,
            },
        ),
        (
            HoldRequest::new(uuid(NOTE_ID), id.to_string(), a, " \t", now),
            HoldError::EmptyReason,
        ),
        (
            HoldRequest::new(uuid(NOTE_ID), id.to_string(), a, "case\0", now),
            HoldError::ReasonContainsNul,
        ),
        (
            HoldRequest::new(Uuid::nil(), id.to_string(), a, "case", now),
            HoldError::UnknownEntity {
                entity_id: Uuid::nil(),
            },
        ),
    ];
    let mut conn = db.engine_pool().acquire().await.expect("connection");
    let mut tx = sqlx::Acquire::begin(&mut *conn).await.expect("begin");
    for (req, expected) in cases {
        let err = cohort
            .holds()
            .create(&mut tx, req)
            .await
            .expect_err("refused");
        assert_eq!(hold_error(err), expected);
        let one: i32 = sqlx::query_scalar("SELECT 1")
            .fetch_one(&mut *tx)
            .await
            .expect("usable");
        assert_eq!(one, 1);
    }
    // A duplicate hold id.
    let first = cohort
        .holds()
        .create(&mut tx, request(NOTE_ID, id.to_string(), a))
        .await
        .expect("hold");
    let err = cohort
        .holds()
        .create(
            &mut tx,
            request(NOTE_ID, id.to_string(), a).hold_id(first.hold_id),
        )
        .await
        .expect_err("duplicate");
    assert_eq!(
        hold_error(err),
        HoldError::DuplicateHoldId {
            hold_id: first.hold_id
        }
    );
    tx.commit().await.expect("commit");
    assert_eq!(holds_count(&db).await, 1);
    assert_eq!(count(&db, "SELECT count(*) FROM session_notes").await, 1);
    assert_eq!(count(&db, "SELECT count(*) FROM text_items").await, 1);

    // The deletion service validates its targets the same way, before any SQL.
    let called = Arc::new(AtomicBool::new(false));
    for target in [
        Target::new(uuid(NOTE_ID), "", a),
        Target::new(uuid(NOTE_ID), "'; DROP TABLE session_notes; --", a),
        Target::new(uuid(LOG_ID), "1", a),
        Target::new(uuid(NOTE_ID), id.to_string(), None),
        Target::new(Uuid::new_v4(), "1", a),
    ] {
        let flag = called.clone();
        let err = cohort
            .deletion()
            .execute(&mut conn, std::slice::from_ref(&target), move |_c| {
                Box::pin(async move {
                    flag.store(true, Ordering::SeqCst);
                    Ok::<_, sqlx::Error>(())
                })
            })
            .await
            .expect_err("refused");
        assert!(
            matches!(err, DeletionError::Cohort(Error::Hold(_))),
            "{target:?}: {err:?}"
        );
    }
    assert!(!called.load(Ordering::SeqCst));
    assert!(note_exists(&db, id).await);
}

// contract: D5
#[tokio::test]
async fn holds_and_deletions_check_readiness_themselves() {
    let (db, cohort) = setup().await;
    let id = note(&db, tenant_a(), 40).await;
    db.exec("DROP TABLE retention_holds").await;
    let mut conn = db.engine_pool().acquire().await.expect("connection");
    let err = cohort
        .holds()
        .create(
            &mut conn,
            request(NOTE_ID, id.to_string(), Some(tenant_a())),
        )
        .await
        .expect_err("not ready");
    assert!(matches!(err, Error::SchemaNotReady(_)), "{err:?}");
    let err = cohort
        .holds()
        .list_active(&mut conn, Utc::now(), &HoldFilter::all())
        .await
        .expect_err("not ready");
    assert!(matches!(err, Error::SchemaNotReady(_)), "{err:?}");
    let err = cohort
        .holds()
        .prune(&mut conn)
        .await
        .expect_err("not ready");
    assert!(matches!(err, Error::SchemaNotReady(_)), "{err:?}");
    let err = cohort
        .deletion()
        .execute(
            &mut conn,
            &[Target::new(uuid(NOTE_ID), id.to_string(), Some(tenant_a()))],
            |c| {
                Box::pin(async move {
                    sqlx::query("DELETE FROM session_notes")
                        .execute(&mut *c)
                        .await?;
                    Ok::<_, sqlx::Error>(())
                })
            },
        )
        .await
        .expect_err("not ready");
    assert!(
        matches!(err, DeletionError::Cohort(Error::SchemaNotReady(_))),
        "{err:?}"
    );
    assert!(note_exists(&db, id).await);
}

// contract: D6, D8
#[tokio::test]
async fn a_hostile_search_path_changes_nothing_and_is_put_back() {
    let (db, cohort) = setup().await;
    let id = note(&db, tenant_a(), 40).await;
    db.exec(
        "CREATE SCHEMA evil; \
         CREATE TABLE evil.retention_holds (LIKE public.retention_holds); \
         CREATE TABLE evil.session_notes (LIKE public.session_notes); \
         CREATE FUNCTION evil.hashtextextended(text, bigint) RETURNS bigint LANGUAGE sql AS 'SELECT 1::bigint'; \
         CREATE FUNCTION evil.statement_timestamp() RETURNS timestamptz LANGUAGE sql AS 'SELECT ''1970-01-01''::timestamptz';",
    )
    .await;
    let mut conn = db.connect_engine().await;
    sqlx::query("SET search_path = evil, pg_catalog")
        .execute(&mut conn)
        .await
        .expect("search_path");
    let hold = cohort
        .holds()
        .create(
            &mut conn,
            request(NOTE_ID, id.to_string(), Some(tenant_a())),
        )
        .await
        .expect("hold");
    assert!(hold.created_at > Utc::now() - Duration::hours(1));
    assert_eq!(show_search_path(&mut conn).await, "evil, pg_catalog");
    assert_eq!(
        count(&db, "SELECT count(*) FROM public.retention_holds").await,
        1
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM evil.retention_holds").await,
        0
    );
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
    let outcome = cohort
        .deletion()
        .execute(
            &mut conn,
            &[Target::new(uuid(NOTE_ID), id.to_string(), Some(tenant_a()))],
            |_c| Box::pin(async move { Ok::<_, sqlx::Error>(()) }),
        )
        .await
        .expect("deletion");
    assert!(matches!(outcome, DeletionOutcome::Protected { .. }));
    assert_eq!(show_search_path(&mut conn).await, "evil, pg_catalog");
}
