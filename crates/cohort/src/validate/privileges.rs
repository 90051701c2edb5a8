//! Least privilege (SEC1, SEC2, SEC4): what the runtime role needs, checked
//! at build, and the `GRANT`s that give exactly that.
//!
//! One description of what the engine does ([`type_needs`] for a retained
//! type, [`COHORT_TABLES`] for Cohort's own tables) serves both directions:
//! [`check`] asks the live database whether the role the handle runs as has
//! each privilege (every missing one is a validation problem, with the
//! `GRANT` that fixes it), and [`role_grants`] writes the grants for a role
//! that does not exist yet. So the generated grants are exactly what the
//! build checks, no more, no less. `docs/security.md` explains each one.
//!
//! [`check`] also reports a retained table whose row-level security would
//! hide rows from the role (SEC4): a sweep that silently sees no rows keeps
//! data it promised to remove.

use std::fmt;

use sqlx::PgConnection;

use super::Candidate;
use super::Registration;
use super::registry::{self, Target};
use super::report::{Issue, Problems, ValidationProblem};
use super::roles::{self, Roles};
use super::strategies;
use crate::catalog::{self, Ask, Privilege, RowSecurity, RuntimeRole};
use crate::config::Options;
use crate::error::Error;
use crate::model::{AnonymiseMethod, EntityDescriptor};
use crate::policy::{Capabilities, RuleProvider, Strategy};
use crate::schema::SchemaName;
use crate::sql::{Ident, QualifiedName};

/// Where problems about Cohort's own tables are filed: after every type's.
const COHORT_TABLES_INDEX: usize = usize::MAX;

/// What a privilege is on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Object {
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
struct Need {
    object: Object,
    privilege: Privilege,
    why: String,
}

impl Need {
    fn schema(schema: Ident, why: impl Into<String>) -> Need {
        Need {
            object: Object::Schema(schema),
            privilege: Privilege::Usage,
            why: why.into(),
        }
    }

    fn table(table: &QualifiedName, privilege: Privilege, why: impl Into<String>) -> Need {
        Need {
            object: Object::Table(table.clone()),
            privilege,
            why: why.into(),
        }
    }

