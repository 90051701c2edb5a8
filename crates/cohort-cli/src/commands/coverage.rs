//! `coverage`: every table of the database's own schemas, classified as
//! retained (in the model), exempt (in the model with a reason, or Cohort's
//! or an extension's own) or unclassified, with hints of personal data in
//! unclassified tables from their columns' names and types.

use std::collections::BTreeMap;

use serde::Serialize;
use sqlx::{PgPool, Row};

use super::Ctx;
use crate::cli::CoverageArgs;
use crate::error::{CliError, CliResult};
use crate::model::Model;
use crate::output;

/// `coverage --json`.
#[derive(Debug, Serialize)]
pub(crate) struct CoverageJson {
    /// Every table, by schema and name.
    pub(crate) tables: Vec<TableJson>,
    /// Model entries whose table does not exist.
    pub(crate) missing: Vec<MissingJson>,
    /// How many tables of each class.
    pub(crate) counts: CountsJson,
}

/// One table.
#[derive(Debug, Serialize)]
pub(crate) struct TableJson {
    /// Its schema.
    pub(crate) schema: String,
    /// Its name.
    pub(crate) table: String,
    /// `retained`, `exempt` or `unclassified`.
    pub(crate) class: &'static str,
    /// The model's name for it (retained and exempt tables of the model).
    pub(crate) entity: Option<String>,
    /// Its category (retained tables).
    pub(crate) category: Option<String>,
    /// Its rule's strategy (retained tables).
    pub(crate) strategy: Option<&'static str>,
    /// Why it is exempt.
    pub(crate) reason: Option<String>,
    /// Columns that look like personal data (unclassified tables only).
    pub(crate) personal_data_hints: Vec<HintJson>,
}

/// A column that looks like personal data.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct HintJson {
    /// The column.
    pub(crate) column: String,
    /// What it looks like (`email`, `phone`, `ip address`, ...).
    pub(crate) looks_like: &'static str,
    /// `name` or `type`: what gave it away.
    pub(crate) by: &'static str,
}

/// A model entry whose table is not in the database.
#[derive(Debug, Serialize)]
pub(crate) struct MissingJson {
    /// The model's name for it.
    pub(crate) entity: String,
    /// `schema.table`.
    pub(crate) table: String,
}

/// Tables per class.
#[derive(Debug, Default, Serialize)]
pub(crate) struct CountsJson {
    /// In the model, with a rule.
    pub(crate) retained: usize,
    /// Exempt, with a reason.
    pub(crate) exempt: usize,
    /// Nobody said.
    pub(crate) unclassified: usize,
    /// Unclassified tables with at least one personal-data hint.
    pub(crate) unclassified_with_personal_data_hints: usize,
}

/// Column-name words that suggest personal data, and what they suggest.
const NAME_HINTS: &[(&str, &str)] = &[
    ("email", "email"),
    ("mail", "email"),
    ("phone", "phone"),
    ("mobile", "phone"),
    ("telephone", "phone"),
    ("tel", "phone"),
    ("fax", "phone"),
    ("msisdn", "phone"),
    ("firstname", "name"),
    ("lastname", "name"),
    ("fullname", "name"),
    ("surname", "name"),
    ("forename", "name"),
    ("username", "name"),
    ("displayname", "name"),
    ("address", "address"),
    ("addr", "address"),
    ("street", "address"),
    ("city", "address"),
    ("zip", "address"),
    ("zipcode", "address"),
    ("postcode", "address"),
    ("postal", "address"),
    ("birth", "birth date"),
    ("birthday", "birth date"),
    ("birthdate", "birth date"),
    ("dob", "birth date"),
    ("ip", "ip address"),
    ("ipaddr", "ip address"),
    ("ipv4", "ip address"),
    ("ipv6", "ip address"),
    ("ssn", "national id"),
    ("passport", "national id"),
    ("nino", "national id"),
    ("taxid", "national id"),
    ("iban", "bank account"),
    ("bic", "bank account"),
    ("swift", "bank account"),
    ("card", "payment card"),
    ("creditcard", "payment card"),
    ("pan", "payment card"),
    ("cvv", "payment card"),
    ("gender", "gender"),
    ("sex", "gender"),
    ("latitude", "location"),
    ("longitude", "location"),
    ("lat", "location"),
    ("lng", "location"),
    ("lon", "location"),
    ("geo", "location"),
    ("gps", "location"),
    ("location", "location"),
    ("useragent", "device"),
    ("device", "device"),
];

