//! What the engine needs: per retained type ([`type_needs`]) and on
//! Cohort's own tables ([`cohort_needs`], [`COHORT_TABLES`]). The one
//! description both the check and the generated grants read.

use crate::catalog::{Ask, Privilege};
use crate::model::AnonymiseMethod;
use crate::policy::{Capabilities, Strategy};
use crate::schema::SchemaName;
use crate::sql::{Ident, QualifiedName};
use crate::validate::registry::Target;
use crate::validate::roles::Roles;

/// Where problems about Cohort's own tables are filed: after every type's.
pub(super) const COHORT_TABLES_INDEX: usize = usize::MAX;

/// What a privilege is on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum Object {
    /// A schema (`USAGE`).
    Schema(Ident),
    /// A table as a whole.
    Table(QualifiedName),
    /// One column of a table (system columns included).
    Column(QualifiedName, Ident),
    /// At least one column of a table; `Ident` is the column the grant
    /// suggests.
    AnyColumn(QualifiedName, Ident),
}

/// One privilege the runtime role needs, and why.
#[derive(Debug, Clone)]
pub(super) struct Need {
    pub(super) object: Object,
    pub(super) privilege: Privilege,
    pub(super) why: String,
}

impl Need {
    pub(super) fn schema(schema: Ident, why: impl Into<String>) -> Need {
        Need {
            object: Object::Schema(schema),
            privilege: Privilege::Usage,
            why: why.into(),
        }
    }

    pub(super) fn table(
        table: &QualifiedName,
        privilege: Privilege,
        why: impl Into<String>,
    ) -> Need {
        Need {
            object: Object::Table(table.clone()),
            privilege,
            why: why.into(),
        }
    }

    pub(super) fn column(
        table: &QualifiedName,
        column: Ident,
        privilege: Privilege,
        why: impl Into<String>,
    ) -> Need {
        Need {
            object: Object::Column(table.clone(), column),
            privilege,
            why: why.into(),
        }
    }

    /// The `GRANT` that gives this privilege to `role`.
    pub(super) fn grant(&self, role: &Ident) -> String {
        let p = self.privilege.keyword();
        match &self.object {
            Object::Schema(s) => format!("GRANT USAGE ON SCHEMA {s} TO {role}"),
            Object::Table(t) => format!("GRANT {p} ON TABLE {t} TO {role}"),
            Object::Column(t, c) | Object::AnyColumn(t, c) => {
                format!("GRANT {p} ({c}) ON TABLE {t} TO {role}")
            }
        }
    }

    /// The table concerned (schema-qualified, unquoted), for problems.
    pub(super) fn table_name(&self) -> Option<String> {
        match &self.object {
            Object::Schema(_) => None,
            Object::Table(t) | Object::Column(t, _) | Object::AnyColumn(t, _) => {
                Some(format!("{}.{}", t.schema.as_str(), t.name.as_str()))
            }
        }
    }

    /// The column concerned: for "any column", the one the fix grants.
    pub(super) fn column_name(&self) -> Option<&str> {
        match &self.object {
            Object::Column(_, c) | Object::AnyColumn(_, c) => Some(c.as_str()),
            _ => None,
        }
    }

    pub(super) fn ask(&self) -> Ask<'_> {
        match &self.object {
            Object::Schema(s) => Ask::Schema { schema: s.as_str() },
            Object::Table(t) => Ask::Table {
                schema: t.schema.as_str(),
                table: t.name.as_str(),
                privilege: self.privilege,
            },
            Object::Column(t, c) => Ask::Column {
                schema: t.schema.as_str(),
                table: t.name.as_str(),
                column: c.as_str(),
                privilege: self.privilege,
            },
            Object::AnyColumn(t, _) => Ask::AnyColumn {
                schema: t.schema.as_str(),
                table: t.name.as_str(),
                privilege: self.privilege,
            },
        }
    }

    /// What is missing, in a problem's words.
    pub(super) fn missing(&self, role: &str) -> String {
        let p = self.privilege.keyword();
        let what = match &self.object {
            Object::Schema(s) => format!("USAGE on schema {}", s.as_str()),
            Object::Table(t) => format!("{p} on table {}.{}", t.schema.as_str(), t.name.as_str()),
            Object::Column(t, c) => format!(
                "{p} on column {} of {}.{}",
                c.as_str(),
                t.schema.as_str(),
                t.name.as_str()
            ),
            Object::AnyColumn(t, _) => format!(
                "{p} on any column of {}.{}",
                t.schema.as_str(),
                t.name.as_str()
            ),
        };
        format!("the role {role} lacks {what}: {}", self.why)
    }
}

