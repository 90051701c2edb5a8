//! Test and example support for Cohort: one fresh PostgreSQL database per test.
//!
//! Where the server comes from, in order:
//! 1. `DATABASE_URL`, when set: databases are created on that server (the URL's
//!    own database is only used to run `CREATE DATABASE`).
//! 2. A server answering at `127.0.0.1:5432` as user `postgres` (the usual local
//!    development server).
//! 3. Otherwise a private throwaway cluster, started once per process with the
//!    system's `initdb` and `pg_ctl` (found on `PATH` or under
//!    `/usr/lib/postgresql/*/bin`; as root they run as the `postgres` user).
//!
//! `COHORT_TEST_FORCE_PRIVATE_CLUSTER=1` skips the first two and always starts
//! a private cluster (the harness's own tests use it).
//!
//! [`TestDb::logical`] makes a database on a server with `wal_level =
//! logical`, for tests that decode the change stream: the server above when
//! it has that level, otherwise a second private cluster started with it
//! (the shared server's settings are never changed).
//!
//! The private cluster lives in a fresh directory under the system's temporary
//! directory. A watchdog process stops it and deletes the directory once this
//! process is gone, however it ends: normally, by a panic, killed, or by
//! Ctrl-C. The watchdog runs in a session of its own (`setsid`) and ignores
//! `SIGINT` and `SIGHUP`, so the Ctrl-C a terminal sends to the test's whole
//! process group, or the hang-up of a closed terminal, does not stop it before
//! it has cleaned up. When `initdb` or `pg_ctl start` fails, the directory is
//! removed (and a half-started server stopped) before the error is returned.
//!
//! Every [`TestDb`] is a new database with a unique name, dropped when the value
//! is dropped, so tests run in parallel without sharing state. Set
//! `COHORT_KEEP_TEST_DB=1` (or `true`, `yes`, `on`) to keep each test's
//! database for inspection; `0`, `false`, `no`, `off` and an empty value mean
//! "drop it", as does leaving the variable unset. Any other value keeps the
//! databases (a typo errs on the side of keeping data to look at).
//!
//! # The engine's role
//!
//! [`TestDb::pool`] always connects as the server's administrative user (a
//! superuser): setup SQL (`CREATE TABLE`, inserts, checks) runs there. The
//! pool a test hands to Cohort is [`TestDb::engine_pool`]. By default it is
//! the same pool. With `COHORT_TEST_ROLE=least` ([`TEST_ROLE_VAR`]), or for a
//! database made with [`TestDb::least_privileged`], each database gets a role
//! of its own ([`TestDb::engine_role`], `NOLOGIN`, no attributes, no grants,
//! named after the database so parallel tests never share one), and the
//! engine pool's connections act as it through `SET ROLE`: no password and no
//! `pg_hba.conf` entry is needed, but the administrative user must be a
//! superuser (the local server's `postgres` and the private cluster's are).
//! The test grants the role what Cohort documents (`CohortBuilder::grants`)
//! through [`TestDb::exec`]. The role is dropped with the database (and kept
//! with it under `COHORT_KEEP_TEST_DB`).

mod bouncer;

pub use bouncer::Bouncer;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{AssertSqlSafe, ConnectOptions, Connection, PgConnection, PgPool};
use tokio::sync::OnceCell;

/// The default local server tried when `DATABASE_URL` is not set.
const LOCAL_SERVER: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// Keeps every test database instead of dropping it (see the crate docs).
pub const KEEP_TEST_DB_VAR: &str = "COHORT_KEEP_TEST_DB";

/// Always starts a private throwaway cluster (see the crate docs).
pub const FORCE_PRIVATE_CLUSTER_VAR: &str = "COHORT_TEST_FORCE_PRIVATE_CLUSTER";

/// Which role the engine pool acts as: unset, empty or `superuser` for the
/// administrative user, `least` for a least-privileged role per database
/// (see the crate docs). Any other value is refused.
pub const TEST_ROLE_VAR: &str = "COHORT_TEST_ROLE";

/// The role the engine pool acts as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineRole {
    /// The server's administrative user, like the setup pool.
    Admin,
    /// A role of the database's own, with no privileges until the test grants
    /// them.
    Least,
}

