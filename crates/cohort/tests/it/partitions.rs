//! Partition-aware purge (contract PT1, PT2): a table partitioned by `RANGE`
//! on its anchor has its wholly expired partitions detached and dropped, with
//! exact counts and row details in the ledger; a partition that crosses the
//! cutoff, holds a held row or another tenant's rows is swept row by row; a
//! hold racing a drop either waits and finds no row, or protects its row;
//! pg_partman's maintenance keeps working after Cohort's drops.

use std::time::Duration as StdDuration;

use crate::support;
use crate::support::fixtures::{entity_summary, tenant_a, tenant_b};
use crate::support::models::uuid;
use crate::support::{TestDb, TestRules, count, db_with_cohort, wait_for_fence};
use chrono::{DateTime, TimeZone, Utc};
use cohort::holds::{HoldError, HoldRequest};
use cohort::{
    Capabilities, Cohort, Error, MAX_LOCK_WAIT, Options, PartitionDecision, PartitionPlan, Period,
    Rule, RunStatus, Scope, Strategy, SweepOptions, SweepReason, TenantContext,
};
use uuid::Uuid;

const EVENT_ID: &str = "4d1f6c2a-9b3e-4f57-8a20-6c1e5b7d3a90";

/// A tenantless type on a table partitioned by month on its anchor.
#[derive(cohort::Retained)]
#[cohort(
    category = "events",
    anchor = "created_at",
    id = "4d1f6c2a-9b3e-4f57-8a20-6c1e5b7d3a90",
    table = "events",
    tenantless
)]
#[allow(dead_code, reason = "mirrors the table; Cohort reads its descriptor")]
struct Event {
    id: i64,
    created_at: DateTime<Utc>,
    body: String,
}

/// A tenant-scoped type on a table partitioned by month on its anchor.
#[derive(cohort::Retained)]
#[cohort(
    category = "visits",
    anchor = "created_at",
    id = "7a2e9c41-3b5d-4e6f-9a18-2c4d6e8f0b13",
    table = "visits"
)]
#[allow(dead_code, reason = "mirrors the table; Cohort reads its descriptor")]
struct Visit {
    id: i64,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
}

/// A tenantless type on a table partitioned by hash of its id: swept row by row.
#[derive(cohort::Retained)]
#[cohort(
    category = "flat",
    anchor = "created_at",
    id = "c3b1a2d4-5e6f-4a7b-8c9d-0e1f2a3b4c5d",
    table = "hashed",
    tenantless
)]
#[allow(dead_code, reason = "mirrors the table; Cohort reads its descriptor")]
struct Hashed {
    id: i64,
    created_at: DateTime<Utc>,
}

/// The logical now of these tests; with a 90-day period the cutoff is
/// 2025-04-16: January to March are wholly expired, April crosses it.
fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 7, 15, 0, 0, 0).unwrap()
}

fn cutoff() -> &'static str {
    "2025-04-16 00:00:00+00"
}

fn rules(per_row: bool) -> TestRules {
    let rule = Rule::new(Period::days(90), Strategy::Purge);
    let rule = if per_row {
        rule.with_per_row_audit()
    } else {
        rule
    };
    TestRules::new()
        .with("events", Capabilities::only(Strategy::Purge), rule.clone())
        .with("visits", Capabilities::only(Strategy::Purge), rule.clone())
        .with("flat", Capabilities::only(Strategy::Purge), rule)
}

/// Monthly partitions January to July 2025 and a DEFAULT partition; one
/// row every 12 hours from 2024-12-01 (December lands in DEFAULT) to the
/// end of July, ids in time order.
const EVENTS: &str = r#"
CREATE TABLE public.events (id bigint NOT NULL, created_at timestamptz NOT NULL, body text NOT NULL,
    PRIMARY KEY (id, created_at)) PARTITION BY RANGE (created_at);
