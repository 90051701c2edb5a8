//! Readiness: proving from `pg_catalog` that Cohort's tables have the shape it
//! relies on, at the schema version it needs. Every problem is collected
//! before reporting. What is required comes from the table spec
//! ([`super::spec`]), the same one the migrations' DDL is rendered from.

use std::collections::{BTreeMap, BTreeSet};

use sqlx::{PgConnection, Row};

use super::SchemaName;
use super::ddl::parse_version_marker;
use super::migrations::{MigrationId, SCHEMA_VERSION, migration_ids};
use super::spec::{
    FUNCTION_SEARCH_PATH, FunctionSpec, TABLES as SPEC, TableSpec, TriggerSpec, VERSION_TABLE,
};
use crate::error::Error;
pub use crate::error::readiness::{ReadinessProblem, ReadinessReport, ReadinessWarning};
use crate::sql::Pinned;

/// An index or key as the catalog has it (valid, ready indexes only).
struct IndexInfo {
    table: String,
    columns: Vec<String>,
    unique: bool,
    primary: bool,
    partial_or_expression: bool,
    deferrable: bool,
}

/// A function of the schema, taking no arguments.
struct FunctionInfo {
    language: String,
    body: String,
    config: Option<Vec<String>>,
    returns_trigger: bool,
    security_definer: bool,
}

/// A user trigger on one of the tables, with the function it calls.
struct TriggerInfo {
    table: String,
    name: String,
    /// `pg_trigger.tgenabled`: `O` (origin and local), `A` (always), `R`
    /// (replica only), `D` (disabled).
    enabled: String,
    /// `pg_trigger.tgtype` bits.
    kind: i16,
    on_some_columns: bool,
    has_when: bool,
    function_schema: String,
    function_name: String,
    function_args: i16,
}

// pg_trigger.tgtype bits (PostgreSQL's catalog/pg_trigger.h).
const TRIGGER_TYPE_ROW: i16 = 1;

const TRIGGER_TYPE_BEFORE: i16 = 1 << 1;
const TRIGGER_TYPE_INSERT: i16 = 1 << 2;
const TRIGGER_TYPE_DELETE: i16 = 1 << 3;
const TRIGGER_TYPE_UPDATE: i16 = 1 << 4;

/// What Cohort read from the catalog.
struct Catalog {
    tables: BTreeSet<String>,
    columns: BTreeMap<(String, String), (String, bool)>,
    checks: BTreeSet<(String, String)>,
    indexes: Vec<IndexInfo>,
    functions: BTreeMap<String, FunctionInfo>,
    triggers: Vec<TriggerInfo>,
}

/// Reads the catalog and reports whether Cohort's five tables in `schema`
/// are at the schema version this library needs and have every column, key,
/// unique index, CHECK constraint and trigger Cohort relies on.
///
/// The installed version is the one recorded in the comment on `sweep_run`
/// (each migration ends by setting it); a database at an older version (or
/// with no marker) is not ready, and the report names the missing migrations
/// ([`ReadinessReport::missing_migrations`]). Invalid indexes (left by a
/// failed `CREATE INDEX CONCURRENTLY`) count for nothing. Missing speed-only
/// indexes and a schema newer than this library are returned as warnings
/// and logged with `tracing::warn!`.
///
/// The check runs in a transaction of its own (a savepoint when `conn` is
/// already in one) with `search_path` pinned to `pg_catalog`, and reads only
/// `pg_catalog`, so a hostile `search_path` or a same-named table in another
/// schema cannot change the answer.
pub async fn check_readiness(
    conn: &mut PgConnection,
    schema: &SchemaName,
) -> Result<ReadinessReport, Error> {
    let mut tx = Pinned::begin(conn).await?;
    let read = async {
        let catalog = read_catalog(tx.conn(), schema).await?;
        let marker = read_version_marker(tx.conn(), schema).await?;
        Ok::<_, sqlx::Error>((catalog, marker))
    }
    .await;
    let (catalog, marker) = tx.finish(read).await?;

    let report = judge(schema, &catalog, marker.as_deref());
    for w in &report.warnings {
        tracing::warn!(schema = schema.as_str(), "{w}");
    }
    Ok(report)
}

