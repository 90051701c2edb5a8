//! Reading `pg_catalog`: what the live database says about a host table.
//! Every query binds its names as values and reads only `pg_catalog`.

use sqlx::{PgConnection, Row};

/// A column as the catalog has it.
#[derive(Debug, Clone)]
pub(crate) struct CatalogColumn {
    pub(crate) name: String,
    /// `pg_catalog.format_type` output (run with `search_path` pinned).
    pub(crate) sql_type: String,
    pub(crate) not_null: bool,
}

/// A table as the catalog has it; `None` from [`table`] when it does not exist.
#[derive(Debug, Clone)]
pub(crate) struct CatalogTable {
    pub(crate) oid: u32,
    pub(crate) columns: Vec<CatalogColumn>,
}

impl CatalogTable {
    pub(crate) fn column(&self, name: &str) -> Option<&CatalogColumn> {
        self.columns.iter().find(|c| c.name == name)
    }
}

/// Reads one table's columns. The caller has pinned `search_path`.
pub(crate) async fn table(
    conn: &mut PgConnection,
    schema: &str,
    name: &str,
) -> Result<Option<CatalogTable>, sqlx::Error> {
    let oid: Option<sqlx::postgres::types::Oid> = sqlx::query_scalar(
        "SELECT c.oid FROM pg_catalog.pg_class c \
         JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace \
         WHERE n.nspname OPERATOR(pg_catalog.=) $1::text::pg_catalog.name \
           AND c.relname OPERATOR(pg_catalog.=) $2::text::pg_catalog.name \
           AND c.relkind OPERATOR(pg_catalog.=) ANY (ARRAY['r', 'p']::\"char\"[])",
    )
    .bind(schema)
    .bind(name)
    .fetch_optional(&mut *conn)
    .await?;
    let Some(oid) = oid else { return Ok(None) };
    let columns = sqlx::query(
        "SELECT a.attname::text AS name, pg_catalog.format_type(a.atttypid, a.atttypmod) AS ty, a.attnotnull \
         FROM pg_catalog.pg_attribute a \
         WHERE a.attrelid OPERATOR(pg_catalog.=) $1 AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped \
         ORDER BY a.attnum",
    )
    .bind(oid)
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .map(|r| {
        Ok(CatalogColumn { name: r.try_get("name")?, sql_type: r.try_get("ty")?, not_null: r.try_get("attnotnull")? })
    })
    .collect::<Result<Vec<_>, sqlx::Error>>()?;
    Ok(Some(CatalogTable {
        oid: oid.0,
        columns,
    }))
}
