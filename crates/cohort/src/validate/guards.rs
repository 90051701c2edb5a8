//! Guarded types (contract H17): triggers on a retained table that make the
//! database itself refuse a `DELETE` of a held row, an `UPDATE` of a held
//! row that changes a column the guard does not allow, and a `TRUNCATE`
//! while any hold of the type is active, for any role and any statement.
//!
//! One trigger function per guarded type, in Cohort's schema, `SECURITY
//! DEFINER` with a fixed `search_path` (so it reads the holds whatever the
//! deleting role may read), and three statement-level triggers on the table:
//! `AFTER DELETE` and `AFTER UPDATE` with transition tables (one join of the
//! statement's old rows with the holds' index per statement, not a probe per
//! row) and `BEFORE TRUNCATE`. Holds are matched as every sweep matches
//! them: the row's record id as text, its tenant, the hold active by the
//! database clock. Cohort's own statements never touch a held row, so they
//! never trip it.
//!
//! [`guard_ddl`] writes the SQL the host applies (like the migrations);
//! [`check`] at build refuses a guarded type whose triggers are missing,
//! disabled or out of date.

use std::fmt;

use sqlx::{PgConnection, Row};
use uuid::Uuid;

use super::Registration;
use super::registry;
use super::report::{Issue, Problems};
use super::roles;
use crate::config::Options;
use crate::error::Error;
use crate::model::EntityDescriptor;
use crate::model::resolved::ResolvedEntity;
use crate::policy::RuleProvider;
use crate::sql::predicates::hold_active_at;
use crate::sql::{Ident, QualifiedName, SchemaName};

/// The guard's three triggers, by name.
pub(crate) const TRIGGERS: [&str; 3] = [
    "cohort_guard_delete",
    "cohort_guard_update",
    "cohort_guard_truncate",
];

/// The SQLSTATE the guard raises: `integrity_constraint_violation`.
pub const GUARD_SQLSTATE: &str = "23000";

/// What one type's guard is made of.
struct GuardSpec {
    entity_id: Uuid,
    /// The retained table.
    table: QualifiedName,
    /// The record-id column.
    key: Ident,
    /// The tenant column; `None` for tenantless types.
    tenant: Option<Ident>,
    /// The anchor column (type matters' windows).
    anchor: Ident,
    /// The erasure-subject columns (subject matters).
    subjects: Vec<Ident>,
    /// Cohort's matters table.
    matters: QualifiedName,
    /// The columns an `UPDATE` of a held row may change.
    allow: Vec<String>,
    /// Cohort's holds table.
    holds: QualifiedName,
    /// The trigger function.
    function: QualifiedName,
}

/// A string literal: quotes doubled (`standard_conforming_strings` is on
/// in every PostgreSQL Cohort supports, and the body sets nothing else).
fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

impl GuardSpec {
    #[allow(clippy::too_many_arguments)]
    fn new(
        schema: &SchemaName,
        entity_id: Uuid,
        table: QualifiedName,
        key: Ident,
        tenant: Option<Ident>,
        anchor: Ident,
        subjects: Vec<Ident>,
        allow: Vec<String>,
    ) -> Option<GuardSpec> {
        let function = Ident::new(&format!("retention_guard_{}", entity_id.simple())).ok()?;
        Some(GuardSpec {
            entity_id,
            table,
            key,
            tenant,
            anchor,
            subjects,
            matters: schema.table("retention_matters"),
            allow,
            holds: schema.table("retention_holds"),
            function: QualifiedName::new(schema.ident().clone(), function),
        })
    }

