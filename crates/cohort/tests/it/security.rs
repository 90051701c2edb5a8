//! Least privilege (SEC1-SEC4): the grants Cohort generates, the privilege
//! and row-level-security checks at build, and the whole engine running as a
//! role that has exactly those grants.
//!
//! Every test here runs the engine as a least-privileged role of its own
//! (`TestDb::least_privileged`), whatever `COHORT_TEST_ROLE` says. Setup SQL
//! runs as the administrative user.

use crate::support;
use crate::support::fixtures::{scope_a, tenant_a};
use crate::support::{TestDb, TestRules, count};
use chrono::{DateTime, Duration, Utc};
use cohort::holds::{DeletionOutcome, HoldFilter, HoldRequest, Target};
use cohort::schema::{RoleNames, SchemaName, ddl};
use cohort::{
    Capabilities, Cohort, CohortBuilder, ErasureRequest, Error, Options, Period, Rule, RunStatus,
    Scope, Strategy, TenantContext, ValidationProblem,
};
use uuid::Uuid;

const NOTE: &str = "4f1d2a6e-0c55-4b8e-9a61-1f0e7c3b5a01";

/// Purge only, no subject: row locks need `UPDATE` on one column.
#[derive(cohort::Retained)]
#[cohort(
    category = "notes",
    anchor = "created_at",
    table = "Notes",
    schema = "Host Data"
)]
#[cohort(id = "4f1d2a6e-0c55-4b8e-9a61-1f0e7c3b5a01")]
#[allow(dead_code)]
struct Note {
    id: Uuid,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
    body: String,
}

struct Scramble;
impl cohort::Anonymiser for Scramble {
    fn anonymise(original: Option<&str>) -> Option<String> {
        original.map(|o| format!("anon-{}", o.len()))
    }
}

/// Anonymise with every method; a subject column whose name needs quoting.
#[derive(cohort::Retained)]
#[cohort(
    category = "contacts",
    anchor = "created_at",
    table = "Case Contacts",
    schema = "Host Data"
)]
#[cohort(id = "4f1d2a6e-0c55-4b8e-9a61-1f0e7c3b5a02")]
#[allow(dead_code)]
struct Contact {
    id: Uuid,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
    anonymised_at: Option<DateTime<Utc>>,
    #[cohort(anonymise = "null", erasure_subject, column = "E-mail")]
    email: Option<String>,
    #[cohort(anonymise = "empty")]
    full_name: String,
    #[cohort(anonymise(literal = "[redacted]"))]
    phone: String,
    #[cohort(anonymise_with = Scramble)]
    external_ref: String,
}

/// Soft-delete with deleted-at; a uuid subject.
#[derive(cohort::Retained)]
#[cohort(
    category = "tickets",
    anchor = "opened_at",
    table = "tickets",
    schema = "Host Data"
)]
#[cohort(id = "4f1d2a6e-0c55-4b8e-9a61-1f0e7c3b5a03")]
#[allow(dead_code)]
struct Ticket {
    id: i64,
    tenant_id: Uuid,
    opened_at: Option<DateTime<Utc>>,
    is_deleted: bool,
    deleted_at: Option<DateTime<Utc>>,
    #[cohort(erasure_subject)]
    reporter: Uuid,
}

/// Purge under disposition review (contract DR1-DR3).
#[derive(cohort::Retained)]
#[cohort(
    category = "receipts",
    anchor = "issued_at",
    table = "receipts",
    schema = "Host Data"
)]
#[cohort(id = "4f1d2a6e-0c55-4b8e-9a61-1f0e7c3b5a04")]
#[allow(dead_code)]
struct Receipt {
    id: i64,
    tenant_id: Uuid,
    issued_at: DateTime<Utc>,
}

const HOST_TABLES: &str = r#"
CREATE SCHEMA "Host Data";
CREATE TABLE "Host Data"."Notes" (
    id uuid PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz NOT NULL, body text NOT NULL);
CREATE TABLE "Host Data"."Case Contacts" (
    id uuid PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz NOT NULL, anonymised_at timestamptz,
    "E-mail" text, full_name text NOT NULL, phone text NOT NULL, external_ref text NOT NULL);
CREATE TABLE "Host Data".tickets (
    id bigint PRIMARY KEY, tenant_id uuid NOT NULL, opened_at timestamptz,
    is_deleted boolean NOT NULL DEFAULT false, deleted_at timestamptz, reporter uuid NOT NULL);
CREATE TABLE "Host Data".receipts (
    id bigint PRIMARY KEY, tenant_id uuid NOT NULL, issued_at timestamptz NOT NULL);
"#;

/// Cohort's schema in these tests: a name that needs quoting.
const LEDGER: &str = "Retention Ledger";

fn rules() -> TestRules {
    TestRules::new()
        .with(
            "notes",
            Capabilities::only(Strategy::Purge),
            Rule::new(Period::days(30), Strategy::Purge).with_per_row_audit(),
        )
        .with(
            "contacts",
            Capabilities::only(Strategy::Anonymise),
            Rule::new(Period::days(30), Strategy::Anonymise),
        )
        .with(
            "tickets",
            Capabilities::only(Strategy::SoftDelete),
            Rule::new(Period::days(30), Strategy::SoftDelete),
        )
        .with(
            "receipts",
            Capabilities::only(Strategy::Purge),
            Rule::new(Period::days(30), Strategy::Purge).with_review(cohort::Review::new()),
        )
}

fn options() -> Options {
    Options {
        schema: LEDGER.into(),
        lock_wait: std::time::Duration::from_millis(20),
        inactive_hold_retention: Some(std::time::Duration::from_secs(3600)),
        // Short, so a run that waits renews its lease (CO2).
        run_lease: std::time::Duration::from_secs(1),
        ..Options::default()
    }
}

/// While set, [`SlowStart`] holds each run for 700 ms after its `Started`
/// event: long enough for the lease keeper (every third of the 1 s lease)
/// to renew the run's lease at least once.
static SLOW_START: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

struct SlowStart;

impl cohort::ledger::AuditObserver for SlowStart {
    fn on_event<'a>(
        &'a self,
        event: &'a cohort::ledger::AuditEvent,
    ) -> cohort::BoxFuture<'a, Result<(), cohort::policy::ProviderError>> {
        Box::pin(async move {
            if SLOW_START.load(std::sync::atomic::Ordering::SeqCst)
                && matches!(event, cohort::ledger::AuditEvent::Started { .. })
            {
                tokio::time::sleep(std::time::Duration::from_millis(700)).await;
            }
            Ok(())
        })
    }
}

fn builder(db: &TestDb) -> CohortBuilder {
    Cohort::builder(db.engine_pool().clone())
        .options(options())
        .rules(rules())
        .entity::<Note>()
        .entity::<Contact>()
        .entity::<Ticket>()
        .entity::<Receipt>()
        .observer(SlowStart)
        .subject_key(b"security test key".to_vec())
}

