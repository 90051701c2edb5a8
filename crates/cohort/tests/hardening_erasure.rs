//! Regression tests for issue 8 ("Hardening"): right to erasure.

mod common;

use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration, TimeZone, Utc};
use cohort::ledger::EntitySummary;
use cohort::{
    Capabilities, Cohort, ErasureRequest, Error, Options, Period, Rule, RunKind, RunResult,
    RunStatus, Scope, Strategy, TenantContext,
};
use common::models::*;
use common::{Answer, TestDb, TestRules, count, db_with_cohort};
use sqlx::Connection;
use uuid::Uuid;

// ---------------------------------------------------------------------------
// Set-up and helpers.

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 6, 1, 12, 0, 0)
        .single()
        .expect("valid")
}

fn tenant() -> Uuid {
    uuid("11111111-1111-1111-1111-111111111111")
}

fn other_tenant() -> Uuid {
    uuid("22222222-2222-2222-2222-222222222222")
}

fn scope() -> Scope {
    Scope::Tenant(TenantContext::new(tenant()))
}

fn subject() -> Uuid {
    uuid("aaaaaaaa-0000-0000-0000-000000000001")
}

fn someone_else() -> Uuid {
    uuid("bbbbbbbb-0000-0000-0000-000000000002")
}

const USER_RECORD_ID: &str = "6b619c19-6e3c-44e8-a87f-975c68fd3988";

async fn setup() -> TestDb {
    let (db, _) = db_with_cohort("public").await;
    db.exec(TABLES).await;
    db
}

/// User records resolve to `user_data`, messages are purged after 10 years.
fn rules(user_data: Rule) -> TestRules {
    TestRules::new()
        .with("user-data", Capabilities::only(Strategy::Purge), user_data)
        .with(
            "messages",
            Capabilities::only(Strategy::Purge),
            Rule::new(Period::years(10), Strategy::Purge),
        )
}

async fn users_and_messages(db: &TestDb, rules: TestRules, batch_size: u32) -> Cohort {
    Cohort::builder(db.pool().clone())
        .options(Options {
            batch_size,
            ..Options::default()
        })
        .rules(rules)
        .entity::<UserRecord>()
        .entity::<Message>()
        .build()
        .await
        .expect("model")
}

/// A user record anchored at `anchor` (a `timestamptz` literal, or NULL).
async fn record_at(db: &TestDb, id: i64, tenant: Uuid, user: Uuid, anchor: Option<&str>) {
    sqlx::query(
        "INSERT INTO user_records (id, tenant_id, created_at, user_id, notes) \
         VALUES ($1, $2, $3::timestamptz, $4, 'private')",
    )
    .bind(id)
    .bind(tenant)
    .bind(anchor)
    .bind(user)
    .execute(db.pool())
    .await
    .expect("record");
}

/// A user record `age_days` before [`now`] (negative: in the future).
async fn record(db: &TestDb, id: i64, tenant: Uuid, user: Uuid, age_days: Option<i64>) {
    let anchor = age_days.map(|d| (now() - Duration::days(d)).to_rfc3339());
    record_at(db, id, tenant, user, anchor.as_deref()).await;
}

async fn ids(db: &TestDb) -> Vec<i64> {
    sqlx::query_scalar("SELECT id FROM user_records ORDER BY id")
        .fetch_all(db.pool())
        .await
        .expect("ids")
}

fn summary<'r>(result: &'r RunResult, entity_type: &str) -> &'r EntitySummary {
    result
        .summaries
        .iter()
        .find(|s| s.entity_type == entity_type)
        .unwrap_or_else(|| panic!("no summary for {entity_type}: {result:#?}"))
}

async fn run_status(db: &TestDb, run_id: Uuid) -> String {
    sqlx::query_scalar("SELECT status FROM sweep_run WHERE run_id = $1")
        .bind(run_id)
        .fetch_one(db.pool())
        .await
        .expect("run row")
}

/// The ledger's applied period and cutoff of `entity_type` in `run_id`.
async fn ledger_period_and_cutoff(
    db: &TestDb,
    run_id: Uuid,
    entity_type: &str,
) -> (Option<String>, Option<String>) {
    sqlx::query_as(
        "SELECT applied_period, cutoff::text FROM sweep_run_entity_summary \
         WHERE run_id = $1 AND entity_type = $2",
    )
    .bind(run_id)
    .bind(entity_type)
    .fetch_one(db.pool())
    .await
    .expect("summary")
}

// ---------------------------------------------------------------------------
// E9: exact equality in the column's own type.

