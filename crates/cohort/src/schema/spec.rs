//! Cohort's tables, written once.
//!
//! Every column (type, nullability), key, CHECK constraint, index and trigger
//! of Cohort's tables is declared here, tagged with the migration that
//! introduced it. The migrations' DDL ([`super::ddl`]) is rendered from this
//! spec, and readiness ([`super::readiness`]) judges the live catalog against
//! it, so the two cannot drift apart.
//!
//! Evolving the shape: never edit an element a published migration created
//! (its DDL text is frozen, see the checksum test in `tests/it/schema/migrations.rs`).
//! Add a migration to [`super::migrations::MIGRATIONS`] and tag the new
//! elements with its version. Tables and triggers carry their version; a
//! table's columns, keys, checks, foreign keys and indexes belong to the
//! table's migration. To add one of those to an existing table later, give
//! it a version of its own and teach [`super::ddl`] to render the
//! `ALTER TABLE`.

use super::evidence;
use super::fence::fence_trigger_body;

/// The type of a column, as written in DDL and as the catalog prints it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ColumnType {
    Uuid,
    Text,
    Timestamptz,
    Bigint,
    Integer,
    Boolean,
    Jsonb,
    /// Hashes of the evidence chain (migration 4).
    Bytea,
    /// The retained types a matter names (migration 8).
    UuidArray,
}

impl ColumnType {
    /// As written in Cohort's DDL.
    pub(super) const fn ddl(self) -> &'static str {
        match self {
            ColumnType::Uuid => "uuid",
            ColumnType::Text => "text",
            ColumnType::Timestamptz => "timestamptz",
            ColumnType::Bigint => "bigint",
            ColumnType::Integer => "integer",
            ColumnType::Boolean => "boolean",
            ColumnType::Jsonb => "jsonb",
            ColumnType::Bytea => "bytea",
            ColumnType::UuidArray => "uuid[]",
        }
    }

    /// As `pg_catalog.format_type` prints it (what readiness compares).
    pub(super) const fn catalog(self) -> &'static str {
        match self {
            ColumnType::Timestamptz => "timestamp with time zone",
            other => other.ddl(),
        }
    }
}

/// One column Cohort reads or writes.
#[derive(Debug)]
pub(super) struct ColumnSpec {
    pub(super) name: &'static str,
    pub(super) ty: ColumnType,
    pub(super) not_null: bool,
    /// `GENERATED ALWAYS AS IDENTITY` (and so NOT NULL).
    pub(super) identity: bool,
    /// The migration that adds the column to an existing table (`ALTER
    /// TABLE ... ADD COLUMN`); 0 for columns created with their table.
    pub(super) since: i64,
    /// The column's DEFAULT expression, for columns added later NOT NULL.
    pub(super) default: Option<&'static str>,
}

/// A primary key or unique constraint: its name and key columns.
#[derive(Debug)]
pub(super) struct KeySpec {
    pub(super) name: &'static str,
    pub(super) columns: &'static [&'static str],
    /// The migration that adds it to an existing table as a unique index
    /// (`CREATE UNIQUE INDEX`); 0 for keys created with their table.
    pub(super) since: i64,
}

/// A named CHECK constraint. Readiness requires it by name.
#[derive(Debug)]
pub(super) struct CheckSpec {
    pub(super) name: &'static str,
    /// The expression, with quoted column names.
    pub(super) expression: &'static str,
}

/// A foreign key to another of Cohort's tables in the same schema.
#[derive(Debug)]
pub(super) struct ForeignKeySpec {
    pub(super) name: &'static str,
    pub(super) columns: &'static [&'static str],
    pub(super) references: &'static str,
    pub(super) referenced_columns: &'static [&'static str],
}

/// An index that only makes Cohort fast: a missing one is a warning, and any
/// valid, non-partial index whose key starts with these columns serves.
#[derive(Debug)]
pub(super) struct IndexSpec {
    pub(super) name: &'static str,
    pub(super) columns: &'static [&'static str],
}

/// A row event a trigger fires on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TriggerEvent {
    Insert,
    Update,
    Delete,
}

impl TriggerEvent {
    pub(super) const fn keyword(self) -> &'static str {
        match self {
            TriggerEvent::Insert => "INSERT",
            TriggerEvent::Update => "UPDATE",
            TriggerEvent::Delete => "DELETE",
        }
    }
}

/// A PL/pgSQL trigger function in Cohort's schema, taking no arguments,
/// running with `search_path = pg_catalog`.
#[derive(Debug)]
pub(super) struct FunctionSpec {
    pub(super) name: &'static str,
    /// The body (what `pg_proc.prosrc` holds) in an install's schema;
    /// readiness compares it exactly.
    pub(super) body: fn(&super::SchemaName) -> String,
    /// `SECURITY DEFINER`: the function runs with its owner's (the
    /// migration role's) rights. The evidence chain's functions write chain
    /// columns that the least-privilege roles may not write themselves
    /// (docs/security.md), so a runner cannot forge a link directly.
    pub(super) definer: bool,
}

/// When a trigger fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TriggerTiming {
    Before,
    After,
}

/// The `search_path` every Cohort function is created with (`SET search_path
/// = pg_catalog`; `pg_proc.proconfig` then holds `search_path=pg_catalog`).
pub(super) const FUNCTION_SEARCH_PATH: &str = "pg_catalog";

/// A `BEFORE` or `AFTER ... FOR EACH ROW` trigger, on every column, without
/// a `WHEN` condition (the only kind Cohort uses).
#[derive(Debug)]
pub(super) struct TriggerSpec {
    pub(super) name: &'static str,
    pub(super) timing: TriggerTiming,
    pub(super) events: &'static [TriggerEvent],
    pub(super) function: &'static FunctionSpec,
    /// The migration that adds it.
    pub(super) since: i64,
}

impl TriggerSpec {
    /// `BEFORE INSERT OR UPDATE`, as DDL writes it and problems describe it.
    pub(super) fn timing_and_events(&self) -> String {
        let events: Vec<&str> = self.events.iter().map(|e| e.keyword()).collect();
        let timing = match self.timing {
            TriggerTiming::Before => "BEFORE",
            TriggerTiming::After => "AFTER",
        };
        format!("{timing} {}", events.join(" OR "))
    }
}