fn role(db: &TestDb) -> &str {
    db.engine_role().expect("a least-privileged database")
}

/// `name` quoted as an identifier.
fn q(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A least-privileged database with Cohort's tables and the host tables,
/// no grants yet.
async fn setup() -> TestDb {
    let db = TestDb::least_privileged().await;
    db.exec(&ddl(&SchemaName::new(LEDGER).expect("schema")))
        .await;
    db.exec(HOST_TABLES).await;
    db
}

/// The grants `CohortBuilder::grants` generates for the sweeping role, applied.
async fn grant(db: &TestDb) -> cohort::schema::RoleGrants {
    let grants = builder(db)
        .grants(&RoleNames::new(role(db)).expect("role"))
        .expect("grants");
    db.exec(&grants.sql()).await;
    grants
}

/// Every privilege problem of a failed build.
fn problems(result: Result<Cohort, Error>) -> Vec<ValidationProblem> {
    match result {
        Ok(_) => panic!("the build succeeded"),
        Err(Error::Validation(report)) => report.problems,
        Err(other) => panic!("expected a validation error, got {other}"),
    }
}

/// Fresh rows: old ones for the sweep, fresh ones for erasure, holds and
/// host deletion; no holds.
async fn seed(db: &TestDb) {
    let t = tenant_a();
    db.exec(&format!(
        r#"
        DELETE FROM "Host Data"."Notes"; DELETE FROM "Host Data"."Case Contacts"; DELETE FROM "Host Data".tickets;
        DELETE FROM "Host Data".receipts;
        INSERT INTO "Host Data".receipts
            SELECT (random() * 1e15)::bigint, '{t}', now() - interval '40 days' FROM generate_series(1, 3);
        DELETE FROM "{LEDGER}".retention_holds;
        INSERT INTO "Host Data"."Notes" SELECT gen_random_uuid(), '{t}', now() - interval '40 days', 'old'
            FROM generate_series(1, 5);
        INSERT INTO "Host Data"."Notes" VALUES
            ('00000000-0000-0000-0000-0000000000a1', '{t}', now(), 'to hold'),
            ('00000000-0000-0000-0000-0000000000a2', '{t}', now(), 'to delete'),
            ('00000000-0000-0000-0000-0000000000a3', '{t}', now() - interval '40 days', 'locked');
        INSERT INTO "Host Data"."Case Contacts" VALUES
            (gen_random_uuid(), '{t}', now() - interval '40 days', NULL, 'old@example.org', 'Old', '+1', 'REF-1'),
            (gen_random_uuid(), '{t}', now(), NULL, 'ann@example.org', 'Ann', '+2', 'REF-2');
        INSERT INTO "Host Data".tickets VALUES
            (1, '{t}', now() - interval '40 days', false, NULL, gen_random_uuid()),
            (2, '{t}', now(), false, NULL, '00000000-0000-0000-0000-0000000000b1');
        "#
    ))
    .await;
}

/// Runs the whole engine once as the handle's role: preview, a sweep of every
/// strategy (with a locked row, so the row-by-row path runs too), erasures,
/// every holds call, a host deletion and the settling of an abandoned run.
/// Returns what failed (empty: everything worked).
async fn exercise(db: &TestDb, cohort: &Cohort) -> Vec<String> {
    let mut failed = Vec::new();
    seed(db).await;
    let now = Utc::now();

    match cohort.preview(&scope_a(), now).await {
        Ok(p) => {
            for e in p.entries.iter().filter(|e| e.failure.is_some()) {
                failed.push(format!("preview {}: {:?}", e.entity_type, e.failure));
            }
        }
        Err(e) => failed.push(format!("preview: {e}")),
    }

    // A host transaction holds one old note: the sweep's range statement
    // times out on it and redoes the batch row by row.
    let mut locker = db.connect().await;
    sqlx::raw_sql(
        "BEGIN; SELECT 1 FROM \"Host Data\".\"Notes\" \
         WHERE id = '00000000-0000-0000-0000-0000000000a3' FOR UPDATE",
    )
    .execute(&mut locker)
    .await
    .expect("lock a note");
    let run = |what: &str, r: Result<cohort::RunResult, Error>, failed: &mut Vec<String>| match r {
        Ok(r) if r.status == RunStatus::Succeeded && r.entity_failures.is_empty() => {}
        Ok(r) => failed.push(format!("{what}: {:?} {:?}", r.status, r.entity_failures)),
        Err(e) => failed.push(format!("{what}: {e}")),
    };
    run("sweep", cohort.sweep(&scope_a(), now).await, &mut failed);
    sqlx::raw_sql("ROLLBACK")
        .execute(&mut locker)
        .await
        .expect("unlock");

    run(
        "erase by e-mail",
        cohort
            .erase(&scope_a(), now, ErasureRequest::new("ann@example.org"))
            .await,
        &mut failed,
    );
    run(
        "erase by reporter",
        cohort
            .erase(
                &scope_a(),
                now,
                ErasureRequest::new(support::models::uuid(
                    "00000000-0000-0000-0000-0000000000b1",
                ))
                .allow_soft_delete(),
            )
            .await,
        &mut failed,
    );

    // Disposition review: the sweep above froze the old receipts; approved,
    // a sweep carries them out (one locked by a host transaction, so the
    // row-by-row path runs too); the next ones are rejected (DR1-DR3).
    let mut conn = db.engine_pool().acquire().await.expect("connection");
    let d = cohort.dispositions();
    let receipts = support::models::uuid("4f1d2a6e-0c55-4b8e-9a61-1f0e7c3b5a04");
    let pending = |b: &Vec<cohort::disposition::DispositionBatch>| {
        b.iter()
            .rev()
            .find(|b| b.entity_id == receipts)
            .map(|b| b.batch_id)
    };
    match d
        .list(&mut conn, Some(cohort::disposition::BatchStatus::Pending))
        .await
    {
        Ok(batches) => match pending(&batches) {
            Some(batch) => {
                if let Err(e) = d.approve(&mut conn, batch, "ann").await {
                    failed.push(format!("approve: {e}"));
                }
                sqlx::raw_sql(
                    "BEGIN; SELECT 1 FROM \"Host Data\".receipts \
                     WHERE id = (SELECT min(id) FROM \"Host Data\".receipts) FOR UPDATE",
                )
                .execute(&mut locker)
                .await
                .expect("lock a receipt");
                run(
                    "carry out",
                    cohort.sweep(&scope_a(), now).await,
                    &mut failed,
                );
                sqlx::raw_sql("ROLLBACK")
                    .execute(&mut locker)
                    .await
                    .expect("unlock");
                match d.get(&mut conn, batch).await {
                    Ok(Some(b)) if b.status == cohort::disposition::BatchStatus::CarriedOut => {}
                    other => failed.push(format!("carried out: {other:?}")),
                }
                if let Err(e) = d.decisions(&mut conn, batch).await {
                    failed.push(format!("decisions: {e}"));
                }
                if let Err(e) = d.record_ids(&mut conn, batch, None, 10).await {
                    failed.push(format!("record ids: {e}"));
                }
            }
            None => failed.push("no pending receipts batch".to_owned()),
        },
        Err(e) => failed.push(format!("list batches: {e}")),
    }
    db.exec(&format!(
        r#"INSERT INTO "Host Data".receipts
           SELECT (random() * 1e15)::bigint, '{t}', now() - interval '40 days' FROM generate_series(1, 2)"#,
        t = tenant_a()
    ))
    .await;
    run("freeze", cohort.sweep(&scope_a(), now).await, &mut failed);
    match d
        .list(&mut conn, Some(cohort::disposition::BatchStatus::Pending))
        .await
    {
        Ok(batches) => match pending(&batches) {
            Some(batch) => {
                if let Err(e) = d.reject(&mut conn, batch, "bob", "still needed").await {
                    failed.push(format!("reject: {e}"));
                }
            }
            None => failed.push("no pending receipts batch to reject".to_owned()),
        },
        Err(e) => failed.push(format!("list batches: {e}")),
    }
    drop(conn);

    // A run that waits renews its lease (the keeper writes its expiry).
    SLOW_START.store(true, std::sync::atomic::Ordering::SeqCst);
    let waited = cohort.sweep(&scope_a(), now).await;
    SLOW_START.store(false, std::sync::atomic::Ordering::SeqCst);
    match waited {
        Ok(r) => {
            let renewed: bool = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT lease_expires_at > started_at + interval '1.2 seconds' \
                 FROM \"{LEDGER}\".sweep_run WHERE run_id = $1"
            )))
            .bind(r.run_id)
            .fetch_one(db.pool())
            .await
            .expect("the run");
            if !renewed {
                failed.push("the run's lease was never renewed".to_owned());
            }
        }
        Err(e) => failed.push(format!("slow sweep: {e}")),
    }

    // The scheduled worker: an occurrence (its claim check reads the
    // ledger's runs) and the same occurrence again, found claimed.
    let occurrence = Utc::now();
    let shutdown = cohort::CancellationToken::new();
    for round in 0..2 {
        let worker = cohort
            .worker()
            .tenants(vec![TenantContext::new(tenant_a())]);
        match worker.run_occurrence(occurrence, &shutdown).await {
            Ok(r) if r.failed_passes() == 0 && r.already_swept == (round == 1) => {}
            Ok(r) => failed.push(format!("worker occurrence {round}: {r:?}")),
            Err(e) => failed.push(format!("worker occurrence {round}: {e}")),
        }
    }

    let mut conn = db.engine_pool().acquire().await.expect("connection");
    let holds = cohort.holds();
    let request = HoldRequest::new(
        support::models::uuid(NOTE),
        "00000000-0000-0000-0000-0000000000a1",
        Some(tenant_a()),
        "litigation",
        now,
    );
    match holds.create(&mut conn, request).await {
        Ok(hold) => {
            let target = Target::new(
                support::models::uuid(NOTE),
                "00000000-0000-0000-0000-0000000000a1",
                Some(tenant_a()),
            );
            if let Err(e) = holds.is_held(&mut conn, &target, now).await {
                failed.push(format!("is_held: {e}"));
            }
            if let Err(e) = holds.list_active(&mut conn, now, &HoldFilter::all()).await {
                failed.push(format!("list_active: {e}"));
            }
            if let Err(e) = holds
                .remove(&mut conn, hold.hold_id, now - Duration::days(1))
                .await
            {
                failed.push(format!("remove: {e}"));
            }
            match holds.prune(&mut conn).await {
                Ok(1) => {}
                other => failed.push(format!("prune: {other:?}")),
            }
        }
        Err(e) => failed.push(format!("create hold: {e}")),
    }

    // A matter: put on hold, reported, extended, released (MH2, SEC).
    let matters = cohort.matters();
    let request = cohort::holds::MatterRequest::retained_type(
        support::models::uuid(NOTE),
        Some(tenant_a()),
        "litigation",
        "counsel",
    )
    .anchor_window(Some(now + Duration::days(3650)), None)
    .expires_at(now + Duration::days(1));
    match matters.create(&mut conn, request).await {
        Ok(m) => {
            if let Err(e) = matters.report(&mut conn, m.matter_id).await {
                failed.push(format!("matter report: {e}"));
            }
            if let Err(e) = matters.list(&mut conn).await {
                failed.push(format!("matter list: {e}"));
            }
            if let Err(e) = matters
                .extend(&mut conn, m.matter_id, Some(now + Duration::days(2)))
                .await
            {
                failed.push(format!("matter extend: {e}"));
            }
            if let Err(e) = matters.release(&mut conn, m.matter_id).await {
                failed.push(format!("matter release: {e}"));
            }
        }
        Err(e) => failed.push(format!("create matter: {e}")),
    }

    let deleted = cohort
        .deletion()
        .execute(
            &mut conn,
            &[Target::new(
                support::models::uuid(NOTE),
                "00000000-0000-0000-0000-0000000000a2",
                Some(tenant_a()),
            )],
            |c| {
                Box::pin(async move {
                    sqlx::query("DELETE FROM \"Host Data\".\"Notes\" WHERE id = '00000000-0000-0000-0000-0000000000a2'")
                        .execute(&mut *c)
                        .await
                        .map(|d| d.rows_affected())
                })
            },
        )
        .await;
    match deleted {
        Ok(DeletionOutcome::Deleted(1)) => {}
        Ok(other) => failed.push(format!("deletion: {other:?}")),
        Err(e) => failed.push(format!("deletion: {e}")),
    }

    // A run whose owner is gone, two hours ago.
    let run_id = Uuid::new_v4();
    db.exec(&format!(
        r#"
        INSERT INTO "{LEDGER}".sweep_run (run_id, run_kind, trigger, dry_run, tenant_id, logical_now, status, started_at)
        VALUES ('{run_id}', 'Sweep', 'Manual', false, '{t}', now(), 'Started', now() - interval '2 hours');
        INSERT INTO "{LEDGER}".sweep_run_entity_summary (run_id, retained_entity_id, entity_type, category, tenant_id,
            strategy, status, affected_count, held_count, skipped_count, null_anchor_count, updated_at)
        VALUES ('{run_id}', '{NOTE}', 'Note', 'notes', '{t}', 'Purge', 'Running', 0, 0, 0, 0, now());
        "#,
        t = tenant_a()
    ))
    .await;
    match cohort.settle_abandoned_runs().await {
        Ok(n) if n >= 1 => {}
        other => failed.push(format!("settle_abandoned_runs: {other:?}")),
    }
    failed
}