/// A field's column as an identifier (`None` for a name no identifier can
/// carry: the column checks report it).
pub(super) fn ident(column: &str) -> Option<Ident> {
    Ident::new(column).ok()
}

/// Why the engine reads the system columns.
pub(super) const ROW_ADDRESS: &str =
    "the engine addresses the rows a batch locked by (tableoid, ctid)";

/// Why purge-only types need `UPDATE` on a column.
pub(super) const ROW_LOCKS: &str = "PostgreSQL allows row locks (SELECT ... FOR UPDATE / FOR SHARE, which \
     erasure, hold creation, host deletion and a sweep's row-by-row path take) only to a role \
     with UPDATE on at least one column of the table; the engine never writes this column";

/// Everything the engine does to one retained type's table, for the union of
/// the strategies its category may resolve to (P3): which columns it reads,
/// which it writes, whether it deletes. `None` when the table has no name an
/// identifier can carry (reported elsewhere).
/// Whether row handlers capture `target`'s rows: `handlers` is whether any
/// is registered and, when known, which types they are for.
pub(super) fn captures(target: &Target, handlers: (bool, Option<&[uuid::Uuid]>)) -> bool {
    match handlers {
        (false, _) => false,
        (true, None) => true,
        (true, Some(types)) => target
            .descriptor
            .entity_id()
            .is_some_and(|id| types.contains(&id)),
    }
}

