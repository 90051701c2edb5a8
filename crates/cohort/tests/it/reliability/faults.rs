//! Faults (contract R2; `docs/reliability.md`): the sweeping backend
//! terminated mid-run, `statement_timeout` and `lock_timeout` firing inside
//! batches, and the sweeping process killed with SIGKILL, each while the
//! random workload of `reliability::history` runs beside it. After each
//! fault: settle the abandoned runs, run again, and check the invariants of
//! R1 (no held row mutated, one row detail per mutation and back, summaries
//! equal the data's changes, every run settled); a last quiet sweep leaves
//! nothing eligible.
//!
//! `COHORT_RELIABILITY_FAULTS` sets the rounds per fault (default 3),
//! `COHORT_RELIABILITY_SEED` the seed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::harness::*;
use chrono::Utc;
use cohort::{Cohort, Options, RunStatus, SweepOptions};
use sqlx::postgres::PgPoolOptions;

/// The name libtest knows this module's test `name` by (the module path
/// without the crate's name: `reliability::faults::name`), for running that
/// test alone in a child process with `--exact`.
fn this_test(name: &str) -> String {
    let module = module_path!()
        .split_once("::")
        .map_or("", |(_, module)| module);
    format!("{module}::{name}")
}

/// The application name of the faulted side's connections.
const SWEEPER: &str = "rel-sweeper";

/// A second handle on the same model, whose connections carry
/// [`SWEEPER`] and `settings` (name, value), so a fault can pick them out.
/// The settings take effect once the handle is built: the fault is for its
/// runs, not for its start-up validation.
async fn sweeper(world: &World, options: Options, settings: &[(&str, &str)]) -> Cohort {
    let armed = Arc::new(AtomicBool::new(false));
    let pool = armed_pool(&world.db, SWEEPER, settings, armed.clone()).await;
    let cohort = model(Cohort::builder(pool).options(options).rules(rules()))
        .build()
        .await
        .expect("sweeper handle");
    armed.store(true, Ordering::SeqCst);
    cohort
}

