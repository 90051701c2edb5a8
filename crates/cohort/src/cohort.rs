//! The handle hosts hold, and its builder: the top layer. Every public
//! operation of Cohort is a method here, on one page; each delegates to the
//! engine ([`crate::engine::Engine`]) and the modules that run on it (`run`,
//! `holds`, `dispatch`, `worker`), none of which knows the handle.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use chrono::{DateTime, TimeZone, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use crate::config::Options;
use crate::dispatch::Dispatcher;
use crate::engine::Engine;
use crate::error::Error;
use crate::handlers::registry::Registered;
use crate::handlers::{RowHandler, RowHandlerOptions};
use crate::holds::{Deletion, Holds, Matters};
use crate::ledger::{AuditObserver, Trigger};
use crate::model::{AnonymiserFn, EntityDescriptor, Retained};
use crate::policy::{RuleProvider, Scope};
use crate::run::{ErasureRequest, Preview, RunResult, SweepOptions};
use crate::schema::{SchemaName, check_readiness};
use crate::sql::Pinned;
use crate::sql::timestamp::to_pg_precision;
use crate::validate::{self, Registration, ValidationProblem, ValidationReport};
use crate::worker::Worker;

/// Cohort, configured and validated: build one with [`Cohort::builder`] and
/// clone it freely (clones share one state).
///
/// Preview, sweep and erasure take connections of their own from the pool
/// and never join a caller's transaction; holds and host deletions run on
/// the connection you pass.
///
/// | operation | what it does |
/// |---|---|
/// | [`preview`](Cohort::preview) | counts what a sweep would change, changes nothing |
/// | [`sweep`](Cohort::sweep), [`sweep_with`](Cohort::sweep_with) | applies each category's rule in committed batches |
/// | [`erase`](Cohort::erase) | erases one data subject's rows |
/// | [`holds`](Cohort::holds) | creates, removes and lists legal holds |
/// | [`deletion`](Cohort::deletion) | the host's own deletions, refused when a target is held |
/// | [`settle_abandoned_runs`](Cohort::settle_abandoned_runs) | settles runs whose owner died |
#[derive(Clone)]
pub struct Cohort {
    pub(crate) inner: Arc<Engine>,
}

impl fmt::Debug for Cohort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cohort")
            .field("schema", &self.inner.schema)
            .field("entities", &self.inner.model.entities.len())
            .field("observers", &self.inner.observers.len())
            .finish_non_exhaustive()
    }
}

/// A caller's time at PostgreSQL's precision, or [`Error::TimeOutOfRange`].
fn normalise<Tz: TimeZone>(now: &DateTime<Tz>) -> Result<DateTime<Utc>, Error> {
    to_pg_precision(now).ok_or(Error::TimeOutOfRange { what: "now" })
}

impl Cohort {
    /// Starts configuring Cohort on a pool; [`CohortBuilder::build`]
    /// validates everything at once.
    pub fn builder(pool: PgPool) -> CohortBuilder {
        CohortBuilder {
            pool,
            options: Options::default(),
            provider: None,
            descriptors: Vec::new(),
            observers: Vec::new(),
            anonymisers: HashMap::new(),
            handlers: Vec::new(),
            subject_key: None,
        }
    }

    /// The schema of Cohort's tables.
    pub fn schema(&self) -> &SchemaName {
        &self.inner.schema
    }

    /// The options in force.
    pub fn options(&self) -> &Options {
        &self.inner.options
    }

    /// What the build found that only makes Cohort slower, each with the
    /// statement that fixes it: a retained table without an index leading
    /// with its tenant and anchor columns (the anchor alone for a tenantless
    /// type), an erasure-subject column without an index leading with it.
    /// Also logged at build (`tracing::warn!`).
    pub fn warnings(&self) -> &[ValidationProblem] {
        &self.inner.model.warnings
    }

    /// Counts, per retained type of `scope`, what a sweep at `now` would
    /// change, how many rows are held and how many have a NULL anchor, and
    /// lists the explicitly exempt types. Changes nothing and writes no
    /// ledger.
    ///
    /// `now` may carry any UTC offset; it is normalised to UTC at
    /// microsecond precision (PostgreSQL's), and refused with
    /// [`Error::TimeOutOfRange`] when PostgreSQL cannot store it.
    pub async fn preview<Tz: TimeZone>(
        &self,
        scope: &Scope,
        now: DateTime<Tz>,
    ) -> Result<Preview, Error> {
        self.inner.run_preview(scope, normalise(&now)?).await
    }

