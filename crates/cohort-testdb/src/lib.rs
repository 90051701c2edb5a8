//! Test and example support for Cohort: one fresh PostgreSQL database per test.
//!
//! Where the server comes from, in order:
//! 1. `DATABASE_URL`, when set: databases are created on that server (the URL's
//!    own database is only used to run `CREATE DATABASE`).
//! 2. A server answering at `127.0.0.1:5432` as user `postgres` (the usual local
//!    development server).
//! 3. Otherwise a private throwaway cluster, started once per process with the
//!    system's `initdb` and `pg_ctl` (found on `PATH` or under
//!    `/usr/lib/postgresql/*/bin`; as root they run as the `postgres` user). A
//!    watchdog process stops it and deletes its files when this process exits,
//!    however it exits.
//!
//! Every [`TestDb`] is a new database with a unique name, dropped when the value
//! is dropped, so tests run in parallel without sharing state.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{AssertSqlSafe, ConnectOptions, Connection, PgConnection, PgPool};
use tokio::sync::OnceCell;

/// The default local server tried when `DATABASE_URL` is not set.
const LOCAL_SERVER: &str = "postgres://postgres@127.0.0.1:5432/postgres";

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
}

static SERVER: OnceCell<Server> = OnceCell::const_new();
static COUNTER: AtomicU64 = AtomicU64::new(0);

impl Server {
    /// The process-wide server: found or started on first use.
    pub async fn shared() -> Result<&'static Server, ServerError> {
        SERVER.get_or_try_init(Server::locate).await
    }

    async fn locate() -> Result<Server, ServerError> {
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
            });
        }
        let cluster = tokio::task::spawn_blocking(start_private_cluster)
            .await
            .map_err(|e| err(format!("cluster start panicked: {e}")))??;
        Ok(Server {
            admin: cluster,
            origin: "private throwaway cluster",
        })
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

    /// Creates a new, empty database, returning an error instead of panicking.
    pub async fn try_new() -> Result<TestDb, ServerError> {
        let server = Server::shared().await?;
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
        let _ = admin.close().await;
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .acquire_timeout(Duration::from_secs(60))
            .connect_with(server.options_for(&name))
            .await
            .map_err(|e| err(format!("cannot connect to the new database: {e}")))?;
        Ok(TestDb { name, server, pool })
    }

    /// A pool of connections to this database.
    pub fn pool(&self) -> &PgPool {
        &self.pool
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
        if std::env::var_os("COHORT_KEEP_TEST_DB").is_some() {
            return;
        }
        let name = self.name.clone();
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
                    let _ = c.close().await;
                }
            });
        });
        let _ = handle.join();
    }
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

fn start_private_cluster() -> Result<PgConnectOptions, ServerError> {
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
    if as_postgres {
        run(
            Command::new("chown").arg("postgres:").arg(&dir),
            "chown of the cluster directory",
        )?;
    }
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
        "-c listen_addresses=127.0.0.1 -p {port} -k {} -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200",
        dir.display()
    );
    // The watchdog stops the cluster and removes its files once this process is gone.
    let me = std::process::id();
    let script = format!(
        "while kill -0 {me} 2>/dev/null; do sleep 1; done; {stop}; rm -rf '{dir}'",
        stop = if as_postgres {
            format!(
                "runuser -u postgres -- '{}' -D '{}' stop -m immediate",
                pg_ctl.display(),
                data.display()
            )
        } else {
            format!(
                "'{}' -D '{}' stop -m immediate",
                pg_ctl.display(),
                data.display()
            )
        },
        dir = dir.display()
    );
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
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| err(format!("cannot start the cluster watchdog: {e}")))?;
    format!("postgres://postgres@127.0.0.1:{port}/postgres")
        .parse()
        .map_err(|e| err(format!("{e}")))
}
