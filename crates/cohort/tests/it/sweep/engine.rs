//! The engine: preview and sweep with every strategy, the ledger, failures.

use crate::support::fixtures::{
    contact_days_old, db_with_tables, fixed_now, hold_sql, note_days_old, readme_rules, scope_a,
    tenant_a, tenant_b,
};
use crate::support::models::*;
use crate::support::{Answer, BuildEngine, TestDb, TestRules, count};
use chrono::{DateTime, Duration, Utc};
use cohort::{
    Capabilities, Cohort, Options, Period, Rule, RunStatus, Scope, Strategy, TenantContext,
};
use sqlx::Row;
use uuid::Uuid;

/// entity_type, category, strategy, status, affected, held, skipped, applied period.
type SummaryRow = (String, String, String, String, i64, i64, i64, String);

async fn build(db: &TestDb, rules: TestRules, options: Options) -> Cohort {
    Cohort::builder(db.engine_pool().clone())
        .options(options)
        .rules(rules)
        .entity::<SessionNote>()
        .entity::<CaseContact>()
        .build_engine(db)
        .await
        .expect("valid model")
}

async fn exists(db: &TestDb, table: &str, id: Uuid) -> bool {
    count(
        db,
        &format!("SELECT count(*) FROM {table} WHERE id = '{id}'"),
    )
    .await
        == 1
}

