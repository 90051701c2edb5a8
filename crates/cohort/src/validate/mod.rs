//! Start-up validation: every registered type checked against the live
//! catalog, every problem collected, then one error that lists them all.

use std::fmt;

use sqlx::PgConnection;

use crate::catalog;
use crate::config::Options;
use crate::error::Error;
use crate::model::resolved::{AnonymisedColumn, Column, ResolvedEntity};
use crate::model::{EntityDescriptor, Membership};
use crate::policy::RuleProvider;
use crate::schema::SchemaName;
use crate::sql::{Ident, QualifiedName};

/// One thing wrong with the registered model, with where and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationProblem {
    /// The Rust type concerned, when there is one.
    pub type_name: Option<String>,
    /// The table concerned (schema-qualified), when there is one.
    pub table: Option<String>,
    /// The column concerned, when there is one.
    pub column: Option<String>,
    /// What is wrong.
    pub problem: String,
    /// How to fix it.
    pub fix: String,
}

impl fmt::Display for ValidationProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(t) = &self.type_name {
            write!(f, "{t}")?;
        }
        match (&self.table, &self.column) {
            (Some(t), Some(c)) => write!(f, " ({t}.{c})")?,
            (Some(t), None) => write!(f, " ({t})")?,
            _ => {}
        }
        write!(f, ": {}; fix: {}", self.problem, self.fix)
    }
}

/// Every problem found at start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationReport {
    /// The problems, in registration order.
    pub problems: Vec<ValidationProblem>,
}

impl fmt::Display for ValidationReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} problem(s):", self.problems.len())?;
        for p in &self.problems {
            writeln!(f, "  - {p}")?;
        }
        Ok(())
    }
}

/// What validation produces: the retained types in processing order
/// (referencing types before the types they reference) and the exempt ones.
#[derive(Debug, Clone)]
pub(crate) struct Model {
    pub(crate) entities: Vec<ResolvedEntity>,
    pub(crate) exempt: Vec<&'static EntityDescriptor>,
}

/// What the host registered.
pub(crate) struct Registration<'a> {
    pub(crate) descriptors: &'a [&'static EntityDescriptor],
    pub(crate) options: &'a Options,
    pub(crate) provider: &'a dyn RuleProvider,
}

fn problem(
    d: &EntityDescriptor,
    column: Option<&str>,
    what: String,
    fix: &str,
) -> ValidationProblem {
    ValidationProblem {
        type_name: Some(d.type_name.to_owned()),
        table: Some(d.table.to_owned()),
        column: column.map(str::to_owned),
        problem: what,
        fix: fix.to_owned(),
    }
}

/// Validates the registration against the live catalog. The caller has pinned
/// `search_path` on `conn`.
pub(crate) async fn validate(
    conn: &mut PgConnection,
    reg: &Registration<'_>,
) -> Result<Model, Error> {
    let mut problems = Vec::new();
    let mut entities = Vec::new();
    let mut exempt = Vec::new();
    let conventions = &reg.options.conventions;
    for &d in reg.descriptors {
        let (category, anchor) = match d.membership {
            Membership::Exempt { .. } => {
                exempt.push(d);
                continue;
            }
            Membership::Retained { category, anchor } => (category, anchor),
        };
        let schema = d.schema.unwrap_or(&reg.options.default_table_schema);
        let table_name = match (Ident::new(schema), Ident::new(d.table)) {
            (Ok(s), Ok(t)) => QualifiedName::new(s, t),
            _ => {
                problems.push(problem(
                    d,
                    None,
                    "invalid schema or table name".into(),
                    "use a valid identifier",
                ));
                continue;
            }
        };
        let Some(table) = catalog::table(conn, schema, d.table).await? else {
            problems.push(problem(
                d,
                None,
                format!("table {table_name} does not exist"),
                "create the table or fix #[cohort(table, schema)]",
            ));
            continue;
        };
        let mut column_for = |field: &str, role: &str, required: bool| -> Option<Column> {
            let f = d.field(field)?;
            match table.column(f.column) {
                Some(c) => Some(Column {
                    name: Ident::new(&c.name).ok()?,
                    sql_type: c.sql_type.clone(),
                    nullable: !c.not_null,
                }),
                None => {
                    if required {
                        problems.push(problem(
                            d,
                            Some(f.column),
                            format!("the {role} column does not exist"),
                            "add the column or fix #[cohort(column)]",
                        ));
                    }
                    None
                }
            }
        };
        let role = |marker: Option<&'static str>, convention: &str| -> Option<String> {
            marker
                .map(str::to_owned)
                .or_else(|| d.field(convention).map(|f| f.field.to_owned()))
        };
        let record_id = role(d.markers.record_id, &conventions.record_id)
            .and_then(|f| column_for(&f, "record id", true));
        let anchor_col = column_for(anchor, "anchor", true);
        let tenant = if d.tenantless {
            None
        } else {
            role(d.markers.tenant, &conventions.tenant).and_then(|f| column_for(&f, "tenant", true))
        };
        let soft_delete = role(d.markers.soft_delete, &conventions.soft_delete)
            .and_then(|f| column_for(&f, "soft-delete", true));
        let deleted_at = role(d.markers.deleted_at, &conventions.deleted_at)
            .and_then(|f| column_for(&f, "deleted-at", true));
        let anonymised_at = role(d.markers.anonymised_at, &conventions.anonymised_at)
            .and_then(|f| column_for(&f, "anonymised-at", true));
        let anonymise: Vec<AnonymisedColumn> = d
            .anonymise
            .iter()
            .filter_map(|a| {
                column_for(a.field, "anonymised", true).map(|column| AnonymisedColumn {
                    column,
                    method: a.method,
                })
            })
            .collect();
        let subjects: Vec<Column> = d
            .erasure_subjects
            .iter()
            .filter_map(|f| column_for(f, "erasure subject", true))
            .collect();
        let capabilities = reg.provider.capabilities(category);
        if capabilities.is_none() {
            problems.push(problem(
                d,
                None,
                format!("the rule provider declares no capabilities for category {category:?}"),
                "return Some(Capabilities) for the category from RuleProvider::capabilities",
            ));
        }
        if let (Some(record_id), Some(anchor), Some(capabilities)) =
            (record_id, anchor_col, capabilities)
        {
            let Some(entity_id) = d.entity_id else {
                continue;
            };
            entities.push(ResolvedEntity {
                descriptor: d,
                entity_id,
                category,
                capabilities,
                table: table_name,
                record_id,
                anchor,
                tenant,
                soft_delete,
                deleted_at,
                anonymised_at,
                anonymise,
                subjects,
            });
        }
    }
    let _ = SchemaName::public();
    if problems.is_empty() {
        Ok(Model { entities, exempt })
    } else {
        Err(Error::Validation(ValidationReport { problems }))
    }
}