    /// The trigger function's body: what `pg_proc.prosrc` holds once it is
    /// installed (the build compares them).
    fn body(&self) -> String {
        let active = hold_active_at("pg_catalog.statement_timestamp()");
        let tenant = match &self.tenant {
            Some(c) => format!("h.tenant_id OPERATOR(pg_catalog.=) t.{c}"),
            None => "h.tenant_id IS NULL".to_owned(),
        };
        let allow = if self.allow.is_empty() {
            "ARRAY[]::pg_catalog.text[]".to_owned()
        } else {
            let items: Vec<String> = self.allow.iter().map(|c| literal(c)).collect();
            format!("ARRAY[{}]::pg_catalog.text[]", items.join(", "))
        };
        let key = &self.key;
        let held = format!(
            "h.retained_entity_id OPERATOR(pg_catalog.=) {id}::pg_catalog.uuid \
             AND h.record_id OPERATOR(pg_catalog.=) (t.{key})::pg_catalog.text \
             AND {tenant} AND {active}",
            id = literal(&self.entity_id.to_string()),
        );
        // An UPDATE only counts when it changes a column the guard does not
        // allow; a DELETE always does.
        let changed = format!(
            "NOT EXISTS ( \
               SELECT 1 FROM cohort_new AS n \
                WHERE (n.{key})::pg_catalog.text OPERATOR(pg_catalog.=) (t.{key})::pg_catalog.text \
                  AND (pg_catalog.to_jsonb(n) OPERATOR(pg_catalog.-) {allow}) \
                      OPERATOR(pg_catalog.=) (pg_catalog.to_jsonb(t) OPERATOR(pg_catalog.-) {allow}))"
        );
        // Matters (contract MH1): each live matter of the type's tenant
        // shape, once per statement. A subject is read into each subject
        // column's own type (a `%TYPE` variable; one it cannot hold
        // matches nothing) and compared with the type's `=`.
        let m_tenant = match &self.tenant {
            Some(c) => format!("v_m.tenant_id IS NOT DISTINCT FROM t.{c}"),
            None => "v_m.tenant_id IS NULL".to_owned(),
        };
        let mut declare = String::new();
        let mut reads = String::new();
        let mut any = Vec::new();
        for (i, c) in self.subjects.iter().enumerate() {
            declare.push_str(&format!("  v_s{i} {table}.{c}%TYPE;\n", table = self.table));
            reads.push_str(&format!(
                "    BEGIN v_s{i} := v_m.subject; EXCEPTION WHEN data_exception THEN v_s{i} := NULL; END;\n"
            ));
            any.push(format!("t.{c} = v_s{i}"));
        }
        let subject_match = if any.is_empty() {
            "false".to_owned()
        } else {
            format!("({})", any.join(" OR "))
        };
        let live = "x.created_at OPERATOR(pg_catalog.<=) pg_catalog.statement_timestamp() \
             AND (x.expires_at IS NULL OR x.expires_at OPERATOR(pg_catalog.>) pg_catalog.statement_timestamp()) \
             AND (x.released_at IS NULL OR x.released_at OPERATOR(pg_catalog.>) pg_catalog.statement_timestamp())";
        let covers = format!(
            "((x.scope_kind OPERATOR(pg_catalog.=) 'Type' AND x.retained_entity_id OPERATOR(pg_catalog.=) {id}::pg_catalog.uuid) \
              OR (x.scope_kind OPERATOR(pg_catalog.=) 'Subject' AND (x.entity_ids IS NULL \
                  OR {id}::pg_catalog.uuid OPERATOR(pg_catalog.=) ANY (x.entity_ids))))",
            id = literal(&self.entity_id.to_string()),
        );
        let shape = if self.tenant.is_some() {
            "x.tenant_id IS NOT NULL"
        } else {
            "x.tenant_id IS NULL"
        };
        let anchor = &self.anchor;
        let in_window = format!(
            "(t.{anchor})::pg_catalog.timestamptz OPERATOR(pg_catalog.<@) \
             pg_catalog.tstzrange(v_m.anchor_from, v_m.anchor_to, '[)')"
        );
        let find = |cond: &str, update: bool| {
            let only_changed = if update {
                format!(" AND {changed}")
            } else {
                String::new()
            };
            format!(
                "SELECT (t.{key})::pg_catalog.text INTO v_rid FROM cohort_old AS t \
                 WHERE {m_tenant} AND {cond}{only_changed} LIMIT 1;"
            )
        };
        format!(
            "
DECLARE
  held record;
  v_m record;
  v_rid pg_catalog.text;
{declare}BEGIN
  IF TG_OP OPERATOR(pg_catalog.=) 'TRUNCATE' THEN
    SELECT h.hold_id, h.record_id INTO held FROM {holds} AS h
     WHERE h.retained_entity_id OPERATOR(pg_catalog.=) {id}::pg_catalog.uuid AND {active} LIMIT 1;
    IF held.hold_id IS NULL THEN
      SELECT x.matter_id AS hold_id, NULL::pg_catalog.text AS record_id INTO held FROM {matters} AS x
       WHERE {covers} AND {live} AND {shape} LIMIT 1;
    END IF;
  ELSIF TG_OP OPERATOR(pg_catalog.=) 'DELETE' THEN
    SELECT h.hold_id, h.record_id INTO held FROM cohort_old AS t JOIN {holds} AS h ON {held} LIMIT 1;
  ELSE
    SELECT h.hold_id, h.record_id INTO held FROM cohort_old AS t JOIN {holds} AS h ON {held}
     WHERE {changed}
     LIMIT 1;
  END IF;
  IF held.hold_id IS NOT NULL THEN
    RAISE EXCEPTION USING
      ERRCODE = '{GUARD_SQLSTATE}',
      MESSAGE = pg_catalog.format('cohort guard: %s on %s refused: %s is under legal hold %s',
                                  TG_OP, {table}, COALESCE('row ' OPERATOR(pg_catalog.||) held.record_id, 'the table'),
                                  held.hold_id),
      HINT = 'remove the hold or release the matter (through Cohort, so it is on the evidence chain) first';
  END IF;
  IF TG_OP OPERATOR(pg_catalog.=) 'TRUNCATE' THEN
    RETURN NULL;
  END IF;
  FOR v_m IN SELECT x.matter_id, x.scope_kind, x.subject, x.anchor_from, x.anchor_to, x.tenant_id
               FROM {matters} AS x
              WHERE {covers} AND {live} AND {shape} LOOP
    v_rid := NULL;
{reads}    IF v_m.scope_kind OPERATOR(pg_catalog.=) 'Type' AND TG_OP OPERATOR(pg_catalog.=) 'DELETE' THEN
      {type_delete}
    ELSIF v_m.scope_kind OPERATOR(pg_catalog.=) 'Type' THEN
      {type_update}
    ELSIF TG_OP OPERATOR(pg_catalog.=) 'DELETE' THEN
      {subject_delete}
    ELSE
      {subject_update}
    END IF;
    IF v_rid IS NOT NULL THEN
      RAISE EXCEPTION USING
        ERRCODE = '{GUARD_SQLSTATE}',
        MESSAGE = pg_catalog.format('cohort guard: %s on %s refused: row %s is under matter hold %s',
                                    TG_OP, {table}, v_rid, v_m.matter_id),
        HINT = 'release the matter (through Cohort, so the release is on the evidence chain) first';
    END IF;
  END LOOP;
  RETURN NULL;
END
",
            holds = self.holds,
            matters = self.matters,
            id = literal(&self.entity_id.to_string()),
            table = literal(&self.table.to_string()),
            type_delete = find(&in_window, false),
            type_update = find(&in_window, true),
            subject_delete = find(&subject_match, false),
            subject_update = find(&subject_match, true),
        )
    }

