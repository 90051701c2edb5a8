//! Options: typed, deserialisable, validated at start-up.

mod schedule;

pub use schedule::Schedule;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::validation::ValidationProblem;
use crate::model::Conventions;

/// The largest batch Cohort accepts. A batch's memory (its record ids, and
/// the values a custom anonymiser computes) grows with it, and so does the
/// time a batch holds its rows locked; larger batches measure no faster.
pub const MAX_BATCH_SIZE: u32 = 10_000;

/// The most attempts a row handler's delivery may be given.
pub const MAX_ATTEMPTS: u32 = 1_000;

/// The longest payload retention Cohort accepts (ten years).
const MAX_RETENTION: Duration = Duration::from_secs(10 * 366 * 24 * 3600);

/// The longest [`Options::lock_wait`] Cohort accepts: a range statement that
/// waits longer than PostgreSQL's `deadlock_timeout` (1 s by default) can be
/// chosen as a deadlock victim before its own wait ends, which costs the same
/// retry but later.
pub const MAX_LOCK_WAIT: Duration = Duration::from_secs(10);

/// The longest timeout Cohort accepts for observers, claims and settling (one week).
pub const MAX_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 3600);

/// Cohort's options. Deserialise them from wherever the host keeps its
/// configuration (`serde`), or build them in code; [`Options::validate`]
/// (run by the builder) lists every problem at once.
///
/// ```
/// let options: cohort::Options = serde_json::from_str(
///     r#"{ "schema": "retention", "batch_size": 500, "conventions": { "tenant": "organisation_id" } }"#,
/// )?;
/// assert_eq!(options.batch_size, 500);
/// assert_eq!(options.conventions.record_id, "id");
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Options {
    /// The schema of Cohort's tables (default `public`).
    pub schema: String,
    /// The schema of retained tables whose type names none (default `public`).
    pub default_table_schema: String,
    /// Rows per committed batch (default 1,000; 1 to [`MAX_BATCH_SIZE`]).
    pub batch_size: u32,
    /// Field-name conventions for role fields.
    pub conventions: Conventions,
    /// How long one observer may take for one event (default 5 s).
    #[serde(with = "humantime_secs")]
    pub observer_timeout: Duration,
    /// After how long a run still `Started` that holds no lease (one started
    /// before schema migration 7) is marked failed once its session lock is
    /// free (default 1 hour). Runs with a lease follow [`Options::run_lease`].
    #[serde(with = "humantime_secs")]
    pub settle_timeout: Duration,
    /// How long a run's lease lasts (default 60 s, 1 s to [`MAX_TIMEOUT`];
    /// contract CO2). The run's owner renews it every third of that while
    /// the run lives; [`crate::Cohort::settle_abandoned_runs`] settles a
    /// `Started` run only once its lease has expired, and every write of a
    /// run checks, in its own transaction, that the run is still its
    /// owner's. So an owner that stops (killed, paused, cut off) longer than
    /// this has its run settled `Failed`, and cannot write into it after.
    #[serde(with = "humantime_secs")]
    pub run_lease: Duration,
    /// How long a batch waits for its type's entity fence (default 30 s). The
    /// fence is held exclusively by a transaction that creates a hold on that
    /// type, until it commits: when the wait runs out, that type fails for
    /// this run (`FailureKind::FenceTimeout`) and the run goes on.
    #[serde(with = "humantime_secs")]
    pub fence_wait: Duration,
    /// How long a sweep's range statement waits for a row another transaction
    /// holds locked (default 0.2 s, at most [`MAX_LOCK_WAIT`]). Then the batch
    /// is redone row by row, skipping locked rows, which are left for a later
    /// run and counted as skipped.
    #[serde(with = "humantime_secs")]
    pub lock_wait: Duration,
    /// How long a row handler's delivery holds its claim (default 5
    /// minutes). The handler is cancelled at nine tenths of it (the attempt
    /// fails); a claim left by a crashed dispatcher is reclaimed once it
    /// expired.
    #[serde(with = "humantime_secs")]
    pub claim_timeout: Duration,
    /// How long captured handler payloads (which may hold personal data)
    /// are kept at most (default 30 days); a payload is cleared as soon as
    /// every handler of its row is done, and this backstop clears the rest.
    #[serde(with = "humantime_secs")]
    pub payload_retention: Duration,
    /// How many attempts a delivery gets before it is dead-lettered
    /// (default 10, at most 1,000).
    pub max_attempts: u32,
    /// How often a running dispatcher looks for due work when no
    /// notification wakes it (default 1 s).
    #[serde(with = "humantime_secs")]
    pub poll_interval: Duration,
    /// The most deliveries one `Dispatcher::run_once` makes (default 1,000).
    pub dispatch_limit: u32,
    /// How long holds that no longer protect (expired or removed) are kept
    /// before [`crate::holds::Holds::prune`] deletes them; `None` (the default)
    /// keeps them forever.
    #[serde(with = "humantime_secs_opt")]
    pub inactive_hold_retention: Option<Duration>,
    /// Whether a purge may detach and drop the wholly expired partitions of
    /// a table partitioned by `RANGE` on its anchor instead of deleting
    /// their rows (default `true`; contract PT1, `docs/partitions.md`). Off,
    /// every row is swept through the batches and Cohort runs no DDL.
    pub partition_drops: bool,
    /// How the pool reaches PostgreSQL (default [`ConnectionMode::Direct`];
    /// contract CO1): set [`ConnectionMode::TransactionPooled`] when the
    /// pool's connections go through a pooler in transaction mode
    /// (PgBouncer's `pool_mode = transaction`, RDS Proxy, a managed
    /// platform's pooler). Building a handle refuses a connection that is
    /// seen to change server sessions between transactions while this says
    /// `Direct`.
    pub connection_mode: ConnectionMode,
    /// Whether every transaction of a sweep or an erasure that changes rows
    /// (a batch, or a partition drop) also writes one transactional logical
    /// decoding message, prefix [`crate::MARKER_PREFIX`], naming the run,
    /// kind, type and strategy (default `false`; contract SA4,
    /// `docs/data-subjects.md`). Change-data-capture consumers (Debezium,
    /// `wal2json`, `pgoutput` with `messages`) can then tell retention's
    /// changes from the application's own. A rolled-back batch writes none.
    pub change_stream_markers: bool,
    /// The order a sweep's range batches take through a table (default
    /// [`BatchOrder::Auto`]; contract X18, `docs/design.md`, "Two batch
    /// orders").
    pub batch_order: BatchOrder,
    /// The scheduled worker's settings ([`crate::worker`]).
    pub worker: WorkerOptions,
}

