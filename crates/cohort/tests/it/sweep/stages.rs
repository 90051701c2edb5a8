//! Staged rules (contract SL1): soft-delete then purge after a grace
//! period counted from `deleted_at`, anonymise then purge counted from
//! `anonymised_at`; each stage with its own batches and summary, holds,
//! the same-run guard, previews, erasure as the last stage, and bad stage
//! lists refused with every problem at once.

use chrono::{DateTime, Duration, Utc};
use cohort::ledger::FailureKind;
use cohort::{
    Capabilities, Cohort, ErasureRequest, Error, Options, Period, Rule, RunStatus, Strategy,
};
use uuid::Uuid;

use crate::support::fixtures::{fixed_now, hold_sql, scope_a, tenant_a};
use crate::support::models::{CaseContact, UserRecord};
use crate::support::{BuildEngine, TestDb, TestRules, count, db_with_cohort};

const ACCOUNT_ID: &str = "8d2f4c1a-3b5e-4a6f-9c7d-1e2f3a4b5c60";

/// Closed accounts: soft-deleted, then purged.
#[derive(cohort::Retained)]
#[cohort(
    category = "accounts",
    anchor = "closed_at",
    id = "8d2f4c1a-3b5e-4a6f-9c7d-1e2f3a4b5c60",
    table = "accounts"
)]
#[allow(dead_code, reason = "only the descriptor is read")]
struct Account {
    id: i64,
    tenant_id: Uuid,
    closed_at: DateTime<Utc>,
    is_deleted: bool,
    deleted_at: Option<DateTime<Utc>>,
    #[cohort(erasure_subject)]
    email: String,
}

const ACCOUNTS: &str = "
    CREATE TABLE public.accounts (
        id bigint PRIMARY KEY, tenant_id uuid NOT NULL, closed_at timestamptz NOT NULL,
        is_deleted boolean NOT NULL DEFAULT false, deleted_at timestamptz, email text NOT NULL);
    CREATE INDEX ON public.accounts (tenant_id, closed_at, id);
    CREATE INDEX ON public.accounts (tenant_id, deleted_at, id);";

fn soft_then_purge() -> Rule {
    Rule::new(Period::days(30), Strategy::SoftDelete).then(Period::days(60), Strategy::Purge)
}

fn staged_caps() -> Capabilities {
    Capabilities::only(Strategy::SoftDelete)
        .and(Strategy::Purge)
        .staged()
}

async fn accounts_db() -> TestDb {
    let (db, _) = db_with_cohort("public").await;
    db.exec(ACCOUNTS).await;
    db
}

async fn build(db: &TestDb, rule: Rule) -> Cohort {
    Cohort::builder(db.engine_pool().clone())
        .rules(TestRules::new().with("accounts", staged_caps(), rule))
        .entity::<Account>()
        .build_engine(db)
        .await
        .expect("valid model")
}

