//! P3 (start-up half) and P5: the strategies a category declares must fit the
//! type. The union of every declared strategy is checked, so a rule that
//! resolves differently per tenant or over time cannot meet an unprepared type.

use super::report::Issue;
use super::roles::Roles;
use crate::policy::{Capabilities, Strategy};

/// What the declared capabilities ask of the type's roles.
pub(super) fn check(
    category: &str,
    capabilities: Option<&Capabilities>,
    roles: &Roles,
) -> Vec<Issue> {
    let Some(capabilities) = capabilities else {
        return vec![Issue::new(
            format!("the rule provider declares no capabilities for category \"{category}\""),
            format!(
                "return Some(Capabilities) listing every strategy resolve() can return for \"{category}\" \
                 from RuleProvider::capabilities, or fix the category name"
            ),
        )];
    };
    let mut issues = Vec::new();
    if capabilities.allows(Strategy::Anonymise) {
        if roles.anonymised_at.is_none() {
            issues.push(Issue::new(
                format!(
                    "category \"{category}\" may resolve to Anonymise, which needs an anonymised-at column \
                     (NULL until the row is anonymised), and the type has none"
                ),
                "add a nullable timestamptz field named by options.conventions.anonymised_at (default \
                 `anonymised_at`) or mark one with #[cohort(anonymised_at)]",
            ));
        }
        if roles.anonymise.is_empty() {
            issues.push(Issue::new(
                format!(
                    "category \"{category}\" may resolve to Anonymise, but no field is marked to be anonymised"
                ),
                "mark the personal-data fields with #[cohort(anonymise = \"null\")], \
                 #[cohort(anonymise = \"empty\")], #[cohort(anonymise(literal = \"...\"))] or \
                 #[cohort(anonymise_with = ...)], or drop Anonymise from the category's capabilities",
            ));
        }
    }
    // A stage after a soft delete counts from its deleted-at (contract SL1).
    let after_soft_delete = capabilities.is_staged()
        && capabilities.allows(Strategy::SoftDelete)
        && capabilities
            .strategies()
            .any(|s| s != Strategy::SoftDelete && s != Strategy::Exempt);
    if after_soft_delete && roles.deleted_at.is_none() {
        issues.push(Issue::new(
            format!(
                "category \"{category}\" may resolve to a staged rule with a stage after SoftDelete, \
                 which counts its period from the deleted-at column, and the type has none"
            ),
            "add a nullable timestamptz field named by options.conventions.deleted_at (default \
             `deleted_at`) or mark one with #[cohort(deleted_at)]",
        ));
    }
    if capabilities.allows(Strategy::SoftDelete) && roles.soft_delete.is_none() {
        issues.push(Issue::new(
            format!(
                "category \"{category}\" may resolve to SoftDelete, which needs a soft-delete flag column, \
                 and the type has none"
            ),
            "add a boolean field named by options.conventions.soft_delete (default `is_deleted`) or mark \
             one with #[cohort(soft_delete)]",
        ));
    }
    issues
}
