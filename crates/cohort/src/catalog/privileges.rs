//! What the session's role may do: its attributes, its privileges on schemas,
//! tables and columns, and whether row-level security hides rows from it.
//!
//! Every answer is for `current_user` (the role a `SET ROLE` switched to, not
//! the login role), read with PostgreSQL's own `has_*_privilege` functions,
//! so membership in roles that hold the privilege (with `INHERIT`), grants to
//! `PUBLIC` and table-level grants covering a column all count.

use sqlx::postgres::types::Oid;
use sqlx::{PgConnection, Row};

/// The role the session acts as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RuntimeRole {
    /// `current_user`.
    pub(crate) name: String,
    /// `rolsuper`: every privilege check passes and row-level security never
    /// applies.
    pub(crate) superuser: bool,
    /// `rolbypassrls`.
    pub(crate) bypass_rls: bool,
}

/// Reads `current_user` and its attributes.
pub(crate) async fn runtime_role(conn: &mut PgConnection) -> Result<RuntimeRole, sqlx::Error> {
    let row = crate::sql::query(
        "SELECT r.rolname::pg_catalog.text AS name, r.rolsuper, r.rolbypassrls \
         FROM pg_catalog.pg_roles r \
         WHERE r.rolname OPERATOR(pg_catalog.=) pg_catalog.\"current_user\"()",
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(RuntimeRole {
        name: row.try_get("name")?,
        superuser: row.try_get("rolsuper")?,
        bypass_rls: row.try_get("rolbypassrls")?,
    })
}

/// A privilege as `has_*_privilege` spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Privilege {
    Usage,
    Select,
    Insert,
    Update,
    Delete,
}

impl Privilege {
    /// The keyword, as `GRANT` and `has_*_privilege` write it.
    pub(crate) fn keyword(self) -> &'static str {
        match self {
            Privilege::Usage => "USAGE",
            Privilege::Select => "SELECT",
            Privilege::Insert => "INSERT",
            Privilege::Update => "UPDATE",
            Privilege::Delete => "DELETE",
        }
    }
}

/// One question about the current role's privileges. Names are raw
/// (unquoted) and looked up exactly, never through `search_path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ask<'a> {
    /// `USAGE` on a schema.
    Schema { schema: &'a str },
    /// A privilege on a table as a whole (`DELETE`, or any privilege granted
    /// table-wide).
    Table {
        schema: &'a str,
        table: &'a str,
        privilege: Privilege,
    },
    /// A privilege on one column (a table-level grant covers it). System
    /// columns (`tableoid`, `ctid`) can be asked about too.
    Column {
        schema: &'a str,
        table: &'a str,
        column: &'a str,
        privilege: Privilege,
    },
    /// A privilege on at least one column of the table.
    AnyColumn {
        schema: &'a str,
        table: &'a str,
        privilege: Privilege,
    },
}

