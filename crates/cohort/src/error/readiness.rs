//! What a readiness check reports about Cohort's tables. Produced by
//! `schema::check_readiness`; defined here, beside the error that carries it
//! ([`Error::SchemaNotReady`]), so the one error composes nothing from the
//! layers above it.

use std::fmt;

use super::Error;
use crate::sql::SchemaName;

/// A migration's number and name, as readiness reports missing ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MigrationId {
    /// Its number: migrations apply in this order, and the installed
    /// version is the number of the last one applied.
    pub version: i64,
    /// Its name, `snake_case`, starting with `cohort_`.
    pub name: &'static str,
}

impl fmt::Display for MigrationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.version, self.name)
    }
}

/// Something that stops Cohort from running against the installed tables.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReadinessProblem {
    /// The installed schema version is older than this library needs (or
    /// none is recorded): these migrations are missing. Elements those
    /// migrations add are not judged separately.
    MissingMigrations {
        /// The version recorded on `sweep_run` (`None`: no Cohort version
        /// marker, as on tables made by an older `ddl()` or by hand).
        installed: Option<i64>,
        /// The version this library needs ([`crate::schema::SCHEMA_VERSION`]).
        required: i64,
        /// The migrations to apply, in order.
        missing: Vec<MigrationId>,
    },
    /// The table does not exist in the schema (or is not an ordinary or partitioned table).
    MissingTable {
        /// The table.
        table: &'static str,
    },
    /// A column Cohort reads or writes is missing.
    MissingColumn {
        /// The table.
        table: &'static str,
        /// The column.
        column: &'static str,
    },
    /// A column has another type than Cohort writes.
    WrongColumnType {
        /// The table.
        table: &'static str,
        /// The column.
        column: &'static str,
        /// The type Cohort needs.
        expected: &'static str,
        /// The type installed.
        found: String,
    },
    /// A column's NOT NULL constraint differs from what Cohort needs.
    WrongNullability {
        /// The table.
        table: &'static str,
        /// The column.
        column: &'static str,
        /// Whether Cohort needs the column NOT NULL.
        expected_not_null: bool,
    },
    /// The primary key is missing or on other columns.
    MissingPrimaryKey {
        /// The table.
        table: &'static str,
        /// The key columns Cohort needs.
        columns: &'static [&'static str],
    },
    /// A unique key Cohort relies on is missing (or partial, or on expressions).
    MissingUniqueIndex {
        /// The table.
        table: &'static str,
        /// The key columns.
        columns: &'static [&'static str],
    },
    /// The unique key exists but is deferrable, which `ON CONFLICT` cannot use
    /// and which lets duplicates exist until commit.
    DeferrableUniqueIndex {
        /// The table.
        table: &'static str,
        /// The key columns.
        columns: &'static [&'static str],
    },
    /// A named CHECK constraint is missing.
    MissingCheck {
        /// The table.
        table: &'static str,
        /// The constraint's name.
        constraint: &'static str,
    },
    /// One of Cohort's trigger functions is missing from the schema.
    MissingFunction {
        /// The function (in Cohort's schema, no arguments).
        function: &'static str,
    },
    /// One of Cohort's trigger functions exists but is not Cohort's: its
    /// body, language, return type or `search_path` setting differ.
    ChangedFunction {
        /// The function (in Cohort's schema, no arguments).
        function: &'static str,
    },
    /// No trigger on the table calls Cohort's trigger function.
    MissingTrigger {
        /// The table.
        table: &'static str,
        /// The trigger Cohort creates.
        trigger: &'static str,
    },
    /// The trigger calling Cohort's function is disabled (`ALTER TABLE ...
    /// DISABLE TRIGGER`, or enabled for replica sessions only), so it does
    /// not fire in ordinary sessions.
    DisabledTrigger {
        /// The table.
        table: &'static str,
        /// The trigger's name as installed.
        trigger: String,
    },
    /// The trigger calling Cohort's function fires at other times, on other
    /// events, per statement, on some columns only, or under a `WHEN`
    /// condition.
    MisdefinedTrigger {
        /// The table.
        table: &'static str,
        /// The trigger's name as installed.
        trigger: String,
        /// How it must fire.
        expected: String,
    },
}

impl ReadinessProblem {
    /// The table the problem is on, if it is on one.
    pub fn table(&self) -> Option<&'static str> {
        match self {
            ReadinessProblem::MissingMigrations { .. }
            | ReadinessProblem::MissingFunction { .. }
            | ReadinessProblem::ChangedFunction { .. } => None,
            ReadinessProblem::MissingTable { table }
            | ReadinessProblem::MissingColumn { table, .. }
            | ReadinessProblem::WrongColumnType { table, .. }
            | ReadinessProblem::WrongNullability { table, .. }
            | ReadinessProblem::MissingPrimaryKey { table, .. }
            | ReadinessProblem::MissingUniqueIndex { table, .. }
            | ReadinessProblem::DeferrableUniqueIndex { table, .. }
            | ReadinessProblem::MissingCheck { table, .. }
            | ReadinessProblem::MissingTrigger { table, .. }
            | ReadinessProblem::DisabledTrigger { table, .. }
            | ReadinessProblem::MisdefinedTrigger { table, .. } => Some(table),
        }
    }
}

