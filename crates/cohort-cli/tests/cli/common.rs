//! Running the binary in a directory of its own against a test database.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use cohort_testdb::TestDb;

/// The `COHORT_*` settings a test's environment might carry: removed from
/// every run so only what the test sets counts.
pub(crate) const SETTINGS_VARS: &[&str] = &[
    "COHORT_DATABASE_URL",
    "COHORT_MODEL",
    "COHORT_SCHEMA",
    "COHORT_DEFAULT_TABLE_SCHEMA",
    "COHORT_BATCH_SIZE",
    "COHORT_LOCK_WAIT",
    "COHORT_FENCE_WAIT",
    "COHORT_OBSERVER_TIMEOUT",
    "COHORT_SETTLE_TIMEOUT",
    "COHORT_INACTIVE_HOLD_RETENTION",
    "COHORT_HASH_KEY",
    "COHORT_PARTITION_DROPS",
    "COHORT_CONNECTION_MODE",
    "COHORT_BATCH_ORDER",
    "COHORT_CERTIFICATE_KEY",
    "COHORT_WORKER__SCHEDULE",
    "COHORT_WORKER__TIME_ZONE",
    "COHORT_WORKER__DRY_RUN",
    "COHORT_WORKER__KILL_SWITCH",
    "COHORT_WORKER__KILL_SWITCH_FILE",
    "COHORT_WORKER__TENANTS",
    "COHORT_WORKER__VACUUM_MIN_ROWS",
    "COHORT_LOG",
];

/// libpq's variables, which name a database when nothing else does: removed
/// too, so a test sees only what it sets.
pub(crate) const PG_VARS: &[&str] = &[
    "PGHOST",
    "PGHOSTADDR",
    "PGPORT",
    "PGUSER",
    "PGPASSWORD",
    "PGPASSFILE",
    "PGDATABASE",
    "PGSERVICE",
    "PGSSLMODE",
    "PGOPTIONS",
];

/// The sample application's tables (the demo's).
pub(crate) const SAMPLE_TABLES: &str = include_str!("../../src/sample_tables.sql");

/// A fresh database and a working directory with a model file.
pub(crate) struct Project {
    pub(crate) db: TestDb,
    pub(crate) dir: PathBuf,
}

impl Project {
    /// A fresh database and an empty directory.
    pub(crate) async fn new() -> Project {
        let db = TestDb::new().await;
        let dir =
            std::env::temp_dir().join(format!("cohort-cli-test-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).expect("create the test directory");
        Project { db, dir }
    }

    /// Writes a file in the directory.
    pub(crate) fn write(&self, name: &str, text: &str) {
        std::fs::write(self.dir.join(name), text).expect("write a test file");
    }

    /// `cohort init`, `schema migrate` and the sample tables: the starting
    /// point of most tests.
    pub(crate) async fn sample(&self) {
        let out = self.cohort(&["init"]);
        assert_success(&out);
        let out = self.cohort(&["schema", "migrate"]);
        assert_success(&out);
        self.db.exec(SAMPLE_TABLES).await;
    }

    /// A command for the binary in this directory, with `DATABASE_URL` set
    /// to the test database and no other settings from the environment.
    pub(crate) fn command(&self, args: &[&str]) -> Command {
        command_in(&self.dir, Some(&self.db.url()), args)
    }

    /// Runs the binary and waits.
    pub(crate) fn cohort(&self, args: &[&str]) -> Output {
        run(self.command(args))
    }
}

impl Drop for Project {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A command for the binary in `dir`.
pub(crate) fn command_in(dir: &Path, database_url: Option<&str>, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_cohort"));
    c.current_dir(dir).args(args).stdin(Stdio::null());
    for v in SETTINGS_VARS.iter().chain(PG_VARS) {
        c.env_remove(v);
    }
    match database_url {
        Some(url) => c.env("DATABASE_URL", url),
        None => c.env_remove("DATABASE_URL"),
    };
    c
}

/// Runs a command to its end.
pub(crate) fn run(mut c: Command) -> Output {
    c.output().expect("run the cohort binary")
}

pub(crate) fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub(crate) fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The exit code (None when killed by a signal).
pub(crate) fn code(o: &Output) -> Option<i32> {
    o.status.code()
}

pub(crate) fn assert_success(o: &Output) {
    assert_eq!(
        code(o),
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        stdout(o),
        stderr(o)
    );
}

pub(crate) fn assert_code(o: &Output, expected: i32) {
    assert_eq!(
        code(o),
        Some(expected),
        "stdout:\n{}\nstderr:\n{}",
        stdout(o),
        stderr(o)
    );
}

/// stdout parsed as JSON.
pub(crate) fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
            stdout(o),
            stderr(o)
        )
    })
}

/// Rows in `table` of the project's database.
pub(crate) async fn count_rows(p: &Project, table: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
        .fetch_one(p.db.pool())
        .await
        .expect("count")
}

/// Sends SIGTERM to `child` and waits (at most 30 s) for it to exit: its
/// exit status and its output.
pub(crate) fn terminate(mut child: std::process::Child) -> (std::process::ExitStatus, Output) {
    let sent = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(sent.success());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().expect("poll the child") {
            break s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the child ignored SIGTERM"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    (status, child.wait_with_output().expect("output"))
}
