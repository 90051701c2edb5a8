//! Cohort's five tables: DDL, readiness (shape, invalid indexes, the entity
//! fence trigger), schema qualification. Migrations: `schema::migrations`.

use crate::support::{LogCapture, TestDb, db_with_cohort};
use cohort::schema::{
    ReadinessProblem, ReadinessWarning, SchemaName, TABLES, check_readiness, ddl, migrations,
};
use sqlx::Row;

async fn tables_in(db: &TestDb, schema: &str) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n \
         ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'r' ORDER BY 1",
    )
    .bind(schema)
    .fetch_all(db.pool())
    .await
    .expect("list tables")
}

// contract: D1
#[tokio::test]
async fn the_ddl_creates_five_tables_in_one_schema_and_they_are_ready() {
    for schema in ["public", "retention"] {
        let (db, name) = db_with_cohort(schema).await;
        let mut expected: Vec<String> = TABLES.iter().map(|t| t.to_string()).collect();
        expected.sort();
        assert_eq!(tables_in(&db, schema).await, expected, "schema {schema}");
        let mut conn = db.pool().acquire().await.expect("conn");
        let report = check_readiness(&mut conn, &name).await.expect("readiness");
        assert!(report.is_ready(), "{report}");
        assert!(report.warnings.is_empty(), "{report}");
    }
    assert_eq!(SchemaName::default().as_str(), "public");
}

// contract: D2
#[tokio::test]
async fn readiness_reports_missing_tables_and_never_creates_them() {
    let db = TestDb::new().await;
    let mut conn = db.pool().acquire().await.expect("conn");
    let report = check_readiness(&mut conn, &SchemaName::public())
        .await
        .expect("readiness");
    assert!(!report.is_ready());
    let missing: Vec<&str> = report
        .problems
        .iter()
        .filter_map(|p| match p {
            ReadinessProblem::MissingTable { table } => Some(*table),
            _ => None,
        })
        .collect();
    assert_eq!(missing, TABLES.to_vec());
    assert!(
        tables_in(&db, "public").await.is_empty(),
        "readiness must not create tables"
    );
    let err = report.into_result().expect_err("not ready");
    let cohort::Error::SchemaNotReady(report) = &err else {
        panic!("{err:?}");
    };
    // The error says what, in one line; the report lists each problem.
    assert!(!err.to_string().contains('\n'), "{err}");
    assert!(
        report.to_string().contains("table sweep_run is missing"),
        "{report}"
    );
}

// contract: D3
#[tokio::test]
async fn readiness_lists_every_broken_column_key_index_and_check_together() {
    let (db, schema) = db_with_cohort("public").await;
    db.exec(
        r#"
        ALTER TABLE sweep_run DROP COLUMN settled_at CASCADE;
        ALTER TABLE sweep_run ALTER COLUMN error TYPE varchar(200);
        ALTER TABLE retention_holds ALTER COLUMN reason DROP NOT NULL;
        ALTER TABLE retention_holds DROP CONSTRAINT retention_holds_expiry_check;
        ALTER TABLE sweep_run_row_detail DROP CONSTRAINT sweep_run_row_detail_key;
        CREATE UNIQUE INDEX partial_detail_key ON sweep_run_row_detail (run_id, retained_entity_id, record_id)
            WHERE action = 'Purge';
        ALTER TABLE sweep_row_handler_status DROP CONSTRAINT sweep_row_handler_status_key;
        ALTER TABLE sweep_row_handler_status ADD CONSTRAINT deferred_key UNIQUE (detail_id, handler_id)
            DEFERRABLE INITIALLY IMMEDIATE;
        ALTER TABLE sweep_run_entity_summary DROP CONSTRAINT sweep_run_entity_summary_pkey;
        "#,
    )
    .await;
    let mut conn = db.pool().acquire().await.expect("conn");
    let report = check_readiness(&mut conn, &schema)
        .await
        .expect("readiness");
    let expected = vec![
        ReadinessProblem::MissingColumn {
            table: "sweep_run",
            column: "settled_at",
        },
        ReadinessProblem::WrongColumnType {
            table: "sweep_run",
            column: "error",
            expected: "text",
            found: "character varying(200)".into(),
        },
        // Dropping settled_at took the CHECK that names it.
        ReadinessProblem::MissingCheck {
            table: "sweep_run",
            constraint: "sweep_run_settled_check",
        },
        ReadinessProblem::MissingPrimaryKey {
            table: "sweep_run_entity_summary",
            columns: &["summary_id"],
        },
        ReadinessProblem::MissingUniqueIndex {
            table: "sweep_run_row_detail",
            columns: &["run_id", "retained_entity_id", "record_id"],
        },
        ReadinessProblem::DeferrableUniqueIndex {
            table: "sweep_row_handler_status",
            columns: &["detail_id", "handler_id"],
        },
        ReadinessProblem::WrongNullability {
            table: "retention_holds",
            column: "reason",
            expected_not_null: true,
        },
        ReadinessProblem::MissingCheck {
            table: "retention_holds",
            constraint: "retention_holds_expiry_check",
        },
    ];
    assert_eq!(report.problems, expected, "{report}");
    let text = report.to_string();
    assert!(text.contains("8 problem(s)"), "{text}");
}