/// The order a sweep's range batches take through a table
/// ([`Options::batch_order`]; contract X18, `docs/design.md`, "Two batch
/// orders"). Whatever the order, each batch changes at most the batch size
/// of rows, judges eligibility and holds in its statement under the entity
/// fence, and commits on its own.
///
/// ```
/// let options: cohort::Options = serde_json::from_str(r#"{ "batch_order": "anchor" }"#)?;
/// assert_eq!(options.batch_order, cohort::BatchOrder::Anchor);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum BatchOrder {
    /// Per type and run, from the catalog, the planner's estimate and the
    /// first anchor-ordered batch: physical order when the table is a
    /// plain one of at least 1,000 pages, at least a quarter of its rows
    /// are estimated eligible, and the first batch's rows in anchor order
    /// lie on more than twice the pages a physical-order batch of as many
    /// rows would read; anchor order otherwise (and when the table was
    /// never analysed).
    #[default]
    Auto,
    /// Batches follow the `(anchor, record id)` index: each batch's rows
    /// are the next ones by age. Best when few of a table's rows are
    /// eligible, or its rows lie in anchor order.
    Anchor,
    /// Batches follow the table's pages (`tid` range scans), so each page
    /// is read by one batch, as one raw statement reads it: best when much
    /// of the table is eligible and its rows do not lie in anchor order.
    /// Only plain tables (not partitioned, no inheritance children): other
    /// tables keep the anchor order. A range that meets a locked row makes
    /// the rest of the type's run take the anchor order.
    Physical,
}

/// How the pool's connections reach PostgreSQL ([`Options::connection_mode`];
/// contract CO1, `docs/design.md`, "Through a connection pooler").
///
/// Whatever the mode, Cohort keeps nothing it relies on in session state:
/// runs and the worker hold leases (rows), the entity fence is a
/// transaction-scoped lock, settings are transaction-local, and every
/// statement runs inside an explicit transaction, so that a pooler in
/// transaction mode keeps it on one server session. What the mode changes
/// is the hot path's statements and the dispatcher's wake-up.
///
/// ```
/// let options: cohort::Options =
///     serde_json::from_str(r#"{ "connection_mode": "transaction_pooled" }"#)?;
/// assert_eq!(options.connection_mode, cohort::ConnectionMode::TransactionPooled);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ConnectionMode {
    /// Each pool connection is one server session (a direct connection, or
    /// a pooler in session mode). The batch loop's and the dispatcher's
    /// statements are named prepared statements, parsed and planned once
    /// per connection; the dispatcher also wakes on `LISTEN`.
    #[default]
    Direct,
    /// A pooler in transaction mode may give each transaction another
    /// server session. Every statement is unnamed (parsed and planned at
    /// each execution, inside its transaction: a named statement would be
    /// left on one server session and collide with another client's of
    /// the same name), and the dispatcher does not `LISTEN` (a notification
    /// would reach whichever client holds that server session next): it
    /// finds new work by polling every [`Options::poll_interval`].
    TransactionPooled,
}

