//! Cohort's numbered schema migrations, for the host's migration tool.

use std::path::{Path, PathBuf};

use super::SchemaName;
use super::ddl::{down_sql, up_sql};
use super::spec::MigrationInfo;

pub use crate::error::readiness::MigrationId;

/// Every migration, in order. Append only: a published migration's SQL is
/// frozen (hosts' migration tools checksum it).
pub(super) const MIGRATIONS: [MigrationInfo; 12] = [
    MigrationInfo {
        version: 1,
        name: "cohort_tables",
        summary: "Cohort's five tables, their keys, checks and indexes",
        data_step: None,
    },
    MigrationInfo {
        version: 2,
        name: "cohort_entity_fence",
        summary: "the entity fence trigger on retention_holds",
        data_step: None,
    },
    MigrationInfo {
        version: 3,
        name: "cohort_row_handlers",
        summary: "the row-handler queue: dead letters without a row detail, one delivery per row at a time",
        data_step: None,
    },
    MigrationInfo {
        version: 4,
        name: "cohort_evidence_chain",
        summary: "the evidence hash chain on the ledger and the holds, existing rows sealed",
        data_step: Some(super::evidence::seal_existing),
    },
    MigrationInfo {
        version: 5,
        name: "cohort_entity_registry",
        summary: "the registry of retained types; holds written with plain SQL are stored with their row's canonical record id",
        data_step: None,
    },
    MigrationInfo {
        version: 6,
        name: "cohort_erasure_subject",
        summary: "an erasure run records a keyed hash of its subject, covered by the run's chain link",
        data_step: None,
    },
    MigrationInfo {
        version: 7,
        name: "cohort_leases",
        summary: "runs hold a renewed lease instead of a session lock, and the scheduled worker a lease of its own",
        data_step: None,
    },
    MigrationInfo {
        version: 8,
        name: "cohort_matters",
        summary: "matter holds: a scope (a data subject, or a type with an anchor window) that protects every row in it, fenced, with an evidence chain of its events",
        data_step: None,
    },
    MigrationInfo {
        version: 9,
        name: "cohort_subject_access",
        summary: "the record of subject access exports (who asked, when, counts per type, the subject only as a keyed hash); an erasure names the erasure it replays",
        data_step: None,
    },
    MigrationInfo {
        version: 10,
        name: "cohort_disposition",
        summary: "disposition review: the batches sweeps freeze for review instead of changing them, their record ids, and the evidence chain of the decisions on them",
        data_step: None,
    },
    MigrationInfo {
        version: 11,
        name: "cohort_archive",
        summary: "the archive strategy: the ledger accepts Archive, and each archive batch's count and checksum are recorded",
        data_step: None,
    },
    MigrationInfo {
        version: 12,
        name: "cohort_events",
        summary: "event-based retention: the events a rule may count its period from, withdrawn never deleted, and their evidence chain",
        data_step: None,
    },
];

/// The schema version this library needs: the number of its last migration.
/// Readiness fails on a database whose recorded version is lower.
pub const SCHEMA_VERSION: i64 = 12;

pub(super) fn migration_ids() -> impl Iterator<Item = MigrationId> {
    MIGRATIONS.iter().map(|m| MigrationId {
        version: m.version,
        name: m.name,
    })
}

/// One of Cohort's schema migrations, rendered for a schema.
///
/// Each migration's `up` ends by recording its version as the comment on
/// `sweep_run` (`cohort schema version N`), which is how readiness knows the
/// installed version. Its SQL never changes once published, so migration
/// tools that checksum applied migrations (sqlx, refinery) stay happy.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Migration {
    /// Its number (1, 2, ...): apply in this order.
    pub version: i64,
    /// Its name, `snake_case`, starting with `cohort_`.
    pub name: &'static str,
    /// One line on what it does.
    pub summary: &'static str,
    /// The SQL that applies it: several statements, to run in one
    /// transaction (as sqlx, refinery and diesel do by default). Re-running
    /// it is harmless.
    pub up: String,
    /// The SQL that reverts it, where that loses no data; `None` for
    /// migrations that create tables (reverting would drop the ledger and
    /// the holds).
    pub down: Option<String>,
}

impl Migration {
    /// Its number and name.
    pub fn id(&self) -> MigrationId {
        MigrationId {
            version: self.version,
            name: self.name,
        }
    }
}

