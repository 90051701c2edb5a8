//! Table inheritance and partitioning links (`pg_inherits`).

use sqlx::postgres::types::Oid;
use sqlx::{PgConnection, Row};

use super::RelationName;

/// One `pg_inherits` row touching a table asked about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InheritanceLink {
    pub(crate) parent_oid: u32,
    pub(crate) parent: RelationName,
    /// The parent is a partitioned table (`relkind = 'p'`): declarative
    /// partitioning, not legacy inheritance.
    pub(crate) parent_partitioned: bool,
    pub(crate) child_oid: u32,
    pub(crate) child: RelationName,
}

/// Every link where one of the given tables is the parent or the child.
pub(crate) async fn inheritance(
    conn: &mut PgConnection,
    table_oids: &[u32],
) -> Result<Vec<InheritanceLink>, sqlx::Error> {
    if table_oids.is_empty() {
        return Ok(Vec::new());
    }
    let oids: Vec<Oid> = table_oids.iter().copied().map(Oid).collect();
    crate::sql::query(
        "SELECT i.inhparent, pn.nspname::pg_catalog.text AS parent_schema, \
                p.relname::pg_catalog.text AS parent_name, \
                (p.relkind OPERATOR(pg_catalog.=) 'p'::pg_catalog.\"char\") AS parent_partitioned, \
                i.inhrelid, cn.nspname::pg_catalog.text AS child_schema, \
                c.relname::pg_catalog.text AS child_name \
         FROM pg_catalog.pg_inherits i \
         JOIN pg_catalog.pg_class p ON p.oid OPERATOR(pg_catalog.=) i.inhparent \
         JOIN pg_catalog.pg_namespace pn ON pn.oid OPERATOR(pg_catalog.=) p.relnamespace \
         JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) i.inhrelid \
         JOIN pg_catalog.pg_namespace cn ON cn.oid OPERATOR(pg_catalog.=) c.relnamespace \
         WHERE i.inhrelid OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.oid[]) \
            OR i.inhparent OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.oid[]) \
         ORDER BY pn.nspname, p.relname, cn.nspname, c.relname",
    )
    .bind(&oids)
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .map(|r| {
        let parent: Oid = r.try_get("inhparent")?;
        let child: Oid = r.try_get("inhrelid")?;
        Ok(InheritanceLink {
            parent_oid: parent.0,
            parent: RelationName {
                schema: r.try_get("parent_schema")?,
                name: r.try_get("parent_name")?,
            },
            parent_partitioned: r.try_get("parent_partitioned")?,
            child_oid: child.0,
            child: RelationName {
                schema: r.try_get("child_schema")?,
                name: r.try_get("child_name")?,
            },
        })
    })
    .collect()
}
