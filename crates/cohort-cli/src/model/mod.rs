//! The model file: retained tables, explicit exemptions and rules, in TOML.
//!
//! [`parse()`] reads the file into a [`Model`], reporting every mistake at
//! once with its file, line and key ([`Diagnostics`]). [`build`] turns the
//! model into the same descriptors `#[derive(Retained)]` emits and
//! [`rules::FileRules`] into a [`cohort::RuleProvider`], so validation,
//! preview, sweep, holds, erasure and the ledger are the library's own.

pub(crate) mod build;
pub(crate) mod parse;
pub(crate) mod period;
#[cfg(test)]
mod properties;
pub(crate) mod rules;

use std::fmt;

use cohort::{Period, Strategy};
use serde::Serialize;
use uuid::Uuid;

pub(crate) use parse::{ParseOptions, parse};

/// How serious a diagnostic is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Severity {
    /// The model cannot be used.
    Error,
    /// Worth a look; the model works.
    Warning,
}

/// One mistake (or warning) in the model file, with where it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Diagnostic {
    /// The file, as given.
    pub(crate) file: String,
    /// 1-based line.
    pub(crate) line: usize,
    /// 1-based column (characters).
    pub(crate) column: usize,
    /// The key concerned, as a path (`entity[1].anchor`, `rules.accounts.period`).
    pub(crate) key: String,
    /// What is wrong and how to fix it.
    pub(crate) message: String,
    /// Error or warning.
    pub(crate) severity: Severity,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(
            f,
            "{}:{}:{}: {kind}: {}: {}",
            self.file, self.line, self.column, self.key, self.message
        )
    }
}

/// Every mistake found in a model file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Diagnostics {
    /// The file.
    pub(crate) file: String,
    /// The mistakes, in file order.
    pub(crate) errors: Vec<Diagnostic>,
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "the model file {} has {} mistake(s):",
            self.file,
            self.errors.len()
        )?;
        for e in &self.errors {
            writeln!(f, "  {e}")?;
        }
        Ok(())
    }
}

/// The whole model file.
#[derive(Debug, Clone, Default)]
pub(crate) struct Model {
    /// The file it was read from.
    pub(crate) file: String,
    /// Retained tables, in file order.
    pub(crate) entities: Vec<Entity>,
    /// Explicitly exempt tables, in file order.
    pub(crate) exempt: Vec<Exempt>,
    /// Rules per category, in file order.
    pub(crate) rules: Vec<CategoryRules>,
    /// What is odd but not wrong (a rule no table uses).
    pub(crate) warnings: Vec<Diagnostic>,
}

impl Model {
    /// The rules of `category`.
    pub(crate) fn rules_of(&self, category: &str) -> Option<&CategoryRules> {
        self.rules.iter().find(|r| r.category == category)
    }

    /// The entity named `name` (its `name`, or its table when unnamed), or
    /// whose retained-entity id is `name`.
    pub(crate) fn entity(&self, name: &str) -> Option<&Entity> {
        let id = Uuid::parse_str(name).ok();
        self.entities
            .iter()
            .find(|e| e.name == name || Some(e.id) == id)
    }
}