impl ConnectionMode {
    /// Whether the hot path's statements may be named and kept by the
    /// connection (sqlx's statement cache).
    pub(crate) fn caches_statements(self) -> bool {
        matches!(self, ConnectionMode::Direct)
    }
}

/// The scheduled worker's settings (contract W1).
///
/// The struct is `#[non_exhaustive]` (settings will be added), so build it
/// in code from its default and set the fields you need:
///
/// ```
/// let mut worker = cohort::WorkerOptions::default();
/// worker.schedule = "30 3 * * *".to_owned();
/// worker.time_zone = Some("Europe/Berlin".to_owned());
/// let mut options = cohort::Options::default();
/// options.worker = worker;
/// assert!(options.validate().is_empty());
/// ```
///
/// or read it with serde, as any other setting:
///
/// ```
/// let options: cohort::Options = serde_json::from_str(
///     r#"{ "worker": { "schedule": "30 3 * * *", "time_zone": "Europe/Berlin", "dry_run": true } }"#,
/// )?;
/// assert_eq!(options.worker.schedule, "30 3 * * *");
/// assert!(options.validate().is_empty());
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct WorkerOptions {
    /// When the worker sweeps: a cron pattern (five fields, or six with
    /// seconds first; default `0 2 * * *`, 02:00 every day).
    pub schedule: String,
    /// The IANA time zone the schedule is read in (`Europe/Berlin`); UTC when
    /// absent. Across a daylight-saving change an occurrence in the skipped
    /// hour runs at the next valid time and one in the repeated hour once.
    pub time_zone: Option<String>,
    /// Scheduled sweeps count and write the ledger but change no row.
    pub dry_run: bool,
    /// When on, the worker starts no scheduled pass. It is read again before
    /// every pass; a host that needs to flip it at run time gives the worker
    /// a [`crate::worker::KillSwitch`] of its own.
    pub kill_switch: bool,
    /// The tenant swept when the host gives the worker no tenant source:
    /// `None` (the default) sweeps only the tenantless types.
    pub tenant: Option<uuid::Uuid>,
    /// When set, each scheduled pass ends with `VACUUM (ANALYZE)` of the
    /// tables it changed at least this many rows in (contract OB3; see
    /// [`crate::VacuumOptions`]). `None` (the default): no `VACUUM`,
    /// the passes' results still report the tables' dead tuples.
    pub vacuum_min_rows: Option<u64>,
}

impl Default for WorkerOptions {
    fn default() -> Self {
        WorkerOptions {
            schedule: "0 2 * * *".into(),
            time_zone: None,
            dry_run: false,
            kill_switch: false,
            tenant: None,
            vacuum_min_rows: None,
        }
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            schema: "public".into(),
            default_table_schema: "public".into(),
            batch_size: 1_000,
            conventions: Conventions::default(),
            observer_timeout: Duration::from_secs(5),
            settle_timeout: Duration::from_secs(3600),
            run_lease: Duration::from_secs(60),
            fence_wait: Duration::from_secs(30),
            claim_timeout: Duration::from_secs(300),
            payload_retention: Duration::from_secs(30 * 24 * 3600),
            max_attempts: 10,
            poll_interval: Duration::from_secs(1),
            dispatch_limit: 1_000,
            lock_wait: Duration::from_millis(200),
            inactive_hold_retention: None,
            partition_drops: true,
            connection_mode: ConnectionMode::Direct,
            change_stream_markers: false,
            batch_order: BatchOrder::Auto,
            worker: WorkerOptions::default(),
        }
    }
}

