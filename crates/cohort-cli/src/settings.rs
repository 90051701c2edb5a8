//! Settings: `cohort.toml`, then `COHORT_*` environment variables (the
//! environment wins), then the command line for the few flags that exist.
//! The database URL comes from `--database-url`, else `DATABASE_URL`, else
//! `database_url` in the settings (`COHORT_DATABASE_URL`).

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use figment::Figment;
use figment::providers::{Env, Format, Toml};
use serde::{Deserialize, Deserializer};

use crate::error::{CliError, CliResult};

/// The settings file read when `--config` is not given (if it exists).
pub(crate) const DEFAULT_SETTINGS_FILE: &str = "cohort.toml";

/// The model file used when neither the settings nor `--model` name one.
pub(crate) const DEFAULT_MODEL_FILE: &str = "cohort-model.toml";

/// The keys the environment may set, as `COHORT_<KEY>` (nested keys with
/// `__`: `COHORT_CONVENTIONS__TENANT`). Other `COHORT_*` variables (the test
/// harness's, for example) are not settings and are ignored.
pub(crate) const ENV_KEYS: &[&str] = &[
    "database_url",
    "model",
    "schema",
    "default_table_schema",
    "batch_size",
    "lock_wait",
    "fence_wait",
    "observer_timeout",
    "settle_timeout",
    "inactive_hold_retention",
    "partition_drops",
    "connection_mode",
    "batch_order",
    "hash_key",
    "certificate_key",
    "worker.schedule",
    "worker.time_zone",
    "worker.dry_run",
    "worker.kill_switch",
    "worker.kill_switch_file",
    "worker.tenants",
    "worker.vacuum_min_rows",
    "conventions.record_id",
    "conventions.tenant",
    "conventions.soft_delete",
    "conventions.deleted_at",
    "conventions.anonymised_at",
];

/// Everything the command can be configured with. Field names are the keys
/// of `cohort.toml` and, upper-cased with the `COHORT_` prefix, of the
/// environment.
#[derive(Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct Settings {
    /// The database (lowest priority: `DATABASE_URL` and `--database-url` win).
    #[serde(deserialize_with = "stringish_opt")]
    pub(crate) database_url: Option<String>,
    /// The model file, relative to the current directory.
    #[serde(deserialize_with = "stringish_path")]
    pub(crate) model: PathBuf,
    /// The schema of Cohort's own tables.
    #[serde(deserialize_with = "stringish")]
    pub(crate) schema: String,
    /// The schema of retained tables whose model entry names none.
    #[serde(deserialize_with = "stringish")]
    pub(crate) default_table_schema: String,
    /// Rows per committed batch.
    pub(crate) batch_size: u32,
    /// Seconds a range statement waits for a locked row.
    pub(crate) lock_wait: f64,
    /// Seconds a batch waits for its type's entity fence.
    pub(crate) fence_wait: f64,
    /// Seconds an observer (the progress display) may take per event.
    pub(crate) observer_timeout: f64,
    /// Seconds after which a run still `Started` whose owner is gone is
    /// settled.
    pub(crate) settle_timeout: f64,
    /// Seconds inactive holds are kept before `holds prune` deletes them
    /// (unset: forever).
    pub(crate) inactive_hold_retention: Option<f64>,
    /// Whether a purge may drop wholly expired partitions of a table
    /// range-partitioned on its anchor (docs/partitions.md).
    pub(crate) partition_drops: bool,
    /// The key of the `hash` anonymiser (HMAC-SHA256). Never printed.
    #[serde(deserialize_with = "stringish_opt")]
    pub(crate) hash_key: Option<String>,
    /// The key of erasure certificates' subject HMAC. Never printed.
    #[serde(deserialize_with = "stringish_opt")]
    pub(crate) certificate_key: Option<String>,
    /// Field-name conventions for role columns.
    pub(crate) conventions: cohort::Conventions,
    /// `direct`, or `transaction_pooled` behind a pooler in transaction mode
    /// (PgBouncer, RDS Proxy, a managed pooler): see docs/design.md,
    /// "Through a connection pooler".
    pub(crate) connection_mode: cohort::ConnectionMode,
    /// `auto`, `anchor` or `physical`: the order a sweep's batches take
    /// through a table (docs/design.md, "Two batch orders").
    pub(crate) batch_order: cohort::BatchOrder,
    /// The scheduled worker (`cohort worker`).
    pub(crate) worker: WorkerSettings,
}

