//! Policy: periods, strategies, rules, capabilities and the rule provider.

mod period;
mod provider;
pub(crate) mod review;
mod rule;

pub use period::Period;
pub use provider::{ProviderError, ResolutionContext, RuleProvider, Scope, TenantContext};
pub use review::{RULE_CONTENT_FORMAT, Review, RuleContent};
pub use rule::{AuditDetail, Capabilities, Rule, Stage, StageProblem, Strategy};
