//! What can be seen of the connection itself (contract CO1): a pooler in
//! transaction mode behind a handle that says the connection is direct, and
//! a server that accepts advisory locks without taking them (some
//! PostgreSQL-compatible databases do), on which the entity fence would
//! protect nothing.
//!
//! What cannot be seen: a pooler whose pool is so large that the takeover
//! probe's attempts never land on the server it is after; a pooler in
//! session mode (harmless: each client keeps its session); a proxy that
//! pins a client to one session after the first prepared statement (RDS
//! Proxy). `docs/design.md`, "Through a connection pooler".

use sqlx::{PgConnection, Row};

use super::ValidationProblem;
use crate::config::ConnectionMode;
use crate::sql::txn::FENCE_CLASS;

/// How many short transactions the alternation probe runs.
const PROBES: usize = 3;

/// How often the second client tries to take the first one's server.
const TAKEOVERS: usize = 8;

/// How long the first client waits for a server while the second holds
/// the one it used: directly it never waits (its backend is its own).
const TAKEOVER_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The backend pid one simple-protocol statement runs on.
async fn backend_pid(conn: &mut PgConnection) -> Result<i32, sqlx::Error> {
    let row = sqlx::raw_sql("SELECT pg_catalog.pg_backend_pid()")
        .fetch_one(&mut *conn)
        .await?;
    row.try_get::<i32, _>(0)
}

/// `Some(pids seen)` when `conn`'s statements do not keep one server
/// session. Two probes, every statement simple-protocol and in a
/// transaction of its own, so they work through any pooler:
///
/// 1. Alternation: three statements in a row on `conn`; different pids
///    mean a pooler gave them different servers.
/// 2. Takeover, which does not depend on how the pooler picks a server:
///    a second client connection opens a transaction until it lands on the
///    server `conn` last used (through a pooler it soon does; directly it
///    never can: that backend is `conn`'s own), then `conn` runs one more
///    statement, which must then run elsewhere or wait for that server.
async fn pooled_in_transaction_mode(
    conn: &mut PgConnection,
    pool: &sqlx::PgPool,
) -> Result<Option<Vec<i32>>, sqlx::Error> {
    let mut pids = Vec::with_capacity(PROBES);
    for _ in 0..PROBES {
        pids.push(backend_pid(conn).await?);
    }
    if pids.windows(2).any(|w| w[0] != w[1]) {
        return Ok(Some(pids));
    }
    let mine = pids[PROBES - 1];
    // A connection of its own, outside the pool (whose size may be one).
    let options = pool.connect_options();
    let mut other = <PgConnection as sqlx::Connection>::connect_with(&options).await?;
    let mut found = None;
    for _ in 0..TAKEOVERS {
        sqlx::raw_sql("BEGIN").execute(&mut other).await?;
        let theirs = backend_pid(&mut other).await?;
        if theirs != mine {
            sqlx::raw_sql("ROLLBACK").execute(&mut other).await?;
            continue;
        }
        // `other` holds `conn`'s last server in an open transaction.
        let next = tokio::time::timeout(TAKEOVER_WAIT, backend_pid(conn)).await;
        let _ = sqlx::raw_sql("ROLLBACK").execute(&mut other).await;
        found = Some(match next {
            Ok(Ok(pid)) => vec![mine, theirs, pid],
            // It waited for another client's transaction: pooled. (The
            // statement then runs once `other` rolled back.)
            Err(_) => vec![mine, theirs],
            Ok(Err(e)) => return Err(e),
        });
        break;
    }
    let _ = sqlx::Connection::close(other).await;
    Ok(found)
}

/// The advisory lock the probe takes, shared, in the fences' class: a fence
/// has this key only when its hash is 0 (one type in 2^32), and then the
/// probe at worst waits for a hold's transaction to end.
const PROBE_KEY: i32 = 0;

/// Probes the connection; `conn` must not be in a transaction. In `Direct`
/// mode `pool` gives a second client connection for the pooler probe.
pub(crate) async fn check(
    conn: &mut PgConnection,
    pool: &sqlx::PgPool,
    mode: ConnectionMode,
) -> Result<Vec<ValidationProblem>, sqlx::Error> {
    let mut problems = Vec::new();
    if mode == ConnectionMode::Direct
        && let Some(pids) = pooled_in_transaction_mode(conn, pool).await?
    {
        problems.push(ValidationProblem::option(
            "connection_mode",
            format!(
                "the connection ran consecutive transactions on different server sessions \
                 (backend pids {pids:?}): it goes through a pooler in transaction mode, \
                 where named prepared statements and LISTEN do not work"
            ),
            "set connection_mode = \"transaction_pooled\" (ConnectionMode::TransactionPooled), \
             or connect directly or through a pooler in session mode",
        ));
    }
    let rows = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "BEGIN; \
         SELECT pg_catalog.pg_advisory_xact_lock_shared({FENCE_CLASS}, {PROBE_KEY}); \
         SELECT pg_catalog.count(*)::pg_catalog.int4 FROM pg_catalog.pg_locks \
          WHERE locktype = 'advisory' AND pid = pg_catalog.pg_backend_pid() \
            AND classid = {class}::pg_catalog.oid AND objid = {PROBE_KEY}::pg_catalog.oid \
            AND objsubid = 2 AND granted; \
         COMMIT",
        class = FENCE_CLASS as u32,
    )))
    .fetch_all(&mut *conn)
    .await?;
    let held = rows
        .iter()
        .filter_map(|r| r.try_get::<i32, _>(0).ok())
        .next_back()
        .unwrap_or(0);
    if held != 1 {
        problems.push(ValidationProblem::general(
            "the server accepted an advisory lock but does not hold it: Cohort's entity fence, \
             which keeps a hold and a sweep of the same rows apart, would protect nothing",
            "run Cohort on PostgreSQL itself (or a compatible server that implements advisory locks)",
        ));
    }
    Ok(problems)
}