/// Words before `name` that make it a person's name.
const NAME_QUALIFIERS: &[&str] = &[
    "first", "last", "full", "given", "family", "sur", "middle", "maiden", "user", "display",
    "contact", "customer", "person", "patient", "employee", "legal", "nick",
];

/// Pairs of words that suggest personal data together.
const PAIR_HINTS: &[(&str, &str, &str)] = &[
    ("social", "security", "national id"),
    ("national", "id", "national id"),
    ("tax", "id", "national id"),
    ("account", "number", "bank account"),
    ("credit", "card", "payment card"),
    ("user", "agent", "device"),
    ("remote", "addr", "ip address"),
    ("date", "birth", "birth date"),
];

/// Column types that suggest personal data.
const TYPE_HINTS: &[(&str, &str)] = &[
    ("inet", "ip address"),
    ("cidr", "ip address"),
    ("macaddr", "device"),
    ("macaddr8", "device"),
    ("citext", "email (case-insensitive text)"),
];

/// The words of a column name: split at non-alphanumerics and camelCase.
fn words(name: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut prev_lower = false;
    for c in name.chars() {
        if !c.is_alphanumeric() {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            prev_lower = false;
            continue;
        }
        if c.is_uppercase() && prev_lower && !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
        prev_lower = c.is_lowercase() || c.is_ascii_digit();
        cur.extend(c.to_lowercase());
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// What a column's name suggests, if anything.
pub(crate) fn name_hint(column: &str) -> Option<&'static str> {
    let w = words(column);
    if w.len() == 1 && w[0] == "name" {
        return Some("name");
    }
    for (i, word) in w.iter().enumerate() {
        if word == "name" && i > 0 && NAME_QUALIFIERS.contains(&w[i - 1].as_str()) {
            return Some("name");
        }
    }
    for pair in w.windows(2) {
        if let Some((_, _, hint)) = PAIR_HINTS
            .iter()
            .find(|(a, b, _)| pair[0] == *a && pair[1] == *b)
        {
            return Some(hint);
        }
    }
    // Skip "of" in "date_of_birth".
    if w.iter().any(|x| x == "birth") {
        return Some("birth date");
    }
    let joined = w.concat();
    for word in w.iter().chain(std::iter::once(&joined)) {
        if let Some((_, hint)) = NAME_HINTS.iter().find(|(k, _)| k == word) {
            return Some(hint);
        }
    }
    None
}

/// What a column's (base) type suggests, if anything.
pub(crate) fn type_hint(base_type: &str) -> Option<&'static str> {
    TYPE_HINTS
        .iter()
        .find(|(t, _)| *t == base_type)
        .map(|(_, h)| *h)
}

struct DbTable {
    schema: String,
    table: String,
    extension: Option<String>,
    columns: Vec<(String, String)>,
}