fn list(ids: &[MigrationId]) -> String {
    ids.iter()
        .map(|m| m.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn version_text(v: Option<i64>) -> String {
    v.map_or_else(|| "none".to_owned(), |v| v.to_string())
}

impl fmt::Display for ReadinessProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadinessProblem::MissingMigrations {
                installed,
                required,
                missing,
            } => match installed {
                Some(v) => write!(
                    f,
                    "Cohort's schema is at version {v}, this library needs {required}: apply migration(s) {}",
                    list(missing)
                ),
                None => write!(
                    f,
                    "no Cohort schema version is recorded on sweep_run (this library needs {required}): apply migration(s) {}",
                    list(missing)
                ),
            },
            ReadinessProblem::MissingTable { table } => write!(f, "table {table} is missing"),
            ReadinessProblem::MissingColumn { table, column } => {
                write!(f, "column {table}.{column} is missing")
            }
            ReadinessProblem::WrongColumnType {
                table,
                column,
                expected,
                found,
            } => {
                write!(f, "column {table}.{column} is {found}, expected {expected}")
            }
            ReadinessProblem::WrongNullability {
                table,
                column,
                expected_not_null,
            } => {
                if *expected_not_null {
                    write!(f, "column {table}.{column} must be NOT NULL")
                } else {
                    write!(f, "column {table}.{column} must allow NULL")
                }
            }
            ReadinessProblem::MissingPrimaryKey { table, columns } => {
                write!(
                    f,
                    "table {table} needs PRIMARY KEY ({})",
                    columns.join(", ")
                )
            }
            ReadinessProblem::MissingUniqueIndex { table, columns } => write!(
                f,
                "table {table} needs a unique index or constraint on ({}), not partial, not on expressions",
                columns.join(", ")
            ),
            ReadinessProblem::DeferrableUniqueIndex { table, columns } => write!(
                f,
                "the unique constraint on {table} ({}) must not be deferrable",
                columns.join(", ")
            ),
            ReadinessProblem::MissingCheck { table, constraint } => {
                write!(f, "table {table} lacks CHECK constraint {constraint}")
            }
            ReadinessProblem::MissingFunction { function } => {
                write!(f, "trigger function {function}() is missing")
            }
            ReadinessProblem::ChangedFunction { function } => write!(
                f,
                "trigger function {function}() is not Cohort's (its body, language, return type or search_path differ)"
            ),
            ReadinessProblem::MissingTrigger { table, trigger } => {
                write!(f, "table {table} lacks trigger {trigger}")
            }
            ReadinessProblem::DisabledTrigger { table, trigger } => {
                write!(f, "trigger {trigger} on {table} is disabled")
            }
            ReadinessProblem::MisdefinedTrigger {
                table,
                trigger,
                expected,
            } => write!(f, "trigger {trigger} on {table} must fire {expected}"),
        }
    }
}

/// Something that makes Cohort slower but not wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReadinessWarning {
    /// No index has these leading key columns.
    MissingIndex {
        /// The table.
        table: &'static str,
        /// The key columns an index should start with.
        columns: &'static [&'static str],
    },
    /// The installed schema version is newer than this library knows.
    /// Everything this library needs is there (otherwise there would be
    /// problems), so it runs; upgrade Cohort to match.
    NewerSchemaVersion {
        /// The version recorded on `sweep_run`.
        installed: i64,
        /// The newest version this library knows ([`crate::schema::SCHEMA_VERSION`]).
        supported: i64,
    },
}

impl fmt::Display for ReadinessWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadinessWarning::MissingIndex { table, columns } => write!(
                f,
                "table {table} has no index on ({}); Cohort works but is slower",
                columns.join(", ")
            ),
            ReadinessWarning::NewerSchemaVersion {
                installed,
                supported,
            } => write!(
                f,
                "Cohort's schema is at version {installed}, newer than this library's {supported}; upgrade Cohort"
            ),
        }
    }
}

/// The outcome of a readiness check: every problem and every warning at once.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReadinessReport {
    /// The schema checked.
    pub schema: SchemaName,
    /// The schema version recorded on `sweep_run` (the comment
    /// `cohort schema version N`), `None` when there is no such marker.
    pub installed_version: Option<i64>,
    /// The version this library needs: [`crate::schema::SCHEMA_VERSION`].
    pub required_version: i64,
    /// The migrations the database lacks, in the order to apply them (also
    /// reported as [`ReadinessProblem::MissingMigrations`]).
    pub missing_migrations: Vec<MigrationId>,
    /// What stops Cohort from running. Empty when ready.
    pub problems: Vec<ReadinessProblem>,
    /// What only slows it down.
    pub warnings: Vec<ReadinessWarning>,
}

impl ReadinessReport {
    /// True when there are no problems (warnings do not count).
    pub fn is_ready(&self) -> bool {
        self.problems.is_empty()
    }

    /// `Ok(self)` when ready, otherwise [`Error::SchemaNotReady`].
    pub fn into_result(self) -> Result<ReadinessReport, Error> {
        if self.is_ready() {
            Ok(self)
        } else {
            Err(Error::SchemaNotReady(self))
        }
    }
}

impl fmt::Display for ReadinessReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let versions = format!(
            "installed version: {}, required: {}",
            version_text(self.installed_version),
            self.required_version
        );
        if self.is_ready() {
            writeln!(f, "schema {:?}: ready ({versions})", self.schema.as_str())?;
        } else {
            writeln!(
                f,
                "schema {:?}: {} problem(s) ({versions})",
                self.schema.as_str(),
                self.problems.len()
            )?;
        }
        for p in &self.problems {
            writeln!(f, "  - {p}")?;
        }
        for w in &self.warnings {
            writeln!(f, "  ! {w}")?;
        }
        Ok(())
    }
}