/// A retained table.
#[derive(Debug, Clone)]
pub(crate) struct Entity {
    /// The 1-based line of its `[[entity]]` in the model file.
    pub(crate) line: usize,
    /// Its name in reports and the ledger (`entity_type`); default: the table.
    pub(crate) name: String,
    /// The stable retained-entity id.
    pub(crate) id: Uuid,
    /// The table.
    pub(crate) table: String,
    /// Its schema, when given (else the settings' `default_table_schema`).
    pub(crate) schema: Option<String>,
    /// The retention category.
    pub(crate) category: String,
    /// The `timestamptz` column that ages a row.
    pub(crate) anchor: String,
    /// Role columns given explicitly (else the conventions apply).
    pub(crate) record_id: Option<String>,
    /// The tenant column, when given.
    pub(crate) tenant: Option<String>,
    /// Rows belong to no tenant.
    pub(crate) tenantless: bool,
    /// The soft-delete flag column, when given.
    pub(crate) soft_delete: Option<String>,
    /// The deleted-at column, when given.
    pub(crate) deleted_at: Option<String>,
    /// The anonymised-at column, when given.
    pub(crate) anonymised_at: Option<String>,
    /// Columns to scrub when the strategy is anonymise, in file order.
    pub(crate) anonymise: Vec<(String, Anonymise)>,
    /// Columns any of which equal to a subject makes a row an erasure match.
    pub(crate) erasure_subjects: Vec<String>,
    /// `guard = true`: the database refuses changes to held rows (H17).
    pub(crate) guard: bool,
    /// `guard_allow`: the columns an update of a held row may change.
    pub(crate) guard_allow: Vec<String>,
    /// `category_from` and `[entity.category_map]` (contract SL3).
    pub(crate) category_from: Option<CategoryFromSpec>,
    /// `event_key`: the column holding the subject key events are recorded
    /// for (contract SL4).
    pub(crate) event_key: Option<String>,
}

/// Each row's category from a column (contract SL3).
#[derive(Debug, Clone)]
pub(crate) struct CategoryFromSpec {
    /// The column.
    pub(crate) column: String,
    /// Each value with its category, in file order.
    pub(crate) map: Vec<(String, String)>,
    /// Whether the entity's `category` is a default for unmapped values.
    pub(crate) default: bool,
}

impl Entity {
    /// Every category the table's rows may be in.
    pub(crate) fn categories(&self) -> Vec<&str> {
        let Some(from) = &self.category_from else {
            return vec![self.category.as_str()];
        };
        let mut out: Vec<&str> = Vec::new();
        for (_, c) in &from.map {
            if !out.contains(&c.as_str()) {
                out.push(c);
            }
        }
        if from.default && !out.contains(&self.category.as_str()) {
            out.push(&self.category);
        }
        out
    }
}

/// How a column is scrubbed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Anonymise {
    /// Set NULL.
    Null,
    /// Set the empty string.
    Empty,
    /// Set a fixed text.
    Literal(String),
    /// HMAC-SHA256 of the value with the settings' `hash_key`, as hex.
    Hash,
    /// Keep the first and last characters, replace the rest.
    Mask(Mask),
}

impl fmt::Display for Anonymise {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Anonymise::Null => f.write_str("set NULL"),
            Anonymise::Empty => f.write_str("set to the empty string"),
            Anonymise::Literal(text) => write!(f, "set to {text:?}"),
            Anonymise::Hash => f.write_str("keyed hash (HMAC-SHA256, hex)"),
            Anonymise::Mask(m) => write!(
                f,
                "masked with {:?}, keeping the first {} and last {} characters",
                m.with, m.keep_first, m.keep_last
            ),
        }
    }
}

/// The parameters of a mask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mask {
    /// Characters kept at the start.
    pub(crate) keep_first: usize,
    /// Characters kept at the end.
    pub(crate) keep_last: usize,
    /// The replacement character.
    pub(crate) with: char,
}

impl Default for Mask {
    fn default() -> Self {
        Mask {
            keep_first: 1,
            keep_last: 1,
            with: '*',
        }
    }
}

/// A table explicitly out of retention.
#[derive(Debug, Clone)]
pub(crate) struct Exempt {
    /// Its name in reports; default: the table.
    pub(crate) name: String,
    /// The table.
    pub(crate) table: String,
    /// Its schema, when given.
    pub(crate) schema: Option<String>,
    /// Why it is exempt (shown in reports).
    pub(crate) reason: String,
    /// A retained-entity id, optional for exempt tables.
    pub(crate) id: Option<Uuid>,
}

