//! A real PgBouncer in transaction mode in front of a test database
//! (contract CO1): started per test the way the private cluster is, from
//! Debian's `pgbouncer` package, with its own configuration in a fresh
//! temporary directory and a free port, and stopped and removed when the
//! value is dropped or, however the test process ends, by a watchdog.
//!
//! The server pool is small and used round-robin (`server_round_robin`),
//! with as many server connections opened up front (`min_pool_size`), so a
//! client's consecutive transactions really run on different server
//! sessions: whatever a session keeps (named prepared statements, session
//! settings, session advisory locks, `LISTEN`) is then seen to be lost.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgConnection, PgPool};

use crate::{ServerError, TestDb, err, free_port, is_root};

/// Where Debian installs PgBouncer (`/usr/sbin` is not on every `PATH`).
const DEBIAN_PGBOUNCER: &str = "/usr/sbin/pgbouncer";

/// What to install when PgBouncer is missing.
const INSTALL_HINT: &str = "PgBouncer is not installed: the connection-pooler tests (contract CO1) need it \
     (Debian: apt-get install pgbouncer; scripts/test installs it)";

/// The watchdog: waits for process `$1` (the tests) to end, then kills
/// PgBouncer (`$2`) and removes its directory (`$3`). It ignores `INT` and
/// `HUP`, as the cluster's watchdog does.
const WATCHDOG: &str = r#"trap '' INT HUP
while kill -0 "$1" 2>/dev/null; do sleep 1; done
kill -9 "$2" 2>/dev/null
rm -rf "$3"
"#;

/// A running PgBouncer in transaction mode in front of one test database.
#[derive(Debug)]
pub struct Bouncer {
    child: Child,
    dir: PathBuf,
    port: u16,
    database: String,
    user: String,
    server_pool: u32,
}

fn pgbouncer_binary() -> Option<PathBuf> {
    if let Some(paths) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&paths) {
            let p = dir.join("pgbouncer");
            if p.is_file() {
                return Some(p);
            }
        }
    }
    let debian = Path::new(DEBIAN_PGBOUNCER);
    debian.is_file().then(|| debian.to_path_buf())
}

/// `value` as a PgBouncer configuration value (they end at a newline).
fn config_value(value: &str) -> Result<&str, ServerError> {
    if value.contains(['\n', '\r', '=', ' ']) {
        return Err(err(format!("cannot configure PgBouncer with {value:?}")));
    }
    Ok(value)
}

