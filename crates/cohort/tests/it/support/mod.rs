//! Shared test support: a fresh database per test (see `cohort-testdb`),
//! helpers to install Cohort's tables and act as the engine's role, the log
//! capture, the test rule provider, gates and fence waits. The shared models
//! and their tables are in [`models`], the fixtures several areas repeat in
//! [`fixtures`], shared audit observers in [`observers`].
#![allow(dead_code, unreachable_pub)]

pub mod child;
pub mod fixtures;
pub mod models;
pub mod observers;

pub use cohort_testdb::TestDb;

use cohort::schema::{SchemaName, ddl};

/// Grants the database's engine role (`COHORT_TEST_ROLE=least`, see
/// `cohort-testdb`) exactly what `CohortBuilder::grants` generates for
/// `builder`'s model; nothing when the engine runs as the administrative user,
/// or when the model is invalid (build then reports it).
pub async fn grant_engine(db: &TestDb, builder: &cohort::CohortBuilder) {
    let Some(role) = db.engine_role() else { return };
    let roles = cohort::schema::RoleNames::new(role).expect("role name");
    if let Ok(grants) = builder.grants(&roles) {
        db.exec(&grants.sql()).await;
    }
}

/// Builds `builder` (made on [`TestDb::engine_pool`]) after
/// [`grant_engine`]: the handle runs as the least-privileged role in that mode.
pub async fn build_engine(
    db: &TestDb,
    builder: cohort::CohortBuilder,
) -> Result<cohort::Cohort, cohort::Error> {
    grant_engine(db, &builder).await;
    builder.build().await
}

/// Grants the engine role (when there is one) a host's own privileges, for a
/// test whose host work (in the caller's transaction, in a deletion
/// callback) runs on the engine's connection: `what` is the part of a
/// `GRANT` between `GRANT` and `TO`, e.g. `INSERT ON public.host_audit`.
pub async fn grant_host(db: &TestDb, what: &str) {
    if let Some(role) = db.engine_role() {
        db.exec(&format!("GRANT {what} TO \"{role}\"")).await;
    }
}

/// `builder.build_engine(&db)`: [`build_engine`] as a method, so a test's
/// builder chain changes in two places only (`db.engine_pool()` and this).
pub trait BuildEngine {
    /// See [`build_engine`].
    fn build_engine(
        self,
        db: &TestDb,
    ) -> impl std::future::Future<Output = Result<cohort::Cohort, cohort::Error>>;
}

impl BuildEngine for cohort::CohortBuilder {
    fn build_engine(
        self,
        db: &TestDb,
    ) -> impl std::future::Future<Output = Result<cohort::Cohort, cohort::Error>> {
        build_engine(db, self)
    }
}

/// A fresh database with Cohort's tables installed in `schema`.
pub async fn db_with_cohort(schema: &str) -> (TestDb, SchemaName) {
    let db = TestDb::new().await;
    let schema = SchemaName::new(schema).expect("valid schema name");
    db.exec(&ddl(&schema)).await;
    (db, schema)
}

/// Everything logged at WARN or above by this test process, since `start`.
///
/// A process-wide subscriber writes into one buffer: a thread-local one would
/// race with tracing's per-callsite interest cache when tests run in
/// parallel. Tests look for their own, specific lines.
pub struct LogCapture {
    start: usize,
}

static LOGS: std::sync::Mutex<Vec<u8>> = std::sync::Mutex::new(Vec::new());
static INSTALL: std::sync::Once = std::sync::Once::new();

impl LogCapture {
    pub fn start() -> LogCapture {
        INSTALL.call_once(|| {
            let subscriber = tracing_subscriber::fmt()
                .with_ansi(false)
                .with_max_level(tracing::Level::WARN)
                .with_writer(|| CaptureWriter)
                .finish();
            let _ = tracing::subscriber::set_global_default(subscriber);
        });
        LogCapture {
            start: LOGS.lock().expect("log buffer").len(),
        }
    }

    pub fn text(&self) -> String {
        let logs = LOGS.lock().expect("log buffer");
        String::from_utf8_lossy(&logs[self.start.min(logs.len())..]).into_owned()
    }
}

struct CaptureWriter;

impl std::io::Write for CaptureWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        LOGS.lock().expect("log buffer").extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cohort::policy::ProviderError;
use cohort::{Capabilities, ResolutionContext, Rule, RuleProvider};
use futures_util::future::BoxFuture;

/// One resolution the test provider saw: category, tenant, logical time.
pub type Seen = (String, Option<uuid::Uuid>, chrono::DateTime<chrono::Utc>);

/// What the test provider answers for a category.
#[derive(Clone)]
#[allow(
    clippy::large_enum_variant,
    reason = "a handful per test; boxing the rule would only add noise"
)]
pub enum Answer {
    Rule(Rule),
    NoRule,
    Error,
    Panic,
}

/// A rule provider for tests: fixed capabilities and answers per category,
/// and a record of every resolution context it saw.
#[derive(Clone, Default)]
pub struct TestRules {
    pub capabilities: HashMap<String, Capabilities>,
    pub answers: Arc<Mutex<HashMap<String, Answer>>>,
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

impl TestRules {
    pub fn new() -> TestRules {
        TestRules::default()
    }

    /// Declares `caps` for `category` and answers with `rule`.
    pub fn with(mut self, category: &str, caps: Capabilities, rule: Rule) -> TestRules {
        self.capabilities.insert(category.into(), caps);
        self.answers
            .lock()
            .expect("answers")
            .insert(category.into(), Answer::Rule(rule));
        self
    }

