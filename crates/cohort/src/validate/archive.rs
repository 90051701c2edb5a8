//! Archive tables (contract SL2): a type whose category may archive
//! ([`crate::Capabilities::archive_into`]) needs the table of the same name
//! in the archive schema, with every column of its own table (same name and
//! type), Cohort's three columns, and a unique key on the record id, so a
//! row can never be archived twice. Checked at start-up, each mismatch a
//! problem whose fix is the DDL ([`archive_sql`]).

use std::collections::HashSet;
use std::fmt::Write as _;

use sqlx::PgConnection;

use super::registry::Target;
use super::report::{Issue, Problems};
use crate::catalog::{self, CatalogTable, RelationLookup};
use crate::config::Options;
use crate::error::Error;
use crate::model::EntityDescriptor;
use crate::model::resolved::{
    ARCHIVE_AT, ARCHIVE_BATCH, ARCHIVE_RUN, ArchiveTarget, Column, ResolvedEntity,
};
use crate::policy::RuleProvider;
use crate::sql::{Ident, QualifiedName};

/// One archiving type to check.
pub(super) struct Archiving<'a> {
    /// Its position among the resolved entities.
    pub(super) index: usize,
    pub(super) entity: &'a ResolvedEntity,
    /// Its own table in the catalog.
    pub(super) source: &'a CatalogTable,
    pub(super) target: &'a Target,
}

/// An archive table found right: the entity's position, the table, and the
/// source's columns to copy.
pub(super) struct Found {
    pub(super) index: usize,
    table: QualifiedName,
    columns: Vec<Ident>,
}

/// The archive table of `source` in `schema`: the same name.
pub(crate) fn archive_table(source: &QualifiedName, schema: &Ident) -> QualifiedName {
    QualifiedName::new(schema.clone(), source.name.clone())
}

/// The DDL of one type's archive table, for the host's migrations: every
/// column of the source (`LIKE`, without defaults, identities or generation
/// expressions, so values are copied as they are), Cohort's three columns,
/// the unique key on the record id, and an index for the purge stage.
pub(crate) fn archive_sql(
    source: &QualifiedName,
    archive: &QualifiedName,
    record_id: &Ident,
    tenant: Option<&Ident>,
) -> String {
    let key = Ident::new(&format!("{}_cohort_archive_key", archive.name.as_str()))
        .unwrap_or_else(|_| Ident::known("cohort_archive_key"));
    let aged = Ident::new(&format!("{}_cohort_archived_idx", archive.name.as_str()))
        .unwrap_or_else(|_| Ident::known("cohort_archived_idx"));
    let mut out = String::new();
    let _ = writeln!(out, "CREATE SCHEMA IF NOT EXISTS {};", archive.schema);
    let _ = writeln!(
        out,
        "CREATE TABLE IF NOT EXISTS {archive} (LIKE {source});\n\
         ALTER TABLE {archive}\n    \
         ADD COLUMN IF NOT EXISTS {run} uuid NOT NULL,\n    \
         ADD COLUMN IF NOT EXISTS {batch} bigint NOT NULL,\n    \
         ADD COLUMN IF NOT EXISTS {at} timestamptz NOT NULL;\n\
         CREATE UNIQUE INDEX IF NOT EXISTS {key} ON {archive} ({record_id});",
        run = Ident::known(ARCHIVE_RUN),
        batch = Ident::known(ARCHIVE_BATCH),
        at = Ident::known(ARCHIVE_AT),
    );
    let tenant = tenant.map(|t| format!("{t}, ")).unwrap_or_default();
    let _ = writeln!(
        out,
        "CREATE INDEX IF NOT EXISTS {aged} ON {archive} ({tenant}{at}, {record_id});",
        at = Ident::known(ARCHIVE_AT),
    );
    out
}