pub(super) fn type_needs(
    target: &Target,
    roles: &Roles,
    caps: &Capabilities,
    captured: bool,
) -> Vec<Need> {
    let Some(table) = &target.table else {
        return Vec::new();
    };
    let mut needs = vec![Need::schema(
        table.schema.clone(),
        "the retained table is in this schema",
    )];
    if captured {
        needs.push(Need::table(
            table,
            Privilege::Select,
            "row handlers capture the whole row (to_jsonb) before it changes",
        ));
    }
    let mut select = |field: Option<&crate::model::FieldDescriptor>, why: &str| {
        if let Some(c) = field.and_then(|f| ident(f.column)) {
            needs.push(Need::column(table, c, Privilege::Select, why));
        }
    };
    select(
        roles.record_id,
        "every strategy, preview, erasure and hold reads the record id",
    );
    select(
        roles.anchor,
        "every sweep and preview filters by the anchor",
    );
    select(
        roles.tenant,
        "every statement filters by the tenant (rows of other tenants are never read)",
    );
    for &s in &roles.subjects {
        select(Some(s), "erasure compares the erasure-subject columns");
    }
    if let Some(key) = target.descriptor.event_key() {
        select(
            target.descriptor.field(key),
            "a rule counting from an event joins events on this column (event_key)",
        );
    }
    if let Some(from) = target.descriptor.category_from() {
        select(
            target.descriptor.field(from.field()),
            "each row's category comes from this column (category_from)",
        );
    }
    let soft_delete = caps.allows(Strategy::SoftDelete);
    let anonymise = caps.allows(Strategy::Anonymise);
    if soft_delete {
        select(
            roles.soft_delete,
            "soft-delete skips rows whose flag is already set",
        );
    }
    if soft_delete && caps.is_staged() {
        select(
            roles.deleted_at,
            "a stage after soft-delete counts its period from deleted-at",
        );
    }
    if anonymise {
        select(
            roles.anonymised_at,
            "anonymise skips rows already anonymised",
        );
        for (f, method) in &roles.anonymise {
            if matches!(
                method,
                AnonymiseMethod::Custom(_) | AnonymiseMethod::Named(_)
            ) {
                select(
                    Some(f),
                    "a custom anonymiser reads the column's value to compute its replacement",
                );
            }
        }
    }
    for system in ["tableoid", "ctid"] {
        needs.push(Need::column(
            table,
            Ident::known(system),
            Privilege::Select,
            ROW_ADDRESS,
        ));
    }

    let mut updates = 0;
    let mut update = |needs: &mut Vec<Need>, field: Option<&crate::model::FieldDescriptor>, why| {
        if let Some(c) = field.and_then(|f| ident(f.column)) {
            needs.push(Need::column(table, c, Privilege::Update, why));
            updates += 1;
        }
    };
    if soft_delete {
        update(&mut needs, roles.soft_delete, "soft-delete sets the flag");
        update(
            &mut needs,
            roles.deleted_at,
            "soft-delete stamps deleted-at",
        );
    }
    if anonymise {
        for (f, _) in &roles.anonymise {
            update(&mut needs, Some(f), "anonymise scrubs the column");
        }
        update(
            &mut needs,
            roles.anonymised_at,
            "anonymise stamps anonymised-at",
        );
    }
    if caps.allows(Strategy::Purge) {
        needs.push(Need::table(
            table,
            Privilege::Delete,
            "the category may resolve to Purge, which deletes rows",
        ));
    }
    if caps.allows(Strategy::Archive) {
        needs.push(Need::table(
            table,
            Privilege::Select,
            "the archive strategy copies the whole row into the archive table",
        ));
        if !caps.allows(Strategy::Purge) {
            needs.push(Need::table(
                table,
                Privilege::Delete,
                "the archive strategy deletes each row it archived",
            ));
        }
        if let Some(schema) = caps.archive_schema().and_then(ident) {
            let archive = crate::validate::archive::archive_table(table, &schema);
            needs.push(Need::schema(
                schema,
                "the archive tables are in this schema",
            ));
            for (privilege, why) in [
                (
                    Privilege::Select,
                    "an archive batch returns what it copied; a purge stage after it reads the archive",
                ),
                (
                    Privilege::Insert,
                    "the archive strategy copies rows into the archive table",
                ),
                (
                    Privilege::Delete,
                    "a purge stage after the archive stage, and erasure, delete from the archive",
                ),
            ] {
                needs.push(Need::table(&archive, privilege, why));
            }
            // Erasure and the locked path lock the archive's rows too.
            if let Some(c) = roles.anchor.and_then(|f| ident(f.column)) {
                needs.push(Need {
                    object: Object::AnyColumn(archive, c),
                    privilege: Privilege::Update,
                    why: ROW_LOCKS.to_owned(),
                });
            }
        }
    }
    if updates == 0
        && let Some(c) = roles.anchor.and_then(|f| ident(f.column))
    {
        needs.push(Need {
            object: Object::AnyColumn(table.clone(), c),
            privilege: Privilege::Update,
            why: ROW_LOCKS.to_owned(),
        });
    }
    needs
}

/// Which columns of one of Cohort's tables a privilege covers.
#[derive(Debug, Clone, Copy)]
pub(super) enum Columns {
    /// Not needed.
    None,
    /// The whole table.
    All,
    /// These columns.
    Only(&'static [&'static str]),
}

/// What the engine does to one of Cohort's tables.
#[derive(Debug)]
pub(super) struct CohortTable {
    pub(super) name: &'static str,
    pub(super) select: Columns,
    pub(super) insert: Columns,
    pub(super) update: Columns,
    pub(super) delete: bool,
    pub(super) why: &'static str,
}