    /// The retention backlog of `scope` at `now` (contract OB2): per
    /// retained type, the rows past their cutoff that are still there, the
    /// oldest one's anchor, and why they are there (never swept, the last
    /// sweep failed, rows locked or not reached, or due since the last
    /// sweep), and the held rows apart. One counting statement and one
    /// ledger read per type; changes nothing.
    ///
    /// ```no_run
    /// # async fn demo(cohort: cohort::Cohort, scope: cohort::Scope) -> Result<(), cohort::Error> {
    /// let backlog = cohort.backlog(&scope, chrono::Utc::now()).await?;
    /// if backlog.max_overdue_by() > Some(chrono::TimeDelta::days(2)) {
    ///     eprintln!("retention is {} rows behind", backlog.overdue());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn backlog<Tz: TimeZone>(
        &self,
        scope: &Scope,
        now: DateTime<Tz>,
    ) -> Result<crate::run::Backlog, Error> {
        self.inner.run_backlog(scope, normalise(&now)?).await
    }

    /// Sweeps the rows of `scope` that are old enough at `now`, applying
    /// each category's rule, and returns what it did. The run is audited as
    /// `Manual`.
    ///
    /// Runs on a connection of its own (never the caller's transaction), in
    /// batches that each commit; one entity's failure is recorded and the
    /// others go on. `now` is normalised as for [`Cohort::preview`]. A run
    /// whose connection is lost returns [`Error::RunInterrupted`] naming it.
    pub async fn sweep<Tz: TimeZone>(
        &self,
        scope: &Scope,
        now: DateTime<Tz>,
    ) -> Result<RunResult, Error> {
        self.sweep_with(scope, now, SweepOptions::default()).await
    }

    /// [`Cohort::sweep`] with options: a dry run, a cancellation token.
    pub async fn sweep_with<Tz: TimeZone>(
        &self,
        scope: &Scope,
        now: DateTime<Tz>,
        options: SweepOptions,
    ) -> Result<RunResult, Error> {
        self.inner
            .run_sweep(scope, normalise(&now)?, options, Trigger::Manual)
            .await
    }

    /// Erases `request`'s subject in `scope` at `now`: every row of the
    /// scope's retained types where any erasure-subject column equals the
    /// subject (compared in the column's own type), whose resolved strategy
    /// is eligible, and that no active hold covers. The ordinary period never
    /// delays an erasure; a positive legal minimum does
    /// (`anchor < now - legal_minimum`).
    ///
    /// Runs like a sweep (own connection, `Started` row first, committed
    /// batches, one entity's failure recorded while the others go on),
    /// except that it waits for rows other transactions hold locked instead
    /// of skipping them.
    ///
    /// Refused before anything is written when the subject fits no subject
    /// column ([`Error::InvalidSubject`]) or a category resolves to
    /// soft-delete without the request's opt-in
    /// ([`Error::SoftDeleteErasureRefused`]).
    pub async fn erase<Tz: TimeZone>(
        &self,
        scope: &Scope,
        now: DateTime<Tz>,
        request: ErasureRequest,
    ) -> Result<RunResult, Error> {
        self.inner
            .run_erasure(scope, normalise(&now)?, request)
            .await
    }

    /// Exports every row of `request`'s subject in `scope` into `out`
    /// (contract SA1, GDPR art. 15): the rows an erasure of the same subject
    /// would match (the same tenant and subject-column predicate, compared
    /// in each column's own type, E9), across every retained type of the
    /// scope, whatever their age or state; held rows too (access is not
    /// erasure), each marked `held`. One read-only snapshot for all types,
    /// streamed with memory flat in the number of rows.
    ///
    /// JSON Lines: one object per row, `{"type", "table", "record_id",
    /// "held", "row"}`, `row` the row as a JSON object (columns in table
    /// order, as `row_to_json` writes them). CSV: a header
    /// `type,table,record_id,held,column,value` and one line per column of
    /// each row (NULL is an empty field).
    ///
    /// When the whole export was written, it is recorded in
    /// `retention_subject_access`: who asked, when, the tenant, the counts
    /// per type and the subject as HMAC-SHA256 under the handle's subject
    /// key, never in clear. Refused before anything is written with
    /// [`Error::InvalidSubject`] (bad subject, or no subject column accepts
    /// it), [`Error::InvalidRequester`] and [`Error::SubjectKeyMissing`];
    /// [`Error::ExportWrite`] when `out` fails (the export is then not
    /// recorded).
    ///
    /// ```no_run
    /// # async fn demo(cohort: cohort::Cohort, scope: cohort::Scope) -> Result<(), cohort::Error> {
    /// let mut file = std::io::BufWriter::new(std::fs::File::create("ann.jsonl").map_err(cohort::Error::ExportWrite)?);
    /// let request = cohort::AccessRequest::new("ann@example.com", "ticket DSAR-1042");
    /// let export = cohort.subject_export(&scope, chrono::Utc::now(), request, &mut file).await?;
    /// println!("{} rows, {} held", export.rows, export.held);
    /// # Ok(()) }
    /// ```
    pub async fn subject_export<Tz: TimeZone, W: std::io::Write + ?Sized>(
        &self,
        scope: &Scope,
        now: DateTime<Tz>,
        request: crate::run::AccessRequest,
        out: &mut W,
    ) -> Result<crate::run::AccessExport, Error> {
        self.inner
            .run_subject_export(scope, normalise(&now)?, request, out)
            .await
    }

    /// Replays, after a restore, the erasures of `register` that settled at
    /// or after `since` (contract SA2, `docs/data-subjects.md`): each one's
    /// subject is taken from `subjects`, the host's own list of erasure
    /// requests as `(tenant, subject)` pairs (`None` for tenantless), by its
    /// keyed hash under this handle's subject key, and erased again at
    /// `now` in its tenant, soft-delete accepted as the recorded erasure
    /// did. Idempotent: a subject with nothing left to erase is erased again
    /// with no row changed. Each replay is an erasure run with its
    /// certificate ([`crate::evidence::certificate`]); the report pairs each
    /// with the erasure it replays ([`ReplayedErasure::original_run`]) and
    /// lists the register's erasures no subject of the list matches.
    /// Refused before anything is replayed with [`Error::SubjectKeyMissing`]
    /// without a subject key, and with [`Error::InvalidSubject`] when a
    /// subject of the list is one no erasure accepts (empty, longer than
    /// [`crate::MAX_SUBJECT_BYTES`], or holding NUL).
    ///
    /// ```no_run
    /// # async fn demo(cohort: cohort::Cohort) -> Result<(), Box<dyn std::error::Error>> {
    /// use std::io::BufReader;
    /// let file = std::fs::File::open("erasures.jsonl")?;
    /// let register = cohort::evidence::read_erasure_register(BufReader::new(file))?;
    /// let tenant = uuid::Uuid::parse_str("2b0c6e1e-5d4c-4a8e-9a59-1f3c1d0e7a21").ok();
    /// let requests = vec![(tenant, "ann@example.org".to_owned())]; // the host's own list
    /// let since = chrono::DateTime::parse_from_rfc3339("2026-11-24T00:00:00Z")?;
    /// let report = cohort.replay_erasures(&register, requests, since, chrono::Utc::now()).await?;
    /// println!("{} erasures replayed, {} rows erased again", report.replayed.len(), report.affected());
    /// # Ok(()) }
    /// ```
    ///
    /// [`ReplayedErasure::original_run`]: crate::ReplayedErasure::original_run
    pub async fn replay_erasures<Tz: TimeZone, Tz2: TimeZone>(
        &self,
        register: &[crate::evidence::RegisterEntry],
        subjects: impl IntoIterator<Item = (Option<uuid::Uuid>, String)>,
        since: DateTime<Tz>,
        now: DateTime<Tz2>,
    ) -> Result<crate::run::ReplayReport, Error> {
        self.inner
            .run_replay(
                register,
                subjects,
                since.with_timezone(&chrono::Utc),
                normalise(&now)?,
            )
            .await
    }

    /// The legal-holds repository: create, remove, list and prune holds.
    pub fn holds(&self) -> Holds<'_> {
        Holds::new(&self.inner)
    }

    /// Matter holds: put a whole scope (a data subject, or a retained type
    /// in a tenant, optionally within an anchor window) on hold, including
    /// rows written later; list, report, extend and release them.
    pub fn matters(&self) -> Matters<'_> {
        Matters::new(&self.inner)
    }

    /// Disposition review (contracts DR1-DR3): list the batches sweeps froze
    /// for review, and approve, reject or extend them.
    pub fn dispositions(&self) -> crate::disposition::Dispositions<'_> {
        crate::disposition::Dispositions::new(&self.inner)
    }

    /// Events of event-based retention (contract SL4): record, withdraw
    /// and list the events rules count their periods from
    /// ([`crate::Rule::after_event`]).
    pub fn events(&self) -> crate::events::Events<'_> {
        crate::events::Events::new(&self.inner)
    }

    /// The host-deletion service: the host's own deletes, refused when an
    /// active hold covers a target. Host deletions run no row handlers: the
    /// host's callback deletes what it chooses, and its own side effects
    /// belong in that callback's transaction.
    pub fn deletion(&self) -> Deletion<'_> {
        Deletion::new(&self.inner)
    }

    /// The row-handler dispatcher: delivers queued handler work, at least
    /// once (see [`crate::handlers`]). Run [`Dispatcher::run`] beside your
    /// application (the scheduled worker does), or call
    /// [`Dispatcher::run_once`] from a job of your own.
    pub fn dispatcher(&self) -> Dispatcher {
        Dispatcher::new(Arc::clone(&self.inner))
    }

    /// The scheduled worker (see [`crate::worker`]): sweeps at each
    /// occurrence of [`crate::WorkerOptions::schedule`], once across
    /// replicas, and runs the row-handler dispatcher beside the sweeps.
    pub fn worker(&self) -> Worker {
        Worker::new(Arc::clone(&self.inner))
    }

    /// The tables this handle's model declares exempt (`#[cohort(exempt =
    /// "...")]`), with their reasons, for the auditor's report.
    pub fn exempt_tables(&self) -> Vec<crate::evidence::ExemptTable> {
        self.inner
            .model
            .exempt
            .iter()
            .map(|d| {
                let schema = d
                    .schema()
                    .unwrap_or(self.inner.options.default_table_schema.as_str());
                let reason = match d.membership() {
                    crate::model::Membership::Exempt { reason } => reason,
                    crate::model::Membership::Retained { .. } => "",
                };
                crate::evidence::ExemptTable::new(
                    d.type_name(),
                    format!("{schema}.{}", d.table()),
                    reason,
                )
            })
            .collect()
    }

    /// The auditor's report ([`crate::evidence::audit_report`]) on a
    /// connection of the pool, with the exempt tables of this handle's
    /// model ([`Self::exempt_tables`]) when `options` gives none.
    ///
    /// ```no_run
    /// # async fn demo(cohort: cohort::Cohort) -> Result<(), cohort::Error> {
    /// use cohort::evidence::{ReportOptions, TimeRange};
    /// let report = cohort.audit_report(&ReportOptions::new(TimeRange::all())).await?;
    /// std::fs::write("retention-report.html", report.to_html()?)
    ///     .map_err(cohort::evidence::EvidenceError::from)?;
    /// # Ok(()) }
    /// ```
    pub async fn audit_report(
        &self,
        options: &crate::evidence::ReportOptions,
    ) -> Result<crate::evidence::AuditReport, Error> {
        let mut options = options.clone();
        if options.exempt.is_none() {
            options.exempt = Some(self.exempt_tables());
        }
        let mut conn = self.inner.pool.acquire().await?;
        crate::evidence::audit_report(&mut conn, &self.inner.schema, &options).await
    }

    /// Marks runs still `Started` after [`Options::settle_timeout`] as
    /// `Failed`, when their owner is gone (their run lock can be taken); a
    /// live run is never touched. Their summaries still `Running` are
    /// settled `Failed` with them, keeping the counts their committed batches
    /// left. Returns how many runs were settled.
    pub async fn settle_abandoned_runs(&self) -> Result<u64, Error> {
        self.inner.settle_abandoned().await
    }
}