CREATE INDEX ON public.events (created_at, id);
CREATE TABLE public.events_2025_01 PARTITION OF public.events FOR VALUES FROM ('2025-01-01 00:00+00') TO ('2025-02-01 00:00+00');
CREATE TABLE public.events_2025_02 PARTITION OF public.events FOR VALUES FROM ('2025-02-01 00:00+00') TO ('2025-03-01 00:00+00');
CREATE TABLE public."Events March" PARTITION OF public.events FOR VALUES FROM ('2025-03-01 00:00+00') TO ('2025-04-01 00:00+00');
CREATE TABLE public.events_2025_04 PARTITION OF public.events FOR VALUES FROM ('2025-04-01 00:00+00') TO ('2025-05-01 00:00+00');
CREATE TABLE public.events_2025_05 PARTITION OF public.events FOR VALUES FROM ('2025-05-01 00:00+00') TO ('2025-06-01 00:00+00');
CREATE TABLE public.events_2025_06 PARTITION OF public.events FOR VALUES FROM ('2025-06-01 00:00+00') TO ('2025-07-01 00:00+00');
CREATE TABLE public.events_2025_07 PARTITION OF public.events FOR VALUES FROM ('2025-07-01 00:00+00') TO (MAXVALUE);
CREATE TABLE public.events_default PARTITION OF public.events DEFAULT;
INSERT INTO public.events (id, created_at, body)
SELECT row_number() OVER (ORDER BY g), g, 'b'
FROM generate_series('2024-12-01 00:00+00'::timestamptz, '2025-07-31 12:00+00', interval '12 hours') g;
"#;

async fn setup() -> TestDb {
    let (db, _) = db_with_cohort("public").await;
    db.exec(EVENTS).await;
    db
}

async fn cohort_on(db: &TestDb, per_row: bool, options: Options) -> Cohort {
    Cohort::builder(db.pool().clone())
        .options(options)
        .rules(rules(per_row))
        .entity::<Event>()
        .build()
        .await
        .expect("a table range-partitioned on its anchor is accepted")
}

/// Rows of `events` in `[from, to)`, counted by the test.
async fn rows_between(db: &TestDb, from: &str, to: &str) -> i64 {
    count(
        db,
        &format!(
            "SELECT count(*) FROM public.events WHERE created_at >= '{from}' AND created_at < '{to}'"
        ),
    )
    .await
}

async fn exists(db: &TestDb, relation: &str) -> bool {
    sqlx::query_scalar::<_, bool>("SELECT to_regclass($1) IS NOT NULL")
        .bind(relation)
        .fetch_one(db.pool())
        .await
        .expect("to_regclass")
}

fn plan<'p>(plans: &'p [PartitionPlan], partition: &str) -> &'p PartitionPlan {
    plans
        .iter()
        .find(|p| p.partition == partition)
        .unwrap_or_else(|| panic!("no plan for {partition}: {plans:?}"))
}

/// The expected plan of `events` at [`now`], with the rows of each dropped
/// partition as counted by the test before the sweep.
async fn expected_drops(db: &TestDb) -> Vec<(&'static str, i64)> {
    vec![
        (
            "public.events_2025_01",
            rows_between(db, "2025-01-01", "2025-02-01").await,
        ),
        (
            "public.events_2025_02",
            rows_between(db, "2025-02-01", "2025-03-01").await,
        ),
        (
            "public.Events March",
            rows_between(db, "2025-03-01", "2025-04-01").await,
        ),
    ]
}

fn assert_plans(plans: &[PartitionPlan], drops: &[(&str, i64)]) {
    assert_eq!(plans.len(), 8, "{plans:?}");
    for (name, rows) in drops {
        let p = plan(plans, name);
        assert_eq!(p.decision, PartitionDecision::Drop, "{p:?}");
        assert_eq!(p.rows, Some(*rows as u64), "{p:?}");
    }
    for name in [
        "public.events_2025_04",
        "public.events_2025_05",
        "public.events_2025_06",
        "public.events_2025_07",
    ] {
        assert_eq!(
            plan(plans, name).decision,
            PartitionDecision::Sweep(SweepReason::NotExpired)
        );
    }
    assert_eq!(
        plan(plans, "public.events_default").decision,
        PartitionDecision::Sweep(SweepReason::Default)
    );
}

