//! A retained type as the engine uses it: every role settled, every column
//! checked against the live catalog.

use uuid::Uuid;

use std::sync::Arc;

use super::{AnonymiseMethod, AnonymiserFn, EntityDescriptor};
use crate::policy::Capabilities;
use crate::sql::{Ident, QualifiedName};

/// A column of a retained table, as found in the catalog.
#[derive(Debug, Clone)]
pub(crate) struct Column {
    /// The column's name.
    pub(crate) name: Ident,
    /// The column's type as `pg_catalog.format_type` prints it with
    /// `search_path` pinned to `pg_catalog` (so schema-qualified where needed).
    /// Catalog text, never user input: safe to write as a cast target.
    pub(crate) sql_type: String,
    /// Whether the column accepts NULL.
    pub(crate) nullable: bool,
    /// The type a value given as text is read in to compare with this
    /// column: the type its btree compares in, with no modifier (see
    /// `catalog::equality`). Catalog text.
    pub(crate) cmp_type: String,
    /// That type's equality operator, schema-qualified (`OPERATOR("ext".=)`).
    pub(crate) eq: String,
    /// The operator's raw schema and name, when `eq` names one (what the
    /// registry of retained types records).
    pub(crate) operator: Option<(String, String)>,
}

impl Column {
    /// `t.<column> = <text_expr read as the column's comparison type>`, by
    /// the column's own equality: no rounding or truncation through a type
    /// modifier, and an extension type's operator wherever it is installed.
    pub(crate) fn equals_text(&self, alias: &str, text_expr: &str) -> String {
        format!(
            "{alias}.{col} {eq} CAST(({text_expr})::pg_catalog.text AS {cmp})",
            col = self.name,
            eq = self.eq,
            cmp = self.cmp_type
        )
    }
}

/// A column scrubbed by the `Anonymise` strategy.
#[derive(Clone)]
pub(crate) struct AnonymisedColumn {
    pub(crate) column: Column,
    pub(crate) method: AnonymiseMethod,
    /// For methods computed per row (a custom anonymiser type, or a value
    /// registered by name): the function, resolved at start-up.
    pub(crate) computed: Option<Arc<dyn AnonymiserFn>>,
}

impl std::fmt::Debug for AnonymisedColumn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnonymisedColumn")
            .field("column", &self.column)
            .field("method", &self.method)
            .finish_non_exhaustive()
    }
}

/// A validated retained type.
#[derive(Debug, Clone)]
pub(crate) struct ResolvedEntity {
    pub(crate) descriptor: &'static EntityDescriptor,
    pub(crate) entity_id: Uuid,
    pub(crate) category: &'static str,
    /// What the rule provider declared for the category.
    pub(crate) capabilities: Capabilities,
    /// The table, schema-qualified.
    pub(crate) table: QualifiedName,
    pub(crate) record_id: Column,
    pub(crate) anchor: Column,
    /// `None` for tenantless types.
    pub(crate) tenant: Option<Column>,
    pub(crate) soft_delete: Option<Column>,
    pub(crate) deleted_at: Option<Column>,
    pub(crate) anonymised_at: Option<Column>,
    pub(crate) anonymise: Vec<AnonymisedColumn>,
    pub(crate) subjects: Vec<Column>,
    /// The second key of this type's entity fence (see `sql::txn`).
    pub(crate) fence: i32,
    /// Validation found the table partitioned by `RANGE` on the anchor
    /// column alone: a purge may drop its wholly expired partitions
    /// (contract PT1; the partitions and their bounds are read per run,
    /// since tools such as pg_partman add and remove them all the time).
    pub(crate) range_on_anchor: bool,
    /// Where the type's rows are archived, when its category may archive
    /// (contract SL2).
    pub(crate) archive: Option<Box<ArchiveTarget>>,
    /// For a type whose rows take their category from a column (contract
    /// SL3): one entity per category, each with its slice.
    pub(crate) split: Option<Box<CategorySplit>>,
    /// For one category's entity of such a type: which rows are its.
    pub(crate) slice: Option<Box<Slice>>,
    /// The column holding the subject key events are recorded for
    /// (`#[cohort(event_key)]`, contract SL4).
    pub(crate) event_key: Option<Column>,
}

/// A type whose rows take their category from a column (contract SL3):
/// one entity per category (the type with that category, its
/// capabilities and its [`Slice`]), in the map's order, the default last.
/// Runs treat each as an entity of its own.
#[derive(Debug, Clone)]
pub(crate) struct CategorySplit {
    pub(crate) entities: Vec<ResolvedEntity>,
}

/// The rows of one category of a [`CategorySplit`]: those whose column's
/// value, as text, is one of `values`; for the default (`others`), those
/// whose value is none of them, NULL included.
#[derive(Debug, Clone)]
pub(crate) struct Slice {
    pub(crate) column: Column,
    pub(crate) values: Vec<String>,
    pub(crate) others: bool,
}

/// The columns Cohort adds to an archive table, after the source's own.
pub(crate) const ARCHIVE_RUN: &str = "cohort_run_id";
/// The archive table's batch number column.
pub(crate) const ARCHIVE_BATCH: &str = "cohort_batch";
/// The archive table's archive-time column.
pub(crate) const ARCHIVE_AT: &str = "cohort_archived_at";

/// An archiving type's archive table (contract SL2).
#[derive(Debug, Clone)]
pub(crate) struct ArchiveTarget {
    /// The archive table as a retained type of its own: the source's record
    /// id, anchor, tenant and subject columns in the archive table, the
    /// source's entity id (so holds and the fence apply alike), category
    /// `<category>:archive`. What a purge stage after the archive stage,
    /// and an erasure, run on.
    pub(crate) entity: ResolvedEntity,
    /// Every column of the source table, in table order: copied as it is.
    pub(crate) columns: Vec<Ident>,
    /// The archive time column ([`ARCHIVE_AT`]), which a purge stage after
    /// the archive stage counts its period from.
    pub(crate) archived_at: Column,
}

impl ResolvedEntity {
    /// The type's name, for the ledger and messages.
    pub(crate) fn type_name(&self) -> &'static str {
        self.descriptor.type_name
    }

    /// What runs work on: the type itself, or, when its rows take their
    /// category from a column, one entity per category (contract SL3).
    pub(crate) fn slices(&self) -> Vec<&ResolvedEntity> {
        match &self.split {
            Some(split) => split.entities.iter().collect(),
            None => vec![self],
        }
    }
}