/// Configures Cohort; [`CohortBuilder::build`] validates everything at once.
#[must_use]
pub struct CohortBuilder {
    pool: PgPool,
    options: Options,
    provider: Option<Arc<dyn RuleProvider>>,
    descriptors: Vec<&'static EntityDescriptor>,
    observers: Vec<Arc<dyn AuditObserver>>,
    anonymisers: HashMap<String, Arc<dyn AnonymiserFn>>,
    /// Row handlers, with the type each was registered for.
    handlers: Vec<(&'static str, Option<Uuid>, Registered)>,
    subject_key: Option<Arc<[u8]>>,
}

impl fmt::Debug for CohortBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let types: Vec<&str> = self.descriptors.iter().map(|d| d.type_name()).collect();
        let mut anonymisers: Vec<&str> = self.anonymisers.keys().map(String::as_str).collect();
        anonymisers.sort_unstable();
        f.debug_struct("CohortBuilder")
            .field("options", &self.options)
            .field("rules", &self.provider.is_some())
            .field("types", &types)
            .field("observers", &self.observers.len())
            .field("anonymisers", &anonymisers)
            .field("handlers", &self.handlers.len())
            .field("subject_key", &self.subject_key.as_ref().map(|_| "***"))
            .finish_non_exhaustive()
    }
}

