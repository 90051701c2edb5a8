//! The randomized history harness of the reliability suite (contract R1,
//! R2; `docs/reliability.md`): host tables whose every mutation is logged
//! with its transaction id, a commit-order record of every hold, a seeded
//! random workload, and the checker.
//!
//! Used by `reliability::history` and `reliability::faults`.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use cohort::holds::{DeletionError, DeletionOutcome, HoldRequest, Target};
use cohort::{
    Capabilities, Cohort, ErasureRequest, Error, Options, Period, Rule, RunResult, Scope, Strategy,
    SweepOptions, TenantContext,
};
use uuid::Uuid;

use crate::support::{self, TestDb, TestRules};

// ---------------------------------------------------------------------------
// The model: one host table per mutation path.

pub const NOTES: u128 = 0xf0000000_0000_4000_8000_000000000001;
pub const TICKETS: u128 = 0xf0000000_0000_4000_8000_000000000002;
pub const CONTACTS: u128 = 0xf0000000_0000_4000_8000_000000000003;
pub const USERS: u128 = 0xf0000000_0000_4000_8000_000000000004;
pub const CASES: u128 = 0xf0000000_0000_4000_8000_000000000005;

#[allow(dead_code, reason = "mirror the tables; Cohort reads the descriptors")]
mod model {
    use chrono::{DateTime, Utc};
    use uuid::Uuid;

    /// Purged by sweeps.
    #[derive(cohort::Retained)]
    #[cohort(
        category = "rel-notes",
        anchor = "created_at",
        id = "f0000000-0000-4000-8000-000000000001",
        table = "rel_notes"
    )]
    pub struct RelNote {
        id: i64,
        tenant_id: Uuid,
        created_at: DateTime<Utc>,
    }

    /// Soft-deleted by sweeps.
    #[derive(cohort::Retained)]
    #[cohort(
        category = "rel-tickets",
        anchor = "opened_at",
        id = "f0000000-0000-4000-8000-000000000002",
        table = "rel_tickets"
    )]
    pub struct RelTicket {
        id: i64,
        tenant_id: Uuid,
        opened_at: DateTime<Utc>,
        is_deleted: bool,
        deleted_at: Option<DateTime<Utc>>,
    }

    /// Anonymised (built-in method) by sweeps.
    #[derive(cohort::Retained)]
    #[cohort(
        category = "rel-contacts",
        anchor = "created_at",
        id = "f0000000-0000-4000-8000-000000000003",
        table = "rel_contacts"
    )]
    pub struct RelContact {
        id: i64,
        tenant_id: Uuid,
        created_at: DateTime<Utc>,
        anonymised_at: Option<DateTime<Utc>>,
        #[cohort(anonymise = "null")]
        email: Option<String>,
    }

    /// Purged by sweeps and by erasure of its subject.
    #[derive(cohort::Retained)]
    #[cohort(
        category = "rel-users",
        anchor = "created_at",
        id = "f0000000-0000-4000-8000-000000000004",
        table = "rel_users"
    )]
    pub struct RelUser {
        id: i64,
        tenant_id: Uuid,
        created_at: DateTime<Utc>,
        #[cohort(erasure_subject)]
        user_id: Uuid,
    }

    /// A custom anonymiser: it needs each row's value.
    pub struct Scramble;
    impl cohort::Anonymiser for Scramble {
        fn anonymise(original: Option<&str>) -> Option<String> {
            original.map(|o| format!("scrambled-{}", o.len()))
        }
    }

    /// Anonymised by a custom anonymiser (locked batches) by sweeps.
    #[derive(cohort::Retained)]
    #[cohort(
        category = "rel-cases",
        anchor = "created_at",
        id = "f0000000-0000-4000-8000-000000000005",
        table = "rel_cases"
    )]
    pub struct RelCase {
        id: i64,
        tenant_id: Uuid,
        created_at: DateTime<Utc>,
        anonymised_at: Option<DateTime<Utc>>,
        #[cohort(anonymise_with = Scramble)]
        reference: String,
    }
}
pub use model::*;

/// Registers the suite's five types on `builder`.
pub fn model(builder: cohort::CohortBuilder) -> cohort::CohortBuilder {
    builder
        .entity::<RelNote>()
        .entity::<RelTicket>()
        .entity::<RelContact>()
        .entity::<RelUser>()
        .entity::<RelCase>()
}

/// The host tables, in a fixed order, with their retained-entity ids.
pub const TABLES: [(&str, u128); N] = [
    ("rel_notes", NOTES),
    ("rel_tickets", TICKETS),
    ("rel_contacts", CONTACTS),
    ("rel_users", USERS),
    ("rel_cases", CASES),
];

/// How many host tables.
pub const N: usize = 5;

pub fn tenant() -> Uuid {
    Uuid::from_u128(0x2222_2222_2222_2222_2222_2222_2222_2222)
}

pub fn scope() -> Scope {
    Scope::Tenant(TenantContext::new(tenant()))
}

/// The erasure subjects rows of `rel_users` belong to.
pub fn subject(n: u64) -> Uuid {
    Uuid::from_u128(0xaaaa_0000_0000_4000_8000_0000_0000_0000 + u128::from(n % SUBJECTS))
}

pub const SUBJECTS: u64 = 6;

pub fn rules() -> TestRules {
    let rule = |s: Strategy| Rule::new(Period::days(30), s).with_per_row_audit();
    TestRules::new()
        .with(
            "rel-notes",
            Capabilities::only(Strategy::Purge),
            rule(Strategy::Purge),
        )
        .with(
            "rel-tickets",
            Capabilities::only(Strategy::SoftDelete),
            rule(Strategy::SoftDelete),
        )
        .with(
            "rel-contacts",
            Capabilities::only(Strategy::Anonymise),
            rule(Strategy::Anonymise),
        )
        .with(
            "rel-users",
            Capabilities::only(Strategy::Purge),
            rule(Strategy::Purge),
        )
        .with(
            "rel-cases",
            Capabilities::only(Strategy::Anonymise),
            rule(Strategy::Anonymise),
        )
}

/// The tables, the mutation log, the hold commit-order record and the
/// row-detail transaction record (see `docs/reliability.md`).
pub const SCHEMA: &str = r#"
CREATE TABLE public.rel_notes (id bigint PRIMARY KEY, tenant_id uuid NOT NULL,
    created_at timestamptz NOT NULL);
