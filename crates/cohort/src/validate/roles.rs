//! Which field plays which role (M3, M5), from the descriptor alone.
//!
//! Per type and role: the field carrying the role's marker attribute, else the
//! field named by the global convention (`options.conventions`, whose values
//! default to the built-in names). Conventions name **fields**; the column
//! checked later is the field's column. A global convention replaces the
//! built-in default: there is no second look for the built-in name.

use super::registry::Target;
use super::report::{Issue, Problems};
use crate::model::{AnonymiseMethod, Conventions, EntityDescriptor, FieldDescriptor, Markers};

/// A role that a marker attribute or a convention assigns to one field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    RecordId,
    Tenant,
    SoftDelete,
    DeletedAt,
    AnonymisedAt,
}

impl Role {
    /// The role in messages.
    pub(super) fn label(self) -> &'static str {
        match self {
            Role::RecordId => "record id",
            Role::Tenant => "tenant",
            Role::SoftDelete => "soft-delete flag",
            Role::DeletedAt => "deleted-at",
            Role::AnonymisedAt => "anonymised-at",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Role::RecordId => "record_id",
            Role::Tenant => "tenant",
            Role::SoftDelete => "soft_delete",
            Role::DeletedAt => "deleted_at",
            Role::AnonymisedAt => "anonymised_at",
        }
    }

    fn marker(self, m: &Markers) -> Option<&'static str> {
        match self {
            Role::RecordId => m.record_id,
            Role::Tenant => m.tenant,
            Role::SoftDelete => m.soft_delete,
            Role::DeletedAt => m.deleted_at,
            Role::AnonymisedAt => m.anonymised_at,
        }
    }

    fn convention(self, c: &Conventions) -> &str {
        match self {
            Role::RecordId => &c.record_id,
            Role::Tenant => &c.tenant,
            Role::SoftDelete => &c.soft_delete,
            Role::DeletedAt => &c.deleted_at,
            Role::AnonymisedAt => &c.anonymised_at,
        }
    }
}

/// The fields of one type, by role. `None`: no field plays the role.
#[derive(Debug, Clone, Default)]
pub(super) struct Roles {
    pub(super) record_id: Option<&'static FieldDescriptor>,
    pub(super) anchor: Option<&'static FieldDescriptor>,
    pub(super) tenant: Option<&'static FieldDescriptor>,
    pub(super) soft_delete: Option<&'static FieldDescriptor>,
    pub(super) deleted_at: Option<&'static FieldDescriptor>,
    pub(super) anonymised_at: Option<&'static FieldDescriptor>,
    pub(super) anonymise: Vec<(&'static FieldDescriptor, AnonymiseMethod)>,
    pub(super) subjects: Vec<&'static FieldDescriptor>,
}

/// The field for `role`: marker, else convention. A marker naming a field
/// the type does not have (possible only in a hand-written descriptor) is an
/// issue.
fn field_for(
    d: &'static EntityDescriptor,
    role: Role,
    conventions: &Conventions,
) -> Result<Option<&'static FieldDescriptor>, Issue> {
    match role.marker(&d.markers) {
        Some(name) => d.field(name).map(Some).ok_or_else(|| {
            Issue::new(
                format!(
                    "the {} marker names field `{name}`, which the type does not have",
                    role.label()
                ),
                "mark an existing field (the descriptor is hand-written or out of date)",
            )
        }),
        None => Ok(d.field(role.convention(conventions))),
    }
}

