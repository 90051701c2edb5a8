//! Column types, followed through domains, arrays, ranges and multiranges.

use std::collections::HashMap;

use sqlx::postgres::types::Oid;
use sqlx::{PgConnection, Row};

/// What kind of type a `pg_type` row is, with the link to follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TypeKind {
    /// A domain over `base` (`typbasetype`).
    Domain { base: u32 },
    /// A true array (`typlen < 0`, `typelem <> 0`) of `element`.
    Array { element: u32 },
    /// A range or multirange over `subtype` (`pg_range.rngsubtype`).
    Range { subtype: u32 },
    /// Anything else: a base, enum, composite or pseudo type.
    Other,
}

/// One `pg_type` row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CatalogType {
    pub(crate) oid: u32,
    /// The type's schema (`pg_catalog` for built-in types).
    pub(crate) schema: String,
    /// `typname` (`timestamptz`, `varchar`, `_int4`, ...).
    pub(crate) name: String,
    pub(crate) kind: TypeKind,
    /// `typtype = 'b'`: a base type.
    pub(crate) is_base: bool,
    /// `typnotnull`: a domain declared NOT NULL.
    pub(crate) not_null: bool,
    /// `typtypmod`: a domain's modifier on its base type (`-1` when none).
    pub(crate) typmod: i32,
}

/// Reads the given types and every type they lead to through domain bases,
/// array elements and range subtypes, keyed by OID.
pub(crate) async fn types(
    conn: &mut PgConnection,
    oids: &[u32],
) -> Result<HashMap<u32, CatalogType>, sqlx::Error> {
    if oids.is_empty() {
        return Ok(HashMap::new());
    }
    let oids: Vec<Oid> = oids.iter().copied().map(Oid).collect();
    let rows = crate::sql::query(
        "WITH RECURSIVE closure(oid) AS ( \
             SELECT pg_catalog.unnest($1::pg_catalog.oid[]) \
           UNION \
             SELECT nxt.oid FROM closure c \
             JOIN pg_catalog.pg_type t ON t.oid OPERATOR(pg_catalog.=) c.oid \
             CROSS JOIN LATERAL (VALUES \
                 (t.typbasetype), \
                 (CASE WHEN t.typlen OPERATOR(pg_catalog.<) 0 THEN t.typelem \
                       ELSE 0::pg_catalog.oid END), \
                 (COALESCE((SELECT r.rngsubtype FROM pg_catalog.pg_range r \
                             WHERE r.rngtypid OPERATOR(pg_catalog.=) t.oid \
                                OR r.rngmultitypid OPERATOR(pg_catalog.=) t.oid \
                             LIMIT 1), 0::pg_catalog.oid)) \
             ) AS nxt(oid) \
             WHERE nxt.oid OPERATOR(pg_catalog.<>) 0::pg_catalog.oid \
         ) \
         SELECT t.oid, n.nspname::pg_catalog.text AS nspname, t.typname::pg_catalog.text AS typname, \
                t.typtype::pg_catalog.text AS typtype, t.typbasetype, t.typnotnull, t.typtypmod, \
                CASE WHEN t.typlen OPERATOR(pg_catalog.<) 0 THEN t.typelem \
                     ELSE 0::pg_catalog.oid END AS element, \
                COALESCE((SELECT r.rngsubtype FROM pg_catalog.pg_range r \
                           WHERE r.rngtypid OPERATOR(pg_catalog.=) t.oid \
                              OR r.rngmultitypid OPERATOR(pg_catalog.=) t.oid \
                           LIMIT 1), 0::pg_catalog.oid) AS subtype \
         FROM closure c \
         JOIN pg_catalog.pg_type t ON t.oid OPERATOR(pg_catalog.=) c.oid \
         JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) t.typnamespace",
    )
    .bind(&oids)
    .fetch_all(&mut *conn)
    .await?;
    let mut out = HashMap::with_capacity(rows.len());
    for r in rows {
        let oid: Oid = r.try_get("oid")?;
        let typtype: String = r.try_get("typtype")?;
        let base: Oid = r.try_get("typbasetype")?;
        let element: Oid = r.try_get("element")?;
        let subtype: Oid = r.try_get("subtype")?;
        let kind = if typtype == "d" {
            TypeKind::Domain { base: base.0 }
        } else if subtype.0 != 0 {
            TypeKind::Range { subtype: subtype.0 }
        } else if element.0 != 0 {
            TypeKind::Array { element: element.0 }
        } else {
            TypeKind::Other
        };
        out.insert(
            oid.0,
            CatalogType {
                oid: oid.0,
                schema: r.try_get("nspname")?,
                name: r.try_get("typname")?,
                kind,
                is_base: typtype == "b",
                not_null: r.try_get("typnotnull")?,
                typmod: r.try_get("typtypmod")?,
            },
        );
    }
    Ok(out)
}
