//! K4: live progress (plain log lines when not on a terminal) and Ctrl-C:
//! the first cancels cleanly (the run ends `Cancelled`, committed batches
//! stay), the second exits at once.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use sqlx::Connection;

use crate::common::*;

const TENANT: &str = "2b0c6e1e-5d4c-4a8e-9a59-1f3c1d0e7a21";
const EVENTS: &str = "4e5f6a7b-8c9d-4e0f-a1b2-c3d4e5f6a7b8";
const ROWS: i64 = 20_000;

fn model() -> String {
    format!(
        r#"
[[entity]]
id = "{EVENTS}"
table = "events"
category = "events"
anchor = "created_at"

[rules.events]
strategy = "purge"
period = "30d"
"#
    )
}

/// 20,000 rows, all old enough: with one row per batch, a sweep takes far
/// longer than the test needs to see it progress and interrupt it.
async fn setup(p: &Project) {
    assert_success(&p.cohort(&["schema", "migrate"]));
    p.db.exec(&format!(
        "CREATE TABLE events (id bigint PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz NOT NULL); \
         CREATE INDEX events_tenant_created ON events (tenant_id, created_at); \
         INSERT INTO events SELECT i, '{TENANT}', '2020-01-01'::timestamptz + i * interval '1 second' \
         FROM generate_series(1, {ROWS}) AS i;"
    ))
    .await;
    p.write("cohort-model.toml", &model());
}

fn spawn_sweep(p: &Project, extra_env: &[(&str, &str)]) -> Child {
    let mut c = p.command(&["sweep", "--tenant", TENANT]);
    c.env("COHORT_BATCH_SIZE", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in extra_env {
        c.env(k, v);
    }
    c.spawn().expect("start the sweep")
}

fn interrupt(child: &Child) {
    let status = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success());
}