/// An account closed at `closed`, soft-deleted at `deleted` (when `Some`).
async fn account(
    db: &TestDb,
    id: i64,
    closed: DateTime<Utc>,
    deleted: Option<DateTime<Utc>>,
    is_deleted: bool,
) {
    sqlx::query(
        "INSERT INTO public.accounts (id, tenant_id, closed_at, is_deleted, deleted_at, email) \
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(id)
    .bind(tenant_a())
    .bind(closed)
    .bind(is_deleted)
    .bind(deleted)
    .bind(format!("user{id}@example.org"))
    .execute(db.pool())
    .await
    .expect("insert account");
}

/// `(is_deleted, deleted_at is set)`, or `None` when the row is gone.
async fn state(db: &TestDb, id: i64) -> Option<(bool, bool)> {
    sqlx::query_as("SELECT is_deleted, deleted_at IS NOT NULL FROM public.accounts WHERE id = $1")
        .bind(id)
        .fetch_optional(db.pool())
        .await
        .expect("read account")
}

fn summary(result: &cohort::RunResult, strategy: Strategy) -> &cohort::ledger::EntitySummary {
    result
        .summaries
        .iter()
        .find(|s| s.strategy == Some(strategy))
        .unwrap_or_else(|| panic!("no {strategy} summary in {result:#?}"))
}

// contract: SL1
#[tokio::test]
async fn soft_delete_then_purge_after_the_grace_period_to_the_microsecond() {
    let db = accounts_db().await;
    let now = fixed_now();
    let micro = Duration::microseconds(1);
    let grace = now - Duration::days(60);
    // 1: closed 40 days ago: soft-deleted now, not purged by the same sweep.
    account(&db, 1, now - Duration::days(40), None, false).await;
    // 2: soft-deleted one microsecond before the grace period ended: purged.
    account(&db, 2, now - Duration::days(200), Some(grace - micro), true).await;
    // 3: one microsecond after: kept, still soft-deleted.
    account(&db, 3, now - Duration::days(200), Some(grace + micro), true).await;
    // 4: long past its grace period, but held: kept.
    account(
        &db,
        4,
        now - Duration::days(300),
        Some(now - Duration::days(90)),
        true,
    )
    .await;
    // 5: the host restored it (flag cleared) during its grace period: kept,
    // and its young anchor keeps the first stage away too.
    account(
        &db,
        5,
        now - Duration::days(10),
        Some(now - Duration::days(90)),
        false,
    )
    .await;
    // 6: young and live: untouched.
    account(&db, 6, now - Duration::days(5), None, false).await;
    // 7: exactly at the grace period's end (anchor strictly older): kept.
    account(&db, 7, now - Duration::days(200), Some(grace), true).await;

    let cohort = build(&db, soft_then_purge()).await;
    hold_sql(&db, ACCOUNT_ID, 4, tenant_a()).await;
    let result = cohort.sweep(&scope_a(), now).await.expect("sweep");
    assert_eq!(result.status, RunStatus::Succeeded, "{result:#?}");

    assert_eq!(
        state(&db, 1).await,
        Some((true, true)),
        "stage 1 soft-deleted it"
    );
    assert_eq!(state(&db, 2).await, None, "stage 2 purged it");
    assert_eq!(
        state(&db, 3).await,
        Some((true, true)),
        "still in its grace period"
    );
    assert_eq!(state(&db, 4).await, Some((true, true)), "held");
    assert_eq!(
        state(&db, 5).await,
        Some((false, true)),
        "restored by the host"
    );
    assert_eq!(state(&db, 6).await, Some((false, false)), "young");
    assert_eq!(
        state(&db, 7).await,
        Some((true, true)),
        "not strictly older"
    );

    // One summary per stage, in order, each with its own counts and cutoff.
    let strategies: Vec<_> = result.summaries.iter().map(|s| s.strategy).collect();
    assert_eq!(
        strategies,
        vec![Some(Strategy::SoftDelete), Some(Strategy::Purge)]
    );
    let first = summary(&result, Strategy::SoftDelete);
    assert_eq!((first.affected, first.held, first.skipped), (1, 0, 0));
    assert_eq!(first.cutoff, Some(now - Duration::days(30)));
    let second = summary(&result, Strategy::Purge);
    assert_eq!((second.affected, second.held, second.skipped), (1, 1, 0));
    assert_eq!(second.cutoff, Some(grace));
    assert_eq!(second.applied_period, Some(Period::days(60)));

    // The ledger records each stage as it happened.
    let rows: Vec<(String, i64, i64)> = sqlx::query_as(
        "SELECT strategy, affected_count, held_count FROM sweep_run_entity_summary \
         WHERE run_id = $1 ORDER BY summary_id",
    )
    .bind(result.run_id)
    .fetch_all(db.pool())
    .await
    .expect("ledger");
    assert_eq!(
        rows,
        vec![("SoftDelete".to_owned(), 1, 0), ("Purge".to_owned(), 1, 1)]
    );
    let mut conn = db.connect().await;
    let schema = cohort::schema::SchemaName::new("public").expect("schema");
    let report = cohort::evidence::verify(&mut conn, &schema)
        .await
        .expect("verify");
    assert!(report.is_intact(), "{report:#?}");
}

// contract: SL1
#[tokio::test]
async fn a_later_stage_never_takes_a_row_stamped_by_the_same_sweep() {
    let db = accounts_db().await;
    // A logical time far ahead of the database clock: the row this sweep
    // soft-deletes is stamped now, which that time would judge 40 days past
    // its grace period.
    let now = Utc::now() + Duration::days(100);
    account(&db, 1, now - Duration::days(40), None, false).await;
    let cohort = build(&db, soft_then_purge()).await;

    let result = cohort.sweep(&scope_a(), now).await.expect("sweep");
    assert_eq!(state(&db, 1).await, Some((true, true)), "{result:#?}");
    assert_eq!(summary(&result, Strategy::Purge).affected, 0);

    // The next sweep at that time judges the stamp like any other.
    let result = cohort.sweep(&scope_a(), now).await.expect("second sweep");
    assert_eq!(state(&db, 1).await, None, "{result:#?}");
    assert_eq!(summary(&result, Strategy::Purge).affected, 1);
    assert_eq!(summary(&result, Strategy::SoftDelete).affected, 0);
}

// contract: SL1
#[tokio::test]
async fn anonymise_then_purge_with_a_custom_anonymiser() {
    let (db, _) = db_with_cohort("public").await;
    db.exec(crate::support::models::TABLES).await;
    let now = fixed_now();
    let contact = |id: Uuid, created: DateTime<Utc>, anonymised: Option<DateTime<Utc>>| {
        let db = &db;
        async move {
            sqlx::query(
                "INSERT INTO case_contacts (id, tenant_id, created_at, anonymised_at, email, full_name, \
                 phone, external_ref) VALUES ($1, $2, $3, $4, 'a@example.org', 'Ann', '555', 'ref-1')",
            )
            .bind(id)
            .bind(tenant_a())
            .bind(created)
            .bind(anonymised)
            .execute(db.pool())
            .await
            .expect("insert contact");
        }
    };
    let (fresh, stale, recent) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    contact(fresh, now - Duration::days(40), None).await;
    contact(
        stale,
        now - Duration::days(400),
        Some(now - Duration::days(31)),
    )
    .await;
    contact(
        recent,
        now - Duration::days(400),
        Some(now - Duration::days(29)),
    )
    .await;

    let rules = TestRules::new().with(
        "case-contacts",
        Capabilities::only(Strategy::Anonymise)
            .and(Strategy::Purge)
            .staged(),
        Rule::new(Period::days(30), Strategy::Anonymise).then(Period::days(30), Strategy::Purge),
    );
    let cohort = Cohort::builder(db.engine_pool().clone())
        .rules(rules)
        .entity::<CaseContact>()
        .build_engine(&db)
        .await
        .expect("valid model");
    let result = cohort.sweep(&scope_a(), now).await.expect("sweep");
    assert_eq!(result.status, RunStatus::Succeeded, "{result:#?}");
    assert_eq!(summary(&result, Strategy::Anonymise).affected, 1);
    assert_eq!(summary(&result, Strategy::Purge).affected, 1);

    let left: Vec<(Uuid, String, bool)> = sqlx::query_as(
        "SELECT id, external_ref, anonymised_at IS NOT NULL FROM case_contacts ORDER BY created_at",
    )
    .fetch_all(db.pool())
    .await
    .expect("contacts");
    let by_id = |id: Uuid| left.iter().find(|r| r.0 == id).cloned();
    assert_eq!(by_id(stale), None, "anonymised 31 days ago: purged");
    assert!(
        by_id(recent).is_some_and(|r| r.2),
        "anonymised 29 days ago: kept"
    );
    let fresh = by_id(fresh).expect("anonymised, not purged");
    assert!(fresh.2, "stamped");
    assert_ne!(fresh.1, "ref-1", "the custom anonymiser ran");
}

// contract: SL1
#[tokio::test]
async fn a_preview_counts_each_stage() {
    let db = accounts_db().await;
    let now = fixed_now();
    account(&db, 1, now - Duration::days(40), None, false).await;
    account(&db, 2, now - Duration::days(40), None, false).await;
    account(
        &db,
        3,
        now - Duration::days(200),
        Some(now - Duration::days(61)),
        true,
    )
    .await;
    let cohort = build(&db, soft_then_purge()).await;
    let preview = cohort.preview(&scope_a(), now).await.expect("preview");
    let counts: Vec<_> = preview
        .entries
        .iter()
        .map(|e| (e.strategy, e.eligible))
        .collect();
    assert_eq!(
        counts,
        vec![(Some(Strategy::SoftDelete), 2), (Some(Strategy::Purge), 1)]
    );
}

// contract: SL1
#[tokio::test]
async fn erasure_on_a_staged_category_erases_as_its_last_stage() {
    let db = accounts_db().await;
    let now = fixed_now();
    account(&db, 1, now - Duration::days(1), None, false).await;
    let cohort = build(&db, soft_then_purge()).await;
    // A soft-delete first stage does not make the category soft-delete for
    // erasure's refusal: no opt-in is needed, and the row goes.
    let result = cohort
        .erase(&scope_a(), now, ErasureRequest::new("user1@example.org"))
        .await
        .expect("erasure");
    assert_eq!(result.status, RunStatus::Succeeded, "{result:#?}");
    assert_eq!(result.summaries[0].strategy, Some(Strategy::Purge));
    assert_eq!(state(&db, 1).await, None);
}

// contract: SL1
#[tokio::test]
async fn a_bad_stage_list_fails_the_type_with_every_problem_and_changes_nothing() {
    let db = accounts_db().await;
    let now = fixed_now();
    account(&db, 1, now - Duration::days(400), None, false).await;
    let bad = Rule::new(Period::days(30), Strategy::Purge)
        .then(Period::ZERO, Strategy::SoftDelete)
        .then(Period::days(1), Strategy::Purge);
    let cohort = build(&db, bad).await;
    let result = cohort.sweep(&scope_a(), now).await.expect("sweep");
    assert_eq!(result.status, RunStatus::Failed, "{result:#?}");
    let failure = &result.entity_failures[0].failure;
    assert_eq!(failure.kind, FailureKind::InvalidStages);
    assert_eq!(state(&db, 1).await, Some((false, false)), "nothing changed");

    let problems = Rule::new(Period::days(30), Strategy::Purge)
        .then(Period::ZERO, Strategy::SoftDelete)
        .then(Period::days(1), Strategy::Purge)
        .stage_problems();
    // Stage 2: zero period, after a purge; stage 3: after a purge, repeated.
    assert_eq!(problems.len(), 4, "{problems:?}");

    // A staged rule of a category whose capabilities do not say so.
    let cohort = Cohort::builder(db.engine_pool().clone())
        .rules(TestRules::new().with(
            "accounts",
            Capabilities::only(Strategy::SoftDelete).and(Strategy::Purge),
            soft_then_purge(),
        ))
        .entity::<Account>()
        .build_engine(&db)
        .await
        .expect("valid model");
    let result = cohort.sweep(&scope_a(), now).await.expect("sweep");
    assert_eq!(
        result.entity_failures[0].failure.kind,
        FailureKind::UndeclaredStrategy,
        "{result:#?}"
    );
    assert_eq!(state(&db, 1).await, Some((false, false)), "nothing changed");
}

// contract: SL1
#[tokio::test]
async fn start_up_refuses_a_staged_soft_delete_without_a_deleted_at_column() {
    let (db, _) = db_with_cohort("public").await;
    db.exec(crate::support::models::TABLES).await;
    let err = Cohort::builder(db.engine_pool().clone())
        .options(Options::default())
        .rules(
            TestRules::new().with(
                "user-data",
                Capabilities::only(Strategy::SoftDelete)
                    .and(Strategy::Purge)
                    .staged(),
                soft_then_purge(),
            ),
        )
        .entity::<UserRecord>()
        .build_engine(&db)
        .await
        .expect_err("no deleted-at column");
    let Error::Validation(report) = &err else {
        panic!("expected a validation report, got {err:?}");
    };
    assert!(report.to_string().contains("deleted-at column"), "{report}");
}

// contract: SL1
#[tokio::test]
async fn a_partitioned_table_is_staged_row_by_row_never_by_dropping_a_partition() {
    let (db, _) = db_with_cohort("public").await;
    db.exec(
        "CREATE TABLE public.accounts (
             id bigint NOT NULL, tenant_id uuid NOT NULL, closed_at timestamptz NOT NULL,
             is_deleted boolean NOT NULL DEFAULT false, deleted_at timestamptz, email text NOT NULL,
             PRIMARY KEY (id, closed_at)) PARTITION BY RANGE (closed_at);
         CREATE TABLE public.accounts_old PARTITION OF public.accounts
             FOR VALUES FROM (MINVALUE) TO ('2026-01-01');
         CREATE TABLE public.accounts_new PARTITION OF public.accounts
             FOR VALUES FROM ('2026-01-01') TO (MAXVALUE);
         CREATE INDEX ON public.accounts (tenant_id, closed_at, id);",
    )
    .await;
    let now = fixed_now();
    // Both in the wholly expired partition: one soft-deleted long ago (the
    // purge stage takes it), one live (the soft-delete stage takes it; a
    // partition drop would have taken it too).
    account(
        &db,
        1,
        now - Duration::days(400),
        Some(now - Duration::days(90)),
        true,
    )
    .await;
    account(&db, 2, now - Duration::days(400), None, false).await;
    account(&db, 3, now - Duration::days(40), None, false).await;
    let cohort = build(&db, soft_then_purge()).await;
    let result = cohort.sweep(&scope_a(), now).await.expect("sweep");
    assert_eq!(result.status, RunStatus::Succeeded, "{result:#?}");
    assert_eq!(state(&db, 1).await, None, "purged after its grace period");
    assert_eq!(
        state(&db, 2).await,
        Some((true, true)),
        "soft-deleted, kept"
    );
    assert_eq!(
        state(&db, 3).await,
        Some((true, true)),
        "soft-deleted, kept"
    );
    assert!(
        result.summaries.iter().all(|s| s.partitions.is_empty()),
        "no partition plan for a staged rule: {result:#?}"
    );
    let partitions = count(
        &db,
        "SELECT count(*) FROM pg_inherits WHERE inhparent = 'public.accounts'::regclass",
    )
    .await;
    assert_eq!(partitions, 2, "no partition was dropped");
}