// contract: PT1
#[tokio::test]
async fn wholly_expired_partitions_are_dropped_with_exact_counts_and_row_details() {
    let db = setup().await;
    let cohort = cohort_on(&db, true, Options::default()).await;
    let drops = expected_drops(&db).await;
    let dropped: i64 = drops.iter().map(|(_, n)| n).sum();
    assert!(dropped > 150, "the premise: the partitions hold rows");
    // Swept row by row: December (in DEFAULT) and 2025-04-01..cutoff.
    let swept = rows_between(&db, "2024-01-01", "2025-01-01").await
        + rows_between(&db, "2025-04-01", cutoff()).await;
    let kept = count(&db, "SELECT count(*) FROM public.events").await - dropped - swept;

    // Preview and dry run say what the sweep will do, and change nothing.
    let preview = cohort
        .preview(&Scope::Tenantless, now())
        .await
        .expect("preview");
    let entry = &preview.entries[0];
    assert_plans(&entry.partitions, &drops);
    assert_eq!(entry.eligible as i64, dropped + swept);
    let dry = cohort
        .sweep_with(&Scope::Tenantless, now(), SweepOptions::default().dry_run())
        .await
        .expect("dry run");
    assert_plans(&entity_summary(&dry, "Event").partitions, &drops);
    assert_eq!(
        entity_summary(&dry, "Event").affected as i64,
        dropped + swept
    );
    assert!(exists(&db, "public.events_2025_01").await);
    assert_eq!(
        count(&db, "SELECT count(*) FROM public.sweep_run_row_detail").await,
        0
    );

    // Record ids of the rows that should go, for the row details.
    let expected_ids: Vec<String> = sqlx::query_scalar(
        "SELECT id::text FROM public.events WHERE created_at < $1::timestamptz ORDER BY created_at",
    )
    .bind(cutoff())
    .fetch_all(db.pool())
    .await
    .expect("ids");

    let result = cohort
        .sweep(&Scope::Tenantless, now())
        .await
        .expect("sweep");
    assert_eq!(result.status, RunStatus::Succeeded);
    let s = entity_summary(&result, "Event");
    assert_plans(&s.partitions, &drops);
    assert_eq!(s.affected as i64, dropped + swept);
    // The expired partitions are gone as tables: dropped, not emptied.
    for (name, _) in &drops {
        let relation = match *name {
            "public.Events March" => "public.\"Events March\"",
            other => other,
        };
        assert!(!exists(&db, relation).await, "{name} was dropped");
    }
    // Everything else is still attached, and only young rows are left.
    assert!(exists(&db, "public.events_2025_04").await);
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM pg_inherits WHERE inhparent = 'public.events'::regclass"
        )
        .await,
        5
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM public.events").await,
        kept,
        "every row before the cutoff is gone, every later one kept"
    );
    assert_eq!(
        count(
            &db,
            &format!(
                "SELECT count(*) FROM public.events WHERE created_at < '{}'",
                cutoff()
            )
        )
        .await,
        0
    );
    // The ledger: the exact total, and one row detail per row, dropped or swept.
    let affected: i64 = sqlx::query_scalar(
        "SELECT affected_count FROM public.sweep_run_entity_summary WHERE run_id = $1",
    )
    .bind(result.run_id)
    .fetch_one(db.pool())
    .await
    .expect("summary");
    assert_eq!(affected, dropped + swept);
    let details: Vec<String> = sqlx::query_scalar(
        "SELECT record_id FROM public.sweep_run_row_detail WHERE run_id = $1 AND action = 'Purge' \
         ORDER BY record_id::bigint",
    )
    .bind(result.run_id)
    .fetch_all(db.pool())
    .await
    .expect("details");
    assert_eq!(details, expected_ids);
    // The bulk row details and the drop's count are chained like any other.
    let mut conn = db.pool().acquire().await.expect("conn");
    let report = cohort::evidence::verify(&mut conn, &cohort::schema::SchemaName::public())
        .await
        .expect("verify");
    assert!(report.is_intact(), "{report}");
    assert_eq!(report.details as usize, expected_ids.len(), "{report}");

    // A second sweep finds nothing more to drop or delete.
    let again = cohort
        .sweep(&Scope::Tenantless, now())
        .await
        .expect("sweep");
    assert_eq!(entity_summary(&again, "Event").affected, 0);
    assert!(!entity_summary(&again, "Event").partitions.is_empty());
    assert!(
        entity_summary(&again, "Event")
            .partitions
            .iter()
            .all(|p| p.decision != PartitionDecision::Drop)
    );
}

// contract: PT1
#[tokio::test]
async fn without_per_row_audit_a_drop_writes_counts_only() {
    let db = setup().await;
    let cohort = cohort_on(&db, false, Options::default()).await;
    let dropped: i64 = expected_drops(&db).await.iter().map(|(_, n)| n).sum();
    let swept = rows_between(&db, "2024-01-01", "2025-01-01").await
        + rows_between(&db, "2025-04-01", cutoff()).await;
    let result = cohort
        .sweep(&Scope::Tenantless, now())
        .await
        .expect("sweep");
    assert_eq!(
        entity_summary(&result, "Event").affected as i64,
        dropped + swept
    );
    assert!(!exists(&db, "public.events_2025_01").await);
    assert_eq!(
        count(&db, "SELECT count(*) FROM public.sweep_run_row_detail").await,
        0
    );
    let affected: i64 = sqlx::query_scalar(
        "SELECT affected_count FROM public.sweep_run_entity_summary WHERE run_id = $1",
    )
    .bind(result.run_id)
    .fetch_one(db.pool())
    .await
    .expect("summary");
    assert_eq!(affected, dropped + swept);
}