/// Cohort's migrations for `schema`, in the order to apply them.
///
/// Migration 1 (`cohort_tables`) creates the schema if missing and the five
/// tables; migration 2 (`cohort_entity_fence`) adds the trigger on
/// `retention_holds` that takes the entity fence for holds written with
/// plain SQL; migration 3 (`cohort_row_handlers`) adjusts the row-handler
/// queue; migration 4 (`cohort_evidence_chain`) adds the evidence hash chain
/// (see [`crate::evidence`]) and seals the rows already there; migration 5
/// (`cohort_entity_registry`) adds the registry of retained types through
/// which the fence trigger stores a plain-SQL hold's record id as its row's
/// canonical text; migration 6 (`cohort_erasure_subject`) records an
/// erasure's keyed subject hash in its run's chain link; migration 7
/// (`cohort_leases`) gives runs and the scheduled worker leases instead of
/// session locks; migration 8 (`cohort_matters`) adds matter holds;
/// migration 9 (`cohort_subject_access`) the record of subject access
/// exports; migration 10 (`cohort_disposition`) disposition review;
/// migration 11 (`cohort_archive`) the archive strategy. The last one's
/// version is [`SCHEMA_VERSION`].
///
/// ```
/// let schema = cohort::schema::SchemaName::new("retention")?;
/// let migrations = cohort::schema::migrations(&schema);
/// assert_eq!(migrations[0].version, 1);
/// assert_eq!(migrations.last().map(|m| m.version), Some(cohort::schema::SCHEMA_VERSION));
/// assert!(migrations[0].up.contains(r#"CREATE TABLE IF NOT EXISTS "retention"."sweep_run""#));
/// # Ok::<(), cohort::Error>(())
/// ```
pub fn migrations(schema: &SchemaName) -> Vec<Migration> {
    MIGRATIONS
        .iter()
        .map(|info| Migration {
            version: info.version,
            name: info.name,
            summary: info.summary,
            up: up_sql(schema, info),
            down: down_sql(schema, info),
        })
        .collect()
}