impl EngineRole {
    /// Reads a [`TEST_ROLE_VAR`] value: `None`, empty or `superuser` (any
    /// case, spaces ignored) is [`EngineRole::Admin`], `least` is
    /// [`EngineRole::Least`]; anything else is an error naming the value.
    ///
    /// ```
    /// use cohort_testdb::EngineRole;
    /// assert_eq!(EngineRole::parse(None).ok(), Some(EngineRole::Admin));
    /// assert_eq!(EngineRole::parse(Some(" Least ")).ok(), Some(EngineRole::Least));
    /// assert!(EngineRole::parse(Some("lest")).is_err());
    /// ```
    pub fn parse(value: Option<&str>) -> Result<EngineRole, ServerError> {
        match value.map(|v| v.trim().to_ascii_lowercase()).as_deref() {
            None | Some("") | Some("superuser") => Ok(EngineRole::Admin),
            Some("least") => Ok(EngineRole::Least),
            Some(other) => Err(err(format!(
                "{TEST_ROLE_VAR}={other:?} is not a role mode: use `least` or `superuser`"
            ))),
        }
    }

    /// The mode [`TEST_ROLE_VAR`] asks for.
    pub fn from_env() -> Result<EngineRole, ServerError> {
        match std::env::var(TEST_ROLE_VAR) {
            Ok(v) => EngineRole::parse(Some(&v)),
            Err(std::env::VarError::NotPresent) => Ok(EngineRole::Admin),
            Err(std::env::VarError::NotUnicode(_)) => {
                Err(err(format!("{TEST_ROLE_VAR} is not UTF-8")))
            }
        }
    }
}

/// Reads an on/off environment setting: unset, empty, `0`, `false`, `no` and
/// `off` (any case, surrounding spaces ignored) are off; everything else,
/// `1`, `true`, `yes` and `on` included, is on.
///
/// ```
/// use cohort_testdb::flag_is_on;
/// assert!(!flag_is_on(None));
/// assert!(!flag_is_on(Some("0")));
/// assert!(!flag_is_on(Some(" False ")));
/// assert!(flag_is_on(Some("1")));
/// assert!(flag_is_on(Some("yes")));
/// ```
pub fn flag_is_on(value: Option<&str>) -> bool {
    match value {
        None => false,
        Some(v) => !matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "" | "0" | "false" | "no" | "off"
        ),
    }
}

/// [`flag_is_on`] for an environment variable; a value that is not UTF-8
/// counts as on.
fn env_flag(name: &str) -> bool {
    match std::env::var_os(name) {
        None => false,
        Some(v) => flag_is_on(Some(v.to_str().unwrap_or("1"))),
    }
}

/// Errors while finding or starting a PostgreSQL server.
#[derive(Debug)]
pub struct ServerError(String);

impl std::fmt::Display for ServerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ServerError {}

fn err(msg: impl Into<String>) -> ServerError {
    ServerError(msg.into())
}

/// A PostgreSQL server that tests can create databases on.
#[derive(Debug, Clone)]
pub struct Server {
    admin: PgConnectOptions,
    /// Where this server came from, for messages.
    pub origin: &'static str,
    cluster_dir: Option<PathBuf>,
}

static SERVER: OnceCell<Server> = OnceCell::const_new();
static LOGICAL_SERVER: OnceCell<Server> = OnceCell::const_new();
static COUNTER: AtomicU64 = AtomicU64::new(0);

