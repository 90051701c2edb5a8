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
//! The comparison type and operator are read from the catalog once, at
//! start-up (`catalog::equality`). Every piece of SQL text here is a quoted
//! identifier, a type name printed by `pg_catalog.format_type`, an operator
//! name checked to consist of operator characters, or an integer constant.
//! Values are bound.

use uuid::Uuid;

use crate::error::Error;
use crate::error::hold::HoldError;
use crate::model::resolved::ResolvedEntity;
use crate::sql::txn::FENCE_CLASS;

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

impl KeySql {
    /// The key of `e`, as validation read it from the catalog.
    pub(super) fn of(e: &ResolvedEntity) -> KeySql {
        KeySql {
            entity_id: e.entity_id,
            table: e.table.to_string(),
            rid: e.record_id.name.to_string(),
            tenant: e.tenant.as_ref().map(|c| c.name.to_string()),
            declared: e.record_id.sql_type.clone(),
            cmp_type: e.record_id.cmp_type.clone(),
            eq: e.record_id.eq.clone(),
        }
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

    /// Reads `text_expr` through the declared type (domain constraints) and
    /// the comparison type: `canon`, the value's canonical text. A value the
    /// key type refuses fails here (SQLSTATE class 22 or 23).
    fn canon_columns(&self, text_expr: &str) -> String {
        format!(
            "CAST(CAST({text_expr} AS {declared}) AS pg_catalog.text) AS declared_text, \
             CAST(CAST({text_expr} AS {cmp}) AS pg_catalog.text) AS canon",
            declared = self.declared,
            cmp = self.cmp_type,
        )
    }

    /// One record id (`$1` text). Returns `canon`.
    pub(super) fn canonicalise_one(&self) -> String {
        format!("SELECT {}", self.canon_columns("$1::pg_catalog.text"))
    }

    /// Many record ids (`$1` text[]). Returns `i` (1-based position) and
    /// `canon`, in input order.
    pub(super) fn canonicalise_many(&self) -> String {
        format!(
            "SELECT u.i, {} FROM pg_catalog.unnest($1::pg_catalog.text[]) WITH ORDINALITY AS u(r, i) \
             ORDER BY u.i",
            self.canon_columns("u.r")
        )
    }

    /// ` AND <the row's tenant> = <tenant_expr>`, or nothing for tenantless types.
    fn in_tenant(&self, tenant_expr: &str) -> String {
        match &self.tenant {
            Some(c) => format!(" AND t.{c} = {tenant_expr}"),
            None => format!(" AND {tenant_expr} IS NULL"),
        }
    }

    /// The row `$1` names in tenant `$2` (uuid; unused for tenantless types),
    /// read `FOR SHARE`: `rid` (canonical text). A row of another tenant is
    /// not found, exactly like a row that does not exist.
    pub(super) fn read_for_share(&self) -> String {
        format!(
            "SELECT {row} AS rid FROM {table} AS t WHERE {m}{tenant} FOR SHARE OF t",
            row = self.row_text(),
            table = self.table,
            m = self.matches("$1::pg_catalog.text"),
            tenant = self.in_tenant("$2::pg_catalog.uuid"),
        )
    }

    /// The rows `$1` (text[]) names, each in its tenant `$2` (uuid[]), locked
    /// `FOR UPDATE`: `i` (position in `$1`) and `rid`. Rows of other tenants
    /// are not found.
    pub(super) fn lock_for_update(&self) -> String {
        format!(
            "SELECT u.i, {row} AS rid \
             FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.text[]), pg_catalog.unnest($2::pg_catalog.uuid[])) \
                  WITH ORDINALITY AS u(r, tn, i) \
             JOIN {table} AS t ON {m}{tenant} ORDER BY u.i FOR UPDATE OF t",
            row = self.row_text(),
            table = self.table,
            m = self.matches("u.r"),
            tenant = self.in_tenant("u.tn"),
        )
    }

    /// The canonical text of the record id `param` (text), as holds store
    /// it (contract H16): the row's own text when a row has that key (in
    /// any tenant: keys are unique in the table), else the key type's
    /// canonical text. Holds are then compared by plain text equality, as
    /// every mutation compares them (`h.record_id = (t.key)::text`), so a
    /// stored hold is never cast and one that the key type cannot read
    /// cannot fail the lookup.
    pub(super) fn canonical_text(&self, param: &str) -> String {
        format!(
            "COALESCE((SELECT {row} FROM {table} AS t WHERE {m} LIMIT 1), \
                      CAST(CAST({param}::pg_catalog.text AS {cmp}) AS pg_catalog.text))",
            row = self.row_text(),
            table = self.table,
            m = self.matches(&format!("{param}::pg_catalog.text")),
            cmp = self.cmp_type,
        )
    }
}

/// Takes the entity fence of `$1` (int4, the fence key) exclusively until the
/// transaction ends: hold creation does, before it looks for the row.
pub(super) fn fence_exclusive() -> String {
    format!("SELECT pg_catalog.pg_advisory_xact_lock({FENCE_CLASS}, $1::pg_catalog.int4)")
}

/// Takes the entity fences `$1` (int4[]) shared, in key order: host
/// deletions do, before they lock their targets.
pub(super) fn fences_shared() -> String {
    format!(
        "SELECT pg_catalog.pg_advisory_xact_lock_shared({FENCE_CLASS}, f.k) \
         FROM (SELECT DISTINCT k FROM pg_catalog.unnest($1::pg_catalog.int4[]) AS k) f ORDER BY f.k"
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
