//! The benchmark's row types and rule provider.
//!
//! Both types map the same table (`notes`) under the same retained-entity id,
//! so the same 1,000 holds protect the same rows whichever one a measurement
//! registers; a measurement's `Cohort` registers exactly one of them.

use chrono::{DateTime, Utc};
use cohort::policy::ProviderError;
use cohort::{Capabilities, Period, ResolutionContext, Rule, RuleProvider, Strategy};
use futures_util::future::BoxFuture;
use uuid::Uuid;

/// The retained-entity id both types share (the holds name it).
pub(crate) const ENTITY_ID: &str = "a3f467fe-c5d0-4f17-9897-83c373cc1dc8";

/// The row type of every built-in strategy: purge, soft-delete (`is_deleted`,
/// `deleted_at`, by convention) and built-in anonymisation (`email` set to
/// NULL, `body` to a literal, `anonymised_at` stamped).
#[allow(
    dead_code,
    reason = "mirrors the table; Cohort reads its descriptor, never its values"
)]
#[derive(cohort::Retained)]
#[cohort(
    category = "notes",
    anchor = "created_at",
    id = "a3f467fe-c5d0-4f17-9897-83c373cc1dc8",
    table = "notes"
)]
pub(crate) struct Note {
    id: Uuid,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
    anonymised_at: Option<DateTime<Utc>>,
    is_deleted: bool,
    deleted_at: Option<DateTime<Utc>>,
    #[cohort(anonymise = "null")]
    email: Option<String>,
    #[cohort(anonymise(literal = "[redacted]"))]
    body: String,
}

/// Keeps the domain of an e-mail address: `person@example.org` becomes
/// `redacted@example.org`. Computed in Rust, so the sweep needs each row's
/// value and takes the locked path.
pub(crate) struct KeepDomain;

impl cohort::Anonymiser for KeepDomain {
    fn anonymise(original: Option<&str>) -> Option<String> {
        let domain = original?.rsplit_once('@')?.1;
        Some(format!("redacted@{domain}"))
    }
}

/// The same table anonymised with a custom anonymiser on `email` (the rest
/// as in [`Note`]).
#[allow(
    dead_code,
    reason = "mirrors the table; Cohort reads its descriptor, never its values"
)]
#[derive(cohort::Retained)]
#[cohort(
    category = "notes",
    anchor = "created_at",
    id = "a3f467fe-c5d0-4f17-9897-83c373cc1dc8",
    table = "notes"
)]
pub(crate) struct CustomNote {
    id: Uuid,
    tenant_id: Uuid,
    created_at: DateTime<Utc>,
    anonymised_at: Option<DateTime<Utc>>,
    is_deleted: bool,
    deleted_at: Option<DateTime<Utc>>,
    #[cohort(anonymise_with = KeepDomain)]
    email: Option<String>,
    #[cohort(anonymise(literal = "[redacted]"))]
    body: String,
}

/// Resolves every row of category `notes` to a 30-day rule with one strategy.
pub(crate) struct Rules(pub(crate) Strategy);

impl RuleProvider for Rules {
    fn capabilities(&self, _category: &str) -> Option<Capabilities> {
        Some(
            Capabilities::only(Strategy::Purge)
                .and(Strategy::SoftDelete)
                .and(Strategy::Anonymise),
        )
    }

    fn resolve<'a>(
        &'a self,
        _ctx: ResolutionContext<'a>,
    ) -> BoxFuture<'a, Result<Option<Rule>, ProviderError>> {
        let strategy = self.0;
        Box::pin(async move { Ok(Some(Rule::new(Period::days(30), strategy))) })
    }
}