/// Resolves every role of `target`, reporting what is missing or contradictory.
pub(super) fn resolve(
    target: &Target,
    conventions: &Conventions,
    problems: &mut Problems,
) -> Roles {
    let d = target.descriptor;
    let mut report = |column: Option<&str>, issue: Issue| target.problem(problems, column, issue);
    let mut roles = Roles::default();
    let role = |role: Role, report: &mut dyn FnMut(Option<&str>, Issue)| {
        field_for(d, role, conventions).unwrap_or_else(|issue| {
            report(None, issue);
            None
        })
    };

    roles.record_id = role(Role::RecordId, &mut report);
    if roles.record_id.is_none() && d.markers.record_id.is_none() {
        report(
            None,
            Issue::new(
                format!(
                    "the type has no record id: no field is marked #[cohort(record_id)] and no field is named `{}` \
                     (options.conventions.{})",
                    Role::RecordId.convention(conventions),
                    Role::RecordId.key()
                ),
                "mark the field that identifies a row with #[cohort(record_id)]",
            ),
        );
    }

    roles.anchor = d.field(target.anchor);
    if roles.anchor.is_none() {
        report(
            None,
            Issue::new(
                format!(
                    "the anchor names field `{}`, which the type does not have",
                    target.anchor
                ),
                "set #[cohort(anchor = \"...\")] to the field whose timestamp ages a row",
            ),
        );
    }

    let tenant_convention = Role::Tenant.convention(conventions);
    if d.tenantless {
        if let Some(name) = d.markers.tenant {
            report(
                None,
                Issue::new(
                    format!(
                        "the type is marked tenantless but field `{name}` is marked #[cohort(tenant)]"
                    ),
                    "remove #[cohort(tenantless)] if rows belong to tenants, else remove the tenant marker",
                ),
            );
        } else if let Some(f) = d.field(tenant_convention) {
            report(
                Some(f.column),
                Issue::new(
                    format!(
                        "the type is marked tenantless but has field `{}`, which the tenant convention \
                         (options.conventions.tenant = \"{tenant_convention}\") makes its tenant: \
                         the marker would be silently ignored",
                        f.field
                    ),
                    "remove #[cohort(tenantless)] so the field scopes rows to tenants, or rename the \
                     field (keeping its column with #[cohort(column = \"...\")]) if rows really belong to no tenant",
                ),
            );
        }
    } else {
        roles.tenant = role(Role::Tenant, &mut report);
        if roles.tenant.is_none() && d.markers.tenant.is_none() {
            report(
                None,
                Issue::new(
                    format!(
                        "the type is tenant-scoped (the default) but has no tenant field: no field is marked \
                         #[cohort(tenant)] and no field is named `{tenant_convention}` (options.conventions.tenant)"
                    ),
                    "mark the field holding the tenant id with #[cohort(tenant)], or mark the type \
                     #[cohort(tenantless)] if its rows belong to no tenant",
                ),
            );
        }
    }

    roles.soft_delete = role(Role::SoftDelete, &mut report);
    roles.deleted_at = role(Role::DeletedAt, &mut report);
    roles.anonymised_at = role(Role::AnonymisedAt, &mut report);

    let role_fields: [(Option<&'static FieldDescriptor>, &str); 6] = [
        (roles.record_id, "record id"),
        (roles.anchor, "anchor"),
        (roles.tenant, "tenant"),
        (roles.soft_delete, "soft-delete flag"),
        (roles.deleted_at, "deleted-at"),
        (roles.anonymised_at, "anonymised-at"),
    ];
    for a in d.anonymise {
        let Some(f) = d.field(a.field) else {
            report(
                None,
                Issue::new(
                    format!(
                        "an anonymise method names field `{}`, which the type does not have",
                        a.field
                    ),
                    "mark an existing field (the descriptor is hand-written or out of date)",
                ),
            );
            continue;
        };
        if let Some((_, label)) = role_fields
            .iter()
            .find(|(r, _)| r.is_some_and(|r| r.field == f.field))
        {
            report(
                Some(f.column),
                Issue::new(
                    format!(
                        "field `{}` is the {label} and is also marked to be anonymised",
                        f.field
                    ),
                    "remove the anonymise method: Cohort needs this column intact to find, scope and \
                     mark rows",
                ),
            );
            continue;
        }
        roles.anonymise.push((f, a.method));
    }
    for &name in d.erasure_subjects {
        match d.field(name) {
            Some(f) => roles.subjects.push(f),
            None => report(
                None,
                Issue::new(
                    format!(
                        "an erasure subject names field `{name}`, which the type does not have"
                    ),
                    "mark an existing field (the descriptor is hand-written or out of date)",
                ),
            ),
        }
    }
    roles
}