impl Server {
    /// The process-wide server: found or started on first use.
    pub async fn shared() -> Result<&'static Server, ServerError> {
        SERVER.get_or_try_init(Server::locate).await
    }

    async fn locate() -> Result<Server, ServerError> {
        if env_flag(FORCE_PRIVATE_CLUSTER_VAR) {
            return Server::private_cluster().await;
        }
        if let Ok(url) = std::env::var("DATABASE_URL") {
            let admin: PgConnectOptions = url
                .parse()
                .map_err(|e| err(format!("DATABASE_URL is not a PostgreSQL URL: {e}")))?;
            PgConnection::connect_with(&admin)
                .await
                .map_err(|e| err(format!("cannot connect to DATABASE_URL: {e}")))?;
            return Ok(Server {
                admin,
                origin: "DATABASE_URL",
                cluster_dir: None,
            });
        }
        let local: PgConnectOptions = LOCAL_SERVER.parse().map_err(|e| err(format!("{e}")))?;
        let probe =
            tokio::time::timeout(Duration::from_secs(3), PgConnection::connect_with(&local));
        if let Ok(Ok(conn)) = probe.await {
            let _ = conn.close().await;
            return Ok(Server {
                admin: local,
                origin: "local server at 127.0.0.1:5432",
                cluster_dir: None,
            });
        }
        Server::private_cluster().await
    }

    /// A server with `wal_level = logical`, for tests of logical decoding
    /// (replication slots, `pg_logical_emit_message`): the shared server
    /// when it has that level already, otherwise a second private
    /// throwaway cluster started with it (once per process, cleaned up as
    /// the first). The shared server's settings are never changed: raising
    /// `wal_level` needs a restart.
    pub async fn logical() -> Result<&'static Server, ServerError> {
        LOGICAL_SERVER
            .get_or_try_init(async || {
                let shared = Server::shared().await?;
                let mut conn = shared.admin_connection().await?;
                let level: String = sqlx::query_scalar("SHOW wal_level")
                    .fetch_one(&mut conn)
                    .await
                    .map_err(|e| err(format!("SHOW wal_level failed: {e}")))?;
                let _ = conn.close().await;
                if level == "logical" {
                    return Ok(shared.clone());
                }
                Server::start_private(
                    "-c wal_level=logical -c max_replication_slots=20 -c max_wal_senders=20",
                    "private throwaway cluster with wal_level = logical",
                )
                .await
            })
            .await
    }

    async fn private_cluster() -> Result<Server, ServerError> {
        Server::start_private("", "private throwaway cluster").await
    }

    async fn start_private(
        extra: &'static str,
        origin: &'static str,
    ) -> Result<Server, ServerError> {
        let (admin, dir) = tokio::task::spawn_blocking(move || start_private_cluster(extra))
            .await
            .map_err(|e| err(format!("cluster start panicked: {e}")))??;
        Ok(Server {
            admin,
            origin,
            cluster_dir: Some(dir),
        })
    }

    /// The directory of the private throwaway cluster, when this server is
    /// one (removed, with the cluster, once this process is gone).
    pub fn cluster_dir(&self) -> Option<&Path> {
        self.cluster_dir.as_deref()
    }

    /// Connection options for a database on this server.
    pub fn options_for(&self, database: &str) -> PgConnectOptions {
        self.admin.clone().database(database)
    }

    /// A URL for a database on this server.
    pub fn url_for(&self, database: &str) -> String {
        self.options_for(database).to_url_lossy().to_string()
    }

    async fn admin_connection(&self) -> Result<PgConnection, ServerError> {
        PgConnection::connect_with(&self.admin)
            .await
            .map_err(|e| err(format!("cannot connect to the {}: {e}", self.origin)))
    }
}

/// A fresh database, dropped (with its connections) when this value is dropped.
#[derive(Debug)]
pub struct TestDb {
    name: String,
    server: &'static Server,
    pool: PgPool,
    /// The least-privileged role and the pool acting as it, in that mode.
    engine: Option<(String, PgPool)>,
}

/// `name` as a quoted identifier.
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

impl TestDb {
    /// Creates a new, empty database and a small pool on it.
    ///
    /// # Panics
    /// When no server can be found or started, or the database cannot be
    /// created: this is test support, and a test cannot go on without one.
    pub async fn new() -> TestDb {
        match TestDb::try_new().await {
            Ok(db) => db,
            Err(e) => panic!("cohort-testdb: {e}"),
        }
    }

    /// Creates a new, empty database whose engine pool always acts as a
    /// least-privileged role of its own, whatever [`TEST_ROLE_VAR`] says.
    ///
    /// # Panics
    /// As [`TestDb::new`].
    pub async fn least_privileged() -> TestDb {
        match TestDb::try_new_as(EngineRole::Least).await {
            Ok(db) => db,
            Err(e) => panic!("cohort-testdb: {e}"),
        }
    }

    /// Creates a new, empty database, returning an error instead of
    /// panicking; the engine role is the one [`TEST_ROLE_VAR`] asks for.
    pub async fn try_new() -> Result<TestDb, ServerError> {
        TestDb::try_new_as(EngineRole::from_env()?).await
    }

    /// Creates a new, empty database on a server with `wal_level =
    /// logical` ([`Server::logical`]), for tests that decode the change
    /// stream. A test that creates a replication slot in it must drop the
    /// slot before the database is dropped (PostgreSQL refuses to drop a
    /// database a slot belongs to).
    ///
    /// # Panics
    /// As [`TestDb::new`].
    pub async fn logical() -> TestDb {
        let made =
            async { TestDb::create_on(Server::logical().await?, EngineRole::from_env()?).await };
        match made.await {
            Ok(db) => db,
            Err(e) => panic!("cohort-testdb: {e}"),
        }
    }