// contract: D3
#[tokio::test]
async fn an_invalid_unique_index_left_by_a_failed_concurrent_build_counts_for_nothing() {
    let (db, schema) = db_with_cohort("public").await;
    db.exec(
        r#"
        ALTER TABLE sweep_run_entity_summary DROP CONSTRAINT sweep_run_entity_summary_key;
        INSERT INTO sweep_run VALUES ('00000000-0000-0000-0000-00000000000a', 'Sweep', 'Manual',
            false, '00000000-0000-0000-0000-000000000000', now(), 'Started', now(), NULL, NULL);
        INSERT INTO sweep_run_entity_summary (run_id, retained_entity_id, entity_type, category,
            tenant_id, strategy, status, affected_count, held_count, skipped_count,
            null_anchor_count, updated_at)
        SELECT '00000000-0000-0000-0000-00000000000a', '00000000-0000-0000-0000-0000000000e1',
               'Note', 'notes', '00000000-0000-0000-0000-000000000000', 'Purge', 'Running',
               0, 0, 0, 0, now()
        FROM generate_series(1, 2);
        "#,
    )
    .await;
    // CONCURRENTLY cannot run in a transaction block: one statement, on a
    // plain connection. The duplicates make it fail and leave an INVALID index.
    let mut conn = db.connect().await;
    let failed = sqlx::raw_sql(
        "CREATE UNIQUE INDEX CONCURRENTLY summary_key_again ON sweep_run_entity_summary \
         (run_id, retained_entity_id, category, tenant_id, strategy)",
    )
    .execute(&mut conn)
    .await;
    assert!(failed.is_err(), "the build must fail on the duplicates");
    let (valid, ready): (bool, bool) = sqlx::query_as(
        "SELECT indisvalid, indisready FROM pg_index WHERE indexrelid = 'public.summary_key_again'::regclass",
    )
    .fetch_one(&mut conn)
    .await
    .expect("the failed build left its index behind");
    assert!(!valid, "the index is INVALID (ready: {ready})");

    let report = check_readiness(&mut conn, &schema)
        .await
        .expect("readiness");
    assert_eq!(
        report.problems,
        vec![ReadinessProblem::MissingUniqueIndex {
            table: "sweep_run_entity_summary",
            columns: &[
                "run_id",
                "retained_entity_id",
                "category",
                "tenant_id",
                "strategy"
            ],
        }],
        "{report}"
    );
}

/// Drops every user trigger on `public.retention_holds` and re-applies
/// migration 2, so each case starts from Cohort's own trigger.
async fn reset_fence(db: &TestDb, schema: &SchemaName) {
    db.exec(
        r#"
        DO $$ DECLARE t text; BEGIN
          FOR t IN SELECT tgname FROM pg_trigger
                   WHERE tgrelid = 'public.retention_holds'::regclass AND NOT tgisinternal LOOP
            EXECUTE format('DROP TRIGGER %I ON public.retention_holds', t);
          END LOOP;
        END $$;
        DROP SCHEMA IF EXISTS lookalike CASCADE;
        "#,
    )
    .await;
    // Migration 2 puts the fence trigger back; the later ones put back what
    // they add to the table (the evidence chain's triggers) and the marker.
    for m in &migrations(schema)[1..] {
        db.exec(&m.up).await;
    }
}

