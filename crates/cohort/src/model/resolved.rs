//! A retained type as the engine uses it: every role settled, every column
//! checked against the live catalog.

use uuid::Uuid;

use super::{AnonymiseMethod, EntityDescriptor};
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
}

/// A column scrubbed by the `Anonymise` strategy.
#[derive(Debug, Clone)]
pub(crate) struct AnonymisedColumn {
    pub(crate) column: Column,
    pub(crate) method: AnonymiseMethod,
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
}

impl ResolvedEntity {
    /// The type's name, for the ledger and messages.
    pub(crate) fn type_name(&self) -> &'static str {
        self.descriptor.type_name
    }
}
