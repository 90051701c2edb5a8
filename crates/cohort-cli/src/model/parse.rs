//! Reading the model file, every mistake at once.
//!
//! The file is parsed into toml's spanned document tree (syntax errors are
//! recovered from where toml can), then walked by hand: each key is checked
//! for its type and meaning and each mistake recorded with its span, so one
//! pass reports them all (a serde derive would stop at the first).

use std::collections::HashMap;
use std::ops::Range;

use cohort::Strategy;
use toml::Spanned;
use toml::de::{DeTable, DeValue};
use uuid::Uuid;

use super::period::parse_period;
use super::{
    Anonymise, CategoryRules, Diagnostic, Diagnostics, Entity, Exempt, Mask, Model, Override,
    RuleSpec, Selector, Severity, strategy_name,
};

type Value<'i> = Spanned<DeValue<'i>>;

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
const ENTITY_KEYS: &[&str] = &[
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
];
const EXEMPT_KEYS: &[&str] = &["name", "id", "table", "schema", "reason"];
const RULE_KEYS: &[&str] = &[
    "strategy",
    "period",
    "legal_minimum",
    "capabilities",
    "audit",
    "source",
    "reason",
    "override",
];
const OVERRIDE_KEYS: &[&str] = &[
    "tenant",
    "jurisdiction",
    "tag",
    "strategy",
    "period",
    "legal_minimum",
    "audit",
    "source",
    "reason",
];

struct Parser<'s> {
    file: String,
    src: &'s str,
    errors: Vec<Diagnostic>,
    warnings: Vec<Diagnostic>,
}

/// A string value with where it is.
#[derive(Debug, Clone)]
struct Text {
    value: String,
    span: Range<usize>,
}