/// Answers every question in one query, in order: `Some(granted)`, or `None`
/// when the schema, table or column does not exist (other checks report
/// that).
pub(crate) async fn privileges(
    conn: &mut PgConnection,
    asks: &[Ask<'_>],
) -> Result<Vec<Option<bool>>, sqlx::Error> {
    if asks.is_empty() {
        return Ok(Vec::new());
    }
    let mut kinds: Vec<&str> = Vec::with_capacity(asks.len());
    let mut schemas: Vec<&str> = Vec::with_capacity(asks.len());
    let mut tables: Vec<Option<&str>> = Vec::with_capacity(asks.len());
    let mut columns: Vec<Option<&str>> = Vec::with_capacity(asks.len());
    let mut privs: Vec<&str> = Vec::with_capacity(asks.len());
    for ask in asks {
        let (kind, schema, table, column, privilege) = match *ask {
            Ask::Schema { schema } => ("schema", schema, None, None, Privilege::Usage),
            Ask::Table {
                schema,
                table,
                privilege,
            } => ("table", schema, Some(table), None, privilege),
            Ask::Column {
                schema,
                table,
                column,
                privilege,
            } => ("column", schema, Some(table), Some(column), privilege),
            Ask::AnyColumn {
                schema,
                table,
                privilege,
            } => ("any_column", schema, Some(table), None, privilege),
        };
        kinds.push(kind);
        schemas.push(schema);
        tables.push(table);
        columns.push(column);
        privs.push(privilege.keyword());
    }
    let rows = crate::sql::query(
        "SELECT q.ord, \
                CASE q.kind \
                  WHEN 'schema' THEN pg_catalog.has_schema_privilege(n.oid, q.priv) \
                  WHEN 'table' THEN pg_catalog.has_table_privilege(c.oid, q.priv) \
                  WHEN 'column' THEN pg_catalog.has_column_privilege(c.oid, a.attnum, q.priv) \
                  WHEN 'any_column' THEN pg_catalog.has_any_column_privilege(c.oid, q.priv) \
                END AS granted \
         FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.text[]), \
                         pg_catalog.unnest($2::pg_catalog.text[]), \
                         pg_catalog.unnest($3::pg_catalog.text[]), \
                         pg_catalog.unnest($4::pg_catalog.text[]), \
                         pg_catalog.unnest($5::pg_catalog.text[])) \
              WITH ORDINALITY AS q(kind, nsp, rel, col, priv, ord) \
         LEFT JOIN pg_catalog.pg_namespace n \
                ON n.nspname OPERATOR(pg_catalog.=) q.nsp::pg_catalog.name \
         LEFT JOIN pg_catalog.pg_class c \
                ON c.relnamespace OPERATOR(pg_catalog.=) n.oid \
               AND c.relname OPERATOR(pg_catalog.=) q.rel::pg_catalog.name \
               AND c.relkind OPERATOR(pg_catalog.=) ANY ('{r,p}'::pg_catalog.\"char\"[]) \
         LEFT JOIN pg_catalog.pg_attribute a \
                ON a.attrelid OPERATOR(pg_catalog.=) c.oid \
               AND a.attname OPERATOR(pg_catalog.=) q.col::pg_catalog.name \
               AND NOT a.attisdropped \
         ORDER BY q.ord",
    )
    .bind(&kinds)
    .bind(&schemas)
    .bind(&tables)
    .bind(&columns)
    .bind(&privs)
    .fetch_all(&mut *conn)
    .await?;
    rows.into_iter()
        .map(|r| r.try_get::<Option<bool>, _>("granted"))
        .collect()
}

/// Row-level security on one table, as it applies to the current role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RowSecurity {
    /// `relrowsecurity`: RLS is enabled on the table.
    pub(crate) enabled: bool,
    /// `relforcerowsecurity`: it applies to the table's owner too.
    pub(crate) forced: bool,
    /// `row_security_active`: it applies to the current role (which is
    /// neither a superuser, nor `BYPASSRLS`, nor the owner of an unforced
    /// table).
    pub(crate) active: bool,
    /// A permissive policy for `SELECT` (or `ALL`) applies to the current role
    /// (through `PUBLIC` or a role it has the privileges of).
    pub(crate) select: bool,
    /// The same for `UPDATE`.
    pub(crate) update: bool,
    /// The same for `DELETE`.
    pub(crate) delete: bool,
    /// The same for `INSERT`.
    pub(crate) insert: bool,
}

/// Row-level security of each table, in the order asked; `None` for an OID
/// that is not a relation.
pub(crate) async fn row_security(
    conn: &mut PgConnection,
    table_oids: &[u32],
) -> Result<Vec<Option<RowSecurity>>, sqlx::Error> {
    if table_oids.is_empty() {
        return Ok(Vec::new());
    }
    let oids: Vec<Oid> = table_oids.iter().copied().map(Oid).collect();
    let rows = crate::sql::query(
        "WITH applicable AS ( \
           SELECT p.polrelid, p.polcmd \
           FROM pg_catalog.pg_policy p \
           WHERE p.polrelid OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.oid[]) \
             AND p.polpermissive \
             AND EXISTS (SELECT 1 FROM pg_catalog.unnest(p.polroles) AS r(oid) \
                         WHERE r.oid OPERATOR(pg_catalog.=) 0::pg_catalog.oid \
                            OR pg_catalog.pg_has_role(r.oid, 'USAGE'))) \
         SELECT q.ord, c.oid IS NOT NULL AS found, \
                COALESCE(c.relrowsecurity, false) AS enabled, \
                COALESCE(c.relforcerowsecurity, false) AS forced, \
                COALESCE(pg_catalog.row_security_active(c.oid), false) AS active, \
                EXISTS (SELECT 1 FROM applicable a WHERE a.polrelid OPERATOR(pg_catalog.=) c.oid \
                          AND a.polcmd OPERATOR(pg_catalog.=) ANY ('{r,*}'::pg_catalog.\"char\"[])) AS sel, \
                EXISTS (SELECT 1 FROM applicable a WHERE a.polrelid OPERATOR(pg_catalog.=) c.oid \
                          AND a.polcmd OPERATOR(pg_catalog.=) ANY ('{w,*}'::pg_catalog.\"char\"[])) AS upd, \
                EXISTS (SELECT 1 FROM applicable a WHERE a.polrelid OPERATOR(pg_catalog.=) c.oid \
                          AND a.polcmd OPERATOR(pg_catalog.=) ANY ('{d,*}'::pg_catalog.\"char\"[])) AS del, \
                EXISTS (SELECT 1 FROM applicable a WHERE a.polrelid OPERATOR(pg_catalog.=) c.oid \
                          AND a.polcmd OPERATOR(pg_catalog.=) ANY ('{a,*}'::pg_catalog.\"char\"[])) AS ins \
         FROM pg_catalog.unnest($1::pg_catalog.oid[]) WITH ORDINALITY AS q(oid, ord) \
         LEFT JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) q.oid \
         ORDER BY q.ord",
    )
    .bind(&oids)
    .fetch_all(&mut *conn)
    .await?;
    rows.into_iter()
        .map(|r| {
            if !r.try_get::<bool, _>("found")? {
                return Ok(None);
            }
            Ok(Some(RowSecurity {
                enabled: r.try_get("enabled")?,
                forced: r.try_get("forced")?,
                active: r.try_get("active")?,
                select: r.try_get("sel")?,
                update: r.try_get("upd")?,
                delete: r.try_get("del")?,
                insert: r.try_get("ins")?,
            }))
        })
        .collect()
}