/// What the engine does to Cohort's tables today (read from `ledger::writer`,
/// `run::execute` and `holds::statements`). Keep in step with them: the test
/// suite runs as a role granted exactly this (`COHORT_TEST_ROLE=least`).
pub(super) const COHORT_TABLES: [CohortTable; 10] = [
    CohortTable {
        name: "sweep_run",
        // Settling finds the run by id and status; recovery also reads
        // started-at; the worker's claim check finds the latest scheduled
        // sweep of its kind at or after the occurrence.
        select: Columns::Only(&[
            "run_id",
            "run_kind",
            "trigger",
            "dry_run",
            "logical_now",
            "status",
            "started_at",
            // The lease (contract CO2): every write checks the owner's
            // token, settling reads the expiry.
            "owner_token",
            "lease_expires_at",
        ]),
        insert: Columns::Only(&[
            "run_id",
            "run_kind",
            "trigger",
            "dry_run",
            "tenant_id",
            "logical_now",
            "status",
            "started_at",
            "subject_hmac",
            "replay_of",
            "owner_token",
            "lease_expires_at",
        ]),
        update: Columns::Only(&["status", "settled_at", "error", "lease_expires_at"]),
        delete: false,
        why: "a run writes its Started row, then settles it",
    },
    CohortTable {
        name: "sweep_run_entity_summary",
        // ON CONFLICT reads its key and the EXCLUDED values it writes;
        // batches add to the affected count by summary_id; RETURNING reads
        // summary_id. Only entity_type is never read.
        select: Columns::Only(&[
            "summary_id",
            "run_id",
            "retained_entity_id",
            "category",
            "tenant_id",
            "strategy",
            "status",
            "affected_count",
            "held_count",
            "skipped_count",
            "null_anchor_count",
            "legal_minimum_count",
            "applied_period",
            "cutoff",
            "rule_source",
            "rule_reason",
            "error",
            "updated_at",
        ]),
        insert: Columns::Only(&[
            "run_id",
            "retained_entity_id",
            "entity_type",
            "category",
            "tenant_id",
            "strategy",
            "status",
            "affected_count",
            "held_count",
            "skipped_count",
            "null_anchor_count",
            "legal_minimum_count",
            "applied_period",
            "cutoff",
            "rule_source",
            "rule_reason",
            "error",
            "updated_at",
        ]),
        update: Columns::Only(&[
            "status",
            "affected_count",
            "held_count",
            "skipped_count",
            "null_anchor_count",
            "legal_minimum_count",
            "applied_period",
            "cutoff",
            "rule_source",
            "rule_reason",
            "error",
            "updated_at",
        ]),
        delete: false,
        why: "each entity of a run writes its summary and batches add their progress",
    },
    CohortTable {
        name: "sweep_run_row_detail",
        // Insert-only: never read, changed or deleted by the sweeping role.
        select: Columns::None,
        insert: Columns::Only(&[
            "run_id",
            "retained_entity_id",
            "entity_type",
            "record_id",
            "tenant_id",
            "action",
            "created_at",
        ]),
        update: Columns::None,
        delete: false,
        why: "rules with per-row audit record each changed row",
    },
    CohortTable {
        name: "retention_holds",
        // Sweeps and erasures check holds; the holds API lists and returns them.
        select: Columns::All,
        insert: Columns::Only(&[
            "hold_id",
            "retained_entity_id",
            "record_id",
            "tenant_id",
            "reason",
            "created_at",
            "expires_at",
            "removed_at",
        ]),
        update: Columns::Only(&["removed_at"]),
        delete: true,
        why: "the holds API creates, removes and prunes holds, and every mutation checks them",
    },
    CohortTable {
        name: "retention_entities",
        // The upsert compares the stored row with the new one.
        select: Columns::All,
        insert: Columns::All,
        update: Columns::Only(&[
            "entity_type",
            "table_schema",
            "table_name",
            "record_id_column",
            "record_id_type",
            "record_id_eq_schema",
            "record_id_eq",
            "tenant_column",
            "registered_at",
            // The fence trigger moves it when the holds API writes a hold.
            "holds_version",
        ]),
        delete: false,
        why: "building a handle registers each retained type's key, which plain-SQL holds are read through; \
              writing a hold moves the type's holds version",
    },
    CohortTable {
        name: "retention_matters",
        // Every mutation reads the matters of the type it changes; the
        // matters API creates, extends and releases them.
        select: Columns::All,
        insert: Columns::Only(&[
            "matter_id",
            "tenant_id",
            "scope_kind",
            "subject",
            "entity_ids",
            "retained_entity_id",
            "anchor_from",
            "anchor_to",
            "reason",
            "owner",
            "created_at",
            "expires_at",
            "released_at",
        ]),
        update: Columns::Only(&["expires_at", "released_at"]),
        delete: false,
        why: "the matters API puts matters on hold, extends and releases them, and every mutation checks them",
    },
    CohortTable {
        name: "retention_disposition_batches",
        // Sweeps freeze batches, void, claim and close them; the
        // disposition API lists them and records decisions on them.
        select: Columns::All,
        insert: Columns::Only(&[
            "batch_id",
            "retained_entity_id",
            "entity_type",
            "category",
            "tenant_id",
            "stage",
            "strategy",
            "rule_hash",
            "rule_content",
            "review",
            "run_id",
            "frozen_at",
            "created_at",
            "row_count",
            "approvers_required",
            "auto_approve_at",
            "status",
        ]),
        update: Columns::Only(&[
            "status",
            "keep_until",
            "carried_run_id",
            "changed_count",
            "held_count",
            "left_count",
            "ineligible_count",
            "decided_at",
        ]),
        delete: false,
        why: "a rule under review makes sweeps freeze disposition batches and carry out approved ones; \
              the disposition API records decisions on them",
    },
    CohortTable {
        name: "retention_disposition_records",
        select: Columns::All,
        insert: Columns::All,
        update: Columns::None,
        delete: false,
        why: "a disposition batch keeps the record ids it froze, which the sweep that carries it out reads",
    },
    CohortTable {
        name: "retention_disposition_decisions",
        // Insert-only; its trigger writes the chain columns and the time.
        select: Columns::All,
        insert: Columns::Only(&[
            "decision_id",
            "batch_id",
            "decision",
            "decided_by",
            "automatic",
            "retained_entity_id",
            "tenant_id",
            "stage",
            "rule_hash",
            "approvers_required",
            "reason",
            "keep_until",
            "run_id",
            "row_count",
            "changed_count",
            "held_count",
            "left_count",
            "ineligible_count",
        ]),
        update: Columns::None,
        delete: false,
        why: "every decision on a disposition batch is a link of the evidence chain",
    },
    CohortTable {
        name: "sweep_worker_lease",
        select: Columns::All,
        insert: Columns::All,
        update: Columns::Only(&["owner_token", "expires_at"]),
        delete: false,
        why: "replicas of the scheduled worker take turns on its lease",
    },
];