// contract: H11, D3, D8
#[tokio::test]
async fn readiness_requires_the_entity_fence_trigger_enabled_and_as_cohort_defines_it() {
    let (db, schema) = db_with_cohort("public").await;
    let table = "retention_holds";
    let ours = "retention_holds_entity_fence";
    let disabled = || {
        vec![ReadinessProblem::DisabledTrigger {
            table,
            trigger: ours.into(),
        }]
    };
    let misdefined = |trigger: &str| {
        vec![ReadinessProblem::MisdefinedTrigger {
            table,
            trigger: trigger.into(),
            expected:
                "BEFORE INSERT OR UPDATE FOR EACH ROW, on every column, without a WHEN condition"
                    .into(),
        }]
    };
    let recreate = |how: &str| {
        format!(
            "DROP TRIGGER retention_holds_entity_fence ON retention_holds; \
             CREATE TRIGGER retention_holds_entity_fence {how} \
             EXECUTE FUNCTION public.retention_holds_entity_fence();"
        )
    };
    let cases: Vec<(&str, String, Vec<ReadinessProblem>)> = vec![
        ("as migrated", String::new(), vec![]),
        (
            "disabled",
            "ALTER TABLE retention_holds DISABLE TRIGGER retention_holds_entity_fence".into(),
            disabled(),
        ),
        (
            "replica only",
            "ALTER TABLE retention_holds ENABLE REPLICA TRIGGER retention_holds_entity_fence".into(),
            disabled(),
        ),
        (
            "always",
            "ALTER TABLE retention_holds ENABLE ALWAYS TRIGGER retention_holds_entity_fence".into(),
            vec![],
        ),
        (
            "after",
            recreate("AFTER INSERT OR UPDATE ON retention_holds FOR EACH ROW"),
            misdefined(ours),
        ),
        (
            "insert only",
            recreate("BEFORE INSERT ON retention_holds FOR EACH ROW"),
            misdefined(ours),
        ),
        (
            "with delete",
            recreate("BEFORE INSERT OR UPDATE OR DELETE ON retention_holds FOR EACH ROW"),
            misdefined(ours),
        ),
        (
            "per statement",
            recreate("BEFORE INSERT OR UPDATE ON retention_holds FOR EACH STATEMENT"),
            misdefined(ours),
        ),
        (
            "some columns",
            recreate("BEFORE INSERT OR UPDATE OF reason ON retention_holds FOR EACH ROW"),
            misdefined(ours),
        ),
        (
            "conditional",
            recreate(
                "BEFORE INSERT OR UPDATE ON retention_holds FOR EACH ROW WHEN (NEW.reason <> '')",
            ),
            misdefined(ours),
        ),
        (
            "disabled and misdefined",
            recreate("AFTER INSERT ON retention_holds FOR EACH ROW")
                + "ALTER TABLE retention_holds DISABLE TRIGGER retention_holds_entity_fence;",
            [disabled(), misdefined(ours)].concat(),
        ),
        (
            "another name",
            "ALTER TRIGGER retention_holds_entity_fence ON retention_holds RENAME TO my_fence".into(),
            vec![],
        ),
        (
            "dropped",
            "DROP TRIGGER retention_holds_entity_fence ON retention_holds".into(),
            vec![ReadinessProblem::MissingTrigger {
                table,
                trigger: ours,
            }],
        ),
        (
            "a look-alike function in another schema",
            "CREATE SCHEMA lookalike; \
             CREATE FUNCTION lookalike.retention_holds_entity_fence() RETURNS trigger \
                 LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$; \
             DROP TRIGGER retention_holds_entity_fence ON retention_holds; \
             CREATE TRIGGER retention_holds_entity_fence BEFORE INSERT OR UPDATE ON retention_holds \
                 FOR EACH ROW EXECUTE FUNCTION lookalike.retention_holds_entity_fence();"
                .into(),
            vec![ReadinessProblem::MissingTrigger {
                table,
                trigger: ours,
            }],
        ),
        (
            "a body that takes no lock",
            "CREATE OR REPLACE FUNCTION public.retention_holds_entity_fence() RETURNS trigger \
                 LANGUAGE plpgsql SET search_path = pg_catalog AS $$ BEGIN RETURN NEW; END $$"
                .into(),
            vec![ReadinessProblem::ChangedFunction { function: ours }],
        ),
        (
            "search_path reset",
            "ALTER FUNCTION public.retention_holds_entity_fence() RESET search_path".into(),
            vec![ReadinessProblem::ChangedFunction { function: ours }],
        ),
        (
            "function dropped",
            "DROP FUNCTION public.retention_holds_entity_fence() CASCADE".into(),
            vec![
                ReadinessProblem::MissingFunction { function: ours },
                ReadinessProblem::MissingTrigger {
                    table,
                    trigger: ours,
                },
            ],
        ),
    ];
    let mut conn = db.pool().acquire().await.expect("conn");
    for (case, sql, expected) in cases {
        reset_fence(&db, &schema).await;
        if !sql.is_empty() {
            db.exec(&sql).await;
        }
        let report = check_readiness(&mut conn, &schema)
            .await
            .expect("readiness");
        assert_eq!(report.problems, expected, "{case}: {report}");
        assert_eq!(
            report.installed_version,
            Some(cohort::schema::SCHEMA_VERSION),
            "{case}"
        );
    }

    reset_fence(&db, &schema).await;
    db.exec("ALTER TABLE retention_holds DISABLE TRIGGER retention_holds_entity_fence")
        .await;
    let err = check_readiness(&mut conn, &schema)
        .await
        .expect("readiness")
        .into_result()
        .expect_err("not ready");
    let cohort::Error::SchemaNotReady(report) = &err else {
        panic!("{err:?}");
    };
    assert!(
        report
            .to_string()
            .contains("trigger retention_holds_entity_fence on retention_holds is disabled"),
        "{report}"
    );
}

