//! The foreign-key graph of the whole database, between partition roots.

use sqlx::postgres::types::Oid;
use sqlx::{PgConnection, Row};

use super::RelationName;

/// What a foreign key does when a referenced row is deleted (`confdeltype`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnDelete {
    /// `c`: the referencing rows are deleted too.
    Cascade,
    /// `a`, `r`, `n`, `d`: NO ACTION, RESTRICT, SET NULL, SET DEFAULT.
    Other,
}

/// One foreign key. Both ends are mapped to their partition root (a plain
/// table is its own root), so a key on or into a partition counts as one on or
/// into the partitioned table whose rows it holds. Keys that partitions
/// inherit from their parent's key (`conparentid <> 0`) are left out: the
/// parent's key stands for them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ForeignKey {
    pub(crate) name: String,
    pub(crate) on_delete: OnDelete,
    /// The table holding the key (the child).
    pub(crate) referencing_oid: u32,
    pub(crate) referencing: RelationName,
    /// The table the key points at (the parent).
    pub(crate) referenced_oid: u32,
    pub(crate) referenced: RelationName,
}

/// Every foreign key in the database.
pub(crate) async fn foreign_keys(conn: &mut PgConnection) -> Result<Vec<ForeignKey>, sqlx::Error> {
    crate::sql::query(
        "SELECT con.conname::pg_catalog.text AS name, \
                (con.confdeltype OPERATOR(pg_catalog.=) 'c'::pg_catalog.\"char\") AS cascade, \
                src.oid AS src_oid, srcn.nspname::pg_catalog.text AS src_schema, \
                src.relname::pg_catalog.text AS src_name, \
                dst.oid AS dst_oid, dstn.nspname::pg_catalog.text AS dst_schema, \
                dst.relname::pg_catalog.text AS dst_name \
         FROM pg_catalog.pg_constraint con \
         JOIN pg_catalog.pg_class src ON src.oid OPERATOR(pg_catalog.=) COALESCE( \
              pg_catalog.pg_partition_root(con.conrelid::pg_catalog.regclass)::pg_catalog.oid, \
              con.conrelid) \
         JOIN pg_catalog.pg_namespace srcn ON srcn.oid OPERATOR(pg_catalog.=) src.relnamespace \
         JOIN pg_catalog.pg_class dst ON dst.oid OPERATOR(pg_catalog.=) COALESCE( \
              pg_catalog.pg_partition_root(con.confrelid::pg_catalog.regclass)::pg_catalog.oid, \
              con.confrelid) \
         JOIN pg_catalog.pg_namespace dstn ON dstn.oid OPERATOR(pg_catalog.=) dst.relnamespace \
         WHERE con.contype OPERATOR(pg_catalog.=) 'f'::pg_catalog.\"char\" \
           AND con.conparentid OPERATOR(pg_catalog.=) 0::pg_catalog.oid \
         ORDER BY srcn.nspname, src.relname, con.conname",
    )
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .map(|r| {
        let src: Oid = r.try_get("src_oid")?;
        let dst: Oid = r.try_get("dst_oid")?;
        let cascade: bool = r.try_get("cascade")?;
        Ok(ForeignKey {
            name: r.try_get("name")?,
            on_delete: if cascade {
                OnDelete::Cascade
            } else {
                OnDelete::Other
            },
            referencing_oid: src.0,
            referencing: RelationName {
                schema: r.try_get("src_schema")?,
                name: r.try_get("src_name")?,
            },
            referenced_oid: dst.0,
            referenced: RelationName {
                schema: r.try_get("dst_schema")?,
                name: r.try_get("dst_name")?,
            },
        })
    })
    .collect()
}