/// The `[worker]` section: `cohort worker`'s schedule and tenants.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct WorkerSettings {
    /// A cron pattern (five fields, or six with seconds first).
    #[serde(deserialize_with = "stringish")]
    pub(crate) schedule: String,
    /// The IANA time zone the schedule is read in (UTC when unset).
    #[serde(deserialize_with = "stringish_opt")]
    pub(crate) time_zone: Option<String>,
    /// Scheduled sweeps change no row.
    pub(crate) dry_run: bool,
    /// When on, no scheduled pass starts.
    pub(crate) kill_switch: bool,
    /// While this file exists, no scheduled pass starts (read before each pass).
    #[serde(deserialize_with = "stringish_opt_path")]
    pub(crate) kill_switch_file: Option<PathBuf>,
    /// The tenants swept at each occurrence (UUIDs); none: the tenantless
    /// tables only.
    pub(crate) tenants: Vec<uuid::Uuid>,
    /// Each pass ends with VACUUM (ANALYZE) of the tables it changed at
    /// least this many rows in; unset: no VACUUM.
    pub(crate) vacuum_min_rows: Option<u64>,
}

impl Default for WorkerSettings {
    fn default() -> Self {
        let w = cohort::WorkerOptions::default();
        WorkerSettings {
            schedule: w.schedule,
            time_zone: w.time_zone,
            dry_run: w.dry_run,
            kill_switch: w.kill_switch,
            kill_switch_file: None,
            tenants: Vec::new(),
            vacuum_min_rows: w.vacuum_min_rows,
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        let o = cohort::Options::default();
        Settings {
            database_url: None,
            model: PathBuf::from(DEFAULT_MODEL_FILE),
            schema: o.schema,
            default_table_schema: o.default_table_schema,
            batch_size: o.batch_size,
            lock_wait: o.lock_wait.as_secs_f64(),
            fence_wait: o.fence_wait.as_secs_f64(),
            observer_timeout: o.observer_timeout.as_secs_f64(),
            settle_timeout: o.settle_timeout.as_secs_f64(),
            inactive_hold_retention: o.inactive_hold_retention.map(|d| d.as_secs_f64()),
            partition_drops: o.partition_drops,
            hash_key: None,
            certificate_key: None,
            conventions: o.conventions,
            connection_mode: o.connection_mode,
            batch_order: o.batch_order,
            worker: WorkerSettings::default(),
        }
    }
}

impl fmt::Debug for Settings {
    /// Never shows the database password or the hash key.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field(
                "database_url",
                &self.database_url.as_deref().map(crate::db::redact_url),
            )
            .field("model", &self.model)
            .field("schema", &self.schema)
            .field("default_table_schema", &self.default_table_schema)
            .field("batch_size", &self.batch_size)
            .field("hash_key", &self.hash_key.as_ref().map(|_| "***"))
            .field(
                "certificate_key",
                &self.certificate_key.as_ref().map(|_| "***"),
            )
            .field("worker", &self.worker)
            .finish_non_exhaustive()
    }
}

/// Environment values are parsed as TOML values by figment (`COHORT_SCHEMA=2024`
/// is a number); names and keys are text whatever they look like.
fn stringish<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        S(String),
        I(i64),
        U(u64),
        F(f64),
        B(bool),
    }
    Ok(match Raw::deserialize(d)? {
        Raw::S(s) => s,
        Raw::I(i) => i.to_string(),
        Raw::U(u) => u.to_string(),
        Raw::F(f) => f.to_string(),
        Raw::B(b) => b.to_string(),
    })
}

fn stringish_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    stringish(d).map(Some)
}

fn stringish_opt_path<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PathBuf>, D::Error> {
    stringish(d).map(|s| Some(PathBuf::from(s)))
}

fn stringish_path<'de, D: Deserializer<'de>>(d: D) -> Result<PathBuf, D::Error> {
    stringish(d).map(PathBuf::from)
}

