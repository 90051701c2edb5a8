//! Rendering the migrations' SQL from the table spec.
//!
//! Every name is written quoted ([`Ident`]), every relation schema-qualified,
//! and no name ever appears in a SQL comment (a name may contain a newline).

use std::fmt::Write as _;

use super::SchemaName;
use super::spec::{
    ALTERATIONS, Change, FUNCTION_SEARCH_PATH, FunctionSpec, MigrationInfo, TABLES, TableSpec,
    TriggerSpec, VERSION_TABLE, function_through,
};
use crate::sql::Ident;

/// The dollar-quote tag around function bodies (the bodies are fixed text
/// that never contains it; a unit test checks). Bodies that name the
/// install's schema (migration 3 on) could contain it through the name:
/// [`body_tag`] then picks another.
const BODY_TAG: &str = "$cohort$";

/// A dollar-quote tag that `body` does not contain: [`BODY_TAG`] when it
/// can (so migrations 1 and 2 keep their frozen text), else `$cohort1$`, ...
pub(super) fn body_tag(body: &str, base: &str) -> String {
    let first = if base == "cohort" {
        BODY_TAG.to_owned()
    } else {
        format!("${base}$")
    };
    if !body.contains(&first) {
        return first;
    }
    (1u64..)
        .map(|i| format!("${base}{i}$"))
        .find(|tag| !body.contains(tag))
        .unwrap_or(first)
}

/// The comment on `sweep_run` that records the installed schema version.
pub(super) fn version_marker(version: i64) -> String {
    format!("cohort schema version {version}")
}

