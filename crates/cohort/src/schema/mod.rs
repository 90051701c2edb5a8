//! Cohort's five tables: their DDL for the host's migrations, and the readiness
//! check that proves they are installed.
//!
//! Cohort never creates or alters its tables at run time. Put the output of
//! [`ddl`] into a migration of your own, for example with sqlx:
//!
//! ```no_run
//! // build.rs or a one-off: write the migration file once, then commit it.
//! let schema = cohort::schema::SchemaName::new("retention")?;
//! std::fs::write("migrations/20260101000000_cohort.sql", cohort::schema::ddl(&schema))?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! and apply it with `sqlx migrate run` (or `sqlx::migrate!().run(&pool)`) before
//! the application starts. Then [`check_readiness`] (which every Cohort entry
//! point runs for you) confirms the tables are there.

mod ddl;
mod readiness;

pub use ddl::ddl;
pub use readiness::{ReadinessProblem, ReadinessReport, ReadinessWarning, check_readiness};

use crate::error::Error;
use crate::sql::{Ident, QualifiedName};

/// The names of Cohort's five tables, in creation order.
pub const TABLES: [&str; 5] = [
    "sweep_run",
    "sweep_run_entity_summary",
    "sweep_run_row_detail",
    "sweep_row_handler_status",
    "retention_holds",
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