async fn tables(pool: &PgPool) -> CliResult<Vec<DbTable>> {
    // Ordinary and partitioned tables (not partitions: they follow their
    // parent) of every schema but the system's, with the extension that
    // owns each, if one does; then every column with its base type (through
    // a domain).
    // Every read in one transaction, each statement unnamed: through a
    // pooler in transaction mode they stay on one server connection.
    let mut tx = pool.begin().await?;
    let rows = sqlx::query(
        "SELECT n.nspname::pg_catalog.text AS schema, c.relname::pg_catalog.text AS name, \
                (SELECT e.extname::pg_catalog.text FROM pg_catalog.pg_depend d \
                   JOIN pg_catalog.pg_extension e ON e.oid OPERATOR(pg_catalog.=) d.refobjid \
                  WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass \
                    AND d.objid OPERATOR(pg_catalog.=) c.oid \
                    AND d.deptype OPERATOR(pg_catalog.=) 'e' LIMIT 1) AS extension \
         FROM pg_catalog.pg_class c \
         JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace \
         WHERE c.relkind OPERATOR(pg_catalog.=) ANY (ARRAY['r', 'p']::pg_catalog.\"char\"[]) \
           AND NOT c.relispartition \
           AND n.nspname OPERATOR(pg_catalog.<>) ALL (ARRAY['pg_catalog', 'information_schema']::pg_catalog.name[]) \
           AND n.nspname::pg_catalog.text NOT LIKE 'pg\\_%' \
         ORDER BY 1, 2",
    )
    .persistent(false).fetch_all(&mut *tx)
    .await?;
    let mut out: Vec<DbTable> = Vec::new();
    let mut index: BTreeMap<(String, String), usize> = BTreeMap::new();
    for r in &rows {
        let schema: String = r.try_get("schema")?;
        let table: String = r.try_get("name")?;
        index.insert((schema.clone(), table.clone()), out.len());
        out.push(DbTable {
            schema,
            table,
            extension: r.try_get("extension")?,
            columns: Vec::new(),
        });
    }
    let cols = sqlx::query(
        "SELECT n.nspname::pg_catalog.text AS schema, c.relname::pg_catalog.text AS name, \
                a.attname::pg_catalog.text AS column_name, \
                bt.typname::pg_catalog.text AS base_type \
         FROM pg_catalog.pg_attribute a \
         JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) a.attrelid \
         JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace \
         JOIN pg_catalog.pg_type t ON t.oid OPERATOR(pg_catalog.=) a.atttypid \
         JOIN pg_catalog.pg_type bt ON bt.oid OPERATOR(pg_catalog.=) \
              (CASE WHEN t.typtype OPERATOR(pg_catalog.=) 'd' THEN t.typbasetype ELSE t.oid END) \
         WHERE a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped \
           AND c.relkind OPERATOR(pg_catalog.=) ANY (ARRAY['r', 'p']::pg_catalog.\"char\"[]) \
           AND NOT c.relispartition \
         ORDER BY 1, 2, a.attnum",
    )
    .persistent(false)
    .fetch_all(&mut *tx)
    .await?;
    for r in &cols {
        let key = (
            r.try_get::<String, _>("schema")?,
            r.try_get::<String, _>("name")?,
        );
        if let Some(&i) = index.get(&key) {
            out[i]
                .columns
                .push((r.try_get("column_name")?, r.try_get("base_type")?));
        }
    }
    Ok(out)
}

/// Classifies every table.
pub(crate) async fn coverage(
    pool: &PgPool,
    model: &Model,
    default_schema: &str,
    cohort_schema: &str,
) -> CliResult<CoverageJson> {
    let db = tables(pool).await?;
    let mut found: Vec<(String, String)> = Vec::new();
    let mut out = Vec::new();
    let mut counts = CountsJson::default();
    for t in &db {
        found.push((t.schema.clone(), t.table.clone()));
        let mut row = TableJson {
            schema: t.schema.clone(),
            table: t.table.clone(),
            class: "unclassified",
            entity: None,
            category: None,
            strategy: None,
            reason: None,
            personal_data_hints: Vec::new(),
        };
        let same = |schema: &Option<String>, table: &str| {
            schema.as_deref().unwrap_or(default_schema) == t.schema && table == t.table
        };
        if let Some(e) = model.entities.iter().find(|e| same(&e.schema, &e.table)) {
            row.class = "retained";
            row.entity = Some(e.name.clone());
            // A category from a column (SL3): every category, and whence.
            row.category = Some(match &e.category_from {
                Some(from) => format!("{} (from {})", e.categories().join(", "), from.column),
                None => e.category.clone(),
            });
            row.strategy = model
                .rules_of(&e.category)
                .map(|r| r.base.strategy.as_str());
        } else if let Some(x) = model.exempt.iter().find(|x| same(&x.schema, &x.table)) {
            row.class = "exempt";
            row.entity = Some(x.name.clone());
            row.reason = Some(x.reason.clone());
        } else if t.schema == cohort_schema && cohort::schema::TABLES.contains(&t.table.as_str()) {
            row.class = "exempt";
            row.reason = Some("Cohort's own table (ledger, holds, queue, registry, leases)".into());
        } else if let Some(ext) = &t.extension {
            row.class = "exempt";
            row.reason = Some(format!("belongs to the extension {ext}"));
        } else {
            for (column, base_type) in &t.columns {
                if let Some(h) = name_hint(column) {
                    row.personal_data_hints.push(HintJson {
                        column: column.clone(),
                        looks_like: h,
                        by: "name",
                    });
                } else if let Some(h) = type_hint(base_type) {
                    row.personal_data_hints.push(HintJson {
                        column: column.clone(),
                        looks_like: h,
                        by: "type",
                    });
                }
            }
        }
        match row.class {
            "retained" => counts.retained += 1,
            "exempt" => counts.exempt += 1,
            _ => {
                counts.unclassified += 1;
                if !row.personal_data_hints.is_empty() {
                    counts.unclassified_with_personal_data_hints += 1;
                }
            }
        }
        out.push(row);
    }
    let mut missing = Vec::new();
    let entries = model
        .entities
        .iter()
        .map(|e| (&e.name, &e.schema, &e.table))
        .chain(model.exempt.iter().map(|x| (&x.name, &x.schema, &x.table)));
    for (name, schema, table) in entries {
        let schema = schema.as_deref().unwrap_or(default_schema);
        if !found.iter().any(|(s, t)| s == schema && t == table) {
            missing.push(MissingJson {
                entity: name.clone(),
                table: format!("{schema}.{table}"),
            });
        }
    }
    Ok(CoverageJson {
        tables: out,
        missing,
        counts,
    })
}

