//! Run ownership by lease (contract CO2): a live run renews its lease and is
//! never settled as abandoned, however long it runs; an owner that stalls
//! past its lease (its process stopped with SIGSTOP) is settled, and when it
//! resumes it can neither write a batch into the settled run nor settle it
//! again, and nothing it did is lost or counted twice.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration as StdDuration;

use crate::support::count;
use crate::support::fixtures::{db_with_tables, readme_rules, run_status, scope_a};
use crate::support::models::*;
use chrono::Utc;
use cohort::ledger::{AuditEvent, AuditObserver};
use cohort::policy::ProviderError;
use cohort::schema::SchemaName;
use cohort::{Cohort, ConnectionMode, Error, Options, RunStatus};
use cohort_testdb::{Bouncer, TestDb};
use futures_util::future::BoxFuture;
use uuid::Uuid;

/// The name libtest knows this module's test `name` by.
fn this_test(name: &str) -> String {
    let module = module_path!()
        .split_once("::")
        .map_or("", |(_, module)| module);
    format!("{module}::{name}")
}

fn options() -> Options {
    Options {
        batch_size: 2,
        run_lease: StdDuration::from_secs(1),
        observer_timeout: StdDuration::from_secs(600),
        ..Options::default()
    }
}

/// [`options`] for a handle behind PgBouncer in transaction mode.
fn pooled_options() -> Options {
    Options {
        connection_mode: ConnectionMode::TransactionPooled,
        ..options()
    }
}

/// Where the run's handle connects: the database directly, or a PgBouncer
/// in transaction mode (two server connections, round robin) in front of it.
struct Route {
    bouncer: Option<Bouncer>,
}

impl Route {
    async fn new(db: &TestDb, pooled: bool) -> Route {
        let bouncer = if pooled {
            Some(Bouncer::start(db, 2).await.expect("PgBouncer starts"))
        } else {
            None
        };
        Route { bouncer }
    }

    fn pool(&self, db: &TestDb) -> sqlx::PgPool {
        match &self.bouncer {
            Some(b) => b.pool(4),
            None => db.pool().clone(),
        }
    }

    fn url(&self, db: &TestDb) -> String {
        match &self.bouncer {
            Some(b) => b.url(),
            None => db.url(),
        }
    }

    fn options(&self) -> Options {
        if self.bouncer.is_some() {
            pooled_options()
        } else {
            options()
        }
    }
}

/// Records the server connection (backend pid) of every transaction that
/// deletes notes or writes `sweep_run`, into `public.run_backends`.
async fn record_backends(db: &TestDb) {
    db.exec(
        "CREATE TABLE public.run_backends (pid int NOT NULL); \
         CREATE FUNCTION public.record_backend() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN INSERT INTO public.run_backends VALUES (pg_catalog.pg_backend_pid()); RETURN NULL; END $$; \
         CREATE TRIGGER record_backend AFTER DELETE ON public.session_notes \
           FOR EACH STATEMENT EXECUTE FUNCTION public.record_backend(); \
         CREATE TRIGGER record_backend AFTER UPDATE ON public.sweep_run \
           FOR EACH STATEMENT EXECUTE FUNCTION public.record_backend();",
    )
    .await;
}

async fn notes(db: &TestDb, n: u32) {
    db.exec(&format!(
        "INSERT INTO session_notes (id, tenant_id, created_at, body) \
         SELECT gen_random_uuid(), '11111111-1111-1111-1111-111111111111', \
                now() - interval '100 days' + g * interval '1 second', 'x' \
         FROM generate_series(1, {n}) g"
    ))
    .await;
}

/// Holds the run at its `Started` event until the test says go.
struct HoldAtStart {
    started: Mutex<Option<tokio::sync::oneshot::Sender<Uuid>>>,
    go: Arc<tokio::sync::Notify>,
}

impl AuditObserver for HoldAtStart {
    fn on_event<'a>(&'a self, event: &'a AuditEvent) -> BoxFuture<'a, Result<(), ProviderError>> {
        Box::pin(async move {
            if let AuditEvent::Started { run_id, .. } = event {
                let started = self.started.lock().expect("started").take();
                if let Some(started) = started {
                    let _ = started.send(*run_id);
                    self.go.notified().await;
                }
            }
            Ok(())
        })
    }
}

/// Polls (bounded, asserted) until `sql` (one boolean) is true.
async fn until(db: &TestDb, sql: &str, bind: Uuid, what: &str) {
    for _ in 0..6000 {
        let yes: bool = sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
            .bind(bind)
            .fetch_one(db.pool())
            .await
            .expect("poll");
        if yes {
            return;
        }
        tokio::time::sleep(StdDuration::from_millis(10)).await;
    }
    panic!("never: {what}");
}

// contract: CO2, X4
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_run_that_outlasts_its_lease_is_renewed_and_never_settled() {
    live_run_outlasting_its_lease(false).await;
}