#[allow(dead_code, reason = "mirrors a table; only its descriptor is read")]
#[derive(cohort::Retained)]
#[cohort(
    category = "handles",
    anchor = "created_at",
    id = "e9e9e9e9-0001-4000-8000-000000000001",
    table = "short_handles"
)]
struct ShortHandle {
    id: i32,
    tenant_id: Uuid,
    created_at: Option<DateTime<Utc>>,
    #[cohort(erasure_subject)]
    login: Option<String>,
    #[cohort(erasure_subject)]
    account_no: Option<String>,
}

#[allow(dead_code, reason = "mirrors a table; only its descriptor is read")]
#[derive(cohort::Retained)]
#[cohort(
    category = "balances",
    anchor = "created_at",
    id = "e9e9e9e9-0002-4000-8000-000000000002",
    table = "balances"
)]
struct Balance {
    id: i32,
    tenant_id: Uuid,
    created_at: Option<DateTime<Utc>>,
    #[cohort(erasure_subject)]
    account_no: Option<String>,
}

fn purge_rules(categories: &[&str]) -> TestRules {
    categories.iter().fold(TestRules::new(), |rules, c| {
        rules.with(
            c,
            Capabilities::only(Strategy::Purge),
            Rule::new(Period::days(30), Strategy::Purge),
        )
    })
}

async fn handles(db: &TestDb) -> Vec<i32> {
    sqlx::query_scalar("SELECT id FROM short_handles ORDER BY id")
        .fetch_all(db.pool())
        .await
        .expect("handles")
}

// contract: E9, M7, E5
#[tokio::test]
async fn a_subject_a_column_cannot_hold_exactly_matches_nothing() {
    let db = setup().await;
    db.exec(
        "CREATE TABLE public.short_handles (id int PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz, \
            login varchar(5), account_no numeric(10,2)); \
         INSERT INTO public.short_handles VALUES \
            (1, '11111111-1111-1111-1111-111111111111', now(), 'alice', 1.56), \
            (2, '11111111-1111-1111-1111-111111111111', now(), 'bob', 7.00);",
    )
    .await;
    let cohort = Cohort::builder(db.pool().clone())
        .rules(purge_rules(&["handles"]))
        .entity::<ShortHandle>()
        .build()
        .await
        .expect("model");

    // "alice-b" is readable as text (login) but not as a number: login alone
    // is compared, and a varchar(5) must not truncate it to "alice".
    let result = cohort
        .erase(&scope(), Utc::now(), ErasureRequest::new("alice-b"))
        .await
        .expect("a subject login can read is not refused");
    assert_eq!(
        (result.status, result.affected()),
        (RunStatus::Succeeded, 0)
    );
    assert_eq!(handles(&db).await, vec![1, 2], "alice's row stays");
    assert_eq!(run_status(&db, result.run_id).await, "Succeeded");

    // "1.555" is readable by both columns; numeric(10,2) must not round it
    // to 1.56.
    let dry = cohort
        .erase(&scope(), Utc::now(), ErasureRequest::new("1.555").dry_run())
        .await
        .expect("dry run");
    assert!(dry.dry_run);
    assert_eq!(dry.affected(), 0);
    // The exact value, in any spelling numeric reads, does match.
    for spelling in ["1.56", "1.560"] {
        let dry = cohort
            .erase(
                &scope(),
                Utc::now(),
                ErasureRequest::new(spelling).dry_run(),
            )
            .await
            .expect("dry run");
        assert_eq!(dry.affected(), 1, "{spelling}");
    }
    let dry = cohort
        .erase(&scope(), Utc::now(), ErasureRequest::new("7.00").dry_run())
        .await
        .expect("dry run");
    assert_eq!(dry.affected(), 1, "7.00 equals bob's 7.00");
    assert_eq!(handles(&db).await, vec![1, 2], "dry runs change nothing");

    let result = cohort
        .erase(&scope(), Utc::now(), ErasureRequest::new("alice"))
        .await
        .expect("erase alice");
    assert_eq!(result.affected(), 1);
    assert_eq!(handles(&db).await, vec![2]);
    let result = cohort
        .erase(&scope(), Utc::now(), ErasureRequest::new("7"))
        .await
        .expect("erase 7");
    assert_eq!(result.affected(), 1, "7 equals 7.00 as a number");
    assert_eq!(handles(&db).await, Vec::<i32>::new());
}

