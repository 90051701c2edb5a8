//! Cohort's tables: numbered migrations for the host's migration tool,
//! and the readiness check that proves they are installed.
//!
//! Cohort never creates or alters its tables at run time: put
//! [`migrations`] (or [`ddl`], all of them in one script) into your
//! migrations, and every Cohort entry point runs [`check_readiness`] for you.
//!
#![doc = include_str!("../../../../docs/schema.md")]

mod ddl;
mod disposition;
mod events;
pub(crate) mod evidence;
pub(crate) mod fence;
mod matters;
mod migrations;
mod readiness;
pub(crate) mod registry;
mod spec;

pub use crate::validate::guards::{GUARD_SQLSTATE, GuardDdl, guard_ddl};
/// Least-privilege roles (`docs/security.md`).
pub use crate::validate::privileges::{RoleGrants, RoleNames, role_grants};
pub use migrations::{
    Layout, Migration, MigrationId, SCHEMA_VERSION, ddl, migrations, write_migration_files,
};
pub use readiness::{ReadinessProblem, ReadinessReport, ReadinessWarning, check_readiness};

use crate::error::Error;
use crate::sql::Ident;

/// The names of Cohort's tables, in creation order: the five of migration
/// 1, the registry of retained types (migration 5), the worker's lease
/// (migration 7), matter holds and their evidence (migration 8), subject
/// access exports (migration 9), disposition batches, their records and the
/// decisions on them (migration 10), archive batches (migration 11), events
/// and their evidence (migration 12).
pub const TABLES: [&str; 16] = [
    "sweep_run",
    "sweep_run_entity_summary",
    "sweep_run_row_detail",
    "sweep_row_handler_status",
    "retention_holds",
    "retention_entities",
    "sweep_worker_lease",
    "retention_matters",
    "retention_matter_events",
    "retention_subject_access",
    "retention_disposition_batches",
    "retention_disposition_records",
    "retention_disposition_decisions",
    "retention_archive_batches",
    "retention_events",
    "retention_event_log",
];

pub use crate::sql::SchemaName;

// The type is defined in the SQL layer (it only wraps a quoted identifier);
// its validating constructor is here, where the crate's error is known.
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
}
