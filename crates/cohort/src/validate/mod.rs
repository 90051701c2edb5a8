//! Start-up validation: every registered type checked against the live
//! catalog, every problem collected, then one error that lists them all.
//!
//! One job per file:
//! - [`registry`]: the registration as a whole (no retained types, the same
//!   type twice, duplicate ids (M2), two types on one table (V1), the default
//!   schema (D7));
//! - [`roles`]: which field plays which role (M3, M5);
//! - [`strategies`]: declared capabilities against the type (P3, P5);
//! - [`columns`] with [`types`]: each role's column exists (V8) and its type
//!   fits (V5, V6, V7);
//! - [`keys`]: the record id is unique (V4);
//! - [`inheritance`]: no table inheritance; partitioning decided (V2);
//! - [`cascade`]: no ON DELETE CASCADE path from a purgeable table into a
//!   retained one (V3);
//! - [`order`]: the engine's processing order (X16);
//! - [`connection`]: the connection itself: a pooler in transaction mode
//!   the options do not name, advisory locks the server ignores (CO1);
//! - [`privileges`]: the runtime role's privileges and row-level security
//!   (SEC2, SEC4), and the grants that satisfy them (SEC1).
//!
//! The catalog is read through [`crate::catalog`], a handful of queries for
//! all types together.

pub(crate) mod archive;
mod cascade;
mod categories;
mod columns;
pub(crate) mod connection;
mod events;
pub(crate) mod guards;
mod inheritance;
mod keys;
mod order;
pub(crate) mod privileges;
mod registry;
mod report;
mod roles;
mod speed;
mod strategies;
#[cfg(test)]
mod tests;
mod types;

use std::collections::{HashMap, HashSet};

use sqlx::PgConnection;

pub use report::{ValidationProblem, ValidationReport};

use crate::catalog::{self, CatalogTable, RelationLookup};
use crate::config::Options;
use crate::error::Error;
use crate::model::EntityDescriptor;
use crate::model::resolved::ResolvedEntity;
use crate::policy::{Capabilities, RuleProvider, Strategy};
use registry::Target;
use report::{Issue, Problems};
use roles::Roles;

/// What validation produces: the retained types in processing order
/// (referencing types before the types they reference) and the exempt ones.
#[derive(Debug, Clone)]
pub(crate) struct Model {
    pub(crate) entities: Vec<ResolvedEntity>,
    /// Explicitly exempt types, for reports.
    pub(crate) exempt: Vec<&'static EntityDescriptor>,
    /// What only makes Cohort slower (missing indexes), each with its fix.
    pub(crate) warnings: Vec<ValidationProblem>,
}

/// What the host registered.
pub(crate) struct Registration<'a> {
    pub(crate) descriptors: &'a [&'static EntityDescriptor],
    pub(crate) options: &'a Options,
    pub(crate) provider: &'a dyn RuleProvider,
    pub(crate) anonymisers: &'a columns::Anonymisers,
    /// Whether any row handler is registered (it needs the queue).
    pub(crate) row_handlers: bool,
    /// The retained types whose rows handlers capture (whole rows, so
    /// `SELECT` on every column); `None`: every type, when only
    /// `row_handlers` is known.
    pub(crate) captured: Option<&'a [uuid::Uuid]>,
}

/// One retained type on its way through validation.
struct Candidate<'t> {
    target: Target,
    roles: Roles,
    capabilities: Option<Capabilities>,
    table: Option<&'t CatalogTable>,
}

