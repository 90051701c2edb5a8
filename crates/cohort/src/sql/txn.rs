//! Cohort's own transactions: how a batch begins and ends.
//!
//! A batch transaction begins in one round trip (one simple-protocol message
//! of several statements): `BEGIN ISOLATION LEVEL READ COMMITTED`, the pinned
//! `search_path`, no wait for the WAL flush at commit, no JIT compilation (a
//! batch's statements touch a bounded number of rows, but the planner costs
//! them for the whole eligible range it cannot see past: at a million rows
//! the range statement's estimate passed `jit_above_cost`, and compiling it
//! took 180 to 220 ms of a batch whose plan ran in 2 ms), then the entity fence
//! taken shared under a bounded wait, then the lock wait for the batch's own
//! statements. The statements after it each take a snapshot of their own
//! (READ COMMITTED, said in the `BEGIN` itself so a database or role default of
//! `REPEATABLE READ` cannot change it), so every statement of the batch sees
//! every hold committed before the fence was granted.
//!
//! The text holds only fixed SQL and integers Cohort computes (the fence key,
//! milliseconds), never a value from a host: an `i32` or a `u128` cannot carry
//! SQL.

use std::time::Duration;

use sqlx::PgConnection;

use super::AssertSqlSafe;

/// The class (first key) of every entity fence: advisory locks in PostgreSQL's
/// two-`int4` keyspace, which the single-`bigint` keyspace most hosts use can
/// never collide with. The second key is
/// `hashtext(<schema of Cohort's tables> || ':' || <retained-entity id>)`.
pub(crate) const FENCE_CLASS: i32 = 1_131_376_754;

/// The SQL expression of a fence's second key, given the SQL expressions of
/// the install's schema name (text) and the retained-entity id (uuid). The
/// holds table's trigger (`schema::fence`) is built from the same formula.
pub(crate) fn fence_key_sql(schema: &str, entity: &str) -> String {
    format!(
        "pg_catalog.hashtext(({schema})::pg_catalog.text OPERATOR(pg_catalog.||) ':' \
         OPERATOR(pg_catalog.||) ({entity})::pg_catalog.text)"
    )
}

/// The fence keys of `entities` in the install whose tables live in schema
/// `schema` (raw name), computed by the server with [`fence_key_sql`], in order.
pub(crate) async fn fence_keys(
    conn: &mut PgConnection,
    schema: &str,
    entities: &[uuid::Uuid],
) -> Result<Vec<i32>, sqlx::Error> {
    if entities.is_empty() {
        return Ok(Vec::new());
    }
    crate::sql::query_scalar(AssertSqlSafe(format!(
        "SELECT {} FROM pg_catalog.unnest($2::pg_catalog.uuid[]) WITH ORDINALITY AS u(e, i) ORDER BY u.i",
        fence_key_sql("$1", "u.e")
    )))
    .bind(schema)
    .bind(entities)
    .fetch_all(conn)
    .await
}

/// How long the statements after the fence may wait for a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LockWait {
    /// At most this long (then SQLSTATE 55P03).
    Bounded(Duration),
    /// As the session would (its own `lock_timeout`).
    Session,
}

fn millis(d: Duration) -> u128 {
    // lock_timeout = 0 would mean "wait forever".
    d.as_millis().max(1)
}

/// How a transaction holds the entity fence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FenceMode {
    /// Shared: sweep and erasure batches, host deletions.
    Shared,
    /// Exclusive: hold creation, and a partition drop (contract PT2), which
    /// must not run beside a batch or a hold creation of the same type.
    Exclusive,
}

/// The run a transaction writes for, and the token of its owner (contract
/// CO2): the transaction's first statement after the fence checks that the
/// run is still `Started` with that token, and holds a share lock on the
/// run's row until it ends, so a settle of the run waits for the
/// transaction or the transaction finds the run settled (SQLSTATE
/// [`LEASE_LOST`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RunOwner<'a> {
    /// The quoted, schema-qualified runs table.
    pub(crate) runs: &'a str,
    pub(crate) run_id: uuid::Uuid,
    pub(crate) token: uuid::Uuid,
}

impl RunOwner<'_> {
    /// The check, one statement. The run id and token are UUIDs Cohort
    /// minted for the run (hexadecimal digits and hyphens only, written by
    /// `Uuid`'s own formatting), never a host's value; the runs table is a
    /// quoted identifier.
    fn check_sql(&self) -> String {
        let (runs, run, token) = (self.runs, self.run_id, self.token);
        format!(
            "SELECT COALESCE((SELECT '1' FROM {runs} AS o \
                 WHERE o.run_id OPERATOR(pg_catalog.=) '{run}'::pg_catalog.uuid \
                   AND o.owner_token OPERATOR(pg_catalog.=) '{token}'::pg_catalog.uuid \
                   AND o.status OPERATOR(pg_catalog.=) 'Started' FOR SHARE OF o), \
               'cohort: run {run} is no longer this process''s: its lease expired and it was settled')\
               ::pg_catalog.int4"
        )
    }
}