    /// Declares `caps` for `category` and answers with `answer`.
    pub fn answering(mut self, category: &str, caps: Capabilities, answer: Answer) -> TestRules {
        self.capabilities.insert(category.into(), caps);
        self.answers
            .lock()
            .expect("answers")
            .insert(category.into(), answer);
        self
    }

    /// Changes the answer for a category (capabilities stay as declared).
    pub fn set(&self, category: &str, answer: Answer) {
        self.answers
            .lock()
            .expect("answers")
            .insert(category.into(), answer);
    }
}

impl RuleProvider for TestRules {
    fn capabilities(&self, category: &str) -> Option<Capabilities> {
        self.capabilities.get(category).cloned()
    }

    fn resolve<'a>(
        &'a self,
        ctx: ResolutionContext<'a>,
    ) -> BoxFuture<'a, Result<Option<Rule>, ProviderError>> {
        self.seen.lock().expect("seen").push((
            ctx.category.to_owned(),
            ctx.tenant.map(|t| t.id),
            ctx.now,
        ));
        let answer = self
            .answers
            .lock()
            .expect("answers")
            .get(ctx.category)
            .cloned();
        Box::pin(async move {
            match answer {
                Some(Answer::Rule(r)) => Ok(Some(r)),
                Some(Answer::NoRule) | None => Ok(None),
                Some(Answer::Error) => Err("the policy service is down: secret-token-123".into()),
                Some(Answer::Panic) => panic!("provider bug"),
            }
        })
    }
}

/// Counts rows of a table (test-side SQL).
pub async fn count(db: &TestDb, sql: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
        .fetch_one(db.pool())
        .await
        .expect("count query")
}

/// A pool whose connections act as an unprivileged role (`cohort_test_app`),
/// so row-level security applies to them (superusers bypass it).
pub async fn app_pool(db: &TestDb) -> sqlx::PgPool {
    db.exec(
        r#"
        DO $$ BEGIN
          CREATE ROLE cohort_test_app NOLOGIN;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
        END $$;
        GRANT ALL ON ALL TABLES IN SCHEMA public TO cohort_test_app;
        GRANT ALL ON SCHEMA public TO cohort_test_app;
        "#,
    )
    .await;
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .after_connect(|conn, _| {
            Box::pin(async move {
                sqlx::query("SET ROLE cohort_test_app")
                    .execute(conn)
                    .await?;
                Ok(())
            })
        })
        .connect_with(db.options())
        .await
        .expect("app pool")
}

/// The advisory lock a gate waits on.
pub const GATE: i64 = 4242;

/// Puts a gate inside every select of `tables`: row-level security evaluates
/// `gate(id::text)` per row, after the statement's snapshot is taken, and for
/// a row whose id is one of `first_ids` it waits until advisory lock [`GATE`]
/// is free. Hold the lock, start the statement, wait with
/// [`wait_for_gate`], act, release. Row-level security only applies to
/// unprivileged roles: run the gated side through [`app_pool`].
pub async fn install_gate(db: &TestDb, tables: &[&str], first_ids: &[&str]) {
    let ids: Vec<String> = first_ids.iter().map(|i| format!("'{i}'")).collect();
    db.exec(&format!(
        r#"
        CREATE FUNCTION public.gate(id text) RETURNS boolean LANGUAGE plpgsql AS $$
        BEGIN
          IF id IN ({ids}) THEN
            PERFORM pg_advisory_lock({GATE}); PERFORM pg_advisory_unlock({GATE});
          END IF;
          RETURN true;
        END $$;
        "#,
        ids = ids.join(", ")
    ))
    .await;
    for table in tables {
        db.exec(&format!(
            "ALTER TABLE {table} ENABLE ROW LEVEL SECURITY; ALTER TABLE {table} FORCE ROW LEVEL SECURITY; \
             CREATE POLICY gated ON {table} USING (public.gate(id::text));"
        ))
        .await;
    }
}

/// Waits until some backend of this connection's database waits for the
/// gate's advisory lock ([`GATE`]). Waits in other tests' databases, and on
/// other advisory locks, do not count.
pub async fn wait_for_gate(conn: &mut sqlx::PgConnection) {
    // A single-bigint advisory key shows in pg_locks as classid = its high
    // 32 bits, objid = its low 32 bits, objsubid = 1.
    for _ in 0..3000 {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_catalog.pg_locks \
             WHERE locktype = 'advisory' AND NOT granted \
               AND database = (SELECT oid FROM pg_catalog.pg_database \
                               WHERE datname = pg_catalog.current_database()) \
               AND classid = $1::int8::oid AND objid = $2::int8::oid AND objsubid = 1",
        )
        .bind(GATE >> 32)
        .bind(GATE & 0xffff_ffff)
        .fetch_one(&mut *conn)
        .await
        .expect("pg_locks");
        if waiting > 0 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("nobody ever waited on the gate");
}

/// The class (first key) of Cohort's entity fences, as pg_locks shows it.
pub const FENCE_CLASS: i64 = 1_131_376_754;

/// Waits until some backend of `conn`'s database waits for an entity fence
/// (a two-int4 advisory lock of Cohort's class), shared or exclusive.
pub async fn wait_for_fence(conn: &mut sqlx::PgConnection) {
    for _ in 0..3000 {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_catalog.pg_locks \
             WHERE locktype = 'advisory' AND NOT granted \
               AND database = (SELECT oid FROM pg_catalog.pg_database \
                               WHERE datname = pg_catalog.current_database()) \
               AND classid = $1::int8::oid AND objsubid = 2",
        )
        .bind(FENCE_CLASS)
        .fetch_one(&mut *conn)
        .await
        .expect("pg_locks");
        if waiting > 0 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("nobody ever waited on an entity fence");
}
