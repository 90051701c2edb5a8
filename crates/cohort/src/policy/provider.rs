//! The host's rule provider.

use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;
use uuid::Uuid;

use super::{Capabilities, Rule};

/// A tenant, as the host knows it: its id, and what a rule provider may need
/// to pick a policy (jurisdiction, tags).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantContext {
    /// The tenant's id, matched against each retained type's tenant column.
    pub id: Uuid,
    /// A jurisdiction code, if the host has one (`"DE"`, `"US-CA"`).
    pub jurisdiction: Option<String>,
    /// Free-form tags.
    pub tags: Vec<String>,
}

impl TenantContext {
    /// A tenant with no jurisdiction and no tags.
    pub fn new(id: Uuid) -> TenantContext {
        TenantContext {
            id,
            jurisdiction: None,
            tags: Vec::new(),
        }
    }
}

/// Which rows a sweep or preview covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// One tenant's rows of the tenant-scoped types.
    Tenant(TenantContext),
    /// The rows of the tenantless types (attributed to the nil UUID in the ledger).
    Tenantless,
}

impl Scope {
    /// The tenant id recorded in the ledger: the tenant's, or the nil UUID.
    pub fn ledger_tenant(&self) -> Uuid {
        match self {
            Scope::Tenant(t) => t.id,
            Scope::Tenantless => Uuid::nil(),
        }
    }

    /// The tenant, if any.
    pub fn tenant(&self) -> Option<&TenantContext> {
        match self {
            Scope::Tenant(t) => Some(t),
            Scope::Tenantless => None,
        }
    }
}

/// What a rule is resolved for.
#[derive(Debug, Clone, Copy)]
pub struct ResolutionContext<'a> {
    /// The category.
    pub category: &'a str,
    /// The tenant, or `None` in the tenantless pass.
    pub tenant: Option<&'a TenantContext>,
    /// The operation's logical time, in UTC.
    pub now: DateTime<Utc>,
}

/// An error from a rule provider (recorded as that entity's failure).
pub type ProviderError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Maps retention categories to rules. Implemented by the host.
///
/// `capabilities` declares, synchronously, every strategy `resolve` can return
/// for a category; start-up validates each retained type against their union,
/// and a resolved rule whose strategy was not declared is refused.
///
/// ```
/// use cohort::{Capabilities, Period, ResolutionContext, Rule, RuleProvider, Strategy};
/// use cohort::policy::ProviderError;
/// use futures_util::future::BoxFuture;
///
/// struct Rules;
/// impl RuleProvider for Rules {
///     fn capabilities(&self, category: &str) -> Option<Capabilities> {
///         match category {
///             "session-notes" => Some(Capabilities::only(Strategy::Purge)),
///             "case-contacts" => Some(Capabilities::only(Strategy::Anonymise)),
///             _ => None,
///         }
///     }
///     fn resolve<'a>(&'a self, ctx: ResolutionContext<'a>) -> BoxFuture<'a, Result<Option<Rule>, ProviderError>> {
///         Box::pin(async move {
///             Ok(match ctx.category {
///                 "session-notes" => Some(Rule::new(Period::days(30), Strategy::Purge)),
///                 "case-contacts" => Some(Rule::new(Period::days(365), Strategy::Anonymise)),
///                 _ => None,
///             })
///         })
///     }
/// }
/// ```
pub trait RuleProvider: Send + Sync + 'static {
    /// Every strategy `resolve` can return for `category`; `None` for an
    /// unknown category (a retained type in it fails start-up).
    fn capabilities(&self, category: &str) -> Option<Capabilities>;

    /// The rule for a category, tenant and time. `Ok(None)` means the category
    /// has no rule: an error for that entity, never a silent skip.
    fn resolve<'a>(
        &'a self,
        ctx: ResolutionContext<'a>,
    ) -> BoxFuture<'a, Result<Option<Rule>, ProviderError>>;
}
