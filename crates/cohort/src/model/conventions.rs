//! Global naming conventions for role fields.

use serde::{Deserialize, Serialize};

/// The field names Cohort looks for when a type marks no field for a role.
///
/// Priority, per type and role: a marker attribute on a field
/// (`#[cohort(tenant)]`), then these global conventions, then the built-in
/// defaults (the values of [`Conventions::default`]).
///
/// ```
/// let conventions = cohort::Conventions { tenant: "organisation_id".into(), ..Default::default() };
/// assert_eq!(conventions.record_id, "id");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Conventions {
    /// Record id field (default `id`).
    pub record_id: String,
    /// Tenant field (default `tenant_id`).
    pub tenant: String,
    /// Soft-delete flag field (default `is_deleted`).
    pub soft_delete: String,
    /// Deleted-at field (default `deleted_at`).
    pub deleted_at: String,
    /// Anonymised-at field (default `anonymised_at`).
    pub anonymised_at: String,
}

impl Default for Conventions {
    fn default() -> Self {
        Conventions {
            record_id: "id".into(),
            tenant: "tenant_id".into(),
            soft_delete: "is_deleted".into(),
            deleted_at: "deleted_at".into(),
            anonymised_at: "anonymised_at".into(),
        }
    }
}