// contract: S1, S3, S4, S5, S6, A1, X3, P1
#[tokio::test]
async fn the_readme_scenario_purges_anonymises_and_leaves_other_tenants_and_holds_alone() {
    let db = db_with_tables().await;
    let cohort = build(&db, readme_rules(), Options::default()).await;
    let old_note = note_days_old(&db, tenant_a(), 40).await;
    let young_note = note_days_old(&db, tenant_a(), 10).await;
    let held_note = note_days_old(&db, tenant_a(), 40).await;
    hold_sql(&db, NOTE_ID, held_note, tenant_a()).await;
    let other_tenant_note = note_days_old(&db, tenant_b(), 400).await;
    let old_contact = contact_days_old(&db, tenant_a(), 400).await;
    let young_contact = contact_days_old(&db, tenant_a(), 100).await;
    let other_contact = contact_days_old(&db, tenant_b(), 400).await;

    let result = cohort.sweep(&scope_a(), fixed_now()).await.expect("sweep");
    assert_eq!(result.status, RunStatus::Succeeded, "{result:#?}");
    assert!(
        !exists(&db, "session_notes", old_note).await,
        "old note purged"
    );
    assert!(
        exists(&db, "session_notes", young_note).await,
        "young note kept"
    );
    assert!(
        exists(&db, "session_notes", held_note).await,
        "held note kept"
    );
    assert!(
        exists(&db, "session_notes", other_tenant_note).await,
        "other tenant untouched"
    );

    let row = sqlx::query("SELECT email, full_name, phone, external_ref, anonymised_at FROM case_contacts WHERE id = $1")
        .bind(old_contact)
        .fetch_one(db.pool())
        .await
        .expect("contact");
    assert_eq!(row.get::<Option<String>, _>("email"), None);
    assert_eq!(row.get::<String, _>("full_name"), "");
    assert_eq!(row.get::<String, _>("phone"), "[redacted]");
    assert_eq!(row.get::<String, _>("external_ref"), "anon-9");
    assert!(
        row.get::<Option<DateTime<Utc>>, _>("anonymised_at")
            .is_some()
    );
    for untouched in [young_contact, other_contact] {
        let email: Option<String> =
            sqlx::query_scalar("SELECT email FROM case_contacts WHERE id = $1")
                .bind(untouched)
                .fetch_one(db.pool())
                .await
                .expect("contact");
        assert_eq!(email.as_deref(), Some("ann@example.org"));
    }

    // The ledger: the run row and one summary per entity.
    let run = sqlx::query(
        "SELECT run_kind, trigger, dry_run, tenant_id, status, settled_at, error FROM sweep_run",
    )
    .fetch_one(db.pool())
    .await
    .expect("one run");
    assert_eq!(run.get::<String, _>("run_kind"), "Sweep");
    assert_eq!(run.get::<String, _>("trigger"), "Manual");
    assert!(!run.get::<bool, _>("dry_run"));
    assert_eq!(run.get::<Uuid, _>("tenant_id"), tenant_a());
    assert_eq!(run.get::<String, _>("status"), "Succeeded");
    assert!(run.get::<Option<DateTime<Utc>>, _>("settled_at").is_some());
    assert_eq!(run.get::<Option<String>, _>("error"), None);
    let summaries = sqlx::query(
        "SELECT entity_type, category, strategy, status, affected_count, held_count, skipped_count, applied_period \
         FROM sweep_run_entity_summary ORDER BY entity_type",
    )
    .fetch_all(db.pool())
    .await
    .expect("summaries");
    let got: Vec<SummaryRow> = summaries
        .iter()
        .map(|r| {
            (
                r.get("entity_type"),
                r.get("category"),
                r.get("strategy"),
                r.get("status"),
                r.get("affected_count"),
                r.get("held_count"),
                r.get("skipped_count"),
                r.get("applied_period"),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (
                "CaseContact".into(),
                "case-contacts".into(),
                "Anonymise".into(),
                "Succeeded".into(),
                1,
                0,
                0,
                "P365D".into()
            ),
            (
                "SessionNote".into(),
                "session-notes".into(),
                "Purge".into(),
                "Succeeded".into(),
                1,
                1,
                0,
                "P30D".into()
            ),
        ]
    );
    assert_eq!(result.affected(), 2);

    // contract: S3 — a second sweep changes nothing.
    let stamped: DateTime<Utc> =
        sqlx::query_scalar("SELECT anonymised_at FROM case_contacts WHERE id = $1")
            .bind(old_contact)
            .fetch_one(db.pool())
            .await
            .expect("stamp");
    let again = cohort.sweep(&scope_a(), fixed_now()).await.expect("sweep");
    assert_eq!(again.affected(), 0);
    let restamped: DateTime<Utc> =
        sqlx::query_scalar("SELECT anonymised_at FROM case_contacts WHERE id = $1")
            .bind(old_contact)
            .fetch_one(db.pool())
            .await
            .expect("stamp");
    assert_eq!(stamped, restamped);
}

// contract: S7
#[tokio::test]
async fn preview_counts_what_a_sweep_would_do_and_changes_nothing() {
    let db = db_with_tables().await;
    let cohort = build(&db, readme_rules(), Options::default()).await;
    for _ in 0..3 {
        note_days_old(&db, tenant_a(), 40).await;
    }
    let held = note_days_old(&db, tenant_a(), 40).await;
    hold_sql(&db, NOTE_ID, held, tenant_a()).await;
    note_days_old(&db, tenant_a(), 5).await;
    note_days_old(&db, tenant_b(), 40).await;
    contact_days_old(&db, tenant_a(), 400).await;

    let preview = cohort
        .preview(&scope_a(), fixed_now())
        .await
        .expect("preview");
    let notes = preview
        .entries
        .iter()
        .find(|e| e.entity_type == "SessionNote")
        .expect("notes");
    assert_eq!((notes.eligible, notes.held, notes.null_anchor), (3, 1, 0));
    assert_eq!(notes.strategy, Some(Strategy::Purge));
    let contacts = preview
        .entries
        .iter()
        .find(|e| e.entity_type == "CaseContact")
        .expect("contacts");
    assert_eq!((contacts.eligible, contacts.held), (1, 0));
    assert_eq!(
        count(&db, "SELECT count(*) FROM session_notes").await,
        6,
        "nothing changed"
    );
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM case_contacts WHERE anonymised_at IS NOT NULL"
        )
        .await,
        0
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM sweep_run").await,
        0,
        "no ledger"
    );

    let result = cohort.sweep(&scope_a(), fixed_now()).await.expect("sweep");
    let swept = result
        .summaries
        .iter()
        .find(|s| s.entity_type == "SessionNote")
        .expect("notes");
    assert_eq!((swept.affected, swept.held), (notes.eligible, notes.held));
}

