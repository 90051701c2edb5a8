//! The `[[entity]]` and `[[exempt]]` entries: each checked key by key
//! (required keys, one column per role, anonymise methods, erasure subjects)
//! and built into an [`Entity`] or [`Exempt`], the specs `build.rs` turns
//! into descriptors.

use std::ops::Range;

use toml::de::{DeTable, DeValue};

use super::ParseOptions;
use super::reader::{Parser, Text, Value, get, join, key_segment, kind};
use crate::model::{Anonymise, CategoryFromSpec, Entity, Exempt, Mask};

pub(super) const ENTITY_KEYS: &[&str] = &[
    "name",
    "id",
    "table",
    "schema",
    "category",
    "anchor",
    "record_id",
    "tenant",
    "tenantless",
    "soft_delete",
    "deleted_at",
    "anonymised_at",
    "erasure_subjects",
    "anonymise",
    "guard",
    "guard_allow",
    "category_from",
    "category_map",
    "event_key",
];
const EXEMPT_KEYS: &[&str] = &["name", "id", "table", "schema", "reason"];

/// The retained table of entry `t` at `span` (`path` names it), checked
/// against the categories `declared` in `[rules]`.
pub(super) fn entity(
    p: &mut Parser<'_>,
    t: &DeTable<'_>,
    span: &Range<usize>,
    path: &str,
    options: &ParseOptions,
    declared: &[String],
) -> Option<Entity> {
    p.known_keys(t, path, ENTITY_KEYS);
    let table = p.req_string(
        t,
        span,
        path,
        "table",
        "the table's name (table = \"users\")",
    );
    let schema = p.opt_string(t, path, "schema");
    let name = p.opt_string(t, path, "name");
    let id = p
        .req_string(
            t,
            span,
            path,
            "id",
            "a stable retained-entity id (id = \"<a new random UUID>\")",
        )
        .and_then(|text| p.uuid(&text, &join(path, "id")));
    // A category from a column (SL3): `category` is then the optional
    // default.
    let category_from = p.opt_string(t, path, "category_from");
    let category = if category_from.is_some() {
        p.opt_string(t, path, "category")
    } else {
        p.req_string(
            t,
            span,
            path,
            "category",
            "the retention category (category = \"accounts\")",
        )
    };
    let mut category_map: Vec<(String, Text)> = Vec::new();
    match (get(t, "category_map"), &category_from) {
        (Some(v), Some(_)) => {
            let key = join(path, "category_map");
            if let Some(map) = p.table_of(v, &key) {
                for (k, v) in map.iter() {
                    let value = k.get_ref().to_string();
                    if let Some(c) = p.string(v, &join(&key, &value)) {
                        category_map.push((value, c));
                    }
                }
                if map.is_empty() {
                    p.error(
                        &v.span(),
                        &key,
                        "maps no value: write value = \"category\" lines",
                    );
                }
            }
        }
        (Some(v), None) => p.error(
            &v.span(),
            &join(path, "category_map"),
            "category_map maps a column's values to categories: add category_from = \"<column>\"",
        ),
        (None, Some(from)) => p.error(
            &from.span,
            &join(path, "category_from"),
            "category_from needs [entity.category_map]: which category each value of the column is",
        ),
        (None, None) => {}
    }
    for (value, c) in &category_map {
        if !declared.contains(&c.value) {
            p.error(
                &c.span,
                &join(&join(path, "category_map"), value),
                format!(
                    "no rule for category {:?}; add [rules.{}]",
                    c.value,
                    key_segment(&c.value)
                ),
            );
        }
    }
    let anchor = match get(t, "anchor") {
        Some(v) if matches!(v.get_ref(), DeValue::Array(_)) => {
            fallback_anchor(p, v, path, table.as_ref());
            None
        }
        _ => p.req_string(
            t,
            span,
            path,
            "anchor",
            "the timestamptz column that ages a row (anchor = \"created_at\")",
        ),
    };
    let record_id = p.opt_string(t, path, "record_id");
    let tenant = p.opt_string(t, path, "tenant");
    let tenantless = p.boolean(t, path, "tenantless").unwrap_or(false);
    let soft_delete = p.opt_string(t, path, "soft_delete");
    let deleted_at = p.opt_string(t, path, "deleted_at");
    let anonymised_at = p.opt_string(t, path, "anonymised_at");
    let event_key = p.opt_string(t, path, "event_key");

    if let Some(c) = &category
        && !declared.contains(&c.value)
    {
        let known: Vec<&str> = declared.iter().map(String::as_str).collect();
        p.error(
            &c.span,
            &join(path, "category"),
            format!(
                "no rule for category {:?}; add [rules.{}] (known categories: {})",
                c.value,
                key_segment(&c.value),
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            ),
        );
    }
    if tenantless && let Some(tn) = &tenant {
        p.error(
            &tn.span,
            &join(path, "tenant"),
            "the table is marked tenantless but names a tenant column; remove one of the two",
        );
    }

    // One column per role (M4).
    let mut roles: Vec<(&str, &Text)> = Vec::new();
    for (role, text) in [
        ("record_id", &record_id),
        ("anchor", &anchor),
        ("tenant", &tenant),
        ("soft_delete", &soft_delete),
        ("deleted_at", &deleted_at),
        ("anonymised_at", &anonymised_at),
    ] {
        if let Some(text) = text {
            if let Some((other, _)) = roles.iter().find(|(_, t)| t.value == text.value) {
                p.error(
                    &text.span,
                    &join(path, role),
                    format!(
                        "column {:?} is already the {other} column; a column plays one role",
                        text.value
                    ),
                );
            } else {
                roles.push((role, text));
            }
        }
    }

    let mut anonymise = Vec::new();
    if let Some(v) = get(t, "anonymise") {
        let key = join(path, "anonymise");
        if let Some(at) = p.table_of(v, &key) {
            for (k, v) in at.iter() {
                let column = k.get_ref().to_string();
                let ck = join(&key, &column);
                if let Some((role, _)) = roles.iter().find(|(_, t)| t.value == column) {
                    p.error(
                        &k.span(),
                        &ck,
                        format!("column {column:?} is the {role} column; Cohort needs it intact and cannot anonymise it"),
                    );
                    continue;
                }
                if let Some(method) = anonymise_method(p, v, &ck, options) {
                    anonymise.push((column, method));
                }
            }
        }
    }

    let erasure_subjects = columns(p, t, path, "erasure_subjects");
    let guard = p.boolean(t, path, "guard").unwrap_or(false);
    let guard_allow = columns(p, t, path, "guard_allow");
    if !guard
        && !guard_allow.is_empty()
        && let Some(v) = get(t, "guard_allow")
    {
        p.error(
            &v.span(),
            &join(path, "guard_allow"),
            "guard_allow names the columns an update of a held row may change, but the table is not \
             guarded: add guard = true",
        );
    }

    let table = table?;
    let has_default = category.is_some();
    let (line, _) = p.position(span.start);
    Some(Entity {
        line,
        name: name.map_or_else(|| table.value.clone(), |n| n.value),
        id: id?,
        table: table.value,
        schema: schema.map(|s| s.value),
        category: match (&category, category_map.first()) {
            (Some(c), _) => c.value.clone(),
            (None, Some((_, first))) => first.value.clone(),
            (None, None) => category.clone()?.value,
        },
        event_key: event_key.map(|k| k.value),
        category_from: category_from.map(|from| CategoryFromSpec {
            column: from.value,
            map: category_map
                .into_iter()
                .map(|(v, c)| (v, c.value))
                .collect(),
            default: has_default,
        }),
        anchor: anchor?.value,
        record_id: record_id.map(|t| t.value),
        tenant: tenant.map(|t| t.value),
        tenantless,
        soft_delete: soft_delete.map(|t| t.value),
        deleted_at: deleted_at.map(|t| t.value),
        anonymised_at: anonymised_at.map(|t| t.value),
        anonymise,
        erasure_subjects,
        guard,
        guard_allow,
    })
}