    /// Creates a new, empty database whose engine pool acts as `role`.
    pub async fn try_new_as(role: EngineRole) -> Result<TestDb, ServerError> {
        TestDb::create_on(Server::shared().await?, role).await
    }

    async fn create_on(server: &'static Server, role: EngineRole) -> Result<TestDb, ServerError> {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!(
            "cohort_test_{}_{}_{}",
            std::process::id(),
            n,
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let mut admin = server.admin_connection().await?;
        sqlx::query(AssertSqlSafe(format!("CREATE DATABASE \"{name}\"")))
            .execute(&mut admin)
            .await
            .map_err(|e| err(format!("CREATE DATABASE failed: {e}")))?;
        // Roles are cluster-wide: one per database, named after it, so no
        // other test (or process) ever uses or drops it.
        let engine_role = (role == EngineRole::Least).then(|| format!("{name}_least"));
        if let Some(r) = &engine_role {
            let created = sqlx::query(AssertSqlSafe(format!(
                "CREATE ROLE {} NOLOGIN",
                quote_ident(r)
            )))
            .execute(&mut admin)
            .await;
            if let Err(e) = created {
                let _ = sqlx::query(AssertSqlSafe(format!(
                    "DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"
                )))
                .execute(&mut admin)
                .await;
                return Err(err(format!("CREATE ROLE failed: {e}")));
            }
        }
        let _ = admin.close().await;
        let mut db = TestDb {
            pool: PgPoolOptions::new()
                .max_connections(8)
                .acquire_timeout(Duration::from_secs(60))
                .connect_lazy_with(server.options_for(&name)),
            name,
            server,
            engine: None,
        };
        // From here on, Drop cleans up (database and role) on failure.
        db.pool
            .acquire()
            .await
            .map_err(|e| err(format!("cannot connect to the new database: {e}")))?;
        if let Some(r) = engine_role {
            let set_role = format!("SET ROLE {}", quote_ident(&r));
            let pool = PgPoolOptions::new()
                .max_connections(8)
                .acquire_timeout(Duration::from_secs(60))
                .after_connect(move |conn, _| {
                    let set_role = set_role.clone();
                    Box::pin(async move {
                        sqlx::raw_sql(AssertSqlSafe(set_role)).execute(conn).await?;
                        Ok(())
                    })
                })
                .connect_lazy_with(server.options_for(&db.name));
            db.engine = Some((r, pool));
        }
        Ok(db)
    }

    /// A pool of connections to this database, as the server's administrative
    /// user: for setup SQL and checks.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The pool to hand to Cohort: acting as [`TestDb::engine_role`] when
    /// there is one, else [`TestDb::pool`] itself.
    pub fn engine_pool(&self) -> &PgPool {
        match &self.engine {
            Some((_, pool)) => pool,
            None => &self.pool,
        }
    }

    /// The least-privileged role the engine pool acts as, when there is one.
    pub fn engine_role(&self) -> Option<&str> {
        self.engine.as_ref().map(|(role, _)| role.as_str())
    }

    /// A new connection outside the pools, acting as the engine role when
    /// there is one.
    pub async fn connect_engine(&self) -> PgConnection {
        let mut conn = self.connect().await;
        if let Some(role) = self.engine_role()
            && let Err(e) = sqlx::raw_sql(AssertSqlSafe(format!("SET ROLE {}", quote_ident(role))))
                .execute(&mut conn)
                .await
        {
            panic!("cohort-testdb: cannot act as {role}: {e}");
        }
        conn
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A URL for this database.
    pub fn url(&self) -> String {
        self.server.url_for(&self.name)
    }

    /// Connection options for this database.
    pub fn options(&self) -> PgConnectOptions {
        self.server.options_for(&self.name)
    }

    /// A new connection outside the pool (for two-connection race tests).
    pub async fn connect(&self) -> PgConnection {
        match PgConnection::connect_with(&self.options()).await {
            Ok(c) => c,
            Err(e) => panic!("cohort-testdb: cannot connect: {e}"),
        }
    }

    /// Runs a script of SQL statements (simple protocol, several statements allowed).
    pub async fn exec(&self, sql: &str) {
        if let Err(e) = sqlx::raw_sql(AssertSqlSafe(sql.to_owned()))
            .execute(&self.pool)
            .await
        {
            panic!("cohort-testdb: setup SQL failed: {e}\n{sql}");
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if env_flag(KEEP_TEST_DB_VAR) {
            return;
        }
        let name = self.name.clone();
        let role = self.engine_role().map(quote_ident);
        let admin = self.server.admin.clone();
        // Dropping a database needs async I/O; do it on a thread of its own so
        // Drop works in and out of a runtime.
        let handle = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            // The pool's connections belong to the test's runtime, which is
            // blocked on this join: WITH (FORCE) ends them from the server side.
            rt.block_on(async move {
                if let Ok(mut c) = PgConnection::connect_with(&admin).await {
                    let _ = sqlx::query(AssertSqlSafe(format!(
                        "DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"
                    )))
                    .execute(&mut c)
                    .await;
                    // Its grants went with the database; nothing else has any.
                    if let Some(role) = role {
                        let _ = sqlx::query(AssertSqlSafe(format!("DROP ROLE IF EXISTS {role}")))
                            .execute(&mut c)
                            .await;
                    }
                    let _ = c.close().await;
                }
            });
        });
        let _ = handle.join();
    }
}