impl CohortBuilder {
    /// Sets the options (default: [`Options::default`]).
    pub fn options(mut self, options: Options) -> Self {
        self.options = options;
        self
    }

    /// Sets the rule provider (required).
    pub fn rules(mut self, provider: impl RuleProvider) -> Self {
        self.provider = Some(Arc::new(provider));
        self
    }

    /// Registers a retained (or explicitly exempt) row type.
    pub fn entity<T: Retained>(mut self) -> Self {
        self.descriptors.push(T::descriptor());
        self
    }

    /// Registers a descriptor built at run time with
    /// [`EntityDescriptor::builder`] (see [`crate::model`]), or any other
    /// descriptor: `.entity_descriptor(T::descriptor())` is `.entity::<T>()`.
    /// [`build`](Self::build) validates it exactly like a derived one.
    ///
    /// ```no_run
    /// use cohort::model::{EntityDescriptor, FieldSpec};
    ///
    /// # async fn f(pool: sqlx::PgPool, rules: impl cohort::RuleProvider) -> Result<(), cohort::Error> {
    /// let notes = EntityDescriptor::builder("SessionNote", "session-notes", "created_at")
    ///     .id_str("a3f467fe-c5d0-4f17-9897-83c373cc1dc8")
    ///     .table("session_notes")
    ///     .fields(["id", "tenant_id", "created_at"])
    ///     .field(FieldSpec::new("body").rust_type("text"))
    ///     .build()?; // every mistake at once, as the derive reports them
    /// let cohort = cohort::Cohort::builder(pool)
    ///     .rules(rules)
    ///     .entity_descriptor(notes)
    ///     .build()
    ///     .await?;
    /// # let _ = cohort;
    /// # Ok(())
    /// # }
    /// ```
    pub fn entity_descriptor(mut self, descriptor: &'static EntityDescriptor) -> Self {
        self.descriptors.push(descriptor);
        self
    }