/// A hold on the event with id `id`, from now on.
fn hold_on(id: i64) -> HoldRequest {
    HoldRequest::new(
        uuid(EVENT_ID),
        id.to_string(),
        None,
        "litigation",
        Utc::now(),
    )
}

/// The id of the first row of February 2025.
async fn february_row(db: &TestDb) -> i64 {
    count(
        db,
        "SELECT min(id) FROM public.events WHERE created_at >= '2025-02-01' AND created_at < '2025-03-01'",
    )
    .await
}

// contract: PT2
#[tokio::test]
async fn a_partition_with_a_held_row_is_swept_row_by_row_and_the_row_survives() {
    let db = setup().await;
    let cohort = cohort_on(&db, true, Options::default()).await;
    let held = february_row(&db).await;
    let mut conn = db.pool().acquire().await.expect("conn");
    cohort
        .holds()
        .create(&mut conn, hold_on(held))
        .await
        .expect("hold");
    let february = rows_between(&db, "2025-02-01", "2025-03-01").await;
    let result = cohort
        .sweep(&Scope::Tenantless, now())
        .await
        .expect("sweep");
    let s = entity_summary(&result, "Event");
    assert_eq!(
        plan(&s.partitions, "public.events_2025_02").decision,
        PartitionDecision::Sweep(SweepReason::Held)
    );
    assert_eq!(
        plan(&s.partitions, "public.events_2025_01").decision,
        PartitionDecision::Drop
    );
    assert_eq!(s.held, 1);
    assert!(exists(&db, "public.events_2025_02").await);
    assert_eq!(
        count(&db, "SELECT count(*) FROM public.events_2025_02").await,
        1,
        "the partition's other {} rows were swept",
        february - 1
    );
    assert_eq!(
        count(
            &db,
            &format!("SELECT count(*) FROM public.events WHERE id = {held}")
        )
        .await,
        1
    );
    assert!(!exists(&db, "public.events_2025_01").await);
}

// contract: PT2, MH1
#[tokio::test]
async fn a_partition_a_matter_covers_is_not_dropped_and_its_rows_survive() {
    let db = setup().await;
    let cohort = cohort_on(&db, true, Options::default()).await;
    let mut conn = db.pool().acquire().await.expect("conn");
    // A matter over February 2025 (an anchor window), written as a type
    // matter of the tenantless events: no row of it is held one by one.
    let from = chrono::TimeZone::with_ymd_and_hms(&Utc, 2025, 2, 10, 0, 0, 0).single();
    let to = chrono::TimeZone::with_ymd_and_hms(&Utc, 2025, 2, 12, 0, 0, 0).single();
    cohort
        .matters()
        .create(
            &mut conn,
            cohort::holds::MatterRequest::retained_type(uuid(EVENT_ID), None, "audit", "cfo")
                .anchor_window(from, to),
        )
        .await
        .expect("matter");
    let covered = rows_between(&db, "2025-02-10", "2025-02-12").await;
    assert!(covered > 0, "the fixture has rows in the window");
    let result = cohort
        .sweep(&Scope::Tenantless, now())
        .await
        .expect("sweep");
    let s = entity_summary(&result, "Event");
    assert_eq!(
        plan(&s.partitions, "public.events_2025_02").decision,
        PartitionDecision::Sweep(SweepReason::Held)
    );
    assert_eq!(
        plan(&s.partitions, "public.events_2025_01").decision,
        PartitionDecision::Drop
    );
    assert_eq!(s.held, u64::try_from(covered).expect("count"));
    assert_eq!(
        count(&db, "SELECT count(*) FROM public.events_2025_02").await,
        covered,
        "only the window's rows are left in February"
    );
}

