//! A retained type's record-id key as SQL: how to read a record id given as
//! text into the key's own type, how to find the row it names, and the SQL
//! of each statement that does so.
//!
//! Two things make this more than `t.id = CAST($1 AS <column type>)`:
//!
//! - An explicit cast applies the column's type modifier by truncating or
//!   rounding (`'abcdefg'::varchar(5)` is `'abcde'`, `'1.555'::numeric(10,2)`
//!   is `1.56`), so a request could name one row and hold another. Values
//!   are compared in the type the key's unique index compares in, with no
//!   modifier (`text`, `numeric`, `bpchar`, domains resolved to their base).
//!   The column's declared type is still applied once, to reject values its
//!   domain constraints refuse.
//! - Cohort pins `search_path` to `pg_catalog`, so a plain `=` cannot see an
//!   extension's operator: `citext = citext` would silently resolve to
//!   case-sensitive `text = text`. The equality operator of the key's unique
//!   btree index (or the type's default btree operator class) is written
//!   schema-qualified: `OPERATOR("public".=)`.
//!
//! Every piece of SQL text here is a quoted identifier (through [`Ident`] and
//! `QualifiedName`), a type name printed by `pg_catalog.format_type`, or an
//! operator name checked to consist of operator characters. Values are bound.

use sqlx::{PgConnection, Row};
use uuid::Uuid;

use super::error::HoldError;
use crate::error::Error;
use crate::model::resolved::ResolvedEntity;
use crate::sql::Ident;
use crate::sql::entity::row_lock_key;

/// Finds the comparison type and equality operator of a record-id column.
/// `$1` schema, `$2` table, `$3` column (raw names, bound as values). Run
/// with `search_path` pinned, so `format_type` qualifies every type outside
/// `pg_catalog`.
const KEY_LOOKUP: &str = "\
WITH RECURSIVE col AS (
    SELECT c.oid AS rel, a.attnum, a.atttypid
    FROM pg_catalog.pg_class c
    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
    JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid
    WHERE n.nspname = $1::pg_catalog.text::pg_catalog.name
      AND c.relname = $2::pg_catalog.text::pg_catalog.name
      AND a.attname = $3::pg_catalog.text::pg_catalog.name
      AND a.attnum > 0 AND NOT a.attisdropped
), chain(oid, depth) AS (
    SELECT col.atttypid, 0 FROM col
    UNION ALL
    SELECT ty.typbasetype, chain.depth + 1
    FROM chain JOIN pg_catalog.pg_type ty ON ty.oid = chain.oid
    WHERE ty.typtype = 'd'
), base AS (
    SELECT chain.oid FROM chain ORDER BY chain.depth DESC LIMIT 1
), candidates AS (
    -- The key's own unique btree index, primary key first ...
    SELECT 0 AS pref, opc.opcintype, opc.opcfamily, ix.indisprimary
    FROM col
    JOIN pg_catalog.pg_index ix ON ix.indrelid = col.rel
    JOIN pg_catalog.pg_opclass opc ON opc.oid = ix.indclass[0]
    WHERE ix.indisunique AND ix.indnkeyatts = 1 AND ix.indkey[0] = col.attnum
      AND ix.indpred IS NULL AND ix.indexprs IS NULL
    UNION ALL
    -- ... else the default btree operator class of the key's base type.
    SELECT 1, opc.opcintype, opc.opcfamily, false
    FROM base JOIN pg_catalog.pg_opclass opc ON opc.opcintype = base.oid AND opc.opcdefault
), key_op AS (
    SELECT c.opcintype, o.oprname::pg_catalog.text AS op_name,
           opn.nspname::pg_catalog.text AS op_schema
    FROM candidates c
    JOIN pg_catalog.pg_opfamily f ON f.oid = c.opcfamily
    JOIN pg_catalog.pg_am am ON am.oid = f.opfmethod AND am.amname = 'btree'
    JOIN pg_catalog.pg_amop ao ON ao.amopfamily = c.opcfamily
        AND ao.amoplefttype = c.opcintype AND ao.amoprighttype = c.opcintype
        AND ao.amopstrategy = 3
    JOIN pg_catalog.pg_operator o ON o.oid = ao.amopopr
    JOIN pg_catalog.pg_namespace opn ON opn.oid = o.oprnamespace
    JOIN pg_catalog.pg_type it ON it.oid = c.opcintype
    WHERE it.typtype <> 'p'
    ORDER BY c.pref, c.indisprimary DESC
    LIMIT 1
)
SELECT COALESCE(pg_catalog.format_type(k.opcintype, -1),
                pg_catalog.format_type(base.oid, -1)) AS cmp_type,
       k.op_name, k.op_schema
