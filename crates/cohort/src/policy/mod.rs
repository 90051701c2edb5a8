//! Policy: periods, strategies, rules, capabilities and the rule provider.

mod period;
mod provider;
mod rule;

pub use period::Period;
pub use provider::{ProviderError, ResolutionContext, RuleProvider, Scope, TenantContext};
pub use rule::{AuditDetail, Capabilities, Rule, Stage, StageProblem, Strategy};