// contract: S8
#[tokio::test]
async fn a_dry_run_writes_the_ledger_and_changes_no_row() {
    let db = db_with_tables().await;
    let cohort = build(&db, readme_rules(), Options::default()).await;
    note_days_old(&db, tenant_a(), 40).await;
    note_days_old(&db, tenant_a(), 40).await;
    contact_days_old(&db, tenant_a(), 400).await;
    let result = cohort
        .sweep_with(
            &scope_a(),
            fixed_now(),
            cohort::SweepOptions::default().dry_run(),
        )
        .await
        .expect("dry run");
    assert!(result.dry_run);
    assert_eq!(result.affected(), 3);
    assert_eq!(count(&db, "SELECT count(*) FROM session_notes").await, 2);
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM case_contacts WHERE anonymised_at IS NOT NULL"
        )
        .await,
        0
    );
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM sweep_run WHERE dry_run AND status = 'Succeeded'"
        )
        .await,
        1
    );
    assert_eq!(
        count(
            &db,
            "SELECT sum(affected_count)::bigint FROM sweep_run_entity_summary"
        )
        .await,
        3
    );
}

// contract: X11, X12, X13
#[tokio::test]
async fn the_cutoff_is_strict_null_anchors_stay_and_a_zero_period_acts_at_once() {
    let db = db_with_tables().await;
    let rules = TestRules::new()
        .with(
            "tickets",
            Capabilities::only(Strategy::Purge),
            Rule::new(Period::days(30), Strategy::Purge),
        )
        .with(
            "session-notes",
            Capabilities::only(Strategy::Purge),
            Rule::new(Period::ZERO, Strategy::Purge),
        )
        .with(
            "case-contacts",
            Capabilities::only(Strategy::Anonymise),
            Rule::new(Period::days(1), Strategy::Anonymise),
        );
    let cohort = Cohort::builder(db.engine_pool().clone())
        .rules(rules)
        .entity::<Ticket>()
        .entity::<SessionNote>()
        .build_engine(&db)
        .await
        .expect("model");
    let cutoff = fixed_now() - Duration::days(30);
    sqlx::query(
        "INSERT INTO tickets (id, tenant_id, opened_at) VALUES \
         (1, $1, $2), (2, $1, $2 - interval '1 microsecond'), (3, $1, NULL), (4, $1, NULL)",
    )
    .bind(tenant_a())
    .bind(cutoff)
    .execute(db.pool())
    .await
    .expect("tickets");
    // Zero period: anything older than now goes; a row at exactly now stays.
    sqlx::query("INSERT INTO session_notes VALUES ($1, $2, $3, 'a'), ($4, $2, $3 - interval '1 second', 'b')")
        .bind(Uuid::new_v4())
        .bind(tenant_a())
        .bind(fixed_now())
        .bind(Uuid::new_v4())
        .execute(db.pool())
        .await
        .expect("notes");

    let result = cohort.sweep(&scope_a(), fixed_now()).await.expect("sweep");
    let left: Vec<i64> = sqlx::query_scalar("SELECT id FROM tickets ORDER BY id")
        .fetch_all(db.pool())
        .await
        .expect("ids");
    assert_eq!(
        left,
        vec![1, 3, 4],
        "only the row strictly before the cutoff goes; NULL anchors stay"
    );
    let tickets = result
        .summaries
        .iter()
        .find(|s| s.entity_type == "Ticket")
        .expect("tickets");
    assert_eq!(tickets.null_anchor, 2);
    assert_eq!(tickets.cutoff, Some(cutoff));
    assert_eq!(
        count(
            &db,
            "SELECT null_anchor_count FROM sweep_run_entity_summary WHERE entity_type = 'Ticket'"
        )
        .await,
        2
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM session_notes").await,
        1,
        "zero period: eligible at once"
    );
}

// contract: P6
#[tokio::test]
async fn a_sweep_applies_the_greater_of_period_and_legal_minimum() {
    let db = db_with_tables().await;
    let rules = readme_rules().with(
        "session-notes",
        Capabilities::only(Strategy::Purge),
        Rule::new(Period::days(30), Strategy::Purge).with_legal_minimum(Period::days(90)),
    );
    let cohort = build(&db, rules, Options::default()).await;
    let within_minimum = note_days_old(&db, tenant_a(), 60).await;
    let past_minimum = note_days_old(&db, tenant_a(), 100).await;
    cohort.sweep(&scope_a(), fixed_now()).await.expect("sweep");
    assert!(exists(&db, "session_notes", within_minimum).await);
    assert!(!exists(&db, "session_notes", past_minimum).await);
    let period: String = sqlx::query_scalar(
        "SELECT applied_period FROM sweep_run_entity_summary WHERE entity_type = 'SessionNote'",
    )
    .fetch_one(db.pool())
    .await
    .expect("period");
    assert_eq!(period, "P90D");
}

