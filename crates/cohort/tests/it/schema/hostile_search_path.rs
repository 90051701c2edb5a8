//! Preview, sweep, erasure, holds and the ledger with Cohort's tables and the
//! host's tables in schemas whose names need quoting, on connections whose
//! `search_path` is hostile (contract D6, D8).

use crate::support;
use crate::support::fixtures::{fixed_now, scope_a, tenant_a, tenant_b};
use crate::support::models::{Scramble, uuid};
use crate::support::{TestDb, TestRules, db_with_cohort};
use chrono::{DateTime, Duration, Utc};
use cohort::holds::HoldRequest;
use cohort::{
    Capabilities, Cohort, ErasureRequest, Options, Period, Rule, RunKind, RunResult, RunStatus,
    Scope, Strategy,
};
use sqlx::{Connection, PgConnection};
use uuid::Uuid;

const COHORT_SCHEMA: &str = "Retention Data";
const NOTE_ID: &str = "d6d6d6d6-0001-4000-8000-000000000001";

/// Same table name as the README's notes, in a schema that needs quoting.
#[allow(dead_code, reason = "mirrors a table; only its descriptor is read")]
#[derive(cohort::Retained)]
#[cohort(
    category = "notes",
    anchor = "created_at",
    id = "d6d6d6d6-0001-4000-8000-000000000001",
    schema = "Host \"Data\"",
    table = "session_notes"
)]
struct QuotedNote {
    id: Uuid,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
    body: String,
}

/// Anonymised with a custom anonymiser (the locked path: select, then
/// mutate by tableoid and ctid); names that need quoting everywhere.
#[allow(dead_code, reason = "mirrors a table; only its descriptor is read")]
#[derive(cohort::Retained)]
#[cohort(
    category = "contacts",
    anchor = "created_at",
    id = "d6d6d6d6-0002-4000-8000-000000000002",
    schema = "Host \"Data\"",
    table = "Case Contacts"
)]
struct QuotedContact {
    id: Uuid,
    #[cohort(column = "Tenant \"Id\"")]
    tenant_id: Uuid,
    #[cohort(column = "Created At")]
    created_at: DateTime<Utc>,
    #[cohort(column = "Anonymised At")]
    anonymised_at: Option<DateTime<Utc>>,
    #[cohort(anonymise_with = Scramble, column = "External Ref")]
    external_ref: String,
}

/// Erased by e-mail (text, compared through its own type).
#[allow(dead_code, reason = "mirrors a table; only its descriptor is read")]
#[derive(cohort::Retained)]
#[cohort(
    category = "people",
    anchor = "created_at",
    id = "d6d6d6d6-0003-4000-8000-000000000003",
    schema = "Host \"Data\"",
    table = "People"
)]
struct QuotedPerson {
    #[cohort(column = "Person Id")]
    id: i64,
    tenant_id: Uuid,
    #[cohort(column = "Created At")]
    created_at: Option<DateTime<Utc>>,
    #[cohort(erasure_subject, column = "E-mail")]
    email: String,
}

const HOST_TABLES: &str = r#"
CREATE SCHEMA "Host ""Data""";
CREATE TABLE "Host ""Data""".session_notes (
    id uuid PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz NOT NULL, body text NOT NULL);
CREATE TABLE "Host ""Data"""."Case Contacts" (
    id uuid PRIMARY KEY, "Tenant ""Id""" uuid NOT NULL, "Created At" timestamptz NOT NULL,
    "Anonymised At" timestamptz, "External Ref" text NOT NULL);
CREATE TABLE "Host ""Data"""."People" (
    "Person Id" bigint PRIMARY KEY, tenant_id uuid NOT NULL, "Created At" timestamptz, "E-mail" text NOT NULL);
"#;