// contract: E9
#[tokio::test]
async fn a_subject_no_column_can_read_is_refused_and_one_it_can_read_matches_exactly() {
    let db = setup().await;
    db.exec(
        "CREATE TABLE public.balances (id int PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz, \
            account_no numeric(10,2)); \
         INSERT INTO public.balances VALUES (1, '11111111-1111-1111-1111-111111111111', now(), 1.56);",
    )
    .await;
    let cohort = Cohort::builder(db.pool().clone())
        .rules(purge_rules(&["balances"]))
        .entity::<Balance>()
        .build()
        .await
        .expect("model");
    let refused = cohort
        .erase(&scope(), Utc::now(), ErasureRequest::new("alice-b"))
        .await;
    assert!(
        matches!(refused, Err(Error::InvalidSubject { .. })),
        "{refused:?}"
    );
    assert_eq!(count(&db, "SELECT count(*) FROM sweep_run").await, 0);
    let result = cohort
        .erase(&scope(), Utc::now(), ErasureRequest::new("1.555"))
        .await
        .expect("a number numeric can read is a subject");
    assert_eq!(
        (result.status, result.affected()),
        (RunStatus::Succeeded, 0)
    );
    assert_eq!(count(&db, "SELECT count(*) FROM balances").await, 1);
}

#[allow(dead_code, reason = "mirrors a table; only its descriptor is read")]
#[derive(cohort::Retained)]
#[cohort(
    category = "people",
    anchor = "created_at",
    id = "e9e9e9e9-0003-4000-8000-000000000003",
    table = "people"
)]
struct Person {
    id: i32,
    tenant_id: Uuid,
    created_at: Option<DateTime<Utc>>,
    #[cohort(erasure_subject)]
    email: String,
}

// contract: E9
#[tokio::test]
async fn a_citext_subject_matches_when_the_extension_lives_off_the_search_path() {
    let db = setup().await;
    // No IF NOT EXISTS and no fallback: without citext this test must fail.
    db.exec(
        "CREATE SCHEMA ext; \
         CREATE EXTENSION citext SCHEMA ext; \
         CREATE TABLE public.people (id int PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz, \
            email ext.citext NOT NULL); \
         INSERT INTO public.people VALUES \
            (1, '11111111-1111-1111-1111-111111111111', now(), 'alice@example.org'), \
            (2, '11111111-1111-1111-1111-111111111111', now(), 'bob@example.org'), \
            (3, '22222222-2222-2222-2222-222222222222', now(), 'alice@example.org');",
    )
    .await;
    let path: String = sqlx::query_scalar("SELECT current_setting('search_path')")
        .fetch_one(db.pool())
        .await
        .expect("search_path");
    assert!(!path.contains("ext"), "ext must be off the path: {path}");
    let cohort = Cohort::builder(db.pool().clone())
        .rules(purge_rules(&["people"]))
        .entity::<Person>()
        .build()
        .await
        .expect("model");
    let dry = cohort
        .erase(
            &scope(),
            Utc::now(),
            ErasureRequest::new("ALICE@Example.org").dry_run(),
        )
        .await
        .expect("dry run");
    assert_eq!(dry.affected(), 1);
    let result = cohort
        .erase(
            &scope(),
            Utc::now(),
            ErasureRequest::new("ALICE@Example.org"),
        )
        .await
        .expect("erase");
    assert_eq!(
        (result.status, result.affected()),
        (RunStatus::Succeeded, 1)
    );
    let left: Vec<i32> = sqlx::query_scalar("SELECT id FROM people ORDER BY id")
        .fetch_all(db.pool())
        .await
        .expect("people");
    assert_eq!(left, vec![2, 3], "alice erased in this tenant only");
}

// ---------------------------------------------------------------------------
// X20, E2, E3: legal minimums at the edges.