/// One privilege the role holds, as the catalog lists it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Held {
    schema: String,
    table: Option<String>,
    column: Option<String>,
    privilege: String,
}

impl Held {
    fn on(&self) -> String {
        match &self.table {
            Some(t) => format!("TABLE {}.{}", q(&self.schema), q(t)),
            None => format!("SCHEMA {}", q(&self.schema)),
        }
    }

    fn columns(&self) -> String {
        self.column
            .as_ref()
            .map(|c| format!(" ({})", q(c)))
            .unwrap_or_default()
    }

    fn grant(&self, role: &str) -> String {
        format!(
            "GRANT {}{} ON {} TO {}",
            self.privilege,
            self.columns(),
            self.on(),
            q(role)
        )
    }

    fn revoke(&self, role: &str) -> String {
        format!(
            "REVOKE {}{} ON {} FROM {}",
            self.privilege,
            self.columns(),
            self.on(),
            q(role)
        )
    }
}

/// Every privilege granted to `role` in this database: on schemas, tables
/// and columns.
async fn held_privileges(db: &TestDb, role: &str) -> Vec<Held> {
    let rows: Vec<(String, Option<String>, Option<String>, String)> = sqlx::query_as(
        "SELECT n.nspname::text, NULL::text, NULL::text, a.privilege_type \
         FROM pg_namespace n, aclexplode(n.nspacl) a \
         WHERE a.grantee = (SELECT oid FROM pg_roles WHERE rolname = $1) \
         UNION ALL \
         SELECT n.nspname::text, c.relname::text, NULL, a.privilege_type \
         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace, aclexplode(c.relacl) a \
         WHERE a.grantee = (SELECT oid FROM pg_roles WHERE rolname = $1) \
         UNION ALL \
         SELECT n.nspname::text, c.relname::text, t.attname::text, a.privilege_type \
         FROM pg_attribute t JOIN pg_class c ON c.oid = t.attrelid \
         JOIN pg_namespace n ON n.oid = c.relnamespace, aclexplode(t.attacl) a \
         WHERE a.grantee = (SELECT oid FROM pg_roles WHERE rolname = $1)",
    )
    .bind(role)
    .fetch_all(db.pool())
    .await
    .expect("privileges");
    let mut held: Vec<Held> = rows
        .into_iter()
        .map(|(schema, table, column, privilege)| Held {
            schema,
            table,
            column,
            privilege,
        })
        .collect();
    held.sort();
    held
}

