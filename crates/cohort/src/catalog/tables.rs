//! Relations by schema and name, and their columns.

use sqlx::postgres::types::Oid;
use sqlx::{PgConnection, Row};

/// A column as the catalog has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CatalogColumn {
    pub(crate) name: String,
    /// `pg_attribute.attnum`.
    pub(crate) attnum: i16,
    /// `pg_attribute.atttypid`: the declared type (a domain stays a domain).
    pub(crate) type_oid: u32,
    /// `pg_attribute.atttypmod` (`-1` when none, e.g. for a domain).
    pub(crate) typmod: i32,
    /// `pg_catalog.format_type` output (run with `search_path` pinned).
    pub(crate) sql_type: String,
    /// `pg_attribute.attnotnull` (a NOT NULL domain is not reflected here).
    pub(crate) not_null: bool,
    /// `pg_attribute.attgenerated` is set: a generated column, which
    /// PostgreSQL computes and refuses to write.
    pub(crate) generated: bool,
}

/// A table (plain or partitioned) as the catalog has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CatalogTable {
    pub(crate) oid: u32,
    /// `relkind = 'p'`.
    pub(crate) partitioned: bool,
    /// `relispartition`: the table is a partition of another.
    pub(crate) is_partition: bool,
    /// For a table partitioned by `RANGE` on one plain column (no
    /// expression), that column's `attnum`; `None` for any other table or
    /// partitioning scheme (list, hash, several columns, an expression).
    pub(crate) range_key: Option<i16>,
    pub(crate) columns: Vec<CatalogColumn>,
}

impl CatalogTable {
    /// The column with this exact name.
    pub(crate) fn column(&self, name: &str) -> Option<&CatalogColumn> {
        self.columns.iter().find(|c| c.name == name)
    }
}

/// What a schema-qualified name refers to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RelationLookup {
    /// A plain or partitioned table.
    Table(CatalogTable),
    /// Something else of that name (a view, a foreign table, ...), described.
    NotATable { kind: &'static str },
    /// Nothing of that name; `schema_exists` tells whether the schema does.
    Missing { schema_exists: bool },
}

fn describe(relkind: &str) -> &'static str {
    match relkind {
        "v" => "a view",
        "m" => "a materialized view",
        "f" => "a foreign table",
        "S" => "a sequence",
        "i" | "I" => "an index",
        "c" => "a composite type",
        "t" => "a TOAST table",
        _ => "not a table",
    }
}

/// Looks up each `(schema, name)` pair exactly (no `search_path`), and reads
/// the columns of those that are tables. The result is in the order asked.
pub(crate) async fn lookup_tables(
    conn: &mut PgConnection,
    names: &[(String, String)],
) -> Result<Vec<RelationLookup>, sqlx::Error> {
    let schemas: Vec<&str> = names.iter().map(|(s, _)| s.as_str()).collect();
    let tables: Vec<&str> = names.iter().map(|(_, t)| t.as_str()).collect();
    let rows = crate::sql::query(
        "SELECT q.ord, (n.oid IS NOT NULL) AS schema_exists, c.oid, \
                c.relkind::pg_catalog.text AS relkind, c.relispartition, \
                CASE WHEN pt.partstrat OPERATOR(pg_catalog.=) 'r'::pg_catalog.\"char\" \
                      AND pt.partnatts OPERATOR(pg_catalog.=) 1 \
                      AND pt.partattrs[0] OPERATOR(pg_catalog.<>) 0 \
                     THEN pt.partattrs[0] END AS range_key \
         FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.text[]), \
                        pg_catalog.unnest($2::pg_catalog.text[])) \
              WITH ORDINALITY AS q(nsp, rel, ord) \
         LEFT JOIN pg_catalog.pg_namespace n \
                ON n.nspname OPERATOR(pg_catalog.=) q.nsp::pg_catalog.name \
         LEFT JOIN pg_catalog.pg_class c \
                ON c.relnamespace OPERATOR(pg_catalog.=) n.oid \
               AND c.relname OPERATOR(pg_catalog.=) q.rel::pg_catalog.name \
         LEFT JOIN pg_catalog.pg_partitioned_table pt \
                ON pt.partrelid OPERATOR(pg_catalog.=) c.oid \
         ORDER BY q.ord",
    )
    .bind(&schemas)
    .bind(&tables)
    .fetch_all(&mut *conn)
    .await?;

    let mut lookups = Vec::with_capacity(names.len());
    let mut table_oids = Vec::new();
    for r in rows {
        let schema_exists: bool = r.try_get("schema_exists")?;
        let oid: Option<Oid> = r.try_get("oid")?;
        let lookup = match oid {
            None => RelationLookup::Missing { schema_exists },
            Some(oid) => {
                let relkind: String = r.try_get("relkind")?;
                if relkind == "r" || relkind == "p" {
                    table_oids.push(oid);
                    RelationLookup::Table(CatalogTable {
                        oid: oid.0,
                        partitioned: relkind == "p",
                        is_partition: r.try_get("relispartition")?,
                        range_key: r.try_get("range_key")?,
                        columns: Vec::new(),
                    })
                } else {
                    RelationLookup::NotATable {
                        kind: describe(&relkind),
                    }
                }
            }
        };
        lookups.push(lookup);
    }
    if table_oids.is_empty() {
        return Ok(lookups);
    }

    let columns = crate::sql::query(
        "SELECT a.attrelid, a.attnum, a.attname::pg_catalog.text AS attname, a.atttypid, \
                a.atttypmod, a.attnotnull, \
                (a.attgenerated OPERATOR(pg_catalog.<>) ''::pg_catalog.\"char\") AS generated, \
                pg_catalog.format_type(a.atttypid, a.atttypmod) AS sql_type \
         FROM pg_catalog.pg_attribute a \
         WHERE a.attrelid OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.oid[]) \
           AND a.attnum OPERATOR(pg_catalog.>) 0 \
           AND NOT a.attisdropped \
         ORDER BY a.attrelid, a.attnum",
    )
    .bind(&table_oids)
    .fetch_all(&mut *conn)
    .await?;
    for r in columns {
        let relid: Oid = r.try_get("attrelid")?;
        let typid: Oid = r.try_get("atttypid")?;
        let column = CatalogColumn {
            name: r.try_get("attname")?,
            attnum: r.try_get("attnum")?,
            type_oid: typid.0,
            typmod: r.try_get("atttypmod")?,
            sql_type: r.try_get("sql_type")?,
            not_null: r.try_get("attnotnull")?,
            generated: r.try_get("generated")?,
        };
        // The same table may have been asked for twice.
        for lookup in &mut lookups {
            if let RelationLookup::Table(t) = lookup
                && t.oid == relid.0
            {
                t.columns.push(column.clone());
            }
        }
    }
    Ok(lookups)
}