/// Runs every abandoned run's settlement until no run is `Started` (the
/// workload has finished, so every `Started` run is abandoned; settling
/// waits until the run's lease, 1 s here, expired).
async fn settle_all(world: &World) -> u64 {
    let mut settled = 0;
    for _ in 0..600 {
        settled += world
            .cohort
            .settle_abandoned_runs()
            .await
            .expect("settle abandoned runs");
        let started: i64 =
            sqlx::query_scalar("SELECT count(*) FROM public.sweep_run WHERE status = 'Started'")
                .fetch_one(world.db.pool())
                .await
                .expect("started runs");
        if started == 0 {
            world.count(format!("settle: {settled} abandoned runs settled"));
            return settled;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("a run stayed Started: its lock was never released");
}

/// Waits until some batch of a run of the faulted side ([`SWEEPER`]) still
/// `Started` has committed a row detail, or `done` says the run is over.
async fn wait_for_progress(world: &World, done: &tokio::task::JoinHandle<impl Sized>) {
    for _ in 0..6000 {
        let progressed: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM public.rel_detail d \
             JOIN public.sweep_run r ON r.run_id = d.run_id \
             WHERE r.status = 'Started' AND d.app = 'rel-sweeper')",
        )
        .fetch_one(world.db.pool())
        .await
        .expect("progress");
        if progressed || done.is_finished() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("no run ever made progress");
}

/// Expired rows for every table, so a sweep takes many batches.
async fn load(world: &World, rng: &mut Rng, rows: i64) {
    for t in 0..N {
        insert_rows(world, rng, t, rows).await;
    }
}

/// After the faults: settle, a last quiet sweep, then nothing is eligible
/// and the checker finds nothing.
async fn recover_and_check(world: &Arc<World>, label: &str) {
    settle_all(world).await;
    let last = world
        .cohort
        .sweep_with(&scope(), Utc::now(), SweepOptions::default())
        .await;
    world.record("recovery sweep", &last);
    assert_eq!(
        last.expect("the recovery sweep").status,
        RunStatus::Succeeded,
        "{label}: a new run finishes the job"
    );
    let preview = world
        .cohort
        .preview(&scope(), Utc::now())
        .await
        .expect("preview");
    let left: u64 = preview.entries.iter().map(|e| e.eligible).sum();
    assert_eq!(left, 0, "{label}: nothing eligible is left: {preview:?}");
    let report = check(world).await;
    assert_clean(world, &report, label);
}

/// The workload beside a fault: `ops` random operations on 2 tasks.
fn beside(world: &Arc<World>, seed: u64, ops: u64) -> tokio::task::JoinHandle<()> {
    let world = world.clone();
    tokio::spawn(async move { run_workload(&world, seed, 2, ops).await })
}

// contract: R2, X4, A11
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminating_the_sweeping_backend_mid_run_loses_nothing() {
    let seed = seed();
    let rounds = env_u64("COHORT_RELIABILITY_FAULTS", 3);
    let world = world(20, options(5)).await;
    let faulted = sweeper(&world, options(5), &[]).await;
    let mut rng = Rng::new(seed);
    let mut terminated_mid_run = 0;
    for round in 0..rounds {
        load(&world, &mut rng, 150).await;
        let workload = beside(&world, seed.wrapping_add(round), 60);
        let erase = rng.chance(30);
        let run = tokio::spawn({
            let faulted = faulted.clone();
            let subject = subject(rng.next());
            async move {
                if erase {
                    faulted
                        .erase(&scope(), Utc::now(), cohort::ErasureRequest::new(subject))
                        .await
                } else {
                    faulted.sweep(&scope(), Utc::now()).await
                }
            }
        });
        wait_for_progress(&world, &run).await;
        let killed: i64 = sqlx::query_scalar(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE datname = current_database() AND application_name = $1",
        )
        .bind(SWEEPER)
        .fetch_one(world.db.pool())
        .await
        .expect("terminate");
        let result = run.await.expect("join");
        if killed > 0 && !matches!(&result, Ok(r) if r.status == RunStatus::Succeeded) {
            terminated_mid_run += 1;
        }
        world.record("faulted run (backend terminated)", &result);
        workload.await.expect("workload");
        // Settle, then run again with the same (reconnecting) handle.
        settle_all(&world).await;
        let again = faulted.sweep(&scope(), Utc::now()).await;
        world.record("faulted handle, run again", &again);
        let report = check(&world).await;
        assert!(
            report.problems.is_empty(),
            "round {round}: {}",
            report.problems.join("\n")
        );
    }
    println!("backends terminated mid-run in {terminated_mid_run} of {rounds} rounds");
    assert!(terminated_mid_run > 0, "no round was faulted mid-run");
    recover_and_check(
        &world,
        &format!("R2 terminate backend, {rounds} rounds, seed {seed}"),
    )
    .await;
}

/// A statement of the faulted side that touches a row whose id is a
/// multiple of 11 sleeps 60 ms; its `statement_timeout` is 30 ms.
const SLOW_ROWS: &str = r#"
CREATE FUNCTION public.rel_slow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('application_name') = 'rel-sweeper' AND OLD.id % 11 = 0 THEN
        PERFORM pg_sleep(0.06);
    END IF;
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER rel_slow BEFORE UPDATE OR DELETE ON public.rel_notes
    FOR EACH ROW EXECUTE FUNCTION public.rel_slow();
CREATE TRIGGER rel_slow BEFORE UPDATE OR DELETE ON public.rel_tickets
    FOR EACH ROW EXECUTE FUNCTION public.rel_slow();
CREATE TRIGGER rel_slow BEFORE UPDATE OR DELETE ON public.rel_contacts
    FOR EACH ROW EXECUTE FUNCTION public.rel_slow();
CREATE TRIGGER rel_slow BEFORE UPDATE OR DELETE ON public.rel_users
    FOR EACH ROW EXECUTE FUNCTION public.rel_slow();
CREATE TRIGGER rel_slow BEFORE UPDATE OR DELETE ON public.rel_cases
    FOR EACH ROW EXECUTE FUNCTION public.rel_slow();
"#;

// contract: R2, X1
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_timeout_firing_inside_a_batch_loses_nothing() {
    let seed = seed();
    let rounds = env_u64("COHORT_RELIABILITY_FAULTS", 3);
    let world = world(20, options(5)).await;
    world.db.exec(SLOW_ROWS).await;
    let faulted = sweeper(&world, options(5), &[("statement_timeout", "30ms")]).await;
    let mut rng = Rng::new(seed);
    let mut timed_out = 0;
    for round in 0..rounds {
        load(&world, &mut rng, 60).await;
        let workload = beside(&world, seed.wrapping_add(round), 60);
        let result = if rng.chance(30) {
            faulted
                .erase(
                    &scope(),
                    Utc::now(),
                    cohort::ErasureRequest::new(subject(rng.next())),
                )
                .await
        } else {
            faulted.sweep(&scope(), Utc::now()).await
        };
        let failed = sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM public.sweep_run_entity_summary WHERE error LIKE '%57014%'",
        )
        .fetch_one(world.db.pool())
        .await
        .expect("timeouts");
        if failed > 0 || result.is_err() {
            timed_out += 1;
        }
        world.record("faulted run (statement timeout)", &result);
        workload.await.expect("workload");
        settle_all(&world).await;
        let report = check(&world).await;
        assert!(
            report.problems.is_empty(),
            "round {round}: {}",
            report.problems.join("\n")
        );
    }
    println!("statement_timeout fired in {timed_out} of {rounds} rounds");
    assert!(timed_out > 0, "no statement timed out");
    recover_and_check(
        &world,
        &format!("R2 statement_timeout, {rounds} rounds, seed {seed}"),
    )
    .await;
}