/// As the engine role, the two writes `CohortBuilder::build` makes to the
/// registry of retained types: an insert of a new type (every column), and
/// an update of a type whose key changed (every column but the key and the
/// holds version), both reading the stored rows.
async fn register_as_role(db: &TestDb) -> Vec<String> {
    let mut conn = db.engine_pool().acquire().await.expect("connection");
    let ledger = q(LEDGER);
    let fresh = uuid::Uuid::new_v4();
    let statements = [
        format!(
            "INSERT INTO {ledger}.retention_entities (retained_entity_id, entity_type, table_schema, \
                 table_name, record_id_column, record_id_type, record_id_eq_schema, record_id_eq, \
                 tenant_column, registered_at, holds_version) \
             VALUES ('{fresh}', 'Probe', 'Host Data', 'Notes', 'id', 'uuid', NULL, '=', NULL, now(), 0) \
             ON CONFLICT (retained_entity_id) DO NOTHING"
        ),
        format!(
            "UPDATE {ledger}.retention_entities AS r SET entity_type = r.entity_type, \
                 table_schema = r.table_schema, table_name = r.table_name, \
                 record_id_column = r.record_id_column, record_id_type = r.record_id_type, \
                 record_id_eq_schema = r.record_id_eq_schema, record_id_eq = r.record_id_eq, \
                 tenant_column = r.tenant_column, registered_at = now(), \
                 holds_version = r.holds_version \
             WHERE r.retained_entity_id = '{NOTE}'"
        ),
    ];
    let mut failed = Vec::new();
    for sql in statements {
        if let Err(e) = sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(&mut *conn)
            .await
        {
            failed.push(format!("register: {e}"));
        }
    }
    drop(conn);
    db.exec(&format!(
        "DELETE FROM {ledger}.retention_entities WHERE retained_entity_id = '{fresh}'"
    ))
    .await;
    failed
}

// contract: SEC1, SEC2, SEC3
#[tokio::test]
async fn the_generated_grants_are_exactly_what_the_engine_needs() {
    let db = setup().await;
    let role = role(&db).to_owned();

    // Before any grant, building lists every missing privilege at once.
    let before = problems(builder(&db).build().await);

    // With the generated grants the role builds a handle and runs the whole
    // engine: preview, every strategy, erasure, holds, host deletion,
    // settling.
    let grants = grant(&db).await;
    assert!(
        grants
            .statements()
            .iter()
            .all(|s| s.starts_with("GRANT ") && s.ends_with(&format!("TO {}", q(&role)))),
        "{grants}"
    );
    let cohort = builder(&db).build().await.expect("the granted role builds");
    let failed = exercise(&db, &cohort).await;
    assert!(failed.is_empty(), "{failed:#?}");
    // The sweep really changed rows, as the role.
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM \"Host Data\".\"Notes\" WHERE body = 'old'"
        )
        .await,
        0
    );
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM \"Host Data\".tickets WHERE is_deleted"
        )
        .await,
        2
    );
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM \"Host Data\".\"Case Contacts\" WHERE \"E-mail\" IS NOT NULL"
        )
        .await,
        0
    );

    // Each privilege is needed: without it the build names it, with the
    // GRANT that gives back exactly it, and the engine (from a handle built
    // before) fails somewhere.
    let held = held_privileges(&db, &role).await;
    assert_eq!(
        held.len(),
        before.len(),
        "one problem per missing privilege before the grants: {before:#?}"
    );
    assert!(held.len() > 50, "{held:#?}");
    let mut unused = Vec::new();
    for privilege in &held {
        db.exec(&privilege.revoke(&role)).await;
        let found = problems(builder(&db).build().await);
        assert_eq!(found.len(), 1, "{privilege:?}: {found:#?}");
        let p = &found[0];
        assert_eq!(p.fix, privilege.grant(&role), "{privilege:?}: {p:#?}");
        assert_eq!(p.column, privilege.column, "{privilege:?}: {p:#?}");
        assert!(
            before.contains(p),
            "{p:#?} was not reported before the grants"
        );
        let failed = if privilege.table.as_deref() == Some("retention_entities") {
            // The registry of retained types is written by the build itself
            // (which the privilege check above runs before), not by the
            // engine's operations: show the need with the statement the
            // build runs, an upsert of every column (contract H16).
            register_as_role(&db).await
        } else {
            exercise(&db, &cohort).await
        };
        if failed.is_empty() {
            unused.push(privilege.clone());
        }
        assert!(
            failed.is_empty()
                || failed.iter().any(|f| f.contains("42501")
                        || f.contains("permission denied")
                        // The lease keeper only logs a refused renewal.
                        || f.contains("lease was never renewed")),
            "{privilege:?}: failed for another reason: {failed:#?}"
        );
        // The fix the problem names restores it.
        db.exec(&p.fix).await;
    }
    assert!(unused.is_empty(), "granted but never needed: {unused:#?}");
    assert_eq!(held_privileges(&db, &role).await, held);
    builder(&db).build().await.expect("everything given back");
    let failed = exercise(&db, &cohort).await;
    assert!(failed.is_empty(), "{failed:#?}");

    // The evidence chain's triggers wrote the links (they run as the
    // migration role); the role itself cannot write a chain column.
    assert!(
        count(
            &db,
            &format!("SELECT count(*) FROM \"{LEDGER}\".sweep_run_entity_summary WHERE chain_hash IS NOT NULL")
        )
        .await
            > 0
    );
    for (table, column) in [
        ("sweep_run", "chain_hash"),
        ("sweep_run_entity_summary", "chain_hash"),
        ("retention_holds", "chain_bridges"),
    ] {
        let err = sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE \"{LEDGER}\".{table} SET {column} = {column}"
        )))
        .execute(db.engine_pool())
        .await
        .expect_err("the role may not write a chain column");
        assert!(
            err.to_string().contains("permission denied"),
            "{table}.{column}: {err}"
        );
    }
}