CREATE TABLE public.rel_tickets (id bigint PRIMARY KEY, tenant_id uuid NOT NULL,
    opened_at timestamptz NOT NULL, is_deleted boolean NOT NULL DEFAULT false,
    deleted_at timestamptz);
CREATE TABLE public.rel_contacts (id bigint PRIMARY KEY, tenant_id uuid NOT NULL,
    created_at timestamptz NOT NULL, anonymised_at timestamptz, email text);
CREATE TABLE public.rel_users (id bigint PRIMARY KEY, tenant_id uuid NOT NULL,
    created_at timestamptz NOT NULL, user_id uuid NOT NULL);
CREATE TABLE public.rel_cases (id bigint PRIMARY KEY, tenant_id uuid NOT NULL,
    created_at timestamptz NOT NULL, anonymised_at timestamptz, reference text NOT NULL);

-- Every committed mutation of a host row, with its transaction id. It is
-- written in the mutating transaction, so it exists exactly when that
-- transaction committed.
-- stmt_ts is the mutating statement's statement_timestamp(), the clock
-- Cohort judges a hold's expiry by (H3).
CREATE TABLE public.rel_log (
    seq bigserial PRIMARY KEY, xid xid8 NOT NULL, tbl text NOT NULL, id bigint NOT NULL,
    op text NOT NULL, source text NOT NULL,
    stmt_ts timestamptz NOT NULL DEFAULT statement_timestamp(),
    -- Whether the statement was a physical-order (page range) batch.
    paged boolean NOT NULL DEFAULT false);
CREATE FUNCTION public.rel_log_mutation() RETURNS trigger LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    op text;
BEGIN
    IF TG_OP = 'DELETE' THEN
        op := 'Purge';
    ELSIF (to_jsonb(OLD)->>'is_deleted') = 'false' AND (to_jsonb(NEW)->>'is_deleted') = 'true' THEN
        op := 'SoftDelete';
    ELSIF to_jsonb(OLD)->'anonymised_at' = 'null'::jsonb
          AND to_jsonb(NEW)->'anonymised_at' <> 'null'::jsonb THEN
        op := 'Anonymise';
    ELSE
        op := 'Other';
    END IF;
    INSERT INTO public.rel_log (xid, tbl, id, op, source, paged)
    VALUES (pg_current_xact_id(), TG_TABLE_NAME, OLD.id, op,
            coalesce(nullif(current_setting('rel.source', true), ''), 'cohort'),
            strpos(current_query(), 't.ctid OPERATOR(pg_catalog.>)') > 0);
    RETURN NULL;
END $$;
CREATE TRIGGER rel_log AFTER UPDATE OR DELETE ON public.rel_notes
    FOR EACH ROW EXECUTE FUNCTION public.rel_log_mutation();
CREATE TRIGGER rel_log AFTER UPDATE OR DELETE ON public.rel_tickets
    FOR EACH ROW EXECUTE FUNCTION public.rel_log_mutation();
CREATE TRIGGER rel_log AFTER UPDATE OR DELETE ON public.rel_contacts
    FOR EACH ROW EXECUTE FUNCTION public.rel_log_mutation();
CREATE TRIGGER rel_log AFTER UPDATE OR DELETE ON public.rel_users
    FOR EACH ROW EXECUTE FUNCTION public.rel_log_mutation();
CREATE TRIGGER rel_log AFTER UPDATE OR DELETE ON public.rel_cases
    FOR EACH ROW EXECUTE FUNCTION public.rel_log_mutation();

-- Each hold's creation and removal, with the snapshot taken by a deferred
-- constraint trigger: the last thing its transaction does before it commits.
-- A transaction visible in that snapshot committed before the hold did.
CREATE TABLE public.rel_hold_commit (
    seq bigserial PRIMARY KEY, hold_id uuid NOT NULL, op text NOT NULL, snap pg_snapshot NOT NULL);
CREATE FUNCTION public.rel_hold_commit() RETURNS trigger LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO public.rel_hold_commit (hold_id, op, snap)
        VALUES (NEW.hold_id, 'create', pg_current_snapshot());
    ELSIF OLD.removed_at IS DISTINCT FROM NEW.removed_at THEN
        INSERT INTO public.rel_hold_commit (hold_id, op, snap)
        VALUES (NEW.hold_id, 'remove', pg_current_snapshot());
    END IF;
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER rel_hold_commit AFTER INSERT OR UPDATE ON public.retention_holds
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION public.rel_hold_commit();

-- Each row detail with the transaction that wrote it (the batch's) and the
-- writer's application name.
CREATE TABLE public.rel_detail (
    seq bigserial PRIMARY KEY, xid xid8 NOT NULL, run_id uuid NOT NULL, entity uuid NOT NULL,
    record_id text NOT NULL, action text NOT NULL,
    app text NOT NULL DEFAULT current_setting('application_name'));
CREATE FUNCTION public.rel_detail() RETURNS trigger LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
    INSERT INTO public.rel_detail (xid, run_id, entity, record_id, action)
    VALUES (pg_current_xact_id(), NEW.run_id, NEW.retained_entity_id, NEW.record_id, NEW.action);
    RETURN NULL;
END $$;
CREATE TRIGGER rel_detail AFTER INSERT ON public.sweep_run_row_detail
    FOR EACH ROW EXECUTE FUNCTION public.rel_detail();

-- Every delivery a row handler made (committed by the handler itself, so it
-- stays even when the dispatcher crashes right after).
CREATE TABLE public.rel_delivered (
    seq bigserial PRIMARY KEY, run_id uuid NOT NULL, entity uuid NOT NULL, record_id text NOT NULL,
    attempt integer NOT NULL, snapshot text NOT NULL);

CREATE TABLE public.rel_tables (tbl text PRIMARY KEY, entity uuid NOT NULL);
INSERT INTO public.rel_tables VALUES
    ('rel_notes', 'f0000000-0000-4000-8000-000000000001'),
    ('rel_tickets', 'f0000000-0000-4000-8000-000000000002'),
    ('rel_contacts', 'f0000000-0000-4000-8000-000000000003'),
    ('rel_users', 'f0000000-0000-4000-8000-000000000004'),
    ('rel_cases', 'f0000000-0000-4000-8000-000000000005');
"#;

// ---------------------------------------------------------------------------
// The row handler: captures the record id, delivers by recording itself.

/// Registered on notes (purge) and contacts (anonymise) when the world has
/// handlers. Each delivery pauses a little on both sides of its own
/// committed insert into `rel_delivered`, so a crash can land mid-delivery.
#[derive(Clone)]
pub struct Recorder {
    pool: sqlx::PgPool,
}

impl cohort::handlers::RowHandler for Recorder {
    type Snapshot = String;

    fn capture(
        &self,
        row: &cohort::handlers::CapturedRow,
    ) -> Result<String, cohort::handlers::HandlerError> {
        Ok(row.record_id().to_owned())
    }

    fn deliver<'a>(
        &'a self,
        ctx: &'a cohort::handlers::HandlerContext,
        snapshot: String,
    ) -> cohort::BoxFuture<'a, Result<(), cohort::handlers::HandlerError>> {
        Box::pin(async move {
            let ms = (ctx.record_id.len() as u64 * 7 + u64::from(ctx.attempt) * 3) % 8;
            tokio::time::sleep(Duration::from_millis(ms)).await;
            sqlx::query(
                "INSERT INTO public.rel_delivered (run_id, entity, record_id, attempt, snapshot) \
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(ctx.run_id)
            .bind(ctx.entity_id)
            .bind(&ctx.record_id)
            .bind(ctx.attempt as i32)
            .bind(&snapshot)
            .execute(&self.pool)
            .await?;
            tokio::time::sleep(Duration::from_millis(8 - ms)).await;
            Ok(())
        })
    }
}

