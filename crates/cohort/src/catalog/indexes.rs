//! The indexes of tables: unique ones prove a record id unique, every valid
//! one may serve a batch's scans.

use sqlx::postgres::types::Oid;
use sqlx::{PgConnection, Row};

/// An index (every primary key and unique constraint has one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CatalogIndex {
    /// `indisunique`.
    pub(crate) unique: bool,
    /// The indexed table.
    pub(crate) table_oid: u32,
    /// The index's name, for messages.
    pub(crate) name: String,
    pub(crate) primary: bool,
    /// `indisvalid`: a failed `CREATE INDEX CONCURRENTLY` leaves an invalid one.
    pub(crate) valid: bool,
    /// Has a `WHERE` clause.
    pub(crate) partial: bool,
    /// Key columns in order; `0` for an expression.
    pub(crate) key_attnums: Vec<i16>,
}

/// Reads every index (primary keys included) of the given tables.
pub(crate) async fn indexes(
    conn: &mut PgConnection,
    table_oids: &[u32],
) -> Result<Vec<CatalogIndex>, sqlx::Error> {
    if table_oids.is_empty() {
        return Ok(Vec::new());
    }
    let oids: Vec<Oid> = table_oids.iter().copied().map(Oid).collect();
    crate::sql::query(
        "SELECT ix.indrelid, ic.relname::pg_catalog.text AS name, ix.indisunique, ix.indisprimary, \
                (ix.indisvalid AND ix.indisready) AS indisvalid, \
                (ix.indpred IS NOT NULL) AS partial, \
                ARRAY(SELECT k.attnum \
                        FROM pg_catalog.unnest(ix.indkey::pg_catalog.int2[]) \
                             WITH ORDINALITY AS k(attnum, ord) \
                       WHERE k.ord OPERATOR(pg_catalog.<=) ix.indnkeyatts \
                       ORDER BY k.ord) AS key_attnums \
         FROM pg_catalog.pg_index ix \
         JOIN pg_catalog.pg_class ic ON ic.oid OPERATOR(pg_catalog.=) ix.indexrelid \
         WHERE ix.indrelid OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.oid[]) \
         ORDER BY ix.indrelid, ic.relname",
    )
    .bind(&oids)
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .map(|r| {
        let table: Oid = r.try_get("indrelid")?;
        Ok(CatalogIndex {
            unique: r.try_get("indisunique")?,
            table_oid: table.0,
            name: r.try_get("name")?,
            primary: r.try_get("indisprimary")?,
            valid: r.try_get("indisvalid")?,
            partial: r.try_get("partial")?,
            key_attnums: r.try_get("key_attnums")?,
        })
    })
    .collect()
}
