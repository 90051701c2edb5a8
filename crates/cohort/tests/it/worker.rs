//! The scheduled worker: one occurrence, once, across replicas (contract
//! W1–W9, C1). Time is injected through a test clock: no test waits for a
//! real occurrence.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration as StdDuration;

use crate::support::fixtures::db_with_tables;
use crate::support::models::*;
use crate::support::observers::CancelAfterFirstBatch;
use crate::support::{BuildEngine, LogCapture, TestDb, count};
use chrono::{DateTime, Duration, TimeZone, Utc};
use cohort::policy::ProviderError;
use cohort::worker::{Clock, OccurrenceReport, TenantSource};
use cohort::{
    CancellationToken, Capabilities, Cohort, Error, Options, ResolutionContext, Rule, RuleProvider,
    Strategy, TenantContext,
};
use futures_util::future::BoxFuture;
use tokio::sync::Notify;
use uuid::Uuid;

fn t(n: u128) -> Uuid {
    Uuid::from_u128(0x1000 + n)
}

fn tenant(n: u128) -> TenantContext {
    TenantContext::new(t(n))
}

/// The occurrence most tests sweep.
fn occurrence() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 6, 1, 2, 0, 0)
        .single()
        .expect("valid time")
}

/// A rule provider with hooks: it fails for some tenants, can stop (gate)
/// the pass of one tenant until released, and calls a hook at each
/// resolution.
#[derive(Clone, Default)]
struct Rules {
    fail_for: Arc<Mutex<HashSet<Uuid>>>,
    /// (tenant, reached, release): resolving for `tenant` signals `reached`,
    /// then waits for `release`.
    #[allow(clippy::type_complexity)]
    gate: Arc<Mutex<Option<(Option<Uuid>, Arc<Notify>, Arc<Notify>)>>>,
    #[allow(clippy::type_complexity)]
    hook: Arc<Mutex<Option<Box<dyn Fn(Option<Uuid>) + Send + Sync>>>>,
}

impl Rules {
    fn fail_for(&self, tenant: Uuid) {
        self.fail_for.lock().expect("lock").insert(tenant);
    }

    /// Gates the pass of `tenant` (`None`: the tenantless pass); returns
    /// (reached, release).
    fn gate(&self, tenant: Option<Uuid>) -> (Arc<Notify>, Arc<Notify>) {
        let reached = Arc::new(Notify::new());
        let release = Arc::new(Notify::new());
        *self.gate.lock().expect("lock") = Some((tenant, reached.clone(), release.clone()));
        (reached, release)
    }

    fn on_resolve(&self, hook: impl Fn(Option<Uuid>) + Send + Sync + 'static) {
        *self.hook.lock().expect("lock") = Some(Box::new(hook));
    }
}

impl RuleProvider for Rules {
    fn capabilities(&self, category: &str) -> Option<Capabilities> {
        matches!(category, "session-notes" | "audit-log")
            .then(|| Capabilities::only(Strategy::Purge))
    }

    fn resolve<'a>(
        &'a self,
        ctx: ResolutionContext<'a>,
    ) -> BoxFuture<'a, Result<Option<Rule>, ProviderError>> {
        let tenant = ctx.tenant.map(|t| t.id);
        if let Some(hook) = self.hook.lock().expect("lock").as_ref() {
            hook(tenant);
        }
        let fails = tenant.is_some_and(|t| self.fail_for.lock().expect("lock").contains(&t));
        let gate = self
            .gate
            .lock()
            .expect("lock")
            .as_ref()
            .filter(|(g, _, _)| *g == tenant)
            .map(|(_, reached, release)| (reached.clone(), release.clone()));
        Box::pin(async move {
            if let Some((reached, release)) = gate {
                reached.notify_one();
                release.notified().await;
            }
            if fails {
                return Err("the policy service is down".into());
            }
            Ok(Some(Rule::new(cohort::Period::days(30), Strategy::Purge)))
        })
    }
}

/// A clock the test moves: `sleep_until` jumps to the deadline at once.
#[derive(Clone)]
struct TestClock(Arc<Mutex<DateTime<Utc>>>);

impl TestClock {
    fn at(t: DateTime<Utc>) -> TestClock {
        TestClock(Arc::new(Mutex::new(t)))
    }