/// Validates the registration against the live catalog. The caller has pinned
/// `search_path` on `conn` (every query is qualified as well).
///
/// Returns the model, or [`Error::Validation`] listing every problem found;
/// a database failure is [`Error::Database`].
pub(crate) async fn validate(
    conn: &mut PgConnection,
    reg: &Registration<'_>,
) -> Result<Model, Error> {
    let mut problems = Problems::default();
    let registered = registry::register(reg, &mut problems);
    let conventions = &reg.options.conventions;

    // What the descriptors and the provider say, before the database.
    let mut resolved: Vec<(Target, Roles, Option<Capabilities>)> = Vec::new();
    // SL3: each category of a type whose category comes from a column.
    let mut split_caps: Vec<Vec<(&'static str, Capabilities)>> = Vec::new();
    for target in registered.targets {
        let roles = roles::resolve(&target, conventions, &mut problems);
        let (capabilities, each) = match target.descriptor.category_from() {
            None => (reg.provider.capabilities(target.category), Vec::new()),
            Some(from) => categories::capabilities(reg.provider, from, &target, &mut problems),
        };
        if capabilities.is_some() || target.descriptor.category_from().is_none() {
            for issue in strategies::check(target.category, capabilities.as_ref(), &roles) {
                target.problem(&mut problems, None, issue);
            }
        }
        resolved.push((target, roles, capabilities));
        split_caps.push(each);
    }

    // The catalog, read once for all types.
    let names: Vec<(String, String)> = resolved
        .iter()
        .filter(|(t, _, _)| t.table.is_some())
        .map(|(t, _, _)| (t.schema.clone(), t.descriptor.table.to_owned()))
        .collect();
    let lookups = if names.is_empty() {
        Vec::new()
    } else {
        catalog::lookup_tables(conn, &names).await?
    };
    let mut lookups = lookups.iter();
    let mut candidates: Vec<Candidate<'_>> = Vec::new();
    for (target, roles, capabilities) in resolved {
        let table = if target.table.is_some() {
            match lookups.next() {
                Some(RelationLookup::Table(t)) => Some(t),
                Some(RelationLookup::NotATable { kind }) => {
                    target.problem(
                        &mut problems,
                        None,
                        Issue::new(
                            format!("{} is {kind}, not a table", target.place.table),
                            "map the type to a table with #[cohort(table = \"...\", schema = \"...\")]",
                        ),
                    );
                    None
                }
                Some(RelationLookup::Missing { schema_exists }) => {
                    let detail = if *schema_exists {
                        String::new()
                    } else {
                        format!(" (schema {} does not exist either)", target.schema)
                    };
                    target.problem(
                        &mut problems,
                        None,
                        Issue::new(
                            format!("table {} does not exist{detail}", target.place.table),
                            "create the table in a migration, or fix #[cohort(table = \"...\", \
                             schema = \"...\")] or options.default_table_schema",
                        ),
                    );
                    None
                }
                None => None,
            }
        } else {
            None
        };
        candidates.push(Candidate {
            target,
            roles,
            capabilities,
            table,
        });
    }

    let tables: Vec<&CatalogTable> = candidates.iter().filter_map(|c| c.table).collect();
    let table_oids: Vec<u32> = tables.iter().map(|t| t.oid).collect();
    let type_oids: Vec<u32> = {
        let set: HashSet<u32> = tables
            .iter()
            .flat_map(|t| t.columns.iter().map(|c| c.type_oid))
            .collect();
        set.into_iter().collect()
    };
    let (type_rows, indexes, links, keys) = if tables.is_empty() {
        Default::default()
    } else {
        (
            catalog::types(conn, &type_oids).await?,
            catalog::indexes(conn, &table_oids).await?,
            catalog::inheritance(conn, &table_oids).await?,
            catalog::foreign_keys(conn).await?,
        )
    };
    let types = types::Types::new(&type_rows);

    // Every retained table, for the cascade walk.
    let retained: HashMap<u32, usize> = candidates
        .iter()
        .enumerate()
        .filter_map(|(i, c)| c.table.map(|t| (t.oid, i)))
        .collect();
    let retained_oids: HashSet<u32> = retained.keys().copied().collect();

    let mut entities: Vec<(u32, ResolvedEntity)> = Vec::new();
    let mut warnings: Vec<ValidationProblem> = Vec::new();
    let mut splits: Vec<(usize, categories::Found)> = Vec::new();
    for (c, each) in candidates.iter().zip(split_caps) {
        let Some(table) = c.table else { continue };
        let split = match c.target.descriptor.category_from() {
            Some(from) => {
                categories::check(conn, &c.target, from, each, table, &types, &mut problems).await?
            }
            None => None,
        };
        let target = &c.target;
        let cols = columns::check(
            target,
            &c.roles,
            table,
            &types,
            reg.anonymisers,
            &mut problems,
        );
        // PT1: partitioned by range on the anchor alone.
        let range_anchor = cols
            .anchor
            .as_ref()
            .and_then(|a| table.column(a.name.as_str()))
            .map(|a| a.attnum)
            .filter(|a| table.partitioned && table.range_key == Some(*a));
        if let (Some(rc), Some(column)) = (cols.record_id_catalog, &cols.record_id) {
            for issue in
                keys::record_id_unique(table.oid, rc, column.nullable, &indexes, range_anchor)
            {
                target.problem(&mut problems, Some(&rc.name), issue);
            }
        }
        for issue in inheritance::check(table, &links) {
            target.problem(&mut problems, None, issue);
        }
        let purgeable = c
            .capabilities
            .as_ref()
            .is_some_and(|caps| caps.allows(Strategy::Purge));
        if purgeable {
            for path in cascade::paths_into_retained(&keys, table.oid, &retained_oids) {
                let reached = retained
                    .get(&path.reached)
                    .map(|&i| candidates[i].target.descriptor.type_name)
                    .unwrap_or("?");
                target.problem(
                    &mut problems,
                    None,
                    cascade::issue(target.category, table.oid, &path, reached),
                );
            }
        }

        // SL4: the subject key events are joined on.
        let event_key = events::key_column(target, table, &types, &mut problems);
        if c.capabilities
            .as_ref()
            .is_some_and(|caps| caps.event_types().next().is_some())
            && target.descriptor.event_key().is_none()
        {
            let types: Vec<&str> = c
                .capabilities
                .as_ref()
                .map(|caps| caps.event_types().collect())
                .unwrap_or_default();
            target.problem(
                &mut problems,
                None,
                Issue::new(
                    format!(
                        "category \"{}\" may count its period from an event ({}), and the type \
                         has no column holding the subject key events are recorded for",
                        target.category,
                        types.join(", ")
                    ),
                    "mark the field whose column holds the event's subject key with #[cohort(event_key)]",
                ),
            );
        }

        if problems.has(target.index) {
            continue;
        }
        if let (Some(entity_id), Some(capabilities), Some(name), Some(record_id), Some(anchor)) = (
            target.descriptor.entity_id,
            c.capabilities.clone(),
            target.table.clone(),
            cols.record_id,
            cols.anchor,
        ) {
            let entity = ResolvedEntity {
                descriptor: target.descriptor,
                entity_id,
                category: target.category,
                capabilities,
                table: name,
                record_id,
                anchor,
                tenant: cols.tenant,
                soft_delete: cols.soft_delete,
                deleted_at: cols.deleted_at,
                anonymised_at: cols.anonymised_at,
                anonymise: cols.anonymise,
                subjects: cols.subjects,
                fence: 0,
                // Other schemes (list, hash, range on another column or on
                // several) are swept row by row.
                range_on_anchor: range_anchor.is_some(),
                archive: None,
                split: None,
                slice: None,
                event_key,
            };
            let attnum = |name: &str| table.column(name).map(|c| c.attnum).unwrap_or(0);
            let speed_columns = speed::Columns {
                tenant: entity.tenant.as_ref().map(|t| attnum(t.name.as_str())),
                anchor: attnum(entity.anchor.name.as_str()),
                subjects: entity
                    .subjects
                    .iter()
                    .map(|s| (s.name.as_str().to_owned(), attnum(s.name.as_str())))
                    .collect(),
                category: split
                    .as_ref()
                    .map(|f| (f.column_name().to_owned(), attnum(f.column_name()))),
            };
            warnings.extend(speed::warnings(
                &entity,
                &target.place,
                table.oid,
                &speed_columns,
                &indexes,
            ));
            if let Some(found) = split {
                splits.push((entities.len(), found));
            }
            entities.push((table.oid, entity));
        }
    }

    privileges::check(
        conn,
        reg.options,
        (reg.row_handlers, reg.captured),
        &candidates,
        &mut problems,
    )
    .await?;
    let guarded: Vec<guards::Guarded<'_>> = entities
        .iter()
        .filter(|(_, e)| e.descriptor.guard().is_some())
        .filter_map(|(oid, e)| {
            let c = candidates
                .iter()
                .find(|c| std::ptr::eq(c.target.descriptor, e.descriptor))?;
            Some(guards::Guarded {
                oid: *oid,
                entity: e,
                index: c.target.index,
                place: &c.target.place,
            })
        })
        .collect();
    if !guarded.is_empty()
        && let Ok(schema) = crate::sql::SchemaName::new(&reg.options.schema)
    {
        guards::check(conn, &schema, &guarded, &mut problems).await?;
    }
    // SL2: the archive tables of the types that may archive.
    let archiving: Vec<archive::Archiving<'_>> = entities
        .iter()
        .enumerate()
        .filter(|(_, (_, e))| e.capabilities.archive_schema().is_some())
        .filter_map(|(index, (oid, e))| {
            let c = candidates
                .iter()
                .find(|c| std::ptr::eq(c.target.descriptor, e.descriptor))?;
            Some(archive::Archiving {
                index,
                entity: e,
                source: c.table.filter(|t| t.oid == *oid)?,
                target: &c.target,
            })
        })
        .collect();
    let archives = archive::check(conn, archiving, &mut problems).await?;
    if !problems.is_empty() {
        return Err(Error::Validation(problems.into_report()));
    }
    resolve_comparisons(conn, &mut entities).await?;
    let ids: Vec<uuid::Uuid> = entities.iter().map(|(_, e)| e.entity_id).collect();
    let fences = crate::sql::txn::fence_keys(conn, &reg.options.schema, &ids).await?;
    for ((_, e), fence) in entities.iter_mut().zip(fences) {
        e.fence = fence;
    }
    for found in archives {
        if let Some((_, e)) = entities.get_mut(found.index) {
            archive::attach(e, found);
        }
    }
    // A category column compares with the map's values by its own
    // equality, read as erasure reads a subject column's.
    let asked: Vec<(u32, String)> = splits
        .iter()
        .filter_map(|(index, found)| {
            entities
                .get(*index)
                .map(|(oid, _)| (*oid, found.column_name().to_owned()))
        })
        .collect();
    let refs: Vec<(u32, &str)> = asked.iter().map(|(o, n)| (*o, n.as_str())).collect();
    let mut equalities = catalog::equalities(conn, &refs).await?.into_iter();
    for (_, found) in &mut splits {
        if let Some(Some(eq)) = equalities.next() {
            found.compare_by(eq);
        }
    }
    for (index, found) in splits {
        if let Some((_, e)) = entities.get_mut(index)
            && let Some(from) = e.descriptor.category_from()
        {
            categories::split(e, from, found);
        }
    }
    let oids: Vec<u32> = entities.iter().map(|(oid, _)| *oid).collect();
    let mut slots: Vec<Option<ResolvedEntity>> =
        entities.into_iter().map(|(_, e)| Some(e)).collect();
    let entities = order::processing_order(&oids, &keys)
        .into_iter()
        .filter_map(|i| slots.get_mut(i).and_then(Option::take))
        .collect();
    for w in &warnings {
        tracing::warn!("{w}");
    }
    Ok(Model {
        entities,
        exempt: registered.exempt,
        warnings,
    })
}

/// Reads how each record-id and erasure-subject column compares with a value
/// given as text (see `catalog::equality`), once, at start-up.
async fn resolve_comparisons(
    conn: &mut PgConnection,
    entities: &mut [(u32, ResolvedEntity)],
) -> Result<(), Error> {
    let mut asked: Vec<(u32, String)> = Vec::new();
    for (oid, e) in entities.iter() {
        asked.push((*oid, e.record_id.name.as_str().to_owned()));
        for c in &e.subjects {
            asked.push((*oid, c.name.as_str().to_owned()));
        }
    }
    let refs: Vec<(u32, &str)> = asked.iter().map(|(o, n)| (*o, n.as_str())).collect();
    let mut found = catalog::equalities(conn, &refs).await?.into_iter();
    for (_, e) in entities.iter_mut() {
        let columns = std::iter::once(&mut e.record_id).chain(e.subjects.iter_mut());
        for column in columns {
            if let Some(Some(eq)) = found.next() {
                column.cmp_type = eq.cmp_type;
                column.eq = eq.eq;
                column.operator = eq.operator;
            }
        }
    }
    Ok(())
}