/// The rules of one category.
#[derive(Debug, Clone)]
pub(crate) struct CategoryRules {
    /// The category.
    pub(crate) category: String,
    /// The rule for every tenant without an override.
    pub(crate) base: RuleSpec,
    /// Every strategy the category can resolve to.
    pub(crate) capabilities: Vec<Strategy>,
    /// The schema its archive tables are in (`archive = "<schema>"`), when
    /// it may archive.
    pub(crate) archive: Option<String>,
    /// Per-tenant (or per-jurisdiction, per-tag) overrides, in file order.
    pub(crate) overrides: Vec<Override>,
}

/// One rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RuleSpec {
    /// What happens to old rows.
    pub(crate) strategy: Strategy,
    /// How long rows are kept.
    pub(crate) period: Period,
    /// A legal minimum no rule can shorten (and erasure's only age condition).
    pub(crate) legal_minimum: Option<Period>,
    /// Whether the ledger records each changed row.
    pub(crate) per_row_audit: bool,
    /// Where the rule comes from.
    pub(crate) source: Option<String>,
    /// Why it applies.
    pub(crate) reason: Option<String>,
    /// The later stages of a staged rule (`[[rules.<category>.stage]]`
    /// after the first), in order; empty for a single-stage rule.
    pub(crate) then: Vec<cohort::Stage>,
    /// `after_event`: the event type the period counts from (contract SL4).
    pub(crate) after_event: Option<String>,
    /// The first stage's disposition review (`review = ...`), if any; a
    /// later stage's is in its [`cohort::Stage::review`].
    pub(crate) review: Option<cohort::Review>,
}

impl RuleSpec {
    /// Every stage: the rule's own strategy and period first.
    pub(crate) fn stages(&self) -> Vec<(Strategy, Period)> {
        let mut stages = vec![(self.strategy, self.period)];
        stages.extend(self.then.iter().map(|s| (s.strategy, s.period)));
        stages
    }
}

/// What an override applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Selector {
    /// One tenant.
    Tenant(Uuid),
    /// Tenants of a jurisdiction (`--jurisdiction`).
    Jurisdiction(String),
    /// Tenants with a tag (`--tag`).
    Tag(String),
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Selector::Tenant(id) => write!(f, "tenant {id}"),
            Selector::Jurisdiction(j) => write!(f, "jurisdiction {j}"),
            Selector::Tag(t) => write!(f, "tag {t}"),
        }
    }
}

/// An override: the fields it sets replace the base rule's.
#[derive(Debug, Clone)]
pub(crate) struct Override {
    /// Whom it applies to.
    pub(crate) selector: Selector,
    /// A different strategy.
    pub(crate) strategy: Option<Strategy>,
    /// A different period.
    pub(crate) period: Option<Period>,
    /// A different legal minimum.
    pub(crate) legal_minimum: Option<Period>,
    /// A different audit detail.
    pub(crate) per_row_audit: Option<bool>,
    /// A different source.
    pub(crate) source: Option<String>,
    /// A different reason.
    pub(crate) reason: Option<String>,
}

impl Override {
    /// The base rule with this override applied.
    pub(crate) fn apply(&self, base: &RuleSpec) -> RuleSpec {
        RuleSpec {
            strategy: self.strategy.unwrap_or(base.strategy),
            period: self.period.unwrap_or(base.period),
            legal_minimum: self.legal_minimum.or(base.legal_minimum),
            per_row_audit: self.per_row_audit.unwrap_or(base.per_row_audit),
            source: self.source.clone().or_else(|| base.source.clone()),
            reason: self.reason.clone().or_else(|| base.reason.clone()),
            then: base.then.clone(),
            review: base.review,
            after_event: base.after_event.clone(),
        }
    }
}

/// A strategy's name in the model file and in the command's output.
pub(crate) fn strategy_name(s: Strategy) -> &'static str {
    match s {
        Strategy::Purge => "purge",
        Strategy::SoftDelete => "soft-delete",
        Strategy::Anonymise => "anonymise",
        Strategy::Exempt => "exempt",
        Strategy::Archive => "archive",
        _ => "unknown",
    }
}