FROM base LEFT JOIN key_op k ON true";

/// The SQL pieces of one retained type's record-id key.
#[derive(Debug, Clone)]
pub(super) struct KeySql {
    entity_id: Uuid,
    /// The table, quoted and schema-qualified.
    table: String,
    /// The record-id column, quoted.
    rid: String,
    /// The tenant column, quoted; `None` for tenantless types.
    tenant: Option<String>,
    /// The column's declared type (catalog text, with its modifier).
    declared: String,
    /// The type values are compared in (catalog text, no modifier).
    cmp_type: String,
    /// The equality operator: `OPERATOR("schema".=)` or a plain `=` for
    /// built-in types reached through `pg_catalog`.
    eq: String,
}

/// Whether `name` can be written as an operator name inside `OPERATOR(...)`.
fn is_operator_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= crate::sql::ident::MAX_IDENT_BYTES
        && name.chars().all(|c| "+-*/<>=~!@#%^&|`?".contains(c))
}

impl KeySql {
    /// Reads the key's comparison type and operator from the catalog. The
    /// caller has pinned `search_path`.
    pub(super) async fn load(conn: &mut PgConnection, e: &ResolvedEntity) -> Result<KeySql, Error> {
        let row = sqlx::query(KEY_LOOKUP)
            .bind(e.table.schema.as_str())
            .bind(e.table.name.as_str())
            .bind(e.record_id.name.as_str())
            .fetch_optional(&mut *conn)
            .await?;
        let (cmp_type, eq) = match row {
            Some(row) => {
                let cmp: Option<String> = row.try_get("cmp_type")?;
                let op_name: Option<String> = row.try_get("op_name")?;
                let op_schema: Option<String> = row.try_get("op_schema")?;
                let eq = match (op_name, op_schema) {
                    (Some(name), Some(schema)) if is_operator_name(&name) => {
                        match Ident::new(&schema) {
                            Ok(schema) => format!("OPERATOR({schema}.{name})"),
                            Err(_) => "=".to_owned(),
                        }
                    }
                    _ => "=".to_owned(),
                };
                (cmp.unwrap_or_else(|| e.record_id.sql_type.clone()), eq)
            }
            // The column is gone: let the statements fail with the server's
            // own error (42703 / 42P01), as a sweep would.
            None => (e.record_id.sql_type.clone(), "=".to_owned()),
        };
        Ok(KeySql {
            entity_id: e.entity_id,
            table: e.table.to_string(),
            rid: e.record_id.name.to_string(),
            tenant: e.tenant.as_ref().map(|c| c.name.to_string()),
            declared: e.record_id.sql_type.clone(),
            cmp_type,
            eq,
        })
    }

    pub(super) fn entity_id(&self) -> Uuid {
        self.entity_id
    }

    /// `t.<rid> = <text_expr read as the key>` with the key's own equality.
    fn matches(&self, text_expr: &str) -> String {
        format!(
            "t.{rid} {eq} CAST({text_expr} AS {cmp})",
            rid = self.rid,
            eq = self.eq,
            cmp = self.cmp_type
        )
    }

    /// The row's canonical text: what sweeps compare holds with.
    fn row_text(&self) -> String {
        format!("(t.{})::pg_catalog.text", self.rid)
    }

    /// The row's tenant (uuid), NULL for tenantless types.
    fn row_tenant(&self) -> String {
        match &self.tenant {
            Some(c) => format!("(t.{c})::pg_catalog.uuid"),
            None => "NULL::pg_catalog.uuid".to_owned(),
        }
    }

    /// Reads `text_expr` through the declared type (domain constraints) and
    /// the comparison type; returns `canon`, the value's canonical text, and
    /// when `peek`, `row_text`, the text of the row it names (NULL if none),
    /// read without locking.
    fn canon_columns(&self, text_expr: &str, peek: bool) -> String {
        let mut s = format!(
            "CAST(CAST({text_expr} AS {declared}) AS pg_catalog.text) AS declared_text, \
             CAST(CAST({text_expr} AS {cmp}) AS pg_catalog.text) AS canon",
            declared = self.declared,
            cmp = self.cmp_type,
        );
        if peek {
            s.push_str(&format!(
                ", (SELECT {row} FROM {table} AS t WHERE {m}) AS row_text",
                row = self.row_text(),
                table = self.table,
                m = self.matches(text_expr),
            ));
        }
        s
    }

