//! Everything that writes SQL text. Names go through [`ident`]; values are
//! always bind parameters; catalog relations and built-in functions are
//! written `pg_catalog.`-qualified.

pub(crate) mod ident;

pub(crate) use ident::{Ident, QualifiedName};

use sqlx::PgConnection;

/// The statement that puts `pg_catalog` first on `search_path` for the rest
/// of the current transaction, ahead of whatever the session had. Built-in
/// functions and operators then cannot be shadowed by a schema earlier on the
/// path, while the host's own triggers, defaults and policies (which run inside
/// Cohort's statements) still find their unqualified tables. Every statement
/// Cohort writes is qualified as well; this is the second wall.
pub(crate) const PIN_SEARCH_PATH: &str = "SELECT pg_catalog.set_config('search_path', \
     'pg_catalog, ' OPERATOR(pg_catalog.||) pg_catalog.current_setting('search_path'), true)";

/// [`PIN_SEARCH_PATH`] for a sweep or erasure batch, which also stops waiting
/// for the WAL flush at commit: a batch's mutation and its ledger entries
/// commit together, so a crash can lose a just-committed batch only whole
/// (rows and ledger alike), and the next run redoes it.
pub(crate) const PIN_FOR_BATCH: &str = "SELECT pg_catalog.set_config('search_path', \
     'pg_catalog, ' OPERATOR(pg_catalog.||) pg_catalog.current_setting('search_path'), true), \
     pg_catalog.set_config('synchronous_commit', 'off', true)";

/// Sets `search_path` to `pg_catalog` alone for the rest of the transaction:
/// used while reading the catalog at start-up, so that `format_type` prints
/// every type outside `pg_catalog` schema-qualified, and the type names Cohort
/// later writes as cast targets mean the same in any session.
pub(crate) const CATALOG_ONLY_SEARCH_PATH: &str =
    "SELECT pg_catalog.set_config('search_path', 'pg_catalog', true)";

/// Pins `search_path` (see [`PIN_SEARCH_PATH`]) and returns the previous value
/// for [`restore_search_path`]: a transaction-local setting outlives a
/// savepoint's release, so code that runs inside a caller's transaction must
/// put it back.
pub(crate) async fn pin_search_path(conn: &mut PgConnection) -> Result<String, sqlx::Error> {
    let previous: String = sqlx::query_scalar("SELECT pg_catalog.current_setting('search_path')")
        .fetch_one(&mut *conn)
        .await?;
    sqlx::query(PIN_SEARCH_PATH).execute(&mut *conn).await?;
    Ok(previous)
}

/// Puts back the `search_path` that [`pin_search_path`] replaced.
pub(crate) async fn restore_search_path(
    conn: &mut PgConnection,
    previous: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_catalog.set_config('search_path', $1, true)")
        .bind(previous)
        .execute(conn)
        .await
        .map(|_| ())
}

pub(crate) mod entity;

/// The one door through which SQL text built at run time reaches sqlx. Only
/// this module's builders (quoted identifiers, catalog type names, fixed
/// fragments) may produce such text.
pub(crate) use sqlx::AssertSqlSafe;