// ---------------------------------------------------------------------------
// A seeded generator (splitmix64): no dependency, same sequence everywhere.

#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// `name` from the environment as a number, else `default`.
pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// The seed: `COHORT_RELIABILITY_SEED`, else the clock. Printed either way.
pub fn seed() -> u64 {
    let seed = std::env::var("COHORT_RELIABILITY_SEED")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    println!("reliability seed: {seed} (set COHORT_RELIABILITY_SEED={seed} to replay the choices)");
    seed
}

// ---------------------------------------------------------------------------
// The world: database, handle, id counters, tallies.

pub struct World {
    pub db: TestDb,
    pub cohort: Cohort,
    /// The highest id given out per table (ids 1..=max, some deleted).
    pub max_ids: [AtomicI64; N],
    pub tally: Mutex<BTreeMap<String, u64>>,
    /// What each non-dry run returned: run id → (entity id → affected).
    pub results: Mutex<BTreeMap<Uuid, BTreeMap<Uuid, u64>>>,
    /// Whether notes and contacts have a row handler (and the workload
    /// dispatches, with crashes).
    pub handlers: bool,
    /// A second handle with the same model and handlers, whose connections
    /// are named `rel-dispatcher`, for the dispatcher (so a fault can pick
    /// out its backends).
    pub dispatching: Option<Cohort>,
}

impl World {
    pub fn count(&self, what: impl Into<String>) {
        *self
            .tally
            .lock()
            .expect("tally")
            .entry(what.into())
            .or_default() += 1;
    }

    pub fn record(&self, what: &str, result: &Result<RunResult, Error>) {
        match result {
            Ok(r) => {
                if r.entity_failures.is_empty() {
                    self.count(format!("{what}: {:?}", r.status));
                } else {
                    let kinds: Vec<String> = r
                        .entity_failures
                        .iter()
                        .map(|f| {
                            format!(
                                "{:?} {}",
                                f.failure.kind,
                                f.failure.sqlstate.as_deref().unwrap_or("-")
                            )
                        })
                        .collect();
                    self.count(format!("{what}: {:?} ({})", r.status, kinds.join(", ")));
                }
                if !r.dry_run {
                    self.results.lock().expect("results").insert(
                        r.run_id,
                        r.summaries
                            .iter()
                            .map(|s| (s.entity_id, s.affected))
                            .collect(),
                    );
                }
            }
            Err(e) => self.count(format!("{what}: error {}", error_kind(e))),
        }
    }
}

/// A short, stable name for an error (for the tallies).
pub fn error_kind(e: &Error) -> String {
    match e {
        Error::Hold(h) => format!(
            "hold {}",
            format!("{h:?}").split([' ', '{', '(']).next().unwrap_or("")
        ),
        Error::Database(d) => format!(
            "database {}",
            d.as_database_error()
                .and_then(|d| d.code().map(|c| c.into_owned()))
                .unwrap_or_else(|| "io".into())
        ),
        other => format!("{other:?}")
            .split([' ', '{', '('])
            .next()
            .unwrap_or("")
            .to_owned(),
    }
}

/// Options for the suite: a lease (and `settle_timeout`) short enough for
/// R2's recovery.
pub fn options(batch_size: u32) -> Options {
    Options {
        batch_size,
        settle_timeout: Duration::from_secs(1),
        run_lease: Duration::from_secs(1),
        ..Options::default()
    }
}

/// A fresh database with Cohort's tables, the host tables, the logs, `rows`
/// rows per table, and a handle on the engine's pool.
pub async fn world(rows: i64, options: Options) -> Arc<World> {
    world_with(rows, options, false).await
}

/// [`world`], with a row handler on notes and contacts when `handlers`
/// (claims then expire after 1 s, so crashed deliveries come back quickly).
pub async fn world_with(rows: i64, options: Options, handlers: bool) -> Arc<World> {
    let (db, _) = support::db_with_cohort("public").await;
    db.exec(SCHEMA).await;
    let options = if handlers {
        Options {
            claim_timeout: Duration::from_secs(1),
            max_attempts: cohort::MAX_ATTEMPTS,
            ..options
        }
    } else {
        options
    };
    let mut builder = model(
        Cohort::builder(db.engine_pool().clone())
            .options(options.clone())
            .rules(rules()),
    );
    let mut dispatching = None;
    if handlers {
        let recorder = Recorder {
            pool: db.pool().clone(),
        };
        builder = builder
            .row_handler::<RelNote, _>(recorder.clone())
            .row_handler::<RelContact, _>(recorder.clone());
        let pool = named_pool(&db, "rel-dispatcher", &[]).await;
        dispatching = Some(
            model(
                Cohort::builder(pool)
                    .options(options.clone())
                    .rules(rules()),
            )
            .row_handler::<RelNote, _>(recorder.clone())
            .row_handler::<RelContact, _>(recorder),
        );
    }
    support::grant_engine(&db, &builder).await;
    // Host deletions run the host's own DELETE on the engine's connection.
    support::grant_host(
        &db,
        "DELETE, SELECT ON public.rel_notes, public.rel_tickets, public.rel_contacts, public.rel_users, \
         public.rel_cases",
    )
    .await;
    let cohort = builder.build().await.expect("model");
    let dispatching = match dispatching {
        Some(b) => Some(b.build().await.expect("dispatching handle")),
        None => None,
    };
    let world = Arc::new(World {
        db,
        cohort,
        max_ids: [0; N].map(AtomicI64::new),
        tally: Mutex::new(BTreeMap::new()),
        results: Mutex::new(BTreeMap::new()),
        handlers,
        dispatching,
    });
    let mut rng = Rng::new(rows as u64);
    for t in 0..N {
        insert_rows(&world, &mut rng, t, rows).await;
    }
    world
}

