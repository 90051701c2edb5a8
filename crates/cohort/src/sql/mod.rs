//! The bottom layer of SQL: quoted identifiers, statements with their bind
//! parameters, the predicates several builders share, `timestamptz` values as
//! PostgreSQL keeps them, and Cohort's own transactions. Nothing here knows
//! the domain (no model, policy or schema types): statement builders live with
//! their domain (`run`, `holds`, `ledger`, `schema`) and use these pieces.
//!
//! Names go through [`ident`]; values are always bind parameters; catalog
//! relations and built-in functions are written `pg_catalog.`-qualified.

pub(crate) mod ident;
pub(crate) mod predicates;
pub(crate) mod statement;
pub(crate) mod timestamp;
pub(crate) mod txn;

pub(crate) use ident::{Ident, QualifiedName};
pub(crate) use statement::{Params, Statement};
pub(crate) use timestamp::PgTime;

use sqlx::PgConnection;

/// The statement that puts `pg_catalog` first on `search_path` for the rest
/// of the current transaction, ahead of whatever the session had. Built-in
/// functions and operators then cannot be shadowed by a schema earlier on the
/// path, while the host's own triggers, defaults and policies (which run inside
/// Cohort's statements) still find their unqualified tables. Every statement
/// Cohort writes is qualified as well; this is the second wall.
pub(crate) const PIN_SEARCH_PATH: &str = "SELECT pg_catalog.set_config('search_path', \
     'pg_catalog, ' OPERATOR(pg_catalog.||) pg_catalog.current_setting('search_path'), true)";

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

/// The one door through which SQL text built at run time reaches sqlx. Only
/// this module's builders (quoted identifiers, catalog type names, fixed
/// fragments) may produce such text.
pub(crate) use sqlx::AssertSqlSafe;
