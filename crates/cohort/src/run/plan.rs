//! Resolving one entity's rule for a run: the provider call, its checks, and
//! the cutoff.

use std::panic::AssertUnwindSafe;

use chrono::{DateTime, Utc};
use futures_util::FutureExt;

use super::statements::StageSql;
use crate::ledger::{Failure, FailureKind};
use crate::model::resolved::ResolvedEntity;
use crate::policy::{
    Period, ResolutionContext, Review, Rule, RuleContent, RuleProvider, Strategy, TenantContext,
};

/// What a run does with one entity (or with one stage of a staged rule).
#[derive(Debug, Clone)]
pub(crate) struct EntityPlan {
    /// The rule as this plan applies it: for a stage of a staged rule, the
    /// stage's period and strategy with the rule's legal minimum, audit and
    /// provenance, and no later stages.
    pub(crate) rule: Rule,
    /// The period actually applied (the greater of period and legal minimum).
    pub(crate) applied: Period,
    pub(crate) cutoff: DateTime<Utc>,
    /// The logical time the plan was made for.
    pub(crate) now: DateTime<Utc>,
    /// Which stage of a staged rule this is (`None` for a single-stage rule).
    pub(crate) stage: Option<StagePlan>,
    /// The stage's disposition review, when it asks for one (contract DR1;
    /// never for an erasure).
    pub(crate) review: Option<ReviewPlan>,
}

/// A stage under disposition review (contract DR1): what its batches are
/// bound to.
#[derive(Debug, Clone)]
pub(crate) struct ReviewPlan {
    pub(crate) review: Review,
    /// The stage's index (0 for a single-stage rule).
    pub(crate) stage: usize,
    /// The whole rule's canonical content as it selects this stage's rows.
    pub(crate) content: RuleContent,
}

impl ReviewPlan {
    fn of(rule: &Rule, stage: usize) -> Option<ReviewPlan> {
        rule.review_of(stage).map(|review| ReviewPlan {
            review,
            stage,
            content: rule.content(stage),
        })
    }
}

/// One stage of a staged rule (contract SL1).
#[derive(Debug, Clone)]
pub(crate) struct StagePlan {
    /// The stage's index, the first being 0.
    pub(crate) index: usize,
    /// Every stage's strategy, in order.
    pub(crate) strategies: Vec<Strategy>,
    /// For a later stage with a legal minimum: the anchor cutoff it gives
    /// (the legal minimum counts from the anchor at every stage).
    pub(crate) legal_cutoff: Option<DateTime<Utc>>,
}

impl StagePlan {
    /// The strategies of the stages before this one.
    pub(crate) fn earlier(&self) -> &[Strategy] {
        &self.strategies[..self.index]
    }

    /// The strategies of the stages after this one.
    pub(crate) fn later(&self) -> &[Strategy] {
        self.strategies.get(self.index + 1..).unwrap_or_default()
    }

    /// The strategy of the stage before this one, whose stamp it ages by.
    pub(crate) fn previous(&self) -> Option<Strategy> {
        self.index
            .checked_sub(1)
            .and_then(|i| self.strategies.get(i).copied())
    }

    /// Whether this stage acts on the archive table (it follows an archive
    /// stage, contract SL2).
    pub(crate) fn on_archive(&self) -> bool {
        self.previous() == Some(Strategy::Archive)
    }

    /// The stage as `e`'s statements see it.
    pub(crate) fn sql<'a>(&'a self, e: &'a ResolvedEntity) -> StageSql<'a> {
        StageSql {
            age: match self.previous() {
                Some(Strategy::SoftDelete) => e.deleted_at.as_ref(),
                Some(Strategy::Anonymise) => e.anonymised_at.as_ref(),
                Some(Strategy::Archive) => e.archive.as_ref().map(|a| &a.archived_at),
                _ => None,
            },
            earlier: self.earlier(),
            later: self.later(),
            legal_minimum: self.legal_cutoff.is_some(),
        }
    }
}