    fn set(&self, t: DateTime<Utc>) {
        *self.0.lock().expect("lock") = t;
    }
}

impl Clock for TestClock {
    fn now(&self) -> DateTime<Utc> {
        *self.0.lock().expect("lock")
    }

    fn sleep_until(&self, deadline: DateTime<Utc>) -> BoxFuture<'_, ()> {
        let mut now = self.0.lock().expect("lock");
        if *now < deadline {
            *now = deadline;
        }
        Box::pin(async {})
    }
}

fn options() -> Options {
    Options {
        batch_size: 10,
        poll_interval: StdDuration::from_millis(20),
        // A crashed worker's lease (and its run's) expires within a second.
        run_lease: StdDuration::from_secs(1),
        ..Options::default()
    }
}

async fn handle(db: &TestDb, options: Options, rules: Rules) -> Cohort {
    Cohort::builder(db.engine_pool().clone())
        .options(options)
        .rules(rules)
        .entity::<SessionNote>()
        .entity::<SystemLog>()
        .build_engine(db)
        .await
        .expect("handle")
}

/// `old` notes 60 days before the occurrence and one fresh note per tenant;
/// `old` old log lines and one fresh.
async fn seed(db: &TestDb, tenants: &[Uuid], old: i64) {
    let at = occurrence();
    for tenant in tenants {
        sqlx::query(
            "INSERT INTO session_notes (id, tenant_id, created_at, body) \
             SELECT gen_random_uuid(), $1, $2 - interval '60 days', 'old' FROM generate_series(1, $3) \
             UNION ALL SELECT gen_random_uuid(), $1, $2 - interval '1 day', 'fresh'",
        )
        .bind(tenant)
        .bind(at)
        .bind(old)
        .execute(db.pool())
        .await
        .expect("notes");
    }
    sqlx::query(
        "INSERT INTO system_log (id, logged_at, line) \
         SELECT g, $1 - interval '60 days', 'old' FROM generate_series(1, $2) g \
         UNION ALL SELECT 1000000, $1 - interval '1 day', 'fresh'",
    )
    .bind(at)
    .bind(old)
    .execute(db.pool())
    .await
    .expect("log");
}

async fn old_notes(db: &TestDb, tenant: Uuid) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM session_notes WHERE tenant_id = $1 AND body = 'old'")
        .bind(tenant)
        .fetch_one(db.pool())
        .await
        .expect("count")
}

/// The scheduled runs in the ledger, in start order: (tenant, status, dry run, logical now).
async fn scheduled_runs(db: &TestDb) -> Vec<(Uuid, String, bool, DateTime<Utc>)> {
    sqlx::query_as(
        "SELECT tenant_id, status, dry_run, logical_now FROM sweep_run \
         WHERE trigger = 'Scheduled' ORDER BY started_at, run_id",
    )
    .fetch_all(db.pool())
    .await
    .expect("runs")
}

async fn manual_runs(db: &TestDb) -> i64 {
    count(
        db,
        "SELECT count(*) FROM sweep_run WHERE trigger <> 'Scheduled'",
    )
    .await
}

fn swept(report: &OccurrenceReport) -> bool {
    !report.already_swept && !report.passes.is_empty()
}

// contract: W1, C1
#[tokio::test]
async fn the_default_schedule_and_switches_and_bad_configuration_listed_at_once() {
    let defaults = Options::default();
    assert_eq!(defaults.worker.schedule, "0 2 * * *");
    assert!(!defaults.worker.dry_run);
    assert!(!defaults.worker.kill_switch);
    let db = db_with_tables().await;
    let worker = handle(&db, options(), Rules::default()).await.worker();
    let next = worker
        .clock(TestClock::at(
            Utc.with_ymd_and_hms(2026, 6, 1, 1, 59, 59)
                .single()
                .expect("valid time"),
        ))
        .next_occurrence();
    assert_eq!(next, Some(occurrence()));

    // Every bad setting at once, each naming its option.
    let mut bad = options();
    bad.worker.schedule = "every night at two".into();
    bad.worker.time_zone = Some("Mars/Olympus_Mons".into());
    bad.worker.tenant = Some(Uuid::nil());
    bad.batch_size = 0;
    bad.claim_timeout = StdDuration::MAX;
    let err = Cohort::builder(db.engine_pool().clone())
        .options(bad.clone())
        .rules(Rules::default())
        .entity::<SessionNote>()
        .build()
        .await
        .expect_err("refused");
    let Error::Validation(report) = err else {
        panic!("expected a validation error, got {err}")
    };
    let named: HashSet<&str> = report.problems.iter().filter_map(|p| p.option).collect();
    for option in [
        "worker.schedule",
        "worker.time_zone",
        "worker.tenant",
        "batch_size",
        "claim_timeout",
    ] {
        assert!(named.contains(option), "{option} missing from {report}");
    }
    assert_eq!(bad.validate().len(), report.problems.len(), "{report}");
}

