//! The `GRANT`s that give a role exactly what [`super::needs`] lists.

use std::fmt;

use super::needs::*;
use crate::catalog::Privilege;
use crate::config::Options;
use crate::error::Error;
use crate::model::EntityDescriptor;
use crate::policy::RuleProvider;
use crate::schema::SchemaName;
use crate::sql::Ident;
use crate::validate::Registration;
use crate::validate::registry::{self};
use crate::validate::report::Problems;
use crate::validate::roles::{self};
use crate::validate::strategies;

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
    let anonymisers = crate::validate::columns::Anonymisers::new();
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
    let mut archives = false;
    let mut events = false;
    for target in registered.targets {
        let resolved = roles::resolve(&target, &options.conventions, &mut problems);
        let capabilities = provider.capabilities(target.category);
        for issue in strategies::check(target.category, capabilities.as_ref(), &resolved) {
            target.problem(&mut problems, None, issue);
        }
        if let Some(caps) = &capabilities {
            archives |= caps.archive_schema().is_some();
            events |= caps.event_types().next().is_some();
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
    let mut all = cohort_needs(&schema, roles.row_handlers, archives, events);
    let cohort_tables = all.split_off(1);
    all.extend(needs);
    all.extend(cohort_tables);
    statements.extend(render(&all, &roles.sweeper));
    if let Some(a) = &roles.auditor {
        statements.extend(auditor_grants(&schema, a));
    }
    Ok(RoleGrants { statements })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Privilege;
    use crate::sql::{Ident, QualifiedName};

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
}