    /// Sets the host's secret key for subject hashes. Each erasure then
    /// records HMAC-SHA256(key, subject) with its run (never the subject
    /// itself), and [`crate::evidence::certificate`] refuses to certify a
    /// subject whose hash under the same key differs, so a certificate can
    /// only be issued for the subject that was erased (contract EV4).
    /// Without a key, erasures record no hash and cannot be certified. Keep
    /// the key in your secret store; the same key goes into
    /// [`crate::evidence::CertificateOptions::subject_key`].
    ///
    /// ```
    /// # fn f(pool: sqlx::PgPool) -> cohort::CohortBuilder {
    /// let key: Vec<u8> = std::env::var("COHORT_CERTIFICATE_KEY").unwrap_or_default().into_bytes();
    /// cohort::Cohort::builder(pool).subject_key(key)
    /// # }
    /// ```
    pub fn subject_key(mut self, key: impl Into<Vec<u8>>) -> Self {
        self.subject_key = Some(Arc::from(key.into()));
        self
    }

    /// Adds an audit observer; any number may be added.
    pub fn observer(mut self, observer: impl AuditObserver) -> Self {
        self.observers.push(Arc::new(observer));
        self
    }

    /// Registers an anonymiser value under `name`, for the fields marked
    /// `#[cohort(anonymise_with = "name")]`: one with state (a key, a salt),
    /// which a stateless [`crate::Anonymiser`] type cannot have. Registering
    /// a name twice keeps the last value. Building fails when a registered
    /// type names an anonymiser nobody registered.
    ///
    /// ```
    /// # fn f(pool: sqlx::PgPool) -> cohort::CohortBuilder {
    /// let key = b"from your secret store".to_vec();
    /// cohort::Cohort::builder(pool).anonymiser("email-pseudonym", move |v: Option<&str>| {
    ///     v.map(|v| format!("user-{:x}", v.len() + key.len()))
    /// })
    /// # }
    /// ```
    pub fn anonymiser(mut self, name: impl Into<String>, anonymiser: impl AnonymiserFn) -> Self {
        self.anonymisers.insert(name.into(), Arc::new(anonymiser));
        self
    }

