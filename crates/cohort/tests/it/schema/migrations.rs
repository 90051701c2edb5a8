//! Cohort's schema migrations: applied with sqlx's migrator (in code and from
//! files), upgrades on databases holding data, tables from the
//! pre-versioning `ddl()`, reverting, frozen text, and the entity fence
//! trigger of migration 2 (contract H11).

use std::time::Duration;

use crate::support::{TestDb, db_with_cohort};
use cohort::schema::{
    Layout, MigrationId, ReadinessProblem, ReadinessReport, ReadinessWarning, SCHEMA_VERSION,
    SchemaName, check_readiness, ddl, migrations, write_migration_files,
};
use sqlx::migrate::{Migration as SqlxMigration, MigrationType, Migrator};
use sqlx::{AssertSqlSafe, Connection, PgConnection, SqlSafeStr};
use uuid::Uuid;

/// Cohort's migrations as sqlx migrations, as docs/schema.md shows a host
/// building them.
fn sqlx_migrations(schema: &SchemaName) -> Vec<SqlxMigration> {
    let mut steps = Vec::new();
    for m in migrations(schema) {
        let description = m.name.replace('_', " ");
        let up = AssertSqlSafe(m.up).into_sql_str();
        match m.down {
            None => steps.push(SqlxMigration::new(
                m.version,
                description.into(),
                MigrationType::Simple,
                up,
                false,
            )),
            Some(down) => {
                let down = AssertSqlSafe(down).into_sql_str();
                steps.push(SqlxMigration::new(
                    m.version,
                    description.clone().into(),
                    MigrationType::ReversibleUp,
                    up,
                    false,
                ));
                steps.push(SqlxMigration::new(
                    m.version,
                    description.into(),
                    MigrationType::ReversibleDown,
                    down,
                    false,
                ));
            }
        }
    }
    steps
}

/// A migrator of Cohort's migrations, with a history table of their own.
fn migrator(schema: &SchemaName) -> Migrator {
    let mut migrator = Migrator::with_migrations(sqlx_migrations(schema));
    migrator.dangerous_set_table_name("_cohort_migrations");
    migrator
}

async fn readiness(db: &TestDb, schema: &SchemaName) -> ReadinessReport {
    let mut conn = db.pool().acquire().await.expect("conn");
    check_readiness(&mut conn, schema).await.expect("readiness")
}

fn assert_ready(report: &ReadinessReport) {
    assert!(report.is_ready(), "{report}");
    assert!(report.warnings.is_empty(), "{report}");
    assert_eq!(report.installed_version, Some(SCHEMA_VERSION), "{report}");
    assert_eq!(report.required_version, SCHEMA_VERSION);
    assert!(report.missing_migrations.is_empty(), "{report}");
}

fn id(version: i64, name: &'static str) -> MigrationId {
    MigrationId { version, name }
}

// contract: D2, D3
#[tokio::test]
async fn sqlx_migrator_installs_cohort_and_a_second_run_changes_nothing() {
    for name in ["retention", r#"Retention "Data""#] {
        let db = TestDb::new().await;
        let schema = SchemaName::new(name).expect("valid");
        let before = readiness(&db, &schema).await;
        assert_eq!(before.installed_version, None);
        assert_eq!(
            before.missing_migrations,
            vec![
                id(1, "cohort_tables"),
                id(2, "cohort_entity_fence"),
                id(3, "cohort_row_handlers"),
                id(4, "cohort_evidence_chain"),
                id(5, "cohort_entity_registry"),
                id(6, "cohort_erasure_subject"),
                id(7, "cohort_leases"),
                id(8, "cohort_matters"),
                id(9, "cohort_subject_access"),
                id(10, "cohort_disposition"),
                id(11, "cohort_archive"),
                id(12, "cohort_events")
            ]
        );

        migrator(&schema).run(db.pool()).await.expect("migrate");
        assert_ready(&readiness(&db, &schema).await);

        // Idempotent: a second run applies nothing and fails nothing.
        migrator(&schema)
            .run(db.pool())
            .await
            .expect("migrate again");
        assert_ready(&readiness(&db, &schema).await);
        let applied: Vec<i64> =
            sqlx::query_scalar("SELECT version FROM _cohort_migrations ORDER BY version")
                .fetch_all(db.pool())
                .await
                .expect("history");
        assert_eq!(
            applied,
            vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12],
            "schema {name:?}"
        );
    }
}

