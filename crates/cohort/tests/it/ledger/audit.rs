//! The audit ledger and its observers.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration as StdDuration;

use crate::support;
use crate::support::fixtures::{db_with_tables, scope_a, tenant_a};
use crate::support::models::*;
use crate::support::{TestDb, TestRules, count};
use chrono::Utc;
use cohort::ledger::{AuditEvent, AuditObserver, RunStatus};
use cohort::policy::ProviderError;
use cohort::{Capabilities, Cohort, Options, Period, Rule, Strategy};
use futures_util::future::BoxFuture;
use sqlx::{Connection, PgConnection};
use uuid::Uuid;

async fn setup(n: i64) -> TestDb {
    let db = db_with_tables().await;
    sqlx::query(
        "INSERT INTO tickets (id, tenant_id, opened_at) \
         SELECT g, $1, now() - interval '100 days' + g * interval '1 second' FROM generate_series(1, $2) g",
    )
    .bind(tenant_a())
    .bind(n)
    .execute(db.pool())
    .await
    .expect("tickets");
    db
}

fn rules(rule: Rule) -> TestRules {
    TestRules::new().with(
        "tickets",
        Capabilities::only(Strategy::Purge).and(Strategy::SoftDelete),
        rule,
    )
}

/// An observer that, for each event, asks the database (on a connection of its
/// own) whether what the event reports is already committed.
#[derive(Clone)]
struct CommitChecker {
    url: String,
    log: Arc<Mutex<Vec<String>>>,
}

impl AuditObserver for CommitChecker {
    fn on_event<'a>(&'a self, event: &'a AuditEvent) -> BoxFuture<'a, Result<(), ProviderError>> {
        Box::pin(async move {
            let mut conn = PgConnection::connect(&self.url).await?;
            let line = match event {
                AuditEvent::Started { run_id, .. } => {
                    let n: i64 =
                        sqlx::query_scalar("SELECT count(*) FROM sweep_run WHERE run_id = $1")
                            .bind(run_id)
                            .fetch_one(&mut conn)
                            .await?;
                    format!("Started committed={}", n == 1)
                }
                AuditEvent::EntityProgress {
                    total_affected,
                    batch_affected,
                    ..
                } => {
                    let gone: i64 = sqlx::query_scalar("SELECT 6 - count(*) FROM tickets")
                        .fetch_one(&mut conn)
                        .await?;
                    let ledger: i64 = sqlx::query_scalar(
                        "SELECT COALESCE(sum(affected_count), 0)::bigint FROM sweep_run_entity_summary",
                    )
                    .fetch_one(&mut conn)
                    .await?;
                    format!(
                        "Progress batch={batch_affected} total={total_affected} rows_gone={gone} ledger={ledger}"
                    )
                }
                AuditEvent::RowDetail { record_id, .. } => {
                    let n: i64 = sqlx::query_scalar(
                        "SELECT count(*) FROM sweep_run_row_detail WHERE record_id = $1",
                    )
                    .bind(record_id)
                    .fetch_one(&mut conn)
                    .await?;
                    format!("RowDetail {record_id} committed={}", n == 1)
                }
                AuditEvent::EntitySummary { summary, .. } => {
                    format!("Summary affected={}", summary.affected)
                }
                AuditEvent::Settled { status, .. } => {
                    let stored: String = sqlx::query_scalar("SELECT status FROM sweep_run")
                        .fetch_one(&mut conn)
                        .await?;
                    format!("Settled {status} stored={stored}")
                }
                other => format!("{other:?}"),
            };
            self.log.lock().expect("log").push(line);
            Ok(())
        })
    }
}