// contract: C1
#[test]
#[allow(clippy::result_large_err)]
fn options_load_from_a_toml_file_and_environment_with_figment() {
    use figment::providers::{Env, Format, Serialized, Toml};
    figment::Jail::expect_with(|jail| {
        jail.create_file(
            "retention.toml",
            r#"
            batch_size = 500
            [worker]
            schedule = "30 3 * * *"
            time_zone = "Europe/Berlin"
            "#,
        )?;
        // A prefix of the test's own: the variables this process inherits
        // (COHORT_TEST_ROLE, ...) are not settings and must not count.
        jail.set_env("COHORT_FIGMENT_TEST_WORKER__DRY_RUN", "true");
        let options: Options = figment::Figment::from(Serialized::defaults(Options::default()))
            .merge(Toml::file("retention.toml"))
            .merge(Env::prefixed("COHORT_FIGMENT_TEST_").split("__"))
            .extract()?;
        assert_eq!(options.batch_size, 500);
        assert_eq!(options.worker.schedule, "30 3 * * *");
        assert_eq!(options.worker.time_zone.as_deref(), Some("Europe/Berlin"));
        assert!(options.worker.dry_run);
        assert_eq!(options.fence_wait, StdDuration::from_secs(30));
        assert!(options.validate().is_empty());
        Ok(())
    });
}

// contract: W3, W8
#[tokio::test]
async fn tenants_are_swept_in_first_seen_order_once_each_then_one_tenantless_pass() {
    let db = db_with_tables().await;
    seed(&db, &[t(1), t(2), t(3)], 3).await;
    let rules = Rules::default();
    let cohort = handle(&db, options(), rules.clone()).await;
    let mut berlin = tenant(3);
    berlin.jurisdiction = Some("DE".into());
    let mut paris = tenant(3);
    paris.jurisdiction = Some("FR".into());
    let seen: Arc<Mutex<Vec<Option<Uuid>>>> = Arc::default();
    let s = seen.clone();
    rules.on_resolve(move |t| s.lock().expect("lock").push(t));
    let logs = LogCapture::start();
    let report = cohort
        .worker()
        .tenants(vec![berlin, tenant(1), paris, tenant(2), tenant(1)])
        .run_occurrence(occurrence(), &CancellationToken::new())
        .await
        .expect("occurrence");
    assert!(swept(&report));
    let order: Vec<Option<Uuid>> = report.passes.iter().map(|p| p.tenant_id).collect();
    assert_eq!(order, vec![Some(t(3)), Some(t(1)), Some(t(2)), None]);
    assert_eq!(report.failed_passes(), 0);
    // Tenant-scoped types in each tenant's pass, tenantless ones once.
    assert_eq!(
        *seen.lock().expect("lock"),
        vec![Some(t(3)), Some(t(1)), Some(t(2)), None]
    );
    let runs = scheduled_runs(&db).await;
    let tenants: Vec<Uuid> = runs.iter().map(|r| r.0).collect();
    assert_eq!(tenants, vec![t(3), t(1), t(2), Uuid::nil()]);
    assert!(
        runs.iter()
            .all(|r| r.1 == "Succeeded" && !r.2 && r.3 == occurrence())
    );
    assert_eq!(manual_runs(&db).await, 0);
    for n in 1..=3 {
        assert_eq!(old_notes(&db, t(n)).await, 0);
    }
    assert_eq!(count(&db, "SELECT count(*) FROM session_notes").await, 3);
    assert_eq!(count(&db, "SELECT count(*) FROM system_log").await, 1);
    assert!(
        logs.text()
            .contains("lists a tenant twice with different contexts"),
        "{}",
        logs.text()
    );
}