// contract: X20, E3
#[tokio::test]
async fn a_legal_minimum_beyond_postgres_range_blocks_every_anchored_row_and_fails_nothing() {
    let db = setup().await;
    let rules = rules(Rule::new(Period::days(30), Strategy::Purge));
    let cohort = users_and_messages(&db, rules.clone(), 1_000).await;
    for minimum in [
        Period::years(10_000),
        Period::days(u32::MAX),
        Period::fixed(StdDuration::MAX),
    ] {
        rules.set(
            "user-data",
            Answer::Rule(Rule::new(Period::days(30), Strategy::Purge).with_legal_minimum(minimum)),
        );
        db.exec("DELETE FROM user_records; DELETE FROM messages;")
            .await;
        record(&db, 1, tenant(), subject(), Some(400)).await;
        record_at(
            &db,
            2,
            tenant(),
            subject(),
            Some("4713-12-01 00:00:00+00 BC"),
        )
        .await;
        record(&db, 3, tenant(), subject(), None).await;
        sqlx::query("INSERT INTO messages VALUES ($1, $2, now(), $3)")
            .bind(1_i64)
            .bind(tenant())
            .bind(subject().to_string())
            .execute(db.pool())
            .await
            .expect("message");

        let result = cohort
            .erase(&scope(), now(), ErasureRequest::new(subject()))
            .await
            .unwrap_or_else(|e| panic!("{minimum}: erase failed: {e}"));
        assert_eq!(
            result.status,
            RunStatus::Succeeded,
            "{minimum}: {result:#?}"
        );
        assert!(result.entity_failures.is_empty(), "{minimum}");
        let users = summary(&result, "UserRecord");
        assert_eq!(
            (
                users.affected,
                users.null_anchor,
                users.cutoff,
                users.applied_period,
                users.error.clone()
            ),
            (0, 1, None, Some(minimum), None),
            "{minimum}"
        );
        assert_eq!(
            ids(&db).await,
            vec![1, 2, 3],
            "{minimum}: nothing is old enough"
        );
        assert_eq!(
            summary(&result, "Message").affected,
            1,
            "{minimum}: the other entity of the run is erased"
        );
        assert_eq!(count(&db, "SELECT count(*) FROM messages").await, 0);
        assert_eq!(run_status(&db, result.run_id).await, "Succeeded");
        let finite = count(
            &db,
            &format!(
                "SELECT count(*) FROM sweep_run_entity_summary WHERE run_id = '{}' \
                 AND entity_type = 'UserRecord' AND isfinite(cutoff)",
                result.run_id
            ),
        )
        .await;
        assert_eq!(finite, 0, "{minimum}");
    }
}

// contract: E2
#[tokio::test]
async fn a_zero_legal_minimum_adds_no_anchor_condition_to_an_erasure() {
    let db = setup().await;
    let cohort = users_and_messages(
        &db,
        rules(Rule::new(Period::years(5), Strategy::Purge).with_legal_minimum(Period::ZERO)),
        1_000,
    )
    .await;
    record(&db, 1, tenant(), subject(), Some(400)).await;
    record(&db, 2, tenant(), subject(), None).await;
    record(&db, 3, tenant(), subject(), Some(-30)).await;
    record(&db, 4, tenant(), subject(), Some(1)).await;
    record(&db, 5, tenant(), someone_else(), None).await;
    let result = cohort
        .erase(&scope(), now(), ErasureRequest::new(subject()))
        .await
        .expect("erase");
    assert_eq!(result.status, RunStatus::Succeeded);
    let users = summary(&result, "UserRecord");
    assert_eq!(
        (
            users.affected,
            users.null_anchor,
            users.cutoff,
            users.applied_period
        ),
        (4, 0, None, None)
    );
    assert_eq!(ids(&db).await, vec![5], "NULL, future and young anchors go");
    assert_eq!(
        ledger_period_and_cutoff(&db, result.run_id, "UserRecord").await,
        (None, None)
    );
}

// ---------------------------------------------------------------------------
// X12, X20: infinite anchors in erasure.

