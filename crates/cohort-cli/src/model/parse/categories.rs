//! The `[rules.<category>]` tables: each category's base rule, its
//! capabilities (declared, or derived from the strategies used) and its
//! per-tenant, per-jurisdiction and per-tag overrides, built into
//! [`CategoryRules`] for [`crate::model::rules::FileRules`].

use std::ops::Range;

use cohort::Strategy;
use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::reader::{Parser, get, join, kind};
use crate::model::period::parse_period;
use crate::model::{CategoryRules, Override, RuleSpec, Selector, strategy_name};

const RULE_KEYS: &[&str] = &[
    "strategy",
    "period",
    "legal_minimum",
    "capabilities",
    "audit",
    "source",
    "reason",
    "override",
    "stage",
    "archive",
    "after_event",
    "review",
];
const STAGE_KEYS: &[&str] = &["strategy", "period", "review"];
const REVIEW_KEYS: &[&str] = &["approvers", "auto_approve_after", "reoffer_after"];
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

/// Reads of the values only rules have.
impl Parser<'_> {
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
                        "unknown strategy {:?}; use purge, soft-delete, anonymise, archive or exempt",
                        text.value
                    ),
                );
                None
            }
        }
    }

    /// `review = true`, or `review = { approvers = 2, auto_approve_after =
    /// "30d", reoffer_after = "1y" }` (contract DR1); `review = false` and
    /// no key mean none.
    fn review(&mut self, t: &DeTable<'_>, path: &str) -> Option<cohort::Review> {
        let v = get(t, "review")?;
        let key = join(path, "review");
        let rt = match v.get_ref() {
            DeValue::Boolean(true) => return Some(cohort::Review::new()),
            DeValue::Boolean(false) => return None,
            DeValue::Table(rt) => rt,
            other => {
                self.error(
                    &v.span(),
                    &key,
                    format!(
                        "expected true, or a table such as {{ approvers = 2, auto_approve_after = \"30d\" }}, found {}",
                        kind(other)
                    ),
                );
                return None;
            }
        };
        self.known_keys(rt, &key, REVIEW_KEYS);
        let mut review = cohort::Review::new();
        if let Some(n) = get(rt, "approvers") {
            match n.get_ref() {
                DeValue::Integer(i) if i.as_str() == "1" || i.as_str() == "2" => {
                    review = review.approvers(if i.as_str() == "2" { 2 } else { 1 });
                }
                other => self.error(
                    &n.span(),
                    &join(&key, "approvers"),
                    format!(
                        "expected 1 or 2 (distinct approvers a batch needs), found {}",
                        match other {
                            DeValue::Integer(i) => i.as_str().to_owned(),
                            o => kind(o).to_owned(),
                        }
                    ),
                ),
            }
        }
        if let Some(p) = self.period(rt, &key, "auto_approve_after") {
            review = review.auto_approve_after(p);
        }
        if let Some(p) = self.period(rt, &key, "reoffer_after") {
            review = review.reoffer_after(p);
        }
        Some(review)
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
}

/// The rules of `category`, from its table `t` at `span` (`path` names it in
/// diagnostics).
pub(super) fn category_rules(
    p: &mut Parser<'_>,
    category: &str,
    t: &DeTable<'_>,
    span: &Range<usize>,
    path: &str,
) -> Option<CategoryRules> {
    p.known_keys(t, path, RULE_KEYS);
    if let Some(v) = get(t, "stage") {
        return staged_rules(p, category, t, v, path);
    }
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
    let review = p.review(t, path);

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
                                format!("unknown strategy {:?}; use purge, soft-delete, anonymise, archive or exempt", s.value),
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
            then: Vec::new(),
            after_event: p.opt_string(t, path, "after_event").map(|s| s.value),
            review,
        },
        archive: archive_schema(p, t, path, &capabilities),
        capabilities,
        overrides: overrides.into_iter().map(|(o, _)| o).collect(),
    })
}