/// A pool on `db` whose connections carry `application_name` = `name` and
/// `settings`, acting as the engine's role when there is one.
pub async fn named_pool(db: &TestDb, name: &str, settings: &[(&str, &str)]) -> sqlx::PgPool {
    armed_pool(db, name, settings, Arc::new(AtomicBool::new(true))).await
}

/// [`named_pool`] whose `settings` apply to a connection only once `armed`
/// is set, each time one is taken from the pool: so a handle can be built
/// (validation, registration) before a fault such as a tiny
/// `statement_timeout` takes effect for its runs.
pub async fn armed_pool(
    db: &TestDb,
    name: &str,
    settings: &[(&str, &str)],
    armed: Arc<AtomicBool>,
) -> sqlx::PgPool {
    let connect = db.options().application_name(name);
    let role = db.engine_role().map(str::to_owned);
    let settings: Vec<(String, String)> = settings
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    // Applied to a new connection (after_connect) and to an idle one taken
    // again (before_acquire): the setting's value, or its default while the
    // pool is not armed.
    async fn apply(
        conn: &mut sqlx::PgConnection,
        settings: &[(String, String)],
        armed: bool,
    ) -> Result<(), sqlx::Error> {
        for (k, v) in settings {
            let sql = if armed {
                format!("SET {k} = '{v}'")
            } else {
                format!("SET {k} = DEFAULT")
            };
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .execute(&mut *conn)
                .await?;
        }
        Ok(())
    }
    let (settings_on_connect, armed_on_connect) = (settings.clone(), armed.clone());
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .after_connect(move |conn, _| {
            let role = role.clone();
            let settings = settings_on_connect.clone();
            let armed = armed_on_connect.load(Ordering::SeqCst);
            Box::pin(async move {
                if let Some(role) = role {
                    sqlx::query(sqlx::AssertSqlSafe(format!("SET ROLE \"{role}\"")))
                        .execute(&mut *conn)
                        .await?;
                }
                apply(conn, &settings, armed).await
            })
        })
        .before_acquire(move |conn, _| {
            let settings = settings.clone();
            let armed = armed.load(Ordering::SeqCst);
            Box::pin(async move {
                apply(conn, &settings, armed).await?;
                Ok(true)
            })
        })
        .connect_with(connect)
        .await
        .expect("named pool")
}

/// Inserts `n` rows into table `t`: three in four expired, the rest fresh.
pub async fn insert_rows(world: &World, rng: &mut Rng, t: usize, n: i64) {
    let first = world.max_ids[t].fetch_add(n, Ordering::SeqCst) + 1;
    let expired = rng.below(4);
    let subject_base = rng.below(SUBJECTS) as i64;
    let table = TABLES[t].0;
    let age = "CASE WHEN (g + $4) % 4 = 0 THEN interval '1 day' ELSE interval '100 days' END";
    let sql = match table {
        "rel_notes" => format!(
            "INSERT INTO public.rel_notes SELECT g, $3, now() - {age} FROM generate_series($1::int8, $2::int8) g"
        ),
        "rel_tickets" => format!(
            "INSERT INTO public.rel_tickets (id, tenant_id, opened_at) \
             SELECT g, $3, now() - {age} FROM generate_series($1::int8, $2::int8) g"
        ),
        "rel_contacts" => format!(
            "INSERT INTO public.rel_contacts (id, tenant_id, created_at, email) \
             SELECT g, $3, now() - {age}, 'e' || g FROM generate_series($1::int8, $2::int8) g"
        ),
        "rel_cases" => format!(
            "INSERT INTO public.rel_cases (id, tenant_id, created_at, reference) \
             SELECT g, $3, now() - {age}, 'ref-' || g FROM generate_series($1::int8, $2::int8) g"
        ),
        _ => format!(
            "INSERT INTO public.rel_users SELECT g, $3, now() - {age}, \
             ('aaaa0000-0000-4000-8000-' || lpad(((g + $5) % {SUBJECTS})::text, 12, '0'))::uuid \
             FROM generate_series($1::int8, $2::int8) g"
        ),
    };
    let mut q = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(first)
        .bind(first + n - 1)
        .bind(tenant())
        .bind(expired as i64);
    if table == "rel_users" {
        q = q.bind(subject_base);
    }
    q.execute(world.db.pool()).await.expect("insert rows");
}

// ---------------------------------------------------------------------------
// The operations.

/// A random id of table `t` (it may have been deleted): seven times in ten
/// one of the 100 newest, where live rows are.
fn pick(world: &World, rng: &mut Rng, t: usize) -> i64 {
    let max = world.max_ids[t].load(Ordering::SeqCst).max(1);
    if rng.chance(70) {
        (max - rng.below(100) as i64).max(1)
    } else {
        rng.below(max as u64) as i64 + 1
    }
}