/// An optional array of column names at `key`, each once.
fn columns(p: &mut Parser<'_>, t: &DeTable<'_>, path: &str, key: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let Some(v) = get(t, key) else {
        return out;
    };
    let key = join(path, key);
    match v.get_ref() {
        DeValue::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let k = format!("{key}[{i}]");
                if let Some(s) = p.string(item, &k) {
                    if out.contains(&s.value) {
                        p.error(&s.span, &k, format!("column {:?} is listed twice", s.value));
                    } else {
                        out.push(s.value);
                    }
                }
            }
        }
        other => p.error(
            &v.span(),
            &key,
            format!("expected an array of column names, found {}", kind(other)),
        ),
    }
    out
}

fn anonymise_method(
    p: &mut Parser<'_>,
    v: &Value<'_>,
    key: &str,
    options: &ParseOptions,
) -> Option<Anonymise> {
    let expected = "use \"null\", \"empty\", \"hash\", \"mask\", { literal = \"...\" } or { mask = { keep_first = 1, keep_last = 1, with = \"*\" } }";
    let no_key = |p: &mut Parser<'_>, span: &Range<usize>| {
        p.error(
            span,
            key,
            "the hash method needs a key: set hash_key in cohort.toml or COHORT_HASH_KEY in the environment",
        );
    };
    match v.get_ref() {
        DeValue::String(s) => match s.to_ascii_lowercase().as_str() {
            "null" => Some(Anonymise::Null),
            "empty" => Some(Anonymise::Empty),
            "hash" => {
                if !options.hash_key_set {
                    no_key(p, &v.span());
                    return None;
                }
                Some(Anonymise::Hash)
            }
            "mask" => Some(Anonymise::Mask(Mask::default())),
            other => {
                p.error(
                    &v.span(),
                    key,
                    format!("unknown anonymise method {other:?}; {expected}"),
                );
                None
            }
        },
        DeValue::Table(t) => {
            p.known_keys(t, key, &["literal", "mask"]);
            if let Some(lit) = get(t, "literal") {
                return match lit.get_ref() {
                    DeValue::String(s) if s.contains('\0') => {
                        p.error(
                            &lit.span(),
                            &join(key, "literal"),
                            "must not contain a NUL character",
                        );
                        None
                    }
                    DeValue::String(s) => Some(Anonymise::Literal(s.to_string())),
                    other => {
                        p.error(
                            &lit.span(),
                            &join(key, "literal"),
                            format!("expected a string, found {}", kind(other)),
                        );
                        None
                    }
                };
            }
            if let Some(m) = get(t, "mask") {
                let mk = join(key, "mask");
                let mt = p.table_of(m, &mk)?;
                p.known_keys(mt, &mk, &["keep_first", "keep_last", "with"]);
                let mut mask = Mask::default();
                for (name, slot) in [
                    ("keep_first", &mut mask.keep_first),
                    ("keep_last", &mut mask.keep_last),
                ] {
                    if let Some(n) = get(mt, name) {
                        match n.get_ref() {
                            DeValue::Integer(i) => match i.as_str().parse::<usize>() {
                                Ok(v) if v <= 64 => *slot = v,
                                _ => p.error(
                                    &n.span(),
                                    &join(&mk, name),
                                    "expected a whole number from 0 to 64",
                                ),
                            },
                            other => p.error(
                                &n.span(),
                                &join(&mk, name),
                                format!("expected a whole number, found {}", kind(other)),
                            ),
                        }
                    }
                }
                if let Some(w) = get(mt, "with") {
                    match w.get_ref() {
                        DeValue::String(s) if s.chars().count() == 1 && !s.contains('\0') => {
                            mask.with = s.chars().next().unwrap_or('*');
                        }
                        _ => p.error(
                            &w.span(),
                            &join(&mk, "with"),
                            "expected one character, for example \"*\"",
                        ),
                    }
                }
                return Some(Anonymise::Mask(mask));
            }
            p.error(
                &v.span(),
                key,
                format!("an inline table needs `literal` or `mask`; {expected}"),
            );
            None
        }
        other => {
            p.error(
                &v.span(),
                key,
                format!("expected a method, found {}; {expected}", kind(other)),
            );
            None
        }
    }
}