// contract: A6, A4, A2
#[tokio::test]
async fn observers_hear_every_event_in_committed_order_after_its_commit() {
    let db = setup(6).await;
    let checker = CommitChecker {
        url: db.url(),
        log: Arc::default(),
    };
    let cohort = Cohort::builder(db.pool().clone())
        .options(Options {
            batch_size: 4,
            ..Options::default()
        })
        .rules(rules(
            Rule::new(Period::days(30), Strategy::Purge).with_per_row_audit(),
        ))
        .entity::<Ticket>()
        .observer(checker.clone())
        .build()
        .await
        .expect("model");
    let result = cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    assert_eq!(result.status, RunStatus::Succeeded);
    let log = checker.log.lock().expect("log").clone();
    let mut expected = vec!["Started committed=true".to_string()];
    expected.push("Progress batch=4 total=4 rows_gone=4 ledger=4".into());
    expected.extend((1..=4).map(|i| format!("RowDetail {i} committed=true")));
    expected.push("Progress batch=2 total=6 rows_gone=6 ledger=6".into());
    expected.extend((5..=6).map(|i| format!("RowDetail {i} committed=true")));
    expected.push("Summary affected=6".into());
    expected.push("Settled Succeeded stored=Succeeded".into());
    assert_eq!(log, expected);

    // Row detail: canonical record id, tenant, action, one per changed row.
    let details: Vec<(String, Uuid, String)> = sqlx::query_as(
        "SELECT record_id, tenant_id, action FROM sweep_run_row_detail ORDER BY record_id::int",
    )
    .fetch_all(db.pool())
    .await
    .expect("details");
    let want: Vec<(String, Uuid, String)> = (1..=6)
        .map(|i| (i.to_string(), tenant_a(), "Purge".to_string()))
        .collect();
    assert_eq!(details, want);
}

// contract: A2
#[tokio::test]
async fn without_per_row_audit_no_row_detail_is_written() {
    let db = setup(3).await;
    let cohort = Cohort::builder(db.pool().clone())
        .rules(rules(Rule::new(Period::days(30), Strategy::Purge)))
        .entity::<Ticket>()
        .build()
        .await
        .expect("model");
    assert_eq!(
        cohort
            .sweep(&scope_a(), Utc::now())
            .await
            .expect("sweep")
            .affected(),
        3
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM sweep_run_row_detail").await,
        0
    );
}

// contract: A4
#[tokio::test]
async fn a_rolled_back_batch_leaves_neither_rows_nor_details_nor_progress_and_no_events() {
    let db = setup(6).await;
    // The last row's delete fails: the second batch rolls back whole.
    db.exec(
        r#"
        CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN IF OLD.id = 6 THEN RAISE EXCEPTION 'no'; END IF; RETURN OLD; END $$;
        CREATE TRIGGER refuse BEFORE DELETE ON tickets FOR EACH ROW EXECUTE FUNCTION refuse();
        "#,
    )
    .await;
    let checker = CommitChecker {
        url: db.url(),
        log: Arc::default(),
    };
    let cohort = Cohort::builder(db.pool().clone())
        .options(Options {
            batch_size: 4,
            ..Options::default()
        })
        .rules(rules(
            Rule::new(Period::days(30), Strategy::Purge).with_per_row_audit(),
        ))
        .entity::<Ticket>()
        .observer(checker.clone())
        .build()
        .await
        .expect("model");
    let result = cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    assert_eq!(result.status, RunStatus::Failed);
    assert_eq!(count(&db, "SELECT count(*) FROM tickets").await, 2);
    assert_eq!(
        count(&db, "SELECT count(*) FROM sweep_run_row_detail").await,
        4
    );
    assert_eq!(
        count(&db, "SELECT affected_count FROM sweep_run_entity_summary").await,
        4
    );
    let log = checker.log.lock().expect("log").clone();
    assert!(
        !log.iter().any(|l| l.contains("RowDetail 5")),
        "rolled-back events are never delivered: {log:?}"
    );
    assert_eq!(log.iter().filter(|l| l.starts_with("Progress")).count(), 1);
}

/// Fails, panics or hangs on every event, counting its calls.
struct Misbehaving {
    mode: &'static str,
    calls: Arc<AtomicUsize>,
}

impl AuditObserver for Misbehaving {
    fn on_event<'a>(&'a self, _event: &'a AuditEvent) -> BoxFuture<'a, Result<(), ProviderError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            match self.mode {
                "error" => Err("observer down".into()),
                "panic" => panic!("observer bug"),
                _ => {
                    tokio::time::sleep(StdDuration::from_secs(3600)).await;
                    Ok(())
                }
            }
        })
    }
}

#[derive(Clone, Default)]
struct Count(Arc<AtomicUsize>);

impl AuditObserver for Count {
    fn on_event<'a>(&'a self, _event: &'a AuditEvent) -> BoxFuture<'a, Result<(), ProviderError>> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { Ok(()) })
    }
}