async fn read_version_marker(
    conn: &mut PgConnection,
    schema: &SchemaName,
) -> Result<Option<String>, sqlx::Error> {
    crate::sql::query_scalar(
        "SELECT d.description \
         FROM pg_catalog.pg_description d \
         JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) d.objoid \
         JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace \
         WHERE d.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass::pg_catalog.oid \
           AND d.objsubid OPERATOR(pg_catalog.=) 0 \
           AND n.nspname OPERATOR(pg_catalog.=) $1::text::pg_catalog.name \
           AND c.relname OPERATOR(pg_catalog.=) $2::text::pg_catalog.name \
           AND c.relkind OPERATOR(pg_catalog.=) ANY (ARRAY['r', 'p']::\"char\"[])",
    )
    .bind(schema.as_str())
    .bind(VERSION_TABLE)
    .fetch_optional(&mut *conn)
    .await
}

async fn read_catalog(
    conn: &mut PgConnection,
    schema: &SchemaName,
) -> Result<Catalog, sqlx::Error> {
    let names: Vec<&str> = SPEC.iter().map(|t| t.name).collect();
    let function_names: Vec<&str> = SPEC
        .iter()
        .flat_map(|t| t.triggers)
        .map(|t| t.function.name)
        .collect();

    let tables: BTreeSet<String> = crate::sql::query(
        "SELECT c.relname::text AS relname \
         FROM pg_catalog.pg_class c \
         JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace \
         WHERE n.nspname OPERATOR(pg_catalog.=) $1::text::pg_catalog.name \
           AND c.relname::text OPERATOR(pg_catalog.=) ANY ($2::text[]) \
           AND c.relkind OPERATOR(pg_catalog.=) ANY (ARRAY['r', 'p']::\"char\"[])",
    )
    .bind(schema.as_str())
    .bind(&names)
    .fetch_all(&mut *conn)
    .await?
    .iter()
    .map(|r| r.try_get::<String, _>("relname"))
    .collect::<Result<_, _>>()?;

    let mut columns: BTreeMap<(String, String), (String, bool)> = BTreeMap::new();
    for r in crate::sql::query(
        "SELECT c.relname::text AS relname, a.attname::text AS attname, \
                pg_catalog.format_type(a.atttypid, a.atttypmod) AS ty, a.attnotnull \
         FROM pg_catalog.pg_class c \
         JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace \
         JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) c.oid \
         WHERE n.nspname OPERATOR(pg_catalog.=) $1::text::pg_catalog.name \
           AND c.relname::text OPERATOR(pg_catalog.=) ANY ($2::text[]) \
           AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped",
    )
    .bind(schema.as_str())
    .bind(&names)
    .fetch_all(&mut *conn)
    .await?
    {
        columns.insert(
            (r.try_get("relname")?, r.try_get("attname")?),
            (r.try_get("ty")?, r.try_get("attnotnull")?),
        );
    }

    let checks: BTreeSet<(String, String)> = crate::sql::query(
        "SELECT c.relname::text AS relname, con.conname::text AS conname \
         FROM pg_catalog.pg_constraint con \
         JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) con.conrelid \
         JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace \
         WHERE n.nspname OPERATOR(pg_catalog.=) $1::text::pg_catalog.name \
           AND c.relname::text OPERATOR(pg_catalog.=) ANY ($2::text[]) \
           AND con.contype OPERATOR(pg_catalog.=) 'c'::\"char\"",
    )
    .bind(schema.as_str())
    .bind(&names)
    .fetch_all(&mut *conn)
    .await?
    .iter()
    .map(|r| Ok((r.try_get("relname")?, r.try_get("conname")?)))
    .collect::<Result<_, sqlx::Error>>()?;

    // Every valid, ready index with its key columns in order; expression
    // columns show as NULL. An index a failed CREATE INDEX CONCURRENTLY left
    // behind is invalid: it enforces nothing and ON CONFLICT cannot use it.
    let mut indexes = Vec::new();
    for r in crate::sql::query(
        "SELECT c.relname::text AS relname, ix.indisunique, ix.indisprimary, \
                (ix.indpred IS NOT NULL OR ix.indexprs IS NOT NULL) AS partial_or_expression, \
                COALESCE(con.condeferrable, false) AS deferrable, \
                ARRAY(SELECT a.attname::text \
                        FROM pg_catalog.unnest(ix.indkey::pg_catalog.int2[]) WITH ORDINALITY AS k(attnum, ord) \
                        LEFT JOIN pg_catalog.pg_attribute a \
                          ON a.attrelid OPERATOR(pg_catalog.=) c.oid AND a.attnum OPERATOR(pg_catalog.=) k.attnum \
                       WHERE k.ord OPERATOR(pg_catalog.<=) ix.indnkeyatts \
                       ORDER BY k.ord) AS columns \
         FROM pg_catalog.pg_index ix \
         JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) ix.indrelid \
         JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace \
         LEFT JOIN pg_catalog.pg_constraint con ON con.conindid OPERATOR(pg_catalog.=) ix.indexrelid \
              AND con.conrelid OPERATOR(pg_catalog.=) c.oid \
         WHERE n.nspname OPERATOR(pg_catalog.=) $1::text::pg_catalog.name \
           AND c.relname::text OPERATOR(pg_catalog.=) ANY ($2::text[]) \
           AND ix.indisvalid AND ix.indisready",
    )
    .bind(schema.as_str())
    .bind(&names)
    .fetch_all(&mut *conn)
    .await?
    {
        let columns: Vec<Option<String>> = r.try_get("columns")?;
        let has_expression = columns.iter().any(Option::is_none);
        indexes.push(IndexInfo {
            table: r.try_get("relname")?,
            columns: columns.into_iter().flatten().collect(),
            unique: r.try_get("indisunique")?,
            primary: r.try_get("indisprimary")?,
            partial_or_expression: r.try_get::<bool, _>("partial_or_expression")? || has_expression,
            deferrable: r.try_get("deferrable")?,
        });
    }

    let mut functions = BTreeMap::new();
    for r in crate::sql::query(
        "SELECT p.proname::text AS proname, l.lanname::text AS lanname, p.prosrc, p.proconfig, p.prosecdef, \
                p.prorettype OPERATOR(pg_catalog.=) 'pg_catalog.trigger'::pg_catalog.regtype::pg_catalog.oid \
                    AS returns_trigger \
         FROM pg_catalog.pg_proc p \
         JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace \
         JOIN pg_catalog.pg_language l ON l.oid OPERATOR(pg_catalog.=) p.prolang \
         WHERE n.nspname OPERATOR(pg_catalog.=) $1::text::pg_catalog.name \
           AND p.proname::text OPERATOR(pg_catalog.=) ANY ($2::text[]) \
           AND p.pronargs OPERATOR(pg_catalog.=) 0",
    )
    .bind(schema.as_str())
    .bind(&function_names)
    .fetch_all(&mut *conn)
    .await?
    {
        functions.insert(
            r.try_get("proname")?,
            FunctionInfo {
                language: r.try_get("lanname")?,
                body: r.try_get("prosrc")?,
                config: r.try_get("proconfig")?,
                returns_trigger: r.try_get("returns_trigger")?,
                security_definer: r.try_get("prosecdef")?,
            },
        );
    }

    let mut triggers = Vec::new();
    for r in crate::sql::query(
        "SELECT c.relname::text AS relname, t.tgname::text AS tgname, \
                t.tgenabled::pg_catalog.text AS tgenabled, t.tgtype, \
                pg_catalog.cardinality(t.tgattr::pg_catalog.int2[]) OPERATOR(pg_catalog.>) 0 AS on_some_columns, \
                t.tgqual IS NOT NULL AS has_when, \
                fnsp.nspname::text AS function_schema, fp.proname::text AS function_name, \
                fp.pronargs AS function_args \
         FROM pg_catalog.pg_trigger t \
         JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) t.tgrelid \
         JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace \
         JOIN pg_catalog.pg_proc fp ON fp.oid OPERATOR(pg_catalog.=) t.tgfoid \
         JOIN pg_catalog.pg_namespace fnsp ON fnsp.oid OPERATOR(pg_catalog.=) fp.pronamespace \
         WHERE n.nspname OPERATOR(pg_catalog.=) $1::text::pg_catalog.name \
           AND c.relname::text OPERATOR(pg_catalog.=) ANY ($2::text[]) \
           AND NOT t.tgisinternal \
         ORDER BY t.tgname",
    )
    .bind(schema.as_str())
    .bind(&names)
    .fetch_all(&mut *conn)
    .await?
    {
        triggers.push(TriggerInfo {
            table: r.try_get("relname")?,
            name: r.try_get("tgname")?,
            enabled: r.try_get("tgenabled")?,
            kind: r.try_get("tgtype")?,
            on_some_columns: r.try_get("on_some_columns")?,
            has_when: r.try_get("has_when")?,
            function_schema: r.try_get("function_schema")?,
            function_name: r.try_get("function_name")?,
            function_args: r.try_get("function_args")?,
        });
    }

    Ok(Catalog {
        tables,
        columns,
        checks,
        indexes,
        functions,
        triggers,
    })
}