// contract: CO2, CO1
// The same through PgBouncer in transaction mode: the run's transactions
// (its batches, its lease renewals, its settle) land on both server
// connections, and the settle attempt through the pooler still sees the
// lease, where a session lock would have looked free from the other
// server connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_run_through_the_pooler_is_never_settled_as_abandoned() {
    live_run_outlasting_its_lease(true).await;
}

async fn live_run_outlasting_its_lease(pooled: bool) {
    let db = db_with_tables().await;
    notes(&db, 4).await;
    record_backends(&db).await;
    let route = Route::new(&db, pooled).await;
    let (started_tx, started_rx) = tokio::sync::oneshot::channel();
    let go = Arc::new(tokio::sync::Notify::new());
    let cohort = Cohort::builder(route.pool(&db))
        .options(route.options())
        .rules(readme_rules())
        .entity::<SessionNote>()
        .observer(HoldAtStart {
            started: Mutex::new(Some(started_tx)),
            go: go.clone(),
        })
        .build()
        .await
        .expect("model");
    let run = tokio::spawn({
        let cohort = cohort.clone();
        async move { cohort.sweep(&scope_a(), Utc::now()).await }
    });
    let run_id = tokio::time::timeout(StdDuration::from_secs(120), started_rx)
        .await
        .expect("the run started")
        .expect("its id");
    // The run waits while three of its leases would have run out, by the
    // database clock; its keeper renews it meanwhile.
    until(
        &db,
        "SELECT pg_catalog.clock_timestamp() > started_at + interval '3 seconds' \
         FROM sweep_run WHERE run_id = $1",
        run_id,
        "three lease periods passed",
    )
    .await;
    let other = Cohort::builder(route.pool(&db))
        .options(route.options())
        .rules(readme_rules())
        .entity::<SessionNote>()
        .build()
        .await
        .expect("model");
    assert_eq!(
        other.settle_abandoned_runs().await.expect("settle"),
        0,
        "a live run is never settled"
    );
    let (status, live): (String, bool) = sqlx::query_as(
        "SELECT status, lease_expires_at > pg_catalog.clock_timestamp() FROM sweep_run WHERE run_id = $1",
    )
    .bind(run_id)
    .fetch_one(db.pool())
    .await
    .expect("run");
    assert_eq!((status.as_str(), live), ("Started", true));
    go.notify_one();
    let result = run.await.expect("join").expect("the run finishes");
    assert_eq!(result.status, RunStatus::Succeeded);
    assert_eq!(result.affected(), 4);
    assert_eq!(run_status(&db, run_id).await, "Succeeded");
    if pooled {
        assert!(
            count(&db, "SELECT count(DISTINCT pid) FROM public.run_backends").await >= 2,
            "the run's transactions spread over both server connections"
        );
    }
}

/// The stalled owner, run as a child process (see the test below): prints
/// `PAUSED <run id>` after its first batch committed, waits for a line on
/// its standard input, then lets the run go on and prints how it ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_stalled_owner() {
    let Some(url) = std::env::var_os("COHORT_LEASE_CHILD_URL") else {
        return;
    };
    let pool = sqlx::PgPool::connect(&url.to_string_lossy())
        .await
        .expect("pool");
    let pooled = std::env::var_os("COHORT_LEASE_CHILD_POOLED").is_some();
    let cohort = Cohort::builder(pool)
        .options(if pooled { pooled_options() } else { options() })
        .rules(readme_rules())
        .entity::<SessionNote>()
        .observer(PauseAfterFirstBatch(Mutex::new(false)))
        .build()
        .await
        .expect("model");
    match cohort.sweep(&scope_a(), Utc::now()).await {
        Err(Error::RunLeaseLost { run_id }) => println!("RESULT lease-lost {run_id}"),
        other => println!("RESULT other {other:?}"),
    }
}

/// Says `PAUSED <run id>` on the first batch's progress, then blocks on a
/// line of standard input.
struct PauseAfterFirstBatch(Mutex<bool>);

impl AuditObserver for PauseAfterFirstBatch {
    fn on_event<'a>(&'a self, event: &'a AuditEvent) -> BoxFuture<'a, Result<(), ProviderError>> {
        Box::pin(async move {
            if let AuditEvent::EntityProgress { run_id, .. } = event {
                let first = !std::mem::replace(&mut *self.0.lock().expect("once"), true);
                if first {
                    println!("PAUSED {run_id}");
                    let _ = std::io::stdout().flush();
                    let _ = tokio::task::spawn_blocking(|| {
                        let mut line = String::new();
                        let _ = std::io::stdin().read_line(&mut line);
                    })
                    .await;
                }
            }
            Ok(())
        })
    }
}

fn signal(pid: u32, sig: &str) {
    let status = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success(), "kill {sig} {pid}");
}

