//! Role fields to catalog columns: each column must exist (V8) and have a
//! type that fits its role (V5, V6, V7). Produces the engine's [`Column`]s.

use super::registry::Target;
use super::report::{Issue, Problems};
use super::roles::Roles;
use super::types::{self, Types};
use crate::catalog::{CatalogColumn, CatalogTable};
use crate::model::FieldDescriptor;
use crate::model::resolved::{AnonymisedColumn, Column};
use crate::model::{AnonymiseMethod, AnonymiserFn};

use std::sync::Arc;

/// The anonymiser values the host registered, by name.
pub(crate) type Anonymisers = std::collections::HashMap<String, Arc<dyn AnonymiserFn>>;
use crate::sql::Ident;

/// The columns of one type, by role; `None` where the role has no field or
/// its column is missing (then a problem was reported).
#[derive(Debug, Default)]
pub(super) struct Columns<'t> {
    /// The record id as the catalog has it, for the uniqueness check.
    pub(super) record_id_catalog: Option<&'t CatalogColumn>,
    pub(super) record_id: Option<Column>,
    pub(super) anchor: Option<Column>,
    pub(super) tenant: Option<Column>,
    pub(super) soft_delete: Option<Column>,
    pub(super) deleted_at: Option<Column>,
    pub(super) anonymised_at: Option<Column>,
    pub(super) anonymise: Vec<AnonymisedColumn>,
    pub(super) subjects: Vec<Column>,
}

/// A type check for a role: `None` when the column fits.
type Rule<'r> = &'r dyn Fn(&CatalogColumn) -> Option<Issue>;

struct Checker<'a, 't> {
    target: &'a Target,
    table: &'t CatalogTable,
    types: &'a Types<'a>,
    problems: &'a mut Problems,
}

impl<'t> Checker<'_, 't> {
    /// The field's column, checked; reported when missing or unfit.
    fn column(
        &mut self,
        field: &FieldDescriptor,
        role: &str,
        rules: &[Rule<'_>],
    ) -> Option<(&'t CatalogColumn, Column)> {
        let Some(c) = self.table.column(field.column) else {
            self.target.problem(
                self.problems,
                Some(field.column),
                Issue::new(
                    format!(
                        "column {} (field `{}`, the {role}) does not exist in table {}",
                        field.column, field.field, self.target.place.table
                    ),
                    "add the column, or map the field to an existing column with \
                     #[cohort(column = \"...\")]",
                ),
            );
            return None;
        };
        let mut fits = true;
        for rule in rules {
            if let Some(issue) = rule(c) {
                self.target.problem(self.problems, Some(&c.name), issue);
                fits = false;
            }
        }
        let name = match Ident::new(&c.name) {
            Ok(name) => name,
            Err(e) => {
                self.target.problem(
                    self.problems,
                    Some(&c.name),
                    Issue::new(format!("the column name {e}"), "rename the column"),
                );
                return None;
            }
        };
        fits.then(|| {
            (
                c,
                Column {
                    name,
                    sql_type: c.sql_type.clone(),
                    nullable: self.types.nullable(c),
                    // Filled in from the catalog once the model is valid.
                    cmp_type: c.sql_type.clone(),
                    eq: "=".to_owned(),
                    operator: None,
                },
            )
        })
    }
}

/// Finds and checks every role column of `target` in `table`.
pub(super) fn check<'t>(
    target: &Target,
    roles: &Roles,
    table: &'t CatalogTable,
    types: &Types<'_>,
    anonymisers: &Anonymisers,
    problems: &mut Problems,
) -> Columns<'t> {
    let mut ck = Checker {
        target,
        table,
        types,
        problems,
    };
    let mut out = Columns::default();
    let timestamptz =
        |role: &'static str| move |c: &CatalogColumn| types::timestamptz(types, c, role);
    // Cohort writes these roles' columns; PostgreSQL refuses a write to a
    // generated column. (A generated anchor is fine: it is only read, and is
    // how an anchor falls back to a second column; docs/model.md.)
    let written = |role: &'static str| {
        move |c: &CatalogColumn| {
            c.generated.then(|| {
                Issue::new(
                    format!(
                        "column {} is a generated column, but Cohort writes the {role} and                          PostgreSQL refuses writes to generated columns",
                        c.name
                    ),
                    format!("map the {role} to a plain column"),
                )
            })
        }
    };

    if let Some(f) = roles.record_id
        && let Some((c, column)) = ck.column(f, "record id", &[&|c| types::record_id(types, c)])
    {
        out.record_id_catalog = Some(c);
        out.record_id = Some(column);
    }
    if let Some(f) = roles.anchor {
        out.anchor = ck
            .column(f, "anchor", &[&timestamptz("anchor")])
            .map(|(_, c)| c);
    }
    if let Some(f) = roles.tenant {
        out.tenant = ck
            .column(f, "tenant", &[&|c| types::tenant(types, c)])
            .map(|(_, c)| c);
    }
    if let Some(f) = roles.soft_delete {
        out.soft_delete = ck
            .column(
                f,
                "soft-delete flag",
                &[
                    &|c| types::soft_delete_flag(types, c),
                    &written("soft-delete flag"),
                ],
            )
            .map(|(_, c)| c);
    }
    if let Some(f) = roles.deleted_at {
        out.deleted_at = ck
            .column(
                f,
                "deleted-at",
                &[&timestamptz("deleted-at"), &written("deleted-at")],
            )
            .map(|(_, c)| c);
    }
    if let Some(f) = roles.anonymised_at {
        let nullable = |c: &CatalogColumn| {
            (!types.nullable(c)).then(|| {
                Issue::new(
                    "the anonymised-at column does not accept NULL, but NULL is what marks a row as not \
                     yet anonymised: no row would ever be anonymised",
                    format!("ALTER TABLE ... ALTER COLUMN {} DROP NOT NULL", c.name),
                )
            })
        };
        out.anonymised_at = ck
            .column(
                f,
                "anonymised-at",
                &[
                    &timestamptz("anonymised-at"),
                    &nullable,
                    &written("anonymised-at"),
                ],
            )
            .map(|(_, c)| c);
    }
    for (f, method) in &roles.anonymise {
        if let Some((_, column)) = ck.column(
            f,
            "anonymised column",
            &[
                &|c| types::anonymised(types, c, method),
                &written("anonymised column"),
            ],
        ) {
            let computed: Option<Arc<dyn AnonymiserFn>> = match method {
                AnonymiseMethod::Custom(c) => Some(Arc::new(*c)),
                AnonymiseMethod::Named(name) => match anonymisers.get(*name) {
                    Some(a) => Some(a.clone()),
                    None => {
                        target.problem(
                            ck.problems,
                            Some(column.name.as_str()),
                            Issue::new(
                                format!(
                                    "field `{}` is anonymised by {name:?}, but no anonymiser is registered under that name",
                                    f.field
                                ),
                                format!(
                                    "register it when building: Cohort::builder(pool).anonymiser({name:?}, ...)"
                                ),
                            ),
                        );
                        continue;
                    }
                },
                _ => None,
            };
            out.anonymise.push(AnonymisedColumn {
                column,
                method: *method,
                computed,
            });
        }
    }
    for f in &roles.subjects {
        if let Some((_, column)) = ck.column(f, "erasure subject", &[&|c| types::subject(types, c)])
        {
            out.subjects.push(column);
        }
    }
    out
}