/// The exempt table of entry `t` at `span`.
pub(super) fn exempt(
    p: &mut Parser<'_>,
    t: &DeTable<'_>,
    span: &Range<usize>,
    path: &str,
) -> Option<Exempt> {
    p.known_keys(t, path, EXEMPT_KEYS);
    let table = p.req_string(t, span, path, "table", "the table's name");
    let reason = p.req_string(
        t,
        span,
        path,
        "reason",
        "why the table is exempt (it shows up in reports)",
    );
    let schema = p.opt_string(t, path, "schema");
    let name = p.opt_string(t, path, "name");
    let id = match p.opt_string(t, path, "id") {
        Some(text) => Some(p.uuid(&text, &join(path, "id"))?),
        None => None,
    };
    let table = table?;
    Some(Exempt {
        name: name.map_or_else(|| table.value.clone(), |n| n.value),
        table: table.value,
        schema: schema.map(|s| s.value),
        reason: reason?.value,
        id,
    })
}

/// `anchor = ["last_login_at", "created_at"]`: an anchor that falls back to
/// a second column is a generated column of the table (docs/model.md, "An
/// anchor that falls back"). The problem gives the migration to apply.
fn fallback_anchor(p: &mut Parser<'_>, v: &Value<'_>, path: &str, table: Option<&Text>) {
    let DeValue::Array(items) = v.get_ref() else {
        return;
    };
    let columns: Vec<String> = items
        .iter()
        .filter_map(|i| match i.get_ref() {
            DeValue::String(s) => Some(s.to_string()),
            _ => None,
        })
        .collect();
    let table = table.map_or("<table>", |t| t.value.as_str());
    let message = if columns.len() < 2 || columns.len() != items.len() {
        "expected a column name (anchor = \"created_at\"); an anchor that falls back to another \
         column is a list of two or more column names"
            .to_owned()
    } else {
        format!(
            "an anchor that falls back to another column is a generated column of the table: \
             add it and its index in a migration,\n  \
             ALTER TABLE {table} ADD COLUMN retention_anchor timestamptz \
             GENERATED ALWAYS AS (COALESCE({cols})) STORED;\n  \
             CREATE INDEX ON {table} (retention_anchor);\n\
             then write anchor = \"retention_anchor\" (the tenant column first in the index for a \
             tenant-scoped table)",
            cols = columns.join(", ")
        )
    };
    p.error(&v.span(), &join(path, "anchor"), message);
}