    fn column(
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
    fn grant(&self, role: &Ident) -> String {
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
    fn table_name(&self) -> Option<String> {
        match &self.object {
            Object::Schema(_) => None,
            Object::Table(t) | Object::Column(t, _) | Object::AnyColumn(t, _) => {
                Some(format!("{}.{}", t.schema.as_str(), t.name.as_str()))
            }
        }
    }

    /// The column concerned: for "any column", the one the fix grants.
    fn column_name(&self) -> Option<&str> {
        match &self.object {
            Object::Column(_, c) | Object::AnyColumn(_, c) => Some(c.as_str()),
            _ => None,
        }
    }

    fn ask(&self) -> Ask<'_> {
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
    fn missing(&self, role: &str) -> String {
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
fn ident(column: &str) -> Option<Ident> {
    Ident::new(column).ok()
}

/// Why the engine reads the system columns.
const ROW_ADDRESS: &str = "the engine addresses the rows a batch locked by (tableoid, ctid)";

/// Why purge-only types need `UPDATE` on a column.
const ROW_LOCKS: &str = "PostgreSQL allows row locks (SELECT ... FOR UPDATE / FOR SHARE, which \
     erasure, hold creation, host deletion and a sweep's row-by-row path take) only to a role \
     with UPDATE on at least one column of the table; the engine never writes this column";

/// Everything the engine does to one retained type's table, for the union of
/// the strategies its category may resolve to (P3): which columns it reads,
/// which it writes, whether it deletes. `None` when the table has no name an
/// identifier can carry (reported elsewhere).
/// Whether row handlers capture `target`'s rows: `handlers` is whether any
/// is registered and, when known, which types they are for.
fn captures(target: &Target, handlers: (bool, Option<&[uuid::Uuid]>)) -> bool {
    match handlers {
        (false, _) => false,
        (true, None) => true,
        (true, Some(types)) => target
            .descriptor
            .entity_id()
            .is_some_and(|id| types.contains(&id)),
    }
}

fn type_needs(target: &Target, roles: &Roles, caps: &Capabilities, captured: bool) -> Vec<Need> {
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
    let soft_delete = caps.allows(Strategy::SoftDelete);
    let anonymise = caps.allows(Strategy::Anonymise);
    if soft_delete {
        select(
            roles.soft_delete,
            "soft-delete skips rows whose flag is already set",
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
enum Columns {
    /// Not needed.
    None,
    /// The whole table.
    All,
    /// These columns.
    Only(&'static [&'static str]),
}

/// What the engine does to one of Cohort's tables.
#[derive(Debug)]
struct CohortTable {
    name: &'static str,
    select: Columns,
    insert: Columns,
    update: Columns,
    delete: bool,
    why: &'static str,
}

/// What the engine does to Cohort's tables today (read from `ledger::writer`,
/// `run::execute` and `holds::statements`). Keep in step with them: the test
/// suite runs as a role granted exactly this (`COHORT_TEST_ROLE=least`).
const COHORT_TABLES: [CohortTable; 6] = [
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
const AUDITOR_ROW_DETAIL: &[&str] = &[
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
const HANDLER_TABLES: [CohortTable; 2] = [
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

/// What the engine needs on Cohort's own tables in `schema` (with row
/// handlers registered, what they add).
fn cohort_needs(schema: &SchemaName, row_handlers: bool) -> Vec<Need> {
    let mut needs = vec![Need::schema(
        schema.ident().clone(),
        "Cohort's tables are in this schema",
    )];
    let extra: &[CohortTable] = if row_handlers { &HANDLER_TABLES } else { &[] };
    for t in COHORT_TABLES.iter().chain(extra) {
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

/// Checks the runtime role's privileges (SEC2) and row-level security
/// (SEC4) for every candidate with a table, and on Cohort's tables in
/// `options.schema`. Every missing privilege is one problem.
pub(super) async fn check(
    conn: &mut PgConnection,
    options: &Options,
    handlers: (bool, Option<&[uuid::Uuid]>),
    candidates: &[Candidate<'_>],
    problems: &mut Problems,
) -> Result<(), Error> {
    let row_handlers = handlers.0;
    let role = catalog::runtime_role(conn).await?;
    if role.superuser {
        return Ok(());
    }
    let role_ident = Ident::new(&role.name).unwrap_or_else(|_| Ident::known("current_user"));

    // (who: a candidate's position, or the Cohort tables), the need.
    let mut needs: Vec<(Option<&Candidate<'_>>, Need)> = Vec::new();
    let mut schemas_seen: Vec<Ident> = Vec::new();
    for c in candidates {
        if c.table.is_none() {
            continue;
        }
        let Some(caps) = &c.capabilities else {
            continue;
        };
        for need in type_needs(&c.target, &c.roles, caps, captures(&c.target, handlers)) {
            // USAGE on a schema is one privilege: reported once.
            if let Object::Schema(s) = &need.object {
                if schemas_seen.contains(s) {
                    continue;
                }
                schemas_seen.push(s.clone());
            }
            needs.push((Some(c), need));
        }
    }
    if let Ok(schema) = SchemaName::new(&options.schema) {
        for need in cohort_needs(&schema, row_handlers) {
            if let Object::Schema(s) = &need.object {
                if schemas_seen.contains(s) {
                    continue;
                }
                schemas_seen.push(s.clone());
            }
            needs.push((None, need));
        }
    }

    let asks: Vec<Ask<'_>> = needs.iter().map(|(_, n)| n.ask()).collect();
    let granted = catalog::privileges(conn, &asks).await?;
    for ((who, need), granted) in needs.iter().zip(granted) {
        // None: the object does not exist, which other checks report.
        if granted != Some(false) {
            continue;
        }
        let issue = Issue::new(need.missing(&role.name), need.grant(&role_ident));
        match who {
            Some(c) => c.target.problem(problems, need.column_name(), issue),
            None => problems.push(
                COHORT_TABLES_INDEX,
                ValidationProblem {
                    table: need.table_name(),
                    column: need.column_name().map(str::to_owned),
                    ..ValidationProblem::general(issue.problem, issue.fix)
                },
            ),
        }
    }

    // The schemas of key and subject types (an extension's `citext`, a
    // domain): the engine writes their names in casts and operators.
    let mut columns: Vec<(&Candidate<'_>, u32, &str)> = Vec::new();
    for c in candidates {
        let Some(table) = c.table else { continue };
        if c.capabilities.is_none() {
            continue;
        }
        for f in c.roles.record_id.iter().chain(c.roles.subjects.iter()) {
            columns.push((c, table.oid, f.column));
        }
    }
    let asked: Vec<(u32, &str)> = columns.iter().map(|(_, oid, col)| (*oid, *col)).collect();
    for found in catalog::type_schemas(conn, &asked).await? {
        let Some((c, _, column)) = columns.get(found.index) else {
            continue;
        };
        let Ok(schema) = Ident::new(&found.schema) else {
            continue;
        };
        if found.usage || schemas_seen.contains(&schema) {
            continue;
        }
        schemas_seen.push(schema.clone());
        let need = Need::schema(
            schema,
            format!(
                "the engine names the type of column {column} (or its equality operator),                  which lives in this schema, in casts and comparisons"
            ),
        );
        c.target.problem(
            problems,
            Some(column),
            Issue::new(need.missing(&role.name), need.grant(&role_ident)),
        );
    }

    row_security(conn, &role, &role_ident, options, candidates, problems).await
}

/// SEC4: a retained table whose row-level security applies to the role must
/// have a permissive policy for the role for every command the engine runs
/// on it, or the engine would silently see (and so change) no rows. The same
/// holds for Cohort's own tables: holds hidden from the role would not
/// protect their rows.
async fn row_security(
    conn: &mut PgConnection,
    role: &RuntimeRole,
    role_ident: &Ident,
    options: &Options,
    candidates: &[Candidate<'_>],
    problems: &mut Problems,
) -> Result<(), Error> {
    if role.bypass_rls {
        return Ok(());
    }
    let with_table: Vec<(&Candidate<'_>, u32)> = candidates
        .iter()
        .filter_map(|c| c.table.map(|t| (c, t.oid)))
        .collect();
    let oids: Vec<u32> = with_table.iter().map(|(_, oid)| *oid).collect();
    let found = catalog::row_security(conn, &oids).await?;
    for ((c, _), rls) in with_table.iter().zip(found) {
        let Some(rls) = rls else { continue };
        let (Some(table), Some(caps)) = (&c.target.table, &c.capabilities) else {
            continue;
        };
        let commands = retained_commands(caps);
        for issue in rls_issues(&rls, table, &commands, RETAINED_CONSEQUENCE, role_ident) {
            c.target.problem(problems, None, issue);
        }
    }

    // Cohort's own tables.
    let Ok(schema) = SchemaName::new(&options.schema) else {
        return Ok(());
    };
    let names: Vec<(String, String)> = COHORT_TABLES
        .iter()
        .map(|t| (schema.as_str().to_owned(), t.name.to_owned()))
        .collect();
    let lookups = catalog::lookup_tables(conn, &names).await?;
    let mut tables: Vec<(&CohortTable, u32)> = Vec::new();
    for (t, lookup) in COHORT_TABLES.iter().zip(&lookups) {
        if let catalog::RelationLookup::Table(found) = lookup {
            tables.push((t, found.oid));
        }
    }
    let oids: Vec<u32> = tables.iter().map(|(_, oid)| *oid).collect();
    let found = catalog::row_security(conn, &oids).await?;
    for ((t, _), rls) in tables.iter().zip(found) {
        let Some(rls) = rls else { continue };
        let table = schema.table(t.name);
        let commands = cohort_commands(t);
        for issue in rls_issues(&rls, &table, &commands, COHORT_CONSEQUENCE, role_ident) {
            problems.push(
                COHORT_TABLES_INDEX,
                ValidationProblem {
                    table: Some(format!("{}.{}", schema.as_str(), t.name)),
                    ..ValidationProblem::general(issue.problem, issue.fix)
                },
            );
        }
    }
    Ok(())
}

/// A command a row-level-security policy is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Command {
    Select,
    Insert,
    Update,
    Delete,
}

impl Command {
    fn keyword(self) -> &'static str {
        match self {
            Command::Select => "SELECT",
            Command::Insert => "INSERT",
            Command::Update => "UPDATE",
            Command::Delete => "DELETE",
        }
    }

    /// Whether a permissive policy for this command applies to the role.
    fn covered(self, rls: &RowSecurity) -> bool {
        match self {
            Command::Select => rls.select,
            Command::Insert => rls.insert,
            Command::Update => rls.update,
            Command::Delete => rls.delete,
        }
    }
}

const RETAINED_CONSEQUENCE: &str =
    "the engine would silently find no rows and keep data it promised to remove";

const COHORT_CONSEQUENCE: &str = "the engine would silently miss rows of Cohort's own table: \
     hidden holds protect nothing, hidden runs and summaries cannot be settled";

/// The commands the engine runs on a retained table, with why: `SELECT`
/// always, `UPDATE` always (row locks, and the UPDATE strategies), `DELETE`
/// for purge.
fn retained_commands(caps: &Capabilities) -> Vec<(Command, &'static str)> {
    let mut commands = vec![
        (
            Command::Select,
            "every sweep, preview, erasure and hold reads the table's rows",
        ),
        (
            Command::Update,
            "row locks (FOR UPDATE / FOR SHARE) pass only rows an UPDATE policy admits, and \
             soft-delete and anonymise update rows",
        ),
    ];
    if caps.allows(Strategy::Purge) {
        commands.push((Command::Delete, "purge deletes rows"));
    }
    commands
}

/// The commands the engine runs on one of Cohort's tables.
fn cohort_commands(t: &CohortTable) -> Vec<(Command, &'static str)> {
    let mut commands = Vec::new();
    let used = |c: Columns| !matches!(c, Columns::None);
    if used(t.select) {
        commands.push((Command::Select, t.why));
    }
    if used(t.insert) {
        commands.push((Command::Insert, t.why));
    }
    if used(t.update) {
        commands.push((Command::Update, t.why));
    }
    if t.delete {
        commands.push((Command::Delete, t.why));
    }
    commands
}

fn rls_issues(
    rls: &RowSecurity,
    table: &QualifiedName,
    commands: &[(Command, &str)],
    consequence: &str,
    role_ident: &Ident,
) -> Vec<Issue> {
    if !rls.active {
        return Vec::new();
    }
    let enabled = if rls.forced {
        "enabled and forced"
    } else {
        "enabled"
    };
    let role = role_ident.as_str();
    let mut issues = Vec::new();
    for &(command, why) in commands {
        if command.covered(rls) {
            continue;
        }
        let keyword = command.keyword();
        let policy = Ident::new(&format!(
            "cohort_{}_{}",
            keyword.to_ascii_lowercase(),
            role.chars().take(40).collect::<String>()
        ))
        .unwrap_or_else(|_| Ident::known("cohort_sweeper"));
        let using = match command {
            Command::Insert => "WITH CHECK (true)",
            _ => "USING (true)",
        };
        issues.push(Issue::new(
            format!(
                "row-level security is {enabled} on the table, the role {role} does not bypass it \
                 (not a superuser, not BYPASSRLS, not the owner of an unforced table) and no \
                 permissive policy FOR {keyword} (or FOR ALL) applies to it: {why}, so \
                 {consequence}"
            ),
            format!(
                "CREATE POLICY {policy} ON {table} FOR {keyword} TO {role_ident} {using}, \
                 or give the role BYPASSRLS: ALTER ROLE {role_ident} BYPASSRLS"
            ),
        ));
    }
    issues
}

/// The roles [`role_grants`] writes grants for.
///
/// ```
/// use cohort::schema::RoleNames;
/// let roles = RoleNames::new("cohort_sweeper")?
///     .with_auditor("cohort_auditor")?
///     .create_if_missing();
/// assert_eq!(roles.sweeper(), "cohort_sweeper");
/// assert_eq!(roles.auditor(), Some("cohort_auditor"));
/// # Ok::<(), cohort::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleNames {
    sweeper: Ident,
    auditor: Option<Ident>,
    create: bool,
    row_handlers: bool,
    /// The types row handlers capture, when known (the builder's grants).
    captured: Option<Vec<uuid::Uuid>>,
}

fn role_ident(name: &str) -> Result<Ident, Error> {
    Ident::new(name).map_err(|problem| Error::InvalidIdentifier {
        what: "role",
        name: name.escape_default().to_string(),
        problem,
    })
}

impl RoleNames {
    /// The sweeping role: the role the handle's pool runs as.
    pub fn new(sweeper: &str) -> Result<RoleNames, Error> {
        Ok(RoleNames {
            sweeper: role_ident(sweeper)?,
            auditor: None,
            create: false,
            row_handlers: false,
            captured: None,
        })
    }

    /// Also grants a read-only auditor role: `SELECT` on Cohort's tables
    /// (not on captured row payloads), nothing on host tables.
    pub fn with_auditor(mut self, auditor: &str) -> Result<RoleNames, Error> {
        self.auditor = Some(role_ident(auditor)?);
        Ok(self)
    }

    /// Also grants what row handlers need (their queue, their payloads, and
    /// `SELECT` on every column of the tables whose rows they capture), for
    /// a model that registers any. Here every retained table is taken as
    /// captured; [`crate::CohortBuilder::grants`] knows which are and grants
    /// exactly those.
    pub fn with_row_handlers(mut self) -> RoleNames {
        self.row_handlers = true;
        self
    }

    /// [`RoleNames::with_row_handlers`] for handlers of these retained types.
    pub(crate) fn with_row_handlers_for(mut self, types: Vec<uuid::Uuid>) -> RoleNames {
        self.row_handlers = true;
        self.captured = Some(types);
        self
    }

    /// Also creates the roles (`NOLOGIN`) when they do not exist yet.
    pub fn create_if_missing(mut self) -> RoleNames {
        self.create = true;
        self
    }

    /// The sweeping role's name.
    pub fn sweeper(&self) -> &str {
        self.sweeper.as_str()
    }

    /// The auditor role's name, when one is asked for.
    pub fn auditor(&self) -> Option<&str> {
        self.auditor.as_ref().map(Ident::as_str)
    }
}

/// The SQL that creates (on request) and grants the sweeping and auditor
/// roles, from [`role_grants`] or [`crate::CohortBuilder::grants`]. Run it as
/// a role that may grant on every table concerned (their owner, or a
/// superuser), in the host's migrations or by hand.
///
/// Its `Display` is the whole script, one statement per line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleGrants {
    statements: Vec<String>,
}

impl RoleGrants {
    /// Each statement, without a trailing semicolon, in the order to run them.
    pub fn statements(&self) -> &[String] {
        &self.statements
    }

    /// The whole script: every statement ending with `;`, one per line.
    pub fn sql(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for RoleGrants {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for s in &self.statements {
            writeln!(f, "{s};")?;
        }
        Ok(())
    }
}

/// `name` as an escape-string literal (`E'...'`), which reads the same
/// whatever `standard_conforming_strings` is.
fn literal(name: &str) -> String {
    format!("E'{}'", name.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// `CREATE ROLE <role> NOLOGIN` unless a role of that name exists.
fn create_role(role: &Ident) -> String {
    // A dollar-quote tag the name cannot end early.
    let mut tag = "cohort".to_owned();
    while role.as_str().contains(&format!("${tag}$")) {
        tag.push('_');
    }
    format!(
        "DO ${tag}$ BEGIN IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles \
         WHERE rolname OPERATOR(pg_catalog.=) {lit}) THEN CREATE ROLE {role} NOLOGIN; \
         END IF; END ${tag}$",
        lit = literal(role.as_str())
    )
}

/// Merges needs into `GRANT` statements: one per object and privilege, with
/// the columns of column-level grants listed together.
fn render(needs: &[Need], role: &Ident) -> Vec<String> {
    // (object key, privilege) -> columns (empty for table and schema grants).
    let mut grants: Vec<(Object, Privilege, Vec<Ident>)> = Vec::new();
    for need in needs {
        let (key, column) = match &need.object {
            Object::Column(t, c) | Object::AnyColumn(t, c) => {
                (Object::Table(t.clone()), Some(c.clone()))
            }
            other => (other.clone(), None),
        };
        let column_level = column.is_some();
        let found = grants.iter_mut().find(|(k, p, cols)| {
            *k == key && *p == need.privilege && cols.is_empty() != column_level
        });
        match (found, column) {
            (Some((_, _, cols)), Some(c)) => {
                if !cols.contains(&c) {
                    cols.push(c);
                }
            }
            (Some(_), None) => {}
            (None, column) => grants.push((key, need.privilege, column.into_iter().collect())),
        }
    }
    grants
        .into_iter()
        .map(|(object, privilege, cols)| {
            let p = privilege.keyword();
            match object {
                Object::Schema(s) => format!("GRANT USAGE ON SCHEMA {s} TO {role}"),
                Object::Table(t) | Object::Column(t, _) | Object::AnyColumn(t, _) => {
                    if cols.is_empty() {
                        format!("GRANT {p} ON TABLE {t} TO {role}")
                    } else {
                        let cols: Vec<String> = cols.iter().map(Ident::to_string).collect();
                        format!("GRANT {p} ({}) ON TABLE {t} TO {role}", cols.join(", "))
                    }
                }
            }
        })
        .collect()
}

/// The auditor's grants on Cohort's tables in `schema`.
fn auditor_grants(schema: &SchemaName, role: &Ident) -> Vec<String> {
    let mut out = vec![format!(
        "GRANT USAGE ON SCHEMA {} TO {role}",
        schema.ident()
    )];
    for t in crate::schema::TABLES {
        let table = schema.table(t);
        if t == "sweep_run_row_detail" {
            let cols: Vec<String> = AUDITOR_ROW_DETAIL
                .iter()
                .map(|c| Ident::known(c).to_string())
                .collect();
            out.push(format!(
                "GRANT SELECT ({}) ON TABLE {table} TO {role}",
                cols.join(", ")
            ));
        } else {
            out.push(format!("GRANT SELECT ON TABLE {table} TO {role}"));
        }
    }
    out
}

/// The SQL that gives `roles` exactly what Cohort needs for this model (SEC1):
/// the sweeping role gets what [`crate::CohortBuilder::build`] checks for
/// every registered retained type (per the strategies its category declares)
/// and on Cohort's tables in `options.schema`; the auditor, when asked for,
/// reads Cohort's tables. Nothing is read from the database, so a host can
/// generate the grants before the role exists.
///
/// Fails with [`Error::Validation`] when the registration itself is invalid
/// (what build would report before looking at the database: no retained
/// types, missing role fields, undeclared capabilities, bad names).
///
/// The grants cover table and column privileges and `USAGE` on the schemas of
/// Cohort's and the retained tables. Two things depend on the live database
/// and are left to the build check: `USAGE` on the schema of an extension
/// type a key or subject column uses (for example `citext` installed outside
/// `public`), and row-level security (see `docs/security.md`).
pub fn role_grants(
    descriptors: &[&'static EntityDescriptor],
    options: &Options,
    provider: &dyn RuleProvider,
    roles: &RoleNames,
) -> Result<RoleGrants, Error> {
    let option_problems = options.validate();
    let mut problems = Problems::default();
    // Which anonymiser a field names does not change what it needs.
    let anonymisers = super::columns::Anonymisers::new();
    let reg = Registration {
        descriptors,
        options,
        provider,
        anonymisers: &anonymisers,
        row_handlers: roles.row_handlers,
        captured: roles.captured.as_deref(),
    };
    let registered = registry::register(&reg, &mut problems);
    let mut needs = Vec::new();
    for target in registered.targets {
        let resolved = roles::resolve(&target, &options.conventions, &mut problems);
        let capabilities = provider.capabilities(target.category);
        for issue in strategies::check(target.category, capabilities.as_ref(), &resolved) {
            target.problem(&mut problems, None, issue);
        }
        if let Some(caps) = &capabilities {
            let captured = captures(&target, (roles.row_handlers, roles.captured.as_deref()));
            needs.extend(type_needs(&target, &resolved, caps, captured));
        }
    }
    // An invalid schema name is among the option problems.
    let schema = SchemaName::new(&options.schema);
    let schema = match schema {
        Ok(schema) if option_problems.is_empty() && problems.is_empty() => schema,
        _ => {
            let mut report = problems.into_report();
            report.problems.splice(0..0, option_problems);
            return Err(Error::Validation(report));
        }
    };
    let mut statements = Vec::new();
    if roles.create {
        statements.push(create_role(&roles.sweeper));
        if let Some(a) = &roles.auditor {
            statements.push(create_role(a));
        }
    }
    // Cohort's schema first, then the retained tables, then Cohort's tables.
    let mut all = cohort_needs(&schema, roles.row_handlers);
    let cohort_tables = all.split_off(1);
    all.extend(needs);
    all.extend(cohort_tables);
    statements.extend(render(&all, &roles.sweeper));
    if let Some(a) = &roles.auditor {
        statements.extend(auditor_grants(&schema, a));
    }
    Ok(RoleGrants { statements })
}

/// The security guide (`docs/security.md`), compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../../docs/security.md")]
pub struct SecurityGuide;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_role_literal_reads_the_same_under_any_string_setting() {
        assert_eq!(literal(r"a'b\c"), r"E'a\'b\\c'");
        let role = Ident::new("x$cohort$y").expect("valid");
        let sql = create_role(&role);
        assert!(sql.starts_with("DO $cohort_$"), "{sql}");
        assert!(sql.contains(r#"CREATE ROLE "x$cohort$y" NOLOGIN"#));
    }

    #[test]
    fn column_grants_of_one_table_and_privilege_are_merged() {
        let t = QualifiedName::new(Ident::known("public"), Ident::known("t"));
        let role = Ident::known("r");
        let needs = vec![
            Need::schema(Ident::known("public"), "x"),
            Need::column(&t, Ident::known("a"), Privilege::Select, "x"),
            Need::column(&t, Ident::known("b"), Privilege::Select, "x"),
            Need::column(&t, Ident::known("a"), Privilege::Select, "x"),
            Need::table(&t, Privilege::Delete, "x"),
            Need::schema(Ident::known("public"), "x"),
        ];
        assert_eq!(
            render(&needs, &role),
            vec![
                r#"GRANT USAGE ON SCHEMA "public" TO "r""#,
                r#"GRANT SELECT ("a", "b") ON TABLE "public"."t" TO "r""#,
                r#"GRANT DELETE ON TABLE "public"."t" TO "r""#,
            ]
        );
    }

    #[test]
    fn every_cohort_table_in_the_needs_is_one_of_the_five() {
        for t in COHORT_TABLES.iter().chain(&HANDLER_TABLES) {
            assert!(crate::schema::TABLES.contains(&t.name), "{}", t.name);
        }
    }
}