/// Every migration's `up` SQL, concatenated in order: all of Cohort's schema
/// in one script, for hosts that keep it in one migration file.
///
/// Applying it to a database at any earlier version brings it to
/// [`SCHEMA_VERSION`] (each migration is harmless to re-run). When a later
/// Cohort release adds a migration, either add a migration file holding just
/// that migration's [`Migration::up`], or one holding the new `ddl` whole.
///
/// The schema name is always written quoted, so names that need quoting
/// (capitals, spaces, quotes) work as given.
///
/// ```
/// let sql = cohort::schema::ddl(&cohort::schema::SchemaName::new("Retention")?);
/// assert!(sql.contains(r#"CREATE TABLE IF NOT EXISTS "Retention"."sweep_run""#));
/// assert!(sql.ends_with(&format!(
///     "IS 'cohort schema version {}';\n",
///     cohort::schema::SCHEMA_VERSION
/// )));
/// # Ok::<(), cohort::Error>(())
/// ```
pub fn ddl(schema: &SchemaName) -> String {
    migrations(schema)
        .into_iter()
        .map(|m| m.up)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The file layout of a migration tool, for [`write_migration_files`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Layout {
    /// sqlx (`sqlx::migrate!`, `sqlx migrate run`): `0001_cohort_tables.sql`
    /// for a migration without `down`, `0002_cohort_entity_fence.up.sql`
    /// and `.down.sql` for one with.
    Sqlx,
    /// refinery (`embed_migrations!`): `V1__cohort_tables.sql`, up only
    /// (refinery has no down migrations).
    Refinery,
}

impl Layout {
    fn files(self, m: &Migration) -> Vec<(String, &str)> {
        match self {
            Layout::Sqlx => match &m.down {
                None => vec![(format!("{:04}_{}.sql", m.version, m.name), m.up.as_str())],
                Some(down) => vec![
                    (format!("{:04}_{}.up.sql", m.version, m.name), m.up.as_str()),
                    (
                        format!("{:04}_{}.down.sql", m.version, m.name),
                        down.as_str(),
                    ),
                ],
            },
            Layout::Refinery => vec![(format!("V{}__{}.sql", m.version, m.name), m.up.as_str())],
        }
    }
}

/// Writes Cohort's migrations for `schema` into `dir` (created if missing) as
/// files `layout`'s tool reads, and returns their paths, in order.
///
/// Files already there with the same content are left alone; if any file is
/// there with other content (another schema, an edited file), nothing is
/// written and the error names every such file. The versions are Cohort's
/// own (1, 2, ...): keep the files in a directory of their own with their
/// own history table (see the module docs), or renumber them if your
/// directory's versions collide.
///
/// ```no_run
/// use cohort::schema::{Layout, SchemaName, write_migration_files};
/// // Once per Cohort upgrade (a build step or a one-off), then commit the files.
/// let schema = SchemaName::new("retention")?;
/// let written = write_migration_files("migrations/cohort", &schema, Layout::Sqlx)?;
/// assert_eq!(written.len(), 14);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// An I/O error from reading or writing the files, or
/// [`std::io::ErrorKind::AlreadyExists`] when files differ.
pub fn write_migration_files(
    dir: impl AsRef<Path>,
    schema: &SchemaName,
    layout: Layout,
) -> std::io::Result<Vec<PathBuf>> {
    let dir = dir.as_ref();
    std::fs::create_dir_all(dir)?;
    let all = migrations(schema);
    let mut to_write: Vec<(PathBuf, &str)> = Vec::new();
    let mut paths = Vec::new();
    let mut conflicts = Vec::new();
    for m in &all {
        for (name, content) in layout.files(m) {
            let path = dir.join(name);
            match std::fs::read(&path) {
                Ok(existing) if existing == content.as_bytes() => {}
                Ok(_) => conflicts.push(path.display().to_string()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    to_write.push((path.clone(), content))
                }
                Err(e) => return Err(e),
            }
            paths.push(path);
        }
    }
    if !conflicts.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            format!(
                "these files exist with other content (another schema, or edited); nothing was written: {}",
                conflicts.join(", ")
            ),
        ));
    }
    for (path, content) in to_write {
        std::fs::write(path, content)?;
    }
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_migration_is_the_schema_version_and_versions_count_up_from_one() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version, i as i64 + 1);
            assert!(m.name.starts_with("cohort_"));
            assert!(
                m.name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            );
        }
        assert_eq!(MIGRATIONS.last().map(|m| m.version), Some(SCHEMA_VERSION));
    }

    #[test]
    fn ddl_is_every_up_in_order() {
        let schema = SchemaName::public();
        let all = migrations(&schema);
        let joined = ddl(&schema);
        let first = joined.find(&all[0].up).expect("first");
        let second = joined.find(&all[1].up).expect("second");
        let fourth = joined.find(&all[3].up).expect("fourth");
        assert!(first < second && second < fourth);
        assert_eq!(all[0].down, None);
        assert!(all[1].down.is_some());
    }

    #[test]
    fn layouts_name_files_as_their_tools_expect() {
        let all = migrations(&SchemaName::public());
        let names = |layout: Layout| -> Vec<String> {
            all.iter()
                .flat_map(|m| layout.files(m).into_iter().map(|(n, _)| n))
                .collect()
        };
        assert_eq!(
            names(Layout::Sqlx),
            [
                "0001_cohort_tables.sql",
                "0002_cohort_entity_fence.up.sql",
                "0002_cohort_entity_fence.down.sql",
                "0003_cohort_row_handlers.sql",
                "0004_cohort_evidence_chain.up.sql",
                "0004_cohort_evidence_chain.down.sql",
                "0005_cohort_entity_registry.sql",
                "0006_cohort_erasure_subject.up.sql",
                "0006_cohort_erasure_subject.down.sql",
                "0007_cohort_leases.sql",
                "0008_cohort_matters.sql",
                "0009_cohort_subject_access.sql",
                "0010_cohort_disposition.sql",
                "0011_cohort_archive.sql",
                "0012_cohort_events.sql"
            ]
        );
        assert_eq!(
            names(Layout::Refinery),
            [
                "V1__cohort_tables.sql",
                "V2__cohort_entity_fence.sql",
                "V3__cohort_row_handlers.sql",
                "V4__cohort_evidence_chain.sql",
                "V5__cohort_entity_registry.sql",
                "V6__cohort_erasure_subject.sql",
                "V7__cohort_leases.sql",
                "V8__cohort_matters.sql",
                "V9__cohort_subject_access.sql",
                "V10__cohort_disposition.sql",
                "V11__cohort_archive.sql",
                "V12__cohort_events.sql"
            ]
        );
    }

    #[test]
    fn writing_files_is_idempotent_and_refuses_to_overwrite_other_content() {
        let dir = std::env::temp_dir().join(format!(
            "cohort-migration-files-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        let public = SchemaName::public();
        let first = write_migration_files(&dir, &public, Layout::Sqlx).expect("write");
        assert_eq!(first.len(), 15);
        let again = write_migration_files(&dir, &public, Layout::Sqlx).expect("rewrite");
        assert_eq!(first, again);
        let other = SchemaName::new("retention").expect("valid");
        let err = write_migration_files(&dir, &other, Layout::Sqlx).expect_err("conflict");
        assert_eq!(err.kind(), std::io::ErrorKind::AlreadyExists);
        let text = err.to_string();
        assert!(text.contains("0001_cohort_tables.sql"), "{text}");
        assert!(text.contains("0002_cohort_entity_fence.down.sql"), "{text}");
        // Nothing changed.
        let content = std::fs::read_to_string(&first[0]).expect("read");
        assert_eq!(content, migrations(&public)[0].up);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