// contract: D2
#[tokio::test]
async fn migration_files_written_for_sqlx_are_what_sqlx_reads() {
    let db = TestDb::new().await;
    let schema = SchemaName::new("retention").expect("valid");
    let dir = std::env::temp_dir().join(format!("cohort-sqlx-files-{}", Uuid::new_v4().simple()));
    let written = write_migration_files(&dir, &schema, Layout::Sqlx).expect("write files");
    assert_eq!(written.len(), 15);

    let mut from_files = Migrator::new(dir.as_path())
        .await
        .expect("sqlx reads the files");
    // The files hold exactly the in-code text: same checksums, so a host can
    // switch between the two.
    let in_code = sqlx_migrations(&schema);
    let files: Vec<(i64, MigrationType, Vec<u8>)> = from_files
        .iter()
        .map(|m| (m.version, m.migration_type, m.checksum.to_vec()))
        .collect();
    let code: Vec<(i64, MigrationType, Vec<u8>)> = in_code
        .iter()
        .map(|m| (m.version, m.migration_type, m.checksum.to_vec()))
        .collect();
    assert_eq!(files, code);

    from_files.dangerous_set_table_name("_cohort_migrations");
    from_files.run(db.pool()).await.expect("migrate from files");
    assert_ready(&readiness(&db, &schema).await);
    from_files
        .run(db.pool())
        .await
        .expect("migrate from files again");
    assert_ready(&readiness(&db, &schema).await);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Rows in every one of Cohort's tables, written with plain SQL.
async fn insert_ledger_and_holds(db: &TestDb, s: &str, entity: Uuid) {
    db.exec(&format!(
        r#"
        INSERT INTO {s}.sweep_run VALUES
            ('00000000-0000-0000-0000-00000000000a', 'Sweep', 'Manual', false,
             '00000000-0000-0000-0000-000000000000', '2026-01-01T00:00:00Z', 'Succeeded',
             '2026-01-01T00:00:00Z', '2026-01-01T00:01:00Z', NULL);
        INSERT INTO {s}.sweep_run_entity_summary (run_id, retained_entity_id, entity_type, category,
            tenant_id, strategy, status, affected_count, held_count, skipped_count, null_anchor_count,
            applied_period, cutoff, rule_source, rule_reason, error, updated_at) VALUES
            ('00000000-0000-0000-0000-00000000000a', '{entity}', 'Note', 'notes',
             '00000000-0000-0000-0000-000000000000', 'Purge', 'Succeeded', 3, 1, 0, 0,
             'P30D', '2025-12-01T00:00:00Z', 'rules', 'policy', NULL, '2026-01-01T00:01:00Z');
        INSERT INTO {s}.sweep_run_row_detail (run_id, retained_entity_id, entity_type, record_id,
            tenant_id, action, captured_payload, created_at) VALUES
            ('00000000-0000-0000-0000-00000000000a', '{entity}', 'Note', '42',
             '00000000-0000-0000-0000-000000000000', 'Purge', '{{"body": "x"}}', '2026-01-01T00:00:30Z');
        INSERT INTO {s}.sweep_row_handler_status (detail_id, run_id, retained_entity_id, record_id,
            tenant_id, handler_id, priority, state, attempts, claim_token, claim_expires_at,
            not_before, after_sweep_settled, last_error, created_at, updated_at)
            SELECT detail_id, run_id, retained_entity_id, record_id, tenant_id, 'audit', 0,
                   'Pending', 0, NULL, NULL, created_at, true, NULL, created_at, created_at
            FROM {s}.sweep_run_row_detail;
        INSERT INTO {s}.retention_holds VALUES
            ('00000000-0000-0000-0000-0000000000b1', '{entity}', '7', NULL, 'litigation',
             '2026-01-01T00:00:00Z', NULL, NULL);
        "#
    ))
    .await;
}

/// The columns migration 4 (the evidence chain) adds: upgrades fill them
/// (they seal the rows already there), so "the data survived" compares the
/// rest. Migration 6's `subject_hmac` (and 7's lease, 9's `replay_of`) is
/// NULL on every run written before it.
const EVIDENCE_COLUMNS: &str = "{chain_seq,chain_prev,chain_hash,chain_payload,chain_summaries,chain_summaries_head,\
     chain_details,chain_details_head,legal_minimum_count,removal_seq,removal_prev,removal_hash,chain_bridges,\
     subject_hmac,owner_token,lease_expires_at,replay_of}";

/// The five tables of migration 1, which hold the data upgrades must keep
/// (the registry of migration 5 starts empty).
const DATA_TABLES: [&str; 5] = [
    "sweep_run",
    "sweep_run_entity_summary",
    "sweep_run_row_detail",
    "sweep_row_handler_status",
    "retention_holds",
];

/// Every row of Cohort's tables in `s`, as text, in a stable order.
async fn contents(db: &TestDb, s: &str) -> Vec<String> {
    let mut rows = Vec::new();
    for table in DATA_TABLES {
        let table_rows: Vec<String> = sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT (to_jsonb(t) - '{EVIDENCE_COLUMNS}'::text[])::text FROM {s}.{table} t ORDER BY 1"
        )))
        .fetch_all(db.pool())
        .await
        .expect("rows");
        assert!(!table_rows.is_empty(), "{table} has rows");
        rows.extend(table_rows.into_iter().map(|r| format!("{table}: {r}")));
    }
    rows
}