    /// A dollar-quote tag the body does not contain.
    fn tag(body: &str) -> String {
        (0u64..)
            .map(|i| {
                if i == 0 {
                    "$cohort_guard$".to_owned()
                } else {
                    format!("$cohort_guard{i}$")
                }
            })
            .find(|tag| !body.contains(tag.as_str()))
            .unwrap_or_default()
    }

    fn statements(&self) -> Vec<String> {
        let body = self.body();
        let tag = Self::tag(&body);
        let (f, t) = (&self.function, &self.table);
        vec![
            format!(
                "CREATE OR REPLACE FUNCTION {f}() RETURNS trigger LANGUAGE plpgsql \
                 SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS {tag}{body}{tag}"
            ),
            format!("REVOKE ALL ON FUNCTION {f}() FROM PUBLIC"),
            format!("DROP TRIGGER IF EXISTS \"cohort_guard_delete\" ON {t}"),
            format!(
                "CREATE TRIGGER \"cohort_guard_delete\" AFTER DELETE ON {t} \
                 REFERENCING OLD TABLE AS cohort_old FOR EACH STATEMENT EXECUTE FUNCTION {f}()"
            ),
            format!("DROP TRIGGER IF EXISTS \"cohort_guard_update\" ON {t}"),
            format!(
                "CREATE TRIGGER \"cohort_guard_update\" AFTER UPDATE ON {t} \
                 REFERENCING OLD TABLE AS cohort_old NEW TABLE AS cohort_new \
                 FOR EACH STATEMENT EXECUTE FUNCTION {f}()"
            ),
            format!("DROP TRIGGER IF EXISTS \"cohort_guard_truncate\" ON {t}"),
            format!(
                "CREATE TRIGGER \"cohort_guard_truncate\" BEFORE TRUNCATE ON {t} \
                 FOR EACH STATEMENT EXECUTE FUNCTION {f}()"
            ),
        ]
    }
}

