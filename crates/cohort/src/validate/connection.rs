//! What can be seen of the connection itself (contract CO1): a pooler in
//! transaction mode behind a handle that says the connection is direct, and
//! a server that accepts advisory locks without taking them (some
//! PostgreSQL-compatible databases do), on which the entity fence would
//! protect nothing.
//!
//! What cannot be seen: a pooler that happens to hand the same server
//! session to every transaction while the probe runs (PgBouncer reuses the
//! last idle server connection first, so an idle pool often looks direct);
//! a pooler in session mode (harmless: each client keeps its session); a
//! proxy that pins a client to one session after the first prepared
//! statement (RDS Proxy). `docs/design.md`, "Through a connection pooler".

use sqlx::{PgConnection, Row};

use super::ValidationProblem;
use crate::config::ConnectionMode;
use crate::sql::txn::FENCE_CLASS;

/// How many short transactions the pooler probe runs.
const PROBES: usize = 3;

/// The advisory lock the probe takes, shared, in the fences' class: a fence
/// has this key only when its hash is 0 (one type in 2^32), and then the
/// probe at worst waits for a hold's transaction to end.
const PROBE_KEY: i32 = 0;

/// Probes the connection; `conn` must not be in a transaction.
pub(crate) async fn check(
    conn: &mut PgConnection,
    mode: ConnectionMode,
) -> Result<Vec<ValidationProblem>, sqlx::Error> {
    let mut problems = Vec::new();
    if mode == ConnectionMode::Direct {
        // Simple-protocol statements, each its own transaction: nothing is
        // prepared, so this works through any pooler.
        let mut pids = Vec::with_capacity(PROBES);
        for _ in 0..PROBES {
            let row = sqlx::raw_sql("SELECT pg_catalog.pg_backend_pid()")
                .fetch_one(&mut *conn)
                .await?;
            pids.push(row.try_get::<i32, _>(0)?);
        }
        if pids.windows(2).any(|w| w[0] != w[1]) {
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