// contract: P7
#[tokio::test]
async fn an_exempt_rule_leaves_rows_and_shows_a_zero_summary() {
    let db = db_with_tables().await;
    let rules = readme_rules().with(
        "session-notes",
        Capabilities::only(Strategy::Purge).and(Strategy::Exempt),
        Rule::new(Period::days(30), Strategy::Exempt),
    );
    let cohort = build(&db, rules, Options::default()).await;
    let old = note_days_old(&db, tenant_a(), 400).await;
    let result = cohort.sweep(&scope_a(), fixed_now()).await.expect("sweep");
    assert_eq!(result.status, RunStatus::Succeeded);
    assert!(exists(&db, "session_notes", old).await);
    let row = sqlx::query(
        "SELECT strategy, affected_count, status FROM sweep_run_entity_summary WHERE entity_type = 'SessionNote'",
    )
    .fetch_one(db.pool())
    .await
    .expect("summary");
    assert_eq!(row.get::<String, _>("strategy"), "Exempt");
    assert_eq!(row.get::<i64, _>("affected_count"), 0);
    assert_eq!(row.get::<String, _>("status"), "Succeeded");
}

// contract: X5, A9, P8, P3, X21 (a provider panicking inside its future)
#[tokio::test]
async fn a_failing_entity_is_recorded_sanitized_and_the_others_go_on() {
    let db = db_with_tables().await;
    let rules = readme_rules().with(
        "tickets",
        Capabilities::only(Strategy::Purge),
        Rule::new(Period::days(30), Strategy::Purge),
    );
    let cohort = Cohort::builder(db.engine_pool().clone())
        .rules(rules.clone())
        .entity::<SessionNote>()
        .entity::<CaseContact>()
        .entity::<Ticket>()
        .build_engine(&db)
        .await
        .expect("model");
    for answer in [
        Answer::Error,
        Answer::Panic,
        Answer::NoRule,
        Answer::Rule(Rule::new(Period::days(365), Strategy::Purge)), // not declared
    ] {
        rules.set("case-contacts", answer);
        let old_note = note_days_old(&db, tenant_a(), 40).await;
        sqlx::query("INSERT INTO tickets (id, tenant_id, opened_at) VALUES ((SELECT count(*) FROM tickets) + 1, $1, $2)")
            .bind(tenant_a())
            .bind(fixed_now() - Duration::days(400))
            .execute(db.pool())
            .await
            .expect("ticket");
        contact_days_old(&db, tenant_a(), 400).await;
        let result = cohort.sweep(&scope_a(), fixed_now()).await.expect("sweep");
        assert_eq!(result.status, RunStatus::PartiallyFailed);
        assert_eq!(result.entity_failures.len(), 1);
        assert_eq!(result.entity_failures[0].entity_type, "CaseContact");
        assert!(
            !exists(&db, "session_notes", old_note).await,
            "the entity before was swept"
        );
        assert_eq!(
            count(&db, "SELECT count(*) FROM tickets").await,
            0,
            "the entity after was swept"
        );
        assert_eq!(
            count(
                &db,
                "SELECT count(*) FROM case_contacts WHERE anonymised_at IS NOT NULL"
            )
            .await,
            0
        );

        let run_error: String = sqlx::query_scalar(
            "SELECT error FROM sweep_run WHERE run_id = $1 AND status = 'PartiallyFailed'",
        )
        .bind(result.run_id)
        .fetch_one(db.pool())
        .await
        .expect("run error");
        let summary_error: String = sqlx::query_scalar(
            "SELECT error FROM sweep_run_entity_summary WHERE run_id = $1 AND entity_type = 'CaseContact' AND status = 'Failed'",
        )
        .bind(result.run_id)
        .fetch_one(db.pool())
        .await
        .expect("summary error");
        for stored in [&run_error, &summary_error] {
            assert!(
                !stored.contains("secret-token"),
                "no message text: {stored}"
            );
            assert!(
                !stored.contains("panic") && !stored.contains("policy service"),
                "{stored}"
            );
            assert!(
                stored.contains(&result.entity_failures[0].failure.diagnostic_id.to_string()),
                "{stored}"
            );
        }
        let envelope: serde_json::Value =
            serde_json::from_str(&summary_error).expect("json envelope");
        let keys: Vec<&str> = envelope
            .as_object()
            .expect("object")
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys, vec!["diagnostic_id", "kind", "sqlstate"]);
    }
    let kinds: Vec<String> = sqlx::query_scalar(
        "SELECT (error::jsonb ->> 'kind') FROM sweep_run_entity_summary WHERE status = 'Failed' ORDER BY updated_at",
    )
    .fetch_all(db.pool())
    .await
    .expect("kinds");
    assert_eq!(
        kinds,
        vec![
            "RuleProvider",
            "RuleProviderPanic",
            "UnresolvedCategory",
            "UndeclaredStrategy"
        ]
    );
}