/// The SQL that installs the guards of a model's guarded types
/// ([`CohortBuilder::guards`](crate::CohortBuilder::guards)): apply it with
/// the host's migrations, as the table's owner, in one transaction (`psql
/// -1`, or the migration tool's). Re-applying it replaces the guards, so
/// apply it again after changing a type's allowed fields.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GuardDdl {
    statements: Vec<String>,
}

impl GuardDdl {
    /// The statements, in order.
    pub fn statements(&self) -> &[String] {
        &self.statements
    }

    /// The statements as one script, each ending in `;` on its own line.
    pub fn sql(&self) -> String {
        self.to_string()
    }

    /// Whether the model has no guarded type.
    pub fn is_empty(&self) -> bool {
        self.statements.is_empty()
    }
}

impl fmt::Display for GuardDdl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for s in &self.statements {
            writeln!(f, "{s};")?;
        }
        Ok(())
    }
}

/// The guards of `descriptors`' guarded types, from the model alone (no
/// database): the same resolution of tables and columns the build makes.
/// Every problem of the model is an error, as for the grants.
pub fn guard_ddl(
    descriptors: &[&'static EntityDescriptor],
    options: &Options,
    provider: &dyn RuleProvider,
) -> Result<GuardDdl, Error> {
    let option_problems = options.validate();
    let mut problems = Problems::default();
    let anonymisers = super::columns::Anonymisers::new();
    let reg = Registration {
        descriptors,
        options,
        provider,
        anonymisers: &anonymisers,
        row_handlers: false,
        captured: None,
    };
    let registered = registry::register(&reg, &mut problems);
    let schema = SchemaName::new(&options.schema);
    let mut specs = Vec::new();
    for target in &registered.targets {
        let resolved = roles::resolve(target, &options.conventions, &mut problems);
        let Some(allow_fields) = target.descriptor.guard() else {
            continue;
        };
        let column =
            |f: Option<&crate::model::FieldDescriptor>| f.and_then(|f| Ident::new(f.column).ok());
        let mut allow = Vec::new();
        for field in allow_fields {
            match target.descriptor.field(field) {
                Some(f) => allow.push(f.column.to_owned()),
                None => target.problem(
                    &mut problems,
                    None,
                    Issue::new(
                        format!("the guard allows field `{field}`, which the type does not have"),
                        "allow fields of the type (#[cohort(guard_allow)] on a field)",
                    ),
                ),
            }
        }
        let (Some(table), Some(key), Some(entity_id), Ok(schema)) = (
            target.table.clone(),
            column(resolved.record_id),
            target.descriptor.entity_id(),
            &schema,
        ) else {
            continue;
        };
        let tenant = if target.descriptor.tenantless {
            None
        } else {
            column(resolved.tenant)
        };
        let Some(anchor) = column(resolved.anchor) else {
            continue;
        };
        let subjects = resolved
            .subjects
            .iter()
            .filter_map(|f| Ident::new(f.column).ok())
            .collect();
        if let Some(spec) = GuardSpec::new(
            schema, entity_id, table, key, tenant, anchor, subjects, allow,
        ) {
            specs.push(spec);
        }
    }
    match schema {
        Ok(_) if option_problems.is_empty() && problems.is_empty() => {}
        _ => {
            let mut report = problems.into_report();
            report.problems.splice(0..0, option_problems);
            return Err(Error::Validation(report));
        }
    }
    Ok(GuardDdl {
        statements: specs.iter().flat_map(GuardSpec::statements).collect(),
    })
}

/// A guarded type the build resolved: its table's oid, and where its
/// problems go.
pub(super) struct Guarded<'a> {
    pub(super) oid: u32,
    pub(super) entity: &'a ResolvedEntity,
    pub(super) index: usize,
    pub(super) place: &'a super::report::Place,
}