/// One of Cohort's tables.
#[derive(Debug)]
pub(super) struct TableSpec {
    pub(super) name: &'static str,
    /// The migration that creates the table, with every column, key, check,
    /// foreign key and index below.
    pub(super) since: i64,
    pub(super) columns: &'static [ColumnSpec],
    pub(super) primary_key: KeySpec,
    /// Keys Cohort relies on for `ON CONFLICT` and for correctness.
    pub(super) unique: &'static [KeySpec],
    pub(super) foreign_keys: &'static [ForeignKeySpec],
    pub(super) checks: &'static [CheckSpec],
    pub(super) indexes: &'static [IndexSpec],
    pub(super) triggers: &'static [TriggerSpec],
}

const fn col(name: &'static str, ty: ColumnType, not_null: bool) -> ColumnSpec {
    ColumnSpec {
        name,
        ty,
        not_null,
        identity: false,
        since: 0,
        default: None,
    }
}

/// A nullable column added to an existing table by migration `since`.
const fn added(name: &'static str, ty: ColumnType, since: i64) -> ColumnSpec {
    ColumnSpec {
        name,
        ty,
        not_null: false,
        identity: false,
        since,
        default: None,
    }
}

/// A NOT NULL column with a default, added to an existing table by
/// migration `since`.
const fn added_not_null(
    name: &'static str,
    ty: ColumnType,
    since: i64,
    default: &'static str,
) -> ColumnSpec {
    ColumnSpec {
        name,
        ty,
        not_null: true,
        identity: false,
        since,
        default: Some(default),
    }
}

const fn identity(name: &'static str) -> ColumnSpec {
    ColumnSpec {
        name,
        ty: ColumnType::Bigint,
        not_null: true,
        identity: true,
        since: 0,
        default: None,
    }
}