/// Resolves the rule and checks it: one plan per stage, in order (one for a
/// single-stage rule). Errors are sanitized failures of this entity.
pub(crate) async fn plan_stages(
    provider: &dyn RuleProvider,
    e: &ResolvedEntity,
    tenant: Option<&TenantContext>,
    now: DateTime<Utc>,
) -> Result<Vec<EntityPlan>, Failure> {
    let rule = resolve(provider, e, tenant, now).await?;
    check_event(e, &rule)?;
    if !rule.is_staged() {
        check_strategy(e, rule.strategy)?;
        let applied = rule.effective_period(now);
        return Ok(vec![EntityPlan {
            cutoff: applied.cutoff(now),
            applied,
            review: ReviewPlan::of(&rule, 0),
            rule,
            now,
            stage: None,
        }]);
    }
    if !e.capabilities.is_staged() {
        return Err(Failure::reason(
            FailureKind::UndeclaredStrategy,
            &format_args!(
                "category {:?} resolved to a staged rule, but its capabilities do not declare \
                 staged rules (Capabilities::staged)",
                e.category
            ),
        ));
    }
    let problems = rule.stage_problems();
    if !problems.is_empty() {
        let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
        return Err(Failure::reason(
            FailureKind::InvalidStages,
            &format_args!(
                "category {:?} resolved to a staged rule that cannot run: {}",
                e.category,
                text.join("; ")
            ),
        ));
    }
    let stages = rule.stages();
    let strategies: Vec<Strategy> = stages.iter().map(|s| s.strategy).collect();
    for (i, stage) in stages.iter().enumerate() {
        check_strategy(e, stage.strategy)?;
        // A later stage ages by the previous stage's stamp.
        let stamp = match i.checked_sub(1).map(|p| strategies[p]) {
            Some(Strategy::SoftDelete) => e.deleted_at.is_some(),
            Some(Strategy::Anonymise) => e.anonymised_at.is_some(),
            _ => true,
        };
        if !stamp {
            return Err(Failure::reason(
                FailureKind::UnsupportedStrategy,
                &format_args!(
                    "{} has no deleted-at column: stage {} of category {:?} counts its period from \
                     the soft-delete stage's deleted-at",
                    e.type_name(),
                    i + 1,
                    e.category
                ),
            ));
        }
    }
    let mut plans = Vec::with_capacity(stages.len());
    for (index, stage) in stages.iter().enumerate() {
        let single = Rule {
            period: stage.period,
            strategy: stage.strategy,
            then: Vec::new(),
            review: stage.review,
            ..rule.clone()
        };
        // The first stage counts from the anchor, as a single-stage rule
        // does (the legal minimum raises its period); a later one counts
        // from the previous stamp, and the legal minimum from the anchor.
        let (applied, legal_cutoff) = if index == 0 {
            (single.effective_period(now), None)
        } else {
            (stage.period, rule.legal_minimum.map(|m| m.cutoff(now)))
        };
        plans.push(EntityPlan {
            cutoff: applied.cutoff(now),
            applied,
            rule: single,
            review: ReviewPlan::of(&rule, index),
            now,
            stage: Some(StagePlan {
                index,
                strategies: strategies.clone(),
                legal_cutoff,
            }),
        });
    }
    Ok(plans)
}

/// The plan of an erasure: the category's rule as its final stage does
/// (a staged rule erases as its last stage, contract SL1), with the rule's
/// legal minimum. Errors are sanitized failures of this entity.
pub(crate) async fn plan(
    provider: &dyn RuleProvider,
    e: &ResolvedEntity,
    tenant: Option<&TenantContext>,
    now: DateTime<Utc>,
) -> Result<EntityPlan, Failure> {
    let mut rule = resolve(provider, e, tenant, now).await?;
    if rule.is_staged() {
        rule.strategy = rule.final_strategy();
        rule.then.clear();
    }
    // Erasure is the data subject's right: never under review (DR, see
    // docs/disposition.md).
    rule.review = None;
    // Erasure never archives: moving a subject's rows to the archive table
    // would keep them. It deletes them (and, separately, their archived
    // copies; contract SL2).
    if rule.strategy == Strategy::Archive {
        rule.strategy = Strategy::Purge;
    } else {
        check_strategy(e, rule.strategy)?;
    }
    let applied = rule.effective_period(now);
    Ok(EntityPlan {
        cutoff: applied.cutoff(now),
        applied,
        rule,
        now,
        stage: None,
        review: None,
    })
}

/// The provider's rule for `e`.
async fn resolve(
    provider: &dyn RuleProvider,
    e: &ResolvedEntity,
    tenant: Option<&TenantContext>,
    now: DateTime<Utc>,
) -> Result<Rule, Failure> {
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
    Ok(rule)
}

/// A rule counting from an event (contract SL4): the category declares the
/// event type, and the type has its event key.
fn check_event(e: &ResolvedEntity, rule: &Rule) -> Result<(), Failure> {
    let Some(event) = &rule.after_event else {
        return Ok(());
    };
    if !e.capabilities.counts_from(event) {
        return Err(Failure::reason(
            FailureKind::UndeclaredStrategy,
            &format_args!(
                "category {:?} resolved to a rule counting from event {event:?}, which its \
                 capabilities do not declare (Capabilities::after_event)",
                e.category
            ),
        ));
    }
    if e.event_key.is_none() {
        return Err(Failure::reason(
            FailureKind::UnsupportedStrategy,
            &format_args!(
                "{} has no event key column (#[cohort(event_key)]) for event {event:?}",
                e.type_name()
            ),
        ));
    }
    Ok(())
}

/// Whether `strategy` is declared for `e`'s category and fits its columns.
fn check_strategy(e: &ResolvedEntity, strategy: Strategy) -> Result<(), Failure> {
    if !e.capabilities.allows(strategy) {
        return Err(Failure::reason(
            FailureKind::UndeclaredStrategy,
            &format_args!(
                "category {:?} resolved to {} which its capabilities do not declare",
                e.category, strategy
            ),
        ));
    }
    let fits = match strategy {
        Strategy::Purge | Strategy::Exempt => true,
        Strategy::SoftDelete => e.soft_delete.is_some(),
        Strategy::Anonymise => e.anonymised_at.is_some() && !e.anonymise.is_empty(),
        Strategy::Archive => e.archive.is_some(),
    };
    if !fits {
        return Err(Failure::reason(
            FailureKind::UnsupportedStrategy,
            &format_args!("{} has no columns for {}", e.type_name(), strategy),
        ));
    }
    Ok(())
}
