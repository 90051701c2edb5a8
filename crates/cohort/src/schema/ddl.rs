//! The DDL of Cohort's five tables, for the host's migrations.

use super::SchemaName;

/// The tables, with `{s}` standing for the quoted schema name. Constraint and
/// index names are fixed: readiness looks for the CHECK constraints by name.
const TEMPLATE: &str = r#"CREATE SCHEMA IF NOT EXISTS {s};

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

/// The DDL that creates Cohort's five tables (and the schema, if missing) in
/// `schema`, for the host to put in its own migrations.
///
/// The schema name is always written quoted, so names that need quoting
/// (capitals, spaces, quotes) work as given.
///
/// ```
/// let sql = cohort::schema::ddl(&cohort::schema::SchemaName::new("Retention")?);
/// assert!(sql.contains(r#"CREATE TABLE "Retention"."sweep_run""#));
/// # Ok::<(), cohort::Error>(())
/// ```
pub fn ddl(schema: &SchemaName) -> String {
    TEMPLATE.replace("{s}", &schema.ident().to_string())
}