/// Waits until a backend of `db`'s database waits for a lock on a relation.
async fn wait_for_relation_lock(db: &TestDb) {
    for _ in 0..3000 {
        let waiting = count(
            db,
            "SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype = 'relation' \
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        )
        .await;
        if waiting > 0 {
            return;
        }
        tokio::time::sleep(StdDuration::from_millis(10)).await;
    }
    panic!("nobody ever waited for a relation lock");
}

// contract: PT2, H11
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_committed_while_the_drop_waits_for_the_fence_keeps_its_partition() {
    let db = setup().await;
    let cohort = cohort_on(&db, true, Options::default()).await;
    let held = february_row(&db).await;
    // The hold is written in a transaction left open: it holds the fence.
    let mut tx = db.pool().begin().await.expect("begin");
    cohort
        .holds()
        .create(&mut tx, hold_on(held))
        .await
        .expect("hold");
    let sweep = tokio::spawn({
        let cohort = cohort.clone();
        async move { cohort.sweep(&Scope::Tenantless, now()).await }
    });
    // The first drop waits for the fence, exclusively, behind the hold.
    let mut probe = db.pool().acquire().await.expect("conn");
    wait_for_fence(&mut probe).await;
    tx.commit().await.expect("commit the hold");
    let result = sweep.await.expect("join").expect("sweep");
    let s = entity_summary(&result, "Event");
    assert_eq!(
        plan(&s.partitions, "public.events_2025_02").decision,
        PartitionDecision::Sweep(SweepReason::Held)
    );
    assert_eq!(
        count(
            &db,
            &format!("SELECT count(*) FROM public.events WHERE id = {held}")
        )
        .await,
        1,
        "the hold committed before the fence was granted protects its row"
    );
}

// contract: PT2, H11
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_created_during_a_drop_waits_and_then_finds_no_row() {
    let db = setup().await;
    let cohort = cohort_on(
        &db,
        true,
        Options {
            lock_wait: MAX_LOCK_WAIT,
            ..Options::default()
        },
    )
    .await;
    let target: i64 = count(&db, "SELECT min(id) FROM public.events_2025_01").await;
    let january = count(&db, "SELECT count(*) FROM public.events_2025_01").await;
    // The gate: a host transaction holds ROW EXCLUSIVE on the first
    // partition, so the drop stops at its LOCK TABLE while it holds the fence.
    let mut gate = db.pool().begin().await.expect("begin");
    sqlx::query("LOCK TABLE public.events_2025_01 IN ROW EXCLUSIVE MODE")
        .execute(&mut *gate)
        .await
        .expect("gate");
    let sweep = tokio::spawn({
        let cohort = cohort.clone();
        async move { cohort.sweep(&Scope::Tenantless, now()).await }
    });
    wait_for_relation_lock(&db).await;
    // Now a hold on a row of that partition: it waits for the fence.
    let holding = tokio::spawn({
        let cohort = cohort.clone();
        let pool = db.pool().clone();
        async move {
            let mut conn = pool.acquire().await.expect("conn");
            cohort.holds().create(&mut conn, hold_on(target)).await
        }
    });
    let mut probe = db.pool().acquire().await.expect("conn");
    wait_for_fence(&mut probe).await;
    gate.commit().await.expect("open the gate");
    let result = sweep.await.expect("join").expect("sweep");
    let written = holding.await.expect("join");
    let s = entity_summary(&result, "Event");
    let p = plan(&s.partitions, "public.events_2025_01");
    assert_eq!(p.decision, PartitionDecision::Drop);
    assert_eq!(p.rows, Some(january as u64));
    assert!(
        matches!(written, Err(Error::Hold(HoldError::NoSuchRow { .. }))),
        "the hold creator waited for the fence, then found no row: {written:?}"
    );
    assert_eq!(
        count(
            &db,
            &format!(
                "SELECT count(*) FROM public.sweep_run_row_detail WHERE record_id = '{target}'"
            )
        )
        .await,
        1,
        "the dropped row is in the ledger"
    );
}

/// `visits`: January 2025 holds only tenant A's rows, February both tenants'.
const VISITS: &str = r#"
CREATE TABLE public.visits (id bigint NOT NULL, tenant_id uuid NOT NULL, created_at timestamptz NOT NULL,
    PRIMARY KEY (id, created_at)) PARTITION BY RANGE (created_at);
CREATE INDEX ON public.visits (tenant_id, created_at, id);
CREATE TABLE public.visits_2025_01 PARTITION OF public.visits FOR VALUES FROM ('2025-01-01 00:00+00') TO ('2025-02-01 00:00+00');
CREATE TABLE public.visits_2025_02 PARTITION OF public.visits FOR VALUES FROM ('2025-02-01 00:00+00') TO ('2025-03-01 00:00+00');
CREATE TABLE public.visits_2025_07 PARTITION OF public.visits FOR VALUES FROM ('2025-07-01 00:00+00') TO ('2025-08-01 00:00+00');
INSERT INTO public.visits SELECT g, '11111111-1111-1111-1111-111111111111', '2025-01-10'::timestamptz + g * interval '1 minute'
FROM generate_series(1, 20) g;
INSERT INTO public.visits SELECT 100 + g,
    CASE WHEN g % 2 = 0 THEN '11111111-1111-1111-1111-111111111111' ELSE '22222222-2222-2222-2222-222222222222' END::uuid,
    '2025-02-10'::timestamptz + g * interval '1 minute'
FROM generate_series(1, 20) g;
INSERT INTO public.visits VALUES (500, '11111111-1111-1111-1111-111111111111', '2025-07-02');
"#;

// contract: PT1
#[tokio::test]
async fn a_tenant_pass_drops_only_a_partition_of_its_own_rows() {
    let (db, _) = db_with_cohort("public").await;
    db.exec(VISITS).await;
    let cohort = Cohort::builder(db.pool().clone())
        .rules(rules(false))
        .entity::<Visit>()
        .build()
        .await
        .expect("model");
    let scope_b = Scope::Tenant(TenantContext::new(tenant_b()));
    let b = cohort.sweep(&scope_b, now()).await.expect("sweep b");
    let s = entity_summary(&b, "Visit");
    assert_eq!(
        plan(&s.partitions, "public.visits_2025_01").decision,
        PartitionDecision::Sweep(SweepReason::OtherTenants)
    );
    assert_eq!(s.affected, 10, "tenant B's February rows, row by row");
    assert!(exists(&db, "public.visits_2025_02").await);

    let scope_a = Scope::Tenant(TenantContext::new(tenant_a()));
    let a = cohort.sweep(&scope_a, now()).await.expect("sweep a");
    let s = entity_summary(&a, "Visit");
    let january = plan(&s.partitions, "public.visits_2025_01");
    assert_eq!(january.decision, PartitionDecision::Drop);
    assert_eq!(january.rows, Some(20));
    // February now holds only A's rows: B's went in B's pass.
    assert_eq!(
        plan(&s.partitions, "public.visits_2025_02").decision,
        PartitionDecision::Drop
    );
    assert_eq!(s.affected, 30);
    assert!(!exists(&db, "public.visits_2025_01").await);
    assert_eq!(count(&db, "SELECT count(*) FROM public.visits").await, 1);
}

// contract: PT1
#[tokio::test]
async fn other_partitioning_schemes_are_swept_row_by_row() {
    let (db, _) = db_with_cohort("public").await;
    db.exec(
        "CREATE TABLE public.hashed (id bigint PRIMARY KEY, created_at timestamptz NOT NULL) \
           PARTITION BY HASH (id); \
         CREATE TABLE public.hashed_0 PARTITION OF public.hashed FOR VALUES WITH (MODULUS 2, REMAINDER 0); \
         CREATE TABLE public.hashed_1 PARTITION OF public.hashed FOR VALUES WITH (MODULUS 2, REMAINDER 1); \
         INSERT INTO public.hashed SELECT g, '2025-01-10'::timestamptz FROM generate_series(1, 10) g;",
    )
    .await;
    let cohort = Cohort::builder(db.pool().clone())
        .rules(rules(false))
        .entity::<Hashed>()
        .build()
        .await
        .expect("model");
    let result = cohort
        .sweep(&Scope::Tenantless, now())
        .await
        .expect("sweep");
    let s = entity_summary(&result, "Hashed");
    assert!(s.partitions.is_empty(), "{:?}", s.partitions);
    assert_eq!(s.affected, 10);
    assert!(exists(&db, "public.hashed_0").await && exists(&db, "public.hashed_1").await);
}

// contract: PT2
#[tokio::test]
async fn pg_partman_maintenance_keeps_working_after_cohort_drops_its_partitions() {
    let installed = std::path::Path::new("/usr/share/postgresql/15/extension/pg_partman.control")
        .exists()
        || std::fs::read_dir("/usr/share/postgresql")
            .into_iter()
            .flatten()
            .flatten()
            .any(|d| d.path().join("extension/pg_partman.control").exists());
    assert!(
        installed,
        "pg_partman is required for this test: install Debian's postgresql-15-partman \
         (apt-get install -y postgresql-15-partman; .ci/run does)"
    );
    let (db, _) = db_with_cohort("public").await;
    db.exec(
        "CREATE SCHEMA partman; CREATE EXTENSION pg_partman SCHEMA partman; \
         CREATE TABLE public.events (id bigint NOT NULL, created_at timestamptz NOT NULL, \
             body text NOT NULL, PRIMARY KEY (id, created_at)) PARTITION BY RANGE (created_at);",
    )
    .await;
    // Monthly partitions from 14 months ago to 3 months ahead, retention off.
    let start = Utc::now() - chrono::Duration::days(14 * 31);
    db.exec(&format!(
        "SELECT partman.create_parent(p_parent_table => 'public.events', p_control => 'created_at', \
             p_type => 'native', p_interval => 'monthly', p_premake => 3, \
             p_start_partition => '{}'); \
         UPDATE partman.part_config SET retention = NULL WHERE parent_table = 'public.events'; \
         INSERT INTO public.events (id, created_at, body) \
         SELECT row_number() OVER (ORDER BY g), g, 'b' \
         FROM generate_series('{}'::timestamptz, now(), interval '1 day') g;",
        start.format("%Y-%m-%d"),
        start.format("%Y-%m-%d"),
    ))
    .await;
    let before = count(
        &db,
        "SELECT count(*) FROM pg_inherits WHERE inhparent = 'public.events'::regclass",
    )
    .await;
    let cohort = Cohort::builder(db.pool().clone())
        .rules(TestRules::new().with(
            "events",
            Capabilities::only(Strategy::Purge),
            Rule::new(Period::days(180), Strategy::Purge).with_per_row_audit(),
        ))
        .entity::<Event>()
        .build()
        .await
        .expect("a partman-managed table is accepted");
    let now = Utc::now();
    let result = cohort.sweep(&Scope::Tenantless, now).await.expect("sweep");
    assert_eq!(result.status, RunStatus::Succeeded);
    let s = entity_summary(&result, "Event");
    let drops = s
        .partitions
        .iter()
        .filter(|p| p.decision == PartitionDecision::Drop)
        .count();
    assert!(drops >= 6, "old months dropped: {:?}", s.partitions);
    assert!(
        s.partitions
            .iter()
            .any(|p| p.decision == PartitionDecision::Sweep(SweepReason::Default)),
        "partman's default partition is never dropped: {:?}",
        s.partitions
    );
    let expired_left = count(
        &db,
        &format!(
            "SELECT count(*) FROM public.events WHERE created_at < '{}'::timestamptz - interval '180 days'",
            now.to_rfc3339()
        ),
    )
    .await;
    assert_eq!(expired_left, 0);
    let details = count(
        &db,
        "SELECT count(*) FROM public.sweep_run_row_detail WHERE action = 'Purge'",
    )
    .await;
    assert_eq!(details as u64, s.affected);
    // partman's maintenance runs without error, and still creates partitions.
    db.exec("SELECT partman.run_maintenance('public.events')")
        .await;
    db.exec(
        "UPDATE partman.part_config SET premake = 6 WHERE parent_table = 'public.events'; \
         SELECT partman.run_maintenance('public.events');",
    )
    .await;
    let after = count(
        &db,
        "SELECT count(*) FROM pg_inherits WHERE inhparent = 'public.events'::regclass",
    )
    .await;
    assert_eq!(
        after,
        before - drops as i64 + 3,
        "partman made three more future partitions"
    );
    let shown = count(
        &db,
        "SELECT count(*) FROM partman.show_partitions('public.events')",
    )
    .await;
    assert_eq!(
        shown,
        after - 1,
        "show_partitions lists all but the default"
    );
    db.exec("INSERT INTO public.events VALUES (-1, now(), 'new')")
        .await;
}

/// A row handler that keeps each row's id.
struct Keeper;

impl cohort::handlers::RowHandler for Keeper {
    type Snapshot = String;

    fn capture(
        &self,
        row: &cohort::handlers::CapturedRow,
    ) -> Result<String, cohort::handlers::HandlerError> {
        Ok(row.record_id().to_owned())
    }

    fn deliver<'a>(
        &'a self,
        _ctx: &'a cohort::handlers::HandlerContext,
        _snapshot: String,
    ) -> cohort::BoxFuture<'a, Result<(), cohort::handlers::HandlerError>> {
        Box::pin(async { Ok(()) })
    }
}