// contract: W8
#[tokio::test]
async fn one_failing_tenant_does_not_stop_the_others_and_a_nil_tenant_fails_before_any_pass() {
    let db = db_with_tables().await;
    seed(&db, &[t(1), t(2)], 3).await;
    let rules = Rules::default();
    let cohort = handle(&db, options(), rules.clone()).await;

    // The nil tenant: the occurrence fails before any pass.
    let err = cohort
        .worker()
        .tenants(vec![tenant(1), TenantContext::new(Uuid::nil())])
        .run_occurrence(occurrence(), &CancellationToken::new())
        .await
        .expect_err("nil tenant");
    assert!(matches!(err, Error::TenantSource { .. }), "{err}");
    assert!(scheduled_runs(&db).await.is_empty());
    assert_eq!(old_notes(&db, t(1)).await, 3);

    // Tenant 1's rules fail: tenant 2 and the tenantless pass still run.
    rules.fail_for(t(1));
    let report = cohort
        .worker()
        .tenants(vec![tenant(1), tenant(2)])
        .run_occurrence(occurrence(), &CancellationToken::new())
        .await
        .expect("occurrence");
    assert_eq!(report.passes.len(), 3);
    assert_eq!(report.failed_passes(), 1);
    let statuses: Vec<(Uuid, String)> = scheduled_runs(&db)
        .await
        .into_iter()
        .map(|r| (r.0, r.1))
        .collect();
    assert_eq!(
        statuses,
        vec![
            (t(1), "Failed".to_owned()),
            (t(2), "Succeeded".to_owned()),
            (Uuid::nil(), "Succeeded".to_owned())
        ]
    );
    assert_eq!(old_notes(&db, t(1)).await, 3);
    assert_eq!(old_notes(&db, t(2)).await, 0);
    assert_eq!(count(&db, "SELECT count(*) FROM system_log").await, 1);

    // A failed run still claims its occurrence: it is retried at the next.
    let again = cohort
        .worker()
        .tenants(vec![tenant(1), tenant(2)])
        .run_occurrence(occurrence(), &CancellationToken::new())
        .await
        .expect("occurrence");
    assert!(again.already_swept);
}

// contract: W4
#[tokio::test]
async fn two_replicas_at_one_occurrence_sweep_it_once() {
    let db = db_with_tables().await;
    seed(&db, &[t(1), t(2)], 25).await;
    let a = handle(&db, options(), Rules::default()).await;
    let b = handle(&db, options(), Rules::default()).await;
    let shutdown = CancellationToken::new();
    let wa = a.worker().tenants(vec![tenant(1), tenant(2)]);
    let wb = b.worker().tenants(vec![tenant(1), tenant(2)]);
    let (ra, rb) = tokio::join!(
        wa.run_occurrence(occurrence(), &shutdown),
        wb.run_occurrence(occurrence(), &shutdown)
    );
    let (ra, rb) = (ra.expect("a"), rb.expect("b"));
    assert!(
        swept(&ra) != swept(&rb),
        "exactly one replica sweeps: {ra:?} {rb:?}"
    );
    assert!(ra.already_swept != rb.already_swept);
    assert_eq!(ra.affected() + rb.affected(), 2 * 25 + 25);
    assert_eq!(scheduled_runs(&db).await.len(), 3);
    // A later replica for the same occurrence also skips it.
    let late = handle(&db, options(), Rules::default())
        .await
        .worker()
        .tenants(vec![tenant(1), tenant(2)])
        .run_occurrence(occurrence(), &shutdown)
        .await
        .expect("late");
    assert!(late.already_swept && late.passes.is_empty());
    // The next occurrence is a new one.
    let next = a
        .worker()
        .tenants(vec![tenant(1), tenant(2)])
        .run_occurrence(occurrence() + Duration::days(1), &shutdown)
        .await
        .expect("next");
    assert!(swept(&next));
}

