//! Cohort's five tables: numbered migrations for the host's migration tool,
//! and the readiness check that proves they are installed.
//!
//! Cohort never creates or alters its tables at run time: put
//! [`migrations`] (or [`ddl`], all of them in one script) into your
//! migrations, and every Cohort entry point runs [`check_readiness`] for you.
//!
#![doc = include_str!("../../../../docs/schema.md")]

mod ddl;
pub(crate) mod evidence;
pub(crate) mod fence;
mod migrations;
mod readiness;
pub(crate) mod registry;
mod spec;

/// Least-privilege roles (`docs/security.md`).
pub use crate::validate::privileges::{RoleGrants, RoleNames, role_grants};
pub use migrations::{
    Layout, Migration, MigrationId, SCHEMA_VERSION, ddl, migrations, write_migration_files,
};
pub use readiness::{ReadinessProblem, ReadinessReport, ReadinessWarning, check_readiness};

use crate::error::Error;
use crate::sql::{Ident, QualifiedName};

/// The names of Cohort's tables, in creation order: the five of migration
/// 1, the registry of retained types (migration 5), the worker's lease
/// (migration 7).
pub const TABLES: [&str; 7] = [
    "sweep_run",
    "sweep_run_entity_summary",
    "sweep_run_row_detail",
    "sweep_row_handler_status",
    "retention_holds",
    "retention_entities",
    "sweep_worker_lease",
];

/// A validated PostgreSQL schema name: non-empty, at most 63 bytes, no NUL.
/// Any other character (capitals, spaces, quotes) is fine: it is always
/// written quoted.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SchemaName(Ident);

impl SchemaName {
    /// Validates a schema name.
    ///
    /// ```
    /// use cohort::schema::SchemaName;
    /// assert!(SchemaName::new("Retention Data").is_ok());
    /// assert!(SchemaName::new("").is_err());
    /// assert!(SchemaName::new("a\0b").is_err());
    /// ```
    pub fn new(name: &str) -> Result<SchemaName, Error> {
        Ident::new(name)
            .map(SchemaName)
            .map_err(|problem| Error::InvalidIdentifier {
                what: "schema",
                name: name.escape_default().to_string(),
                problem,
            })
    }

    /// The `public` schema.
    pub fn public() -> SchemaName {
        SchemaName(Ident::known("public"))
    }

    /// The raw name.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    pub(crate) fn ident(&self) -> &Ident {
        &self.0
    }

    /// One of Cohort's tables in this schema.
    pub(crate) fn table(&self, table: &'static str) -> QualifiedName {
        QualifiedName::new(self.0.clone(), Ident::known(table))
    }
}

impl Default for SchemaName {
    fn default() -> Self {
        SchemaName::public()
    }
}

impl std::fmt::Display for SchemaName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
