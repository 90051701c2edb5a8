//! The static metadata `#[derive(Retained)]` emits for a row type.
//!
//! Descriptors name Rust fields and their columns; they carry no SQL. Which
//! field plays which role (record id, tenant, ...) is settled only when the
//! type is registered, because global conventions take part (attribute, then
//! global convention, then built-in default).

use uuid::Uuid;

/// A row type known to Cohort: implemented by `#[derive(Retained)]`.
///
/// Implement it by hand only if you cannot use the derive; the descriptor is
/// then checked at start-up in the same way.
pub trait Retained {
    /// The type's retention metadata.
    fn descriptor() -> &'static EntityDescriptor;
}

/// Everything the derive macro knows about one row type.
#[derive(Debug, Clone, Copy)]
pub struct EntityDescriptor {
    /// The Rust type's name, for messages and the ledger's `entity_type`.
    pub type_name: &'static str,
    /// Whether the type is retained or explicitly exempt.
    pub membership: Membership,
    /// The stable retained-entity id (`#[cohort(id = "...")]`). Required for
    /// retained types; optional for exempt ones. Never change it once rows,
    /// holds or ledger entries refer to it.
    pub entity_id: Option<Uuid>,
    /// The table (`#[cohort(table = "...")]`, default: the type name in snake_case).
    pub table: &'static str,
    /// The table's schema, when given (`#[cohort(schema = "...")]`); otherwise
    /// the configured default schema, then `public`.
    pub schema: Option<&'static str>,
    /// `#[cohort(tenantless)]`: rows belong to no tenant.
    pub tenantless: bool,
    /// Every field of the struct with its column.
    pub fields: &'static [FieldDescriptor],
    /// Fields marked with a role attribute (`#[cohort(record_id)]`, ...).
    pub markers: Markers,
    /// Fields to scrub when the strategy is `Anonymise`, with their method.
    pub anonymise: &'static [AnonymisedField],
    /// Fields marked `#[cohort(erasure_subject)]`: any of them equal to the
    /// subject makes a row an erasure match.
    pub erasure_subjects: &'static [&'static str],
}

/// Whether a type takes part in retention.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Membership {
    /// `#[cohort(category = "...", anchor = "field")]`.
    Retained {
        /// The retention category the rule provider resolves.
        category: &'static str,
        /// The field whose column ages the row (a `timestamptz`).
        anchor: &'static str,
    },
    /// `#[cohort(exempt = "reason")]`: explicitly out of retention, with a reason
    /// that shows up in reports.
    Exempt {
        /// Why the type is exempt.
        reason: &'static str,
    },
}

/// One struct field and the column it maps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldDescriptor {
    /// The Rust field name.
    pub field: &'static str,
    /// The column name (`#[cohort(column = "...")]`, default: the field name).
    pub column: &'static str,
    /// Whether the field's type is an `Option<_>`.
    pub optional: bool,
    /// The field's Rust type as written, for messages.
    pub rust_type: &'static str,
}

/// Fields explicitly marked for a role. `None` means: use the global
/// convention, then the built-in default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Markers {
    /// `#[cohort(record_id)]` (default field: `id`).
    pub record_id: Option<&'static str>,
    /// `#[cohort(tenant)]` (default field: `tenant_id`).
    pub tenant: Option<&'static str>,
    /// `#[cohort(soft_delete)]` (default field: `is_deleted`).
    pub soft_delete: Option<&'static str>,
    /// `#[cohort(deleted_at)]` (default field: `deleted_at`).
    pub deleted_at: Option<&'static str>,
    /// `#[cohort(anonymised_at)]` (default field: `anonymised_at`).
    pub anonymised_at: Option<&'static str>,
}

/// A field to scrub and how.
#[derive(Debug, Clone, Copy)]
pub struct AnonymisedField {
    /// The Rust field name.
    pub field: &'static str,
    /// How its column is scrubbed.
    pub method: AnonymiseMethod,
}

/// How an anonymised column is scrubbed.
#[derive(Debug, Clone, Copy)]
pub enum AnonymiseMethod {
    /// `#[cohort(anonymise = "null")]`: set NULL (the field must be an `Option`).
    Null,
    /// `#[cohort(anonymise = "empty")]`: set to the empty string (text-like columns).
    EmptyString,
    /// `#[cohort(anonymise(literal = "[redacted]"))]`: set to a fixed text.
    Literal(&'static str),
    /// `#[cohort(anonymise_with = MyAnonymiser)]`: computed per row by an [`Anonymiser`].
    Custom(CustomAnonymiser),
}

/// A custom anonymiser as stored in a descriptor.
#[derive(Debug, Clone, Copy)]
pub struct CustomAnonymiser {
    /// The anonymiser type's name, for messages.
    pub name: &'static str,
    /// `<T as Anonymiser>::anonymise`.
    pub anonymise: fn(Option<&str>) -> Option<String>,
}

/// Computes a replacement value for an anonymised column, row by row.
///
/// It receives the column's current value as PostgreSQL text (`NULL` as
/// `None`) and returns the new value as text, which PostgreSQL converts back to
/// the column's type. Columns scrubbed this way must be text-like.
///
/// ```
/// struct KeepDomain;
/// impl cohort::Anonymiser for KeepDomain {
///     fn anonymise(original: Option<&str>) -> Option<String> {
///         let domain = original?.rsplit_once('@')?.1;
///         Some(format!("redacted@{domain}"))
///     }
/// }
/// assert_eq!(
///     <KeepDomain as cohort::Anonymiser>::anonymise(Some("ann@example.org")).as_deref(),
///     Some("redacted@example.org")
/// );
/// ```
pub trait Anonymiser {
    /// The replacement for `original`.
    fn anonymise(original: Option<&str>) -> Option<String>;
}

impl EntityDescriptor {
    /// The field with this Rust name.
    pub fn field(&self, name: &str) -> Option<&'static FieldDescriptor> {
        self.fields.iter().find(|f| f.field == name)
    }
}