// contract: SEC2
#[tokio::test]
async fn missing_privileges_are_reported_with_the_others_each_with_its_grant() {
    let db = setup().await;
    let role = role(&db).to_owned();
    // Another, unrelated problem: a column the model names is missing.
    db.exec(r#"ALTER TABLE "Host Data".tickets DROP COLUMN deleted_at"#)
        .await;
    let found = problems(builder(&db).build().await);
    let r = q(&role);
    let has = |type_name: Option<&str>, column: Option<&str>, fix: &str| {
        assert!(
            found.iter().any(|p| p.type_name.as_deref() == type_name
                && p.column.as_deref() == column
                && p.fix == fix),
            "no problem {type_name:?} {column:?} {fix}: {found:#?}"
        );
    };
    has(
        Some("Note"),
        None,
        &format!(r#"GRANT USAGE ON SCHEMA "Host Data" TO {r}"#),
    );
    has(
        Some("Note"),
        None,
        &format!(r#"GRANT DELETE ON TABLE "Host Data"."Notes" TO {r}"#),
    );
    has(
        Some("Note"),
        Some("created_at"),
        &format!(r#"GRANT UPDATE ("created_at") ON TABLE "Host Data"."Notes" TO {r}"#),
    );
    has(
        Some("Contact"),
        Some("E-mail"),
        &format!(r#"GRANT SELECT ("E-mail") ON TABLE "Host Data"."Case Contacts" TO {r}"#),
    );
    has(
        Some("Contact"),
        Some("ctid"),
        &format!(r#"GRANT SELECT ("ctid") ON TABLE "Host Data"."Case Contacts" TO {r}"#),
    );
    has(
        Some("Ticket"),
        Some("is_deleted"),
        &format!(r#"GRANT UPDATE ("is_deleted") ON TABLE "Host Data"."tickets" TO {r}"#),
    );
    has(
        None,
        None,
        &format!(r#"GRANT USAGE ON SCHEMA "Retention Ledger" TO {r}"#),
    );
    has(
        None,
        Some("removed_at"),
        &format!(
            r#"GRANT UPDATE ("removed_at") ON TABLE "Retention Ledger"."retention_holds" TO {r}"#
        ),
    );
    has(
        None,
        None,
        &format!(r#"GRANT DELETE ON TABLE "Retention Ledger"."retention_holds" TO {r}"#),
    );
    // The unrelated problem is in the same report.
    assert!(
        found
            .iter()
            .any(|p| p.type_name.as_deref() == Some("Ticket")
                && p.column.as_deref() == Some("deleted_at")
                && p.problem.contains("does not exist")),
        "{found:#?}"
    );
    // Every problem names where it is.
    for p in &found {
        assert!(p.table.is_some() || p.fix.contains("ON SCHEMA"), "{p:#?}");
        if p.problem.contains("lacks") {
            assert!(p.problem.contains(&role), "{p:#?}");
        }
    }
}

// contract: SEC2
#[tokio::test]
async fn usage_on_the_schema_of_an_extension_key_type_is_checked() {
    let db = TestDb::least_privileged().await;
    db.exec(&ddl(&SchemaName::public())).await;
    db.exec(
        r#"
        CREATE SCHEMA ext;
        CREATE EXTENSION IF NOT EXISTS citext SCHEMA ext;
        CREATE TABLE codes (id ext.citext PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz NOT NULL);
        "#,
    )
    .await;
    #[derive(cohort::Retained)]
    #[cohort(category = "codes", anchor = "created_at", table = "codes")]
    #[cohort(id = "4f1d2a6e-0c55-4b8e-9a61-1f0e7c3b5a04")]
    #[allow(dead_code)]
    struct Code {
        id: String,
        tenant_id: Uuid,
        created_at: DateTime<Utc>,
    }
    let rules = TestRules::new().with(
        "codes",
        Capabilities::only(Strategy::Purge),
        Rule::new(Period::days(30), Strategy::Purge),
    );
    let b = || {
        Cohort::builder(db.engine_pool().clone())
            .rules(rules.clone())
            .entity::<Code>()
    };
    let grants = b()
        .grants(&RoleNames::new(role(&db)).expect("role"))
        .expect("grants");
    db.exec(&grants.sql()).await;
    let found = problems(b().build().await);
    let fix = format!(r#"GRANT USAGE ON SCHEMA "ext" TO {}"#, q(role(&db)));
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].fix, fix);
    assert_eq!(found[0].column.as_deref(), Some("id"));
    db.exec(&fix).await;
    db.exec(&format!(
        "INSERT INTO codes VALUES ('A', '{}', now() - interval '40 days')",
        tenant_a()
    ))
    .await;
    let cohort = b().build().await.expect("builds");
    let result = cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    assert_eq!(result.affected(), 1, "{result:#?}");
}

// contract: SEC1
#[tokio::test]
async fn the_auditor_reads_the_ledger_but_no_payload_and_changes_nothing() {
    let db = setup().await;
    let auditor = format!("{}_auditor", role(&db));
    let roles = RoleNames::new(role(&db))
        .expect("role")
        .with_auditor(&auditor)
        .expect("auditor")
        .create_if_missing();
    let grants = builder(&db).grants(&roles).expect("grants");
    // Twice: creating the roles only when missing makes the script re-runnable.
    db.exec(&grants.sql()).await;
    db.exec(&grants.sql()).await;
    let cohort = builder(&db).build().await.expect("the sweeper builds");
    assert!(exercise(&db, &cohort).await.is_empty());

    let rows: Vec<(String, String, bool, bool)> = sqlx::query_as(
        "SELECT c.relname::text, a.attname::text, \
                has_column_privilege($1, c.oid, a.attnum, 'SELECT'), \
                has_column_privilege($1, c.oid, a.attnum, 'INSERT') \
                  OR has_column_privilege($1, c.oid, a.attnum, 'UPDATE') \
         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
         JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped \
         WHERE n.nspname = $2 AND c.relkind = 'r' ORDER BY 1, 2",
    )
    .bind(&auditor)
    .bind(LEDGER)
    .fetch_all(db.pool())
    .await
    .expect("auditor privileges");
    assert!(rows.len() > 40);
    for (table, column, select, write) in &rows {
        let payload = table == "sweep_run_row_detail" && column == "captured_payload";
        assert_eq!(*select, !payload, "{table}.{column}");
        assert!(!write, "{table}.{column}");
    }
    let (delete, host): (bool, bool) = sqlx::query_as(
        "SELECT bool_or(has_table_privilege($1, c.oid, 'DELETE') OR has_table_privilege($1, c.oid, 'TRUNCATE')) \
                  FILTER (WHERE n.nspname = $2), \
                bool_or(has_any_column_privilege($1, c.oid, 'SELECT')) FILTER (WHERE n.nspname = 'Host Data') \
         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind = 'r'",
    )
    .bind(&auditor)
    .bind(LEDGER)
    .fetch_one(db.pool())
    .await
    .expect("auditor table privileges");
    assert!(!delete && !host);

    // Acting as the auditor: the ledger reads, writes are refused.
    let mut conn = db.connect().await;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("SET ROLE {}", q(&auditor))))
        .execute(&mut conn)
        .await
        .expect("set role");
    let runs: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT count(*) FROM \"{LEDGER}\".sweep_run WHERE status = 'Succeeded'"
    )))
    .fetch_one(&mut conn)
    .await
    .expect("read runs");
    assert!(runs >= 3);
    let details: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT count(record_id) FROM \"{LEDGER}\".sweep_run_row_detail"
    )))
    .fetch_one(&mut conn)
    .await
    .expect("read details");
    assert!(details > 0);
    for refused in [
        format!("SELECT captured_payload FROM \"{LEDGER}\".sweep_run_row_detail"),
        format!("DELETE FROM \"{LEDGER}\".sweep_run"),
        format!("UPDATE \"{LEDGER}\".retention_holds SET reason = 'x'"),
        "SELECT count(*) FROM \"Host Data\".\"Notes\"".to_owned(),
    ] {
        let err = sqlx::raw_sql(sqlx::AssertSqlSafe(refused.clone()))
            .execute(&mut conn)
            .await
            .expect_err(&refused);
        assert_eq!(
            err.as_database_error().and_then(|e| e.code()).as_deref(),
            Some("42501"),
            "{refused}: {err}"
        );
    }
    // The auditor's grants are enough to verify the evidence chain and to
    // export every kind of record.
    let schema = SchemaName::new(LEDGER).expect("schema");
    let report = cohort::evidence::verify(&mut conn, &schema)
        .await
        .expect("the auditor verifies the chain");
    assert!(report.is_intact(), "{report:?}");
    for records in [
        cohort::evidence::ExportRecords::Runs,
        cohort::evidence::ExportRecords::Summaries,
        cohort::evidence::ExportRecords::RowDetails,
    ] {
        let mut out = Vec::new();
        cohort::evidence::export(
            &mut conn,
            &schema,
            records,
            cohort::evidence::TimeRange::all(),
            cohort::evidence::ExportFormat::JsonLines,
            &mut out,
        )
        .await
        .unwrap_or_else(|e| panic!("the auditor exports {records:?}: {e}"));
        assert!(!out.is_empty(), "{records:?}");
    }
    drop(conn);
    db.exec(&format!("DROP OWNED BY {}", q(&auditor))).await;
    db.exec(&format!("DROP ROLE {}", q(&auditor))).await;
}