    /// Registers a row handler for retained type `T` (see
    /// [`crate::handlers`]), with the default options: its identity is its
    /// Rust type name, priority 0, deliveries right after each batch.
    pub fn row_handler<T: Retained, H: RowHandler>(self, handler: H) -> Self {
        self.row_handler_with::<T, H>(handler, RowHandlerOptions::new())
    }

    /// Registers a row handler for `T` with options: a stable identity,
    /// a priority among `T`'s handlers, when deliveries may start.
    pub fn row_handler_with<T: Retained, H: RowHandler>(
        mut self,
        handler: H,
        options: RowHandlerOptions,
    ) -> Self {
        let entity_id = T::entity_id();
        self.handlers.push((
            T::descriptor().type_name(),
            entity_id,
            Registered::new(entity_id.unwrap_or_default(), handler, options),
        ));
        self
    }

    /// The SQL that creates (on request) and grants a least-privileged
    /// sweeping role, and optionally a read-only auditor, for the model
    /// registered so far: exactly what [`CohortBuilder::build`] checks the
    /// pool's role for. Reads nothing from the database, so run it with an
    /// admin connection before the role can build a handle. See
    /// [`crate::schema::role_grants`] and `docs/security.md`.
    pub fn grants(
        &self,
        roles: &crate::schema::RoleNames,
    ) -> Result<crate::schema::RoleGrants, Error> {
        let Some(provider) = &self.provider else {
            return Err(Error::Validation(ValidationReport {
                problems: vec![ValidationProblem::general(
                    "no rule provider is registered",
                    "call CohortBuilder::rules with your RuleProvider",
                )],
                ..ValidationReport::default()
            }));
        };
        let roles = if self.handlers.is_empty() {
            roles.clone()
        } else {
            let mut types: Vec<Uuid> = self.handlers.iter().filter_map(|(_, id, _)| *id).collect();
            types.sort_unstable();
            types.dedup();
            roles.clone().with_row_handlers_for(types)
        };
        crate::schema::role_grants(&self.descriptors, &self.options, provider.as_ref(), &roles)
    }

