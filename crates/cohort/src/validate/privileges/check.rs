//! The check against the live catalog (SEC2, SEC4): every privilege of
//! [`super::needs`] the runtime role lacks, and row-level security that
//! would hide rows from it, as validation problems.

use sqlx::PgConnection;

use super::needs::*;
use crate::catalog::{self, Ask, RowSecurity, RuntimeRole};
use crate::config::Options;
use crate::error::Error;
use crate::policy::{Capabilities, Strategy};
use crate::schema::SchemaName;
use crate::sql::{Ident, QualifiedName};
use crate::validate::Candidate;
use crate::validate::report::{Issue, Problems, ValidationProblem};

/// Checks the runtime role's privileges (SEC2) and row-level security
/// (SEC4) for every candidate with a table, and on Cohort's tables in
/// `options.schema`. Every missing privilege is one problem.
pub(in crate::validate) async fn check(
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
        let archives = candidates.iter().any(|c| {
            c.capabilities
                .as_ref()
                .is_some_and(|caps| caps.archive_schema().is_some())
        });
        let events = candidates.iter().any(|c| {
            c.capabilities
                .as_ref()
                .is_some_and(|caps| caps.event_types().next().is_some())
        });
        for need in cohort_needs(&schema, row_handlers, archives, events) {
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
pub(super) async fn row_security(
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
pub(super) enum Command {
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

pub(super) const RETAINED_CONSEQUENCE: &str =
    "the engine would silently find no rows and keep data it promised to remove";

pub(super) const COHORT_CONSEQUENCE: &str = "the engine would silently miss rows of Cohort's own table: \
     hidden holds protect nothing, hidden runs and summaries cannot be settled";

/// The commands the engine runs on a retained table, with why: `SELECT`
/// always, `UPDATE` always (row locks, and the UPDATE strategies), `DELETE`
/// for purge.
pub(super) fn retained_commands(caps: &Capabilities) -> Vec<(Command, &'static str)> {
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
pub(super) fn cohort_commands(t: &CohortTable) -> Vec<(Command, &'static str)> {
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

pub(super) fn rls_issues(
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
