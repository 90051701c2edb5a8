//! Event-based retention (contract SL4): rows of two types keyed by one
//! subject become eligible exactly at the event's time plus the period; no
//! event, no removal (counted); a withdrawn event protects again; an event
//! not committed before a batch's statement does not count; events of one
//! tenant never reach another's rows; the events API's refusals; events as
//! links of the evidence chain.

use chrono::{DateTime, Duration, Utc};
use cohort::events::{EventError, EventFilter, EventRequest};
use cohort::{Capabilities, Cohort, CohortBuilder, Error, Period, Rule, RunStatus, Strategy};
use uuid::Uuid;

use crate::support::fixtures::{fixed_now, scope_a, tenant_a, tenant_b};
use crate::support::{BuildEngine, TestDb, TestRules, count, db_with_cohort};

/// Customers' orders: purged two years after the account is closed.
#[derive(cohort::Retained)]
#[cohort(
    category = "closed-accounts",
    anchor = "placed_at",
    id = "2a3b4c5d-6e7f-4a8b-9c0d-1e2f3a4b5c01",
    table = "orders"
)]
#[allow(dead_code, reason = "only the descriptor is read")]
struct Order {
    id: i64,
    tenant_id: Uuid,
    placed_at: DateTime<Utc>,
    #[cohort(event_key)]
    customer_id: Uuid,
}

/// Customers' tickets, keyed by the same subject.
#[derive(cohort::Retained)]
#[cohort(
    category = "closed-accounts",
    anchor = "opened_at",
    id = "2a3b4c5d-6e7f-4a8b-9c0d-1e2f3a4b5c02",
    table = "tickets"
)]
#[allow(dead_code, reason = "only the descriptor is read")]
struct Ticket {
    id: i64,
    tenant_id: Uuid,
    opened_at: DateTime<Utc>,
    #[cohort(event_key)]
    customer: Uuid,
}

const TABLES: &str = "
    CREATE TABLE public.orders (id bigint PRIMARY KEY, tenant_id uuid NOT NULL,
        placed_at timestamptz NOT NULL, customer_id uuid NOT NULL);
    CREATE INDEX ON public.orders (tenant_id, placed_at, id);
    CREATE TABLE public.tickets (id bigint PRIMARY KEY, tenant_id uuid NOT NULL,
        opened_at timestamptz NOT NULL, customer uuid NOT NULL);
    CREATE INDEX ON public.tickets (tenant_id, opened_at, id);";

const CLOSED: &str = "account-closed";

fn builder(db: &TestDb) -> CohortBuilder {
    Cohort::builder(db.engine_pool().clone())
        .rules(TestRules::new().with(
            "closed-accounts",
            Capabilities::only(Strategy::Purge).after_event(CLOSED),
            Rule::new(Period::days(730), Strategy::Purge).after_event(CLOSED),
        ))
        .entity::<Order>()
        .entity::<Ticket>()
}

async fn setup() -> (TestDb, Cohort) {
    let (db, _) = db_with_cohort("public").await;
    db.exec(TABLES).await;
    let cohort = builder(&db).build_engine(&db).await.expect("valid model");
    (db, cohort)
}

async fn order(db: &TestDb, id: i64, tenant: Uuid, customer: Uuid) {
    sqlx::query(
        "INSERT INTO public.orders (id, tenant_id, placed_at, customer_id) \
         VALUES ($1, $2, now() - interval '5 years', $3)",
    )
    .bind(id)
    .bind(tenant)
    .bind(customer)
    .execute(db.pool())
    .await
    .expect("insert order");
}

async fn ticket(db: &TestDb, id: i64, customer: Uuid) {
    sqlx::query(
        "INSERT INTO public.tickets (id, tenant_id, opened_at, customer) \
         VALUES ($1, $2, now() - interval '5 years', $3)",
    )
    .bind(id)
    .bind(tenant_a())
    .bind(customer)
    .execute(db.pool())
    .await
    .expect("insert ticket");
}

async fn ids(db: &TestDb, table: &str) -> Vec<i64> {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT id FROM public.{table} ORDER BY id"
    )))
    .fetch_all(db.pool())
    .await
    .expect("ids")
}