// contract: D4
#[tokio::test]
async fn a_missing_speed_index_is_a_logged_warning_and_any_index_on_its_columns_serves() {
    let (db, schema) = db_with_cohort("public").await;
    db.exec("DROP INDEX retention_holds_record_idx; DROP INDEX sweep_run_status_started_idx;")
        .await;
    let mut conn = db.pool().acquire().await.expect("conn");
    let logs = LogCapture::start();
    let report = check_readiness(&mut conn, &schema)
        .await
        .expect("readiness");
    assert!(report.is_ready(), "{report}");
    assert_eq!(
        report.warnings,
        vec![
            ReadinessWarning::MissingIndex {
                table: "sweep_run",
                columns: &["status", "started_at"]
            },
            ReadinessWarning::MissingIndex {
                table: "retention_holds",
                columns: &["retained_entity_id", "record_id"],
            },
        ]
    );
    let logged = logs.text();
    assert!(logged.contains("WARN"), "{logged}");
    assert!(
        logged.contains("retention_holds has no index on (retained_entity_id, record_id)"),
        "{logged}"
    );

    // A unique index with other name, and a wider non-unique one, on the same key columns serve.
    db.exec(
        "CREATE UNIQUE INDEX my_holds ON retention_holds (retained_entity_id, record_id, hold_id); \
         CREATE INDEX my_runs ON sweep_run (status, started_at);",
    )
    .await;
    let report = check_readiness(&mut conn, &schema)
        .await
        .expect("readiness");
    assert!(report.warnings.is_empty(), "{report}");
}

// contract: D6
#[tokio::test]
async fn schema_names_that_need_quoting_work() {
    for name in [
        "Retention",
        "retention data",
        r#"we"ird"#,
        r#"x"; DROP TABLE public.victim; --"#,
    ] {
        let db = TestDb::new().await;
        db.exec("CREATE TABLE public.victim (id int)").await;
        let schema = SchemaName::new(name).expect("valid");
        db.exec(&ddl(&schema)).await;
        let mut expected: Vec<String> = TABLES.iter().map(|t| t.to_string()).collect();
        expected.sort();
        assert_eq!(tables_in(&db, name).await, expected, "schema {name:?}");
        assert_eq!(
            tables_in(&db, "public").await,
            vec!["victim".to_string()],
            "nothing escaped the quoting"
        );
        let mut conn = db.pool().acquire().await.expect("conn");
        let report = check_readiness(&mut conn, &schema)
            .await
            .expect("readiness");
        assert!(report.is_ready(), "{name:?}: {report}");
    }
}

