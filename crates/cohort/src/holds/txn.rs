//! Is the connection already inside a transaction?
//!
//! Two sources, both needed:
//!
//! - sqlx's own bookkeeping ([`Connection::is_in_transaction`]): true inside
//!   a transaction started with `begin()` (what `&mut *tx` hands over). No
//!   round trip.
//! - The server, for a transaction sqlx does not know about (a raw `BEGIN`
//!   run as a query). sqlx tracks the server's ReadyForQuery status but does
//!   not expose it, and the timestamp comparisons people reach for are not
//!   reliable (under the extended protocol `statement_timestamp()` moves at
//!   Bind and Execute, so it differs from `transaction_timestamp()` even in
//!   an implicit one-statement transaction). So we ask the server about
//!   something with a documented lifetime: a transaction-local setting with
//!   a fresh random value, written in one round trip and read back in the
//!   next. Outside a transaction block each round trip is its own implicit
//!   transaction, so the value is gone; inside one, it is still there. A
//!   connection in a failed transaction block answers 25P02, which is an open
//!   transaction too.

use sqlx::{Connection, PgConnection};
use uuid::Uuid;

use crate::sql::AssertSqlSafe;

use crate::error::Error;

const PROBE: &str = "cohort.transaction_probe";

/// What kind of transaction, if any, the connection is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Open {
    /// None: each statement commits on its own.
    No,
    /// A transaction sqlx started (`&mut *tx`); `begin()` will nest a savepoint.
    Tracked,
    /// A transaction sqlx does not know about (raw `BEGIN`); `begin()` would
    /// issue a second `BEGIN` and its commit would end the caller's transaction.
    Untracked,
}

/// Which kind of transaction `conn` is in. Costs two round trips when sqlx
/// knows of none.
pub(crate) async fn open_transaction(conn: &mut PgConnection) -> Result<Open, Error> {
    if conn.is_in_transaction() {
        return Ok(Open::Tracked);
    }
    // Simple-protocol statements: nothing is prepared, so through a pooler
    // in transaction mode (where a prepared statement outside a transaction
    // may be executed on another server session) each message stands alone
    // (contract CO1). The only value in the text is a UUID Cohort made.
    let token = Uuid::new_v4().simple().to_string();
    let set = sqlx::raw_sql(AssertSqlSafe(format!(
        "SELECT pg_catalog.set_config('{PROBE}', '{token}', true)"
    )))
    .execute(&mut *conn)
    .await;
    match set {
        Ok(_) => {}
        Err(e) if super::sqlstate(&e).as_deref() == Some("25P02") => return Ok(Open::Untracked),
        Err(e) => return Err(e.into()),
    }
    let seen = sqlx::raw_sql(AssertSqlSafe(format!(
        "SELECT pg_catalog.current_setting('{PROBE}', true)"
    )))
    .fetch_one(&mut *conn)
    .await?;
    let seen: Option<String> = sqlx::Row::try_get(&seen, 0)?;
    if seen.as_deref() == Some(token.as_str()) {
        // Leave the caller's transaction as we found it, as far as we can.
        sqlx::raw_sql(AssertSqlSafe(format!(
            "SELECT pg_catalog.set_config('{PROBE}', '', true)"
        )))
        .execute(&mut *conn)
        .await?;
        Ok(Open::Untracked)
    } else {
        Ok(Open::No)
    }
}
