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
mod schema_name;
pub(crate) mod statement;
pub(crate) mod timestamp;
pub(crate) mod txn;

pub(crate) use ident::{Ident, QualifiedName};
pub use schema_name::SchemaName;
pub(crate) use statement::{Params, Statement};
pub(crate) use timestamp::PgTime;

use sqlx::postgres::{PgArguments, PgRow};
use sqlx::{Connection, FromRow, PgConnection, Postgres, SqlSafeStr};

/// A statement of Cohort's, unnamed: parsed and planned where it runs, and
/// left on no server session (contract CO1). Every statement but the batch
/// loop's and the dispatcher's hot ones is built here; those are named
/// only on a [`crate::ConnectionMode::Direct`] connection (`persistent`).
/// An unnamed statement is parsed in one protocol exchange and executed in
/// a second, which a pooler in transaction mode keeps on one server
/// session only inside a transaction: every statement runs in one.
pub(crate) fn query<'q>(sql: impl SqlSafeStr) -> sqlx::query::Query<'q, Postgres, PgArguments> {
    sqlx::query(sql).persistent(false)
}

/// [`query`], mapping rows to `O`.
pub(crate) fn query_as<'q, O>(
    sql: impl SqlSafeStr,
) -> sqlx::query::QueryAs<'q, Postgres, O, PgArguments>
where
    O: for<'r> FromRow<'r, PgRow>,
{
    sqlx::query_as(sql).persistent(false)
}

/// [`query`], reading the first column.
pub(crate) fn query_scalar<'q, O>(
    sql: impl SqlSafeStr,
) -> sqlx::query::QueryScalar<'q, Postgres, O, PgArguments>
where
    (O,): for<'r> FromRow<'r, PgRow>,
{
    sqlx::query_scalar(sql).persistent(false)
}

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

/// A transaction of Cohort's (a savepoint, when the connection is already in
/// one) whose `search_path` has `pg_catalog` first ([`PIN_SEARCH_PATH`]).
/// [`Pinned::commit`] puts the previous `search_path` back before it commits:
/// a transaction-local setting outlives a savepoint's release, so code that
/// runs inside a caller's transaction must restore it. Rolling back undoes
/// it by itself.
#[derive(Debug)]
pub(crate) struct Pinned<'c> {
    tx: sqlx::Transaction<'c, sqlx::Postgres>,
    /// The caller's `search_path`, while ours is in force.
    previous_path: Option<String>,
    /// Whether this is a savepoint inside the caller's transaction, whose
    /// transaction-local settings outlive it.
    nested: bool,
}

impl<'c> Pinned<'c> {
    /// Begins the transaction (or savepoint) and pins `search_path`.
    pub(crate) async fn begin(conn: &'c mut PgConnection) -> Result<Pinned<'c>, sqlx::Error> {
        // A transaction of its own ends with its settings; only a savepoint
        // inside the caller's transaction must put the path back.
        let nested = conn.is_in_transaction();
        let mut tx = sqlx::Acquire::begin(conn).await?;
        // The target list is read left to right: the old path, then ours.
        let previous_path: String = query_scalar(
            "SELECT pg_catalog.current_setting('search_path'), \
                    pg_catalog.set_config('search_path', 'pg_catalog, ' OPERATOR(pg_catalog.||) \
                        pg_catalog.current_setting('search_path'), true)",
        )
        .fetch_one(&mut *tx)
        .await?;
        Ok(Pinned {
            tx,
            previous_path: Some(previous_path),
            nested,
        })
    }

    /// Puts the caller's `search_path` back while the transaction stays
    /// open: before Cohort hands the transaction to host code.
    pub(crate) async fn unpin(&mut self) -> Result<(), sqlx::Error> {
        if let Some(previous) = self.previous_path.take() {
            query("SELECT pg_catalog.set_config('search_path', $1, true)")
                .bind(&previous)
                .execute(&mut *self.tx)
                .await?;
        }
        Ok(())
    }

    /// The transaction's connection.
    pub(crate) fn conn(&mut self) -> &mut PgConnection {
        &mut self.tx
    }

    /// Commits (a savepoint puts the caller's `search_path` back first).
    pub(crate) async fn commit(mut self) -> Result<(), sqlx::Error> {
        if self.nested {
            self.unpin().await?;
        }
        self.tx.commit().await
    }

    /// Rolls back (which undoes the pinned `search_path` too). A failure is
    /// logged: it means the connection is gone, which ends the transaction
    /// anyway.
    pub(crate) async fn rollback(self) {
        if let Err(e) = self.tx.rollback().await {
            tracing::warn!(error = %e, "rolling back a Cohort transaction failed");
        }
    }

    /// Commits on `Ok`, rolls back on `Err`, and hands the result on.
    pub(crate) async fn finish<T, E: From<sqlx::Error>>(
        self,
        result: Result<T, E>,
    ) -> Result<T, E> {
        match result {
            Ok(value) => {
                self.commit().await?;
                Ok(value)
            }
            Err(e) => {
                self.rollback().await;
                Err(e)
            }
        }
    }
}

/// The one door through which SQL text built at run time reaches sqlx. Only
/// this module's builders (quoted identifiers, catalog type names, fixed
/// fragments) may produce such text.
pub(crate) use sqlx::AssertSqlSafe;