impl Options {
    /// Every problem with these options, empty when they are usable. Each
    /// names its option (the `option` field of [`ValidationProblem`]) and how
    /// to fix it.
    pub fn validate(&self) -> Vec<ValidationProblem> {
        let mut problems = Vec::new();
        for (name, value) in [
            ("schema", &self.schema),
            ("default_table_schema", &self.default_table_schema),
        ] {
            if let Err(problem) = crate::sql::Ident::new(value) {
                // The words of `Error::InvalidIdentifier`, as `SchemaName::new`
                // would say it.
                let shown = value.escape_default().to_string();
                problems.push(ValidationProblem::option(
                    name,
                    format!("invalid schema name {shown:?}: {problem}"),
                    "use a schema name of 1 to 63 bytes without NUL",
                ));
            }
        }
        if self.batch_size == 0 || self.batch_size > MAX_BATCH_SIZE {
            problems.push(ValidationProblem::option(
                "batch_size",
                format!(
                    "batch_size is {}; it must be between 1 and {MAX_BATCH_SIZE}",
                    self.batch_size
                ),
                "use the default (1,000) unless a benchmark says otherwise",
            ));
        }
        if self.run_lease < Duration::from_secs(1) || self.run_lease > MAX_TIMEOUT {
            problems.push(ValidationProblem::option(
                "run_lease",
                format!(
                    "run_lease is {:?}; it must be at least 1 s and at most one week",
                    self.run_lease
                ),
                "use the default (60 s)",
            ));
        }
        if self.lock_wait.is_zero() || self.lock_wait > MAX_LOCK_WAIT {
            problems.push(ValidationProblem::option(
                "lock_wait",
                format!(
                    "lock_wait is {:?}; it must be above zero and at most {MAX_LOCK_WAIT:?}",
                    self.lock_wait
                ),
                "use the default (0.2 s), below PostgreSQL's deadlock_timeout",
            ));
        }
        if self.max_attempts == 0 || self.max_attempts > MAX_ATTEMPTS {
            problems.push(ValidationProblem::option(
                "max_attempts",
                format!(
                    "max_attempts is {}; it must be between 1 and {MAX_ATTEMPTS}",
                    self.max_attempts
                ),
                "use the default (10)",
            ));
        }
        if self.dispatch_limit == 0 {
            problems.push(ValidationProblem::option(
                "dispatch_limit",
                "dispatch_limit is 0",
                "use the default (1,000)",
            ));
        }
        if self.payload_retention.is_zero() || self.payload_retention > MAX_RETENTION {
            problems.push(ValidationProblem::option(
                "payload_retention",
                format!(
                    "payload_retention is {:?}; it must be above zero and at most 10 years",
                    self.payload_retention
                ),
                "use the default (30 days)",
            ));
        }
        for (name, value) in [
            ("observer_timeout", self.observer_timeout),
            ("settle_timeout", self.settle_timeout),
            ("fence_wait", self.fence_wait),
            ("claim_timeout", self.claim_timeout),
            ("poll_interval", self.poll_interval),
        ] {
            if value.is_zero() || value > MAX_TIMEOUT {
                problems.push(ValidationProblem::option(
                    name,
                    format!("{name} is {value:?}; it must be above zero and at most 7 days"),
                    "use a duration above zero and at most 7 days",
                ));
            }
        }
        if self.inactive_hold_retention.is_some_and(|r| r.is_zero()) {
            problems.push(ValidationProblem::option(
                "inactive_hold_retention",
                "inactive_hold_retention is zero",
                "use None to keep holds forever, or a positive duration",
            ));
        }
        if let Err(found) = Schedule::parse(&self.worker) {
            problems.extend(found);
        }
        if self.worker.tenant.is_some_and(|t| t.is_nil()) {
            problems.push(ValidationProblem::option(
                "worker.tenant",
                "worker.tenant is the nil UUID, which the ledger reserves for tenantless passes",
                "name a real tenant, or leave it out to sweep only tenantless types",
            ));
        }
        let c = &self.conventions;
        for (name, value) in [
            ("conventions.record_id", &c.record_id),
            ("conventions.tenant", &c.tenant),
            ("conventions.soft_delete", &c.soft_delete),
            ("conventions.deleted_at", &c.deleted_at),
            ("conventions.anonymised_at", &c.anonymised_at),
        ] {
            if value.is_empty() {
                problems.push(ValidationProblem::option(
                    name,
                    format!("{name} is empty"),
                    "name the field, or leave the default",
                ));
            }
        }
        problems
    }
}

/// Durations in configuration are whole or fractional seconds (`5`, `0.5`).
mod humantime_secs {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let secs = f64::deserialize(d)?;
        Duration::try_from_secs_f64(secs).map_err(serde::de::Error::custom)
    }
}

/// Optional durations in seconds; `null` or absent means `None`.
mod humantime_secs_opt {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&d.as_secs_f64()),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        match Option::<f64>::deserialize(d)? {
            Some(secs) => Duration::try_from_secs_f64(secs)
                .map(Some)
                .map_err(serde::de::Error::custom),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // contract: C1
    #[test]
    fn every_bad_option_is_listed_at_once() {
        let options = Options {
            schema: String::new(),
            batch_size: 0,
            observer_timeout: Duration::ZERO,
            settle_timeout: Duration::from_secs(8 * 24 * 3600),
            ..Options::default()
        };
        let problems = options.validate();
        assert_eq!(problems.len(), 4, "{problems:#?}");
        let options: Vec<_> = problems.iter().map(|p| p.option).collect();
        assert_eq!(
            options,
            vec![
                Some("schema"),
                Some("batch_size"),
                Some("observer_timeout"),
                Some("settle_timeout")
            ]
        );
        assert!(problems[1].problem.contains("batch_size is 0"));
        assert!(Options::default().validate().is_empty());
        assert!(serde_json::from_str::<Options>(r#"{"observer_timeout": -1}"#).is_err());
    }
}