/// A least-privileged database with the generated grants and row-level
/// security enabled on the notes table (no policy yet).
async fn with_row_security() -> TestDb {
    let db = setup().await;
    grant(&db).await;
    db.exec(r#"ALTER TABLE "Host Data"."Notes" ENABLE ROW LEVEL SECURITY"#)
        .await;
    db
}

// contract: SEC4
#[tokio::test]
async fn row_level_security_that_hides_rows_from_the_role_is_reported() {
    let db = with_row_security().await;
    let role = role(&db).to_owned();
    let found = problems(builder(&db).build().await);
    let commands = |found: &[ValidationProblem]| {
        let mut c: Vec<&str> = found
            .iter()
            .filter(|p| p.type_name.as_deref() == Some("Note"))
            .filter(|p| p.problem.contains("row-level security"))
            .map(|p| {
                ["SELECT", "UPDATE", "DELETE"]
                    .into_iter()
                    .find(|c| p.problem.contains(&format!("FOR {c} ")))
                    .expect("a command")
            })
            .collect();
        c.sort();
        c
    };
    assert_eq!(commands(&found), vec!["DELETE", "SELECT", "UPDATE"]);
    assert_eq!(found.len(), 3, "only the notes table: {found:#?}");
    assert!(
        found[0]
            .fix
            .contains(&format!("ALTER ROLE {} BYPASSRLS", q(&role)))
    );
    assert!(
        found[0].fix.contains(r#"ON "Host Data"."Notes" FOR"#),
        "{found:#?}"
    );

    // A policy for another role does not count; one for SELECT only leaves
    // the others.
    db.exec(&format!(
        r#"CREATE POLICY others ON "Host Data"."Notes" TO pg_monitor USING (true);
           CREATE POLICY reads ON "Host Data"."Notes" FOR SELECT TO {} USING (true);"#,
        q(&role)
    ))
    .await;
    assert_eq!(
        commands(&problems(builder(&db).build().await)),
        vec!["DELETE", "UPDATE"]
    );

    // A restrictive policy is not a permissive one.
    db.exec(&format!(
        r#"CREATE POLICY narrow ON "Host Data"."Notes" AS RESTRICTIVE FOR ALL TO {} USING (true);"#,
        q(&role)
    ))
    .await;
    assert_eq!(
        commands(&problems(builder(&db).build().await)),
        vec!["DELETE", "UPDATE"]
    );

    // Forced row-level security applies to the table's owner as well.
    db.exec(&format!(
        r#"DROP POLICY reads ON "Host Data"."Notes"; DROP POLICY narrow ON "Host Data"."Notes";
           ALTER TABLE "Host Data"."Notes" OWNER TO {r};"#,
        r = q(&role)
    ))
    .await;
    builder(&db)
        .build()
        .await
        .expect("the owner of an unforced table bypasses row-level security");
    db.exec(r#"ALTER TABLE "Host Data"."Notes" FORCE ROW LEVEL SECURITY"#)
        .await;
    let found = problems(builder(&db).build().await);
    assert_eq!(commands(&found), vec!["DELETE", "SELECT", "UPDATE"]);
    assert!(
        found[0].problem.contains("enabled and forced"),
        "{found:#?}"
    );
}

// contract: SEC4
#[tokio::test]
async fn row_level_security_on_cohorts_own_tables_is_reported_too() {
    // Holds hidden from the sweeping role would protect nothing.
    let db = setup().await;
    grant(&db).await;
    db.exec(&format!(
        r#"ALTER TABLE "{LEDGER}".retention_holds ENABLE ROW LEVEL SECURITY"#
    ))
    .await;
    let found = problems(builder(&db).build().await);
    let mut commands: Vec<&str> = found
        .iter()
        .map(|p| {
            assert_eq!(p.type_name, None, "{p:#?}");
            assert_eq!(
                p.table.as_deref(),
                Some("Retention Ledger.retention_holds"),
                "{p:#?}"
            );
            assert!(p.problem.contains("hidden holds protect nothing"), "{p:#?}");
            ["SELECT", "INSERT", "UPDATE", "DELETE"]
                .into_iter()
                .find(|c| p.problem.contains(&format!("FOR {c} ")))
                .expect("a command")
        })
        .collect();
    commands.sort();
    assert_eq!(commands, vec!["DELETE", "INSERT", "SELECT", "UPDATE"]);
    db.exec(&format!(
        r#"CREATE POLICY cohort ON "{LEDGER}".retention_holds FOR ALL TO {} USING (true)"#,
        q(role(&db))
    ))
    .await;
    let cohort = builder(&db).build().await.expect("builds");
    let failed = exercise(&db, &cohort).await;
    assert!(failed.is_empty(), "{failed:#?}");
}

/// Sweeps, erases and holds on the notes table and checks the rows went.
async fn sweeps_through_row_security(db: &TestDb) {
    let cohort = builder(db).build().await.expect("builds");
    let failed = exercise(db, &cohort).await;
    assert!(failed.is_empty(), "{failed:#?}");
    assert_eq!(
        count(
            db,
            "SELECT count(*) FROM \"Host Data\".\"Notes\" WHERE body = 'old'"
        )
        .await,
        0,
        "row-level security hid rows from the sweep"
    );
}

// contract: SEC4
#[tokio::test]
async fn a_role_with_bypassrls_sweeps_a_table_with_row_level_security() {
    let db = with_row_security().await;
    db.exec(r#"ALTER TABLE "Host Data"."Notes" FORCE ROW LEVEL SECURITY"#)
        .await;
    db.exec(&format!("ALTER ROLE {} BYPASSRLS", q(role(&db))))
        .await;
    sweeps_through_row_security(&db).await;
}

// contract: SEC4
#[tokio::test]
async fn an_explicit_policy_for_the_sweeping_role_lets_it_sweep() {
    let db = with_row_security().await;
    let role = q(role(&db));
    // The host's own users see their tenant; the sweeping role gets its own
    // policies, one per command it runs.
    db.exec(&format!(
        r#"CREATE POLICY tenant_users ON "Host Data"."Notes"
               USING (tenant_id::text = current_setting('app.tenant', true));
           CREATE POLICY sweeper_select ON "Host Data"."Notes" FOR SELECT TO {role} USING (true);
           CREATE POLICY sweeper_update ON "Host Data"."Notes" FOR UPDATE TO {role} USING (true);
           CREATE POLICY sweeper_delete ON "Host Data"."Notes" FOR DELETE TO {role} USING (true);"#
    ))
    .await;
    sweeps_through_row_security(&db).await;
}

// contract: SEC4
#[tokio::test]
async fn a_policy_for_a_group_the_role_belongs_to_or_for_public_counts() {
    let db = with_row_security().await;
    let group = format!("{}_group", role(&db));
    db.exec(&format!(
        r#"CREATE ROLE {g} NOLOGIN; GRANT {g} TO {r};
           CREATE POLICY through_group ON "Host Data"."Notes" FOR ALL TO {g} USING (true);"#,
        g = q(&group),
        r = q(role(&db))
    ))
    .await;
    sweeps_through_row_security(&db).await;
    db.exec(&format!(
        r#"DROP POLICY through_group ON "Host Data"."Notes";
           CREATE POLICY for_everyone ON "Host Data"."Notes" FOR ALL TO PUBLIC USING (true);
           DROP OWNED BY {g}; DROP ROLE {g};"#,
        g = q(&group)
    ))
    .await;
    sweeps_through_row_security(&db).await;
}

// contract: SEC1
#[test]
fn grants_are_generated_without_a_database_and_refuse_an_invalid_model() {
    let descriptors = [
        <Note as cohort::Retained>::descriptor(),
        <Contact as cohort::Retained>::descriptor(),
    ];
    let roles = RoleNames::new("retention \"sweeper\"").expect("role");
    let grants =
        cohort::schema::role_grants(&descriptors, &options(), &rules(), &roles).expect("grants");
    let sql = grants.sql();
    assert!(sql.starts_with(
        "GRANT USAGE ON SCHEMA \"Retention Ledger\" TO \"retention \"\"sweeper\"\"\";\n"
    ));
    assert!(sql.contains(
        "GRANT SELECT (\"id\", \"created_at\", \"tenant_id\", \"E-mail\", \"anonymised_at\", \
         \"external_ref\", \"tableoid\", \"ctid\") ON TABLE \"Host Data\".\"Case Contacts\""
    ));
    assert!(sql.contains(
        "GRANT UPDATE (\"E-mail\", \"full_name\", \"phone\", \"external_ref\", \"anonymised_at\") \
         ON TABLE \"Host Data\".\"Case Contacts\""
    ));
    assert!(sql.contains("GRANT DELETE ON TABLE \"Host Data\".\"Notes\""));
    assert!(!sql.contains("DELETE ON TABLE \"Host Data\".\"Case Contacts\""));
    assert!(!sql.contains("sweep_row_handler_status"));
    assert!(!sql.contains("CREATE ROLE"));
    assert_eq!(grants.statements().len(), sql.lines().count());

    // Without capabilities for a category: the build's own problem.
    let err = cohort::schema::role_grants(&descriptors, &options(), &TestRules::new(), &roles)
        .expect_err("no capabilities");
    assert!(matches!(err, Error::Validation(_)), "{err}");
    assert!(RoleNames::new("").is_err());
    assert!(RoleNames::new("a\0b").is_err());
}

#[derive(cohort::Retained)]
#[cohort(
    category = "least-notes",
    anchor = "created_at",
    id = "f1000000-0000-4000-8000-000000000001",
    table = "least_notes"
)]
#[allow(dead_code, reason = "mirrors the table; Cohort reads its descriptor")]
struct LeastNote {
    id: i64,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
}

/// Found by the R1 history run as a least-privileged role
/// (`COHORT_TEST_ROLE=least`): the generated grants gave no `SELECT` on
/// `sweep_run_entity_summary.legal_minimum_count`, which the final summary's
/// `INSERT ... ON CONFLICT DO UPDATE` reads through `EXCLUDED`. Every
/// entity's final summary write then failed with 42501: every run ended
/// `Failed` after its batches had committed, and its summaries stayed
/// `Running`.
// contract: SEC1, A1, X3
#[tokio::test]
async fn a_sweep_as_the_least_privileged_role_settles_its_summaries() {
    let db = TestDb::least_privileged().await;
    db.exec(&cohort::schema::ddl(&cohort::schema::SchemaName::public()))
        .await;
    let tenant = Uuid::from_u128(0x3333_3333_3333_3333_3333_3333_3333_3333);
    db.exec(&format!(
        "CREATE TABLE public.least_notes (id bigint PRIMARY KEY, tenant_id uuid NOT NULL, \
           created_at timestamptz NOT NULL); \
         INSERT INTO public.least_notes SELECT g, '{tenant}', now() - interval '40 days' \
           FROM generate_series(1, 5) g"
    ))
    .await;
    let rules = TestRules::new().with(
        "least-notes",
        Capabilities::only(Strategy::Purge),
        Rule::new(Period::days(30), Strategy::Purge).with_legal_minimum(Period::days(10)),
    );
    let builder = Cohort::builder(db.engine_pool().clone())
        .rules(rules)
        .entity::<LeastNote>();
    let cohort = support::build_engine(&db, builder)
        .await
        .expect("the role has exactly the generated grants");
    let result = cohort
        .sweep(&Scope::Tenant(TenantContext::new(tenant)), Utc::now())
        .await
        .expect("sweep");
    assert!(result.entity_failures.is_empty(), "{result:?}");
    assert_eq!(result.status, RunStatus::Succeeded);
    assert_eq!(result.affected(), 5);
    let (run, summary): (String, String) = sqlx::query_as(
        "SELECT r.status, s.status FROM public.sweep_run r \
         JOIN public.sweep_run_entity_summary s USING (run_id)",
    )
    .fetch_one(db.pool())
    .await
    .expect("ledger");
    assert_eq!((run.as_str(), summary.as_str()), ("Succeeded", "Succeeded"));
}

/// The snapshot a row handler keeps of a note.
#[derive(serde::Serialize, serde::Deserialize, PartialEq)]
struct NoteBody {
    body: String,
}

/// Counts its deliveries.
struct Deliveries(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl cohort::handlers::RowHandler for Deliveries {
    type Snapshot = NoteBody;

    fn capture(
        &self,
        row: &cohort::handlers::CapturedRow,
    ) -> Result<NoteBody, cohort::handlers::HandlerError> {
        Ok(NoteBody {
            body: row.get("body")?,
        })
    }

    fn deliver<'a>(
        &'a self,
        _ctx: &'a cohort::handlers::HandlerContext,
        _snapshot: NoteBody,
    ) -> cohort::BoxFuture<'a, Result<(), cohort::handlers::HandlerError>> {
        Box::pin(async move {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(())
        })
    }
}

// contract: SEC3, SEC1, W2, W4, RH3
// The scheduled worker and the row-handler dispatcher, as the
// least-privileged role granted exactly what `CohortBuilder::grants`
// generates for a model with row handlers: an occurrence sweeps every pass,
// the next attempt at it finds it claimed, and the dispatcher delivers the
// captured rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_and_the_dispatcher_run_as_the_least_privileged_role() {
    let db = setup().await;
    let delivered = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let with_handler = || builder(&db).row_handler::<Note, _>(Deliveries(delivered.clone()));
    let grants = with_handler()
        .grants(&RoleNames::new(role(&db)).expect("role"))
        .expect("grants");
    assert!(
        grants.sql().contains("sweep_row_handler_status"),
        "{grants}"
    );
    db.exec(&grants.sql()).await;
    let cohort = with_handler()
        .build()
        .await
        .expect("the role builds with the generated grants");
    seed(&db).await;

    let worker = cohort
        .worker()
        .tenants(vec![TenantContext::new(tenant_a())]);
    let occurrence = Utc::now();
    let shutdown = cohort::CancellationToken::new();
    let first = worker
        .run_occurrence(occurrence, &shutdown)
        .await
        .expect("the occurrence runs as the role");
    assert!(!first.already_swept, "{first:?}");
    let errors: Vec<(String, Option<String>)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT entity_type, error FROM \"{LEDGER}\".sweep_run_entity_summary WHERE error IS NOT NULL"
    )))
    .fetch_all(db.pool())
    .await
    .expect("summaries");
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(first.failed_passes(), 0, "{first:?}");
    assert!(first.affected() > 0, "{first:?}");
    let again = cohort
        .worker()
        .tenants(vec![TenantContext::new(tenant_a())])
        .run_occurrence(occurrence, &shutdown)
        .await
        .expect("the claim check runs as the role");
    assert!(again.already_swept, "{again:?}");

    // Six old notes were purged (five plus the one a lock would keep from a
    // range: here nothing holds it), each captured for the handler.
    let captured = count(
        &db,
        &format!("SELECT count(*) FROM \"{LEDGER}\".sweep_row_handler_status"),
    )
    .await;
    assert_eq!(captured, 6);
    let report = cohort
        .dispatcher()
        .run_once()
        .await
        .expect("the dispatcher runs as the role");
    assert_eq!(report.succeeded, 6, "{report:?}");
    assert_eq!(delivered.load(std::sync::atomic::Ordering::SeqCst), 6);
    let report = cohort.dispatcher().run_once().await.expect("again");
    assert_eq!(report.claimed, 0, "{report:?}");
}