// contract: W4
#[tokio::test]
async fn a_dry_run_replica_never_stands_in_for_the_real_sweep() {
    let db = db_with_tables().await;
    seed(&db, &[t(1)], 5).await;
    let mut dry = options();
    dry.worker.dry_run = true;
    let dry = handle(&db, dry, Rules::default()).await;
    let real = handle(&db, options(), Rules::default()).await;
    let shutdown = CancellationToken::new();

    let first = dry
        .worker()
        .tenants(tenant(1))
        .run_occurrence(occurrence(), &shutdown)
        .await
        .expect("dry");
    assert!(swept(&first) && first.dry_run);
    assert_eq!(old_notes(&db, t(1)).await, 5);
    assert_eq!(first.affected(), 5 + 5);

    let second = real
        .worker()
        .tenants(tenant(1))
        .run_occurrence(occurrence(), &shutdown)
        .await
        .expect("real");
    assert!(swept(&second), "the dry run did not claim the real sweep");
    assert_eq!(old_notes(&db, t(1)).await, 0);

    // Each kind's claim holds for its own kind.
    for cohort in [&dry, &real] {
        let again = cohort
            .worker()
            .tenants(tenant(1))
            .run_occurrence(occurrence(), &shutdown)
            .await
            .expect("again");
        assert!(again.already_swept);
    }
    let kinds: Vec<bool> = scheduled_runs(&db).await.iter().map(|r| r.2).collect();
    assert_eq!(kinds, vec![true, true, false, false]);
}

/// Installs Cohort in schema `name` with its own copy of the host tables
/// (`<name>_notes`), so that two installs sweep independently.
const SECOND_INSTALL: &str = r#"
CREATE TABLE public.session_notes_b (
    id uuid PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz NOT NULL, body text NOT NULL);
"#;

#[allow(dead_code)]
#[derive(cohort::Retained)]
#[cohort(
    category = "session-notes",
    anchor = "created_at",
    id = "c5b0e7a2-3d1f-4e6b-8a9c-0d1e2f3a4b5c",
    table = "session_notes_b"
)]
struct NoteB {
    id: Uuid,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
    body: String,
}

// contract: W5
#[tokio::test]
async fn installs_in_two_schemas_of_one_database_sweep_independently() {
    let db = db_with_tables().await;
    db.exec(&cohort::schema::ddl(
        &cohort::schema::SchemaName::new("second").expect("schema"),
    ))
    .await;
    db.exec(SECOND_INSTALL).await;
    seed(&db, &[t(1)], 5).await;
    sqlx::query(
        "INSERT INTO session_notes_b SELECT gen_random_uuid(), $1, $2 - interval '60 days', 'old' \
         FROM generate_series(1, 5)",
    )
    .bind(t(1))
    .bind(occurrence())
    .execute(db.pool())
    .await
    .expect("notes b");
    let rules = Rules::default();
    let first = handle(&db, options(), rules.clone()).await;
    let mut second_options = options();
    second_options.schema = "second".into();
    let second = Cohort::builder(db.engine_pool().clone())
        .options(second_options)
        .rules(Rules::default())
        .entity::<NoteB>()
        .build_engine(&db)
        .await
        .expect("second install");

    // The first install stops mid-occurrence, holding its replica lock.
    let (reached, release) = rules.gate(Some(t(1)));
    let shutdown = CancellationToken::new();
    let first_worker = first.worker().tenants(tenant(1));
    let first_run = first_worker.run_occurrence(occurrence(), &shutdown);
    let second_worker = second.worker().tenants(tenant(1));
    let check = async {
        reached.notified().await;
        // The other install's occurrence completes meanwhile.
        let report = tokio::time::timeout(
            StdDuration::from_secs(30),
            second_worker.run_occurrence(occurrence(), &shutdown),
        )
        .await
        .expect("the second install did not wait for the first")
        .expect("second occurrence");
        release.notify_one();
        report
    };
    let (first_report, second_report) = tokio::join!(first_run, check);
    assert!(swept(&first_report.expect("first")));
    assert!(swept(&second_report));
    assert_eq!(old_notes(&db, t(1)).await, 0);
    assert_eq!(count(&db, "SELECT count(*) FROM session_notes_b").await, 0);
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM second.sweep_run WHERE trigger = 'Scheduled'"
        )
        .await,
        1
    );
    assert_eq!(scheduled_runs(&db).await.len(), 2);
}