    /// The SQL that installs the guards of this model's guarded types
    /// (`#[cohort(guard)]`, contract H17): triggers that make the database
    /// refuse a `DELETE` of a held row, an `UPDATE` of a held row that
    /// changes a column the guard does not allow, and a `TRUNCATE` while a
    /// hold of the type is active, for any role. Apply it as the tables'
    /// owner with your migrations; [`build`](Self::build) refuses a guarded
    /// type whose guard is missing or out of date. Empty when no type is
    /// guarded. See `docs/holds.md`, "Guarded types".
    ///
    /// ```
    /// #[derive(cohort::Retained)]
    /// #[cohort(category = "invoices", anchor = "issued_at", id = "2f0c8d4e-8d7b-4c55-9a43-6a1e1f0b7c21", guard)]
    /// struct Invoice {
    ///     id: i64,
    ///     tenant_id: uuid::Uuid,
    ///     issued_at: chrono::DateTime<chrono::Utc>,
    ///     #[cohort(guard_allow)]
    ///     last_viewed_at: Option<chrono::DateTime<chrono::Utc>>,
    /// }
    /// # struct Rules;
    /// # impl cohort::RuleProvider for Rules {
    /// #     fn capabilities(&self, _: &str) -> Option<cohort::Capabilities> { Some(cohort::Capabilities::only(cohort::Strategy::Purge)) }
    /// #     fn resolve<'a>(&'a self, _: cohort::ResolutionContext<'a>) -> cohort::BoxFuture<'a, Result<Option<cohort::Rule>, cohort::policy::ProviderError>> {
    /// #         Box::pin(async { Ok(Some(cohort::Rule::new(cohort::Period::years(7), cohort::Strategy::Purge))) })
    /// #     }
    /// # }
    /// # let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
    /// # let _inside = runtime.enter();
    /// # let pool = sqlx::PgPool::connect_lazy("postgres://localhost/app").expect("url");
    /// let guards = cohort::Cohort::builder(pool)
    ///     .rules(Rules)
    ///     .entity::<Invoice>()
    ///     .guards()?;
    /// assert!(guards.sql().contains("CREATE TRIGGER \"cohort_guard_delete\" AFTER DELETE ON \"public\".\"invoice\""));
    /// # Ok::<(), cohort::Error>(())
    /// ```
    pub fn guards(&self) -> Result<crate::schema::GuardDdl, Error> {
        let Some(provider) = &self.provider else {
            return Err(Error::Validation(ValidationReport {
                problems: vec![ValidationProblem::general(
                    "no rule provider is registered",
                    "call CohortBuilder::rules with your RuleProvider",
                )],
                ..ValidationReport::default()
            }));
        };
        crate::schema::guard_ddl(&self.descriptors, &self.options, provider.as_ref())
    }

    /// The SQL that creates the archive tables of this model's archiving
    /// types (contract SL2): for each type whose category's capabilities
    /// declare [`Capabilities::archive_into`](crate::Capabilities::archive_into),
    /// the table of the same name in that schema, with every column of the
    /// type's table (`LIKE`), Cohort's `cohort_run_id`, `cohort_batch` and
    /// `cohort_archived_at`, a unique key on the record id (a row is never
    /// archived twice) and an index for the purge stage. Apply it with your
    /// migrations; [`build`](Self::build) refuses an archiving type whose
    /// archive table is missing or does not match its table. Empty when no
    /// type archives. Reads nothing from the database. See `docs/model.md`,
    /// "The archive strategy".
    pub fn archive_sql(&self) -> Result<String, Error> {
        let Some(provider) = &self.provider else {
            return Err(Error::Validation(ValidationReport {
                problems: vec![ValidationProblem::general(
                    "no rule provider is registered",
                    "call CohortBuilder::rules with your RuleProvider",
                )],
                ..ValidationReport::default()
            }));
        };
        crate::validate::archive::archive_ddl(&self.descriptors, &self.options, provider.as_ref())
    }