// contract: A9
#[tokio::test]
async fn a_table_dropped_or_changed_after_start_up_fails_only_its_entity_with_its_sqlstate() {
    let db = db_with_tables().await;
    let cohort = build(&db, readme_rules(), Options::default()).await;
    let old_note = note_days_old(&db, tenant_a(), 40).await;
    contact_days_old(&db, tenant_a(), 400).await;
    db.exec("DROP TABLE case_contacts").await;
    let result = cohort.sweep(&scope_a(), fixed_now()).await.expect("sweep");
    assert_eq!(result.status, RunStatus::PartiallyFailed);
    assert!(!exists(&db, "session_notes", old_note).await);
    let failure = &result.entity_failures[0].failure;
    assert_eq!(failure.sqlstate.as_deref(), Some("42P01"));

    db.exec("ALTER TABLE session_notes ALTER COLUMN created_at TYPE text USING created_at::text")
        .await;
    note_text(&db).await;
    let result = cohort.sweep(&scope_a(), fixed_now()).await.expect("sweep");
    assert_eq!(result.status, RunStatus::Failed, "every entity failed");
    assert!(!result.entity_failures.is_empty());
    assert!(
        result
            .entity_failures
            .iter()
            .all(|f| f.failure.sqlstate.is_some())
    );
    assert_eq!(count(&db, "SELECT count(*) FROM session_notes").await, 1);
}

async fn note_text(db: &TestDb) {
    db.exec("INSERT INTO session_notes VALUES (gen_random_uuid(), '11111111-1111-1111-1111-111111111111', '2000-01-01', 'x')")
        .await;
}

// contract: X8
#[tokio::test]
async fn caller_times_with_any_offset_are_normalised_to_utc() {
    let db = db_with_tables().await;
    let cohort = build(&db, readme_rules(), Options::default()).await;
    let plus_five = chrono::FixedOffset::east_opt(5 * 3600).expect("offset");
    let local = fixed_now().with_timezone(&plus_five);
    assert_eq!(local.to_rfc3339(), "2026-06-01T17:00:00+05:00");
    let kept = note_days_old(&db, tenant_a(), 29).await;
    let gone = note_days_old(&db, tenant_a(), 31).await;
    let result = cohort.sweep(&scope_a(), local).await.expect("sweep");
    assert_eq!(result.now, fixed_now());
    assert!(exists(&db, "session_notes", kept).await);
    assert!(!exists(&db, "session_notes", gone).await);
    let stored: DateTime<Utc> = sqlx::query_scalar("SELECT logical_now FROM sweep_run")
        .fetch_one(db.pool())
        .await
        .expect("now");
    assert_eq!(stored, fixed_now());
}