/// Judges the catalog against the spec and the version marker.
fn judge(schema: &SchemaName, catalog: &Catalog, marker: Option<&str>) -> ReadinessReport {
    let installed_version = marker.and_then(parse_version_marker);
    let missing_migrations: Vec<MigrationId> = migration_ids()
        .filter(|m| installed_version.is_none_or(|v| m.version > v))
        .collect();
    let mut report = ReadinessReport {
        schema: schema.clone(),
        installed_version,
        required_version: SCHEMA_VERSION,
        missing_migrations: missing_migrations.clone(),
        problems: Vec::new(),
        warnings: Vec::new(),
    };
    if !missing_migrations.is_empty() {
        report.problems.push(ReadinessProblem::MissingMigrations {
            installed: installed_version,
            required: SCHEMA_VERSION,
            missing: missing_migrations,
        });
    }
    // Elements of migrations the marker says are missing are covered by that
    // problem; with no marker at all, everything is judged.
    let judged_through = match installed_version {
        Some(v) if v < SCHEMA_VERSION => v,
        _ => SCHEMA_VERSION,
    };
    for spec in SPEC.iter().filter(|t| t.since <= judged_through) {
        judge_table(spec, schema, catalog, judged_through, &mut report);
    }
    if let Some(v) = installed_version.filter(|v| *v > SCHEMA_VERSION) {
        report.warnings.push(ReadinessWarning::NewerSchemaVersion {
            installed: v,
            supported: SCHEMA_VERSION,
        });
    }
    report
}