/// Waits until no session of this database holds an advisory lock other than
/// `except`'s: a dropped worker's connections are gone.
async fn wait_for_no_advisory_locks(db: &TestDb) {
    for _ in 0..500 {
        let held = count(
            db,
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' \
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        )
        .await;
        if held == 0 {
            return;
        }
        tokio::time::sleep(StdDuration::from_millis(10)).await;
    }
    panic!("advisory locks still held");
}

// contract: W4
#[tokio::test]
async fn a_worker_restarted_after_a_crash_mid_occurrence_sweeps_it_again() {
    let db = db_with_tables().await;
    seed(&db, &[t(1), t(2)], 5).await;
    let rules = Rules::default();
    let crashed = handle(&db, options(), rules.clone()).await;
    let (reached, _release) = rules.gate(Some(t(2)));
    let shutdown = CancellationToken::new();
    let worker = crashed.worker().tenants(vec![tenant(1), tenant(2)]);
    // The process dies while tenant 2's pass runs: the future is dropped,
    // its connections close, the run stays Started without an owner.
    tokio::select! {
        _ = worker.run_occurrence(occurrence(), &shutdown) => panic!("the gate did not hold"),
        () = reached.notified() => {}
    }
    drop(worker);
    drop(crashed);
    wait_for_no_advisory_locks(&db).await;
    let statuses: Vec<String> = scheduled_runs(&db).await.into_iter().map(|r| r.1).collect();
    assert_eq!(statuses, vec!["Succeeded", "Started"]);
    assert_eq!(old_notes(&db, t(2)).await, 5);

    // Restarted, the worker sweeps the occurrence again, every pass.
    let restarted = handle(&db, options(), Rules::default()).await;
    let report = restarted
        .worker()
        .tenants(vec![tenant(1), tenant(2)])
        .run_occurrence(occurrence(), &shutdown)
        .await
        .expect("again");
    assert!(swept(&report));
    assert_eq!(report.passes.len(), 3);
    assert_eq!(old_notes(&db, t(2)).await, 0);
    // And once swept, it is claimed.
    let third = restarted
        .worker()
        .tenants(vec![tenant(1), tenant(2)])
        .run_occurrence(occurrence(), &shutdown)
        .await
        .expect("third");
    assert!(third.already_swept);
}

// contract: W9
#[tokio::test]
async fn the_kill_switch_flipped_between_tenant_passes_stops_the_rest() {
    let db = db_with_tables().await;
    seed(&db, &[t(1), t(2), t(3)], 3).await;
    let rules = Rules::default();
    let cohort = handle(&db, options(), rules.clone()).await;
    let switch = Arc::new(AtomicBool::new(false));
    let s = switch.clone();
    // Flipped while tenant 1's pass runs.
    rules.on_resolve(move |t| {
        if t == Some(self::t(1)) {
            s.store(true, Ordering::SeqCst);
        }
    });
    let report = cohort
        .worker()
        .tenants(vec![tenant(1), tenant(2), tenant(3)])
        .kill_switch(switch.clone())
        .run_occurrence(occurrence(), &CancellationToken::new())
        .await
        .expect("occurrence");
    assert!(report.stopped_by_kill_switch);
    assert_eq!(report.passes.len(), 1);
    assert_eq!(old_notes(&db, t(1)).await, 0);
    assert_eq!(old_notes(&db, t(2)).await, 3);
    assert_eq!(old_notes(&db, t(3)).await, 3);
    assert_eq!(count(&db, "SELECT count(*) FROM system_log").await, 4);
    assert_eq!(scheduled_runs(&db).await.len(), 1);

    // Configured on: no pass starts at all.
    let mut off = options();
    off.worker.kill_switch = true;
    let report = handle(&db, off, Rules::default())
        .await
        .worker()
        .tenants(vec![tenant(2)])
        .run_occurrence(occurrence() + Duration::days(1), &CancellationToken::new())
        .await
        .expect("occurrence");
    assert!(report.stopped_by_kill_switch && report.passes.is_empty());
    assert_eq!(old_notes(&db, t(2)).await, 3);
}

// contract: W4
#[tokio::test]
async fn shutdown_mid_run_leaves_whole_batches_and_a_cancelled_run_that_is_swept_again() {
    let db = db_with_tables().await;
    seed(&db, &[t(1), t(2)], 35).await;
    let shutdown = CancellationToken::new();
    let cohort = Cohort::builder(db.engine_pool().clone())
        .options(options())
        .rules(Rules::default())
        .entity::<SessionNote>()
        .entity::<SystemLog>()
        .observer(CancelAfterFirstBatch(shutdown.clone()))
        .build_engine(&db)
        .await
        .expect("handle");
    let report = cohort
        .worker()
        .tenants(vec![tenant(1), tenant(2)])
        .run_occurrence(occurrence(), &shutdown)
        .await
        .expect("occurrence");
    assert!(report.cancelled);
    assert_eq!(report.passes.len(), 1);
    // One whole batch of 10 committed; nothing of the next.
    assert_eq!(old_notes(&db, t(1)).await, 25);
    assert_eq!(old_notes(&db, t(2)).await, 35);
    let runs = scheduled_runs(&db).await;
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].1, "Cancelled");
    let affected: i64 = count(
        &db,
        "SELECT sum(affected_count)::bigint FROM sweep_run_entity_summary",
    )
    .await;
    assert_eq!(affected, 10);

    // A Cancelled run does not claim the occurrence: a replica sweeps it.
    let report = handle(&db, options(), Rules::default())
        .await
        .worker()
        .tenants(vec![tenant(1), tenant(2)])
        .run_occurrence(occurrence(), &CancellationToken::new())
        .await
        .expect("again");
    assert!(swept(&report) && !report.cancelled);
    assert_eq!(old_notes(&db, t(1)).await, 0);
    assert_eq!(old_notes(&db, t(2)).await, 0);
}