/// Reads the settings file (the one given, else `cohort.toml` if present)
/// and the environment.
pub(crate) fn load(config: Option<&Path>) -> CliResult<Settings> {
    let file = match config {
        Some(path) => {
            if !path.is_file() {
                return Err(CliError::Settings(format!(
                    "the settings file {} does not exist (run `cohort init` to write one)",
                    path.display()
                )));
            }
            Some(path.to_path_buf())
        }
        None => {
            let default = PathBuf::from(DEFAULT_SETTINGS_FILE);
            default.is_file().then_some(default)
        }
    };
    let mut figment = Figment::new();
    if let Some(file) = &file {
        figment = figment.merge(Toml::file_exact(file));
    }
    figment = figment.merge(
        Env::prefixed("COHORT_")
            .split("__")
            .only(ENV_KEYS)
            // Keys are matched without regard to case; figment lowercases them.
            .lowercase(true),
    );
    let text = file.as_ref().and_then(|f| std::fs::read_to_string(f).ok());
    let settings: Settings = figment.extract().map_err(|e| {
        let mut lines = Vec::new();
        for err in e {
            lines.push(match unknown_key(&err, file.as_deref(), text.as_deref()) {
                Some(said) => said,
                None => redact_figment_error(&err.to_string()),
            });
        }
        CliError::Settings(lines.join("; "))
    })?;
    Ok(settings)
}

/// An unknown key, as the model file's diagnostics say it: the file and
/// line, the key's path, and the nearest known key.
fn unknown_key(err: &figment::Error, file: Option<&Path>, text: Option<&str>) -> Option<String> {
    let figment::error::Kind::UnknownField(found, expected) = &err.kind else {
        return None;
    };
    let section: Vec<&str> = err
        .path
        .iter()
        .map(String::as_str)
        .filter(|p| *p != "default")
        .take_while(|p| p != found)
        .collect();
    let path = section
        .iter()
        .copied()
        .chain(std::iter::once(found.as_str()))
        .collect::<Vec<_>>()
        .join(".");
    let hint = crate::model::parse::reader::closest(found, expected)
        .map(|k| format!("; did you mean `{k}`?"))
        .unwrap_or_else(|| format!("; the keys here: {}", expected.join(", ")));
    // The line: the key at the start of a line, inside its `[section]`.
    let header = (!section.is_empty()).then(|| format!("[{}]", section.join(".")));
    let line = text.and_then(|t| {
        let mut inside = header.is_none();
        t.lines().enumerate().find_map(|(n, l)| {
            let l = l.trim_start();
            if l.starts_with('[') {
                inside = header.as_deref().is_some_and(|h| l.starts_with(h));
                return None;
            }
            let key = l.split(['=', ' ', '\t']).next().unwrap_or("");
            (inside && key == found).then_some(n + 1)
        })
    });
    let place = match (file, line) {
        (Some(f), Some(n)) => format!("{}:{n}: ", f.display()),
        (Some(f), None) => format!("{}: ", f.display()),
        (None, _) => "COHORT_* environment: ".to_owned(),
    };
    Some(format!("{place}{path}: unknown key `{found}`{hint}"))
}

