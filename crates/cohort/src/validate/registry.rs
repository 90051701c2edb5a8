//! The registration as a whole: which types are retained, their tables
//! (D7: the configured default schema when a type names none), and the
//! checks that compare registered types with each other (M2 duplicate ids, the
//! same type twice, V1 two types on one table).

use std::collections::HashMap;

use uuid::Uuid;

use super::Registration;
use super::report::{Issue, Place, Problems};
use crate::model::{EntityDescriptor, Membership};
use crate::sql::{Ident, QualifiedName};

/// A registered retained type, about to be checked.
#[derive(Debug, Clone)]
pub(super) struct Target {
    /// Its position in the registration (problems are reported in this order).
    pub(super) index: usize,
    pub(super) descriptor: &'static EntityDescriptor,
    pub(super) category: &'static str,
    pub(super) anchor: &'static str,
    /// The table's schema: the type's own, else the configured default.
    pub(super) schema: String,
    pub(super) place: Place,
    /// `None` when the schema or table name cannot be an identifier.
    pub(super) table: Option<QualifiedName>,
}

impl Target {
    pub(super) fn problem(&self, problems: &mut Problems, column: Option<&str>, issue: Issue) {
        problems.push(self.index, self.place.problem(column, issue));
    }
}

/// The registration sorted out.
#[derive(Debug, Default)]
pub(super) struct Registered {
    pub(super) targets: Vec<Target>,
    pub(super) exempt: Vec<&'static EntityDescriptor>,
}

/// Sorts the registration into retained targets and exempt types, reporting
/// what is wrong with the registration as a whole.
pub(super) fn register(reg: &Registration<'_>, problems: &mut Problems) -> Registered {
    let mut out = Registered::default();
    let mut ids: HashMap<Uuid, &'static str> = HashMap::new();
    let mut tables: HashMap<(String, String), &'static str> = HashMap::new();
    let mut seen: Vec<&'static EntityDescriptor> = Vec::new();
    let mut any_retained = false;

    for (index, &d) in reg.descriptors.iter().enumerate() {
        let schema = d
            .schema
            .unwrap_or(reg.options.default_table_schema.as_str())
            .to_owned();
        let place = Place {
            type_name: d.type_name,
            table: format!("{schema}.{}", d.table),
        };
        let mut report = |issue: Issue| problems.push(index, place.problem(None, issue));

        // The same type registered twice: almost always a copy-paste slip
        // where another type was meant, so it is reported, not merged.
        if seen.iter().any(|&s| std::ptr::eq(s, d)) {
            report(Issue::new(
                "the type is registered twice",
                "remove the second .entity::<T>() call for this type (or register the type you meant)",
            ));
            continue;
        }
        seen.push(d);

        let retained = matches!(d.membership, Membership::Retained { .. });
        any_retained |= retained;
        match d.entity_id {
            None if retained => report(Issue::new(
                "the retained type has no retained-entity id",
                "add #[cohort(id = \"...\")] with a new random UUID, and never change it afterwards",
            )),
            Some(id) if id.is_nil() => report(Issue::new(
                "the retained-entity id is the nil UUID",
                "use a new random UUID in #[cohort(id = \"...\")]",
            )),
            Some(id) => {
                if let Some(other) = ids.get(&id) {
                    report(Issue::new(
                        format!("the retained-entity id {id} is also the id of {other}"),
                        format!(
                            "give {} or {other} a new random UUID in #[cohort(id = \"...\")]; \
                             keep the id of the type whose holds and ledger entries already use it",
                            d.type_name
                        ),
                    ));
                } else {
                    ids.insert(id, d.type_name);
                }
            }
            None => {}
        }

        let (category, anchor) = match d.membership {
            Membership::Exempt { .. } => {
                out.exempt.push(d);
                continue;
            }
            Membership::Retained { category, anchor } => (category, anchor),
        };

        let name = Ident::new(&schema)
            .map_err(|e| ("schema", schema.as_str(), e))
            .and_then(|s| {
                Ident::new(d.table)
                    .map(|t| QualifiedName::new(s, t))
                    .map_err(|e| ("table", d.table, e))
            });
        let table = match name {
            Ok(name) => Some(name),
            Err((what, name, e)) => {
                report(Issue::new(
                    format!("the {what} name \"{}\" {e}", name.escape_default()),
                    "fix #[cohort(table = \"...\", schema = \"...\")] or options.default_table_schema",
                ));
                None
            }
        };

        if table.is_some() {
            let key = (schema.clone(), d.table.to_owned());
            if let Some(other) = tables.get(&key) {
                report(Issue::new(
                    format!("{other} is registered on the same table"),
                    format!(
                        "map each retained type to a table of its own: Cohort mutates one table per \
                         retained type and cannot tell which rows belong to {} and which to {other}",
                        d.type_name
                    ),
                ));
            } else {
                tables.insert(key, d.type_name);
            }
        }

        out.targets.push(Target {
            index,
            descriptor: d,
            category,
            anchor,
            schema,
            place,
            table,
        });
    }

    if !any_retained {
        problems.general(Issue::new(
            "no retained types registered",
            "call .entity::<T>() on the builder for each #[derive(Retained)] type with a category and an anchor",
        ));
    }
    out
}