// contract: D3
#[tokio::test]
async fn upgrading_from_version_1_keeps_the_data_and_ends_ready() {
    let db = TestDb::new().await;
    let schema = SchemaName::new("retention").expect("valid");
    migrator(&schema)
        .run_to(1, db.pool())
        .await
        .expect("migrate to 1");

    let at_1 = readiness(&db, &schema).await;
    assert_eq!(at_1.installed_version, Some(1));
    assert_eq!(at_1.required_version, 12);
    let missing = vec![
        id(2, "cohort_entity_fence"),
        id(3, "cohort_row_handlers"),
        id(4, "cohort_evidence_chain"),
        id(5, "cohort_entity_registry"),
        id(6, "cohort_erasure_subject"),
        id(7, "cohort_leases"),
        id(8, "cohort_matters"),
        id(9, "cohort_subject_access"),
        id(10, "cohort_disposition"),
        id(11, "cohort_archive"),
        id(12, "cohort_events"),
    ];
    assert_eq!(at_1.missing_migrations, missing);
    // The missing migrations are the one problem: what they add is not listed again.
    assert_eq!(
        at_1.problems,
        vec![ReadinessProblem::MissingMigrations {
            installed: Some(1),
            required: 12,
            missing,
        }],
        "{at_1}"
    );
    assert!(
        at_1.to_string().contains(
            "Cohort's schema is at version 1, this library needs 12: apply migration(s) \
             2 (cohort_entity_fence), 3 (cohort_row_handlers), 4 (cohort_evidence_chain), \
             5 (cohort_entity_registry), 6 (cohort_erasure_subject), 7 (cohort_leases), \
             8 (cohort_matters), 9 (cohort_subject_access), \
             10 (cohort_disposition), 11 (cohort_archive), 12 (cohort_events)"
        ),
        "{at_1}"
    );
    assert!(matches!(
        at_1.into_result(),
        Err(cohort::Error::SchemaNotReady(_))
    ));

    let entity = Uuid::new_v4();
    insert_ledger_and_holds(&db, "retention", entity).await;
    let before = contents(&db, "retention").await;

    migrator(&schema).run(db.pool()).await.expect("upgrade");
    assert_ready(&readiness(&db, &schema).await);
    assert_eq!(
        contents(&db, "retention").await,
        before,
        "the data survived"
    );

    // The holds written before the upgrade are still usable through plain SQL,
    // now under the trigger, once a handle has registered their type (here
    // by hand, as `CohortBuilder::build` records it).
    register_bigint_entity(&db, "retention", entity).await;
    db.exec(&format!(
        "UPDATE retention.retention_holds SET removed_at = '2026-02-01T00:00:00Z' \
         WHERE retained_entity_id = '{entity}'"
    ))
    .await;
}

/// The pre-versioning `ddl()` of Cohort, verbatim: databases in the field
/// have exactly these tables, with no version marker.
const LEGACY_DDL: &str = r#"CREATE SCHEMA IF NOT EXISTS {s};

CREATE TABLE {s}."sweep_run" (
    "run_id"       uuid        NOT NULL,
    "run_kind"     text        NOT NULL,
    "trigger"      text        NOT NULL,
    "dry_run"      boolean     NOT NULL,
    "tenant_id"    uuid        NOT NULL,
    "logical_now"  timestamptz NOT NULL,
    "status"       text        NOT NULL,
    "started_at"   timestamptz NOT NULL,
    "settled_at"   timestamptz NULL,
    "error"        text        NULL,
    CONSTRAINT "sweep_run_pkey" PRIMARY KEY ("run_id"),
    CONSTRAINT "sweep_run_kind_check" CHECK ("run_kind" IN ('Sweep', 'Erasure')),
    CONSTRAINT "sweep_run_trigger_check" CHECK ("trigger" IN ('Scheduled', 'Manual')),
    CONSTRAINT "sweep_run_status_check"
        CHECK ("status" IN ('Started', 'Succeeded', 'PartiallyFailed', 'Failed', 'Cancelled')),
    CONSTRAINT "sweep_run_settled_check" CHECK (("status" = 'Started') = ("settled_at" IS NULL))
);
CREATE INDEX "sweep_run_status_started_idx" ON {s}."sweep_run" ("status", "started_at");

CREATE TABLE {s}."sweep_run_entity_summary" (
    "summary_id"          bigint      GENERATED ALWAYS AS IDENTITY,
    "run_id"              uuid        NOT NULL,
    "retained_entity_id"  uuid        NOT NULL,
    "entity_type"         text        NOT NULL,
    "category"            text        NOT NULL,
    "tenant_id"           uuid        NOT NULL,
    "strategy"            text        NOT NULL,
    "status"              text        NOT NULL,
    "affected_count"      bigint      NOT NULL,
    "held_count"          bigint      NOT NULL,
    "skipped_count"       bigint      NOT NULL,
    "null_anchor_count"   bigint      NOT NULL,
    "applied_period"      text        NULL,
    "cutoff"              timestamptz NULL,
    "rule_source"         text        NULL,
    "rule_reason"         text        NULL,
    "error"               text        NULL,
    "updated_at"          timestamptz NOT NULL,
    CONSTRAINT "sweep_run_entity_summary_pkey" PRIMARY KEY ("summary_id"),
    CONSTRAINT "sweep_run_entity_summary_run_fkey"
        FOREIGN KEY ("run_id") REFERENCES {s}."sweep_run" ("run_id"),
    CONSTRAINT "sweep_run_entity_summary_key"
        UNIQUE ("run_id", "retained_entity_id", "category", "tenant_id", "strategy"),
    CONSTRAINT "sweep_run_entity_summary_strategy_check"
        CHECK ("strategy" IN ('Purge', 'SoftDelete', 'Anonymise', 'Exempt', 'Unresolved')),
    CONSTRAINT "sweep_run_entity_summary_status_check"
        CHECK ("status" IN ('Running', 'Succeeded', 'Failed', 'Cancelled')),
    CONSTRAINT "sweep_run_entity_summary_counts_check"
        CHECK ("affected_count" >= 0 AND "held_count" >= 0 AND "skipped_count" >= 0
               AND "null_anchor_count" >= 0)
);