/// The version a `sweep_run` comment records, if it is a Cohort marker.
pub(super) fn parse_version_marker(comment: &str) -> Option<i64> {
    let digits = comment.strip_prefix("cohort schema version ")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn q(name: &'static str) -> Ident {
    Ident::known(name)
}

fn column_list(columns: &[&'static str]) -> String {
    columns
        .iter()
        .map(|c| q(c).to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn marker_statement(schema: &SchemaName, version: i64) -> String {
    // The marker is fixed text (no name, no input): a literal is safe here,
    // and DDL cannot take bind parameters.
    format!(
        "COMMENT ON TABLE {} IS '{}';\n",
        schema.table(VERSION_TABLE),
        version_marker(version)
    )
}

fn create_table(out: &mut String, schema: &SchemaName, t: &TableSpec) {
    let mut lines: Vec<String> = Vec::new();
    for c in t.columns.iter().filter(|c| c.since == 0) {
        let nullability = if c.identity {
            "GENERATED ALWAYS AS IDENTITY"
        } else if c.not_null {
            "NOT NULL"
        } else {
            "NULL"
        };
        lines.push(format!("{} {} {nullability}", q(c.name), c.ty.ddl()));
    }
    lines.push(format!(
        "CONSTRAINT {} PRIMARY KEY ({})",
        q(t.primary_key.name),
        column_list(t.primary_key.columns)
    ));
    for fk in t.foreign_keys {
        lines.push(format!(
            "CONSTRAINT {} FOREIGN KEY ({}) REFERENCES {} ({})",
            q(fk.name),
            column_list(fk.columns),
            schema.table(fk.references),
            column_list(fk.referenced_columns)
        ));
    }
    for u in t.unique.iter().filter(|u| u.since == 0) {
        lines.push(format!(
            "CONSTRAINT {} UNIQUE ({})",
            q(u.name),
            column_list(u.columns)
        ));
    }
    for c in t.checks {
        lines.push(format!("CONSTRAINT {} CHECK ({})", q(c.name), c.expression));
    }
    let _ = writeln!(
        out,
        "CREATE TABLE IF NOT EXISTS {} (\n    {}\n);",
        schema.table(t.name),
        lines.join(",\n    ")
    );
    for i in t.indexes {
        let _ = writeln!(
            out,
            "CREATE INDEX IF NOT EXISTS {} ON {} ({});",
            q(i.name),
            schema.table(t.name),
            column_list(i.columns)
        );
    }
    out.push('\n');
}

/// The columns and unique indexes migration `version` adds to an existing
/// table.
fn add_to_table(out: &mut String, schema: &SchemaName, t: &TableSpec, version: i64) {
    let mut any = false;
    for c in t.columns.iter().filter(|c| c.since == version) {
        let nullability = match (c.not_null, c.default) {
            (true, Some(default)) => format!("NOT NULL DEFAULT {default}"),
            (true, None) => "NOT NULL".to_owned(),
            (false, _) => "NULL".to_owned(),
        };
        let _ = writeln!(
            out,
            "ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} {} {nullability};",
            schema.table(t.name),
            q(c.name),
            c.ty.ddl()
        );
        any = true;
    }
    for u in t.unique.iter().filter(|u| u.since == version) {
        let _ = writeln!(
            out,
            "CREATE UNIQUE INDEX IF NOT EXISTS {} ON {} ({});",
            q(u.name),
            schema.table(t.name),
            column_list(u.columns)
        );
        any = true;
    }
    if any {
        out.push('\n');
    }
}

fn function_name(schema: &SchemaName, f: &FunctionSpec) -> String {
    format!("{}.{}", schema.ident(), q(f.name))
}

fn create_function(out: &mut String, schema: &SchemaName, f: &FunctionSpec) {
    let body = (f.body)(schema);
    let tag = body_tag(&body, "cohort");
    let _ = writeln!(
        out,
        "CREATE OR REPLACE FUNCTION {}() RETURNS pg_catalog.trigger\n    \
         LANGUAGE plpgsql{}\n    SET search_path = {FUNCTION_SEARCH_PATH}\n    AS {tag}{body}{tag};\n",
        function_name(schema, f),
        if f.definer { " SECURITY DEFINER" } else { "" },
    );
}

fn create_trigger(out: &mut String, schema: &SchemaName, t: &TableSpec, trigger: &TriggerSpec) {
    let f = trigger.function;
    create_function(out, schema, f);
    let _ = writeln!(
        out,
        "CREATE OR REPLACE TRIGGER {}\n    {} ON {}\n    FOR EACH ROW EXECUTE FUNCTION {}();\n",
        q(trigger.name),
        trigger.timing_and_events(),
        schema.table(t.name),
        function_name(schema, f)
    );
}

fn drop_trigger(out: &mut String, schema: &SchemaName, t: &TableSpec, trigger: &TriggerSpec) {
    let _ = writeln!(
        out,
        "DROP TRIGGER IF EXISTS {} ON {};\nDROP FUNCTION IF EXISTS {}();\n",
        q(trigger.name),
        schema.table(t.name),
        function_name(schema, trigger.function)
    );
}

fn header(info: &MigrationInfo) -> String {
    format!(
        "-- Cohort schema migration {} ({}): {}.\n\
         -- Generated by cohort::schema::migrations; Cohort's readiness check expects this shape.\n\n",
        info.version, info.name, info.summary
    )
}

/// The SQL that applies migration `info` in `schema`. Re-applying it is
/// harmless: tables and indexes are created if missing, functions and
/// triggers replaced.
pub(super) fn up_sql(schema: &SchemaName, info: &MigrationInfo) -> String {
    let mut out = header(info);
    if info.version == 1 {
        let _ = writeln!(out, "CREATE SCHEMA IF NOT EXISTS {};\n", schema.ident());
    }
    for t in TABLES.iter().filter(|t| t.since == info.version) {
        create_table(&mut out, schema, t);
    }
    for t in TABLES.iter().filter(|t| t.since < info.version) {
        add_to_table(&mut out, schema, t, info.version);
    }
    if let Some(step) = info.data_step {
        let body = step(schema);
        let tag = body_tag(&body, "cohort_seal");
        let _ = writeln!(out, "DO {tag}{body}{tag};\n");
    }
    for t in &TABLES {
        for trigger in t.triggers.iter().filter(|g| g.since == info.version) {
            create_trigger(&mut out, schema, t, trigger);
        }
    }
    for a in ALTERATIONS.iter().filter(|a| a.since == info.version) {
        let table = schema.table(a.table);
        match &a.change {
            Change::DropNotNull { column } => {
                let _ = writeln!(
                    out,
                    "ALTER TABLE {table} ALTER COLUMN {} DROP NOT NULL;\n",
                    q(column)
                );
            }
            Change::Index { name, columns } => {
                let _ = writeln!(
                    out,
                    "CREATE INDEX IF NOT EXISTS {} ON {table} ({});\n",
                    q(name),
                    column_list(columns)
                );
            }
            Change::ReplaceFunction { function } => {
                create_function(&mut out, schema, function);
            }
            Change::ReplaceCheck { name, expression } => {
                let _ = writeln!(
                    out,
                    "ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {name};\n\
                     ALTER TABLE {table} ADD CONSTRAINT {name} CHECK ({expression});\n",
                    name = q(name),
                );
            }
            Change::PartialUniqueIndex {
                name,
                columns,
                predicate,
            } => {
                let _ = writeln!(
                    out,
                    "CREATE UNIQUE INDEX IF NOT EXISTS {} ON {table} ({}) WHERE {predicate};\n",
                    q(name),
                    column_list(columns)
                );
            }
        }
    }
    out.push_str(&marker_statement(schema, info.version));
    out
}

/// The SQL that reverts migration `info`, when that loses no data: a
/// migration that creates tables has none (dropping them would drop the
/// ledger and the holds).
pub(super) fn down_sql(schema: &SchemaName, info: &MigrationInfo) -> Option<String> {
    let drops_not_null = ALTERATIONS.iter().any(|a| {
        a.since == info.version
            && matches!(
                a.change,
                Change::DropNotNull { .. } | Change::ReplaceCheck { .. }
            )
    });
    if TABLES.iter().any(|t| t.since == info.version) || info.version <= 1 || drops_not_null {
        return None;
    }
    let mut out = format!(
        "-- Reverts Cohort schema migration {} ({}).\n\n",
        info.version, info.name
    );
    for t in TABLES.iter().rev() {
        for trigger in t.triggers.iter().filter(|g| g.since == info.version) {
            drop_trigger(&mut out, schema, t, trigger);
        }
    }
    // A replaced function gets back the body it had before.
    for a in ALTERATIONS.iter().filter(|a| a.since == info.version) {
        if let Change::ReplaceFunction { function } = a.change {
            let before = TABLES
                .iter()
                .flat_map(|t| t.triggers.iter())
                .find(|g| g.function.name == function.name)
                .map(|g| function_through(g.function, info.version - 1));
            if let Some(before) = before {
                create_function(&mut out, schema, before);
            }
        }
    }
    out.push_str(&marker_statement(schema, info.version - 1));
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::migrations::MIGRATIONS;

    #[test]
    fn markers_round_trip_and_nothing_else_parses() {
        assert_eq!(parse_version_marker(&version_marker(2)), Some(2));
        assert_eq!(parse_version_marker(&version_marker(12345)), Some(12345));
        for other in [
            "",
            "cohort schema version ",
            "cohort schema version -1",
            "cohort schema version 2 ",
            "Cohort schema version 2",
            "cohort schema version 99999999999999999999",
            "audit tables",
        ] {
            assert_eq!(parse_version_marker(other), None, "{other:?}");
        }
    }

    #[test]
    fn bodies_never_contain_their_dollar_quote_tag() {
        for t in &TABLES {
            for trigger in t.triggers.iter().filter(|g| g.since <= 2) {
                let body = (trigger.function.body)(&SchemaName::public());
                assert!(!body.contains(BODY_TAG));
            }
        }
    }

    #[test]
    fn a_schema_name_holding_the_tag_gets_another_tag() {
        let schema = SchemaName::new("a$cohort$b").expect("valid");
        let sql = up_sql(&schema, &MIGRATIONS[3]);
        assert!(sql.contains("AS $cohort1$"), "{sql}");
        assert_eq!(body_tag("x $cohort$ $cohort1$", "cohort"), "$cohort2$");
        assert_eq!(body_tag("plain", "cohort"), "$cohort$");
    }

    #[test]
    fn names_never_reach_comments() {
        let schema = SchemaName::new("x\nDROP TABLE users; --").expect("valid");
        for info in &MIGRATIONS {
            let sql = up_sql(&schema, info) + &down_sql(&schema, info).unwrap_or_default();
            for line in sql.lines().filter(|l| l.trim_start().starts_with("--")) {
                assert!(!line.contains("DROP TABLE users"), "{line}");
            }
        }
    }

    #[test]
    fn only_migrations_without_tables_can_be_reverted() {
        let schema = SchemaName::public();
        assert_eq!(down_sql(&schema, &MIGRATIONS[0]), None);
        let down = down_sql(&schema, &MIGRATIONS[1]).expect("reversible");
        assert!(down.contains(r#"DROP TRIGGER IF EXISTS "retention_holds_entity_fence" ON "public"."retention_holds";"#));
        assert!(down.ends_with(
            "COMMENT ON TABLE \"public\".\"sweep_run\" IS 'cohort schema version 1';\n"
        ));
    }
}