/// A staged rule (contract SL1): `[[rules.<category>.stage]]` lists every
/// stage in order, each a strategy and a period (the first counted from the
/// anchor, each later one from the previous stage's stamp). The rule's other
/// keys (legal minimum, audit, provenance, capabilities) apply to every
/// stage; overrides may change those, not the stages.
fn staged_rules(
    p: &mut Parser<'_>,
    category: &str,
    t: &DeTable<'_>,
    v: &Spanned<DeValue<'_>>,
    path: &str,
) -> Option<CategoryRules> {
    let key = join(path, "stage");
    for name in ["strategy", "period", "review"] {
        if let Some(x) = get(t, name) {
            p.error(
                &x.span(),
                &join(path, name),
                format!(
                    "a staged rule lists every stage under [[{key}]]; move {name} into its first stage"
                ),
            );
        }
    }
    let mut stages: Vec<(
        Strategy,
        cohort::Period,
        Range<usize>,
        Option<cohort::Review>,
    )> = Vec::new();
    let mut complete = true;
    for (i, st, sspan) in p.tables_of(v, &key) {
        let spath = format!("{key}[{i}]");
        p.known_keys(st, &spath, STAGE_KEYS);
        let strategy = match get(st, "strategy") {
            Some(_) => p.strategy(st, &spath, "strategy"),
            None => {
                p.error(
                    &sspan,
                    &join(&spath, "strategy"),
                    "missing: the stage's strategy (purge, soft-delete or anonymise)",
                );
                None
            }
        };
        let period = match get(st, "period") {
            Some(_) => p.period(st, &spath, "period"),
            None => {
                p.error(
                    &sspan,
                    &join(&spath, "period"),
                    if i == 0 {
                        "missing: how long after the anchor (\"30d\", \"18 months\")"
                    } else {
                        "missing: how long after the previous stage (\"60d\", \"6 years\")"
                    },
                );
                None
            }
        };
        let review = p.review(st, &spath);
        match (strategy, period) {
            (Some(s), Some(per)) => stages.push((*s.get_ref(), per, sspan, review)),
            _ => complete = false,
        }
    }
    if stages.is_empty() {
        if complete {
            p.error(&v.span(), &key, "a staged rule needs at least one stage");
        }
        return None;
    }
    // The library's own checks of a stage list, each at its stage.
    let mut rule = cohort::Rule::new(stages[0].1, stages[0].0);
    for (s, per, _, review) in &stages[1..] {
        rule = match review {
            Some(r) => rule.then_reviewed(*per, *s, *r),
            None => rule.then(*per, *s),
        };
    }
    for problem in rule.stage_problems() {
        let number = match problem {
            cohort::policy::StageProblem::ZeroPeriod { stage }
            | cohort::policy::StageProblem::Repeated { stage, .. }
            | cohort::policy::StageProblem::AfterPurge { stage }
            | cohort::policy::StageProblem::Exempt { stage } => stage,
            _ => 1,
        };
        let span = stages
            .get(number.saturating_sub(1))
            .map_or(v.span(), |s| s.2.clone());
        p.error(
            &span,
            &format!("{key}[{}]", number.saturating_sub(1)),
            problem.to_string(),
        );
    }
    let legal_minimum = p.period(t, path, "legal_minimum");
    let per_row_audit = p.audit(t, path).unwrap_or(false);
    let source = p.opt_string(t, path, "source").map(|s| s.value);
    let reason = p.opt_string(t, path, "reason").map(|s| s.value);
    let mut capabilities: Vec<Strategy> = Vec::new();
    for (s, _, _, _) in &stages {
        if !capabilities.contains(s) {
            capabilities.push(*s);
        }
    }
    if get(t, "capabilities").is_some() {
        p.error(
            &v.span(),
            &join(path, "capabilities"),
            "a staged rule's capabilities are its stages' strategies; remove `capabilities`",
        );
    }
    let mut overrides = Vec::new();
    if let Some(ov) = get(t, "override") {
        let okey = join(path, "override");
        for (i, ot, ospan) in p.tables_of(ov, &okey) {
            let opath = format!("{okey}[{i}]");
            for name in ["strategy", "period"] {
                if let Some(x) = get(ot, name) {
                    p.error(
                        &x.span(),
                        &join(&opath, name),
                        format!(
                            "an override of a staged rule may change its legal minimum, audit, source \
                             or reason, not its stages' {name}"
                        ),
                    );
                }
            }
            if let Some(o) = override_of(p, ot, &ospan, &opath) {
                overrides.push(o);
            }
        }
    }
    Some(CategoryRules {
        category: category.to_owned(),
        base: RuleSpec {
            strategy: stages[0].0,
            period: stages[0].1,
            legal_minimum,
            per_row_audit,
            source,
            reason,
            then: rule.then,
            after_event: p.opt_string(t, path, "after_event").map(|s| s.value),
            review: stages[0].3,
        },
        archive: archive_schema(p, t, path, &capabilities),
        capabilities,
        overrides,
    })
}

/// `archive = "<schema>"`: where the category's archive tables are; needed
/// exactly when it may archive.
fn archive_schema(
    p: &mut Parser<'_>,
    t: &DeTable<'_>,
    path: &str,
    capabilities: &[Strategy],
) -> Option<String> {
    let archive = p.opt_string(t, path, "archive");
    let archives = capabilities.contains(&Strategy::Archive);
    match (&archive, archives) {
        (None, true) => {
            if let Some(v) = get(t, "strategy").or_else(|| get(t, "stage")) {
                p.error(
                    &v.span(),
                    &join(path, "archive"),
                    "the category may archive: name the schema of its archive tables (archive = \"archive\")",
                );
            }
        }
        (Some(a), false) => p.error(
            &a.span,
            &join(path, "archive"),
            "archive names the archive tables' schema, but no strategy of the category archives",
        ),
        _ => {}
    }
    archive.map(|a| a.value)
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

/// A strategy by name: `purge`, `soft-delete` (`soft_delete`, `softdelete`),
/// `anonymise` (`anonymize`), `exempt`, in any case.
pub(super) fn parse_strategy(text: &str) -> Option<Strategy> {
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
        "archive" => Some(Strategy::Archive),
        _ => None,
    }
}
