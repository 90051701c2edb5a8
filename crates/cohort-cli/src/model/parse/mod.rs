//! Reading the model file, every mistake at once.
//!
//! The file is parsed into toml's spanned document tree (syntax errors are
//! recovered from where toml can), then walked by hand: each key is checked
//! for its type and meaning and each mistake recorded with its span, so one
//! pass reports them all (a serde derive would stop at the first).
//!
//! One job per file: [`reader`] is the TOML side (the spanned document tree,
//! typed reads, diagnostics with file, line, column and key); [`entities`]
//! builds the `[[entity]]` and `[[exempt]]` entries, [`categories`] the
//! `[rules.*]` tables; this file walks the document and makes the checks
//! that span entries (one id, name and table per entry, unused rules).

mod categories;
mod entities;
pub(crate) mod reader;

use std::collections::HashMap;
use std::ops::Range;

use toml::de::DeTable;
use uuid::Uuid;

use super::{Diagnostics, Model};
use categories::category_rules;
use entities::{entity, exempt};
use reader::{Parser, get, join, key_segment};

/// What parsing needs to know from the settings.
#[derive(Debug, Clone)]
pub(crate) struct ParseOptions {
    /// The schema of tables whose entry names none (to find two entries on
    /// one table).
    pub(crate) default_table_schema: String,
    /// Whether a `hash_key` is configured (the `hash` method needs one).
    pub(crate) hash_key_set: bool,
}

const TOP_KEYS: &[&str] = &["entity", "exempt", "rules"];

/// Parses the model file's text. `file` names it in diagnostics.
pub(crate) fn parse(file: &str, src: &str, options: &ParseOptions) -> Result<Model, Diagnostics> {
    let mut p = Parser {
        file: file.to_owned(),
        src,
        errors: Vec::new(),
        warnings: Vec::new(),
    };
    let (doc, syntax) = DeTable::parse_recoverable(src);
    for e in &syntax {
        let span = e.span().unwrap_or(0..0);
        let message = e.message().trim().to_owned();
        p.error(&span, "(syntax)", message);
    }
    let doc = doc.into_inner();
    p.known_keys(&doc, "", TOP_KEYS);

    let mut model = Model {
        file: file.to_owned(),
        ..Model::default()
    };

    // Rules first: entities are checked against them.
    let mut rule_spans: HashMap<String, Range<usize>> = HashMap::new();
    // Every category with a [rules.*] table, even a broken one (its own
    // mistakes are reported there, not again on each entity).
    let mut declared: Vec<String> = Vec::new();
    if let Some(v) = get(&doc, "rules")
        && let Some(rules) = p.table_of(v, "rules")
    {
        for (k, v) in rules.iter() {
            let category = k.get_ref().to_string();
            declared.push(category.clone());
            let path = format!("rules.{}", key_segment(&category));
            if category.trim().is_empty() {
                p.error(&k.span(), &path, "a category name must not be empty");
                continue;
            }
            let Some(t) = p.table_of(v, &path) else {
                continue;
            };
            if let Some(r) = category_rules(&mut p, &category, t, &v.span(), &path) {
                rule_spans.insert(category.clone(), k.span());
                model.rules.push(r);
            }
        }
    }

    let mut ids: HashMap<Uuid, String> = HashMap::new();
    let mut names: HashMap<String, String> = HashMap::new();
    let mut tables: HashMap<(String, String), String> = HashMap::new();
    let mut used_categories: Vec<String> = Vec::new();

    if let Some(v) = get(&doc, "entity") {
        for (i, t, span) in p.tables_of(v, "entity") {
            let path = format!("entity[{i}]");
            if let Some(e) = entity(&mut p, t, &span, &path, options, &declared) {
                let label = format!("{path} (line {})", p.position(span.start).0);
                let id_span = get(t, "id").map_or(span.clone(), |v| v.span());
                if let Some(first) = ids.insert(e.id, label.clone()) {
                    p.error(
                        &id_span,
                        &join(&path, "id"),
                        format!("the id {} is also the id of {first}; every retained table needs its own", e.id),
                    );
                }
                let name_span = get(t, "name").map_or(span.clone(), |v| v.span());
                if let Some(first) = names.insert(e.name.clone(), label.clone()) {
                    p.error(
                        &name_span,
                        &join(&path, "name"),
                        format!(
                            "the name {:?} is also used by {first}; names must be unique",
                            e.name
                        ),
                    );
                }
                let schema = e
                    .schema
                    .clone()
                    .unwrap_or(options.default_table_schema.clone());
                let table_span = get(t, "table").map_or(span.clone(), |v| v.span());
                if let Some(first) = tables.insert((schema.clone(), e.table.clone()), label) {
                    p.error(
                        &table_span,
                        &join(&path, "table"),
                        format!("the table {schema}.{} is already described by {first}; one entry per table", e.table),
                    );
                }
                used_categories.push(e.category.clone());
                model.entities.push(e);
            }
        }
    }

    if let Some(v) = get(&doc, "exempt") {
        for (i, t, span) in p.tables_of(v, "exempt") {
            let path = format!("exempt[{i}]");
            if let Some(x) = exempt(&mut p, t, &span, &path) {
                let label = format!("{path} (line {})", p.position(span.start).0);
                if let Some(id) = x.id
                    && let Some(first) = ids.insert(id, label.clone())
                {
                    let id_span = get(t, "id").map_or(span.clone(), |v| v.span());
                    p.error(
                        &id_span,
                        &join(&path, "id"),
                        format!("the id {id} is also the id of {first}"),
                    );
                }
                if let Some(first) = names.insert(x.name.clone(), label.clone()) {
                    let name_span = get(t, "name").map_or(span.clone(), |v| v.span());
                    p.error(
                        &name_span,
                        &join(&path, "name"),
                        format!(
                            "the name {:?} is also used by {first}; names must be unique",
                            x.name
                        ),
                    );
                }
                let schema = x
                    .schema
                    .clone()
                    .unwrap_or(options.default_table_schema.clone());
                if let Some(first) = tables.insert((schema.clone(), x.table.clone()), label) {
                    let table_span = get(t, "table").map_or(span.clone(), |v| v.span());
                    p.error(
                        &table_span,
                        &join(&path, "table"),
                        format!("the table {schema}.{} is already described by {first}; a table is retained or exempt, not both", x.table),
                    );
                }
                model.exempt.push(x);
            }
        }
    }

    for r in &model.rules {
        if !used_categories.contains(&r.category)
            && let Some(span) = rule_spans.get(&r.category)
        {
            let span = span.clone();
            let key = format!("rules.{}", key_segment(&r.category));
            p.warn(
                &span,
                &key,
                format!(
                    "no retained table has category {:?}; the rule is unused",
                    r.category
                ),
            );
        }
    }

    let mut errors = p.errors;
    errors.sort_by_key(|d| (d.line, d.column));
    if !errors.is_empty() {
        return Err(Diagnostics {
            file: file.to_owned(),
            errors,
        });
    }
    model.warnings = p.warnings;
    Ok(model)
}