/// The SQLSTATE of a batch that found its run no longer its owner's: the
/// check's text is not a number (`invalid_text_representation`).
pub(crate) const LEASE_LOST: &str = "22P02";

/// The message that begins a fenced batch transaction (see the module docs).
fn begin_fenced_sql(
    fence_key: i32,
    fence_wait: Duration,
    then: LockWait,
    owner: Option<&RunOwner<'_>>,
) -> String {
    begin_fence_sql(fence_key, FenceMode::Shared, fence_wait, then, owner)
}

/// The message that begins a transaction holding the fence in `mode`.
fn begin_fence_sql(
    fence_key: i32,
    mode: FenceMode,
    fence_wait: Duration,
    then: LockWait,
    owner: Option<&RunOwner<'_>>,
) -> String {
    let lock = match mode {
        FenceMode::Shared => "pg_advisory_xact_lock_shared",
        FenceMode::Exclusive => "pg_advisory_xact_lock",
    };
    let after = match then {
        LockWait::Bounded(d) => format!("'{}'", millis(d)),
        LockWait::Session => "pg_catalog.current_setting('cohort.session_lock_timeout')".to_owned(),
    };
    format!(
        "BEGIN ISOLATION LEVEL READ COMMITTED; \
         SELECT pg_catalog.set_config('search_path', 'pg_catalog, ' OPERATOR(pg_catalog.||) \
                    pg_catalog.current_setting('search_path'), true), \
                pg_catalog.set_config('synchronous_commit', 'off', true), \
                pg_catalog.set_config('jit', 'off', true), \
                pg_catalog.set_config('cohort.session_lock_timeout', \
                    pg_catalog.current_setting('lock_timeout'), true), \
                pg_catalog.set_config('lock_timeout', '{fence}', true); \
         SELECT pg_catalog.{lock}({FENCE_CLASS}, {fence_key}); \
         {owned}SELECT pg_catalog.set_config('lock_timeout', {after}, true)",
        fence = millis(fence_wait),
        owned = owner
            .map(|o| format!("{}; ", o.check_sql()))
            .unwrap_or_default(),
    )
}

/// Begins a batch transaction holding the entity fence `fence_key` shared.
/// On error the transaction may be open and failed: call [`rollback`].
pub(crate) async fn begin_fenced(
    conn: &mut PgConnection,
    fence_key: i32,
    fence_wait: Duration,
    then: LockWait,
    owner: Option<&RunOwner<'_>>,
) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(AssertSqlSafe(begin_fenced_sql(
        fence_key, fence_wait, then, owner,
    )))
    .execute(conn)
    .await
    .map(|_| ())
}

/// Begins a transaction holding the entity fence `fence_key` in `mode`
/// (otherwise as [`begin_fenced`]). On error the transaction may be open and
/// failed: call [`rollback`].
pub(crate) async fn begin_fence(
    conn: &mut PgConnection,
    fence_key: i32,
    mode: FenceMode,
    fence_wait: Duration,
    then: LockWait,
    owner: Option<&RunOwner<'_>>,
) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(AssertSqlSafe(begin_fence_sql(
        fence_key, mode, fence_wait, then, owner,
    )))
    .execute(conn)
    .await
    .map(|_| ())
}

/// Begins a transaction of Cohort's that writes for a run without taking an
/// entity fence (disposition review's bookkeeping and freezes, contract
/// DR1): `pg_catalog` first on `search_path`, no wait for the WAL flush, row
/// locks waited for at most `lock_wait`, and the run's owner checked as a
/// batch checks it ([`RunOwner`]), all in one message. On error the
/// transaction may be open and failed: call [`rollback`].
pub(crate) async fn begin_owned(
    conn: &mut PgConnection,
    owner: Option<&RunOwner<'_>>,
    lock_wait: Duration,
) -> Result<(), sqlx::Error> {
    let sql = format!(
        "BEGIN ISOLATION LEVEL READ COMMITTED; \
         SELECT pg_catalog.set_config('search_path', 'pg_catalog, ' OPERATOR(pg_catalog.||) \
                    pg_catalog.current_setting('search_path'), true), \
                pg_catalog.set_config('synchronous_commit', 'off', true), \
                pg_catalog.set_config('lock_timeout', '{wait}', true){owned}",
        wait = millis(lock_wait),
        owned = owner
            .map(|o| format!("; {}", o.check_sql()))
            .unwrap_or_default(),
    );
    sqlx::raw_sql(AssertSqlSafe(sql))
        .execute(conn)
        .await
        .map(|_| ())
}