fn closed(customer: Uuid, at: DateTime<Utc>) -> EventRequest {
    EventRequest::new(CLOSED, customer.to_string(), at, "support desk").tenant(tenant_a())
}

// contract: SL4
#[tokio::test]
async fn rows_of_every_type_keyed_by_a_subject_go_exactly_at_its_event_plus_the_period() {
    let (db, cohort) = setup().await;
    let now = fixed_now();
    let period = Duration::days(730);
    let micro = Duration::microseconds(1);
    let (gone, early, open) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    order(&db, 1, tenant_a(), gone).await;
    ticket(&db, 1, gone).await;
    order(&db, 2, tenant_a(), early).await;
    order(&db, 3, tenant_a(), open).await;
    // Closed one microsecond past the period, and one microsecond short.
    cohort
        .events()
        .record(closed(gone, now - period - micro))
        .await
        .expect("record");
    cohort
        .events()
        .record(closed(early, now - period + micro))
        .await
        .expect("record");

    let preview = cohort.preview(&scope_a(), now).await.expect("preview");
    let orders = &preview.entries[0];
    assert_eq!(
        (orders.eligible, orders.null_anchor),
        (1, 1),
        "one order eligible; one whose event has not happened: {preview:#?}"
    );

    let result = cohort.sweep(&scope_a(), now).await.expect("sweep");
    assert_eq!(result.status, RunStatus::Succeeded, "{result:#?}");
    assert_eq!(ids(&db, "orders").await, vec![2, 3]);
    assert_eq!(ids(&db, "tickets").await, Vec::<i64>::new());
    let orders = &result.summaries[0];
    assert_eq!(orders.affected, 1);
    // The order whose account is still open is kept and counted.
    assert_eq!(orders.null_anchor, 1, "{result:#?}");
}

// contract: SL4
#[tokio::test]
async fn a_withdrawn_event_protects_again_and_a_correction_takes_effect_at_the_next_sweep() {
    let (db, cohort) = setup().await;
    let now = fixed_now();
    let customer = Uuid::new_v4();
    order(&db, 1, tenant_a(), customer).await;
    order(&db, 2, tenant_a(), customer).await;
    let event = cohort
        .events()
        .record(closed(customer, now - Duration::days(800)))
        .await
        .expect("record");
    cohort
        .events()
        .withdraw(event.event_id, "support desk", "closed by mistake")
        .await
        .expect("withdraw");
    cohort.sweep(&scope_a(), now).await.expect("sweep");
    assert_eq!(ids(&db, "orders").await, vec![1, 2], "withdrawn: kept");

    // Re-recorded (the correction): the next sweep removes them.
    cohort
        .events()
        .record(closed(customer, now - Duration::days(800)))
        .await
        .expect("record again");
    cohort.sweep(&scope_a(), now).await.expect("sweep");
    assert_eq!(ids(&db, "orders").await, Vec::<i64>::new());

    let events = cohort
        .events()
        .list(
            &EventFilter::new()
                .subject_key(customer.to_string())
                .with_withdrawn(),
        )
        .await
        .expect("list");
    assert_eq!(events.len(), 2);
    assert_eq!(events.iter().filter(|e| e.is_live()).count(), 1);
}

// contract: SL4
#[tokio::test]
async fn an_event_not_committed_before_the_statement_does_not_count() {
    let (db, cohort) = setup().await;
    let now = fixed_now();
    let customer = Uuid::new_v4();
    order(&db, 1, tenant_a(), customer).await;
    // The event is written in a transaction left open while the sweep runs.
    let mut open = db.connect().await;
    sqlx::query("BEGIN")
        .execute(&mut open)
        .await
        .expect("begin");
    sqlx::query(
        "INSERT INTO retention_events (event_id, event_type, subject_key, tenant_id, occurred_at, \
         recorded_by, recorded_at) VALUES ($1, $2, $3, $4, $5, 'someone', now())",
    )
    .bind(Uuid::new_v4())
    .bind(CLOSED)
    .bind(customer.to_string())
    .bind(tenant_a())
    .bind(now - Duration::days(800))
    .execute(&mut open)
    .await
    .expect("insert event");
    let result = cohort.sweep(&scope_a(), now).await.expect("sweep");
    assert_eq!(result.summaries[0].affected, 0, "{result:#?}");
    assert_eq!(ids(&db, "orders").await, vec![1]);
    sqlx::query("COMMIT")
        .execute(&mut open)
        .await
        .expect("commit");
    cohort.sweep(&scope_a(), now).await.expect("sweep");
    assert_eq!(ids(&db, "orders").await, Vec::<i64>::new());
}