/// A schema that shadows what Cohort's SQL must never resolve through the
/// session's path: its tables (same names as Cohort's and the host's, in
/// another schema), built-in functions, the `count` aggregate, and the
/// equality and ordering operators of the types Cohort compares.
const EVIL: &str = r#"
CREATE SCHEMA evil;
CREATE TABLE evil.sweep_run (LIKE "Retention Data".sweep_run);
CREATE TABLE evil.sweep_run_entity_summary (LIKE "Retention Data".sweep_run_entity_summary);
CREATE TABLE evil.sweep_run_row_detail (LIKE "Retention Data".sweep_run_row_detail);
CREATE TABLE evil.sweep_row_handler_status (LIKE "Retention Data".sweep_row_handler_status);
CREATE TABLE evil.retention_holds (LIKE "Retention Data".retention_holds);
CREATE TABLE evil.session_notes (LIKE "Host ""Data""".session_notes);
CREATE TABLE evil."Case Contacts" (LIKE "Host ""Data"""."Case Contacts");
CREATE TABLE evil."People" (LIKE "Host ""Data"""."People");
INSERT INTO evil.session_notes SELECT * FROM "Host ""Data""".session_notes;
INSERT INTO evil."Case Contacts" SELECT * FROM "Host ""Data"""."Case Contacts";
INSERT INTO evil."People" SELECT * FROM "Host ""Data"""."People";
CREATE FUNCTION evil.now() RETURNS timestamptz LANGUAGE sql AS $$ SELECT '3000-01-01 00:00+00'::pg_catalog.timestamptz $$;
CREATE FUNCTION evil.statement_timestamp() RETURNS timestamptz LANGUAGE sql AS $$ SELECT '3000-01-01 00:00+00'::pg_catalog.timestamptz $$;
CREATE FUNCTION evil.hashtext(text) RETURNS integer LANGUAGE sql AS 'SELECT 1';
CREATE FUNCTION evil.hashtextextended(text, bigint) RETURNS bigint LANGUAGE sql AS 'SELECT 1::bigint';
CREATE FUNCTION evil.set_config(text, text, boolean) RETURNS text LANGUAGE sql AS $$ SELECT 'evil'::text $$;
CREATE FUNCTION evil.count_state(bigint) RETURNS bigint LANGUAGE sql AS 'SELECT 1000::bigint';
CREATE AGGREGATE evil.count(*) (SFUNC = evil.count_state, STYPE = bigint, INITCOND = '1000');
CREATE FUNCTION evil.always(text, text) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE OPERATOR evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.always);
CREATE FUNCTION evil.always(uuid, uuid) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE OPERATOR evil.= (LEFTARG = uuid, RIGHTARG = uuid, FUNCTION = evil.always);
CREATE FUNCTION evil.always(bigint, bigint) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE OPERATOR evil.= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = evil.always);
CREATE FUNCTION evil.always(oid, oid) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE OPERATOR evil.= (LEFTARG = oid, RIGHTARG = oid, FUNCTION = evil.always);
CREATE FUNCTION evil.always(tid, tid) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE OPERATOR evil.= (LEFTARG = tid, RIGHTARG = tid, FUNCTION = evil.always);
CREATE FUNCTION evil.always(timestamptz, timestamptz) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE OPERATOR evil.< (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = evil.always);
"#;

/// A connection that sees the real objects, for the test's own checks.
async fn safe(db: &TestDb) -> PgConnection {
    let mut conn = db.connect().await;
    sqlx::query("SET search_path = pg_catalog, public")
        .execute(&mut conn)
        .await
        .expect("safe search_path");
    conn
}