/// Begins a short transaction of Cohort's in one round trip, with
/// `pg_catalog` first on `search_path` and no wait for the WAL flush at
/// commit, both for this transaction only: what the row-handler dispatcher
/// runs each claim and each outcome in through a pooler in transaction
/// mode (contract CO1), where a session setting would stay on a server
/// session that other clients use next.
pub(crate) async fn begin_local(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(
        "BEGIN ISOLATION LEVEL READ COMMITTED; \
         SELECT pg_catalog.set_config('search_path', 'pg_catalog, ' OPERATOR(pg_catalog.||) \
                    pg_catalog.current_setting('search_path'), true), \
                pg_catalog.set_config('synchronous_commit', 'off', true)",
    )
    .execute(conn)
    .await
    .map(|_| ())
}

/// Runs `f` in a transaction of its own on a connection that is in none:
/// `BEGIN`, `f`, then `COMMIT`, or `ROLLBACK` when `f` fails. For the
/// statements that would otherwise run alone in autocommit (a run's start
/// and settle, an entity's summaries): through a pooler in transaction mode
/// an unnamed statement is parsed in one protocol exchange and executed in
/// the next, and only a transaction keeps both on one server session
/// (contract CO1). Settings `f` makes with `set_config(..., true)` end with
/// the transaction, as they did with the statement's implicit one.
pub(crate) async fn alone<T>(
    conn: &mut PgConnection,
    f: impl AsyncFnOnce(&mut PgConnection) -> Result<T, sqlx::Error>,
) -> Result<T, sqlx::Error> {
    sqlx::raw_sql("BEGIN ISOLATION LEVEL READ COMMITTED")
        .execute(&mut *conn)
        .await?;
    match f(&mut *conn).await {
        Ok(value) => {
            commit(conn).await?;
            Ok(value)
        }
        Err(e) => {
            if let Err(r) = rollback(conn).await {
                tracing::warn!(error = %r, "rolling back a Cohort transaction failed");
            }
            Err(e)
        }
    }
}

/// Commits Cohort's own transaction.
pub(crate) async fn commit(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::raw_sql("COMMIT").execute(conn).await.map(|_| ())
}

/// Rolls back Cohort's own transaction (harmless when none is open).
pub(crate) async fn rollback(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::raw_sql("ROLLBACK").execute(conn).await.map(|_| ())
}

/// The SQLSTATE of a database error, if it is one.
pub(crate) fn sqlstate(e: &sqlx::Error) -> Option<String> {
    match e {
        sqlx::Error::Database(db) => db.code().map(|c| c.into_owned()),
        _ => None,
    }
}

/// `lock_not_available`: a `lock_timeout` fired.
pub(crate) const LOCK_NOT_AVAILABLE: &str = "55P03";
/// `deadlock_detected`.
pub(crate) const DEADLOCK_DETECTED: &str = "40P01";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_schema_colon_entity_hashed_with_catalog_names_only() {
        assert_eq!(
            fence_key_sql("$2", "$3"),
            "pg_catalog.hashtext(($2)::pg_catalog.text OPERATOR(pg_catalog.||) ':' \
             OPERATOR(pg_catalog.||) ($3)::pg_catalog.text)"
        );
    }

    #[test]
    fn the_begin_message_fences_after_read_committed_and_bounds_both_waits() {
        let sql = begin_fenced_sql(
            -42,
            Duration::from_secs(30),
            LockWait::Bounded(Duration::ZERO),
            None,
        );
        let begin = sql
            .find("BEGIN ISOLATION LEVEL READ COMMITTED")
            .expect("begin");
        let fence = sql
            .find("pg_advisory_xact_lock_shared(1131376754, -42)")
            .expect("fence");
        assert!(begin < fence);
        assert!(sql.contains("'lock_timeout', '30000'"));
        // Zero would mean "wait forever" to PostgreSQL.
        assert!(sql.ends_with("set_config('lock_timeout', '1', true)"));
    }

    #[test]
    fn a_partition_drop_takes_the_fence_exclusively() {
        let sql = begin_fence_sql(
            7,
            FenceMode::Exclusive,
            Duration::from_secs(1),
            LockWait::Bounded(Duration::from_secs(2)),
            None,
        );
        assert!(sql.contains("pg_catalog.pg_advisory_xact_lock(1131376754, 7)"));
        assert!(!sql.contains("_shared"));
        assert!(sql.ends_with("set_config('lock_timeout', '2000', true)"));
    }
}
