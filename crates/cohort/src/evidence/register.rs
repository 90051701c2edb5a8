//! The erasure register (contract SA2): every settled, real erasure run with
//! its tenant, time and the subject only as its keyed hash, read from the
//! ledger and written as JSON Lines to a place outside the database, so that
//! it survives a restore of that database and can be replayed
//! ([`crate::Cohort::replay_erasures`]).

use std::io::{BufRead, Write};

use chrono::{DateTime, Utc};
use futures_util::TryStreamExt;
use serde::{Deserialize, Serialize};
use sqlx::{PgConnection, Row};
use uuid::Uuid;

use super::{EvidenceError, to_hex};
use crate::error::Error;
use crate::schema::SchemaName;
use crate::sql::AssertSqlSafe;

/// One erasure of the register: one line of its JSON Lines form.
///
/// ```
/// let line = r#"{"run_id":"0b6a3c9e-1f2d-4e5f-8a9b-0c1d2e3f4a5b","tenant_id":"2b0c6e1e-5d4c-4a8e-9a59-1f3c1d0e7a21","subject_hmac":"ab","settled_at":"2026-12-01T10:00:00Z","status":"Succeeded"}"#;
/// let entry: cohort::evidence::RegisterEntry = serde_json::from_str(line)?;
/// assert_eq!(entry.status, "Succeeded");
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterEntry {
    /// The erasure run.
    pub run_id: Uuid,
    /// Its tenant (nil for a tenantless erasure).
    pub tenant_id: Uuid,
    /// HMAC-SHA256 of the subject under the host's subject key, lower-case
    /// hex: the register never holds the subject.
    pub subject_hmac: String,
    /// When the run settled.
    pub settled_at: DateTime<Utc>,
    /// How it ended (`Succeeded`, `PartiallyFailed`, ...).
    pub status: String,
}

/// Writes the register of the erasures that settled at or after `since`
/// (all of them for `None`) to
/// `out`, one [`RegisterEntry`] as JSON per line, oldest first; returns how
/// many. Dry runs and erasures that recorded no subject hash (no subject
/// key, or before migration 6) are not in it. Streamed: memory does not grow
/// with the number of erasures.
///
/// Keep the file (or the second database it is loaded into) outside the
/// database it describes, written after every erasure (`cohort erase
/// --register FILE` appends each erasure's entry as it settles): a restore
/// of the database from a backup rolls its ledger back too, and the register
/// is what says which erasures to replay.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), cohort::Error> {
/// let mut conn = pool.acquire().await?;
/// let schema = cohort::schema::SchemaName::public();
/// let mut out = Vec::new();
/// let n = cohort::evidence::write_erasure_register(&mut conn, &schema, None, &mut out).await?;
/// # let _ = n; Ok(()) }
/// ```
pub async fn write_erasure_register<W: Write + ?Sized>(
    conn: &mut PgConnection,
    schema: &SchemaName,
    since: Option<DateTime<Utc>>,
    out: &mut W,
) -> Result<u64, Error> {
    super::ensure_ready(conn, schema).await?;
    let mut tx = super::snapshot(conn).await?;
    let io = |e: std::io::Error| Error::from(EvidenceError::Io(e));
    let mut written = 0u64;
    {
        let mut rows = crate::sql::query(AssertSqlSafe(format!(
            "SELECT {ENTRY_COLUMNS} FROM {} AS r \
             WHERE {IN_REGISTER} \
               AND ($1::pg_catalog.timestamptz IS NULL OR r.settled_at OPERATOR(pg_catalog.>=) $1) \
             ORDER BY r.settled_at, r.run_id",
            schema.table("sweep_run")
        )))
        .bind(since)
        .fetch(&mut *tx);
        while let Some(row) = rows.try_next().await? {
            let entry = entry_of(&row)?;
            let mut line =
                serde_json::to_string(&entry).map_err(|e| io(std::io::Error::other(e)))?;
            line.push('\n');
            out.write_all(line.as_bytes()).map_err(io)?;
            written += 1;
        }
    }
    out.flush().map_err(io)?;
    tx.commit().await?;
    Ok(written)
}

/// The register entry of erasure run `run_id`, to append to the register
/// kept outside the database as soon as the erasure settled; `None` for a
/// run that is not in the register (a dry run, one without a subject hash,
/// not settled, not an erasure).
pub async fn erasure_register_entry(
    conn: &mut PgConnection,
    schema: &SchemaName,
    run_id: Uuid,
) -> Result<Option<RegisterEntry>, Error> {
    super::ensure_ready(conn, schema).await?;
    let row = crate::sql::txn::alone(conn, async |conn| {
        crate::sql::query(AssertSqlSafe(format!(
            "SELECT {ENTRY_COLUMNS} FROM {} AS r \
             WHERE r.run_id OPERATOR(pg_catalog.=) $1 AND {IN_REGISTER}",
            schema.table("sweep_run")
        )))
        .bind(run_id)
        .fetch_optional(conn)
        .await
    })
    .await?;
    row.as_ref().map(entry_of).transpose().map_err(Error::from)
}

/// The columns of a register entry, and the runs that are in the register
/// (settled, real erasures that recorded their subject's hash), for
/// `FROM <runs> AS r WHERE ...`.
const ENTRY_COLUMNS: &str = "r.run_id, r.tenant_id, r.subject_hmac, r.settled_at, r.status";
const IN_REGISTER: &str = "r.run_kind OPERATOR(pg_catalog.=) 'Erasure' AND NOT r.dry_run \
     AND r.subject_hmac IS NOT NULL AND r.settled_at IS NOT NULL";

fn entry_of(row: &sqlx::postgres::PgRow) -> Result<RegisterEntry, sqlx::Error> {
    let hmac: Vec<u8> = row.try_get("subject_hmac")?;
    Ok(RegisterEntry {
        run_id: row.try_get("run_id")?,
        tenant_id: row.try_get("tenant_id")?,
        subject_hmac: to_hex(&hmac),
        settled_at: row.try_get("settled_at")?,
        status: row.try_get("status")?,
    })
}

/// Reads a register written by [`write_erasure_register`] (or appended to
/// by `cohort erase --register`): one entry per non-empty line. A line that
/// is not an entry is an error naming its number.
pub fn read_erasure_register<R: BufRead>(input: R) -> Result<Vec<RegisterEntry>, Error> {
    let mut entries = Vec::new();
    for (n, line) in input.lines().enumerate() {
        let line = line.map_err(EvidenceError::Io)?;
        if line.trim().is_empty() {
            continue;
        }
        let entry: RegisterEntry = serde_json::from_str(&line).map_err(|e| {
            EvidenceError::Io(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("erasure register line {}: {e}", n + 1),
            ))
        })?;
        entries.push(entry);
    }
    Ok(entries)
}
