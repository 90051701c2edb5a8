//! Resolving one entity's rule for a run: the provider call, its checks, and
//! the cutoff.

use std::panic::AssertUnwindSafe;

use chrono::{DateTime, Utc};
use futures_util::FutureExt;

use crate::ledger::{Failure, FailureKind};
use crate::model::resolved::ResolvedEntity;
use crate::policy::{Period, ResolutionContext, Rule, RuleProvider, Strategy, TenantContext};

/// What a run does with one entity.
#[derive(Debug, Clone)]
pub(crate) struct EntityPlan {
    pub(crate) rule: Rule,
    /// The period actually applied (the greater of period and legal minimum).
    pub(crate) applied: Period,
    pub(crate) cutoff: DateTime<Utc>,
    /// The logical time the plan was made for.
    pub(crate) now: DateTime<Utc>,
}

/// Resolves the rule and checks it. Errors are sanitized failures of this entity.
pub(crate) async fn plan(
    provider: &dyn RuleProvider,
    e: &ResolvedEntity,
    tenant: Option<&TenantContext>,
    now: DateTime<Utc>,
) -> Result<EntityPlan, Failure> {
    let ctx = ResolutionContext {
        category: e.category,
        tenant,
        now,
    };
    // A provider may panic while building its future as well as inside it.
    let resolved = match std::panic::catch_unwind(AssertUnwindSafe(|| provider.resolve(ctx))) {
        Ok(future) => AssertUnwindSafe(future).catch_unwind().await,
        Err(panic) => Err(panic),
    };
    let rule = match resolved {
        Err(_) => {
            return Err(Failure::reason(
                FailureKind::RuleProviderPanic,
                &format_args!("rule provider panicked resolving category {:?}", e.category),
            ));
        }
        Ok(Err(err)) => return Err(Failure::logged(FailureKind::RuleProvider, None, &err)),
        Ok(Ok(None)) => {
            return Err(Failure::reason(
                FailureKind::UnresolvedCategory,
                &format_args!(
                    "category {:?} resolved to no rule for {}",
                    e.category,
                    e.type_name()
                ),
            ));
        }
        Ok(Ok(Some(rule))) => rule,
    };
    if !e.capabilities.allows(rule.strategy) {
        return Err(Failure::reason(
            FailureKind::UndeclaredStrategy,
            &format_args!(
                "category {:?} resolved to {} which its capabilities do not declare",
                e.category, rule.strategy
            ),
        ));
    }
    let fits = match rule.strategy {
        Strategy::Purge | Strategy::Exempt => true,
        Strategy::SoftDelete => e.soft_delete.is_some(),
        Strategy::Anonymise => e.anonymised_at.is_some() && !e.anonymise.is_empty(),
    };
    if !fits {
        return Err(Failure::reason(
            FailureKind::UnsupportedStrategy,
            &format_args!("{} has no columns for {}", e.type_name(), rule.strategy),
        ));
    }
    let applied = rule.effective_period(now);
    Ok(EntityPlan {
        cutoff: applied.cutoff(now),
        applied,
        rule,
        now,
    })
}