/// Waits until `sql` (one bigint) is positive, or panics after a minute.
async fn wait_for(p: &Project, sql: &'static str, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let n: Option<i64> = sqlx::query_scalar(sql)
            .fetch_optional(p.db.pool())
            .await
            .expect("poll the ledger")
            .flatten();
        if n.unwrap_or(0) > 0 {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn wait_exit(child: &mut Child, within: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().expect("poll the child") {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "the command did not exit within {within:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

// contract: K4
// contract: K8 (COHORT_BATCH_SIZE from the environment)
#[tokio::test]
async fn ctrl_c_cancels_the_sweep_cleanly_and_the_ledger_says_cancelled() {
    let p = Project::new().await;
    setup(&p).await;
    let mut child = spawn_sweep(&p, &[]);
    // Wait until batches have committed (the ledger's summary counts them).
    wait_for(
        &p,
        "SELECT s.affected_count FROM sweep_run_entity_summary s JOIN sweep_run r USING (run_id) \
         WHERE r.status = 'Started'",
        "the sweep to commit a batch",
    )
    .await;
    interrupt(&child);
    let status = wait_exit(&mut child, Duration::from_secs(60));
    let out = child.wait_with_output().expect("collect the output");
    assert_eq!(
        status.code(),
        Some(130),
        "stdout:\n{}\nstderr:\n{}",
        stdout(&out),
        stderr(&out)
    );

    let (run_status, settled, affected): (String, bool, i64) = sqlx::query_as(
        "SELECT r.status, r.settled_at IS NOT NULL, s.affected_count \
         FROM sweep_run r JOIN sweep_run_entity_summary s USING (run_id)",
    )
    .fetch_one(p.db.pool())
    .await
    .expect("one run, one summary");
    assert_eq!(run_status, "Cancelled");
    assert!(settled);
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM events")
        .fetch_one(p.db.pool())
        .await
        .expect("count");
    assert!(left > 0, "the sweep was cancelled before the end");
    assert!(affected > 0);
    assert_eq!(
        affected + left,
        ROWS,
        "every committed batch is in the ledger, no more"
    );

    let err = stderr(&out);
    assert!(
        err.contains("Ctrl-C: stopping after the current batch"),
        "{err}"
    );
    // Not a terminal: plain log lines, with rows done and rows/s.
    assert!(err.contains("progress: events: "), "{err}");
    assert!(err.contains("rows/s"), "{err}");
    assert!(err.contains("settled: Cancelled"), "{err}");
    let text = stdout(&out);
    assert!(text.contains(": Cancelled"), "{text}");
    // `skipped` then also counts the rows the run had not reached: said so.
    assert!(text.contains("had not reached yet"), "{text}");
}

// contract: K4
#[tokio::test]
async fn a_second_ctrl_c_exits_at_once() {
    let p = Project::new().await;
    setup(&p).await;
    // Validating builds a handle, which registers the table's key: the
    // plain-SQL hold below is then read through it (contract H16).
    assert_success(&p.cohort(&["validate"]));
    // A hold being created (uncommitted, inserted with plain SQL: Cohort's
    // trigger takes the entity fence exclusively) keeps the sweep's first
    // batch waiting: the first Ctrl-C cannot end it at a batch boundary.
    let mut blocker = p.db.connect().await;
    let mut tx = blocker.begin().await.expect("begin");
    sqlx::query(
        "INSERT INTO retention_holds (hold_id, retained_entity_id, record_id, tenant_id, reason, created_at) \
         VALUES (gen_random_uuid(), $1::uuid, '1', $2::uuid, 'blocks the fence', now())",
    )
    .bind(EVENTS)
    .bind(TENANT)
    .execute(&mut *tx)
    .await
    .expect("insert a hold");

    let mut child = spawn_sweep(&p, &[("COHORT_FENCE_WAIT", "120")]);
    wait_for(
        &p,
        "SELECT count(*) FROM sweep_run WHERE status = 'Started'",
        "the run's Started row",
    )
    .await;
    wait_for(
        &p,
        "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database \
         WHERE d.datname = current_database() AND l.locktype = 'advisory' AND NOT l.granted",
        "the batch to wait for the entity fence",
    )
    .await;
    // The command's stderr, line by line, as it writes it.
    let err_pipe = child.stderr.take().expect("stderr");
    let (line_tx, lines) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(err_pipe).lines() {
            let Ok(line) = line else { break };
            if line_tx.send(line).is_err() {
                break;
            }
        }
    });
    interrupt(&child);
    // Gate: the first Ctrl-C has been handled (the command says so) while
    // the batch still waits for the fence. Only a process that is still
    // running, and knows it was interrupted once, can answer the second one
    // with "second Ctrl-C", so no sleep is needed to tell the two apart.
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !seen
        .iter()
        .any(|l: &String| l.contains("Ctrl-C: stopping after the current batch"))
    {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => seen.push(line),
            Err(e) => panic!("the first Ctrl-C was never acknowledged ({e}): {seen:#?}"),
        }
    }
    assert!(
        !seen.iter().any(|l| l.contains("second Ctrl-C")),
        "{seen:#?}"
    );
    interrupt(&child);
    let status = wait_exit(&mut child, Duration::from_secs(10));
    reader.join().expect("the stderr reader");
    seen.extend(lines.try_iter());
    let err = seen.join("\n");
    assert_eq!(status.code(), Some(130), "stderr:\n{err}");
    assert!(err.contains("second Ctrl-C: exiting at once"), "{err}");
    assert!(
        !err.contains("settled:"),
        "the run never settled: the second Ctrl-C exited at once\n{err}"
    );
    tx.rollback().await.expect("rollback");
    let _ = blocker.close().await;
    // Nothing was swept: the batch never got the fence.
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM events")
        .fetch_one(p.db.pool())
        .await
        .expect("count");
    assert_eq!(left, ROWS);
}

// contract: K4
// On a terminal: a live line per table with rows done and rows/s (drawn by
// indicatif on stderr). `script` gives the command a pseudo-terminal; where
// util-linux's `script` (Debian's essential `bsdutils`) is missing the test
// fails and says so.
#[tokio::test]
async fn on_a_terminal_progress_is_a_live_line_per_table() {
    assert!(
        std::process::Command::new("script")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success()),
        "this test needs util-linux's `script` for a pseudo-terminal (Debian: bsdutils)"
    );
    let p = Project::new().await;
    setup(&p).await;
    let shell = format!(
        "'{}' sweep --tenant {TENANT} > /dev/null",
        env!("CARGO_BIN_EXE_cohort").replace('\'', "'\\''")
    );
    let mut c = std::process::Command::new("script");
    c.args(["-qec", &shell, "/dev/null"])
        .current_dir(&p.dir)
        .env("DATABASE_URL", p.db.url())
        .env("COHORT_BATCH_SIZE", "20")
        .stdin(Stdio::null());
    for v in SETTINGS_VARS {
        if *v != "COHORT_BATCH_SIZE" {
            c.env_remove(v);
        }
    }
    let out = c.output().expect("run script");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let screen = String::from_utf8_lossy(&out.stdout);
    // Redrawn in place (erase-line escapes), with the table, rows and rate.
    assert!(screen.contains("\u{1b}[2K"), "{screen}");
    let live = screen.split(['\r', '\n']).find(|l| {
        l.contains("events")
            && l.contains("rows changed")
            && l.contains("rows/s")
            && !l.contains("done:")
    });
    assert!(live.is_some(), "no live line in:\n{screen}");
    assert!(screen.contains("settled: Succeeded"), "{screen}");
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM events")
        .fetch_one(p.db.pool())
        .await
        .expect("count");
    assert_eq!(left, 0);
}