CREATE TABLE {s}."sweep_run_row_detail" (
    "detail_id"           bigint      GENERATED ALWAYS AS IDENTITY,
    "run_id"              uuid        NOT NULL,
    "retained_entity_id"  uuid        NOT NULL,
    "entity_type"         text        NOT NULL,
    "record_id"           text        NOT NULL,
    "tenant_id"           uuid        NOT NULL,
    "action"              text        NOT NULL,
    "captured_payload"    jsonb       NULL,
    "created_at"          timestamptz NOT NULL,
    CONSTRAINT "sweep_run_row_detail_pkey" PRIMARY KEY ("detail_id"),
    CONSTRAINT "sweep_run_row_detail_run_fkey"
        FOREIGN KEY ("run_id") REFERENCES {s}."sweep_run" ("run_id"),
    CONSTRAINT "sweep_run_row_detail_key" UNIQUE ("run_id", "retained_entity_id", "record_id"),
    CONSTRAINT "sweep_run_row_detail_action_check"
        CHECK ("action" IN ('Purge', 'SoftDelete', 'Anonymise'))
);
CREATE INDEX "sweep_run_row_detail_created_idx" ON {s}."sweep_run_row_detail" ("created_at");

CREATE TABLE {s}."sweep_row_handler_status" (
    "work_id"              bigint      GENERATED ALWAYS AS IDENTITY,
    "detail_id"            bigint      NOT NULL,
    "run_id"               uuid        NOT NULL,
    "retained_entity_id"   uuid        NOT NULL,
    "record_id"            text        NOT NULL,
    "tenant_id"            uuid        NOT NULL,
    "handler_id"           text        NOT NULL,
    "priority"             integer     NOT NULL,
    "state"                text        NOT NULL,
    "attempts"             integer     NOT NULL,
    "claim_token"          uuid        NULL,
    "claim_expires_at"     timestamptz NULL,
    "not_before"           timestamptz NOT NULL,
    "after_sweep_settled"  boolean     NOT NULL,
    "last_error"           text        NULL,
    "created_at"           timestamptz NOT NULL,
    "updated_at"           timestamptz NOT NULL,
    CONSTRAINT "sweep_row_handler_status_pkey" PRIMARY KEY ("work_id"),
    CONSTRAINT "sweep_row_handler_status_detail_fkey"
        FOREIGN KEY ("detail_id") REFERENCES {s}."sweep_run_row_detail" ("detail_id"),
    CONSTRAINT "sweep_row_handler_status_key" UNIQUE ("detail_id", "handler_id"),
    CONSTRAINT "sweep_row_handler_status_state_check"
        CHECK ("state" IN ('Pending', 'InFlight', 'Succeeded', 'DeadLettered')),
    CONSTRAINT "sweep_row_handler_status_attempts_check" CHECK ("attempts" >= 0),
    CONSTRAINT "sweep_row_handler_status_claim_check"
        CHECK (("state" = 'InFlight') = ("claim_token" IS NOT NULL))
);
CREATE INDEX "sweep_row_handler_status_due_idx"
    ON {s}."sweep_row_handler_status" ("state", "not_before");

CREATE TABLE {s}."retention_holds" (
    "hold_id"             uuid        NOT NULL,
    "retained_entity_id"  uuid        NOT NULL,
    "record_id"           text        NOT NULL,
    "tenant_id"           uuid        NULL,
    "reason"              text        NOT NULL,
    "created_at"          timestamptz NOT NULL,
    "expires_at"          timestamptz NULL,
    "removed_at"          timestamptz NULL,
    CONSTRAINT "retention_holds_pkey" PRIMARY KEY ("hold_id"),
    CONSTRAINT "retention_holds_record_id_check" CHECK ("record_id" <> ''),
    CONSTRAINT "retention_holds_expiry_check"
        CHECK ("expires_at" IS NULL OR "expires_at" > "created_at")
);
CREATE INDEX "retention_holds_record_idx"
    ON {s}."retention_holds" ("retained_entity_id", "record_id");
"#;

/// The shape of Cohort's tables in `s`, with the schema name taken out:
/// columns, constraints with their definitions, indexes with theirs,
/// sequences.
async fn shape(db: &TestDb, s: &str) -> Vec<String> {
    let rows: Vec<String> = sqlx::query_scalar(
        r#"
        SELECT 'column ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
               || ' notnull=' || a.attnotnull || ' identity=' || a.attidentity::text || ' default='
               || coalesce(pg_get_expr(d.adbin, d.adrelid), '-')
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
        LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
        WHERE n.nspname = $1 AND c.relkind = 'r'
        UNION ALL
        SELECT 'constraint ' || c.relname || '.' || con.conname || ' ' || pg_get_constraintdef(con.oid)
               || ' deferrable=' || con.condeferrable
        FROM pg_constraint con JOIN pg_class c ON c.oid = con.conrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1
        UNION ALL
        SELECT 'index ' || pg_get_indexdef(i.indexrelid)
        FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1
        UNION ALL
        SELECT 'relation ' || c.relkind::text || ' ' || c.relname
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1
        ORDER BY 1
        "#,
    )
    .bind(s)
    .fetch_all(db.pool())
    .await
    .expect("shape");
    rows.into_iter()
        .map(|r| r.replace(&format!("{s}."), "<schema>."))
        .collect()
}