// contract: SL4
#[tokio::test]
async fn one_tenants_events_never_reach_another_tenants_rows() {
    let (db, cohort) = setup().await;
    let now = fixed_now();
    let customer = Uuid::new_v4();
    order(&db, 1, tenant_a(), customer).await;
    order(&db, 2, tenant_b(), customer).await;
    cohort
        .events()
        .record(
            EventRequest::new(
                CLOSED,
                customer.to_string(),
                now - Duration::days(800),
                "desk",
            )
            .tenant(tenant_b()),
        )
        .await
        .expect("record");
    cohort.sweep(&scope_a(), now).await.expect("sweep");
    assert_eq!(ids(&db, "orders").await, vec![1, 2], "tenant A's row stays");
    let scope_b = cohort::Scope::Tenant(cohort::TenantContext::new(tenant_b()));
    cohort.sweep(&scope_b, now).await.expect("sweep");
    assert_eq!(ids(&db, "orders").await, vec![1]);
}

// contract: SL4
#[tokio::test]
async fn bad_events_are_typed_refusals_that_write_nothing() {
    let (db, cohort) = setup().await;
    let now = fixed_now();
    let events = cohort.events();
    let refused = |r: Result<cohort::events::Event, Error>| match r {
        Err(Error::Event(e)) => e,
        other => panic!("expected an event refusal, got {other:?}"),
    };
    assert_eq!(
        refused(events.record(EventRequest::new(" ", "k", now, "me")).await),
        EventError::EmptyType
    );
    assert_eq!(
        refused(
            events
                .record(EventRequest::new(CLOSED, "", now, "me"))
                .await
        ),
        EventError::EmptySubjectKey
    );
    assert_eq!(
        refused(
            events
                .record(EventRequest::new(CLOSED, "k", now, " "))
                .await
        ),
        EventError::EmptyRecorder
    );
    assert!(matches!(
        refused(
            events
                .record(EventRequest::new("contract-ended", "k", now, "me"))
                .await
        ),
        EventError::UndeclaredType { .. }
    ));
    let missing = Uuid::new_v4();
    assert_eq!(
        refused(events.withdraw(missing, "me", "why").await),
        EventError::NotFound { event_id: missing }
    );
    let e = events
        .record(EventRequest::new(CLOSED, "k", now, "me"))
        .await
        .expect("record");
    assert_eq!(
        refused(events.withdraw(e.event_id, "me", " ").await),
        EventError::EmptyReason
    );
    events
        .withdraw(e.event_id, "me", "why")
        .await
        .expect("withdraw");
    assert_eq!(
        refused(events.withdraw(e.event_id, "me", "again").await),
        EventError::AlreadyWithdrawn {
            event_id: e.event_id
        }
    );
    assert_eq!(count(&db, "SELECT count(*) FROM retention_events").await, 1);
    // Plain SQL can neither change nor delete an event.
    for sql in [
        "UPDATE retention_events SET occurred_at = now()",
        "DELETE FROM retention_events",
    ] {
        let err = sqlx::query(sql).execute(db.pool()).await;
        assert!(err.is_err(), "{sql} was accepted");
    }
}