// contract: A7, A10, X21 (an observer panicking inside its future)
#[tokio::test]
async fn failing_panicking_and_hanging_observers_change_nothing_and_a_hanging_one_is_cut_off() {
    let db = setup(6).await;
    let calls: Vec<Arc<AtomicUsize>> = (0..3).map(|_| Arc::default()).collect();
    let healthy = Count::default();
    let logs = support::LogCapture::start();
    let cohort = Cohort::builder(db.pool().clone())
        .options(Options {
            batch_size: 2,
            observer_timeout: StdDuration::from_millis(100),
            ..Options::default()
        })
        .rules(rules(Rule::new(Period::days(30), Strategy::Purge)))
        .entity::<Ticket>()
        .observer(Misbehaving {
            mode: "error",
            calls: calls[0].clone(),
        })
        .observer(Misbehaving {
            mode: "panic",
            calls: calls[1].clone(),
        })
        .observer(Misbehaving {
            mode: "hang",
            calls: calls[2].clone(),
        })
        .observer(healthy.clone())
        .build()
        .await
        .expect("model");
    let result = cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    assert_eq!(result.status, RunStatus::Succeeded);
    assert_eq!(result.affected(), 6);
    assert_eq!(count(&db, "SELECT count(*) FROM tickets").await, 0);
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM sweep_run WHERE status = 'Succeeded'"
        )
        .await,
        1
    );
    // Started, 3 progress, summary, settled.
    assert_eq!(healthy.0.load(Ordering::SeqCst), 6);
    assert_eq!(
        calls[0].load(Ordering::SeqCst),
        6,
        "a failing observer keeps hearing events"
    );
    assert_eq!(
        calls[1].load(Ordering::SeqCst),
        6,
        "a panicking observer keeps hearing events"
    );
    assert_eq!(
        calls[2].load(Ordering::SeqCst),
        1,
        "a hanging observer is cut off after its first timeout"
    );
    let logged = logs.text();
    assert!(logged.contains("audit observer failed"), "{logged}");
    assert!(logged.contains("audit observer panicked"), "{logged}");
    assert!(logged.contains("audit observer timed out"), "{logged}");
    // Other tests in this process log the same messages (the log is one
    // buffer): this test's lines are those of its observers' indexes, 0
    // failing (with its error), 1 panicking and 2 hanging.
    let ours = |message: &str, detail: &str| {
        logged
            .lines()
            .any(|l| l.contains(message) && l.contains(detail))
    };
    assert!(
        ours("audit observer failed", "observer=0 error=observer down"),
        "{logged}"
    );
    assert!(ours("audit observer panicked", "observer=1"), "{logged}");
    assert!(ours("audit observer timed out", "observer=2"), "{logged}");
}

// contract: A8
#[tokio::test]
async fn direct_calls_are_audited_as_manual() {
    let db = setup(1).await;
    let cohort = Cohort::builder(db.pool().clone())
        .rules(rules(Rule::new(Period::days(30), Strategy::Purge)))
        .entity::<Ticket>()
        .build()
        .await
        .expect("model");
    cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    cohort
        .sweep_with(
            &scope_a(),
            Utc::now(),
            cohort::SweepOptions::default().dry_run(),
        )
        .await
        .expect("dry");
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM sweep_run WHERE trigger = 'Manual'"
        )
        .await,
        2
    );
}

// contract: S2
#[tokio::test]
async fn soft_delete_sets_the_flag_and_deleted_at_and_skips_rows_already_deleted() {
    let db = setup(3).await;
    db.exec("UPDATE tickets SET is_deleted = true, deleted_at = '2001-01-01' WHERE id = 3")
        .await;
    let cohort = Cohort::builder(db.pool().clone())
        .rules(rules(
            Rule::new(Period::days(30), Strategy::SoftDelete).with_per_row_audit(),
        ))
        .entity::<Ticket>()
        .build()
        .await
        .expect("model");
    let result = cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    assert_eq!(
        result.affected(),
        2,
        "the already-deleted row is not a candidate"
    );
    assert_eq!(count(&db, "SELECT count(*) FROM tickets WHERE is_deleted AND deleted_at > now() - interval '1 hour'").await, 2);
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM tickets WHERE id = 3 AND deleted_at = '2001-01-01'"
        )
        .await,
        1,
        "its deleted-at is not restamped"
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM tickets").await,
        3,
        "nothing purged"
    );
    assert_eq!(
        cohort
            .sweep(&scope_a(), Utc::now())
            .await
            .expect("sweep")
            .affected(),
        0
    );
}