// contract: SA1 (a subject access export reads whole rows: the sweeping
// role's column-level grants do not let it, and it records nothing; with
// SELECT on the tables and INSERT on retention_subject_access it exports)
#[tokio::test]
async fn a_subject_access_export_needs_its_own_grants_beyond_the_sweeping_roles() {
    let db = setup().await;
    let role = role(&db).to_owned();
    grant(&db).await;
    let cohort = builder(&db).build().await.expect("the granted role builds");
    seed(&db).await;
    let export = |cohort: &Cohort| {
        let cohort = cohort.clone();
        async move {
            cohort
                .subject_export(
                    &scope_a(),
                    Utc::now(),
                    cohort::AccessRequest::new("ann@example.org", "security test"),
                    &mut std::io::sink(),
                )
                .await
        }
    };
    let err = export(&cohort).await.expect_err("column-level grants only");
    assert!(err.to_string().contains("permission denied"), "{err}");
    assert_eq!(
        count(
            &db,
            &format!("SELECT count(*) FROM \"{LEDGER}\".retention_subject_access")
        )
        .await,
        0
    );
    let r = q(&role);
    db.exec(&format!(
        "GRANT SELECT ON TABLE \"Host Data\".\"Case Contacts\" TO {r}; \
         GRANT INSERT ON TABLE \"{LEDGER}\".retention_subject_access TO {r};"
    ))
    .await;
    let done = export(&cohort).await.expect("with the export's grants");
    assert_eq!(done.rows, 1);
    assert_eq!(
        count(
            &db,
            &format!("SELECT count(*) FROM \"{LEDGER}\".retention_subject_access")
        )
        .await,
        1
    );
}