/// The classification for people.
pub(crate) fn print(c: &CoverageJson) -> CliResult {
    let mut t = output::table(&["table", "class", "details"]);
    for r in &c.tables {
        let details = match r.class {
            "retained" => format!(
                "{} (category {}, {})",
                r.entity.as_deref().unwrap_or("-"),
                r.category.as_deref().unwrap_or("-"),
                r.strategy.unwrap_or("-")
            ),
            "exempt" => r.reason.clone().unwrap_or_default(),
            _ if r.personal_data_hints.is_empty() => "no personal-data hints".to_owned(),
            _ => {
                let hints: Vec<String> = r
                    .personal_data_hints
                    .iter()
                    .map(|h| format!("{} ({}, by {})", h.column, h.looks_like, h.by))
                    .collect();
                format!("PERSONAL DATA? {}", hints.join(", "))
            }
        };
        t.add_row(vec![
            format!("{}.{}", r.schema, r.table),
            r.class.to_owned(),
            details,
        ]);
    }
    output::line(t.to_string())?;
    for m in &c.missing {
        output::line(format!(
            "warning: the model names {} ({}), which does not exist",
            m.table, m.entity
        ))?;
    }
    output::line(format!(
        "{} retained, {} exempt, {} unclassified ({} with personal-data hints)",
        c.counts.retained,
        c.counts.exempt,
        c.counts.unclassified,
        c.counts.unclassified_with_personal_data_hints
    ))
}

/// `coverage`.
pub(crate) async fn run(ctx: &Ctx, args: &CoverageArgs) -> CliResult {
    let model = ctx.model()?;
    let pool = ctx.pool().await?;
    let c = coverage(
        &pool,
        &model,
        &ctx.settings.default_table_schema,
        &ctx.settings.schema,
    )
    .await?;
    if ctx.json() {
        output::json(&c)?;
    } else {
        print(&c)?;
    }
    if args.fail_on_unclassified && c.counts.unclassified > 0 {
        return Err(CliError::CheckFailed(format!(
            "{} table(s) unclassified: add each to the model as [[entity]] or [[exempt]] with a reason",
            c.counts.unclassified
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_look_like_personal_data_are_flagged() {
        for (col, hint) in [
            ("email", "email"),
            ("contact_email", "email"),
            ("EmailAddress", "email"),
            ("phone_number", "phone"),
            ("first_name", "name"),
            ("lastName", "name"),
            ("name", "name"),
            ("street_address", "address"),
            ("zip", "address"),
            ("date_of_birth", "birth date"),
            ("dob", "birth date"),
            ("ip", "ip address"),
            ("client_ip", "ip address"),
            ("ssn", "national id"),
            ("social_security_number", "national id"),
            ("iban", "bank account"),
            ("user_agent", "device"),
        ] {
            assert_eq!(name_hint(col), Some(hint), "{col}");
        }
        for col in [
            "id",
            "created_at",
            "product_name",
            "total_cents",
            "zipper",
            "shipped",
            "description",
        ] {
            assert_eq!(name_hint(col), None, "{col}");
        }
    }

    #[test]
    fn types_that_look_like_personal_data_are_flagged() {
        assert_eq!(type_hint("inet"), Some("ip address"));
        assert_eq!(type_hint("citext"), Some("email (case-insensitive text)"));
        assert_eq!(type_hint("text"), None);
    }
}