async fn n(conn: &mut PgConnection, sql: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
        .fetch_one(conn)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

fn affected(result: &RunResult, entity_type: &str) -> (u64, u64) {
    let s = result
        .summaries
        .iter()
        .find(|s| s.entity_type == entity_type)
        .unwrap_or_else(|| panic!("no summary for {entity_type}: {result:#?}"));
    (s.affected, s.held)
}

/// Sets `search_path` for every later connection to `db`, and returns a pool
/// of such connections (checked).
async fn hostile_pool(db: &TestDb, path: &str) -> sqlx::PgPool {
    db.exec(&format!(
        "ALTER DATABASE \"{}\" SET search_path = {path}",
        db.name()
    ))
    .await;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .connect_with(db.options())
        .await
        .expect("hostile pool");
    let shown: String = sqlx::query_scalar("SHOW search_path")
        .fetch_one(&pool)
        .await
        .expect("search_path");
    assert_eq!(shown, path);
    pool
}

fn rules() -> TestRules {
    TestRules::new()
        .with(
            "notes",
            Capabilities::only(Strategy::Purge),
            Rule::new(Period::days(30), Strategy::Purge),
        )
        .with(
            "contacts",
            Capabilities::only(Strategy::Anonymise),
            Rule::new(Period::days(365), Strategy::Anonymise),
        )
        .with(
            "people",
            Capabilities::only(Strategy::Purge),
            Rule::new(Period::years(10), Strategy::Purge),
        )
}

async fn build(pool: &sqlx::PgPool) -> Cohort {
    Cohort::builder(pool.clone())
        .options(Options {
            schema: COHORT_SCHEMA.into(),
            batch_size: 1,
            ..Options::default()
        })
        .rules(rules())
        .entity::<QuotedNote>()
        .entity::<QuotedContact>()
        .entity::<QuotedPerson>()
        .build()
        .await
        .expect("model")
}

// contract: D6, D8, D1, S5, E1, H1
#[tokio::test]
async fn sweep_erasure_and_holds_ignore_same_named_tables_earlier_in_search_path() {
    // pg_catalog, left out of the path, is searched first: the evil schema
    // shadows relation names (Cohort's and the host's), and functions that
    // pg_catalog does not have.
    quoted_schemas_under("evil, public").await;
}

// contract: D6, D8, D1, S5, E1, H1
#[tokio::test]
async fn sweep_erasure_and_holds_ignore_a_schema_shadowing_pg_catalog() {
    // pg_catalog named after evil: evil's functions, aggregate and operators
    // win over the built-in ones wherever a name is resolved by the path.
    quoted_schemas_under("evil, pg_catalog, public").await;
}

/// Host rows of three quoted types (each with a twin in `evil`), a hold, a
/// preview, a sweep and an erasure, all on connections whose search_path is
/// `path`; then checks data, ledger and the evil schema on a safe connection.
async fn quoted_schemas_under(path: &str) {
    let (db, _) = db_with_cohort(COHORT_SCHEMA).await;
    db.exec(HOST_TABLES).await;

    // Host rows, each with a twin in the evil schema.
    let mut notes = Vec::new();
    for (tenant, age) in [
        (tenant_a(), 40), // purged
        (tenant_a(), 40), // held
        (tenant_a(), 10), // young
        (tenant_b(), 40), // another tenant
    ] {
        let id = Uuid::new_v4();
        sqlx::query(r#"INSERT INTO "Host ""Data""".session_notes VALUES ($1, $2, $3, 'private')"#)
            .bind(id)
            .bind(tenant)
            .bind(fixed_now() - Duration::days(age))
            .execute(db.pool())
            .await
            .expect("note");
        notes.push(id);
    }
    for tenant in [tenant_a(), tenant_a(), tenant_b()] {
        sqlx::query(
            r#"INSERT INTO "Host ""Data"""."Case Contacts" VALUES ($1, $2, $3, NULL, 'REF-12345')"#,
        )
        .bind(Uuid::new_v4())
        .bind(tenant)
        .bind(fixed_now() - Duration::days(400))
        .execute(db.pool())
        .await
        .expect("contact");
    }
    db.exec(
        r#"INSERT INTO "Host ""Data"""."People" VALUES
             (1, '11111111-1111-1111-1111-111111111111', now(), 'ann@example.org'),
             (2, '11111111-1111-1111-1111-111111111111', now(), 'bob@example.org'),
             (3, '22222222-2222-2222-2222-222222222222', now(), 'ann@example.org');"#,
    )
    .await;
    db.exec(EVIL).await;
    let pool = hostile_pool(&db, path).await;
    let cohort = build(&pool).await;

    let mut conn = pool.acquire().await.expect("connection");
    cohort
        .holds()
        .create(
            &mut conn,
            HoldRequest::new(
                uuid(NOTE_ID),
                notes[1].to_string(),
                Some(tenant_a()),
                "litigation",
                Utc::now(),
            ),
        )
        .await
        .expect("hold");
    drop(conn);

    let preview = cohort
        .preview(&scope_a(), fixed_now())
        .await
        .expect("preview");
    let counts: Vec<(&str, u64, u64)> = preview
        .entries
        .iter()
        .map(|e| (e.entity_type, e.eligible, e.held))
        .collect();
    assert_eq!(
        counts,
        vec![
            ("QuotedNote", 1, 1),
            ("QuotedContact", 2, 0),
            ("QuotedPerson", 0, 0)
        ],
        "{preview:#?}"
    );

    let logs = support::LogCapture::start();
    let sweep = cohort.sweep(&scope_a(), fixed_now()).await.expect("sweep");
    assert_eq!(
        sweep.status,
        RunStatus::Succeeded,
        "{sweep:#?}\n{}",
        logs.text()
    );
    assert_eq!(affected(&sweep, "QuotedNote"), (1, 1));
    assert_eq!(affected(&sweep, "QuotedContact"), (2, 0));
    assert_eq!(affected(&sweep, "QuotedPerson"), (0, 0));

    let erasure = cohort
        .erase(
            &scope_a(),
            fixed_now(),
            ErasureRequest::new("ann@example.org"),
        )
        .await
        .expect("erase");
    assert_eq!(erasure.kind, RunKind::Erasure);
    assert_eq!(
        erasure.status,
        RunStatus::Succeeded,
        "{erasure:#?}\n{}",
        logs.text()
    );
    assert_eq!(erasure.affected(), 1);

    let mut check = safe(&db).await;
    let host = r#""Host ""Data""""#;
    let kept: Vec<Uuid> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT id FROM {host}.session_notes"
    )))
    .fetch_all(&mut check)
    .await
    .expect("notes");
    assert_eq!(kept.len(), 3);
    assert!(!kept.contains(&notes[0]), "the old note is purged");
    for id in &notes[1..] {
        assert!(kept.contains(id), "held, young and other-tenant notes stay");
    }
    let contacts: Vec<(Uuid, String)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        r#"SELECT "Tenant ""Id""", "External Ref" FROM {host}."Case Contacts" ORDER BY 1, 2"#
    )))
    .fetch_all(&mut check)
    .await
    .expect("contacts");
    assert_eq!(
        contacts,
        vec![
            (tenant_a(), "anon-9".to_owned()),
            (tenant_a(), "anon-9".to_owned()),
            (tenant_b(), "REF-12345".to_owned())
        ]
    );
    let people: Vec<i64> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        r#"SELECT "Person Id" FROM {host}."People" ORDER BY 1"#
    )))
    .fetch_all(&mut check)
    .await
    .expect("people");
    assert_eq!(people, vec![2, 3], "ann erased in tenant A only");

    // The ledger: both runs settled.
    let runs: Vec<(Uuid, String, String, bool)> = sqlx::query_as(
        r#"SELECT run_id, run_kind, status, settled_at IS NOT NULL FROM "Retention Data".sweep_run ORDER BY started_at, run_id"#,
    )
    .fetch_all(&mut check)
    .await
    .expect("runs");
    let find = |id: Uuid| {
        runs.iter()
            .find(|r| r.0 == id)
            .map(|r| (r.1.as_str(), r.2.as_str(), r.3))
    };
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(find(sweep.run_id), Some(("Sweep", "Succeeded", true)));
    assert_eq!(find(erasure.run_id), Some(("Erasure", "Succeeded", true)));
    for (run, summaries) in [(sweep.run_id, 3), (erasure.run_id, 1)] {
        let stored = n(
            &mut check,
            &format!(
                r#"SELECT pg_catalog.count(*) FROM "Retention Data".sweep_run_entity_summary WHERE run_id = '{run}' AND status = 'Succeeded'"#
            ),
        )
        .await;
        assert_eq!(stored, summaries, "{run}");
    }
    let logical_now: DateTime<Utc> = sqlx::query_scalar(
        r#"SELECT logical_now FROM "Retention Data".sweep_run WHERE run_id = $1"#,
    )
    .bind(sweep.run_id)
    .fetch_one(&mut check)
    .await
    .expect("logical_now");
    assert_eq!(logical_now, fixed_now());
    assert_eq!(
        n(
            &mut check,
            r#"SELECT pg_catalog.count(*) FROM "Retention Data".retention_holds"#
        )
        .await,
        1
    );

    // Same-named relations elsewhere were never read or written.
    for (table, rows) in [
        ("evil.sweep_run", 0),
        ("evil.sweep_run_entity_summary", 0),
        ("evil.sweep_run_row_detail", 0),
        ("evil.retention_holds", 0),
        ("evil.session_notes", 4),
        (r#"evil."Case Contacts""#, 3),
        (r#"evil."People""#, 3),
    ] {
        assert_eq!(
            n(
                &mut check,
                &format!("SELECT pg_catalog.count(*) FROM {table}")
            )
            .await,
            rows,
            "{table}"
        );
    }
    assert_eq!(
        n(
            &mut check,
            r#"SELECT pg_catalog.count(*) FROM evil."Case Contacts" WHERE "External Ref" = 'REF-12345'"#
        )
        .await,
        3
    );
    check.close().await.expect("close");
}

/// Status, settled-at and error of a run, read on a safe connection.
async fn run_row(
    conn: &mut PgConnection,
    run_id: Uuid,
) -> (String, Option<DateTime<Utc>>, Option<String>) {
    sqlx::query_as(
        r#"SELECT status, settled_at, error FROM "Retention Data".sweep_run WHERE run_id = $1"#,
    )
    .bind(run_id)
    .fetch_one(conn)
    .await
    .expect("run")
}

// contract: D8, A11, X4
#[tokio::test]
async fn the_ledgers_own_statements_ignore_a_schema_shadowing_pg_catalog() {
    let (db, _) = db_with_cohort(COHORT_SCHEMA).await;
    db.exec(HOST_TABLES).await;
    db.exec(EVIL).await;
    let live = Uuid::new_v4();
    let settled = Uuid::new_v4();
    let abandoned = Uuid::new_v4();
    db.exec(&format!(
        r#"INSERT INTO "Retention Data".sweep_run (run_id, run_kind, trigger, dry_run, tenant_id, logical_now, status, started_at, settled_at)
           VALUES ('{live}', 'Sweep', 'Manual', false, '{b}', now(), 'Started', now(), NULL),
                  ('{settled}', 'Sweep', 'Manual', false, '{b}', now(), 'Succeeded', now() - interval '3 hours', now() - interval '2 hours'),
                  ('{abandoned}', 'Sweep', 'Manual', false, '{b}', now(), 'Started', now() - interval '2 hours', NULL);
           INSERT INTO "Retention Data".sweep_run_entity_summary (run_id, retained_entity_id, entity_type, category, tenant_id,
               strategy, status, affected_count, held_count, skipped_count, null_anchor_count, updated_at)
           VALUES ('{live}', '{NOTE_ID}', 'QuotedNote', 'notes', '{b}', 'Purge', 'Running', 0, 0, 0, 0, now()),
                  ('{abandoned}', '{NOTE_ID}', 'QuotedNote', 'notes', '{b}', 'Purge', 'Running', 1, 0, 0, 0, now());"#,
        b = tenant_b()
    ))
    .await;
    let mut check = safe(&db).await;
    let settled_before = run_row(&mut check, settled).await;
    let pool = hostile_pool(&db, "evil, pg_catalog, public").await;
    let cohort = build(&pool).await;

    // A run with no entity (no tenantless type is registered) writes only
    // its own run row.
    let run = cohort
        .sweep(&Scope::Tenantless, fixed_now())
        .await
        .expect("tenantless sweep");
    assert_eq!(run.status, RunStatus::Succeeded);
    assert!(run.summaries.is_empty());
    assert_eq!(run_row(&mut check, run.run_id).await.0, "Succeeded");
    assert_eq!(
        run_row(&mut check, live).await,
        ("Started".to_owned(), None, None),
        "another owner's live run is untouched"
    );
    assert_eq!(run_row(&mut check, settled).await, settled_before);
    assert_eq!(run_row(&mut check, abandoned).await.0, "Started");

    // Only the abandoned run (old, and its lock free) is settled, and only
    // its summary.
    assert_eq!(cohort.settle_abandoned_runs().await.expect("settle"), 1);
    assert_eq!(run_row(&mut check, abandoned).await.0, "Failed");
    assert_eq!(
        run_row(&mut check, live).await,
        ("Started".to_owned(), None, None),
        "a run started a moment ago is not stale"
    );
    assert_eq!(run_row(&mut check, settled).await, settled_before);
    let summaries: Vec<(Uuid, String)> = sqlx::query_as(
        r#"SELECT run_id, status FROM "Retention Data".sweep_run_entity_summary ORDER BY status"#,
    )
    .fetch_all(&mut check)
    .await
    .expect("summaries");
    assert_eq!(
        summaries,
        vec![
            (abandoned, "Failed".to_owned()),
            (live, "Running".to_owned())
        ]
    );
    check.close().await.expect("close");
}
