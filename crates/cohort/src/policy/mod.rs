//! Policy: periods, strategies, rules, capabilities and the rule provider.

mod period;
mod provider;
mod review;
mod rule;

pub use period::Period;
pub use review::{RULE_CONTENT_FORMAT, Review, RuleContent};
pub use provider::{ProviderError, ResolutionContext, RuleProvider, Scope, TenantContext};
pub use rule::{AuditDetail, Capabilities, Rule, Stage, StageProblem, Strategy};