impl<'s> Parser<'s> {
    fn position(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.src.len());
        let before = self.src.get(..offset).unwrap_or("");
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before.get(line_start..).map_or(0, |s| s.chars().count()) + 1;
        (line, column)
    }

    fn diagnostic(
        &self,
        span: &Range<usize>,
        key: &str,
        message: String,
        severity: Severity,
    ) -> Diagnostic {
        let (line, column) = self.position(span.start);
        Diagnostic {
            file: self.file.clone(),
            line,
            column,
            key: key.to_owned(),
            message,
            severity,
        }
    }

    fn error(&mut self, span: &Range<usize>, key: &str, message: impl Into<String>) {
        let d = self.diagnostic(span, key, message.into(), Severity::Error);
        self.errors.push(d);
    }

    fn warn(&mut self, span: &Range<usize>, key: &str, message: impl Into<String>) {
        let d = self.diagnostic(span, key, message.into(), Severity::Warning);
        self.warnings.push(d);
    }

    /// Reports keys of `table` that are not `allowed`.
    fn known_keys(&mut self, table: &DeTable<'_>, path: &str, allowed: &[&str]) {
        for (k, _) in table.iter() {
            let name = k.get_ref().as_ref();
            if !allowed.contains(&name) {
                let hint = closest(name, allowed)
                    .map(|c| format!("did you mean `{c}`? "))
                    .unwrap_or_default();
                self.error(
                    &k.span(),
                    &join(path, name),
                    format!(
                        "unknown key `{name}`; {hint}expected one of: {}",
                        allowed.join(", ")
                    ),
                );
            }
        }
    }

    fn string(&mut self, v: &Value<'_>, key: &str) -> Option<Text> {
        match v.get_ref() {
            DeValue::String(s) if s.trim().is_empty() => {
                self.error(&v.span(), key, "must not be empty");
                None
            }
            DeValue::String(s) if s.contains('\0') => {
                self.error(&v.span(), key, "must not contain a NUL character");
                None
            }
            DeValue::String(s) => Some(Text {
                value: s.to_string(),
                span: v.span(),
            }),
            other => {
                self.error(
                    &v.span(),
                    key,
                    format!("expected a string, found {}", kind(other)),
                );
                None
            }
        }
    }

    fn opt_string(&mut self, t: &DeTable<'_>, path: &str, name: &str) -> Option<Text> {
        get(t, name).and_then(|v| self.string(v, &join(path, name)))
    }

    fn req_string(
        &mut self,
        t: &DeTable<'_>,
        span: &Range<usize>,
        path: &str,
        name: &str,
        what: &str,
    ) -> Option<Text> {
        match get(t, name) {
            Some(v) => self.string(v, &join(path, name)),
            None => {
                self.error(span, &join(path, name), format!("missing: {what}"));
                None
            }
        }
    }

    fn boolean(&mut self, t: &DeTable<'_>, path: &str, name: &str) -> Option<bool> {
        let v = get(t, name)?;
        match v.get_ref() {
            DeValue::Boolean(b) => Some(*b),
            other => {
                self.error(
                    &v.span(),
                    &join(path, name),
                    format!("expected true or false, found {}", kind(other)),
                );
                None
            }
        }
    }

    fn uuid(&mut self, text: &Text, key: &str) -> Option<Uuid> {
        match Uuid::parse_str(text.value.trim()) {
            Ok(id) if id.is_nil() => {
                self.error(
                    &text.span,
                    key,
                    "the nil UUID is not an identity; use a new random UUID (for example from `uuidgen`)",
                );
                None
            }
            Ok(id) => Some(id),
            Err(e) => {
                self.error(
                    &text.span,
                    key,
                    format!("{:?} is not a UUID ({e}); use a new random UUID (for example from `uuidgen`)", text.value),
                );
                None
            }
        }
    }

    fn period(&mut self, t: &DeTable<'_>, path: &str, name: &str) -> Option<cohort::Period> {
        let v = get(t, name)?;
        let key = join(path, name);
        let text = match v.get_ref() {
            DeValue::String(s) => s.to_string(),
            DeValue::Integer(i) if i.as_str() == "0" => "0".to_owned(),
            other => {
                self.error(
                    &v.span(),
                    &key,
                    format!(
                        "expected a period as a string (\"30d\", \"18 months\", \"P1Y\"), found {}",
                        kind(other)
                    ),
                );
                return None;
            }
        };
        match parse_period(&text) {
            Ok(p) => Some(p),
            Err(e) => {
                self.error(&v.span(), &key, e);
                None
            }
        }
    }

    fn strategy(&mut self, t: &DeTable<'_>, path: &str, name: &str) -> Option<Spanned<Strategy>> {
        let text = self.opt_string(t, path, name)?;
        match parse_strategy(&text.value) {
            Some(s) => Some(Spanned::new(text.span, s)),
            None => {
                self.error(
                    &text.span,
                    &join(path, name),
                    format!(
                        "unknown strategy {:?}; use purge, soft-delete, anonymise or exempt",
                        text.value
                    ),
                );
                None
            }
        }
    }

    fn audit(&mut self, t: &DeTable<'_>, path: &str) -> Option<bool> {
        let text = self.opt_string(t, path, "audit")?;
        match text.value.to_ascii_lowercase().replace('_', "-").as_str() {
            "summary" => Some(false),
            "per-row" => Some(true),
            _ => {
                self.error(
                    &text.span,
                    &join(path, "audit"),
                    format!(
                        "unknown audit detail {:?}; use \"summary\" or \"per-row\"",
                        text.value
                    ),
                );
                None
            }
        }
    }

    fn table_of<'t, 'i>(&mut self, v: &'t Value<'i>, key: &str) -> Option<&'t DeTable<'i>> {
        match v.get_ref() {
            DeValue::Table(t) => Some(t),
            other => {
                self.error(
                    &v.span(),
                    key,
                    format!("expected a table, found {}", kind(other)),
                );
                None
            }
        }
    }

    /// An array of tables (`[[entity]]`), each with its span.
    fn tables_of<'t, 'i>(
        &mut self,
        v: &'t Value<'i>,
        key: &str,
    ) -> Vec<(usize, &'t DeTable<'i>, Range<usize>)> {
        let DeValue::Array(items) = v.get_ref() else {
            self.error(
                &v.span(),
                key,
                format!(
                    "expected an array of tables ([[{key}]]), found {}",
                    kind(v.get_ref())
                ),
            );
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let path = format!("{key}[{i}]");
            if let Some(t) = self.table_of(item, &path) {
                out.push((i, t, item.span()));
            }
        }
        out
    }
}

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