// contract: X12, X20, E2, E3
#[tokio::test]
async fn erasure_handles_infinite_anchors_with_and_without_a_legal_minimum() {
    for batch_size in [1, 2] {
        for legal_minimum in [None, Some(Period::days(30))] {
            let label = format!("batch {batch_size}, legal minimum {legal_minimum:?}");
            let db = setup().await;
            let mut rule = Rule::new(Period::days(30), Strategy::Purge);
            if let Some(m) = legal_minimum {
                rule = rule.with_legal_minimum(m);
            }
            let cohort = users_and_messages(&db, rules(rule), batch_size).await;
            // In record-id order, so that with batches of two both infinities
            // end a batch (1-2, 3-4) without a legal minimum, and -infinity
            // ends the only batch (1-2) with one.
            record(&db, 1, tenant(), subject(), Some(400)).await;
            record_at(&db, 2, tenant(), subject(), Some("-infinity")).await;
            record(&db, 3, tenant(), subject(), None).await;
            record_at(&db, 4, tenant(), subject(), Some("infinity")).await;
            record(&db, 5, tenant(), subject(), Some(1)).await;
            record_at(&db, 6, tenant(), someone_else(), Some("-infinity")).await;
            record_at(&db, 7, other_tenant(), subject(), Some("infinity")).await;

            let erasing = cohort.clone();
            let result = tokio::spawn(async move {
                erasing
                    .erase(&scope(), now(), ErasureRequest::new(subject()))
                    .await
            })
            .await
            .unwrap_or_else(|e| panic!("{label}: the erasure panicked: {e}"))
            .unwrap_or_else(|e| panic!("{label}: {e}"));
            assert_eq!(result.status, RunStatus::Succeeded, "{label}: {result:#?}");
            assert_eq!(run_status(&db, result.run_id).await, "Succeeded");
            let users = summary(&result, "UserRecord");
            match legal_minimum {
                None => {
                    assert_eq!((users.affected, users.null_anchor), (5, 0), "{label}");
                    assert_eq!(ids(&db).await, vec![6, 7], "{label}");
                }
                Some(_) => {
                    // -infinity is older than any cutoff; infinity is never
                    // old enough, and it is not a NULL anchor.
                    assert_eq!((users.affected, users.null_anchor), (2, 1), "{label}");
                    assert_eq!(ids(&db).await, vec![3, 4, 5, 6, 7], "{label}");
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// E8: the final statement's hold re-check.

// contract: E8, E7, H1
#[tokio::test]
async fn the_final_statement_rechecks_holds_committed_while_the_candidate_select_waited() {
    let db = setup().await;
    let cohort = Cohort::builder(db.pool().clone())
        .rules(rules(Rule::new(Period::days(30), Strategy::Purge)))
        .entity::<UserRecord>()
        .build()
        .await
        .expect("model");
    for id in 1..=3 {
        record(&db, id, tenant(), subject(), Some(400)).await;
    }
    record(&db, 4, tenant(), someone_else(), Some(400)).await;

    // The host locks row 2 in a transaction of its own.
    let mut host = db.connect().await;
    let host_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut host)
        .await
        .expect("pid");
    let mut tx = host.begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM user_records WHERE id = 2 FOR UPDATE")
        .execute(&mut *tx)
        .await
        .expect("lock row 2");

    let erasing = cohort.clone();
    let erasure = tokio::spawn(async move {
        erasing
            .erase(&scope(), Utc::now(), ErasureRequest::new(subject()))
            .await
    });

    // Wait until the erasure's candidate select waits for row 2's lock.
    let mut waiting = false;
    for _ in 0..3000 {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_catalog.pg_locks l \
             JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid \
             WHERE NOT l.granted AND l.locktype IN ('transactionid', 'tuple') \
               AND a.datname = pg_catalog.current_database() AND l.pid <> $1",
        )
        .bind(host_pid)
        .fetch_one(db.pool())
        .await
        .expect("pg_locks");
        if n > 0 {
            waiting = true;
            break;
        }
        assert!(!erasure.is_finished(), "the erasure ended without waiting");
        tokio::time::sleep(StdDuration::from_millis(10)).await;
    }
    assert!(waiting, "the erasure never waited for row 2");

    // Now the host holds row 2 and commits. The erasure batch holds the
    // entity fence shared, and hold creation (or the fence trigger on
    // retention_holds, for plain SQL) takes it exclusively: a hold created
    // the normal way would wait for the batch, which waits for this
    // transaction, and one of them would die in a deadlock. With the replica
    // role (superuser only) the trigger does not fire, so the hold commits
    // while the erasure's candidate select, whose snapshot predates it, still
    // waits: only the final statement's re-check can then see the hold.
    sqlx::query("SET LOCAL session_replication_role = replica")
        .execute(&mut *tx)
        .await
        .expect("replica role");
    sqlx::query(
        "INSERT INTO retention_holds (hold_id, retained_entity_id, record_id, tenant_id, reason, created_at) \
         VALUES (gen_random_uuid(), $1, '2', $2, 'litigation', now() - interval '1 day')",
    )
    .bind(uuid(USER_RECORD_ID))
    .bind(tenant())
    .execute(&mut *tx)
    .await
    .expect("hold");
    tx.commit().await.expect("commit");

    let result = tokio::time::timeout(StdDuration::from_secs(60), erasure)
        .await
        .expect("the erasure ends")
        .expect("the erasure does not panic")
        .expect("erase");
    assert_eq!(result.kind, RunKind::Erasure);
    assert_eq!(result.status, RunStatus::Succeeded, "{result:#?}");
    assert_eq!(ids(&db).await, vec![2, 4], "the held row is left");
    let users = summary(&result, "UserRecord");
    assert_eq!((users.affected, users.held), (2, 1));
}