/// The columns of `sweep_run_row_detail` the auditor reads: all but
/// `captured_payload` (a snapshot of the row's personal data, kept only
/// until the row's handlers are done).
pub(super) const AUDITOR_ROW_DETAIL: &[&str] = &[
    "detail_id",
    "run_id",
    "retained_entity_id",
    "entity_type",
    "record_id",
    "tenant_id",
    "action",
    "created_at",
    // The evidence chain (contract EV1): the auditor verifies it.
    "chain_payload",
    "chain_seq",
    "chain_prev",
    "chain_hash",
];

/// What row handlers add on Cohort's tables, when any is registered: sweeps
/// write each changed row's detail with its captured snapshots and queue the
/// handlers' work; the dispatcher claims, settles and reclaims work and
/// clears payloads. Keep in step with `handlers::queue` and `ledger::writer`.
pub(super) const HANDLER_TABLES: [CohortTable; 2] = [
    CohortTable {
        name: "sweep_run_row_detail",
        select: Columns::Only(&[
            "detail_id",
            "record_id",
            "action",
            "captured_payload",
            "created_at",
        ]),
        insert: Columns::Only(&["captured_payload"]),
        update: Columns::Only(&["captured_payload"]),
        delete: false,
        why: "row handlers' snapshots live in the row details until their work is done",
    },
    CohortTable {
        name: "sweep_row_handler_status",
        select: Columns::All,
        insert: Columns::Only(&[
            "detail_id",
            "run_id",
            "retained_entity_id",
            "record_id",
            "tenant_id",
            "handler_id",
            "priority",
            "state",
            "attempts",
            "not_before",
            "after_sweep_settled",
            "last_error",
            "created_at",
            "updated_at",
        ]),
        update: Columns::Only(&[
            "state",
            "claim_token",
            "attempts",
            "claim_expires_at",
            "not_before",
            "last_error",
            "updated_at",
        ]),
        delete: false,
        why: "sweeps queue row handlers' work and the dispatcher delivers it",
    },
];