/// Entity summaries that recorded a failure.
async fn failed_summaries(world: &World) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM public.sweep_run_entity_summary WHERE error IS NOT NULL",
    )
    .fetch_one(world.db.pool())
    .await
    .expect("failures")
}

// contract: R2
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_timeout_firing_inside_a_batch_or_at_the_fence_loses_nothing() {
    let seed = seed();
    let rounds = env_u64("COHORT_RELIABILITY_FAULTS", 3);
    let world = world(20, options(5)).await;
    // Erasure batches wait for locked rows as the session would: 20 ms here.
    // The fence wait is 50 ms.
    let faulted = sweeper(
        &world,
        Options {
            fence_wait: Duration::from_millis(50),
            ..options(5)
        },
        &[("lock_timeout", "20ms")],
    )
    .await;
    let mut rng = Rng::new(seed);
    for round in 0..rounds {
        load(&world, &mut rng, 60).await;
        let workload = beside(&world, seed.wrapping_add(round), 60);
        // A host transaction locks some users' rows, and a hold creator holds
        // the notes' fence, both until the faulted erasure and sweep are
        // done: the sweep's notes batches cannot get the fence within the
        // fence wait, and the erasure's batches meet the locked rows, in
        // every round (no timing decides it).
        let mut locker = world.db.connect().await;
        let mut lock_tx = sqlx::Connection::begin(&mut locker).await.expect("begin");
        sqlx::query("SELECT id FROM public.rel_users WHERE id % 3 = 0 FOR UPDATE")
            .execute(&mut *lock_tx)
            .await
            .expect("lock rows");
        let mut fencer = world.db.connect_engine().await;
        let mut fence_tx = sqlx::Connection::begin(&mut fencer).await.expect("begin");
        let note: Option<i64> = sqlx::query_scalar("SELECT max(id) FROM public.rel_notes")
            .fetch_one(world.db.pool())
            .await
            .expect("a note");
        let _ = world
            .cohort
            .holds()
            .create(
                &mut fence_tx,
                cohort::holds::HoldRequest::new(
                    uuid::Uuid::from_u128(NOTES),
                    note.unwrap_or(1).to_string(),
                    Some(tenant()),
                    "fence blocker",
                    Utc::now(),
                ),
            )
            .await;
        let scope = scope();
        let erasure = faulted.erase(
            &scope,
            Utc::now(),
            cohort::ErasureRequest::new(subject(rng.next())),
        );
        let sweep = faulted.sweep(&scope, Utc::now());
        let failed_before = failed_summaries(&world).await;
        let (erased, swept) = tokio::join!(erasure, sweep);
        lock_tx.commit().await.expect("release rows");
        fence_tx.commit().await.expect("release fence");
        world.record("faulted erasure (lock_timeout)", &erased);
        world.record("faulted sweep (fence wait)", &swept);
        assert!(
            failed_summaries(&world).await > failed_before,
            "round {round}: the fence wait fired"
        );
        workload.await.expect("workload");
        settle_all(&world).await;
        let report = check(&world).await;
        assert!(
            report.problems.is_empty(),
            "round {round}: {}",
            report.problems.join("\n")
        );
    }
    let failures = failed_summaries(&world).await;
    println!("entity summaries failed by a lock or fence timeout: {failures}");
    assert!(failures > 0, "no lock timeout fired");
    recover_and_check(
        &world,
        &format!("R2 lock_timeout, {rounds} rounds, seed {seed}"),
    )
    .await;
}