async fn pause(rng: &mut Rng, max_ms: u64) {
    let ms = rng.below(max_ms + 1);
    if ms > 0 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

/// A hold through the API, on a connection of its own or inside a caller's
/// transaction that lingers (holding the fence) and sometimes rolls back.
pub async fn hold_api(world: &World, rng: &mut Rng) {
    let t = rng.below(N as u64) as usize;
    let id = pick(world, rng, t);
    let mut request = HoldRequest::new(
        Uuid::from_u128(TABLES[t].1),
        id.to_string(),
        Some(tenant()),
        "reliability",
        Utc::now(),
    );
    // One hold in five expires within 100 ms.
    if rng.chance(20) {
        let ms = rng.below(100) as i64 + 1;
        request = request.expires_at(Utc::now() + chrono::TimeDelta::milliseconds(ms));
    }
    let mut conn = world.db.connect_engine().await;
    if rng.chance(50) {
        let r = world.cohort.holds().create(&mut conn, request).await;
        world.count(match r {
            Ok(_) => "hold api: created".to_owned(),
            Err(e) => format!("hold api: {}", error_kind(&e)),
        });
        return;
    }
    let mut tx = sqlx::Connection::begin(&mut conn).await.expect("begin");
    let r = world.cohort.holds().create(&mut tx, request).await;
    pause(rng, 3).await;
    if r.is_ok() && rng.chance(15) {
        tx.rollback().await.expect("rollback");
        world.count("hold api (caller transaction): rolled back");
        return;
    }
    let committed = tx.commit().await;
    world.count(match (r, committed) {
        (Ok(_), Ok(())) => "hold api (caller transaction): created".to_owned(),
        (Err(e), _) => format!("hold api (caller transaction): {}", error_kind(&e)),
        (_, Err(e)) => format!("hold api (caller transaction): commit {e}"),
    });
}

/// A hold inserted with plain SQL (the DDL's trigger takes the fence).
pub async fn hold_sql(world: &World, rng: &mut Rng) {
    let t = rng.below(N as u64) as usize;
    let id = pick(world, rng, t);
    let mut conn = world.db.connect().await;
    let mut tx = sqlx::Connection::begin(&mut conn).await.expect("begin");
    // One hold in five expires within 100 ms.
    let expires_ms = if rng.chance(20) {
        Some(rng.below(100) as i64 + 1)
    } else {
        None
    };
    let r = sqlx::query(
        "INSERT INTO public.retention_holds \
         (hold_id, retained_entity_id, record_id, tenant_id, reason, created_at, expires_at) \
         VALUES (gen_random_uuid(), $1, $2, $3, 'reliability (sql)', now(), \
                 clock_timestamp() + $4 * interval '1 millisecond')",
    )
    .bind(Uuid::from_u128(TABLES[t].1))
    .bind(id.to_string())
    .bind(tenant())
    .bind(expires_ms)
    .execute(&mut *tx)
    .await;
    pause(rng, 3).await;
    match r {
        Ok(_) => {
            tx.commit().await.expect("commit a plain hold");
            world.count("hold sql: created");
        }
        Err(e) => {
            world.count(format!("hold sql: {e}"));
        }
    }
}

/// Removes an active hold through the API.
pub async fn remove_hold(world: &World, rng: &mut Rng) {
    let salt = rng.next().to_string();
    let hold: Option<Uuid> = sqlx::query_scalar(
        "SELECT hold_id FROM public.retention_holds WHERE removed_at IS NULL \
         ORDER BY md5(hold_id::text || $1) LIMIT 1",
    )
    .bind(salt)
    .fetch_optional(world.db.pool())
    .await
    .expect("a hold");
    let Some(hold) = hold else {
        world.count("remove hold: none active");
        return;
    };
    let mut conn = world.db.connect_engine().await;
    let r = world
        .cohort
        .holds()
        .remove(&mut conn, hold, Utc::now())
        .await;
    world.count(match r {
        Ok(_) => "remove hold: removed".to_owned(),
        Err(e) => format!("remove hold: {}", error_kind(&e)),
    });
}

pub async fn sweep(world: &World, rng: &mut Rng) {
    let dry = rng.chance(25);
    let options = if dry {
        SweepOptions::default().dry_run()
    } else {
        SweepOptions::default()
    };
    let r = world.cohort.sweep_with(&scope(), Utc::now(), options).await;
    world.record(if dry { "sweep (dry run)" } else { "sweep" }, &r);
}

pub async fn erase(world: &World, rng: &mut Rng) {
    let dry = rng.chance(25);
    let mut request = ErasureRequest::new(subject(rng.next()));
    if dry {
        request = request.dry_run();
    }
    let r = world.cohort.erase(&scope(), Utc::now(), request).await;
    world.record(if dry { "erasure (dry run)" } else { "erasure" }, &r);
}

/// A host deletion of one to three rows of one table through the deletion
/// service; the callback marks its transaction as the host's.
pub async fn host_delete(world: &World, rng: &mut Rng) {
    let t = rng.below(N as u64) as usize;
    let n = rng.below(3) + 1;
    let mut ids: Vec<i64> = (0..n).map(|_| pick(world, rng, t)).collect();
    ids.sort_unstable();
    ids.dedup();
    let entity = Uuid::from_u128(TABLES[t].1);
    let targets: Vec<Target> = ids
        .iter()
        .map(|id| Target::new(entity, id.to_string(), Some(tenant())))
        .collect();
    let table = TABLES[t].0;
    let mut conn = world.db.connect_engine().await;
    let r = world
        .cohort
        .deletion()
        .execute(&mut conn, &targets, move |c| {
            Box::pin(async move {
                sqlx::query("SELECT set_config('rel.source', 'host', true)")
                    .execute(&mut *c)
                    .await?;
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "DELETE FROM public.{table} WHERE id = ANY($1)"
                )))
                .bind(ids)
                .execute(&mut *c)
                .await
                .map(|d| d.rows_affected())
            })
        })
        .await;
    world.count(match r {
        Ok(DeletionOutcome::Deleted(n)) => format!("host deletion: deleted {n}"),
        Ok(DeletionOutcome::Protected { .. }) => "host deletion: protected".to_owned(),
        Err(DeletionError::Cohort(e)) => format!("host deletion: {}", error_kind(&e)),
        Err(DeletionError::Callback(e)) => format!("host deletion: callback {e}"),
    });
}

pub async fn insert(world: &World, rng: &mut Rng) {
    let t = rng.below(N as u64) as usize;
    let n = rng.below(5) as i64 + 1;
    insert_rows(world, rng, t, n).await;
    world.count("insert rows");
}