/// What the archive strategy adds on Cohort's tables, when a type of the
/// model may archive (contract SL2).
pub(super) const ARCHIVE_TABLES: [CohortTable; 1] = [CohortTable {
    name: "retention_archive_batches",
    // Each archive batch numbers itself after the summary's last one.
    select: Columns::Only(&["summary_id", "batch"]),
    insert: Columns::Only(&[
        "run_id",
        "summary_id",
        "retained_entity_id",
        "batch",
        "archive_table",
        "row_count",
        "checksum",
        "created_at",
    ]),
    update: Columns::None,
    delete: false,
    why: "each archive batch records its count and checksum (contract SL2)",
}];

/// What event-based retention adds on Cohort's tables, when a category of
/// the model counts from an event (contract SL4).
pub(super) const EVENT_TABLES: [CohortTable; 1] = [CohortTable {
    name: "retention_events",
    // Sweeps probe the events of their rows' keys; the events API records,
    // withdraws (after reading the event under a row lock) and lists them.
    select: Columns::All,
    insert: Columns::Only(&[
        "event_id",
        "event_type",
        "subject_key",
        "tenant_id",
        "occurred_at",
        "recorded_by",
        "recorded_at",
    ]),
    update: Columns::Only(&["withdrawn_at", "withdrawn_by", "withdrawn_reason"]),
    delete: false,
    why: "rules count from events: sweeps read them, the events API records and withdraws them",
}];

/// What the engine needs on Cohort's own tables in `schema` (with row
/// handlers registered, with archiving types, and with event-based rules,
/// what they add).
pub(super) fn cohort_needs(
    schema: &SchemaName,
    row_handlers: bool,
    archives: bool,
    events: bool,
) -> Vec<Need> {
    let mut needs = vec![Need::schema(
        schema.ident().clone(),
        "Cohort's tables are in this schema",
    )];
    let extra: &[CohortTable] = if row_handlers { &HANDLER_TABLES } else { &[] };
    let archive: &[CohortTable] = if archives { &ARCHIVE_TABLES } else { &[] };
    let event: &[CohortTable] = if events { &EVENT_TABLES } else { &[] };
    for t in COHORT_TABLES
        .iter()
        .chain(extra)
        .chain(archive)
        .chain(event)
    {
        let table = schema.table(t.name);
        for (privilege, columns) in [
            (Privilege::Select, t.select),
            (Privilege::Insert, t.insert),
            (Privilege::Update, t.update),
        ] {
            match columns {
                Columns::None => {}
                Columns::All => needs.push(Need::table(&table, privilege, t.why)),
                Columns::Only(cols) => {
                    for &c in cols {
                        needs.push(Need::column(&table, Ident::known(c), privilege, t.why));
                    }
                }
            }
        }
        if t.delete {
            needs.push(Need::table(
                &table,
                Privilege::Delete,
                "Holds::prune deletes inactive holds",
            ));
        }
    }
    needs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cohort_table_in_the_needs_is_one_of_the_five() {
        for t in COHORT_TABLES
            .iter()
            .chain(&HANDLER_TABLES)
            .chain(&ARCHIVE_TABLES)
            .chain(&EVENT_TABLES)
        {
            assert!(crate::schema::TABLES.contains(&t.name), "{}", t.name);
        }
    }
}