fn category_rules(
    p: &mut Parser<'_>,
    category: &str,
    t: &DeTable<'_>,
    span: &Range<usize>,
    path: &str,
) -> Option<CategoryRules> {
    p.known_keys(t, path, RULE_KEYS);
    let strategy = match get(t, "strategy") {
        Some(_) => p.strategy(t, path, "strategy"),
        None => {
            p.error(
                span,
                &join(path, "strategy"),
                "missing: the strategy (purge, soft-delete, anonymise or exempt)",
            );
            None
        }
    };
    let period = match get(t, "period") {
        Some(_) => p.period(t, path, "period"),
        None => {
            p.error(
                span,
                &join(path, "period"),
                "missing: how long rows are kept (\"30d\", \"18 months\", \"P1Y\")",
            );
            None
        }
    };
    let legal_minimum = p.period(t, path, "legal_minimum");
    let per_row_audit = p.audit(t, path).unwrap_or(false);
    let source = p.opt_string(t, path, "source").map(|s| s.value);
    let reason = p.opt_string(t, path, "reason").map(|s| s.value);

    let mut declared: Option<(Vec<Strategy>, Range<usize>)> = None;
    if let Some(v) = get(t, "capabilities") {
        let key = join(path, "capabilities");
        match v.get_ref() {
            DeValue::Array(items) if !items.is_empty() => {
                let mut list = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    let k = format!("{key}[{i}]");
                    if let Some(s) = p.string(item, &k) {
                        match parse_strategy(&s.value) {
                            Some(st) if !list.contains(&st) => list.push(st),
                            Some(_) => {}
                            None => p.error(
                                &s.span,
                                &k,
                                format!("unknown strategy {:?}; use purge, soft-delete, anonymise or exempt", s.value),
                            ),
                        }
                    }
                }
                declared = Some((list, v.span()));
            }
            DeValue::Array(_) => p.error(&v.span(), &key, "must list at least one strategy"),
            other => p.error(
                &v.span(),
                &key,
                format!("expected an array of strategies, found {}", kind(other)),
            ),
        }
    }

    let mut overrides = Vec::new();
    if let Some(v) = get(t, "override") {
        let key = join(path, "override");
        for (i, ot, ospan) in p.tables_of(v, &key) {
            let opath = format!("{key}[{i}]");
            if let Some(o) = override_of(p, ot, &ospan, &opath) {
                if let Some(prev) = overrides
                    .iter()
                    .position(|x: &(Override, Range<usize>)| x.0.selector == o.selector)
                {
                    p.error(
                        &ospan,
                        &opath,
                        format!(
                            "{} already has an override ({key}[{prev}]); merge the two",
                            o.selector
                        ),
                    );
                    continue;
                }
                overrides.push((o, ospan));
            }
        }
    }

    let strategy = strategy?;
    let period = period?;

    // Capabilities: as declared, or every strategy the rule and its
    // overrides use. Declared ones must cover those.
    let mut used: Vec<(Strategy, Range<usize>)> = vec![(*strategy.get_ref(), strategy.span())];
    for (o, ospan) in &overrides {
        if let Some(s) = o.strategy {
            used.push((s, ospan.clone()));
        }
    }
    let capabilities = match declared {
        Some((list, _)) => {
            for (s, sspan) in &used {
                if !list.contains(s) {
                    p.error(
                        sspan,
                        &join(path, "capabilities"),
                        format!(
                            "strategy {} is used but not listed in capabilities; add it, or remove `capabilities` to derive them",
                            strategy_name(*s)
                        ),
                    );
                }
            }
            list
        }
        None => {
            let mut list: Vec<Strategy> = Vec::new();
            for (s, _) in &used {
                if !list.contains(s) {
                    list.push(*s);
                }
            }
            list
        }
    };
    Some(CategoryRules {
        category: category.to_owned(),
        base: RuleSpec {
            strategy: *strategy.get_ref(),
            period,
            legal_minimum,
            per_row_audit,
            source,
            reason,
        },
        capabilities,
        overrides: overrides.into_iter().map(|(o, _)| o).collect(),
    })
}

fn override_of(
    p: &mut Parser<'_>,
    t: &DeTable<'_>,
    span: &Range<usize>,
    path: &str,
) -> Option<Override> {
    p.known_keys(t, path, OVERRIDE_KEYS);
    let tenant = p.opt_string(t, path, "tenant");
    let jurisdiction = p.opt_string(t, path, "jurisdiction");
    let tag = p.opt_string(t, path, "tag");
    let given = [tenant.is_some(), jurisdiction.is_some(), tag.is_some()]
        .iter()
        .filter(|b| **b)
        .count();
    let present = ["tenant", "jurisdiction", "tag"]
        .iter()
        .any(|k| get(t, k).is_some());
    if given != 1 {
        if given > 1 || !present {
            p.error(
                span,
                path,
                "an override applies to exactly one of: tenant = \"<uuid>\", jurisdiction = \"DE\", tag = \"...\"",
            );
        }
        return None;
    }
    let selector = if let Some(t) = tenant {
        Selector::Tenant(p.uuid(&t, &join(path, "tenant"))?)
    } else if let Some(j) = jurisdiction {
        Selector::Jurisdiction(j.value)
    } else {
        Selector::Tag(tag?.value)
    };
    let o = Override {
        selector,
        strategy: p.strategy(t, path, "strategy").map(|s| *s.get_ref()),
        period: p.period(t, path, "period"),
        legal_minimum: p.period(t, path, "legal_minimum"),
        per_row_audit: p.audit(t, path),
        source: p.opt_string(t, path, "source").map(|s| s.value),
        reason: p.opt_string(t, path, "reason").map(|s| s.value),
    };
    let changes = [
        "strategy",
        "period",
        "legal_minimum",
        "audit",
        "source",
        "reason",
    ]
    .iter()
    .any(|k| get(t, k).is_some());
    if !changes {
        p.error(span, path, "the override changes nothing; set strategy, period, legal_minimum, audit, source or reason");
    }
    Some(o)
}