/// At build: every guarded type's three triggers are on its table, enabled,
/// and run the function this model would install (its body compared with
/// the installed `prosrc`). Anything else is a problem of that type.
pub(super) async fn check(
    conn: &mut PgConnection,
    schema: &SchemaName,
    guarded: &[Guarded<'_>],
    problems: &mut Problems,
) -> Result<(), Error> {
    for g in guarded {
        let (oid, e) = (&g.oid, g.entity);
        let Some(allow_fields) = e.descriptor.guard() else {
            continue;
        };
        let allow: Vec<String> = allow_fields
            .iter()
            .filter_map(|f| e.descriptor.field(f).map(|f| f.column.to_owned()))
            .collect();
        let Some(spec) = GuardSpec::new(
            schema,
            e.entity_id,
            e.table.clone(),
            e.record_id.name.clone(),
            e.tenant.as_ref().map(|t| t.name.clone()),
            e.anchor.name.clone(),
            e.subjects.iter().map(|c| c.name.clone()).collect(),
            allow,
        ) else {
            continue;
        };
        let rows = crate::sql::query(
            "SELECT t.tgname::pg_catalog.text AS name, t.tgenabled OPERATOR(pg_catalog.<>) 'D' AS enabled, \
                    p.prosrc, n.nspname::pg_catalog.text AS function_schema, \
                    p.proname::pg_catalog.text AS function_name \
             FROM pg_catalog.pg_trigger t \
             JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) t.tgfoid \
             JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace \
             WHERE t.tgrelid OPERATOR(pg_catalog.=) $1::pg_catalog.oid \
               AND t.tgname::pg_catalog.text OPERATOR(pg_catalog.=) ANY ($2::pg_catalog.text[])",
        )
        .bind(i64::from(*oid))
        .bind(TRIGGERS.map(str::to_owned).to_vec())
        .fetch_all(&mut *conn)
        .await?;
        let body = spec.body();
        let mut wrong: Vec<String> = Vec::new();
        for name in TRIGGERS {
            let found = rows
                .iter()
                .find(|r| r.try_get::<String, _>("name").ok().as_deref() == Some(name));
            match found {
                None => wrong.push(format!("trigger {name} is missing")),
                Some(r) => {
                    if !r.try_get::<bool, _>("enabled")? {
                        wrong.push(format!("trigger {name} is disabled"));
                    }
                    let installed: String = r.try_get("prosrc")?;
                    let fschema: String = r.try_get("function_schema")?;
                    let fname: String = r.try_get("function_name")?;
                    if installed != body
                        || fschema != spec.function.schema.as_str()
                        || fname != spec.function.name.as_str()
                    {
                        wrong.push(format!(
                            "trigger {name} runs another or an older guard function"
                        ));
                    }
                }
            }
        }
        wrong.dedup();
        if !wrong.is_empty() {
            problems.push(
                g.index,
                g.place.problem(
                    None,
                    Issue::new(
                        format!(
                            "the type is guarded (#[cohort(guard)]) but its guard on {} is not installed as this \
                             model would install it: {}",
                            e.table,
                            wrong.join("; ")
                        ),
                        "apply the SQL of CohortBuilder::guards() (`cohort schema guards`) as the table's owner",
                    ),
                ),
            );
        }
    }
    Ok(())
}