// contract: CO2, A11, EV1
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_owner_cannot_write_into_or_settle_the_run_settled_meanwhile() {
    stalled_owner(false, Fate::Resumed).await;
}

// contract: CO2, CO1
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_owner_through_the_pooler_cannot_write_into_or_settle_the_settled_run() {
    stalled_owner(true, Fate::Resumed).await;
}

// contract: CO2, CO1
// An owner killed mid-run behind the pooler: its run is settled once the
// lease expired (not before: the settle attempt while it lives settles
// nothing), with the batch it committed counted once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_owners_run_through_the_pooler_is_settled_after_its_lease_expired() {
    stalled_owner(true, Fate::Killed).await;
}

/// What happens to the stalled owner after its run was settled.
#[derive(Clone, Copy, PartialEq)]
enum Fate {
    /// SIGCONT: it wakes up and carries on.
    Resumed,
    /// SIGKILL: it never comes back.
    Killed,
}

async fn stalled_owner(pooled: bool, fate: Fate) {
    let db = db_with_tables().await;
    notes(&db, 10).await;
    let route = Route::new(&db, pooled).await;
    let exe = std::env::current_exe().expect("the test binary");
    let mut command = Command::new(exe);
    command
        .args([
            "--exact",
            &this_test("child_stalled_owner"),
            "--nocapture",
            "--test-threads=1",
        ])
        .env("COHORT_LEASE_CHILD_URL", route.url(&db));
    if pooled {
        command.env("COHORT_LEASE_CHILD_POOLED", "1");
    }
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("child");
    let pid = child.id();
    let (line_tx, lines) = std::sync::mpsc::channel::<String>();
    let stdout = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line_tx.send(line).is_err() {
                break;
            }
        }
    });
    let paused = loop {
        let line = lines
            .recv_timeout(StdDuration::from_secs(120))
            .expect("the child reached its first batch");
        if let Some((_, id)) = line.split_once("PAUSED ") {
            break Uuid::parse_str(id.trim()).expect("run id");
        }
    };
    // While it lives, its run is not settled.
    let settler = Cohort::builder(route.pool(&db))
        .options(route.options())
        .rules(readme_rules())
        .entity::<SessionNote>()
        .build()
        .await
        .expect("model");
    assert_eq!(settler.settle_abandoned_runs().await.expect("settle"), 0);
    // The whole process stops: its lease keeper too.
    signal(pid, "-STOP");
    until(
        &db,
        "SELECT lease_expires_at < pg_catalog.clock_timestamp() FROM sweep_run WHERE run_id = $1",
        paused,
        "the stalled owner's lease expired",
    )
    .await;
    if fate == Fate::Killed {
        signal(pid, "-KILL");
    }
    assert_eq!(settler.settle_abandoned_runs().await.expect("settle"), 1);
    let (status, affected): (String, i64) = sqlx::query_as(
        "SELECT r.status, s.affected_count FROM sweep_run r JOIN sweep_run_entity_summary s USING (run_id) \
         WHERE r.run_id = $1",
    )
    .bind(paused)
    .fetch_one(db.pool())
    .await
    .expect("settled run");
    assert_eq!((status.as_str(), affected), ("Failed", 2));
    let left_at_settle = count(&db, "SELECT count(*) FROM session_notes").await;
    assert_eq!(
        left_at_settle, 8,
        "one batch of two committed before the stall"
    );

    if fate == Fate::Resumed {
        // The owner wakes up and carries on: it must find the run settled.
        signal(pid, "-CONT");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(b"go\n")
            .expect("wake the observer");
    }
    let status = child.wait().expect("child exits");
    reader.join().expect("reader");
    if fate == Fate::Resumed {
        let rest: Vec<String> = lines.try_iter().collect();
        assert!(status.success(), "{rest:?}");
        assert!(
            rest.iter()
                .any(|l| l.starts_with(&format!("RESULT lease-lost {paused}"))),
            "the owner stopped with RunLeaseLost: {rest:?}"
        );
    }
    // Nothing written after the settle: no row deleted, no count changed,
    // the run not settled again, the ledger's chain intact.
    assert_eq!(
        count(&db, "SELECT count(*) FROM session_notes").await,
        left_at_settle
    );
    let (status, affected): (String, i64) = sqlx::query_as(
        "SELECT r.status, s.affected_count FROM sweep_run r JOIN sweep_run_entity_summary s USING (run_id) \
         WHERE r.run_id = $1",
    )
    .bind(paused)
    .fetch_one(db.pool())
    .await
    .expect("settled run");
    assert_eq!((status.as_str(), affected), ("Failed", 2));
    assert_eq!(count(&db, "SELECT count(*) FROM sweep_run").await, 1);
    let mut conn = db.pool().acquire().await.expect("conn");
    let report = cohort::evidence::verify(&mut conn, &SchemaName::public())
        .await
        .expect("verify");
    assert!(report.is_intact(), "{report}");
}