impl Bouncer {
    /// Starts PgBouncer in front of `db` with `server_pool` server
    /// connections (at least 2), for the server's administrative user and,
    /// when the database has one, its engine role's name (a pooler cannot
    /// keep the `SET ROLE` the engine pool uses, so tests through it connect
    /// as the administrative user).
    pub async fn start(db: &TestDb, server_pool: u32) -> Result<Bouncer, ServerError> {
        let binary = pgbouncer_binary().ok_or_else(|| err(INSTALL_HINT))?;
        let admin = db.server.options_for(&db.name);
        let host = admin.get_host().to_owned();
        let server_port = admin.get_port();
        let user = admin.get_username().to_owned();
        let server_pool = server_pool.max(2);
        let dir = std::env::temp_dir().join(format!(
            "cohort-pgbouncer-{}-{}",
            std::process::id(),
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        ));
        std::fs::create_dir_all(&dir)
            .map_err(|e| err(format!("cannot create {}: {e}", dir.display())))?;
        let cleanup = RemoveOnError(Some(dir.clone()));
        let port = free_port()?;
        let users = format!("\"{}\" \"\"\n", config_value(&user)?);
        std::fs::write(dir.join("users.txt"), users)
            .map_err(|e| err(format!("cannot write PgBouncer's users: {e}")))?;
        // A path under the system's temporary directory has no newline, but
        // say so rather than assume it.
        let dir_text = dir
            .to_str()
            .filter(|d| !d.contains(['\n', '\r']))
            .ok_or_else(|| err("the temporary directory's path cannot go in a PgBouncer config"))?;
        let config = format!(
            "[databases]\n\
             {db} = host={host} port={server_port} dbname={db}\n\
             [pgbouncer]\n\
             listen_addr = 127.0.0.1\n\
             listen_port = {port}\n\
             unix_socket_dir =\n\
             auth_type = trust\n\
             auth_file = {dir_text}/users.txt\n\
             pool_mode = transaction\n\
             default_pool_size = {server_pool}\n\
             min_pool_size = {server_pool}\n\
             reserve_pool_size = 0\n\
             server_round_robin = 1\n\
             max_client_conn = 500\n\
             ignore_startup_parameters = extra_float_digits,options\n\
             logfile = {dir_text}/pgbouncer.log\n\
             admin_users = {user}\n",
            db = config_value(&db.name)?,
            host = config_value(&host)?,
        );
        let ini = dir.join("pgbouncer.ini");
        std::fs::write(&ini, config)
            .map_err(|e| err(format!("cannot write PgBouncer's config: {e}")))?;
        let mut cmd = Command::new(&binary);
        if is_root() {
            // PgBouncer refuses to run as root; -u switches user at start.
            let status = Command::new("chown")
                .arg("-R")
                .arg("postgres:")
                .arg(&dir)
                .status()
                .map_err(|e| err(format!("cannot chown PgBouncer's directory: {e}")))?;
            if !status.success() {
                return Err(err("chown of PgBouncer's directory failed"));
            }
            cmd.args(["-u", "postgres"]);
        }
        let child = cmd
            .arg(&ini)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| err(format!("cannot start {}: {e}", binary.display())))?;
        let mut bouncer = Bouncer {
            child,
            dir,
            port,
            database: db.name.clone(),
            user,
            server_pool,
        };
        cleanup.disarm();
        // From here on Drop stops it; the watchdog too if this process dies.
        spawn_watchdog(bouncer.child.id(), &bouncer.dir)?;
        bouncer.wait_until_up().await?;
        Ok(bouncer)
    }

    async fn wait_until_up(&mut self) -> Result<(), ServerError> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                let log =
                    std::fs::read_to_string(self.dir.join("pgbouncer.log")).unwrap_or_default();
                return Err(err(format!("PgBouncer exited at start ({status}):\n{log}")));
            }
            match PgConnection::connect_with(&self.options()).await {
                Ok(first) => return self.open_server_pool(first).await,
                Err(e) if Instant::now() > deadline => {
                    return Err(err(format!("PgBouncer did not answer within 30 s: {e}")));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// Opens every server connection now (PgBouncer opens `min_pool_size`
    /// ones only lazily): as many clients as server connections each hold a
    /// transaction open at once, so each has a server of its own.
    async fn open_server_pool(&self, first: PgConnection) -> Result<(), ServerError> {
        let mut clients = vec![first];
        for _ in 1..self.server_pool {
            clients.push(
                PgConnection::connect_with(&self.options())
                    .await
                    .map_err(|e| err(format!("cannot connect through PgBouncer: {e}")))?,
            );
        }
        let mut pids = std::collections::BTreeSet::new();
        for c in &mut clients {
            let row = sqlx::raw_sql("BEGIN; SELECT pg_catalog.pg_backend_pid()")
                .fetch_one(&mut *c)
                .await
                .map_err(|e| err(format!("cannot open a transaction through PgBouncer: {e}")))?;
            pids.insert(sqlx::Row::try_get::<i32, _>(&row, 0).map_err(|e| err(e.to_string()))?);
        }
        for mut c in clients {
            let _ = sqlx::raw_sql("COMMIT").execute(&mut c).await;
            let _ = c.close().await;
        }
        if pids.len() != self.server_pool as usize {
            return Err(err(format!(
                "PgBouncer opened {} server connections for {} concurrent transactions",
                pids.len(),
                self.server_pool
            )));
        }
        Ok(())
    }

    /// Connection options for the database through PgBouncer, as the
    /// server's administrative user.
    pub fn options(&self) -> PgConnectOptions {
        PgConnectOptions::new()
            .host("127.0.0.1")
            .port(self.port)
            .username(&self.user)
            .database(&self.database)
    }

    /// A URL for the database through PgBouncer.
    pub fn url(&self) -> String {
        self.options().to_url_lossy().to_string()
    }

    /// A pool of `max` client connections through PgBouncer (more clients
    /// than server connections, so they share them).
    pub fn pool(&self, max: u32) -> PgPool {
        PgPoolOptions::new()
            .max_connections(max)
            .acquire_timeout(Duration::from_secs(60))
            .connect_lazy_with(self.options())
    }

    /// How many server connections PgBouncer keeps for the database.
    pub fn server_pool(&self) -> u32 {
        self.server_pool
    }

    /// PgBouncer's log so far (for a failing test's message).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("pgbouncer.log")).unwrap_or_default()
    }
}

impl Drop for Bouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Removes a directory on an early return, unless disarmed.
struct RemoveOnError(Option<PathBuf>);

impl RemoveOnError {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for RemoveOnError {
    fn drop(&mut self) {
        if let Some(dir) = self.0.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn spawn_watchdog(bouncer: u32, dir: &Path) -> Result<(), ServerError> {
    let mut cmd = Command::new("setsid");
    cmd.arg("sh")
        .arg("-c")
        .arg(WATCHDOG)
        .arg("cohort-pgbouncer-watchdog")
        .arg(std::process::id().to_string())
        .arg(bouncer.to_string())
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    match cmd.spawn() {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            use std::os::unix::process::CommandExt;
            let mut in_group = Command::new("sh");
            in_group
                .process_group(0)
                .arg("-c")
                .arg(WATCHDOG)
                .arg("cohort-pgbouncer-watchdog")
                .arg(std::process::id().to_string())
                .arg(bouncer.to_string())
                .arg(dir)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            in_group
                .spawn()
                .map(|_| ())
                .map_err(|e| err(format!("cannot start PgBouncer's watchdog: {e}")))
        }
        Err(e) => Err(err(format!("cannot start PgBouncer's watchdog: {e}"))),
    }
}