// contract: D6, D8
#[tokio::test]
async fn a_hostile_search_path_and_same_named_tables_elsewhere_change_nothing() {
    let (db, schema) = db_with_cohort("retention").await;
    // A schema first on the search path with broken look-alike tables, and
    // functions and an operator that shadow pg_catalog's.
    db.exec(&format!(
        r#"
        CREATE SCHEMA evil;
        CREATE TABLE evil.sweep_run (nothing int);
        CREATE TABLE public.sweep_run (nothing int);
        CREATE FUNCTION evil.format_type(oid, integer) RETURNS text LANGUAGE sql AS $$ SELECT 'garbage' $$;
        CREATE FUNCTION evil.set_config(text, text, boolean) RETURNS text LANGUAGE sql AS $$ SELECT 'x' $$;
        CREATE FUNCTION evil.always(name, text) RETURNS boolean LANGUAGE sql AS $$ SELECT true $$;
        CREATE OPERATOR evil.= (LEFTARG = name, RIGHTARG = text, FUNCTION = evil.always);
        ALTER DATABASE "{}" SET search_path = evil, pg_catalog, public;
        "#,
        db.name()
    ))
    .await;
    // New connections get the hostile search_path.
    let mut conn = db.connect().await;
    let path: String = sqlx::query("SHOW search_path")
        .fetch_one(&mut conn)
        .await
        .expect("show")
        .get(0);
    assert_eq!(path, "evil, pg_catalog, public");
    let shadowed: String = sqlx::query("SELECT format_type(23, -1)")
        .fetch_one(&mut conn)
        .await
        .expect("q")
        .get(0);
    assert_eq!(
        shadowed, "garbage",
        "the shadowing function is really in effect"
    );

    let report = check_readiness(&mut conn, &schema)
        .await
        .expect("readiness");
    assert!(report.is_ready(), "{report}");
    assert!(report.warnings.is_empty(), "{report}");

    // The look-alike in public is judged on its own and never mistaken for ours.
    let report = check_readiness(&mut conn, &SchemaName::public())
        .await
        .expect("readiness");
    assert!(report.problems.contains(&ReadinessProblem::MissingColumn {
        table: "sweep_run",
        column: "run_id"
    }));
    assert!(report.problems.contains(&ReadinessProblem::MissingTable {
        table: "retention_holds"
    }));
}

// contract: D8
#[tokio::test]
async fn readiness_of_one_schema_never_reads_another() {
    let (db, _) = db_with_cohort("public").await;
    let mut conn = db.pool().acquire().await.expect("conn");
    let other = SchemaName::new("retention").expect("valid");
    let report = check_readiness(&mut conn, &other).await.expect("readiness");
    // public's version marker is not retention's.
    assert_eq!(report.installed_version, None, "{report}");
    assert_eq!(
        report.problems.len(),
        1 + cohort::schema::TABLES.len(),
        "{report}"
    );
    assert!(matches!(
        &report.problems[0],
        ReadinessProblem::MissingMigrations { installed: None, missing, .. }
            if missing.len() as i64 == cohort::schema::SCHEMA_VERSION
    ));
    assert_eq!(report.problems.len(), 1 + cohort::schema::TABLES.len());
    assert!(
        report.problems[1..]
            .iter()
            .all(|p| matches!(p, ReadinessProblem::MissingTable { .. }))
    );
}

#[tokio::test]
async fn readiness_joins_an_open_transaction_without_ending_it() {
    let (db, schema) = db_with_cohort("public").await;
    let mut tx = db.pool().begin().await.expect("begin");
    sqlx::query("CREATE TABLE scratch (id int)")
        .execute(&mut *tx)
        .await
        .expect("create");
    let report = check_readiness(&mut tx, &schema).await.expect("readiness");
    assert!(report.is_ready());
    // The caller's transaction is still open and usable; search_path is not left pinned.
    let path: String = sqlx::query("SHOW search_path")
        .fetch_one(&mut *tx)
        .await
        .expect("show")
        .get(0);
    assert_eq!(path, r#""$user", public"#);
    tx.rollback().await.expect("rollback");
    assert!(
        !tables_in(&db, "public")
            .await
            .contains(&"scratch".to_string())
    );
}

#[test]
fn bad_schema_names_are_clear_errors() {
    for (name, needle) in [
        ("", "is empty"),
        ("a\0b", "NUL"),
        (&"s".repeat(64), "63 bytes"),
    ] {
        let err = SchemaName::new(name).expect_err("rejected");
        assert!(matches!(
            err,
            cohort::Error::InvalidIdentifier { what: "schema", .. }
        ));
        assert!(err.to_string().contains(needle), "{err}");
    }
}