/// Checks every archiving type's archive table; each mismatch is a problem
/// of its type. Returns the tables found right, for [`attach`] once the
/// entities are final.
pub(super) async fn check(
    conn: &mut PgConnection,
    archiving: Vec<Archiving<'_>>,
    problems: &mut Problems,
) -> Result<Vec<Found>, sqlx::Error> {
    let mut names = Vec::new();
    let mut wanted = Vec::new();
    let mut out = Vec::new();
    for (i, a) in archiving.iter().enumerate() {
        let schema = a
            .entity
            .capabilities
            .archive_schema()
            .unwrap_or_default()
            .to_owned();
        match Ident::new(&schema) {
            Ok(schema) => {
                let table = archive_table(&a.entity.table, &schema);
                names.push((schema.as_str().to_owned(), table.name.as_str().to_owned()));
                wanted.push((i, table));
            }
            Err(e) => a.target.problem(
                problems,
                None,
                Issue::new(
                    format!("the archive schema name {e}"),
                    "fix the schema given to Capabilities::archive_into",
                ),
            ),
        }
    }
    if names.is_empty() {
        return Ok(out);
    }
    let found = catalog::lookup_tables(conn, &names).await?;
    let oids: Vec<u32> = found
        .iter()
        .filter_map(|f| match f {
            RelationLookup::Table(t) => Some(t.oid),
            _ => None,
        })
        .collect();
    let indexes = catalog::indexes(conn, &oids).await?;
    for ((i, table), lookup) in wanted.into_iter().zip(found) {
        let a = &archiving[i];
        let ddl = archive_sql(
            &a.entity.table,
            &table,
            &a.entity.record_id.name,
            a.entity.tenant.as_ref().map(|t| &t.name),
        );
        let archive = match lookup {
            RelationLookup::Table(t) => t,
            RelationLookup::NotATable { kind } => {
                a.target.problem(
                    problems,
                    None,
                    Issue::new(
                        format!(
                            "the archive table {} is {kind}, not a table",
                            table.unquoted()
                        ),
                        "drop it, or archive into another schema",
                    ),
                );
                continue;
            }
            RelationLookup::Missing { .. } => {
                a.target.problem(
                    problems,
                    None,
                    Issue::new(
                        format!(
                            "the category may archive, and the archive table {} does not exist",
                            table.unquoted()
                        ),
                        format!("create it in a migration (CohortBuilder::archive_sql):\n{ddl}"),
                    ),
                );
                continue;
            }
        };
        let mut fits = true;
        let mut columns = Vec::new();
        for c in &a.source.columns {
            match archive.column(&c.name) {
                Some(ac) if ac.sql_type == c.sql_type && !ac.generated => {}
                Some(ac) => {
                    fits = false;
                    a.target.problem(
                        problems,
                        Some(&c.name),
                        Issue::new(
                            format!(
                                "the archive table {} has column {} as {}{}, the table has {}",
                                table.unquoted(),
                                c.name,
                                ac.sql_type,
                                if ac.generated { " (generated)" } else { "" },
                                c.sql_type
                            ),
                            format!(
                                "ALTER TABLE {table} ALTER COLUMN {} TYPE {} (a plain column)",
                                Ident::new(&c.name)
                                    .map(|i| i.to_string())
                                    .unwrap_or_default(),
                                c.sql_type
                            ),
                        ),
                    );
                }
                None => {
                    fits = false;
                    a.target.problem(
                        problems,
                        Some(&c.name),
                        Issue::new(
                            format!(
                                "the archive table {} has no column {} ({})",
                                table.unquoted(),
                                c.name,
                                c.sql_type
                            ),
                            format!(
                                "ALTER TABLE {table} ADD COLUMN {} {}",
                                Ident::new(&c.name)
                                    .map(|i| i.to_string())
                                    .unwrap_or_default(),
                                c.sql_type
                            ),
                        ),
                    );
                }
            }
            match Ident::new(&c.name) {
                Ok(name) => columns.push(name),
                Err(_) => fits = false,
            }
        }
        for (name, ty) in [
            (ARCHIVE_RUN, "uuid"),
            (ARCHIVE_BATCH, "bigint"),
            (ARCHIVE_AT, "timestamp with time zone"),
        ] {
            if a.source.column(name).is_some() {
                fits = false;
                a.target.problem(
                    problems,
                    Some(name),
                    Issue::new(
                        format!("the table has a column named {name}, which its archive table needs for Cohort"),
                        "rename the column, or do not archive this type",
                    ),
                );
                continue;
            }
            if !archive
                .column(name)
                .is_some_and(|c| c.sql_type == ty && c.not_null)
            {
                fits = false;
                a.target.problem(
                    problems,
                    None,
                    Issue::new(
                        format!(
                            "the archive table {} needs the column {name} {ty} NOT NULL",
                            table.unquoted()
                        ),
                        format!("the archive table's DDL (CohortBuilder::archive_sql):\n{ddl}"),
                    ),
                );
            }
        }
        // A unique key on exactly the record id: no row is archived twice.
        let rid = archive
            .column(a.entity.record_id.name.as_str())
            .map(|c| c.attnum);
        let unique = indexes.iter().any(|ix| {
            ix.table_oid == archive.oid
                && ix.unique
                && ix.valid
                && !ix.partial
                && rid.is_some_and(|r| ix.key_attnums == [r])
        });
        if !unique {
            fits = false;
            a.target.problem(
                problems,
                Some(a.entity.record_id.name.as_str()),
                Issue::new(
                    format!(
                        "the archive table {} has no unique key on the record id {}: a row could be archived twice",
                        table.unquoted(),
                        a.entity.record_id.name.as_str()
                    ),
                    format!(
                        "ALTER TABLE {table} ADD UNIQUE ({})",
                        a.entity.record_id.name
                    ),
                ),
            );
        }
        if fits {
            out.push(Found {
                index: a.index,
                table,
                columns,
            });
        }
    }
    Ok(out)
}