/// The child side of the SIGKILL test: when `COHORT_REL_CHILD_URL` names a
/// database (on the parent's server, which may be the parent's private
/// cluster), sweeps it with tiny batches until killed. Otherwise does
/// nothing (it is run as a child process by the test below).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_sweeper_process() {
    let Ok(url) = std::env::var("COHORT_REL_CHILD_URL") else {
        return;
    };
    let connect: sqlx::postgres::PgConnectOptions = url.parse().expect("the parent's URL");
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .connect_with(connect.application_name(SWEEPER))
        .await
        .expect("child pool");
    let cohort = model(Cohort::builder(pool).options(options(3)).rules(rules()))
        .build()
        .await
        .expect("child handle");
    // With an occurrence: the scheduled worker sweeps it (then idles).
    if let Some(ms) = std::env::var("COHORT_REL_CHILD_OCCURRENCE")
        .ok()
        .and_then(|v| v.parse::<i64>().ok())
    {
        let occurrence = chrono::DateTime::<Utc>::from_timestamp_millis(ms).expect("occurrence");
        let worker = cohort
            .worker()
            .tenants(cohort::TenantContext::new(tenant()));
        let _ = worker
            .run_occurrence(occurrence, &cohort::CancellationToken::new())
            .await;
        std::future::pending::<()>().await;
    }
    loop {
        let _ = cohort.sweep(&scope(), Utc::now()).await;
    }
}

/// Waits until no backend of the faulted side is left (the server noticed
/// the killed process's connections are gone, releasing its locks).
async fn wait_for_no_sweeper(world: &World) {
    for _ in 0..3000 {
        let left: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND application_name = $1",
        )
        .bind(SWEEPER)
        .fetch_one(world.db.pool())
        .await
        .expect("backends");
        if left == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the killed process's backends never went away");
}