fn entity(
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
    let category = p.req_string(
        t,
        span,
        path,
        "category",
        "the retention category (category = \"accounts\")",
    );
    let anchor = p.req_string(
        t,
        span,
        path,
        "anchor",
        "the timestamptz column that ages a row (anchor = \"created_at\")",
    );
    let record_id = p.opt_string(t, path, "record_id");
    let tenant = p.opt_string(t, path, "tenant");
    let tenantless = p.boolean(t, path, "tenantless").unwrap_or(false);
    let soft_delete = p.opt_string(t, path, "soft_delete");
    let deleted_at = p.opt_string(t, path, "deleted_at");
    let anonymised_at = p.opt_string(t, path, "anonymised_at");

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

    let mut erasure_subjects = Vec::new();
    if let Some(v) = get(t, "erasure_subjects") {
        let key = join(path, "erasure_subjects");
        match v.get_ref() {
            DeValue::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    let k = format!("{key}[{i}]");
                    if let Some(s) = p.string(item, &k) {
                        if erasure_subjects.contains(&s.value) {
                            p.error(&s.span, &k, format!("column {:?} is listed twice", s.value));
                        } else {
                            erasure_subjects.push(s.value);
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
    }

    let table = table?;
    Some(Entity {
        name: name.map_or_else(|| table.value.clone(), |n| n.value),
        id: id?,
        table: table.value,
        schema: schema.map(|s| s.value),
        category: category?.value,
        anchor: anchor?.value,
        record_id: record_id.map(|t| t.value),
        tenant: tenant.map(|t| t.value),
        tenantless,
        soft_delete: soft_delete.map(|t| t.value),
        deleted_at: deleted_at.map(|t| t.value),
        anonymised_at: anonymised_at.map(|t| t.value),
        anonymise,
        erasure_subjects,
    })
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

fn exempt(p: &mut Parser<'_>, t: &DeTable<'_>, span: &Range<usize>, path: &str) -> Option<Exempt> {
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

/// A strategy by name: `purge`, `soft-delete` (`soft_delete`, `softdelete`),
/// `anonymise` (`anonymize`), `exempt`, in any case.
pub(crate) fn parse_strategy(text: &str) -> Option<Strategy> {
    match text
        .trim()
        .to_ascii_lowercase()
        .replace(['-', '_', ' '], "")
        .as_str()
    {
        "purge" => Some(Strategy::Purge),
        "softdelete" => Some(Strategy::SoftDelete),
        "anonymise" | "anonymize" => Some(Strategy::Anonymise),
        "exempt" => Some(Strategy::Exempt),
        _ => None,
    }
}

fn get<'t, 'i>(t: &'t DeTable<'i>, key: &str) -> Option<&'t Value<'i>> {
    t.iter()
        .find(|(k, _)| k.get_ref().as_ref() == key)
        .map(|(_, v)| v)
}

fn kind(v: &DeValue<'_>) -> &'static str {
    match v {
        DeValue::String(_) => "a string",
        DeValue::Integer(_) => "an integer",
        DeValue::Float(_) => "a float",
        DeValue::Boolean(_) => "a boolean",
        DeValue::Datetime(_) => "a date-time",
        DeValue::Array(_) => "an array",
        DeValue::Table(_) => "a table",
    }
}

/// A key as it is written in a path: bare when it can be, quoted otherwise.
fn key_segment(key: &str) -> String {
    if !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        key.to_owned()
    } else {
        format!("{key:?}")
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key_segment(key)
    } else {
        format!("{path}.{}", key_segment(key))
    }
}

/// The allowed key closest to a mistyped one, if it is close.
fn closest<'a>(name: &str, allowed: &[&'a str]) -> Option<&'a str> {
    allowed
        .iter()
        .map(|a| (distance(name, a), *a))
        .filter(|(d, a)| *d <= 2.max(a.len() / 4))
        .min_by_key(|(d, _)| *d)
        .map(|(_, a)| a)
}

fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != cb);
            let v = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
            cur.push(v);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

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