const fn key(name: &'static str, columns: &'static [&'static str]) -> KeySpec {
    KeySpec {
        name,
        columns,
        since: 0,
    }
}

/// A unique index added to an existing table by migration `since`.
const fn unique_since(name: &'static str, columns: &'static [&'static str], since: i64) -> KeySpec {
    KeySpec {
        name,
        columns,
        since,
    }
}

const fn check(name: &'static str, expression: &'static str) -> CheckSpec {
    CheckSpec { name, expression }
}

const fn index(name: &'static str, columns: &'static [&'static str]) -> IndexSpec {
    IndexSpec { name, columns }
}

const fn fk_to_run(name: &'static str) -> ForeignKeySpec {
    ForeignKeySpec {
        name,
        columns: &["run_id"],
        references: "sweep_run",
        referenced_columns: &["run_id"],
    }
}

use ColumnType::{Bigint, Boolean, Bytea, Integer, Jsonb, Text, Timestamptz, Uuid, UuidArray};

/// The entity fence's trigger function (contract H11; see [`super::fence`]).
pub(super) const FENCE_FUNCTION: FunctionSpec = FunctionSpec {
    name: "retention_holds_entity_fence",
    body: |_| fence_trigger_body(),
    definer: false,
};

/// The evidence chain's trigger functions (contract EV1; see [`super::evidence`]).
pub(super) const RUN_CHAIN_FUNCTION: FunctionSpec = FunctionSpec {
    name: "sweep_run_evidence_chain",
    body: evidence::run_trigger_body,
    definer: true,
};
pub(super) const DETAIL_CHAIN_FUNCTION: FunctionSpec = FunctionSpec {
    name: "sweep_run_row_detail_evidence_chain",
    body: evidence::detail_trigger_body,
    definer: true,
};
pub(super) const HOLD_CHAIN_FUNCTION: FunctionSpec = FunctionSpec {
    name: "retention_holds_evidence_chain",
    body: evidence::hold_trigger_body,
    definer: true,
};
pub(super) const HOLD_DELETE_FUNCTION: FunctionSpec = FunctionSpec {
    name: "retention_holds_evidence_delete",
    body: evidence::hold_delete_trigger_body,
    definer: true,
};

/// The migration that adds the evidence chain.
pub(super) const EVIDENCE: i64 = 4;

/// The migration that adds the registry of retained types, and the fence
/// trigger that canonicalises a hold's record id through it (contract H16).
pub(super) const REGISTRY: i64 = 5;

/// The migration that binds an erasure run to its subject (a keyed hash of
/// it, contract EV4) and puts that hash into the run's chain link.
pub(super) const SUBJECT_BINDING: i64 = 6;

/// The migration that gives runs a lease and the worker a lease of its own
/// (contract CO2, CO3): coordination without session state.
pub(super) const LEASES: i64 = 7;

/// The migration that adds matter holds (contract MH1-MH3): the matters
/// table, its fence and its evidence chain of events.
pub(super) const MATTERS: i64 = 8;

/// The migration that adds the record of subject access exports (contract
/// SA1) and marks an erasure that replays another (SA2).
pub(super) const SUBJECT_ACCESS: i64 = 9;

/// The migration that adds disposition review (contracts DR1-DR3): the
/// batches a sweep freezes, their record ids, and the evidence chain of the
/// decisions on them.
pub(super) const DISPOSITION: i64 = 10;

/// The disposition decisions' evidence trigger function (see
/// [`super::disposition`]).
pub(super) const DISPOSITION_CHAIN_FUNCTION: FunctionSpec = FunctionSpec {
    name: "retention_disposition_decisions_chain",
    body: super::disposition::chain_trigger_body,
    definer: true,
};

/// The migration that adds the archive strategy (contract SL2): the
/// ledger's strategy and action checks accept `Archive`, and each archive
/// batch's count and checksum are recorded.
pub(super) const ARCHIVE: i64 = 11;

/// The migration that adds event-based retention (contract SL4): the events
/// and their evidence chain.
pub(super) const EVENTS: i64 = 12;

/// The events' guard trigger function (see [`super::events`]).
pub(super) const EVENT_GUARD_FUNCTION: FunctionSpec = FunctionSpec {
    name: "retention_events_guard",
    body: super::events::guard_trigger_body,
    definer: false,
};

/// The events' evidence trigger function (see [`super::events`]).
pub(super) const EVENT_CHAIN_FUNCTION: FunctionSpec = FunctionSpec {
    name: "retention_events_evidence_chain",
    body: super::events::chain_trigger_body,
    definer: true,
};

/// The matters' fence trigger function (see [`super::matters`]).
pub(super) const MATTER_FENCE_FUNCTION: FunctionSpec = FunctionSpec {
    name: "retention_matters_fence",
    body: super::matters::fence_trigger_body,
    definer: true,
};

/// The matters' evidence trigger function (see [`super::matters`]).
pub(super) const MATTER_CHAIN_FUNCTION: FunctionSpec = FunctionSpec {
    name: "retention_matters_evidence_chain",
    body: super::matters::chain_trigger_body,
    definer: true,
};

/// The fence trigger's function from migration 5 on: it also reads a hold's
/// record id through its retained type's key (see [`super::fence`]).
pub(super) const FENCE_FUNCTION_CANONICAL: FunctionSpec = FunctionSpec {
    name: "retention_holds_entity_fence",
    body: super::fence::canonical_fence_trigger_body,
    definer: false,
};

/// The run chain's function from migration 6 on: the link also covers the
/// erasure's subject hash.
pub(super) const RUN_CHAIN_FUNCTION_SUBJECT: FunctionSpec = FunctionSpec {
    name: "sweep_run_evidence_chain",
    body: evidence::run_trigger_body_with_subject,
    definer: true,
};

/// Cohort's tables, in creation order (foreign keys point backwards).
pub(super) const TABLES: [TableSpec; 16] = [
    TableSpec {
        name: "sweep_run",
        since: 1,
        columns: &[
            col("run_id", Uuid, true),
            col("run_kind", Text, true),
            col("trigger", Text, true),
            col("dry_run", Boolean, true),
            col("tenant_id", Uuid, true),
            col("logical_now", Timestamptz, true),
            col("status", Text, true),
            col("started_at", Timestamptz, true),
            col("settled_at", Timestamptz, false),
            col("error", Text, false),
            added("chain_seq", Bigint, EVIDENCE),
            added("chain_prev", Bytea, EVIDENCE),
            added("chain_hash", Bytea, EVIDENCE),
            added("chain_summaries", Bigint, EVIDENCE),
            added("chain_summaries_head", Bytea, EVIDENCE),
            added("chain_details", Bigint, EVIDENCE),
            added("chain_details_head", Bytea, EVIDENCE),
            added("subject_hmac", Bytea, SUBJECT_BINDING),
            // The run's owner and how long its lease lasts: renewed while
            // the run lives; a run is settled as abandoned only once it
            // expired, and every write of the run checks the token.
            added("owner_token", Uuid, LEASES),
            added("lease_expires_at", Timestamptz, LEASES),
            // An erasure that replays an erasure of the register after a
            // restore names it (contract SA2); not part of the run's link.
            added("replay_of", Uuid, SUBJECT_ACCESS),
        ],
        primary_key: key("sweep_run_pkey", &["run_id"]),
        unique: &[unique_since(
            "sweep_run_chain_key",
            &["chain_seq"],
            EVIDENCE,
        )],
        foreign_keys: &[],
        checks: &[
            check(
                "sweep_run_kind_check",
                r#""run_kind" IN ('Sweep', 'Erasure')"#,
            ),
            check(
                "sweep_run_trigger_check",
                r#""trigger" IN ('Scheduled', 'Manual')"#,
            ),
            check(
                "sweep_run_status_check",
                r#""status" IN ('Started', 'Succeeded', 'PartiallyFailed', 'Failed', 'Cancelled')"#,
            ),
            check(
                "sweep_run_settled_check",
                r#"("status" = 'Started') = ("settled_at" IS NULL)"#,
            ),
        ],
        indexes: &[index(
            "sweep_run_status_started_idx",
            &["status", "started_at"],
        )],
        triggers: &[TriggerSpec {
            name: "sweep_run_evidence_chain",
            timing: TriggerTiming::Before,
            events: &[TriggerEvent::Insert, TriggerEvent::Update],
            function: &RUN_CHAIN_FUNCTION,
            since: EVIDENCE,
        }],
    },
    TableSpec {
        name: "sweep_run_entity_summary",
        since: 1,
        columns: &[
            identity("summary_id"),
            col("run_id", Uuid, true),
            col("retained_entity_id", Uuid, true),
            col("entity_type", Text, true),
            col("category", Text, true),
            col("tenant_id", Uuid, true),
            col("strategy", Text, true),
            col("status", Text, true),
            col("affected_count", Bigint, true),
            col("held_count", Bigint, true),
            col("skipped_count", Bigint, true),
            col("null_anchor_count", Bigint, true),
            col("applied_period", Text, false),
            col("cutoff", Timestamptz, false),
            col("rule_source", Text, false),
            col("rule_reason", Text, false),
            col("error", Text, false),
            col("updated_at", Timestamptz, true),
            added_not_null("legal_minimum_count", Bigint, EVIDENCE, "0"),
            added("chain_seq", Bigint, EVIDENCE),
            added("chain_prev", Bytea, EVIDENCE),
            added("chain_hash", Bytea, EVIDENCE),
        ],
        primary_key: key("sweep_run_entity_summary_pkey", &["summary_id"]),
        unique: &[
            key(
                "sweep_run_entity_summary_key",
                &[
                    "run_id",
                    "retained_entity_id",
                    "category",
                    "tenant_id",
                    "strategy",
                ],
            ),
            unique_since(
                "sweep_run_entity_summary_chain_key",
                &["run_id", "chain_seq"],
                EVIDENCE,
            ),
        ],
        foreign_keys: &[fk_to_run("sweep_run_entity_summary_run_fkey")],
        checks: &[
            check(
                "sweep_run_entity_summary_strategy_check",
                r#""strategy" IN ('Purge', 'SoftDelete', 'Anonymise', 'Exempt', 'Unresolved')"#,
            ),
            check(
                "sweep_run_entity_summary_status_check",
                r#""status" IN ('Running', 'Succeeded', 'Failed', 'Cancelled')"#,
            ),
            check(
                "sweep_run_entity_summary_counts_check",
                r#""affected_count" >= 0 AND "held_count" >= 0 AND "skipped_count" >= 0 AND "null_anchor_count" >= 0"#,
            ),
        ],
        indexes: &[],
        triggers: &[],
    },
    TableSpec {
        name: "sweep_run_row_detail",
        since: 1,
        columns: &[
            identity("detail_id"),
            col("run_id", Uuid, true),
            col("retained_entity_id", Uuid, true),
            col("entity_type", Text, true),
            col("record_id", Text, true),
            col("tenant_id", Uuid, true),
            col("action", Text, true),
            col("captured_payload", Jsonb, false),
            col("created_at", Timestamptz, true),
            added("chain_payload", Bytea, EVIDENCE),
            added("chain_seq", Bigint, EVIDENCE),
            added("chain_prev", Bytea, EVIDENCE),
            added("chain_hash", Bytea, EVIDENCE),
        ],
        primary_key: key("sweep_run_row_detail_pkey", &["detail_id"]),
        unique: &[
            key(
                "sweep_run_row_detail_key",
                &["run_id", "retained_entity_id", "record_id"],
            ),
            unique_since(
                "sweep_run_row_detail_chain_key",
                &["run_id", "chain_seq"],
                EVIDENCE,
            ),
        ],
        foreign_keys: &[fk_to_run("sweep_run_row_detail_run_fkey")],
        checks: &[check(
            "sweep_run_row_detail_action_check",
            r#""action" IN ('Purge', 'SoftDelete', 'Anonymise')"#,
        )],
        indexes: &[index("sweep_run_row_detail_created_idx", &["created_at"])],
        triggers: &[TriggerSpec {
            name: "sweep_run_row_detail_evidence_chain",
            timing: TriggerTiming::Before,
            events: &[TriggerEvent::Insert],
            function: &DETAIL_CHAIN_FUNCTION,
            since: EVIDENCE,
        }],
    },
    TableSpec {
        name: "sweep_row_handler_status",
        since: 1,
        columns: &[
            identity("work_id"),
            col("detail_id", Bigint, true),
            col("run_id", Uuid, true),
            col("retained_entity_id", Uuid, true),
            col("record_id", Text, true),
            col("tenant_id", Uuid, true),
            col("handler_id", Text, true),
            col("priority", Integer, true),
            col("state", Text, true),
            col("attempts", Integer, true),
            col("claim_token", Uuid, false),
            col("claim_expires_at", Timestamptz, false),
            col("not_before", Timestamptz, true),
            col("after_sweep_settled", Boolean, true),
            col("last_error", Text, false),
            col("created_at", Timestamptz, true),
            col("updated_at", Timestamptz, true),
        ],
        primary_key: key("sweep_row_handler_status_pkey", &["work_id"]),
        unique: &[key(
            "sweep_row_handler_status_key",
            &["detail_id", "handler_id"],
        )],
        foreign_keys: &[ForeignKeySpec {
            name: "sweep_row_handler_status_detail_fkey",
            columns: &["detail_id"],
            references: "sweep_run_row_detail",
            referenced_columns: &["detail_id"],
        }],
        checks: &[
            check(
                "sweep_row_handler_status_state_check",
                r#""state" IN ('Pending', 'InFlight', 'Succeeded', 'DeadLettered')"#,
            ),
            check(
                "sweep_row_handler_status_attempts_check",
                r#""attempts" >= 0"#,
            ),
            check(
                "sweep_row_handler_status_claim_check",
                r#"("state" = 'InFlight') = ("claim_token" IS NOT NULL)"#,
            ),
        ],
        indexes: &[index(
            "sweep_row_handler_status_due_idx",
            &["state", "not_before"],
        )],
        triggers: &[],
    },
    TableSpec {
        name: "retention_holds",
        since: 1,
        columns: &[
            col("hold_id", Uuid, true),
            col("retained_entity_id", Uuid, true),
            col("record_id", Text, true),
            col("tenant_id", Uuid, false),
            col("reason", Text, true),
            col("created_at", Timestamptz, true),
            col("expires_at", Timestamptz, false),
            col("removed_at", Timestamptz, false),
            added("chain_seq", Bigint, EVIDENCE),
            added("chain_prev", Bytea, EVIDENCE),
            added("chain_hash", Bytea, EVIDENCE),
            added("removal_seq", Bigint, EVIDENCE),
            added("removal_prev", Bytea, EVIDENCE),
            added("removal_hash", Bytea, EVIDENCE),
            added_not_null("chain_bridges", Jsonb, EVIDENCE, "'[]'::jsonb"),
        ],
        primary_key: key("retention_holds_pkey", &["hold_id"]),
        unique: &[
            unique_since(
                "retention_holds_chain_key",
                &["retained_entity_id", "chain_seq"],
                EVIDENCE,
            ),
            unique_since(
                "retention_holds_removal_chain_key",
                &["retained_entity_id", "removal_seq"],
                EVIDENCE,
            ),
        ],
        foreign_keys: &[],
        checks: &[
            check("retention_holds_record_id_check", r#""record_id" <> ''"#),
            check(
                "retention_holds_expiry_check",
                r#""expires_at" IS NULL OR "expires_at" > "created_at""#,
            ),
        ],
        indexes: &[index(
            "retention_holds_record_idx",
            &["retained_entity_id", "record_id"],
        )],
        triggers: &[
            TriggerSpec {
                name: "retention_holds_entity_fence",
                timing: TriggerTiming::Before,
                events: &[TriggerEvent::Insert, TriggerEvent::Update],
                function: &FENCE_FUNCTION,
                since: 2,
            },
            // Fires after the fence trigger (triggers fire in name order),
            // so the per-entity hold chain is extended under the fence.
            TriggerSpec {
                name: "retention_holds_evidence_chain",
                timing: TriggerTiming::Before,
                events: &[TriggerEvent::Insert, TriggerEvent::Update],
                function: &HOLD_CHAIN_FUNCTION,
                since: EVIDENCE,
            },
            TriggerSpec {
                name: "retention_holds_evidence_delete",
                timing: TriggerTiming::After,
                events: &[TriggerEvent::Delete],
                function: &HOLD_DELETE_FUNCTION,
                since: EVIDENCE,
            },
        ],
    },
    TableSpec {
        name: "retention_entities",
        since: REGISTRY,
        // One row per retained type, written by `CohortBuilder::build`:
        // how the fence trigger reads a plain-SQL hold's record id through
        // the type's key (contract H16). Names and a type are stored as
        // text; the trigger quotes the names and casts the type to
        // `regtype` before it uses them.
        columns: &[
            col("retained_entity_id", Uuid, true),
            col("entity_type", Text, true),
            col("table_schema", Text, true),
            col("table_name", Text, true),
            col("record_id_column", Text, true),
            col("record_id_type", Text, true),
            col("record_id_eq_schema", Text, false),
            col("record_id_eq", Text, true),
            col("tenant_column", Text, false),
            col("registered_at", Timestamptz, true),
            // Moved by the fence trigger on every hold written for the type
            // (contract X22): a sweep keeps a filter of the type's holds
            // across batches and each batch checks, in its statement, that
            // this has not moved since the filter was read.
            col("holds_version", Bigint, true),
        ],
        primary_key: key("retention_entities_pkey", &["retained_entity_id"]),
        unique: &[],
        foreign_keys: &[],
        checks: &[check(
            "retention_entities_operator_check",
            r#""record_id_eq" ~ '^[-+*/<>=~!@#%^&|`?]+$'"#,
        )],
        indexes: &[],
        triggers: &[],
    },
    TableSpec {
        name: "sweep_worker_lease",
        since: LEASES,
        // One row per install: the scheduled worker replica that holds it
        // (until it expires) is the one that checks and sweeps occurrences.
        columns: &[
            col("lease_name", Text, true),
            col("owner_token", Uuid, true),
            col("expires_at", Timestamptz, true),
        ],
        primary_key: key("sweep_worker_lease_pkey", &["lease_name"]),
        unique: &[],
        foreign_keys: &[],
        checks: &[],
        indexes: &[],
        triggers: &[],
    },
    TableSpec {
        name: "retention_matters",
        since: MATTERS,
        // One row per matter hold: a scope (a data subject, or a retained
        // type with an optional anchor window) that protects every row in
        // it, written once, extended, released; never a row per record.
        columns: &[
            col("matter_id", Uuid, true),
            col("tenant_id", Uuid, false),
            col("scope_kind", Text, true),
            col("subject", Text, false),
            col("entity_ids", UuidArray, false),
            col("retained_entity_id", Uuid, false),
            col("anchor_from", Timestamptz, false),
            col("anchor_to", Timestamptz, false),
            col("reason", Text, true),
            col("owner", Text, true),
            col("created_at", Timestamptz, true),
            col("expires_at", Timestamptz, false),
            col("released_at", Timestamptz, false),
        ],
        primary_key: key("retention_matters_pkey", &["matter_id"]),
        unique: &[],
        foreign_keys: &[],
        checks: &[
            check(
                "retention_matters_scope_check",
                r#"("scope_kind" = 'Subject' AND "subject" IS NOT NULL AND "retained_entity_id" IS NULL AND "anchor_from" IS NULL AND "anchor_to" IS NULL) OR ("scope_kind" = 'Type' AND "subject" IS NULL AND "entity_ids" IS NULL AND "retained_entity_id" IS NOT NULL)"#,
            ),
            check(
                "retention_matters_window_check",
                r#""anchor_from" IS NULL OR "anchor_to" IS NULL OR "anchor_from" <= "anchor_to""#,
            ),
            check(
                "retention_matters_words_check",
                r#"length(btrim("reason")) > 0 AND length(btrim("owner")) > 0"#,
            ),
        ],
        indexes: &[index("retention_matters_tenant_idx", &["tenant_id"])],
        triggers: &[
            TriggerSpec {
                name: "retention_matters_fence",
                timing: TriggerTiming::Before,
                events: &[TriggerEvent::Insert, TriggerEvent::Update],
                function: &MATTER_FENCE_FUNCTION,
                since: MATTERS,
            },
            TriggerSpec {
                name: "retention_matters_evidence_chain",
                timing: TriggerTiming::After,
                events: &[TriggerEvent::Insert, TriggerEvent::Update],
                function: &MATTER_CHAIN_FUNCTION,
                since: MATTERS,
            },
        ],
    },
    TableSpec {
        name: "retention_matter_events",
        since: MATTERS,
        // The matters' evidence chain (contract MH3, EV1): one link per
        // creation, change and release, install-wide, written by the
        // matters' trigger only. Append-only.
        columns: &[
            col("chain_seq", Bigint, true),
            col("chain_prev", Bytea, false),
            col("chain_hash", Bytea, true),
            col("matter_id", Uuid, true),
            col("event", Text, true),
            col("tenant_id", Uuid, false),
            col("scope_kind", Text, true),
            col("subject", Text, false),
            col("entity_ids", Text, false),
            col("retained_entity_id", Uuid, false),
            col("anchor_from", Timestamptz, false),
            col("anchor_to", Timestamptz, false),
            col("reason", Text, true),
            col("owner", Text, true),
            col("created_at", Timestamptz, true),
            col("expires_at", Timestamptz, false),
            col("released_at", Timestamptz, false),
            col("recorded_at", Timestamptz, true),
        ],
        primary_key: key("retention_matter_events_pkey", &["chain_seq"]),
        unique: &[],
        foreign_keys: &[],
        checks: &[check(
            "retention_matter_events_event_check",
            r#""event" IN ('Created', 'Changed', 'Released')"#,
        )],
        indexes: &[index(
            "retention_matter_events_matter_idx",
            &["matter_id", "chain_seq"],
        )],
        triggers: &[],
    },
    TableSpec {
        name: "retention_subject_access",
        since: SUBJECT_ACCESS,
        // One row per subject access export (contract SA1): who asked,
        // when, in which tenant, how many rows of each type went out, and
        // the subject only as a keyed hash. Append-only.
        columns: &[
            col("access_id", Uuid, true),
            col("tenant_id", Uuid, true),
            col("subject_hmac", Bytea, true),
            col("requested_by", Text, true),
            col("format", Text, true),
            col("logical_now", Timestamptz, true),
            col("recorded_at", Timestamptz, true),
            col("row_count", Bigint, true),
            col("held_count", Bigint, true),
            col("type_counts", Jsonb, true),
        ],
        primary_key: key("retention_subject_access_pkey", &["access_id"]),
        unique: &[],
        foreign_keys: &[],
        checks: &[
            check(
                "retention_subject_access_format_check",
                r#""format" IN ('jsonl', 'csv')"#,
            ),
            check(
                "retention_subject_access_requested_by_check",
                r#"length(btrim("requested_by")) > 0"#,
            ),
        ],
        indexes: &[index(
            "retention_subject_access_subject_idx",
            &["subject_hmac", "recorded_at"],
        )],
        triggers: &[],
    },
    TableSpec {
        name: "retention_disposition_batches",
        since: DISPOSITION,
        // One row per disposition batch (contract DR1): what a sweep froze
        // for review instead of changing it, per type, tenant and stage,
        // bound to the rule that selected it; then its state as decisions
        // are taken, and what was carried out.
        columns: &[
            col("batch_id", Uuid, true),
            col("retained_entity_id", Uuid, true),
            col("entity_type", Text, true),
            col("category", Text, true),
            col("tenant_id", Uuid, true),
            col("stage", Integer, true),
            col("strategy", Text, true),
            col("rule_hash", Bytea, true),
            col("rule_content", Text, true),
            col("review", Jsonb, true),
            col("run_id", Uuid, true),
            col("frozen_at", Timestamptz, true),
            col("created_at", Timestamptz, true),
            col("row_count", Bigint, true),
            col("approvers_required", Integer, true),
            col("auto_approve_at", Timestamptz, false),
            col("status", Text, true),
            col("keep_until", Timestamptz, false),
            col("carried_run_id", Uuid, false),
            col("changed_count", Bigint, false),
            col("held_count", Bigint, false),
            col("left_count", Bigint, false),
            col("ineligible_count", Bigint, false),
            col("decided_at", Timestamptz, false),
        ],
        primary_key: key("retention_disposition_batches_pkey", &["batch_id"]),
        unique: &[],
        foreign_keys: &[],
        checks: &[
            check(
                "retention_disposition_batches_status_check",
                r#""status" IN ('Pending', 'Approved', 'CarryingOut', 'CarriedOut', 'Rejected', 'Extended', 'Voided')"#,
            ),
            check(
                "retention_disposition_batches_approvers_check",
                r#""approvers_required" BETWEEN 1 AND 2 AND "stage" >= 0"#,
            ),
        ],
        indexes: &[index(
            "retention_disposition_batches_scope_idx",
            &["retained_entity_id", "tenant_id", "stage", "status"],
        )],
        triggers: &[],
    },
    TableSpec {
        name: "retention_disposition_records",
        since: DISPOSITION,
        // The record ids a batch froze, one row each (canonical text, as
        // holds store them): written once by the freezing sweep, read by
        // the sweep that carries the batch out (a semi-join in its
        // statements) and by the next freezes (a row in an open batch is
        // not frozen again).
        columns: &[col("batch_id", Uuid, true), col("record_id", Text, true)],
        primary_key: key(
            "retention_disposition_records_pkey",
            &["batch_id", "record_id"],
        ),
        unique: &[],
        foreign_keys: &[],
        checks: &[],
        indexes: &[index(
            "retention_disposition_records_record_idx",
            &["record_id"],
        )],
        triggers: &[],
    },
    TableSpec {
        name: "retention_disposition_decisions",
        since: DISPOSITION,
        // The proof of disposition (contract DR3): every decision on a
        // batch, who took it, when, under which rule hash and with which
        // counts, one link each of an install-wide chain its trigger
        // writes. Append-only.
        columns: &[
            col("chain_seq", Bigint, true),
            col("chain_prev", Bytea, false),
            col("chain_hash", Bytea, true),
            col("decision_id", Uuid, true),
            col("batch_id", Uuid, true),
            col("decision", Text, true),
            col("decided_by", Text, true),
            col("automatic", Boolean, true),
            col("retained_entity_id", Uuid, true),
            col("tenant_id", Uuid, true),
            col("stage", Integer, true),
            col("rule_hash", Bytea, true),
            col("approvers_required", Integer, false),
            col("reason", Text, false),
            col("keep_until", Timestamptz, false),
            col("run_id", Uuid, false),
            col("row_count", Bigint, false),
            col("changed_count", Bigint, false),
            col("held_count", Bigint, false),
            col("left_count", Bigint, false),
            col("ineligible_count", Bigint, false),
            col("decided_at", Timestamptz, true),
        ],
        primary_key: key("retention_disposition_decisions_pkey", &["chain_seq"]),
        unique: &[key(
            "retention_disposition_decisions_decision_key",
            &["decision_id"],
        )],
        foreign_keys: &[],
        checks: &[
            check(
                "retention_disposition_decisions_decision_check",
                r#""decision" IN ('Frozen', 'Approved', 'Rejected', 'Extended', 'Voided', 'CarriedOut')"#,
            ),
            check(
                "retention_disposition_decisions_by_check",
                r#"length(btrim("decided_by")) > 0"#,
            ),
        ],
        indexes: &[index(
            "retention_disposition_decisions_batch_idx",
            &["batch_id", "chain_seq"],
        )],
        triggers: &[TriggerSpec {
            name: "retention_disposition_decisions_chain",
            timing: TriggerTiming::Before,
            events: &[TriggerEvent::Insert],
            function: &DISPOSITION_CHAIN_FUNCTION,
            since: DISPOSITION,
        }],
    },
    TableSpec {
        name: "retention_archive_batches",
        since: ARCHIVE,
        // One row per committed archive batch (contract SL2), written by
        // the batch's own statement: how many rows it copied into which
        // archive table, and a SHA-256 of those rows in their binary form,
        // so the archive can be checked against the ledger. Append-only.
        columns: &[
            identity("archive_batch_id"),
            col("run_id", Uuid, true),
            col("summary_id", Bigint, true),
            col("retained_entity_id", Uuid, true),
            col("batch", Bigint, true),
            col("archive_table", Text, true),
            col("row_count", Bigint, true),
            col("checksum", Bytea, true),
            col("created_at", Timestamptz, true),
        ],
        primary_key: key("retention_archive_batches_pkey", &["archive_batch_id"]),
        unique: &[key(
            "retention_archive_batches_key",
            &["summary_id", "batch"],
        )],
        foreign_keys: &[fk_to_run("retention_archive_batches_run_fkey")],
        checks: &[check(
            "retention_archive_batches_count_check",
            r#""row_count" > 0"#,
        )],
        indexes: &[],
        triggers: &[],
    },
    TableSpec {
        name: "retention_events",
        since: EVENTS,
        // The events of event-based retention (contract SL4): a type and a
        // subject key (in a tenant, or none), when it happened, who recorded
        // it; withdrawn once, never changed otherwise nor deleted.
        columns: &[
            col("event_id", Uuid, true),
            col("event_type", Text, true),
            col("subject_key", Text, true),
            col("tenant_id", Uuid, false),
            col("occurred_at", Timestamptz, true),
            col("recorded_by", Text, true),
            col("recorded_at", Timestamptz, true),
            col("withdrawn_at", Timestamptz, false),
            col("withdrawn_by", Text, false),
            col("withdrawn_reason", Text, false),
        ],
        primary_key: key("retention_events_pkey", &["event_id"]),
        unique: &[],
        foreign_keys: &[],
        checks: &[
            check(
                "retention_events_words_check",
                r#"length(btrim("event_type")) > 0 AND length("subject_key") > 0 AND length(btrim("recorded_by")) > 0"#,
            ),
            check(
                "retention_events_withdrawal_check",
                r#"("withdrawn_at" IS NULL) = ("withdrawn_by" IS NULL) AND ("withdrawn_at" IS NULL) = ("withdrawn_reason" IS NULL)"#,
            ),
        ],
        indexes: &[index(
            "retention_events_key_idx",
            &["event_type", "subject_key", "tenant_id"],
        )],
        triggers: &[
            TriggerSpec {
                name: "retention_events_guard",
                timing: TriggerTiming::Before,
                events: &[
                    TriggerEvent::Insert,
                    TriggerEvent::Update,
                    TriggerEvent::Delete,
                ],
                function: &EVENT_GUARD_FUNCTION,
                since: EVENTS,
            },
            TriggerSpec {
                name: "retention_events_evidence_chain",
                timing: TriggerTiming::After,
                events: &[TriggerEvent::Insert, TriggerEvent::Update],
                function: &EVENT_CHAIN_FUNCTION,
                since: EVENTS,
            },
        ],
    },
    TableSpec {
        name: "retention_event_log",
        since: EVENTS,
        // The events' evidence chain (contract SL4, EV1): one link per
        // recording and withdrawal, install-wide, written by the events'
        // trigger only. Append-only.
        columns: &[
            col("chain_seq", Bigint, true),
            col("chain_prev", Bytea, false),
            col("chain_hash", Bytea, true),
            col("event_id", Uuid, true),
            col("action", Text, true),
            col("event_type", Text, true),
            col("subject_key", Text, true),
            col("tenant_id", Uuid, false),
            col("occurred_at", Timestamptz, true),
            col("recorded_by", Text, true),
            col("recorded_at", Timestamptz, true),
            col("withdrawn_at", Timestamptz, false),
            col("withdrawn_by", Text, false),
            col("withdrawn_reason", Text, false),
            col("logged_at", Timestamptz, true),
        ],
        primary_key: key("retention_event_log_pkey", &["chain_seq"]),
        unique: &[],
        foreign_keys: &[],
        checks: &[check(
            "retention_event_log_action_check",
            r#""action" IN ('Recorded', 'Withdrawn')"#,
        )],
        indexes: &[index(
            "retention_event_log_event_idx",
            &["event_id", "chain_seq"],
        )],
        triggers: &[],
    },
];

/// The table whose comment records the installed schema version.
pub(super) const VERSION_TABLE: &str = "sweep_run";

/// A change a later migration makes to a table an earlier one created (whose
/// frozen DDL cannot change).
#[derive(Debug)]
pub(super) enum Change {
    /// `ALTER COLUMN ... DROP NOT NULL`: readiness then expects the column
    /// to accept NULL. Not reversible without losing rows, so a migration
    /// that makes it has no `down`.
    DropNotNull { column: &'static str },
    /// `CREATE UNIQUE INDEX ... WHERE ...`: a backstop for an invariant the
    /// engine's statements keep by themselves, so readiness does not require
    /// it.
    PartialUniqueIndex {
        name: &'static str,
        columns: &'static [&'static str],
        /// The predicate, with quoted column names and literal constants.
        predicate: &'static str,
    },
    /// `CREATE INDEX ...`: an index that only makes Cohort fast.
    Index {
        name: &'static str,
        columns: &'static [&'static str],
    },
    /// `CREATE OR REPLACE FUNCTION`: a trigger function an earlier
    /// migration created gets a new body (same name); readiness then
    /// expects the new one.
    ReplaceFunction { function: &'static FunctionSpec },
    /// A check constraint an earlier migration created gets a new
    /// expression (same name): dropped and added again. A migration that
    /// makes one has no `down` (an older check may refuse rows written
    /// since).
    ReplaceCheck {
        name: &'static str,
        /// The expression, with quoted column names.
        expression: &'static str,
    },
}

/// One change to an existing table, tagged with its migration.
#[derive(Debug)]
pub(super) struct AlterationSpec {
    pub(super) since: i64,
    pub(super) table: &'static str,
    pub(super) change: Change,
}

/// Every change later migrations make to earlier tables, in order.
pub(super) const ALTERATIONS: [AlterationSpec; 7] = [
    // Migration 3 (row handlers): a row whose before-hook failed is
    // dead-lettered without a row detail (it was not changed).
    AlterationSpec {
        since: 3,
        table: "sweep_row_handler_status",
        change: Change::DropNotNull {
            column: "detail_id",
        },
    },
    // For one row, one handler's delivery at a time (contract RH12).
    AlterationSpec {
        since: 3,
        table: "sweep_row_handler_status",
        change: Change::PartialUniqueIndex {
            name: "sweep_row_handler_status_one_in_flight",
            columns: &["detail_id"],
            predicate: r#""state" = 'InFlight'"#,
        },
    },
    // A claim finds a row's next delivery through it (rank, then id).
    AlterationSpec {
        since: 3,
        table: "sweep_row_handler_status",
        change: Change::Index {
            name: "sweep_row_handler_status_detail_order_idx",
            columns: &["detail_id", "priority", "work_id"],
        },
    },
    // Migration 5: a hold written with plain SQL is stored with its row's
    // canonical record id, or refused (contract H16).
    AlterationSpec {
        since: REGISTRY,
        table: "retention_holds",
        change: Change::ReplaceFunction {
            function: &FENCE_FUNCTION_CANONICAL,
        },
    },
    // Migration 6: a run's link covers its subject hash (contract EV4).
    AlterationSpec {
        since: SUBJECT_BINDING,
        table: "sweep_run",
        change: Change::ReplaceFunction {
            function: &RUN_CHAIN_FUNCTION_SUBJECT,
        },
    },
    // Migration 11: the archive strategy in the ledger (contract SL2).
    AlterationSpec {
        since: ARCHIVE,
        table: "sweep_run_entity_summary",
        change: Change::ReplaceCheck {
            name: "sweep_run_entity_summary_strategy_check",
            expression: r#""strategy" IN ('Purge', 'SoftDelete', 'Anonymise', 'Exempt', 'Unresolved', 'Archive')"#,
        },
    },
    AlterationSpec {
        since: ARCHIVE,
        table: "sweep_run_row_detail",
        change: Change::ReplaceCheck {
            name: "sweep_run_row_detail_action_check",
            expression: r#""action" IN ('Purge', 'SoftDelete', 'Anonymise', 'Archive')"#,
        },
    },
];

/// The body a trigger function has once every migration through `version`
/// has run: `f`, or the latest replacement of it.
pub(super) fn function_through(f: &'static FunctionSpec, version: i64) -> &'static FunctionSpec {
    ALTERATIONS
        .iter()
        .filter(|a| a.since <= version)
        .filter_map(|a| match a.change {
            Change::ReplaceFunction { function } if function.name == f.name => Some(function),
            _ => None,
        })
        .next_back()
        .unwrap_or(f)
}

/// Whether the column is NOT NULL once every migration through `version`
/// has run.
pub(super) fn not_null_through(table: &str, column: &ColumnSpec, version: i64) -> bool {
    column.not_null
        && !ALTERATIONS.iter().any(|a| {
            a.since <= version
                && a.table == table
                && matches!(a.change, Change::DropNotNull { column: c } if c == column.name)
        })
}

/// What the spec needs to know about a migration besides its elements.
#[derive(Debug)]
pub(super) struct MigrationInfo {
    pub(super) version: i64,
    pub(super) name: &'static str,
    pub(super) summary: &'static str,
    /// SQL run after the migration's tables and columns exist and before its
    /// triggers are created (migration 3 seals the rows already there).
    pub(super) data_step: Option<fn(&crate::sql::SchemaName) -> String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::migrations::MIGRATIONS;

    #[test]
    fn the_spec_names_the_public_tables_in_order() {
        let names: Vec<&str> = TABLES.iter().map(|t| t.name).collect();
        assert_eq!(names, crate::schema::TABLES.to_vec());
        assert!(names.contains(&VERSION_TABLE));
    }

    #[test]
    fn every_element_belongs_to_a_known_migration() {
        let versions: Vec<i64> = MIGRATIONS.iter().map(|m| m.version).collect();
        for t in &TABLES {
            assert!(versions.contains(&t.since), "{}", t.name);
            for trigger in t.triggers {
                assert!(versions.contains(&trigger.since), "{}", trigger.name);
                assert!(trigger.since >= t.since, "{}", trigger.name);
            }
            // Foreign keys point at tables created no later than this one.
            for fk in t.foreign_keys {
                let target = TABLES
                    .iter()
                    .position(|x| x.name == fk.references)
                    .expect("known table");
                let me = TABLES
                    .iter()
                    .position(|x| x.name == t.name)
                    .expect("known table");
                assert!(target <= me, "{}", fk.name);
            }
        }
    }

    #[test]
    fn every_migration_adds_something() {
        for m in &MIGRATIONS {
            let tables = TABLES.iter().filter(|t| t.since == m.version).count();
            let triggers = TABLES
                .iter()
                .flat_map(|t| t.triggers)
                .filter(|t| t.since == m.version)
                .count();
            let columns = TABLES
                .iter()
                .flat_map(|t| t.columns)
                .filter(|c| c.since == m.version)
                .count();
            let alterations = ALTERATIONS.iter().filter(|a| a.since == m.version).count();
            assert!(
                tables + triggers + columns + alterations > 0,
                "migration {} is empty",
                m.version
            );
        }
    }

    #[test]
    fn column_types_print_as_the_catalog_does() {
        assert_eq!(Timestamptz.catalog(), "timestamp with time zone");
        assert_eq!(Timestamptz.ddl(), "timestamptz");
        assert_eq!(Jsonb.catalog(), "jsonb");
    }
}