// contract: R2, W4, X4
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_occurrence_has_its_occurrence_swept_again() {
    let seed = seed();
    let rounds = env_u64("COHORT_RELIABILITY_FAULTS", 3);
    let world = world(20, options(5)).await;
    let mut rng = Rng::new(seed);
    let exe = std::env::current_exe().expect("the test binary");
    for round in 0..rounds {
        load(&world, &mut rng, 150).await;
        let ms = Utc::now().timestamp_millis();
        let occurrence = chrono::DateTime::<Utc>::from_timestamp_millis(ms).expect("occurrence");
        let mut child = std::process::Command::new(&exe)
            .args([
                "--exact",
                this_test("child_sweeper_process").as_str(),
                "--nocapture",
                "--test-threads=1",
            ])
            .env("COHORT_REL_CHILD_URL", world.db.url())
            .env("COHORT_REL_CHILD_OCCURRENCE", ms.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("child");
        let never = tokio::spawn(std::future::pending::<()>());
        wait_for_progress(&world, &never).await;
        never.abort();
        child.kill().expect("kill -9");
        child.wait().expect("reap");
        wait_for_no_sweeper(&world).await;
        // Another replica comes to the same occurrence: the run left
        // Started by the dead worker does not claim it.
        let worker = world
            .cohort
            .worker()
            .tenants(cohort::TenantContext::new(tenant()));
        let report = worker
            .run_occurrence(occurrence, &cohort::CancellationToken::new())
            .await
            .expect("the occurrence");
        assert!(
            !report.already_swept,
            "round {round}: a dead worker's run claimed the occurrence: {report:?}"
        );
        assert_eq!(report.failed_passes(), 0, "round {round}: {report:?}");
        world.count("worker killed mid-occurrence, occurrence swept again");
        // A third replica finds it swept.
        let again = worker
            .run_occurrence(occurrence, &cohort::CancellationToken::new())
            .await
            .expect("the occurrence");
        assert!(again.already_swept, "round {round}: {again:?}");
        settle_all(&world).await;
        let report = check(&world).await;
        assert!(
            report.problems.is_empty(),
            "round {round}: {}",
            report.problems.join("\n")
        );
    }
    recover_and_check(
        &world,
        &format!("R2 worker killed, {rounds} rounds, seed {seed}"),
    )
    .await;
}

// contract: R2, X4, A11
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_sweeping_process_mid_run_loses_nothing() {
    let seed = seed();
    let rounds = env_u64("COHORT_RELIABILITY_FAULTS", 3);
    let world = world(20, options(5)).await;
    let mut rng = Rng::new(seed);
    let exe = std::env::current_exe().expect("the test binary");
    for round in 0..rounds {
        load(&world, &mut rng, 150).await;
        let workload = beside(&world, seed.wrapping_add(round), 60);
        let mut child = std::process::Command::new(&exe)
            .args([
                "--exact",
                this_test("child_sweeper_process").as_str(),
                "--nocapture",
                "--test-threads=1",
            ])
            .env("COHORT_REL_CHILD_URL", world.db.url())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("child");
        let never = tokio::spawn(std::future::pending::<()>());
        wait_for_progress(&world, &never).await;
        never.abort();
        // SIGKILL.
        child.kill().expect("kill -9");
        child.wait().expect("reap");
        world.count("child killed mid-run");
        workload.await.expect("workload");
        settle_all(&world).await;
        let report = check(&world).await;
        assert!(
            report.problems.is_empty(),
            "round {round}: {}",
            report.problems.join("\n")
        );
    }
    recover_and_check(&world, &format!("R2 kill -9, {rounds} rounds, seed {seed}")).await;
}

/// Finds `name` on `PATH` or under `/usr/lib/postgresql/*/bin`.
fn pg_binary(name: &str) -> std::path::PathBuf {
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    let mut versions: Vec<std::path::PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| d.flatten().map(|e| e.path().join("bin")).collect())
        .unwrap_or_default();
    versions.sort();
    versions.reverse();
    on_path
        .into_iter()
        .chain(versions)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("no {name} on PATH or under /usr/lib/postgresql"))
}

