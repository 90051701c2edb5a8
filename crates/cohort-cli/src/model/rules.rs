//! The model file's rules as a [`RuleProvider`]: what a host would write by
//! hand, generated from `[rules.<category>]`.

use cohort::policy::{AuditDetail, ProviderError};
use cohort::{BoxFuture, Capabilities, ResolutionContext, Rule, RuleProvider, TenantContext};

use super::{CategoryRules, Model, RuleSpec, Selector};

/// The rules of a model file.
#[derive(Debug, Clone)]
pub(crate) struct FileRules {
    rules: Vec<CategoryRules>,
}

impl FileRules {
    /// The rules of `model`.
    pub(crate) fn new(model: &Model) -> FileRules {
        FileRules {
            rules: model.rules.clone(),
        }
    }
}

/// The rule that applies to `tenant`: an override naming the tenant, else
/// the first naming its jurisdiction, else the first naming one of its tags,
/// else the base rule.
pub(crate) fn rule_for(rules: &CategoryRules, tenant: Option<&TenantContext>) -> RuleSpec {
    let Some(t) = tenant else {
        return rules.base.clone();
    };
    let by_tenant = rules
        .overrides
        .iter()
        .find(|o| o.selector == Selector::Tenant(t.id));
    let by_jurisdiction = || {
        rules.overrides.iter().find(|o| {
            matches!(&o.selector, Selector::Jurisdiction(j)
                if t.jurisdiction.as_deref().is_some_and(|tj| tj.eq_ignore_ascii_case(j)))
        })
    };
    let by_tag = || {
        rules
            .overrides
            .iter()
            .find(|o| matches!(&o.selector, Selector::Tag(tag) if t.tags.contains(tag)))
    };
    match by_tenant.or_else(by_jurisdiction).or_else(by_tag) {
        Some(o) => o.apply(&rules.base),
        None => rules.base.clone(),
    }
}

/// The library's rule for a rule of the model.
pub(crate) fn to_rule(spec: &RuleSpec) -> Rule {
    let mut rule = Rule::new(spec.period, spec.strategy);
    rule.legal_minimum = spec.legal_minimum;
    if spec.per_row_audit {
        rule.audit = AuditDetail::PerRow;
    }
    rule.source = spec.source.clone();
    rule.reason = spec.reason.clone();
    rule.then = spec.then.clone();
    rule.after_event = spec.after_event.clone();
    rule.review = spec.review;
    rule
}

impl RuleProvider for FileRules {
    fn capabilities(&self, category: &str) -> Option<Capabilities> {
        let r = self.rules.iter().find(|r| r.category == category)?;
        let mut strategies = r.capabilities.iter().copied();
        let first = strategies.next()?;
        let capabilities = strategies.fold(Capabilities::only(first), Capabilities::and);
        let capabilities = if r.base.then.is_empty() {
            capabilities
        } else {
            capabilities.staged()
        };
        let capabilities = match &r.base.after_event {
            Some(event) => capabilities.after_event(event.clone()),
            None => capabilities,
        };
        Some(match &r.archive {
            Some(schema) => capabilities.archive_into(schema.clone()),
            None => capabilities,
        })
    }

    fn resolve<'a>(
        &'a self,
        ctx: ResolutionContext<'a>,
    ) -> BoxFuture<'a, Result<Option<Rule>, ProviderError>> {
        let rule = self
            .rules
            .iter()
            .find(|r| r.category == ctx.category)
            .map(|r| to_rule(&rule_for(r, ctx.tenant)));
        Box::pin(async move { Ok(rule) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Override;
    use cohort::{Period, Strategy};
    use uuid::Uuid;

    fn rules() -> CategoryRules {
        let base = RuleSpec {
            strategy: Strategy::Anonymise,
            period: Period::months(18),
            legal_minimum: None,
            per_row_audit: false,
            source: Some("policy".into()),
            reason: None,
            then: Vec::new(),
            after_event: None,
            review: None,
        };
        let o = |selector, period| Override {
            selector,
            strategy: None,
            period: Some(period),
            legal_minimum: None,
            per_row_audit: None,
            source: None,
            reason: None,
        };
        CategoryRules {
            category: "accounts".into(),
            base,
            capabilities: vec![Strategy::Anonymise],
            archive: None,
            overrides: vec![
                o(Selector::Tag("vip".into()), Period::days(3)),
                o(Selector::Jurisdiction("DE".into()), Period::days(2)),
                o(Selector::Tenant(Uuid::from_u128(7)), Period::days(1)),
            ],
        }
    }

    #[test]
    fn a_tenant_override_beats_a_jurisdiction_which_beats_a_tag() {
        let r = rules();
        let mut t = TenantContext::new(Uuid::from_u128(7));
        t.jurisdiction = Some("de".into());
        t.tags = vec!["vip".into()];
        assert_eq!(rule_for(&r, Some(&t)).period, Period::days(1));
        t.id = Uuid::from_u128(8);
        assert_eq!(rule_for(&r, Some(&t)).period, Period::days(2));
        t.jurisdiction = None;
        assert_eq!(rule_for(&r, Some(&t)).period, Period::days(3));
        t.tags.clear();
        assert_eq!(rule_for(&r, Some(&t)).period, Period::months(18));
        assert_eq!(rule_for(&r, None).period, Period::months(18));
        // Unset fields come from the base rule.
        assert_eq!(
            rule_for(&r, Some(&TenantContext::new(Uuid::from_u128(7))))
                .source
                .as_deref(),
            Some("policy")
        );
    }
}