// contract: A3
#[tokio::test]
async fn tenantless_runs_are_attributed_to_the_nil_uuid() {
    let db = db_with_tables().await;
    let rules = TestRules::new().with(
        "audit-log",
        Capabilities::only(Strategy::Purge),
        Rule::new(Period::days(30), Strategy::Purge).with_per_row_audit(),
    );
    let cohort = Cohort::builder(db.engine_pool().clone())
        .rules(rules)
        .entity::<SystemLog>()
        .build_engine(&db)
        .await
        .expect("model");
    db.exec("INSERT INTO system_log VALUES (1, '2020-01-01', 'old'), (2, now(), 'new')")
        .await;
    let result = cohort
        .sweep(&Scope::Tenantless, Utc::now())
        .await
        .expect("sweep");
    assert_eq!(result.affected(), 1);
    for table in [
        "sweep_run",
        "sweep_run_entity_summary",
        "sweep_run_row_detail",
    ] {
        let tenant: Uuid = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT tenant_id FROM {table}"
        )))
        .fetch_one(db.pool())
        .await
        .expect("tenant");
        assert_eq!(tenant, Uuid::nil(), "{table}");
    }
    // A tenant pass does not touch tenantless types.
    db.exec("INSERT INTO system_log VALUES (3, '2020-01-01', 'old')")
        .await;
    cohort.sweep(&scope_a(), Utc::now()).await.expect("sweep");
    assert_eq!(count(&db, "SELECT count(*) FROM system_log").await, 2);
}

// contract: P4
#[tokio::test]
async fn the_provider_receives_category_tenant_and_logical_time() {
    let db = db_with_tables().await;
    let rules = readme_rules();
    let cohort = build(&db, rules.clone(), Options::default()).await;
    cohort.sweep(&scope_a(), fixed_now()).await.expect("sweep");
    cohort
        .preview(
            &Scope::Tenant(TenantContext::new(tenant_b())),
            fixed_now() - Duration::days(1),
        )
        .await
        .expect("preview");
    let seen = rules.seen.lock().expect("seen").clone();
    assert_eq!(
        seen,
        vec![
            ("session-notes".to_string(), Some(tenant_a()), fixed_now()),
            ("case-contacts".to_string(), Some(tenant_a()), fixed_now()),
            (
                "session-notes".to_string(),
                Some(tenant_b()),
                fixed_now() - Duration::days(1)
            ),
            (
                "case-contacts".to_string(),
                Some(tenant_b()),
                fixed_now() - Duration::days(1)
            ),
        ]
    );
}

#[allow(dead_code, reason = "mirrors a table; only its descriptor is read")]
#[derive(cohort::Retained)]
#[cohort(
    category = "codes",
    anchor = "created_at",
    id = "3e9d2c1b-4a5f-4e6d-8c7b-9a0b1c2d3e4f",
    table = "codes"
)]
struct Code {
    id: String,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
}

// A key type whose operators live in a schema off the session's path: the
// batches' order and their keyset cursor must still agree, or rows sharing an
// anchor would be skipped.
#[tokio::test]
async fn batches_stay_consistent_for_a_key_type_off_the_search_path() {
    let db = db_with_tables().await;
    db.exec(
        r#"
        CREATE SCHEMA ext;
        CREATE EXTENSION IF NOT EXISTS citext SCHEMA ext;
        CREATE TABLE codes (id ext.citext COLLATE "C" PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz NOT NULL);
        INSERT INTO codes SELECT c, '11111111-1111-1111-1111-111111111111', '2020-01-01' FROM unnest(ARRAY['a', 'B', 'c', 'D', 'e', 'F']) c;
        "#,
    )
    .await;
    if let Some(role) = db.engine_role() {
        // The grants Cohort generates cannot know where an extension lives:
        // the host grants its schema (docs/security.md; build reports it).
        db.exec(&format!("GRANT USAGE ON SCHEMA ext TO \"{role}\""))
            .await;
    }
    let rules = TestRules::new().with(
        "codes",
        Capabilities::only(Strategy::Purge),
        Rule::new(Period::days(30), Strategy::Purge),
    );
    let cohort = Cohort::builder(db.engine_pool().clone())
        .options(Options {
            batch_size: 1,
            ..Options::default()
        })
        .rules(rules)
        .entity::<Code>()
        .build_engine(&db)
        .await
        .expect("model");
    let result = cohort.sweep(&scope_a(), fixed_now()).await.expect("sweep");
    assert_eq!(result.affected(), 6, "{result:#?}");
    assert_eq!(count(&db, "SELECT count(*) FROM codes").await, 0);
}