// contract: PT1
#[tokio::test]
async fn a_type_with_row_handlers_keeps_every_partition_to_the_batches() {
    let db = setup().await;
    let cohort = Cohort::builder(db.pool().clone())
        .rules(rules(false))
        .entity::<Event>()
        .row_handler::<Event, _>(Keeper)
        .build()
        .await
        .expect("model");
    let expired = count(
        &db,
        &format!(
            "SELECT count(*) FROM public.events WHERE created_at < '{}'",
            cutoff()
        ),
    )
    .await;
    let dry = cohort
        .sweep_with(&Scope::Tenantless, now(), SweepOptions::default().dry_run())
        .await
        .expect("dry run");
    assert_eq!(
        plan(
            &entity_summary(&dry, "Event").partitions,
            "public.events_2025_01"
        )
        .decision,
        PartitionDecision::Sweep(SweepReason::RowHandlers),
        "a dry run plans as the real run will"
    );
    let result = cohort
        .sweep(&Scope::Tenantless, now())
        .await
        .expect("sweep");
    let s = entity_summary(&result, "Event");
    assert_eq!(
        plan(&s.partitions, "public.events_2025_01").decision,
        PartitionDecision::Sweep(SweepReason::RowHandlers)
    );
    assert_eq!(s.affected as i64, expired);
    assert!(exists(&db, "public.events_2025_01").await);
    // Every row was captured: one row detail with its snapshot each.
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM public.sweep_run_row_detail WHERE captured_payload IS NOT NULL"
        )
        .await,
        expired
    );
}