    /// One record id (`$1` text). Returns `canon` (and `row_text` when `peek`).
    pub(super) fn canonicalise_one(&self, peek: bool) -> String {
        format!("SELECT {}", self.canon_columns("$1::pg_catalog.text", peek))
    }

    /// Many record ids (`$1` text[]). Returns `i` (1-based position),
    /// `canon` and `row_text`, in input order.
    pub(super) fn canonicalise_many(&self) -> String {
        format!(
            "SELECT u.i, {} FROM pg_catalog.unnest($1::pg_catalog.text[]) WITH ORDINALITY AS u(r, i) \
             ORDER BY u.i",
            self.canon_columns("u.r", true)
        )
    }

    /// The row `$1` names, read `FOR SHARE`: `rid` (canonical text), `tenant`.
    pub(super) fn read_for_share(&self) -> String {
        format!(
            "SELECT {row} AS rid, {tenant} AS tenant FROM {table} AS t WHERE {m} FOR SHARE OF t",
            row = self.row_text(),
            tenant = self.row_tenant(),
            table = self.table,
            m = self.matches("$1::pg_catalog.text"),
        )
    }

    /// The rows `$1` (text[]) names, locked `FOR UPDATE`: `i` (position in
    /// `$1`), `rid`, `tenant`.
    pub(super) fn lock_for_update(&self) -> String {
        format!(
            "SELECT u.i, {row} AS rid, {tenant} AS tenant \
             FROM pg_catalog.unnest($1::pg_catalog.text[]) WITH ORDINALITY AS u(r, i) \
             JOIN {table} AS t ON {m} ORDER BY u.i FOR UPDATE OF t",
            row = self.row_text(),
            tenant = self.row_tenant(),
            table = self.table,
            m = self.matches("u.r"),
        )
    }

    /// The hold-lookup condition on holds alias `h`: the stored record id and
    /// `$param` (text) are the same key by the key type's own equality.
    pub(super) fn same_key(&self, param: &str) -> String {
        format!(
            "CAST(h.record_id AS {cmp}) {eq} CAST({param}::pg_catalog.text AS {cmp})",
            cmp = self.cmp_type,
            eq = self.eq,
        )
    }
}

/// Takes the advisory lock of one row: `$1` entity (uuid), `$2` tenant (uuid,
/// NULL for tenantless), `$3` canonical record id (text). Waits.
pub(super) fn lock_one() -> String {
    format!(
        "SELECT pg_catalog.pg_advisory_xact_lock({})",
        row_lock_key(
            "$1::pg_catalog.uuid",
            "$2::pg_catalog.uuid",
            "$3::pg_catalog.text"
        )
    )
}

/// Takes the advisory locks of many rows, deduplicated, in key order:
/// `$1` entities (uuid[]), `$2` tenants (uuid[]), `$3` record ids (text[]).
/// The `ORDER BY` is on the outer query: PostgreSQL evaluates volatile
/// output expressions after the sort, so the locks are taken in key order.
pub(super) fn lock_many() -> String {
    format!(
        "SELECT pg_catalog.pg_advisory_xact_lock(o.k) FROM ( \
           SELECT DISTINCT {key} AS k \
           FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.uuid[]), pg_catalog.unnest($2::pg_catalog.uuid[]), \
                          pg_catalog.unnest($3::pg_catalog.text[])) AS u(e, tn, r)) o \
         ORDER BY o.k",
        key = row_lock_key("u.e", "u.tn", "u.r")
    )
}

/// A conversion failure of the record id, as a typed error; anything else as is.
pub(super) fn malformed_or(e: sqlx::Error, entity_id: Uuid) -> Error {
    match super::sqlstate(&e) {
        Some(code) if code.starts_with("22") || code == "23514" || code == "23502" => {
            Error::Hold(HoldError::MalformedRecordId {
                entity_id,
                sqlstate: code,
            })
        }
        _ => Error::Database(e),
    }
}