/// Gives `e` (final: comparisons resolved, fence assigned) its archive
/// target in `found.table`.
pub(super) fn attach(e: &mut ResolvedEntity, found: Found) {
    let archived_at = Column {
        name: Ident::known(ARCHIVE_AT),
        sql_type: "timestamp with time zone".to_owned(),
        nullable: false,
        cmp_type: "timestamp with time zone".to_owned(),
        eq: "OPERATOR(pg_catalog.=)".to_owned(),
        operator: None,
    };
    let entity = ResolvedEntity {
        category: archive_category(e.category),
        table: found.table,
        soft_delete: None,
        deleted_at: None,
        anonymised_at: None,
        anonymise: Vec::new(),
        range_on_anchor: false,
        archive: None,
        split: None,
        slice: None,
        ..e.clone()
    };
    e.archive = Some(Box::new(ArchiveTarget {
        entity,
        columns: found.columns,
        archived_at,
    }));
}

/// `<category>:archive`, the archive table's category in the ledger: one
/// string per category for the life of the process (interned, so building
/// handles again and again does not grow memory).
pub(super) fn archive_category(category: &str) -> &'static str {
    static NAMES: std::sync::OnceLock<std::sync::Mutex<HashSet<&'static str>>> =
        std::sync::OnceLock::new();
    let name = format!("{category}:archive");
    let mut names = NAMES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(known) = names.get(name.as_str()) {
        return known;
    }
    let leaked: &'static str = Box::leak(name.into_boxed_str());
    names.insert(leaked);
    leaked
}

/// The DDL of every archive table of the model (contract SL2): one
/// [`archive_sql`] per registered type whose category's capabilities
/// declare an archive schema, in registration order; empty when none does.
/// Reads nothing from the database. Problems of the model (an unknown
/// table name, a missing record id) are reported as build would.
pub(crate) fn archive_ddl(
    descriptors: &[&'static EntityDescriptor],
    options: &Options,
    provider: &dyn RuleProvider,
) -> Result<String, Error> {
    let option_problems = options.validate();
    let mut problems = Problems::default();
    let anonymisers = super::columns::Anonymisers::new();
    let reg = super::Registration {
        descriptors,
        options,
        provider,
        anonymisers: &anonymisers,
        row_handlers: false,
        captured: None,
    };
    let registered = super::registry::register(&reg, &mut problems);
    let mut out = String::new();
    for target in &registered.targets {
        let resolved = super::roles::resolve(target, &options.conventions, &mut problems);
        let Some(schema) = provider
            .capabilities(target.category)
            .and_then(|c| c.archive_schema().map(str::to_owned))
        else {
            continue;
        };
        let column =
            |f: Option<&crate::model::FieldDescriptor>| f.and_then(|f| Ident::new(f.column).ok());
        let schema = match Ident::new(&schema) {
            Ok(s) => s,
            Err(e) => {
                target.problem(
                    &mut problems,
                    None,
                    Issue::new(
                        format!("the archive schema name {e}"),
                        "fix the schema given to Capabilities::archive_into",
                    ),
                );
                continue;
            }
        };
        let (Some(table), Some(key)) = (target.table.clone(), column(resolved.record_id)) else {
            continue;
        };
        let tenant = if target.descriptor.tenantless {
            None
        } else {
            column(resolved.tenant)
        };
        let archive = archive_table(&table, &schema);
        let _ = writeln!(
            out,
            "-- {} ({}): its archive table\n{}",
            target.descriptor.type_name,
            table.unquoted(),
            archive_sql(&table, &archive, &key, tenant.as_ref())
        );
    }
    if !option_problems.is_empty() || !problems.is_empty() {
        let mut report = problems.into_report();
        report.problems.splice(0..0, option_problems);
        return Err(Error::Validation(report));
    }
    Ok(out)
}