// contract: PT1
#[tokio::test]
async fn a_drop_postgresql_refuses_rolls_back_and_the_partition_is_swept_row_by_row() {
    let db = setup().await;
    // A view on the partition: DROP TABLE fails (2BP01) after the row
    // details and the count were written in the same transaction.
    db.exec("CREATE VIEW public.january AS SELECT * FROM public.events_2025_01")
        .await;
    let cohort = cohort_on(&db, true, Options::default()).await;
    let expired = count(
        &db,
        &format!(
            "SELECT count(*) FROM public.events WHERE created_at < '{}'",
            cutoff()
        ),
    )
    .await;
    let result = cohort
        .sweep(&Scope::Tenantless, now())
        .await
        .expect("sweep");
    assert_eq!(result.status, RunStatus::Succeeded);
    let s = entity_summary(&result, "Event");
    assert_eq!(
        plan(&s.partitions, "public.events_2025_01").decision,
        PartitionDecision::Sweep(SweepReason::DropRefused)
    );
    assert_eq!(
        plan(&s.partitions, "public.events_2025_02").decision,
        PartitionDecision::Drop
    );
    assert!(exists(&db, "public.events_2025_01").await);
    assert_eq!(
        count(&db, "SELECT count(*) FROM public.events_2025_01").await,
        0
    );
    // Counted and detailed once: the rolled-back attempt left nothing.
    assert_eq!(s.affected as i64, expired);
    assert_eq!(
        count(&db, "SELECT count(*) FROM public.sweep_run_row_detail").await,
        expired
    );
    let affected: i64 = sqlx::query_scalar(
        "SELECT affected_count FROM public.sweep_run_entity_summary WHERE run_id = $1",
    )
    .bind(result.run_id)
    .fetch_one(db.pool())
    .await
    .expect("summary");
    assert_eq!(affected, expired);
}