/// Figment's messages may quote the offending value: never a URL's password
/// or the hash key.
fn redact_figment_error(message: &str) -> String {
    message
        .split(' ')
        .map(|word| {
            if word.contains("://") {
                crate::db::redact_url(word.trim_matches(|c| c == '"' || c == '`'))
            } else {
                word.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn seconds(name: &'static str, value: f64) -> CliResult<Duration> {
    Duration::try_from_secs_f64(value).map_err(|e| {
        CliError::Settings(format!(
            "{name} = {value}: {e}; give a number of seconds (0.5, 30)"
        ))
    })
}

impl Settings {
    /// The library's options from these settings; the library validates
    /// their ranges when the handle is built.
    pub(crate) fn options(&self) -> CliResult<cohort::Options> {
        // Built from the defaults so options the library adds later keep
        // their default values (today every field is set: `allow`, not
        // `expect`, so a new field does not turn this into a warning).
        #[allow(clippy::needless_update)]
        let o = cohort::Options {
            schema: self.schema.clone(),
            default_table_schema: self.default_table_schema.clone(),
            batch_size: self.batch_size,
            lock_wait: seconds("lock_wait", self.lock_wait)?,
            fence_wait: seconds("fence_wait", self.fence_wait)?,
            observer_timeout: seconds("observer_timeout", self.observer_timeout)?,
            settle_timeout: seconds("settle_timeout", self.settle_timeout)?,
            inactive_hold_retention: self
                .inactive_hold_retention
                .map(|s| seconds("inactive_hold_retention", s))
                .transpose()?,
            conventions: self.conventions.clone(),
            partition_drops: self.partition_drops,
            connection_mode: self.connection_mode,
            batch_order: self.batch_order,
            worker: self.worker_options(),
            ..cohort::Options::default()
        };
        let problems = o.validate();
        if !problems.is_empty() {
            let lines: Vec<String> = problems.iter().map(ToString::to_string).collect();
            return Err(CliError::Settings(lines.join("; ")));
        }
        Ok(o)
    }

    /// The library's worker options from the `[worker]` section (the tenants
    /// and the kill-switch file are the command's own: it gives the worker
    /// a tenant source and a kill switch).
    fn worker_options(&self) -> cohort::WorkerOptions {
        let mut w = cohort::WorkerOptions::default();
        w.schedule = self.worker.schedule.clone();
        w.time_zone = self.worker.time_zone.clone();
        w.dry_run = self.worker.dry_run;
        w.kill_switch = self.worker.kill_switch;
        w.vacuum_min_rows = self.worker.vacuum_min_rows;
        w
    }

    /// Cohort's schema, validated.
    pub(crate) fn schema_name(&self) -> CliResult<cohort::schema::SchemaName> {
        cohort::schema::SchemaName::new(&self.schema)
            .map_err(|e| CliError::Settings(format!("schema: {e}")))
    }

    /// The database URL: `--database-url`, else `DATABASE_URL`, else the
    /// settings' `database_url`.
    pub(crate) fn database_url(&self, flag: Option<&str>) -> CliResult<String> {
        if let Some(url) = flag {
            return Ok(url.to_owned());
        }
        if let Ok(url) = std::env::var("DATABASE_URL")
            && !url.is_empty()
        {
            return Ok(url);
        }
        if let Some(url) = &self.database_url {
            return Ok(url.clone());
        }
        // As psql does: the PG* variables alone name a database (sqlx reads
        // PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE, PGSSLMODE and the
        // password file into an empty URL's options).
        let set = |v: &str| std::env::var_os(v).is_some_and(|x| !x.is_empty());
        if ["PGHOST", "PGPORT", "PGUSER", "PGPASSWORD", "PGDATABASE"]
            .iter()
            .any(|v| set(v))
        {
            return Ok("postgres://".to_owned());
        }
        if set("PGSERVICE") {
            return Err(CliError::Usage(
                "PGSERVICE is set, but service files are not read: set PGHOST, PGPORT, PGUSER and \
                 PGDATABASE (or DATABASE_URL) instead"
                    .into(),
            ));
        }
        Err(CliError::NoDatabase)
    }

    /// Where the database URL came from, for an authentication failure's
    /// message (never the URL itself).
    pub(crate) fn database_url_source(&self, flag: Option<&str>) -> &'static str {
        if flag.is_some() {
            "--database-url"
        } else if std::env::var("DATABASE_URL").is_ok_and(|u| !u.is_empty()) {
            "DATABASE_URL"
        } else if self.database_url.is_some() {
            "database_url in cohort.toml (or COHORT_DATABASE_URL)"
        } else {
            "the PG* environment variables (PGPASSWORD, or the password file ~/.pgpass)"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_debug_form_hides_secrets() {
        let s = Settings {
            database_url: Some("postgres://ann:s3cret@db/app".into()),
            hash_key: Some("k3y".into()),
            certificate_key: Some("c3rt".into()),
            ..Settings::default()
        };
        let shown = format!("{s:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(!shown.contains("k3y"), "{shown}");
        assert!(!shown.contains("c3rt"), "{shown}");
    }

    #[test]
    fn figment_errors_lose_passwords() {
        let m = redact_figment_error("invalid value \"postgres://a:pw@h/d\" for key");
        assert!(!m.contains("pw@"), "{m}");
    }

    #[test]
    fn defaults_are_the_librarys() {
        let o = Settings::default().options().expect("valid defaults");
        assert_eq!(o, cohort::Options::default());
    }
}