// contract: D1, D3
#[tokio::test]
async fn migration_1_makes_exactly_the_pre_versioning_tables_and_adopts_them() {
    let db = TestDb::new().await;
    let legacy = SchemaName::new("legacy").expect("valid");
    let fresh = SchemaName::new("fresh").expect("valid");
    db.exec(&LEGACY_DDL.replace("{s}", r#""legacy""#)).await;
    db.exec(&migrations(&fresh)[0].up).await;
    let legacy_shape = shape(&db, "legacy").await;
    assert!(legacy_shape.len() > 60, "{legacy_shape:#?}");
    assert_eq!(legacy_shape, shape(&db, "fresh").await);

    // Tables made by the old ddl() carry no version: not ready, every
    // migration missing, and the trigger reported too (nothing says which
    // elements are there).
    let report = readiness(&db, &legacy).await;
    assert_eq!(report.installed_version, None);
    // What migration 4 (the evidence chain) adds is judged and reported too;
    // evidence::chain checks those problems.
    let evidence = |p: &ReadinessProblem| match p {
        ReadinessProblem::MissingColumn { column, .. } => {
            column.starts_with("chain_")
                || column.starts_with("removal_")
                || *column == "legal_minimum_count"
        }
        ReadinessProblem::MissingUniqueIndex { columns, .. } => {
            columns.iter().any(|c| c.ends_with("_seq"))
        }
        ReadinessProblem::MissingFunction { function } => function.contains("evidence"),
        ReadinessProblem::MissingTrigger { trigger, .. } => trigger.contains("evidence"),
        _ => false,
    };
    let mut problems = report.problems.clone();
    problems.retain(|p| !evidence(p));
    assert_eq!(
        problems,
        vec![
            ReadinessProblem::MissingMigrations {
                installed: None,
                required: 12,
                missing: vec![
                    id(1, "cohort_tables"),
                    id(2, "cohort_entity_fence"),
                    id(3, "cohort_row_handlers"),
                    id(4, "cohort_evidence_chain"),
                    id(5, "cohort_entity_registry"),
                    id(6, "cohort_erasure_subject"),
                    id(7, "cohort_leases"),
                    id(8, "cohort_matters"),
                    id(9, "cohort_subject_access"),
                    id(10, "cohort_disposition"),
                    id(11, "cohort_archive"),
                    id(12, "cohort_events")
                ],
            },
            ReadinessProblem::MissingColumn {
                table: "sweep_run",
                column: "subject_hmac",
            },
            ReadinessProblem::MissingColumn {
                table: "sweep_run",
                column: "owner_token",
            },
            ReadinessProblem::MissingColumn {
                table: "sweep_run",
                column: "lease_expires_at",
            },
            ReadinessProblem::MissingColumn {
                table: "sweep_run",
                column: "replay_of",
            },
            ReadinessProblem::WrongNullability {
                table: "sweep_row_handler_status",
                column: "detail_id",
                expected_not_null: false,
            },
            ReadinessProblem::MissingFunction {
                function: "retention_holds_entity_fence"
            },
            ReadinessProblem::MissingTrigger {
                table: "retention_holds",
                trigger: "retention_holds_entity_fence"
            },
            ReadinessProblem::MissingTable {
                table: "retention_entities"
            },
            ReadinessProblem::MissingTable {
                table: "sweep_worker_lease"
            },
            ReadinessProblem::MissingTable {
                table: "retention_matters"
            },
            ReadinessProblem::MissingTable {
                table: "retention_matter_events"
            },
            ReadinessProblem::MissingTable {
                table: "retention_subject_access"
            },
            ReadinessProblem::MissingTable {
                table: "retention_disposition_batches"
            },
            ReadinessProblem::MissingTable {
                table: "retention_disposition_records"
            },
            ReadinessProblem::MissingTable {
                table: "retention_disposition_decisions"
            },
            ReadinessProblem::MissingTable {
                table: "retention_archive_batches"
            },
            ReadinessProblem::MissingTable {
                table: "retention_events"
            },
            ReadinessProblem::MissingTable {
                table: "retention_event_log"
            },
        ],
        "{report}"
    );
    assert!(
        report.to_string().contains(
            "no Cohort schema version is recorded on sweep_run (this library needs 12): \
                 apply migration(s) 1 (cohort_tables), 2 (cohort_entity_fence), 3 (cohort_row_handlers), \
                 4 (cohort_evidence_chain), 5 (cohort_entity_registry), 6 (cohort_erasure_subject), \
                 7 (cohort_leases), 8 (cohort_matters), 9 (cohort_subject_access), \
             10 (cohort_disposition), 11 (cohort_archive), 12 (cohort_events)"
        ),
        "{report}"
    );

    // Migration 1 adopts them (it creates only what is missing), data and all.
    insert_ledger_and_holds(&db, "legacy", Uuid::new_v4()).await;
    let before = contents(&db, "legacy").await;
    migrator(&legacy).run_to(1, db.pool()).await.expect("adopt");
    assert_eq!(contents(&db, "legacy").await, before);
    let mut after = shape(&db, "legacy").await;
    after.retain(|r| !legacy_shape.contains(r));
    assert!(
        after.is_empty(),
        "migration 1 changed the legacy tables: {after:#?}"
    );
    // The later migrations then apply as on any database at version 1.
    migrator(&legacy).run(db.pool()).await.expect("upgrade");
    assert_ready(&readiness(&db, &legacy).await);
    assert_eq!(contents(&db, "legacy").await, before);
}

// contract: D2
#[tokio::test]
async fn migration_2_reverts_to_version_1_and_reapplies() {
    let db = TestDb::new().await;
    let schema = SchemaName::new("retention").expect("valid");
    // Migration 3 has no down (it lets a column hold NULL): revert 2 before it.
    migrator(&schema)
        .run_to(2, db.pool())
        .await
        .expect("migrate to 2");
    migrator(&schema)
        .undo(db.pool(), 1)
        .await
        .expect("revert 2");
    let report = readiness(&db, &schema).await;
    assert_eq!(report.installed_version, Some(1), "{report}");
    assert_eq!(
        report.missing_migrations,
        vec![
            id(2, "cohort_entity_fence"),
            id(3, "cohort_row_handlers"),
            id(4, "cohort_evidence_chain"),
            id(5, "cohort_entity_registry"),
            id(6, "cohort_erasure_subject"),
            id(7, "cohort_leases"),
            id(8, "cohort_matters"),
            id(9, "cohort_subject_access"),
            id(10, "cohort_disposition"),
            id(11, "cohort_archive"),
            id(12, "cohort_events")
        ]
    );
    let triggers: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid \
         WHERE c.relname = 'retention_holds' AND NOT t.tgisinternal",
    )
    .fetch_one(db.pool())
    .await
    .expect("count");
    assert_eq!(triggers, 0);
    migrator(&schema)
        .run(db.pool())
        .await
        .expect("migrate again");
    assert_ready(&readiness(&db, &schema).await);
}

// contract: D2
#[tokio::test]
async fn ddl_is_every_migration_and_harmless_to_apply_twice() {
    let (db, schema) = db_with_cohort("retention").await;
    assert_ready(&readiness(&db, &schema).await);
    db.exec(&ddl(&schema)).await;
    assert_ready(&readiness(&db, &schema).await);
    let joined: Vec<String> = migrations(&schema).into_iter().map(|m| m.up).collect();
    assert_eq!(ddl(&schema), joined.join("\n"));
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Hosts' migration tools checksum what they applied: a published
/// migration's text must never change. Add a migration instead.
#[test]
fn published_migrations_never_change() {
    let expected: [(i64, MigrationType, &str); 15] = [
        (
            1,
            MigrationType::Simple,
            "99bda84795c228b1a191fa367b654db7203d4213039b04524d72e620d9265451ec51bd6df9b3a0c9d9cef417c62ecc44",
        ),
        (
            2,
            MigrationType::ReversibleUp,
            "42635475c78897f3ddea97b8c57d67fedac45eb323496153dc474a68fdf0de8e1f9e91b15147d2bd36aaeb2d7029666d",
        ),
        (
            2,
            MigrationType::ReversibleDown,
            "7afc96ab39756875e933f1258ae1b591e73ffe8296b3228fa415dde5b7791f05343a6a31018f1e0ba437712bdc4eb233",
        ),
        (
            3,
            MigrationType::Simple,
            "6f63eb781de7ee863ec2d4014e85c8f24f65c306b7cc9a784f100e9e6a032915a0533068c3f2e1e647c387d5952ef691",
        ),
        (
            4,
            MigrationType::ReversibleUp,
            "40330349616558bd25e7d1882dbb8e2f0243865907a5b0d9f9873c15000ea5ef09033ba5082380f5209e25994e38c485",
        ),
        (
            4,
            MigrationType::ReversibleDown,
            "35f11accf0532f393aae997965cc3ef8bd07a6f87b6e7a7eb9d60f9a4064c617cfdc8a0abaab963a3ba1bfbfa89ee0a1",
        ),
        (
            5,
            MigrationType::Simple,
            "ee0c9283cbdc75e8ac9ca9fa4424d09645b69baca030b3158e6c495ef35182cfd06ac5eeab2f0ed486829db5680ba429",
        ),
        (
            6,
            MigrationType::ReversibleUp,
            "02262c032fb711f619cdbf5467ac83b10e9723e541672d8a15ca9849ddce5d959962ca43acbe29e04064d014c72881bc",
        ),
        (
            6,
            MigrationType::ReversibleDown,
            "31e85ccf7ebe1b3ce21efe575b7cf587f8a7701ca32a8113dd08ac532512d789161b732fd8eb051191dcbe2a559bf9dd",
        ),
        (
            7,
            MigrationType::Simple,
            "3cc8ec94c99c067e1337f4616389ae628bc8b0b5034b930231d2a790461f2f814a22006f6689ecc590505b45883ccf8e",
        ),
        (
            8,
            MigrationType::Simple,
            "955c2494a9fa1de1a48f2a79dc332b480aa197616b47028c5c31442121487bd21575fa58da06d4a6c0bbd03f65b52fd3",
        ),
        (
            9,
            MigrationType::Simple,
            "a358b9744e7271e1d87253ea44790ae29543c83a49318f4895f8dffe6830dae7d5ebb207ef6de79053ba6eed16253aa5",
        ),
        (
            10,
            MigrationType::Simple,
            "9e39a99495fd48e111e3a1415aa5c7eb07c249e1a5293bd317349f87533890a2d0f39eb8a122702d58ee557755f01994",
        ),
        (
            11,
            MigrationType::Simple,
            "9c32cadd8772c7105a294578aaaf45b8b83762355ac5533f44f1f380631c8aa52ee2a4e6ce3e3134fce8bc2b1173a0af",
        ),
        (
            12,
            MigrationType::Simple,
            "64f016e1edd7b382ec84f9d1368c1162eacc052281d15f9488db8092be276d896bd6cb993cba92c45a705406c510ff75",
        ),
    ];
    let actual: Vec<(i64, MigrationType, String)> = sqlx_migrations(&SchemaName::public())
        .iter()
        .map(|m| (m.version, m.migration_type, hex(&m.checksum)))
        .collect();
    let expected: Vec<(i64, MigrationType, String)> = expected
        .iter()
        .map(|(v, t, h)| (*v, *t, (*h).to_owned()))
        .collect();
    assert_eq!(
        actual, expected,
        "a published migration's SQL changed: hosts that applied it would see a checksum mismatch"
    );
}

// contract: D3
#[tokio::test]
async fn a_newer_schema_version_is_ready_with_a_warning_and_a_foreign_comment_is_no_version() {
    let (db, schema) = db_with_cohort("public").await;
    let newer = SCHEMA_VERSION + 1;
    db.exec(&format!(
        "COMMENT ON TABLE public.sweep_run IS 'cohort schema version {newer}'"
    ))
    .await;
    let report = readiness(&db, &schema).await;
    assert!(report.is_ready(), "{report}");
    assert_eq!(report.installed_version, Some(newer));
    assert!(report.missing_migrations.is_empty());
    assert_eq!(
        report.warnings,
        vec![ReadinessWarning::NewerSchemaVersion {
            installed: newer,
            supported: SCHEMA_VERSION
        }]
    );

    db.exec("COMMENT ON TABLE public.sweep_run IS 'Audit runs (owned by Cohort)'")
        .await;
    let report = readiness(&db, &schema).await;
    assert!(!report.is_ready());
    assert_eq!(report.installed_version, None);
    assert_eq!(report.missing_migrations.len(), SCHEMA_VERSION as usize);
    // Re-applying the latest migration puts the marker back.
    let all = migrations(&schema);
    db.exec(&all[all.len() - 1].up).await;
    assert_ready(&readiness(&db, &schema).await);
}

// The entity fence trigger (migration 2).

const FENCE_CLASS: i64 = 1_131_376_754;

/// The fence key of (schema, entity) as PostgreSQL computes it, written out
/// here independently of Cohort's code.
async fn fence_key(conn: &mut PgConnection, schema: &str, entity: Uuid) -> i32 {
    sqlx::query_scalar("SELECT hashtext($1 || ':' || $2)")
        .bind(schema)
        .bind(entity.to_string())
        .fetch_one(conn)
        .await
        .expect("key")
}

async fn fence_is_free(conn: &mut PgConnection, key: i32) -> bool {
    // Autocommit: a granted shared lock is released at the statement's end.
    sqlx::query_scalar("SELECT pg_try_advisory_xact_lock_shared($1::int4, $2)")
        .bind(FENCE_CLASS as i32)
        .bind(key)
        .fetch_one(conn)
        .await
        .expect("try lock")
}

/// Waits until backend `pid` waits for the fence `key` of this database.
async fn wait_until_fence_wait(observer: &mut PgConnection, pid: i32, key: i32) {
    for _ in 0..3000 {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted \
             AND pid = $1 AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
             AND classid = $2::int8::oid AND objid = $3::int8::oid AND objsubid = 2",
        )
        .bind(pid)
        .bind(FENCE_CLASS)
        .bind(i64::from(key as u32))
        .fetch_one(&mut *observer)
        .await
        .expect("pg_locks");
        if waiting > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("backend {pid} never waited for the fence");
}

/// Registers `entity` in the install in `schema` (quoted SQL) as a retained
/// type keyed by the `bigint` column of a table of its own, as
/// `CohortBuilder::build` records a type: plain-SQL holds of it then pass
/// the fence trigger's canonicalisation (contract H16).
async fn register_bigint_entity(db: &TestDb, schema: &str, entity: Uuid) {
    let table = format!("items_{}", entity.simple());
    db.exec(&format!(
        "CREATE TABLE public.{table} (id bigint PRIMARY KEY); \
         INSERT INTO {schema}.retention_entities VALUES \
           ('{entity}', 'Item', 'public', '{table}', 'id', 'bigint', NULL, '=', NULL, now(), 0)"
    ))
    .await;
}

// contract: H11
#[tokio::test]
async fn a_plain_sql_hold_insert_holds_the_entity_fence_until_commit() {
    // A name that needs quoting: the key uses the raw name.
    let raw = "Retention Data";
    let (db, _) = db_with_cohort(raw).await;
    let entity = Uuid::new_v4();
    let other = Uuid::new_v4();
    let mut observer = db.connect().await;
    let key = fence_key(&mut observer, raw, entity).await;
    let other_key = fence_key(&mut observer, raw, other).await;
    assert!(fence_is_free(&mut observer, key).await);
    register_bigint_entity(&db, r#""Retention Data""#, entity).await;

    // A host inserts a hold with plain SQL and does not commit yet.
    let mut host = db.connect().await;
    let mut host_tx = host.begin().await.expect("begin");
    sqlx::query(
        r#"INSERT INTO "Retention Data".retention_holds
           (hold_id, retained_entity_id, record_id, tenant_id, reason, created_at)
           VALUES ($1, $2, '7', NULL, 'litigation', now())"#,
    )
    .bind(Uuid::new_v4())
    .bind(entity)
    .execute(&mut *host_tx)
    .await
    .expect("insert hold");

    // A mutation's shared fence on that entity waits for the hold's commit.
    let mut batch = db.connect().await;
    let batch_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut batch)
        .await
        .expect("pid");
    let waiter = tokio::spawn(async move {
        let mut tx = batch.begin().await.expect("begin");
        sqlx::query("SELECT pg_advisory_xact_lock_shared($1::int4, hashtext($2 || ':' || $3))")
            .bind(FENCE_CLASS as i32)
            .bind("Retention Data")
            .bind(entity.to_string())
            .execute(&mut *tx)
            .await
            .expect("fence");
        // Granted after the hold committed: this snapshot sees it.
        let holds: i64 = sqlx::query_scalar(
            r#"SELECT count(*) FROM "Retention Data".retention_holds WHERE retained_entity_id = $1"#,
        )
        .bind(entity)
        .fetch_one(&mut *tx)
        .await
        .expect("holds");
        tx.commit().await.expect("commit");
        holds
    });
    wait_until_fence_wait(&mut observer, batch_pid, key).await;
    assert!(
        !waiter.is_finished(),
        "the batch waits for the hold's transaction"
    );
    // Another entity's fence is not held.
    assert!(fence_is_free(&mut observer, other_key).await);
    assert!(!fence_is_free(&mut observer, key).await);

    host_tx.commit().await.expect("commit hold");
    let seen = tokio::time::timeout(Duration::from_secs(60), waiter)
        .await
        .expect("the batch got the fence after the commit")
        .expect("task");
    assert_eq!(seen, 1);
    assert!(fence_is_free(&mut observer, key).await);
}

// contract: H11
#[tokio::test]
async fn updating_a_hold_takes_the_fence_of_its_entity_and_of_the_one_it_leaves() {
    let (db, _) = db_with_cohort("retention").await;
    let (from, to, bystander) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let hold = Uuid::new_v4();
    register_bigint_entity(&db, "retention", from).await;
    register_bigint_entity(&db, "retention", to).await;
    sqlx::query(
        "INSERT INTO retention.retention_holds (hold_id, retained_entity_id, record_id, reason, created_at) \
         VALUES ($1, $2, '7', 'litigation', now())",
    )
    .bind(hold)
    .bind(from)
    .execute(db.pool())
    .await
    .expect("insert");
    let mut observer = db.connect().await;
    let from_key = fence_key(&mut observer, "retention", from).await;
    let to_key = fence_key(&mut observer, "retention", to).await;
    let bystander_key = fence_key(&mut observer, "retention", bystander).await;

    // An update that keeps the entity takes its fence.
    let mut host = db.connect().await;
    let mut tx = host.begin().await.expect("begin");
    sqlx::query("UPDATE retention.retention_holds SET removed_at = now() WHERE hold_id = $1")
        .bind(hold)
        .execute(&mut *tx)
        .await
        .expect("update");
    assert!(!fence_is_free(&mut observer, from_key).await);
    assert!(fence_is_free(&mut observer, to_key).await);
    tx.rollback().await.expect("rollback");

    // An update that moves the hold takes both.
    let mut tx = host.begin().await.expect("begin");
    sqlx::query("UPDATE retention.retention_holds SET retained_entity_id = $2 WHERE hold_id = $1")
        .bind(hold)
        .bind(to)
        .execute(&mut *tx)
        .await
        .expect("update");
    assert!(!fence_is_free(&mut observer, from_key).await);
    assert!(!fence_is_free(&mut observer, to_key).await);
    assert!(fence_is_free(&mut observer, bystander_key).await);
    tx.commit().await.expect("commit");
    assert!(fence_is_free(&mut observer, from_key).await);
    assert!(fence_is_free(&mut observer, to_key).await);
}