/// A tenant source that counts its calls and answers from a script.
struct Scripted {
    calls: AtomicUsize,
    #[allow(clippy::type_complexity)]
    script: Box<dyn Fn(usize) -> Result<Vec<TenantContext>, ProviderError> + Send + Sync>,
}

impl TenantSource for Scripted {
    fn tenants(&self) -> BoxFuture<'_, Result<Vec<TenantContext>, ProviderError>> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        let answer = (self.script)(n);
        Box::pin(async move { answer })
    }
}

// contract: W2
#[tokio::test]
async fn a_failed_occurrence_is_logged_and_the_next_comes_as_scheduled() {
    let db = db_with_tables().await;
    seed(&db, &[t(1)], 3).await;
    let mut hourly = options();
    hourly.worker.schedule = "0 * * * *".into();
    let cohort = handle(&db, hourly, Rules::default()).await;
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    let source = Scripted {
        calls: AtomicUsize::new(0),
        script: Box::new(move |n| match n {
            1 => Err("the tenant directory is down".into()),
            2 => Ok(vec![tenant(1)]),
            _ => {
                stop.cancel();
                Err("stopping".into())
            }
        }),
    };
    let logs = LogCapture::start();
    let start = occurrence() - Duration::minutes(30);
    tokio::time::timeout(
        StdDuration::from_secs(60),
        cohort
            .worker()
            .tenants(source)
            .clock(TestClock::at(start))
            .run(shutdown),
    )
    .await
    .expect("the worker stopped")
    .expect("the worker ran");
    // The 02:00 occurrence failed (no pass); 03:00 swept.
    let runs = scheduled_runs(&db).await;
    let times: Vec<DateTime<Utc>> = runs.iter().map(|r| r.3).collect();
    let three = occurrence() + Duration::hours(1);
    assert_eq!(times, vec![three, three]);
    assert_eq!(old_notes(&db, t(1)).await, 0);
    assert!(
        logs.text().contains("the tenant directory is down"),
        "{}",
        logs.text()
    );
}

// contract: W6
#[tokio::test]
async fn missed_occurrences_are_skipped_not_caught_up() {
    let db = db_with_tables().await;
    seed(&db, &[t(1)], 3).await;
    let mut hourly = options();
    hourly.worker.schedule = "0 * * * *".into();
    let cohort = handle(&db, hourly, Rules::default()).await;
    let shutdown = CancellationToken::new();
    let clock = TestClock::at(occurrence() - Duration::minutes(1));
    let c = clock.clone();
    let stop = shutdown.clone();
    let source = Scripted {
        calls: AtomicUsize::new(0),
        script: Box::new(move |n| match n {
            // The 02:00 occurrence takes until 05:30: 03:00 to 05:00 are missed.
            1 => {
                c.set(occurrence() + Duration::minutes(210));
                Ok(Vec::new())
            }
            2 => Ok(Vec::new()),
            _ => {
                stop.cancel();
                Err("stopping".into())
            }
        }),
    };
    tokio::time::timeout(
        StdDuration::from_secs(60),
        cohort.worker().tenants(source).clock(clock).run(shutdown),
    )
    .await
    .expect("stopped")
    .expect("ran");
    let times: Vec<DateTime<Utc>> = scheduled_runs(&db).await.iter().map(|r| r.3).collect();
    assert_eq!(times, vec![occurrence(), occurrence() + Duration::hours(4)]);
}