/// One pass of the dispatcher; two times in five it crashes mid-way (the
/// task is aborted after 0 to 12 ms, dropping its connections, or its
/// backends are terminated).
pub async fn dispatch(world: &World, rng: &mut Rng) {
    let Some(handle) = &world.dispatching else {
        return insert(world, rng).await;
    };
    let dispatcher = handle.dispatcher();
    let pass = tokio::spawn(async move { dispatcher.run_once().await });
    if rng.chance(40) {
        pause(rng, 12).await;
        if rng.chance(50) {
            pass.abort();
            let _ = pass.await;
            world.count("dispatch: crashed (task aborted)");
        } else {
            let _: i64 = sqlx::query_scalar(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity \
                 WHERE datname = current_database() AND application_name = 'rel-dispatcher'",
            )
            .fetch_one(world.db.pool())
            .await
            .expect("terminate");
            let r = pass.await.expect("join");
            world.count(match r {
                Ok(_) => "dispatch: backend terminated, pass ended".to_owned(),
                Err(e) => format!("dispatch: backend terminated, {}", error_kind(&e)),
            });
        }
        return;
    }
    match pass.await.expect("join") {
        Ok(report) => {
            world.count("dispatch: pass");
            if report.reclaimed > 0 {
                world.count(format!("dispatch: reclaimed {}", report.reclaimed.min(5)));
            }
        }
        Err(e) => world.count(format!("dispatch: {}", error_kind(&e))),
    }
}

/// Runs the dispatcher until no delivery is pending or in flight (crashed
/// claims expire after the claim timeout, then come back).
pub async fn drain(world: &World) {
    if !world.handlers {
        return;
    }
    for _ in 0..600 {
        world
            .cohort
            .dispatcher()
            .run_once()
            .await
            .expect("dispatch");
        let open: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM public.sweep_row_handler_status \
             WHERE state IN ('Pending', 'InFlight')",
        )
        .fetch_one(world.db.pool())
        .await
        .expect("queue");
        if open == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the handler queue never drained");
}

/// One occurrence of the scheduled worker, at the current time rounded down
/// to 200 ms, so that tasks running it at once collide on the same
/// occurrence (W4: it runs once across replicas).
pub async fn worker_occurrence(world: &World) {
    let ms = Utc::now().timestamp_millis();
    let occurrence =
        DateTime::<Utc>::from_timestamp_millis(ms - ms.rem_euclid(200)).expect("an occurrence");
    let worker = world.cohort.worker().tenants(TenantContext::new(tenant()));
    let r = worker
        .run_occurrence(occurrence, &cohort::CancellationToken::new())
        .await;
    world.count(match r {
        Ok(report) if report.already_swept => "worker: occurrence already swept".to_owned(),
        Ok(report) => format!(
            "worker: occurrence swept, {} passes, {} failed",
            report.passes.len(),
            report.failed_passes()
        ),
        Err(e) => format!("worker: {}", error_kind(&e)),
    });
}

/// One random operation, after a random pause of up to 3 ms.
pub async fn random_op(world: &World, rng: &mut Rng) {
    pause(rng, 3).await;
    match rng.below(100) {
        0..15 => hold_api(world, rng).await,
        15..25 => hold_sql(world, rng).await,
        25..35 => remove_hold(world, rng).await,
        35..48 => sweep(world, rng).await,
        48..60 => erase(world, rng).await,
        60..76 => host_delete(world, rng).await,
        76..86 => dispatch(world, rng).await,
        86..90 => worker_occurrence(world).await,
        _ => insert(world, rng).await,
    }
}

/// `workers` tasks doing `ops` operations between them; seeds derive from `seed`.
pub async fn run_workload(world: &Arc<World>, seed: u64, workers: u64, ops: u64) {
    let mut tasks = Vec::new();
    for w in 0..workers {
        let world = world.clone();
        let share = ops / workers + u64::from(w < ops % workers);
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng::new(seed ^ (w.wrapping_mul(0x1000_0000_01b3)));
            for _ in 0..share {
                random_op(&world, &mut rng).await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("a worker panicked");
    }
}

// ---------------------------------------------------------------------------
// The checker.

/// What the checker saw.
#[derive(Debug, Default)]
pub struct Report {
    pub mutations: BTreeMap<String, i64>,
    pub holds_created: i64,
    pub holds_removed: i64,
    pub holds_expiring: i64,
    pub held_rows_judged: i64,
    pub runs: BTreeMap<String, i64>,
    pub details: i64,
    pub queued: i64,
    pub deliveries: i64,
    pub redelivered: i64,
    pub problems: Vec<String>,
}

async fn rows_of(db: &TestDb, sql: &str) -> Vec<String> {
    sqlx::query_scalar::<_, String>(sqlx::AssertSqlSafe(sql.to_owned()))
        .fetch_all(db.pool())
        .await
        .unwrap_or_else(|e| panic!("checker query failed: {e}\n{sql}"))
}

async fn scalar(db: &TestDb, sql: &str) -> i64 {
    sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(sql.to_owned()))
        .fetch_one(db.pool())
        .await
        .unwrap_or_else(|e| panic!("checker query failed: {e}\n{sql}"))
}