/// A PostgreSQL client or server program (`pg_dump`, `pg_restore`,
/// `initdb`, ...): on `PATH`, else the newest under
/// `/usr/lib/postgresql/*/bin`.
pub fn postgres_binary(name: &str) -> Option<PathBuf> {
    find_binary(name)
}

fn find_binary(name: &str) -> Option<PathBuf> {
    if let Some(paths) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&paths) {
            let p = dir.join(name);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            let p = e.path().join("bin").join(name);
            p.is_file().then_some((v, p))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, p)| p)
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Builds a command that runs as the `postgres` user when we are root
/// (PostgreSQL refuses to run as root).
fn pg_command(binary: &Path, as_postgres: bool) -> Command {
    if as_postgres {
        let mut c = Command::new("runuser");
        c.arg("-u").arg("postgres").arg("--").arg(binary);
        c
    } else {
        Command::new(binary)
    }
}

fn free_port() -> Result<u16, ServerError> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| err(format!("no free port: {e}")))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| err(format!("no free port: {e}")))
}

fn run(cmd: &mut Command, what: &str) -> Result<(), ServerError> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| err(format!("cannot run {what}: {e}")))?;
    if !out.status.success() {
        return Err(err(format!(
            "{what} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(())
}

/// The watchdog: waits for process `$1` to end, then stops the cluster in
/// `$3` with `pg_ctl` (`$2`, as the `postgres` user when `$5` is 1) and
/// removes `$4`. Paths come as arguments, never spliced into the script.
/// `INT` and `HUP` are ignored: a Ctrl-C or a hang-up meant for the tests
/// must not end the watchdog before it has cleaned up.
const WATCHDOG: &str = r#"trap '' INT HUP
while kill -0 "$1" 2>/dev/null; do sleep 1; done
if [ "$5" = 1 ]; then
  runuser -u postgres -- "$2" -D "$3" stop -m immediate
else
  "$2" -D "$3" stop -m immediate
fi
rm -rf "$4"
"#;

fn spawn_watchdog(
    pg_ctl: &Path,
    data: &Path,
    dir: &Path,
    as_postgres: bool,
) -> Result<(), ServerError> {
    let configure = |c: &mut Command| {
        c.arg("-c")
            .arg(WATCHDOG)
            .arg("cohort-testdb-watchdog")
            .arg(std::process::id().to_string())
            .arg(pg_ctl)
            .arg(data)
            .arg(dir)
            .arg(if as_postgres { "1" } else { "0" })
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
    };
    // A session of its own: no signal sent to the tests' process group (or
    // their terminal's) reaches it.
    let mut in_session = Command::new("setsid");
    in_session.arg("sh");
    configure(&mut in_session);
    match in_session.spawn() {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // No setsid binary: a process group of its own still keeps the
            // terminal's Ctrl-C away from it.
            use std::os::unix::process::CommandExt;
            let mut in_group = Command::new("sh");
            in_group.process_group(0);
            configure(&mut in_group);
            in_group
                .spawn()
                .map(|_| ())
                .map_err(|e| err(format!("cannot start the cluster watchdog: {e}")))
        }
        Err(e) => Err(err(format!("cannot start the cluster watchdog: {e}"))),
    }
}

/// Removes a cluster's directory, stopping its server first once one may
/// have been started, unless disarmed: every failure path of
/// [`start_private_cluster`] cleans up after itself.
struct ClusterCleanup {
    dir: PathBuf,
    /// `pg_ctl`, the data directory, and whether to run it as `postgres`.
    server: Option<(PathBuf, PathBuf, bool)>,
    armed: bool,
}

impl Drop for ClusterCleanup {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Some((pg_ctl, data, as_postgres)) = &self.server {
            let _ = pg_command(pg_ctl, *as_postgres)
                .arg("-D")
                .arg(data)
                .args(["stop", "-m", "immediate"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Starts a private cluster; `extra` is added to its server options.
fn start_private_cluster(extra: &str) -> Result<(PgConnectOptions, PathBuf), ServerError> {
    let initdb = find_binary("initdb").ok_or_else(|| {
        err("no PostgreSQL server is reachable (set DATABASE_URL or start one on 127.0.0.1:5432) \
             and no initdb was found on PATH or under /usr/lib/postgresql/*/bin to start a private one; \
             install the PostgreSQL server (Debian: apt-get install postgresql)")
    })?;
    let pg_ctl = find_binary("pg_ctl").ok_or_else(|| err("initdb found but pg_ctl missing"))?;
    let as_postgres = is_root();
    let dir = std::env::temp_dir().join(format!(
        "cohort-pg-{}-{}",
        std::process::id(),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    ));
    let data = dir.join("data");
    std::fs::create_dir_all(&dir)
        .map_err(|e| err(format!("cannot create {}: {e}", dir.display())))?;
    let mut cleanup = ClusterCleanup {
        dir: dir.clone(),
        server: None,
        armed: true,
    };
    if as_postgres {
        run(
            Command::new("chown").arg("postgres:").arg(&dir),
            "chown of the cluster directory",
        )?;
    }
    // From here on, however this process ends (even by Ctrl-C during
    // initdb), the watchdog stops the cluster and removes the directory.
    spawn_watchdog(&pg_ctl, &data, &dir, as_postgres)?;
    run(
        pg_command(&initdb, as_postgres).arg("-D").arg(&data).args([
            "-A",
            "trust",
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--no-sync",
        ]),
        "initdb",
    )?;
    let port = free_port()?;
    let opts = format!(
        "-c listen_addresses=127.0.0.1 -p {port} -k {} -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200 {extra}",
        dir.display()
    );
    // A failed or timed-out start may leave a server running: stop it too.
    cleanup.server = Some((pg_ctl.clone(), data.clone(), as_postgres));
    run(
        pg_command(&pg_ctl, as_postgres)
            .arg("-D")
            .arg(&data)
            .arg("-o")
            .arg(&opts)
            .arg("-l")
            .arg(dir.join("log"))
            .args(["-w", "-t", "60", "start"]),
        "pg_ctl start",
    )?;
    let options = format!("postgres://postgres@127.0.0.1:{port}/postgres")
        .parse()
        .map_err(|e| err(format!("{e}")))?;
    cleanup.armed = false;
    Ok((options, dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_values_are_off_and_the_rest_is_on() {
        for off in [
            None,
            Some(""),
            Some("0"),
            Some("false"),
            Some("FALSE"),
            Some("no"),
            Some(" off "),
        ] {
            assert!(!flag_is_on(off), "{off:?}");
        }
        for on in [
            Some("1"),
            Some("true"),
            Some("True"),
            Some("yes"),
            Some("on"),
            Some("keep"),
        ] {
            assert!(flag_is_on(on), "{on:?}");
        }
    }

    #[test]
    fn a_failed_start_removes_its_directory_and_stops_a_started_server() {
        let dir = std::env::temp_dir().join(format!(
            "cohort-pg-cleanup-test-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(dir.join("data")).expect("create");
        std::fs::write(dir.join("data").join("file"), b"x").expect("write");
        {
            let _cleanup = ClusterCleanup {
                dir: dir.clone(),
                // A pg_ctl that does not exist: stopping fails quietly, the
                // directory still goes.
                server: Some((dir.join("no-pg_ctl"), dir.join("data"), false)),
                armed: true,
            };
        }
        assert!(!dir.exists());
        std::fs::create_dir_all(&dir).expect("create");
        {
            let mut cleanup = ClusterCleanup {
                dir: dir.clone(),
                server: None,
                armed: true,
            };
            cleanup.armed = false;
        }
        assert!(dir.exists(), "a disarmed cleanup leaves the directory");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