// contract: PT1
#[tokio::test]
async fn with_partition_drops_off_every_row_is_swept_and_no_partition_dropped() {
    let db = setup().await;
    let cohort = cohort_on(
        &db,
        false,
        Options {
            partition_drops: false,
            ..Options::default()
        },
    )
    .await;
    let expired = count(
        &db,
        &format!(
            "SELECT count(*) FROM public.events WHERE created_at < '{}'",
            cutoff()
        ),
    )
    .await;
    let result = cohort
        .sweep(&Scope::Tenantless, now())
        .await
        .expect("sweep");
    let s = entity_summary(&result, "Event");
    assert!(s.partitions.is_empty(), "{:?}", s.partitions);
    assert_eq!(s.affected as i64, expired);
    assert!(exists(&db, "public.events_2025_01").await);
    assert_eq!(
        count(&db, "SELECT count(*) FROM public.events_2025_01").await,
        0
    );
}

// contract: PT1, SEC1
#[tokio::test]
async fn a_least_privileged_role_cannot_drop_so_every_partition_is_swept_row_by_row() {
    let db = TestDb::least_privileged().await;
    db.exec(&cohort::schema::ddl(&cohort::schema::SchemaName::public()))
        .await;
    db.exec(EVENTS).await;
    let builder = Cohort::builder(db.engine_pool().clone())
        .rules(rules(true))
        .entity::<Event>();
    let cohort = support::build_engine(&db, builder)
        .await
        .expect("the generated grants suffice");
    let expired = count(
        &db,
        &format!(
            "SELECT count(*) FROM public.events WHERE created_at < '{}'",
            cutoff()
        ),
    )
    .await;
    let result = cohort
        .sweep(&Scope::Tenantless, now())
        .await
        .expect("sweep");
    assert_eq!(
        result.status,
        RunStatus::Succeeded,
        "{:?}",
        result.entity_failures
    );
    let s = entity_summary(&result, "Event");
    assert_eq!(
        plan(&s.partitions, "public.events_2025_01").decision,
        PartitionDecision::Sweep(SweepReason::DropRefused),
        "the role owns no partition: {:?}",
        s.partitions
    );
    assert_eq!(s.affected as i64, expired);
    assert!(exists(&db, "public.events_2025_01").await);
    assert_eq!(
        count(
            &db,
            &format!(
                "SELECT count(*) FROM public.events WHERE created_at < '{}'",
                cutoff()
            )
        )
        .await,
        0
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM public.sweep_run_row_detail").await,
        expired
    );
}