    /// Validates the options, the registered types against the live catalog
    /// and the readiness of Cohort's tables, and returns the handle, or one
    /// [`Error::Validation`] whose report lists every problem found.
    pub async fn build(self) -> Result<Cohort, Error> {
        let mut report = ValidationReport {
            problems: self.options.validate(),
            ..ValidationReport::default()
        };
        if self.subject_key.as_deref().is_some_and(<[u8]>::is_empty) {
            report.problems.push(ValidationProblem::general(
                "the subject key is empty",
                "pass CohortBuilder::subject_key a secret of at least 16 bytes, or leave it unset",
            ));
        }
        let schema = SchemaName::new(&self.options.schema).unwrap_or_default();
        let Some(provider) = self.provider else {
            report.problems.push(ValidationProblem::general(
                "no rule provider is registered",
                "call CohortBuilder::rules with your RuleProvider",
            ));
            return Err(Error::Validation(report));
        };
        let mut captured: Vec<Uuid> = self.handlers.iter().filter_map(|(_, id, _)| *id).collect();
        captured.sort_unstable();
        captured.dedup();
        let mut conn = self.pool.acquire().await?;
        report.problems.extend(
            crate::validate::connection::check(&mut conn, &self.pool, self.options.connection_mode)
                .await?,
        );
        let mut tx = Pinned::begin(&mut conn).await?;
        let checked = async {
            let readiness = check_readiness(tx.conn(), &schema).await?;
            // Catalog type names are read with only pg_catalog on the path,
            // so every other type comes back schema-qualified and stays
            // unambiguous whatever search_path a later session has.
            crate::sql::query(crate::sql::CATALOG_ONLY_SEARCH_PATH)
                .execute(tx.conn())
                .await?;
            let registration = Registration {
                descriptors: &self.descriptors,
                options: &self.options,
                provider: provider.as_ref(),
                anonymisers: &self.anonymisers,
                row_handlers: !self.handlers.is_empty(),
                captured: Some(&captured),
            };
            // A database error here aborted the transaction: fail it, so the
            // error itself is reported (not the commit's "transaction is
            // aborted"); validation problems leave it usable.
            match validate::validate(tx.conn(), &registration).await {
                Err(Error::Validation(found)) => Ok((readiness, Err(Error::Validation(found)))),
                Err(e) => Err(e),
                Ok(model) => Ok((readiness, Ok(model))),
            }
        }
        .await;
        let (readiness, model) = tx.finish(checked).await?;
        report.readiness = readiness.problems;
        let handlers = check_handlers(self.handlers, &self.descriptors, &mut report);
        let model = match model {
            Ok(model) => Some(model),
            Err(Error::Validation(found)) => {
                report.problems.extend(found.problems);
                None
            }
            Err(e) => return Err(e),
        };
        // Options::validate reported a bad schedule already.
        let schedule = crate::config::Schedule::parse(&self.options.worker).ok();
        match (model, schedule) {
            (Some(model), Some(schedule)) if report.is_empty() => {
                // The fence trigger reads plain-SQL holds' record ids through
                // this (contract H16).
                let mut tx = Pinned::begin(&mut conn).await?;
                let registered =
                    crate::schema::registry::register(tx.conn(), &schema, &model.entities)
                        .await
                        .map_err(Error::from);
                tx.finish(registered).await?;
                Ok(Cohort {
                    inner: Arc::new(Engine {
                        pool: self.pool,
                        options: self.options,
                        schema,
                        provider,
                        model,
                        observers: self.observers,
                        handlers,
                        schedule,
                        subject_key: self.subject_key,
                        // Checked again by the first operation: only success is cached.
                        ready: AtomicBool::new(false),
                    }),
                })
            }
            _ => Err(Error::Validation(report)),
        }
    }
}

/// Checks the row handlers against the registered types and orders them:
/// each type must be registered and retained, and a type's handlers need
/// distinct identities.
fn check_handlers(
    handlers: Vec<(&'static str, Option<Uuid>, Registered)>,
    descriptors: &[&'static EntityDescriptor],
    report: &mut ValidationReport,
) -> Vec<Registered> {
    let mut out: Vec<Registered> = Vec::with_capacity(handlers.len());
    for (type_name, entity_id, handler) in handlers {
        let registered = descriptors.iter().any(|d| {
            d.entity_id().is_some()
                && d.entity_id() == entity_id
                && d.membership().category().is_some()
        });
        if !registered {
            report.problems.push(ValidationProblem::for_type(
                type_name,
                format!("row handler {:?} is registered for a type that is not a registered retained type", handler.id),
                "register the type with .entity::<T>() (row handlers need a retained type)",
            ));
            continue;
        }
        if out
            .iter()
            .any(|h| h.entity_id == handler.entity_id && h.id == handler.id)
        {
            report.problems.push(ValidationProblem::for_type(
                type_name,
                format!(
                    "two row handlers of the type have the identity {:?}",
                    handler.id
                ),
                "give each handler its own id with RowHandlerOptions::id",
            ));
            continue;
        }
        out.push(handler);
    }
    crate::handlers::registry::rank(&mut out);
    out
}