fn same_set(a: &[String], b: &[&str]) -> bool {
    a.len() == b.len() && b.iter().all(|c| a.iter().any(|x| x == c))
}

fn judge_table(
    spec: &'static TableSpec,
    schema: &SchemaName,
    catalog: &Catalog,
    judged_through: i64,
    report: &mut ReadinessReport,
) {
    let t = spec.name;
    if !catalog.tables.contains(t) {
        report
            .problems
            .push(ReadinessProblem::MissingTable { table: t });
        return;
    }
    for c in spec.columns.iter().filter(|c| c.since <= judged_through) {
        match catalog.columns.get(&(t.to_owned(), c.name.to_owned())) {
            None => report.problems.push(ReadinessProblem::MissingColumn {
                table: t,
                column: c.name,
            }),
            Some((ty, not_null)) => {
                if ty != c.ty.catalog() {
                    report.problems.push(ReadinessProblem::WrongColumnType {
                        table: t,
                        column: c.name,
                        expected: c.ty.catalog(),
                        found: ty.clone(),
                    });
                }
                let expected = super::spec::not_null_through(t, c, judged_through);
                if *not_null != expected {
                    report.problems.push(ReadinessProblem::WrongNullability {
                        table: t,
                        column: c.name,
                        expected_not_null: expected,
                    });
                }
            }
        }
    }
    let on_table = || catalog.indexes.iter().filter(|i| i.table == t);
    if !on_table().any(|i| i.primary && same_set(&i.columns, spec.primary_key.columns)) {
        report.problems.push(ReadinessProblem::MissingPrimaryKey {
            table: t,
            columns: spec.primary_key.columns,
        });
    }
    for key in spec.unique.iter().filter(|k| k.since <= judged_through) {
        let usable: Vec<&IndexInfo> = on_table()
            .filter(|i| i.unique && !i.partial_or_expression && same_set(&i.columns, key.columns))
            .collect();
        if usable.is_empty() {
            report.problems.push(ReadinessProblem::MissingUniqueIndex {
                table: t,
                columns: key.columns,
            });
        } else if usable.iter().all(|i| i.deferrable) {
            report
                .problems
                .push(ReadinessProblem::DeferrableUniqueIndex {
                    table: t,
                    columns: key.columns,
                });
        }
    }
    for check in spec.checks {
        if !catalog
            .checks
            .contains(&(t.to_owned(), check.name.to_owned()))
        {
            report.problems.push(ReadinessProblem::MissingCheck {
                table: t,
                constraint: check.name,
            });
        }
    }
    for trigger in spec.triggers.iter().filter(|g| g.since <= judged_through) {
        judge_trigger(spec, trigger, schema, catalog, judged_through, report);
    }
    for index in spec.indexes {
        let served = on_table().any(|i| {
            !i.partial_or_expression
                && i.columns.len() >= index.columns.len()
                && i.columns
                    .iter()
                    .zip(index.columns.iter())
                    .all(|(a, b)| a == b)
        });
        if !served {
            report.warnings.push(ReadinessWarning::MissingIndex {
                table: t,
                columns: index.columns,
            });
        }
    }
}

