//! The private throwaway cluster: started on request
//! (`COHORT_TEST_FORCE_PRIVATE_CLUSTER=1`), and stopped and removed by its
//! watchdog once the process that started it is gone: after a normal exit,
//! and after a Ctrl-C sent to that process's whole process group.
//!
//! Each test runs this test binary again as a child process (the
//! `child_holds_a_private_cluster` test, which does nothing unless
//! [`CHILD_VAR`] is set), reads the cluster's directory from the child's
//! output, ends the child, and waits for the directory and the server to go.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cohort_testdb::{FORCE_PRIVATE_CLUSTER_VAR, Server, TestDb};

/// Set in the child process only.
const CHILD_VAR: &str = "COHORT_TESTDB_CHILD";

/// Run as a child of the tests below: starts a private cluster, prints its
/// directory and its server's process id, then waits until its standard input
/// closes (or it is killed).
#[tokio::test]
async fn child_holds_a_private_cluster() {
    if std::env::var_os(CHILD_VAR).is_none() {
        return;
    }
    let db = TestDb::new().await;
    let server = Server::shared().await.expect("server");
    assert_eq!(server.origin, "private throwaway cluster");
    let dir = server
        .cluster_dir()
        .expect("a private cluster has a directory");
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(db.pool())
        .await
        .expect("a query on the private cluster");
    assert!(pid > 0);
    let postmaster = std::fs::read_to_string(dir.join("data").join("postmaster.pid"))
        .expect("postmaster.pid")
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned();
    println!("CLUSTER_DIR={}", dir.display());
    println!("POSTMASTER={postmaster}");
    let mut rest = String::new();
    let _ = std::io::stdin().read_to_string(&mut rest);
}

fn have_server_binaries() -> bool {
    let on_path = std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join("initdb").is_file()));
    on_path
        || std::fs::read_dir("/usr/lib/postgresql").is_ok_and(|versions| {
            versions
                .filter_map(Result::ok)
                .any(|v| v.path().join("bin").join("initdb").is_file())
        })
}

/// The child, in a process group of its own (so the test can signal the
/// group as a terminal would), with its cluster's directory and postmaster pid.
///
/// The child starts with SIGINT at its default disposition whatever this
/// process inherited: a suite started in the background or under `nohup`
/// ignores SIGINT, and an ignored signal stays ignored across `exec`, so the
/// Ctrl-C test would send a signal nobody hears. `env --default-signal`
/// (GNU coreutils 8.31 and later) resets it before it runs the child; the
/// crate forbids the `unsafe` a `pre_exec` hook would need.
fn start_child() -> (Child, PathBuf, String) {
    let exe = std::env::current_exe().expect("test binary");
    let mut child = Command::new("env")
        .arg("--default-signal=INT")
        .arg(exe)
        .args([
            "child_holds_a_private_cluster",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_VAR, "1")
        .env(FORCE_PRIVATE_CLUSTER_VAR, "1")
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the child");
    let stdout = child.stdout.take().expect("stdout");
    // One thread reads the child's output to its end (a closed pipe would
    // fail the child's later writes) and reports the two lines it needs.
    let (report, reported) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut dir = None;
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            // The harness prints "test <name> ... " before the test's own output.
            if let Some((_, d)) = line.split_once("CLUSTER_DIR=") {
                dir = Some(PathBuf::from(d));
            } else if let Some((_, p)) = line.split_once("POSTMASTER=") {
                let _ = report.send((dir.take(), Some(p.to_owned())));
            }
        }
    });
    let (dir, postmaster) = reported
        .recv_timeout(Duration::from_secs(120))
        .unwrap_or((None, None));
    let (Some(dir), Some(postmaster)) = (dir, postmaster) else {
        let _ = child.kill();
        panic!("the child never reported its cluster");
    };
    assert!(dir.join("data").is_dir(), "{}", dir.display());
    (child, dir, postmaster)
}

fn process_exists(pid: &str) -> bool {
    Command::new("kill")
        .args(["-0", pid])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Waits (the watchdog checks once a second) until the cluster's directory
/// and its server are gone.
fn assert_cleaned_up(dir: &Path, postmaster: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while dir.exists() || process_exists(postmaster) {
        assert!(
            Instant::now() < deadline,
            "the watchdog left {} (server {postmaster} running: {})",
            dir.display(),
            process_exists(postmaster)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_private_cluster_is_removed_after_its_process_exits() {
    assert!(
        have_server_binaries(),
        "this test starts a private cluster: it needs PostgreSQL's initdb and pg_ctl \
         (Debian: postgresql-15)"
    );
    let (mut child, dir, postmaster) = start_child();
    assert!(process_exists(&postmaster));
    drop(child.stdin.take());
    let status = child.wait().expect("wait");
    assert!(status.success(), "{status}");
    assert_cleaned_up(&dir, &postmaster);
}

#[test]
fn a_private_cluster_is_removed_after_ctrl_c_to_the_process_group() {
    assert!(
        have_server_binaries(),
        "this test starts a private cluster: it needs PostgreSQL's initdb and pg_ctl \
         (Debian: postgresql-15)"
    );
    let (mut child, dir, postmaster) = start_child();
    // What a terminal's Ctrl-C does: SIGINT to every process in the group.
    let group = format!("-{}", child.id());
    let sent = Command::new("kill")
        .args(["-INT", "--", &group])
        .status()
        .expect("kill");
    assert!(sent.success());
    let status = child.wait().expect("wait");
    assert!(!status.success(), "the child was interrupted: {status}");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(2),
        "the child died of SIGINT: {status}"
    );
    assert_cleaned_up(&dir, &postmaster);
}