// contract: SL4, EV1
#[tokio::test]
async fn events_are_links_of_the_evidence_chain_and_a_changed_one_is_named() {
    let (db, cohort) = setup().await;
    let now = fixed_now();
    let e = cohort
        .events()
        .record(closed(Uuid::new_v4(), now))
        .await
        .expect("record");
    cohort
        .events()
        .withdraw(e.event_id, "desk", "mistake")
        .await
        .expect("withdraw");
    let schema = cohort::schema::SchemaName::new("public").expect("schema");
    let mut conn = db.connect().await;
    let report = cohort::evidence::verify(&mut conn, &schema)
        .await
        .expect("verify");
    assert!(report.is_intact(), "{report}");
    assert_eq!(report.event_links, 2);
    // Rewritten with its guard off: verification names it.
    db.exec(
        "ALTER TABLE retention_events DISABLE TRIGGER USER;
         UPDATE retention_events SET subject_key = 'someone else';
         ALTER TABLE retention_events ENABLE TRIGGER USER;",
    )
    .await;
    let report = cohort::evidence::verify(&mut conn, &schema)
        .await
        .expect("verify");
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.table == cohort::evidence::ChainTable::Event
                && p.row == e.event_id.to_string()),
        "{report}"
    );
}

/// An event-based category on a type without an event key.
#[derive(cohort::Retained)]
#[cohort(
    category = "closed-accounts",
    anchor = "placed_at",
    id = "2a3b4c5d-6e7f-4a8b-9c0d-1e2f3a4b5c03",
    table = "orders"
)]
#[allow(dead_code, reason = "only the descriptor is read")]
struct UnkeyedOrder {
    id: i64,
    tenant_id: Uuid,
    placed_at: DateTime<Utc>,
    customer_id: Uuid,
}

/// An event key that is a time.
#[derive(cohort::Retained)]
#[cohort(
    category = "closed-accounts",
    anchor = "placed_at",
    id = "2a3b4c5d-6e7f-4a8b-9c0d-1e2f3a4b5c04",
    table = "orders"
)]
#[allow(dead_code, reason = "only the descriptor is read")]
struct TimeKeyedOrder {
    id: i64,
    tenant_id: Uuid,
    #[cohort(event_key)]
    placed_at: DateTime<Utc>,
    customer_id: Uuid,
}

// contract: SL4
#[tokio::test]
async fn start_up_refuses_an_event_rule_without_a_usable_key_and_runs_refuse_an_undeclared_event() {
    let (db, _) = db_with_cohort("public").await;
    db.exec(TABLES).await;
    let with = |b: CohortBuilder| b;
    let rules = || {
        TestRules::new().with(
            "closed-accounts",
            Capabilities::only(Strategy::Purge).after_event(CLOSED),
            Rule::new(Period::days(730), Strategy::Purge).after_event(CLOSED),
        )
    };
    for (builder, needle) in [
        (
            with(
                Cohort::builder(db.pool().clone())
                    .rules(rules())
                    .entity::<UnkeyedOrder>(),
            ),
            "has no column holding the subject key events are recorded for",
        ),
        (
            with(
                Cohort::builder(db.pool().clone())
                    .rules(rules())
                    .entity::<TimeKeyedOrder>(),
            ),
            "the event key placed_at is of type timestamp with time zone",
        ),
    ] {
        match builder.build().await {
            Err(Error::Validation(report)) => {
                assert!(report.to_string().contains(needle), "{report}")
            }
            other => panic!("expected a validation report, got {other:?}"),
        }
    }
    // A rule counting from an event its category does not declare: that
    // type fails, nothing changes.
    let cohort = Cohort::builder(db.engine_pool().clone())
        .rules(TestRules::new().with(
            "closed-accounts",
            Capabilities::only(Strategy::Purge),
            Rule::new(Period::days(730), Strategy::Purge).after_event(CLOSED),
        ))
        .entity::<Order>()
        .build_engine(&db)
        .await
        .expect("valid model");
    order(&db, 1, tenant_a(), Uuid::new_v4()).await;
    let result = cohort.sweep(&scope_a(), fixed_now()).await.expect("sweep");
    assert_eq!(
        result.entity_failures[0].failure.kind,
        cohort::ledger::FailureKind::UndeclaredStrategy,
        "{result:#?}"
    );
    assert_eq!(ids(&db, "orders").await, vec![1]);
}
