//! A category from a column (contract SL3): a type whose rows take their
//! category from a column through a map. Every category it maps to (and its
//! default) needs capabilities; the column must exist, hold scalar values,
//! and every mapped value must be one the column can hold; without a
//! default, the column must not be able to hold an unmapped value (NULL,
//! another enum label, another value of a `CHECK` list, or any value at
//! all). Once the model is valid, the type is split into one entity per
//! category ([`split`]).

use sqlx::PgConnection;

use super::registry::Target;
use super::report::{Issue, Problems};
use super::types::Types;
use crate::catalog::{self, CatalogColumn, CatalogTable, TypeKind};
use crate::model::CategoryFrom;
use crate::model::resolved::{CategorySplit, Column, ResolvedEntity, Slice};
use crate::policy::{Capabilities, RuleProvider};
use crate::sql::Ident;

/// The capabilities of every category of `from`, each problem (a category
/// with none) reported; their union is what the type's columns are checked
/// against (P3), `None` when no category has any.
pub(super) fn capabilities(
    provider: &dyn RuleProvider,
    from: &CategoryFrom,
    target: &Target,
    problems: &mut Problems,
) -> (Option<Capabilities>, Vec<(&'static str, Capabilities)>) {
    let mut each = Vec::new();
    let mut union: Option<Capabilities> = None;
    for category in from.categories() {
        match provider.capabilities(category) {
            Some(caps) => {
                union = Some(match union {
                    None => caps.clone(),
                    Some(u) => u.union(&caps),
                });
                each.push((category, caps));
            }
            None => target.problem(
                problems,
                None,
                Issue::new(
                    format!(
                        "the rule provider declares no capabilities for category \"{category}\", \
                         which the type's category map names"
                    ),
                    format!(
                        "return Some(Capabilities) for \"{category}\" from RuleProvider::capabilities, \
                         or map the values to a category that has a rule"
                    ),
                ),
            ),
        }
    }
    (union, each)
}

/// What validation found for a type whose category comes from a column,
/// for [`split`] once the entity is final.
pub(super) struct Found {
    column: Column,
    categories: Vec<(&'static str, Capabilities)>,
}

impl Found {
    /// The category column's raw name.
    pub(super) fn column_name(&self) -> &str {
        self.column.name.as_str()
    }

    /// Compares the column with the map's values by `eq` (its type's own
    /// equality, from `catalog::equality`).
    pub(super) fn compare_by(&mut self, eq: catalog::Equality) {
        self.column.cmp_type = eq.cmp_type;
        self.column.eq = eq.eq;
        self.column.operator = eq.operator;
    }
}

/// Checks the category column of `from` in `table`; `None` after reporting
/// a problem.
pub(super) async fn check(
    conn: &mut PgConnection,
    target: &Target,
    from: &CategoryFrom,
    categories: Vec<(&'static str, Capabilities)>,
    table: &CatalogTable,
    types: &Types<'_>,
    problems: &mut Problems,
) -> Result<Option<Found>, sqlx::Error> {
    let Some(field) = target.descriptor.field(from.field()) else {
        // The descriptor's own checks name the field.
        return Ok(None);
    };
    let Some(c) = table.column(field.column) else {
        target.problem(
            problems,
            Some(field.column),
            Issue::new(
                format!(
                    "column {} (field `{}`, the category column) does not exist in table {}",
                    field.column, field.field, target.place.table
                ),
                "add the column, or name the field whose column holds each row's class in category_from",
            ),
        );
        return Ok(None);
    };
    let base = types.base(c);
    if base.is_none_or(|t| !matches!(t.kind, TypeKind::Other)) {
        target.problem(
            problems,
            Some(&c.name),
            Issue::new(
                format!(
                    "the category column {} is of type {}: a category comes from a single value \
                     (text, an enum, a number, a boolean), not an array or a range",
                    c.name, c.sql_type
                ),
                "take the category from a column of a scalar type",
            ),
        );
        return Ok(None);
    }
    let bounds = catalog::bounds(conn, table.oid, c.attnum).await?;
    let type_name = base.map(|t| t.name.as_str()).unwrap_or_default();
    let mut fits = true;
    for (value, category) in from.map() {
        let problem = if let Some(labels) = &bounds.labels {
            (!labels.iter().any(|l| l == value)).then(|| {
                format!(
                    "maps value {value:?} to \"{category}\", which is not a label of the column's \
                     enum type {} (labels: {})",
                    c.sql_type,
                    labels.join(", ")
                )
            })
        } else if let Some(listed) = &bounds.listed
            && !listed.iter().any(|l| l == value)
        {
            Some(format!(
                "maps value {value:?} to \"{category}\", which the column's CHECK constraint does not \
                 allow (allowed: {})",
                listed.join(", ")
            ))
        } else {
            wrong_type(type_name, value).map(|expected| {
                format!(
                    "maps value {value:?} to \"{category}\", but the column is {} and holds {expected}",
                    c.sql_type
                )
            })
        };
        if let Some(problem) = problem {
            fits = false;
            target.problem(
                problems,
                Some(&c.name),
                Issue::new(
                    format!("the category map {problem}"),
                    "map the values the column holds, as PostgreSQL prints them as text",
                ),
            );
        }
    }
    if from.default().is_none() {
        for unmapped in unmapped(from, c, types, &bounds, type_name) {
            fits = false;
            target.problem(
                problems,
                Some(&c.name),
                Issue::new(
                    format!(
                        "the category map has no default, and the category column {} can hold {unmapped}, \
                         which no category maps",
                        c.name
                    ),
                    "give the type a default category (`category = \"...\"` beside category_from), \
                     or map every value",
                ),
            );
        }
    }
    let name = match Ident::new(&c.name) {
        Ok(name) => name,
        Err(_) => return Ok(None),
    };
    Ok(fits.then(|| Found {
        column: Column {
            name,
            sql_type: c.sql_type.clone(),
            nullable: types.nullable(c),
            cmp_type: c.sql_type.clone(),
            eq: "OPERATOR(pg_catalog.=)".to_owned(),
            operator: None,
        },
        categories,
    }))
}

/// What the column can hold that the map does not name, when there is no
/// default: NULL, enum labels, `CHECK`-listed values, or anything at all.
fn unmapped(
    from: &CategoryFrom,
    c: &CatalogColumn,
    types: &Types<'_>,
    bounds: &catalog::Bounds,
    type_name: &str,
) -> Vec<String> {
    let mapped = |v: &str| from.map().iter().any(|(m, _)| *m == v);
    let mut out = Vec::new();
    if types.nullable(c) {
        out.push("NULL".to_owned());
    }
    let known: Option<Vec<String>> = bounds
        .labels
        .clone()
        .or_else(|| bounds.listed.clone())
        .or_else(|| (type_name == "bool").then(|| vec!["true".to_owned(), "false".to_owned()]));
    match known {
        Some(values) => {
            let missing: Vec<String> = values.into_iter().filter(|v| !mapped(v)).collect();
            if !missing.is_empty() {
                out.push(format!("the values {}", missing.join(", ")));
            }
        }
        None => out.push(format!(
            "any value of its type {} (no enum type or CHECK list bounds it)",
            c.sql_type
        )),
    }
    out
}

/// What a column of built-in type `type_name` holds, when `value` cannot be
/// its text form; `None` when it can (or the type is not one checked here).
fn wrong_type(type_name: &str, value: &str) -> Option<&'static str> {
    let fits = match type_name {
        "int2" => value.parse::<i16>().is_ok_and(|n| n.to_string() == value),
        "int4" => value.parse::<i32>().is_ok_and(|n| n.to_string() == value),
        "int8" => value.parse::<i64>().is_ok_and(|n| n.to_string() == value),
        "bool" => value == "true" || value == "false",
        _ => return None,
    };
    (!fits).then_some(match type_name {
        "bool" => "true or false",
        _ => "whole numbers written without sign or leading zeros (e.g. 7, -3)",
    })
}

/// Gives `e` (final: comparisons resolved, fence assigned) one entity per
/// category of `from`, each with its category, its capabilities and its
/// slice of the rows.
pub(super) fn split(e: &mut ResolvedEntity, from: &CategoryFrom, found: Found) {
    let default = from.default();
    let entities = found
        .categories
        .into_iter()
        .map(|(category, capabilities)| {
            let is_default = default == Some(category);
            let values: Vec<String> = from
                .map()
                .iter()
                .filter(|(_, c)| (*c == category) != is_default)
                .map(|(v, _)| (*v).to_owned())
                .collect();
            let slice = Slice {
                column: found.column.clone(),
                values,
                others: is_default,
            };
            let mut entity = ResolvedEntity {
                category,
                capabilities,
                split: None,
                slice: Some(Box::new(slice.clone())),
                ..e.clone()
            };
            // Its archived rows are sliced alike (contract SL2).
            if let Some(archive) = &mut entity.archive {
                archive.entity.category = super::archive::archive_category(category);
                archive.entity.slice = Some(Box::new(slice));
            }
            entity
        })
        .collect();
    e.split = Some(Box::new(CategorySplit { entities }));
}