/// `pg_ctl restart -m immediate` of the private cluster in `dir` (as the
/// `postgres` user when this process is root, as `cohort-testdb` starts it).
fn restart_immediately(dir: &std::path::Path) {
    let pg_ctl = pg_binary("pg_ctl");
    let root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false);
    let mut cmd = if root {
        let mut c = std::process::Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(&pg_ctl);
        c
    } else {
        std::process::Command::new(&pg_ctl)
    };
    let out = cmd
        .arg("-D")
        .arg(dir.join("data"))
        .arg("-l")
        .arg(dir.join("log"))
        .args(["-m", "immediate", "-w", "-t", "60", "restart"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("pg_ctl");
    assert!(
        out.status.success(),
        "pg_ctl restart failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

// contract: R2, X4, A11
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarting_the_server_mid_run_loses_nothing() {
    // The restart needs a cluster of its own: run this test again in a child
    // process on a private throwaway cluster (cohort-testdb), so no other
    // test shares the server it restarts.
    if std::env::var_os("COHORT_REL_RESTART_CHILD").is_none() {
        let status = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "--exact",
                this_test("restarting_the_server_mid_run_loses_nothing").as_str(),
                "--nocapture",
                "--test-threads=1",
            ])
            .env("COHORT_REL_RESTART_CHILD", "1")
            .env(cohort_testdb::FORCE_PRIVATE_CLUSTER_VAR, "1")
            .status()
            .expect("child");
        assert!(
            status.success(),
            "the restart test failed in its child process"
        );
        return;
    }
    let server = cohort_testdb::Server::shared().await.expect("server");
    let dir = server
        .cluster_dir()
        .expect("a private cluster")
        .to_path_buf();
    let seed = seed();
    let rounds = env_u64("COHORT_RELIABILITY_FAULTS", 3);
    let world = world(20, options(5)).await;
    // The private cluster runs with synchronous_commit off (fast tests): an
    // immediate restart could then lose commits already acknowledged. The
    // suite checks Cohort, not that setting.
    world
        .db
        .exec("ALTER SYSTEM SET synchronous_commit = on")
        .await;
    world.db.exec("SELECT pg_reload_conf()").await;
    let faulted = sweeper(&world, options(5), &[]).await;
    let mut rng = Rng::new(seed);
    let mut interrupted = 0;
    for round in 0..rounds {
        load(&world, &mut rng, 150).await;
        let erase = rng.chance(30);
        let run = tokio::spawn({
            let faulted = faulted.clone();
            let subject = subject(rng.next());
            async move {
                if erase {
                    faulted
                        .erase(&scope(), Utc::now(), cohort::ErasureRequest::new(subject))
                        .await
                } else {
                    faulted.sweep(&scope(), Utc::now()).await
                }
            }
        });
        wait_for_progress(&world, &run).await;
        let d = dir.clone();
        tokio::task::spawn_blocking(move || restart_immediately(&d))
            .await
            .expect("restart");
        let result = run.await.expect("join");
        if !matches!(&result, Ok(r) if r.status == RunStatus::Succeeded) {
            interrupted += 1;
        }
        // Its result may name a run whose last ledger writes never happened:
        // only the tally keeps it.
        match &result {
            Ok(r) => world.count(format!("faulted run (server restarted): {:?}", r.status)),
            Err(e) => world.count(format!(
                "faulted run (server restarted): error {}",
                error_kind(e)
            )),
        }
        settle_all(&world).await;
        let again = faulted.sweep(&scope(), Utc::now()).await;
        world.record("faulted handle after the restart, run again", &again);
        let report = check(&world).await;
        assert!(
            report.problems.is_empty(),
            "round {round}: {}",
            report.problems.join("\n")
        );
        // The workload between restarts.
        run_workload(&world, seed.wrapping_add(round), 2, 60).await;
    }
    println!("server restarted mid-run in {interrupted} of {rounds} rounds");
    assert!(interrupted > 0, "no run was interrupted by a restart");
    recover_and_check(
        &world,
        &format!("R2 server restart, {rounds} rounds, seed {seed}"),
    )
    .await;
}