#[cfg(test)]
mod tests {
    use super::categories::parse_strategy;
    use super::entities::ENTITY_KEYS;
    use super::reader::closest;
    use super::*;
    use crate::model::{Anonymise, Mask, Selector};
    use cohort::Strategy;

    fn opts() -> ParseOptions {
        ParseOptions {
            default_table_schema: "public".into(),
            hash_key_set: true,
        }
    }

    const GOOD: &str = r##"
[[entity]]
name = "User"
id = "6b619c19-6e3c-44e8-a87f-975c68fd3988"
table = "users"
category = "accounts"
anchor = "last_seen_at"
erasure_subjects = ["id", "email"]

[entity.anonymise]
email = "hash"
full_name = "empty"
phone = { literal = "[redacted]" }
card = { mask = { keep_first = 0, keep_last = 4, with = "#" } }
note = "null"

[[exempt]]
table = "invoices"
reason = "tax law: kept 10 years by the accounting system"

[rules.accounts]
strategy = "anonymise"
period = "18 months"
legal_minimum = "30d"
audit = "per-row"
source = "policy-7"
reason = "GDPR art. 5(1)(e)"

[[rules.accounts.override]]
jurisdiction = "DE"
strategy = "purge"
period = "P1Y"
"##;

    #[test]
    fn a_good_file_parses_into_the_model() {
        let m = parse("m.toml", GOOD, &opts()).expect("valid");
        assert_eq!(m.entities.len(), 1);
        let e = &m.entities[0];
        assert_eq!(e.name, "User");
        assert_eq!(e.erasure_subjects, vec!["id", "email"]);
        assert_eq!(e.anonymise.len(), 5);
        assert_eq!(e.anonymise[0], ("email".into(), Anonymise::Hash));
        assert_eq!(
            e.anonymise[3].1,
            Anonymise::Mask(Mask {
                keep_first: 0,
                keep_last: 4,
                with: '#'
            })
        );
        assert_eq!(m.exempt[0].name, "invoices");
        let r = &m.rules[0];
        assert_eq!(r.base.period, cohort::Period::months(18));
        assert_eq!(r.base.legal_minimum, Some(cohort::Period::days(30)));
        assert!(r.base.per_row_audit);
        // Derived capabilities: the base strategy and the override's.
        assert_eq!(r.capabilities, vec![Strategy::Anonymise, Strategy::Purge]);
        assert_eq!(r.overrides[0].selector, Selector::Jurisdiction("DE".into()));
        assert!(m.warnings.is_empty());
    }

    #[test]
    fn a_hash_without_a_key_is_a_mistake() {
        let o = ParseOptions {
            hash_key_set: false,
            ..opts()
        };
        let d = parse("m.toml", GOOD, &o).expect_err("no key");
        assert_eq!(d.errors.len(), 1, "{d}");
        assert_eq!(d.errors[0].key, "entity[0].anonymise.email");
        assert_eq!(d.errors[0].line, 11);
    }

    #[test]
    fn syntax_errors_have_a_line() {
        let d = parse("m.toml", "[[entity]\nid = 1\n", &opts()).expect_err("syntax");
        assert!(d.errors.iter().all(|e| e.line >= 1));
        assert_eq!(d.errors[0].key, "(syntax)");
    }

    #[test]
    fn typos_suggest_the_key() {
        assert_eq!(closest("anchr", ENTITY_KEYS), Some("anchor"));
        assert_eq!(
            closest("erasure_subject", ENTITY_KEYS),
            Some("erasure_subjects")
        );
        assert_eq!(closest("zzzzzz", ENTITY_KEYS), None);
    }

    #[test]
    fn strategies_parse_in_any_spelling() {
        assert_eq!(parse_strategy("Soft-Delete"), Some(Strategy::SoftDelete));
        assert_eq!(parse_strategy("soft_delete"), Some(Strategy::SoftDelete));
        assert_eq!(parse_strategy("anonymize"), Some(Strategy::Anonymise));
        assert_eq!(parse_strategy("delete"), None);
    }
}
