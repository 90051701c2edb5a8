//! Abandoned runs and lost connections (contract A11): settling an abandoned
//! run settles its summaries, and a run whose connection is lost returns an
//! error naming the run.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration as StdDuration;

use crate::support::count;
use crate::support::fixtures::{
    build_notes_and_contacts, db_with_tables, fixed_now, json_keys, ledger_summary, note_days_old,
    readme_rules, run_status, scope_a, tenant_a,
};
use crate::support::models::*;
use chrono::{DateTime, Utc};
use cohort::ledger::{AuditEvent, AuditObserver};
use cohort::policy::ProviderError;
use cohort::{Cohort, Error, Options};
use futures_util::future::BoxFuture;
use sqlx::Row;
use uuid::Uuid;

// contract: A11, X4
#[tokio::test]
async fn settling_an_abandoned_run_also_settles_its_running_summaries() {
    let db = db_with_tables().await;
    let cohort = build_notes_and_contacts(
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
    assert_eq!(json_keys(&run_error), ["diagnostic_id", "kind", "sqlstate"]);
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
    assert_eq!(json_keys(&error), ["diagnostic_id", "kind", "sqlstate"]);
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

/// On the first batch's progress, terminates the run's own connection (the
/// backend `run_backend` names: the engine's pool has one connection, which
/// the run took out of it), from a connection of its own, and waits for it
/// to exit. Records what it did.
struct TerminateTheRun {
    pool: sqlx::PgPool,
    run_backend: Arc<Mutex<Option<i32>>>,
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
            let pid = *self.run_backend.lock().expect("pid");
            let terminated: i64 = sqlx::query_scalar(
                "SELECT count(*) FILTER (WHERE pg_catalog.pg_terminate_backend(a.pid, 10000)) \
                 FROM pg_catalog.pg_stat_activity a \
                 WHERE a.pid = $1 AND a.datname = pg_catalog.current_database()",
            )
            .bind(pid)
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
    let db = db_with_tables().await;
    let terminated = Arc::new(Mutex::new(None));
    // The engine's pool: one connection, whose backend it records.
    let run_backend = Arc::new(Mutex::new(None));
    let recorded = run_backend.clone();
    let engine = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .after_connect(move |conn, _| {
            let recorded = recorded.clone();
            Box::pin(async move {
                let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
                    .fetch_one(&mut *conn)
                    .await?;
                recorded.lock().expect("pid").get_or_insert(pid);
                Ok(())
            })
        })
        .connect_with(db.options())
        .await
        .expect("engine pool");
    let cohort = Cohort::builder(engine)
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
            run_backend,
            done: AtomicBool::new(false),
            terminated: terminated.clone(),
        })
        .build()
        .await
        .expect("model");
    for _ in 0..6 {
        note_days_old(&db, tenant_a(), 40).await;
    }

    let outcome = cohort.sweep(&scope_a(), fixed_now()).await;
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

    // The run is then settled like any abandoned one, its summary too, once
    // its lease has expired (its keeper stopped with the run).
    sqlx::query(
        "UPDATE sweep_run SET lease_expires_at = now() - interval '1 second' WHERE run_id = $1",
    )
    .bind(run_id)
    .execute(db.pool())
    .await
    .expect("expire the lease");
    assert_eq!(cohort.settle_abandoned_runs().await.expect("settle"), 1);
    assert_eq!(run_status(&db, run_id).await, "Failed");
    let (status, affected, ..) = ledger_summary(&db, run_id, "SessionNote").await;
    assert_eq!((status.as_str(), affected), ("Failed", 2));
}
