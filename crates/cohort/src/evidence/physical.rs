//! What "erased" means on disk (contract SA3): whether the old row versions
//! an erasure left behind (a `DELETE` or an `UPDATE` leaves the previous
//! version as a dead tuple until `VACUUM` reclaims it) may still be in the
//! table's files, judged from `pg_stat_user_tables` when a certificate is
//! built.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use sqlx::{PgConnection, Row};
use uuid::Uuid;

use crate::schema::SchemaName;
use crate::sql::AssertSqlSafe;

/// The physical state of one erased type's table when its certificate was
/// built ([`crate::evidence::CertificateType::physical`]).
///
/// `dead_tuples_may_remain` is `false` only when every heap of the table
/// (each partition of a partitioned table) was vacuumed after the erasure
/// settled *and* the table then had no dead tuple at all: `VACUUM` cannot
/// reclaim versions that an older open transaction may still see, and it
/// reports those as dead tuples left. Even then the bytes of a reclaimed
/// version stay in the page's free space until new rows overwrite them, and
/// the write-ahead log, replicas' copies, backups and `pg_dump` files made
/// before keep them for as long as those are kept (`docs/data-subjects.md`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PhysicalState {
    /// The table, `schema.name` as registered.
    pub table: String,
    /// The end of the table's oldest last vacuum (manual or auto, the least
    /// recent over its heaps), RFC 3339; `None` when a heap was never
    /// vacuumed or the table is gone.
    pub vacuumed_at: Option<String>,
    /// Whether every heap was vacuumed after the erasure settled.
    pub vacuumed_since_erasure: bool,
    /// Dead tuples in the table (all its heaps) when the certificate was
    /// built; `None` when the statistics could not be read.
    pub dead_tuples: Option<i64>,
    /// Whether the erased rows' old versions may still be in the table's
    /// files (see the type's docs).
    pub dead_tuples_may_remain: bool,
    /// When this was read (RFC 3339).
    pub checked_at: String,
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// The physical state of `entity`'s table after erasure run `run_id`.
pub(super) async fn physical_state(
    conn: &mut PgConnection,
    schema: &SchemaName,
    run_id: Uuid,
    entity: Uuid,
) -> Result<Option<PhysicalState>, sqlx::Error> {
    let row = crate::sql::query(AssertSqlSafe(format!(
        "WITH t AS ( \
             SELECT e.table_schema, e.table_name, \
                    pg_catalog.to_regclass(pg_catalog.format('%I.%I', e.table_schema, e.table_name)) AS rel \
             FROM {registry} AS e WHERE e.retained_entity_id OPERATOR(pg_catalog.=) $2), \
         heaps AS ( \
             SELECT s.n_dead_tup, \
                    GREATEST(s.last_vacuum, s.last_autovacuum) AS vacuumed \
             FROM t, pg_catalog.pg_stat_user_tables AS s \
             WHERE s.relid OPERATOR(pg_catalog.=) t.rel \
                OR s.relid IN (SELECT p.relid FROM pg_catalog.pg_partition_tree(t.rel) AS p \
                               WHERE p.isleaf)) \
         SELECT t.table_schema, t.table_name, \
                (SELECT pg_catalog.count(*) FROM heaps) AS heaps, \
                (SELECT pg_catalog.count(h.vacuumed) FROM heaps AS h) AS vacuumed_heaps, \
                (SELECT pg_catalog.min(h.vacuumed) FROM heaps AS h) AS oldest_vacuum, \
                (SELECT pg_catalog.count(*) FROM heaps AS h \
                 WHERE h.vacuumed OPERATOR(pg_catalog.>) r.settled_at) AS vacuumed_since, \
                (SELECT pg_catalog.sum(h.n_dead_tup)::pg_catalog.int8 FROM heaps AS h) AS dead, \
                pg_catalog.clock_timestamp() AS checked_at \
         FROM t, {runs} AS r WHERE r.run_id OPERATOR(pg_catalog.=) $1",
        registry = schema.table("retention_entities"),
        runs = schema.table("sweep_run"),
    )))
    .bind(run_id)
    .bind(entity)
    .fetch_optional(&mut *conn)
    .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    let heaps: i64 = row.try_get("heaps")?;
    let vacuumed_heaps: i64 = row.try_get("vacuumed_heaps")?;
    let vacuumed_since: i64 = row.try_get("vacuumed_since")?;
    let oldest: Option<DateTime<Utc>> = row.try_get("oldest_vacuum")?;
    let dead: Option<i64> = row.try_get("dead")?;
    let since = heaps > 0 && vacuumed_since == heaps;
    let table_schema: String = row.try_get("table_schema")?;
    let table_name: String = row.try_get("table_name")?;
    Ok(Some(PhysicalState {
        table: format!("{table_schema}.{table_name}"),
        vacuumed_at: (heaps > 0 && vacuumed_heaps == heaps)
            .then_some(oldest)
            .flatten()
            .map(rfc3339),
        vacuumed_since_erasure: since,
        dead_tuples: if heaps > 0 { dead } else { None },
        dead_tuples_may_remain: !(since && dead == Some(0)),
        checked_at: rfc3339(row.try_get("checked_at")?),
    }))
}