/// Checks the history. Every problem is listed (with up to 20 examples each).
pub async fn check(world: &World) -> Report {
    let db = &world.db;
    let mut report = Report::default();
    let problem = |what: &str, rows: Vec<String>| {
        if !rows.is_empty() {
            let shown: Vec<&String> = rows.iter().take(20).collect();
            report_push(what, rows.len(), &shown)
        } else {
            None
        }
    };
    let mut problems = Vec::new();

    // 1. No row was mutated by a transaction that committed after a hold on
    //    that row committed (while the hold was still unremoved).
    problems.extend(problem(
        "a row was mutated by a transaction that committed after a hold on it committed",
        rows_of(
            db,
            "SELECT format('%s %s %s by %s (xid %s), hold %s', m.tbl, m.id, m.op, m.source, m.xid, h.hold_id) \
             FROM public.rel_log m \
             JOIN public.rel_tables t ON t.tbl = m.tbl \
             JOIN public.retention_holds h ON h.retained_entity_id = t.entity \
                  AND h.record_id = m.id::text AND h.tenant_id IS NOT DISTINCT FROM $$TENANT$$::uuid \
             JOIN public.rel_hold_commit c ON c.hold_id = h.hold_id AND c.op = 'create' \
             WHERE NOT pg_visible_in_snapshot(m.xid, c.snap) \
               AND (h.expires_at IS NULL OR m.stmt_ts < h.expires_at) \
               AND NOT EXISTS (SELECT 1 FROM public.rel_hold_commit r \
                               WHERE r.hold_id = h.hold_id AND r.op = 'remove' \
                                 AND NOT pg_visible_in_snapshot(m.xid, r.snap)) \
             ORDER BY m.seq"
                .replace("$$TENANT$$", &format!("'{}'", tenant()))
                .as_str(),
        )
        .await,
    ));
    report.held_rows_judged = scalar(
        db,
        "SELECT count(DISTINCT (h.retained_entity_id, h.record_id)) FROM public.retention_holds h \
         JOIN public.rel_hold_commit c ON c.hold_id = h.hold_id AND c.op = 'create'",
    )
    .await;

    // 2. Every mutation by Cohort has exactly one row detail, written in the
    //    same transaction, by a run that was not a dry run, for the same
    //    action; and every row detail of a real run matches one mutation.
    problems.extend(problem(
        "a mutation by Cohort without exactly one row detail in its transaction",
        rows_of(
            db,
            "SELECT format('%s %s %s (xid %s): %s details', m.tbl, m.id, m.op, m.xid, \
                (SELECT count(*) FROM public.rel_detail d \
                 JOIN public.sweep_run r ON r.run_id = d.run_id AND NOT r.dry_run \
                 WHERE d.xid = m.xid AND d.entity = t.entity AND d.record_id = m.id::text \
                   AND d.action = m.op)) \
             FROM public.rel_log m JOIN public.rel_tables t ON t.tbl = m.tbl \
             WHERE m.source = 'cohort' AND (SELECT count(*) FROM public.rel_detail d \
                 JOIN public.sweep_run r ON r.run_id = d.run_id AND NOT r.dry_run \
                 WHERE d.xid = m.xid AND d.entity = t.entity AND d.record_id = m.id::text \
                   AND d.action = m.op) <> 1 \
             ORDER BY m.seq",
        )
        .await,
    ));
    problems.extend(problem(
        "a row detail of a real run that matches no mutation (or several)",
        rows_of(
            db,
            "SELECT format('run %s: %s %s %s (xid %s)', d.run_id, t.tbl, d.record_id, d.action, d.xid) \
             FROM public.rel_detail d JOIN public.sweep_run r ON r.run_id = d.run_id AND NOT r.dry_run \
             JOIN public.rel_tables t ON t.entity = d.entity \
             WHERE (SELECT count(*) FROM public.rel_log m WHERE m.xid = d.xid AND m.tbl = t.tbl \
                    AND m.id::text = d.record_id AND m.op = d.action AND m.source = 'cohort') <> 1 \
             ORDER BY d.seq",
        )
        .await,
    ));
    problems.extend(problem(
        "a mutation that is neither a purge, a soft delete nor an anonymisation",
        rows_of(
            db,
            "SELECT format('%s %s by %s', tbl, id, source) FROM public.rel_log WHERE op = 'Other'",
        )
        .await,
    ));
    problems.extend(problem(
        "a dry run wrote a row detail in a transaction that mutated a row",
        rows_of(
            db,
            "SELECT format('run %s xid %s', d.run_id, d.xid) FROM public.rel_detail d \
             JOIN public.sweep_run r ON r.run_id = d.run_id AND r.dry_run \
             WHERE EXISTS (SELECT 1 FROM public.rel_log m WHERE m.xid = d.xid)",
        )
        .await,
    ));

    // 3. Summary counts equal the data's changes, per run and type.
    problems.extend(problem(
        "a summary's affected count differs from the rows its run changed",
        rows_of(
            db,
            "SELECT format('run %s %s: summary %s, changed %s', s.run_id, s.entity_type, \
                s.affected_count, coalesce(c.n, 0)) \
             FROM public.sweep_run_entity_summary s \
             JOIN public.sweep_run r ON r.run_id = s.run_id AND NOT r.dry_run \
             LEFT JOIN (SELECT d.run_id, d.entity, count(*) AS n FROM public.rel_detail d \
                        JOIN public.rel_tables t ON t.entity = d.entity \
                        JOIN public.rel_log m ON m.xid = d.xid AND m.tbl = t.tbl \
                             AND m.id::text = d.record_id AND m.op = d.action \
                        GROUP BY 1, 2) c ON c.run_id = s.run_id AND c.entity = s.retained_entity_id \
             WHERE s.affected_count <> coalesce(c.n, 0)",
        )
        .await,
    ));
    // The results the API returned agree with the ledger.
    let results = world.results.lock().expect("results").clone();
    let mut disagreements = Vec::new();
    for (run_id, by_entity) in &results {
        for (entity, affected) in by_entity {
            let stored: Option<i64> = sqlx::query_scalar(
                "SELECT affected_count FROM public.sweep_run_entity_summary \
                 WHERE run_id = $1 AND retained_entity_id = $2",
            )
            .bind(run_id)
            .bind(entity)
            .fetch_optional(db.pool())
            .await
            .expect("summary");
            if stored != Some(*affected as i64) {
                disagreements.push(format!(
                    "run {run_id} entity {entity}: result {affected}, ledger {stored:?}"
                ));
            }
        }
    }
    problems.extend(problem(
        "a run's result disagrees with its ledger summary",
        disagreements,
    ));

    // 4. Every run and summary is settled.
    problems.extend(problem(
        "a run or summary left unsettled",
        rows_of(
            db,
            "SELECT format('run %s %s', run_id, status) FROM public.sweep_run \
             WHERE settled_at IS NULL OR status NOT IN ('Succeeded', 'PartiallyFailed', 'Failed', 'Cancelled') \
             UNION ALL \
             SELECT format('summary %s %s %s', run_id, entity_type, status) \
             FROM public.sweep_run_entity_summary WHERE status = 'Running'",
        )
        .await,
    ));

    // W4: each occurrence of the scheduled worker ran once across the tasks
    //    that ran it at the same time; only a run cancelled or abandoned by
    //    its owner (settled with an `Abandoned` failure) lets it run again.
    problems.extend(problem(
        "an occurrence of the scheduled worker swept more than once",
        rows_of(
            db,
            "SELECT format('occurrence %s tenant %s: %s runs', logical_now, tenant_id, count(*)) \
             FROM public.sweep_run WHERE trigger = 'Scheduled' AND status <> 'Cancelled' \
               AND coalesce(error, '') NOT LIKE '%Abandoned%' \
             GROUP BY logical_now, tenant_id, dry_run HAVING count(*) > 1",
        )
        .await,
    ));

    // 5. Row handlers (when registered): every change of a handled type has
    //    one delivery per handler queued, each was made at least once, only
    //    for changes that committed, with the payload captured for it.
    if world.handlers {
        problems.extend(problem(
            "a change of a handled type without exactly one queued delivery",
            rows_of(
                db,
                "SELECT format('%s %s %s (xid %s): %s queued', m.tbl, m.id, m.op, m.xid, \
                    (SELECT count(*) FROM public.sweep_row_handler_status w \
                     JOIN public.rel_detail d ON d.run_id = w.run_id AND d.entity = w.retained_entity_id \
                          AND d.record_id = w.record_id \
                     WHERE d.xid = m.xid AND d.entity = t.entity AND d.record_id = m.id::text)) \
                 FROM public.rel_log m JOIN public.rel_tables t ON t.tbl = m.tbl \
                 WHERE m.source = 'cohort' AND m.tbl IN ('rel_notes', 'rel_contacts') \
                   AND (SELECT count(*) FROM public.sweep_row_handler_status w \
                     JOIN public.rel_detail d ON d.run_id = w.run_id AND d.entity = w.retained_entity_id \
                          AND d.record_id = w.record_id \
                     WHERE d.xid = m.xid AND d.entity = t.entity AND d.record_id = m.id::text) <> 1",
            )
            .await,
        ));
        problems.extend(problem(
            "a queued delivery that did not succeed",
            rows_of(
                db,
                "SELECT format('%s %s: %s after %s attempts', retained_entity_id, record_id, state, attempts) \
                 FROM public.sweep_row_handler_status WHERE state <> 'Succeeded'",
            )
            .await,
        ));
        problems.extend(problem(
            "a succeeded delivery the handler never made",
            rows_of(
                db,
                "SELECT format('run %s %s %s', w.run_id, w.retained_entity_id, w.record_id) \
                 FROM public.sweep_row_handler_status w \
                 WHERE NOT EXISTS (SELECT 1 FROM public.rel_delivered x WHERE x.run_id = w.run_id \
                                   AND x.entity = w.retained_entity_id AND x.record_id = w.record_id)",
            )
            .await,
        ));
        problems.extend(problem(
            "a delivery for no queued change, or with another row's payload",
            rows_of(
                db,
                "SELECT format('run %s %s %s attempt %s (snapshot %s)', x.run_id, x.entity, x.record_id, \
                    x.attempt, x.snapshot) \
                 FROM public.rel_delivered x \
                 WHERE x.snapshot <> x.record_id OR NOT EXISTS (SELECT 1 FROM public.sweep_row_handler_status w \
                     WHERE w.run_id = x.run_id AND w.retained_entity_id = x.entity AND w.record_id = x.record_id)",
            )
            .await,
        ));
        report.deliveries = scalar(db, "SELECT count(*) FROM public.rel_delivered").await;
        report.redelivered = scalar(
            db,
            "SELECT count(*) FROM (SELECT 1 FROM public.rel_delivered \
             GROUP BY run_id, entity, record_id HAVING count(*) > 1) x",
        )
        .await;
        report.queued = scalar(db, "SELECT count(*) FROM public.sweep_row_handler_status").await;
    }

    for (k, n) in sqlx::query_as::<_, (String, i64)>(
        "SELECT tbl || ' ' || op || ' by ' || source, count(*) FROM public.rel_log GROUP BY 1 ORDER BY 1",
    )
    .fetch_all(db.pool())
    .await
    .expect("mutations")
    {
        report.mutations.insert(k, n);
    }
    for (k, n) in sqlx::query_as::<_, (String, i64)>(
        "SELECT run_kind || CASE WHEN dry_run THEN ' (dry run) ' ELSE ' ' END || status, count(*) \
         FROM public.sweep_run GROUP BY 1 ORDER BY 1",
    )
    .fetch_all(db.pool())
    .await
    .expect("runs")
    {
        report.runs.insert(k, n);
    }
    report.holds_created = scalar(
        db,
        "SELECT count(*) FROM public.rel_hold_commit WHERE op = 'create'",
    )
    .await;
    report.holds_expiring = scalar(
        db,
        "SELECT count(*) FROM public.retention_holds h JOIN public.rel_hold_commit c \
         ON c.hold_id = h.hold_id AND c.op = 'create' WHERE h.expires_at IS NOT NULL",
    )
    .await;
    report.holds_removed = scalar(
        db,
        "SELECT count(*) FROM public.rel_hold_commit WHERE op = 'remove'",
    )
    .await;
    report.details = scalar(db, "SELECT count(*) FROM public.rel_detail").await;
    report.problems = problems;
    report
}

