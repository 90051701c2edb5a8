//! The batch loop's filter of a type's holds (contract X22).
//!
//! A range batch must not change a held row, and asking the holds table
//! about every row of every batch costs 2 to 3 µs a row, more than the
//! change itself; joining the batch to every hold of the type costs what
//! the holds cost (a hash of 100,000 holds on every batch, or, with stale
//! statistics, a nested loop over them all). So the loop reads the type's
//! holds once into a bit filter (one bit per `hashtext(record id) & mask`,
//! set for every hold that is or may become active), and each range
//! statement asks the holds table only about the rows whose bit is set:
//! the held rows and a few percent of false positives. The filter's size
//! is bounded (at most 128 KiB, whatever the number of holds); with very
//! many holds more bits are set and more rows are asked about, so the cost
//! of a batch stays bounded by its rows.
//!
//! The filter is only right while no hold is written for the type. Every
//! write of a hold moves the type's `holds_version` in `retention_entities`
//! (the fence trigger does it, under the entity fence), the filter records
//! the version it was read at, and each range statement checks, in the
//! statement itself, that the version has not moved: if it has, the
//! statement changes nothing and the loop reads the filter again. Because
//! the statement runs under the fence, no hold can be written between that
//! check and the rows' change. The exact test (created, expired, removed,
//! judged by the database clock) is still made per row, so a hold that
//! expires during the run stops protecting as it should.

use futures_util::TryStreamExt;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::schema::SchemaName;
use crate::sql::predicates::hold_not_yet_over;
use crate::sql::{AssertSqlSafe, Pinned};

/// The fewest and the most bits a filter has.
const MIN_BITS: u64 = 1 << 10;
const MAX_BITS: u64 = 1 << 20;

/// Bits per hold: about 3% of unheld rows are asked about.
const BITS_PER_HOLD: u64 = 32;

/// A filter of one type's holds in one tenant (or the tenantless holds).
#[derive(Debug, Clone, Default)]
pub(crate) struct HoldFilter {
    /// The bits; empty when the type has no hold to filter for.
    pub(crate) bits: Vec<u8>,
    /// `bits * 8 - 1`, or `-1` for an empty filter.
    pub(crate) mask: i32,
    /// The type's holds version the filter was read at (`None` when the
    /// type has no registry row, so no hold can be written for it).
    pub(crate) version: Option<i64>,
    /// How many holds it was built from.
    pub(crate) holds: u64,
}

impl HoldFilter {
    /// Reads the holds of type `entity` that are active or may become so
    /// (not expired, not removed) in `tenant` (`None`: the tenantless
    /// holds), and the type's holds version, in one snapshot. Memory is the
    /// filter's bits: the record ids' hashes are streamed.
    pub(crate) async fn read(
        conn: &mut PgConnection,
        schema: &SchemaName,
        entity: Uuid,
        tenant: Option<Uuid>,
    ) -> Result<HoldFilter, sqlx::Error> {
        // In a transaction of its own with `pg_catalog` first on the path,
        // as every statement of Cohort's that writes its operators bare.
        let mut tx = Pinned::begin(conn).await?;
        let read = Self::read_in(tx.conn(), schema, entity, tenant).await;
        tx.finish(read).await
    }

    async fn read_in(
        conn: &mut PgConnection,
        schema: &SchemaName,
        entity: Uuid,
        tenant: Option<Uuid>,
    ) -> Result<HoldFilter, sqlx::Error> {
        let holds = schema.table("retention_holds");
        let registry = schema.table("retention_entities");
        let tenant_cond = if tenant.is_some() {
            "h.tenant_id = $2"
        } else {
            "h.tenant_id IS NULL AND $2::pg_catalog.uuid IS NULL"
        };
        let live = hold_not_yet_over("pg_catalog.statement_timestamp()");
        // The count sizes the filter; holds written between it and the
        // stream only make it a little fuller (and move the version, so the
        // first batch reads it again).
        let n: i64 = crate::sql::query_scalar(AssertSqlSafe(format!(
            "SELECT pg_catalog.count(*) FROM {holds} AS h \
             WHERE h.retained_entity_id = $1 AND {tenant_cond} AND {live}"
        )))
        .bind(entity)
        .bind(tenant)
        .fetch_one(&mut *conn)
        .await?;
        let n = u64::try_from(n).unwrap_or(0);
        let size = (n.saturating_mul(BITS_PER_HOLD))
            .next_power_of_two()
            .clamp(MIN_BITS, MAX_BITS);
        let mut bits = vec![0u8; usize::try_from(size / 8).unwrap_or(0)];
        let mask = u32::try_from(size - 1).unwrap_or(u32::MAX);
        let sql = format!(
            "SELECT (SELECT r.holds_version FROM {registry} AS r WHERE r.retained_entity_id = $1) AS version, \
                    x.hash \
             FROM (SELECT 1) AS one LEFT JOIN LATERAL ( \
               SELECT pg_catalog.hashtext(h.record_id) AS hash FROM {holds} AS h \
               WHERE h.retained_entity_id = $1 AND {tenant_cond} AND {live}) AS x ON true"
        );
        let mut rows = crate::sql::query_as::<(Option<i64>, Option<i32>)>(AssertSqlSafe(sql))
            .bind(entity)
            .bind(tenant)
            .fetch(&mut *conn);
        let mut version = None;
        let mut count = 0u64;
        while let Some((v, hash)) = rows.try_next().await? {
            version = v;
            if let Some(hash) = hash {
                // The same bit the statement tests: hashtext(...) & mask,
                // bit 0 the lowest bit of the first byte (get_bit's order).
                let bit = (hash as u32) & mask;
                if let Some(byte) = bits.get_mut((bit >> 3) as usize) {
                    *byte |= 1 << (bit & 7);
                }
                count += 1;
            }
        }
        if count == 0 {
            return Ok(HoldFilter {
                bits: Vec::new(),
                mask: -1,
                version,
                holds: 0,
            });
        }
        Ok(HoldFilter {
            bits,
            mask: i32::try_from(mask).unwrap_or(i32::MAX),
            version,
            holds: count,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_stay_within_bounds() {
        for n in [0u64, 1, 31, 32, 1000, 100_000, 10_000_000] {
            let size = (n.saturating_mul(BITS_PER_HOLD))
                .next_power_of_two()
                .clamp(MIN_BITS, MAX_BITS);
            assert!(size.is_power_of_two());
            assert!((MIN_BITS..=MAX_BITS).contains(&size));
        }
    }
}