/// A schema the engine names when it reads or compares a column: the schema
/// of the column's type (or of a domain's base type), or of that type's
/// equality operator. Writing `CAST(... AS "ext".citext)` or
/// `OPERATOR("ext".=)` needs `USAGE` on `ext`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TypeSchema {
    /// The position of the column in the list asked about.
    pub(crate) index: usize,
    /// The schema's name.
    pub(crate) schema: String,
    /// Whether the current role has `USAGE` on it.
    pub(crate) usage: bool,
}

/// The schemas other than `pg_catalog` that each `(table oid, column name)`
/// needs through its type, with whether the current role may use them.
pub(crate) async fn type_schemas(
    conn: &mut PgConnection,
    columns: &[(u32, &str)],
) -> Result<Vec<TypeSchema>, sqlx::Error> {
    if columns.is_empty() {
        return Ok(Vec::new());
    }
    let oids: Vec<Oid> = columns.iter().map(|(o, _)| Oid(*o)).collect();
    let names: Vec<&str> = columns.iter().map(|(_, n)| *n).collect();
    let rows = crate::sql::query(
        "WITH RECURSIVE q AS ( \
           SELECT * FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.oid[]), \
                                    pg_catalog.unnest($2::pg_catalog.text[])) \
             WITH ORDINALITY AS q(rel, name, ord) \
         ), chain(ord, oid) AS ( \
           SELECT q.ord, a.atttypid FROM q JOIN pg_catalog.pg_attribute a \
             ON a.attrelid OPERATOR(pg_catalog.=) q.rel \
            AND a.attname OPERATOR(pg_catalog.=) q.name::pg_catalog.name \
            AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped \
           UNION \
           SELECT chain.ord, ty.typbasetype FROM chain \
             JOIN pg_catalog.pg_type ty ON ty.oid OPERATOR(pg_catalog.=) chain.oid \
            WHERE ty.typtype OPERATOR(pg_catalog.=) 'd' \
         ), used(ord, nsp) AS ( \
           SELECT chain.ord, ty.typnamespace FROM chain \
             JOIN pg_catalog.pg_type ty ON ty.oid OPERATOR(pg_catalog.=) chain.oid \
           UNION \
           SELECT chain.ord, o.oprnamespace FROM chain \
             JOIN pg_catalog.pg_operator o ON o.oprleft OPERATOR(pg_catalog.=) chain.oid \
            AND o.oprright OPERATOR(pg_catalog.=) chain.oid \
            AND o.oprname OPERATOR(pg_catalog.=) '='::pg_catalog.name \
         ) \
         SELECT u.ord, n.nspname::pg_catalog.text AS schema, \
                pg_catalog.has_schema_privilege(n.oid, 'USAGE') AS usage \
         FROM used u JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) u.nsp \
         WHERE n.nspname OPERATOR(pg_catalog.<>) 'pg_catalog'::pg_catalog.name \
         ORDER BY u.ord, n.nspname",
    )
    .bind(&oids)
    .bind(&names)
    .fetch_all(&mut *conn)
    .await?;
    rows.into_iter()
        .map(|r| {
            let ord: i64 = r.try_get("ord")?;
            Ok(TypeSchema {
                index: usize::try_from(ord.saturating_sub(1)).unwrap_or(usize::MAX),
                schema: r.try_get("schema")?,
                usage: r.try_get("usage")?,
            })
        })
        .collect()
}