fn report_push(what: &str, total: usize, shown: &[&String]) -> Option<String> {
    let mut s = format!("{what}: {total}");
    for r in shown {
        s.push_str("\n    ");
        s.push_str(r);
    }
    Some(s)
}

/// Prints the report and the tallies, then fails on any problem.
pub fn assert_clean(world: &World, report: &Report, label: &str) {
    println!("--- {label}");
    println!("operations:");
    for (k, n) in world.tally.lock().expect("tally").iter() {
        println!("  {n:>6}  {k}");
    }
    println!("mutations (committed):");
    for (k, n) in &report.mutations {
        println!("  {n:>6}  {k}");
    }
    println!("runs:");
    for (k, n) in &report.runs {
        println!("  {n:>6}  {k}");
    }
    println!(
        "holds created {} ({} expiring within 100 ms), removed {}, distinct held rows judged {}, row details {}",
        report.holds_created,
        report.holds_expiring,
        report.holds_removed,
        report.held_rows_judged,
        report.details
    );
    if world.handlers {
        println!(
            "handler deliveries queued {}, made {}, rows delivered more than once {}",
            report.queued, report.deliveries, report.redelivered
        );
    }
    assert!(
        report.problems.is_empty(),
        "{label}: the checker found problems:\n{}",
        report.problems.join("\n")
    );
}

/// Seconds since `start`, for the printed summary.
pub fn elapsed(start: std::time::Instant) -> f64 {
    start.elapsed().as_secs_f64()
}

/// `DateTime` of now, kept for symmetry with the other tests.
pub fn now() -> DateTime<Utc> {
    Utc::now()
}