fn judge_function(
    f: &'static FunctionSpec,
    schema: &SchemaName,
    catalog: &Catalog,
    report: &mut ReadinessReport,
) {
    let problem = match catalog.functions.get(f.name) {
        None => ReadinessProblem::MissingFunction { function: f.name },
        Some(found) => {
            let config = format!("search_path={FUNCTION_SEARCH_PATH}");
            let ours = found.language == "plpgsql"
                && found.returns_trigger
                && found.security_definer == f.definer
                && found.body == (f.body)(schema)
                && found.config.as_deref() == Some(std::slice::from_ref(&config));
            if ours {
                return;
            }
            ReadinessProblem::ChangedFunction { function: f.name }
        }
    };
    if !report.problems.contains(&problem) {
        report.problems.push(problem);
    }
}

fn judge_trigger(
    table: &'static TableSpec,
    spec: &'static TriggerSpec,
    schema: &SchemaName,
    catalog: &Catalog,
    judged_through: i64,
    report: &mut ReadinessReport,
) {
    judge_function(
        super::spec::function_through(spec.function, judged_through),
        schema,
        catalog,
        report,
    );
    let timing = match spec.timing {
        super::spec::TriggerTiming::Before => TRIGGER_TYPE_BEFORE,
        super::spec::TriggerTiming::After => 0,
    };
    let expected_kind = spec
        .events
        .iter()
        .fold(TRIGGER_TYPE_ROW | timing, |kind, event| {
            kind | match event {
                super::spec::TriggerEvent::Insert => TRIGGER_TYPE_INSERT,
                super::spec::TriggerEvent::Update => TRIGGER_TYPE_UPDATE,
                super::spec::TriggerEvent::Delete => TRIGGER_TYPE_DELETE,
            }
        });
    // Any trigger on the table that calls Cohort's function counts, whatever
    // its name; the one named as Cohort names it is judged first.
    let mut calling: Vec<&TriggerInfo> = catalog
        .triggers
        .iter()
        .filter(|g| {
            g.table == table.name
                && g.function_schema == schema.as_str()
                && g.function_name == spec.function.name
                && g.function_args == 0
        })
        .collect();
    calling.sort_by_key(|g| g.name != spec.name);
    let enabled = |g: &TriggerInfo| g.enabled == "O" || g.enabled == "A";
    let well_formed =
        |g: &TriggerInfo| g.kind == expected_kind && !g.on_some_columns && !g.has_when;
    if calling.iter().any(|g| enabled(g) && well_formed(g)) {
        return;
    }
    let Some(found) = calling.first() else {
        report.problems.push(ReadinessProblem::MissingTrigger {
            table: table.name,
            trigger: spec.name,
        });
        return;
    };
    if !enabled(found) {
        report.problems.push(ReadinessProblem::DisabledTrigger {
            table: table.name,
            trigger: found.name.clone(),
        });
    }
    if !well_formed(found) {
        report.problems.push(ReadinessProblem::MisdefinedTrigger {
            table: table.name,
            trigger: found.name.clone(),
            expected: format!(
                "{} FOR EACH ROW, on every column, without a WHEN condition",
                spec.timing_and_events()
            ),
        });
    }
}
