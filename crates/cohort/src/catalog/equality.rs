//! How to compare a column with a value given as text.
//!
//! `t.col = CAST($1 AS <declared type>)` is wrong twice over:
//!
//! - an explicit cast applies the column's type modifier by truncating or
//!   rounding (`'alice-b'::varchar(5)` is `'alice'`, `'1.555'::numeric(10,2)`
//!   is `1.56`), so a value could name a row it does not equal;
//! - with `search_path` pinned to `pg_catalog`, a plain `=` cannot see an
//!   extension's operator, so `citext = citext` in another schema would
//!   silently become case-sensitive `text = text`.
//!
//! So values are read in the type the column's btree compares in, with no
//! modifier (its single-column unique index's operator class, else its base
//! type's default btree class), and compared with that class's equality
//! operator, written schema-qualified: `OPERATOR("ext".=)`.

use sqlx::postgres::types::Oid;
use sqlx::{PgConnection, Row};

/// The comparison of one column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Equality {
    /// The type a value is read in (catalog text from `format_type`, no
    /// modifier; schema-qualified where needed when read with `search_path`
    /// pinned to `pg_catalog`).
    pub(crate) cmp_type: String,
    /// The equality operator: `OPERATOR("schema".=)`, or `=` when no btree
    /// class was found (then the type's own resolution applies).
    pub(crate) eq: String,
    /// The operator's raw schema and name, when `eq` names one.
    pub(crate) operator: Option<(String, String)>,
}

/// Reads the comparison type and operator of each `(table oid, column name)`,
/// in the order given; `None` for a column that does not exist. Every
/// operator is written `pg_catalog`-qualified, like every catalog query; run
/// with `search_path` set to `pg_catalog` alone so that `format_type`
/// qualifies every other type.
const LOOKUP: &str = "\
WITH RECURSIVE q AS (
    SELECT * FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.oid[]), pg_catalog.unnest($2::pg_catalog.text[]))
        WITH ORDINALITY AS q(rel, name, ord)
), col AS (
    SELECT q.ord, q.rel, a.attnum, a.atttypid
    FROM q JOIN pg_catalog.pg_attribute a
      ON a.attrelid OPERATOR(pg_catalog.=) q.rel AND a.attname OPERATOR(pg_catalog.=) q.name::pg_catalog.name AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped
), chain(ord, oid, depth) AS (
    SELECT col.ord, col.atttypid, 0 FROM col
    UNION ALL
    SELECT chain.ord, ty.typbasetype, chain.depth OPERATOR(pg_catalog.+) 1
    FROM chain JOIN pg_catalog.pg_type ty ON ty.oid OPERATOR(pg_catalog.=) chain.oid
    WHERE ty.typtype OPERATOR(pg_catalog.=) 'd'
), base AS (
    SELECT DISTINCT ON (chain.ord) chain.ord, chain.oid FROM chain ORDER BY chain.ord, chain.depth DESC
), candidates AS (
    SELECT col.ord, 0 AS pref, opc.opcintype, opc.opcfamily, ix.indisprimary
    FROM col
    JOIN pg_catalog.pg_index ix ON ix.indrelid OPERATOR(pg_catalog.=) col.rel
    JOIN pg_catalog.pg_opclass opc ON opc.oid OPERATOR(pg_catalog.=) ix.indclass[0]
    WHERE ix.indisunique AND ix.indisvalid AND ix.indnkeyatts OPERATOR(pg_catalog.=) 1 AND ix.indkey[0] OPERATOR(pg_catalog.=) col.attnum
      AND ix.indpred IS NULL AND ix.indexprs IS NULL
    UNION ALL
    SELECT base.ord, 1, opc.opcintype, opc.opcfamily, false
    FROM base JOIN pg_catalog.pg_opclass opc ON opc.opcintype OPERATOR(pg_catalog.=) base.oid AND opc.opcdefault
), key_op AS (
    SELECT DISTINCT ON (c.ord) c.ord, c.opcintype, o.oprname::pg_catalog.text AS op_name,
           opn.nspname::pg_catalog.text AS op_schema
    FROM candidates c
    JOIN pg_catalog.pg_opfamily f ON f.oid OPERATOR(pg_catalog.=) c.opcfamily
    JOIN pg_catalog.pg_am am ON am.oid OPERATOR(pg_catalog.=) f.opfmethod AND am.amname OPERATOR(pg_catalog.=) 'btree'
    JOIN pg_catalog.pg_amop ao ON ao.amopfamily OPERATOR(pg_catalog.=) c.opcfamily
        AND ao.amoplefttype OPERATOR(pg_catalog.=) c.opcintype AND ao.amoprighttype OPERATOR(pg_catalog.=) c.opcintype
        AND ao.amopstrategy OPERATOR(pg_catalog.=) 3
    JOIN pg_catalog.pg_operator o ON o.oid OPERATOR(pg_catalog.=) ao.amopopr
    JOIN pg_catalog.pg_namespace opn ON opn.oid OPERATOR(pg_catalog.=) o.oprnamespace
    JOIN pg_catalog.pg_type it ON it.oid OPERATOR(pg_catalog.=) c.opcintype
    WHERE it.typtype OPERATOR(pg_catalog.<>) 'p'
    ORDER BY c.ord, c.pref, c.indisprimary DESC
)
SELECT q.ord, (base.oid IS NOT NULL) AS found,
       COALESCE(pg_catalog.format_type(k.opcintype, -1), pg_catalog.format_type(base.oid, -1)) AS cmp_type,
       k.op_name, k.op_schema
FROM q LEFT JOIN base ON base.ord OPERATOR(pg_catalog.=) q.ord LEFT JOIN key_op k ON k.ord OPERATOR(pg_catalog.=) q.ord
ORDER BY q.ord";

/// Whether `name` can be written as an operator name inside `OPERATOR(...)`.
fn is_operator_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 63 && name.chars().all(|c| "+-*/<>=~!@#%^&|`?".contains(c))
}

/// The comparison of each `(table oid, column name)`, in order.
pub(crate) async fn equalities(
    conn: &mut PgConnection,
    columns: &[(u32, &str)],
) -> Result<Vec<Option<Equality>>, sqlx::Error> {
    if columns.is_empty() {
        return Ok(Vec::new());
    }
    let oids: Vec<Oid> = columns.iter().map(|(o, _)| Oid(*o)).collect();
    let names: Vec<&str> = columns.iter().map(|(_, n)| *n).collect();
    let rows = crate::sql::query(LOOKUP)
        .bind(&oids)
        .bind(&names)
        .fetch_all(&mut *conn)
        .await?;
    rows.iter()
        .map(|r| {
            if !r.try_get::<bool, _>("found")? {
                return Ok(None);
            }
            let cmp_type: Option<String> = r.try_get("cmp_type")?;
            let op_name: Option<String> = r.try_get("op_name")?;
            let op_schema: Option<String> = r.try_get("op_schema")?;
            let (eq, operator) = match (op_name, op_schema) {
                (Some(name), Some(schema)) if is_operator_name(&name) => {
                    match crate::sql::Ident::new(&schema) {
                        Ok(quoted) => (format!("OPERATOR({quoted}.{name})"), Some((schema, name))),
                        Err(_) => ("=".to_owned(), None),
                    }
                }
                _ => ("=".to_owned(), None),
            };
            Ok(cmp_type.map(|cmp_type| Equality {
                cmp_type,
                eq,
                operator,
            }))
        })
        .collect()
}