// contract: W7
#[tokio::test]
async fn the_worker_checks_readiness_at_start_and_never_changes_the_schema() {
    let db = db_with_tables().await;
    let cohort = handle(&db, options(), Rules::default()).await;
    db.exec("DROP TRIGGER retention_holds_entity_fence ON retention_holds")
        .await;
    let before = count(
        &db,
        "SELECT count(*) FROM pg_trigger WHERE NOT tgisinternal",
    )
    .await;
    let err = cohort
        .worker()
        .clock(TestClock::at(occurrence()))
        .run(CancellationToken::new())
        .await
        .expect_err("not ready");
    assert!(matches!(err, Error::SchemaNotReady(_)), "{err}");
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM pg_trigger WHERE NOT tgisinternal"
        )
        .await,
        before
    );
    assert!(scheduled_runs(&db).await.is_empty());
}

// contract: W8
#[tokio::test]
async fn an_occurrences_passes_share_one_connection_and_a_pass_that_loses_it_does_not_stop_the_next()
 {
    let db = db_with_tables().await;
    let tenants = [t(1), t(2), t(3), t(4)];
    seed(&db, &tenants, 2).await;
    // Each purged note records its backend; tenant 2's purge kills its own
    // backend mid-statement, so that pass fails with a lost connection.
    db.exec(&format!(
        "CREATE TABLE public.pass_backends (tenant_id uuid, pid int); \
         GRANT INSERT ON public.pass_backends TO PUBLIC; \
         CREATE FUNCTION public.note_backend() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN \
           IF OLD.tenant_id = '{killed}' THEN \
             PERFORM pg_catalog.pg_terminate_backend(pg_catalog.pg_backend_pid()); \
           END IF; \
           INSERT INTO public.pass_backends VALUES (OLD.tenant_id, pg_catalog.pg_backend_pid()); \
           RETURN OLD; \
         END $$; \
         CREATE TRIGGER note_backend AFTER DELETE ON public.session_notes \
           FOR EACH ROW EXECUTE FUNCTION public.note_backend()",
        killed = t(2)
    ))
    .await;
    let cohort = handle(&db, options(), Rules::default()).await;
    let report = cohort
        .worker()
        .tenants(
            tenants
                .iter()
                .map(|&id| TenantContext::new(id))
                .collect::<Vec<_>>(),
        )
        .run_occurrence(occurrence(), &CancellationToken::new())
        .await
        .expect("occurrence");
    assert_eq!(
        report.passes.len(),
        5,
        "four tenants and the tenantless pass"
    );
    assert_eq!(report.failed_passes(), 1, "{report:?}");
    assert_eq!(report.passes[1].tenant_id, Some(t(2)));
    assert!(report.passes[1].error.is_some(), "{report:?}");
    for n in [1, 3, 4] {
        assert_eq!(old_notes(&db, t(n)).await, 0, "tenant {n} was swept");
    }
    assert_eq!(old_notes(&db, t(2)).await, 2, "the killed pass rolled back");
    let pids: Vec<(Uuid, i32)> =
        sqlx::query_as("SELECT DISTINCT tenant_id, pid FROM pass_backends ORDER BY 1")
            .fetch_all(db.pool())
            .await
            .expect("backends");
    let pid = |n: u128| {
        let of: Vec<i32> = pids
            .iter()
            .filter(|(id, _)| *id == t(n))
            .map(|p| p.1)
            .collect();
        assert_eq!(of.len(), 1, "one backend per pass: {pids:?}");
        of[0]
    };
    assert_eq!(
        pid(3),
        pid(4),
        "passes after a failure share the new connection"
    );
    assert_ne!(pid(1), pid(3), "the lost connection was replaced");
}
