//! The static metadata `#[derive(Retained)]` emits for a row type.
//!
//! Descriptors name Rust fields and their columns; they carry no SQL. Which
//! field plays which role (record id, tenant, ...) is settled only when the
//! type is registered, because global conventions take part (attribute, then
//! global convention, then built-in default).
//!
//! Descriptors are read-only outside this crate: their fields are private.
//! The derive builds them through the hidden constructors at the end of this
//! file (reached as `cohort::__private::...`), after its compile-time checks;
//! a host builds one at run time through the public
//! [`EntityDescriptor::builder`] (`builder.rs`), which makes the same checks.
//! The crate can therefore add fields without breaking hosts, and a host
//! cannot build a descriptor that skipped the checks.

use uuid::Uuid;

/// A row type known to Cohort: implemented by `#[derive(Retained)]`.
///
/// Use the derive for a Rust row type (a model known only at run time is
/// described with [`EntityDescriptor::builder`] instead; descriptor fields
/// are private either way). Generic code reads a type's metadata through
/// [`Retained::descriptor`] and its id through [`Retained::entity_id`]:
///
/// ```
/// fn id_of<T: cohort::Retained>() -> Option<uuid::Uuid> {
///     T::entity_id()
/// }
///
/// #[derive(cohort::Retained)]
/// #[cohort(category = "session-notes", anchor = "created_at")]
/// #[cohort(id = "a3f467fe-c5d0-4f17-9897-83c373cc1dc8")]
/// pub struct SessionNote {
///     pub id: uuid::Uuid,
///     pub tenant_id: uuid::Uuid,
///     pub created_at: chrono::DateTime<chrono::Utc>,
/// }
///
/// assert_eq!(id_of::<SessionNote>(), Some(SessionNote::ENTITY_ID));
/// ```
pub trait Retained {
    /// The type's retention metadata.
    fn descriptor() -> &'static EntityDescriptor;

    /// The type's stable retained-entity id (`#[cohort(id = "...")]`), the
    /// same as [`EntityDescriptor::entity_id`]. `None` only for exempt types
    /// declared without an id. For a concrete type, the derive also provides
    /// the constant `T::ENTITY_ID`.
    fn entity_id() -> Option<Uuid> {
        Self::descriptor().entity_id
    }
}

/// Everything the derive macro knows about one row type.
///
/// Read it through its accessors. `#[derive(Retained)]` emits one as a
/// static; [`EntityDescriptor::builder`] builds one at run time, with the
/// same checks (see [`crate::model`]).
#[derive(Debug, Clone, Copy)]
pub struct EntityDescriptor {
    pub(crate) type_name: &'static str,
    pub(crate) membership: Membership,
    pub(crate) entity_id: Option<Uuid>,
    pub(crate) table: &'static str,
    pub(crate) schema: Option<&'static str>,
    pub(crate) tenantless: bool,
    pub(crate) fields: &'static [FieldDescriptor],
    pub(crate) markers: Markers,
    pub(crate) anonymise: &'static [AnonymisedField],
    pub(crate) erasure_subjects: &'static [&'static str],
    /// `Some(allowed fields)` when the type is guarded (`#[cohort(guard)]`,
    /// contract H17): the database refuses a `DELETE` of a held row, and an
    /// `UPDATE` of a held row that changes any column but these fields'.
    pub(crate) guard: Option<&'static [&'static str]>,
    /// `Some` when each row's category comes from a column (contract SL3).
    pub(crate) category_from: Option<CategoryFrom>,
    /// The field holding the subject key events are recorded for
    /// (`#[cohort(event_key)]`, contract SL4).
    pub(crate) event_key: Option<&'static str>,
}

/// A type whose rows take their category from a column (contract SL3):
/// `#[cohort(category_from = "field", category_map("value" = "category",
/// ...))]`, the type's `category` being the default (the category of rows
/// whose value the map does not name, NULL included), if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CategoryFrom {
    pub(crate) field: &'static str,
    pub(crate) map: &'static [(&'static str, &'static str)],
    pub(crate) default: Option<&'static str>,
}

impl CategoryFrom {
    /// The field whose column holds each row's class.
    pub const fn field(&self) -> &'static str {
        self.field
    }

    /// The map: each value of the column (as PostgreSQL prints it as text)
    /// with its category, in declaration order.
    pub const fn map(&self) -> &'static [(&'static str, &'static str)] {
        self.map
    }

    /// The category of rows whose value the map does not name (NULL
    /// included); `None` when there is no default, which start-up accepts
    /// only for a column that cannot hold an unmapped value.
    pub const fn default(&self) -> Option<&'static str> {
        self.default
    }

    /// Every category the type's rows may be in: the mapped ones in order
    /// (each once), then the default.
    pub fn categories(&self) -> Vec<&'static str> {
        let mut out: Vec<&'static str> = Vec::new();
        for (_, c) in self.map {
            if !out.contains(c) {
                out.push(c);
            }
        }
        if let Some(d) = self.default
            && !out.contains(&d)
        {
            out.push(d);
        }
        out
    }
}

impl EntityDescriptor {
    /// The Rust type's name, for messages and the ledger's `entity_type`.
    pub const fn type_name(&self) -> &'static str {
        self.type_name
    }

    /// Whether the type is retained (with its category and anchor) or
    /// explicitly exempt (with its reason).
    pub const fn membership(&self) -> Membership {
        self.membership
    }

    /// The stable retained-entity id (`#[cohort(id = "...")]`). Always set for
    /// retained types; optional for exempt ones. Never change it once rows,
    /// holds or ledger entries refer to it.
    pub const fn entity_id(&self) -> Option<Uuid> {
        self.entity_id
    }

    /// The table (`#[cohort(table = "...")]`, default: the type name in
    /// snake_case).
    pub const fn table(&self) -> &'static str {
        self.table
    }

    /// The table's schema, when given (`#[cohort(schema = "...")]`);
    /// otherwise the configured default schema applies, then `public`.
    pub const fn schema(&self) -> Option<&'static str> {
        self.schema
    }

    /// `#[cohort(tenantless)]`: rows belong to no tenant.
    pub const fn tenantless(&self) -> bool {
        self.tenantless
    }

    /// Every field of the struct with its column, in declaration order.
    pub const fn fields(&self) -> &'static [FieldDescriptor] {
        self.fields
    }

    /// Fields explicitly marked with a role attribute (`#[cohort(record_id)]`,
    /// ...). Unmarked roles are settled at registration, by convention.
    pub const fn markers(&self) -> &Markers {
        &self.markers
    }

    /// Fields to scrub when the strategy is `Anonymise`, with their method,
    /// in declaration order.
    pub const fn anonymise(&self) -> &'static [AnonymisedField] {
        self.anonymise
    }

    /// Fields marked `#[cohort(erasure_subject)]`, in declaration order: any
    /// of them equal to the subject makes a row an erasure match.
    pub const fn erasure_subjects(&self) -> &'static [&'static str] {
        self.erasure_subjects
    }

    /// Whether the type is guarded (`#[cohort(guard)]`, contract H17), and
    /// then the fields an `UPDATE` may change on a held row
    /// (`#[cohort(guard_allow)]`): `None` for an unguarded type.
    pub const fn guard(&self) -> Option<&'static [&'static str]> {
        self.guard
    }

    /// The field marked `#[cohort(event_key)]` (contract SL4): its column
    /// holds the subject key events are recorded for, which a rule counting
    /// from an event ([`crate::Rule::after_event`]) joins on.
    pub const fn event_key(&self) -> Option<&'static str> {
        self.event_key
    }

    /// Where each row's category comes from, for a type that takes it from
    /// a column (contract SL3); `None` for a type of one category.
    pub const fn category_from(&self) -> Option<&CategoryFrom> {
        self.category_from.as_ref()
    }

    /// The field with this Rust name.
    pub fn field(&self, name: &str) -> Option<&'static FieldDescriptor> {
        self.fields.iter().find(|f| f.field == name)
    }
}

/// Whether a type takes part in retention.
///
/// New kinds of membership may be added; match with a wildcard arm, or use
/// [`Membership::category`], [`Membership::anchor`] and
/// [`Membership::exempt_reason`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
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

impl Membership {
    /// The retention category of a retained type.
    pub const fn category(&self) -> Option<&'static str> {
        match *self {
            Membership::Retained { category, .. } => Some(category),
            Membership::Exempt { .. } => None,
        }
    }

    /// The anchor field of a retained type.
    pub const fn anchor(&self) -> Option<&'static str> {
        match *self {
            Membership::Retained { anchor, .. } => Some(anchor),
            Membership::Exempt { .. } => None,
        }
    }

    /// Why an exempt type is exempt.
    pub const fn exempt_reason(&self) -> Option<&'static str> {
        match *self {
            Membership::Exempt { reason } => Some(reason),
            Membership::Retained { .. } => None,
        }
    }
}

/// One struct field and the column it maps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldDescriptor {
    pub(crate) field: &'static str,
    pub(crate) column: &'static str,
    pub(crate) optional: bool,
    pub(crate) rust_type: &'static str,
}

impl FieldDescriptor {
    /// The Rust field name (a raw identifier without its `r#`).
    pub const fn field(&self) -> &'static str {
        self.field
    }

    /// The column name (`#[cohort(column = "...")]`, default: the field name).
    pub const fn column(&self) -> &'static str {
        self.column
    }

    /// Whether the field's type is written as an `Option<_>`.
    pub const fn optional(&self) -> bool {
        self.optional
    }

    /// The field's Rust type as written, for messages.
    pub const fn rust_type(&self) -> &'static str {
        self.rust_type
    }
}

/// Fields explicitly marked for a role. `None` means: use the global
/// convention, then the built-in default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Markers {
    pub(crate) record_id: Option<&'static str>,
    pub(crate) tenant: Option<&'static str>,
    pub(crate) soft_delete: Option<&'static str>,
    pub(crate) deleted_at: Option<&'static str>,
    pub(crate) anonymised_at: Option<&'static str>,
}

impl Markers {
    /// The field marked `#[cohort(record_id)]` (default field: `id`).
    pub const fn record_id(&self) -> Option<&'static str> {
        self.record_id
    }

    /// The field marked `#[cohort(tenant)]` (default field: `tenant_id`).
    pub const fn tenant(&self) -> Option<&'static str> {
        self.tenant
    }

    /// The field marked `#[cohort(soft_delete)]` (default field: `is_deleted`).
    pub const fn soft_delete(&self) -> Option<&'static str> {
        self.soft_delete
    }

    /// The field marked `#[cohort(deleted_at)]` (default field: `deleted_at`).
    pub const fn deleted_at(&self) -> Option<&'static str> {
        self.deleted_at
    }

    /// The field marked `#[cohort(anonymised_at)]` (default field:
    /// `anonymised_at`).
    pub const fn anonymised_at(&self) -> Option<&'static str> {
        self.anonymised_at
    }
}

/// A field to scrub and how.
#[derive(Debug, Clone, Copy)]
pub struct AnonymisedField {
    pub(crate) field: &'static str,
    pub(crate) method: AnonymiseMethod,
}

impl AnonymisedField {
    /// The Rust field name.
    pub const fn field(&self) -> &'static str {
        self.field
    }

    /// How its column is scrubbed.
    pub const fn method(&self) -> AnonymiseMethod {
        self.method
    }
}

/// How an anonymised column is scrubbed.
///
/// New methods may be added; match with a wildcard arm.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum AnonymiseMethod {
    /// `#[cohort(anonymise = "null")]`: set NULL (the field must be an `Option`).
    Null,
    /// `#[cohort(anonymise = "empty")]`: set to the empty string (text-like columns).
    EmptyString,
    /// `#[cohort(anonymise(literal = "[redacted]"))]`: set to a fixed text.
    Literal(&'static str),
    /// `#[cohort(anonymise_with = MyAnonymiser)]`: computed per row by an [`Anonymiser`].
    Custom(CustomAnonymiser),
    /// `#[cohort(anonymise_with = "name")]`: computed per row by the
    /// [`AnonymiserFn`] value the host registers under that name with
    /// [`crate::CohortBuilder::anonymiser`] (one with state: a key, a salt).
    Named(&'static str),
}

/// A custom anonymiser as stored in a descriptor.
#[derive(Debug, Clone, Copy)]
pub struct CustomAnonymiser {
    pub(crate) name: &'static str,
    pub(crate) anonymise: fn(Option<&str>) -> Option<String>,
}

impl CustomAnonymiser {
    /// The anonymiser type's name (the last segment of its path), for
    /// messages.
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// Runs the anonymiser (`<T as Anonymiser>::anonymise`) on `original`.
    pub fn anonymise(&self, original: Option<&str>) -> Option<String> {
        (self.anonymise)(original)
    }
}

/// An anonymiser value with state (a key, a salt, a lookup table),
/// registered by name with [`crate::CohortBuilder::anonymiser`] and named on
/// a field with `#[cohort(anonymise_with = "name")]`. Closures
/// `Fn(Option<&str>) -> Option<String>` are anonymisers.
///
/// Like [`Anonymiser`], it receives the column's value as PostgreSQL text
/// (`NULL` as `None`) and returns the replacement as text. It runs inside a
/// batch transaction: keep it fast and free of I/O. A panic fails the entity
/// for that run (the batch rolls back).
///
/// ```
/// use cohort::model::AnonymiserFn;
/// let salt = String::from("s3cret");
/// let pseudonym = move |v: Option<&str>| v.map(|v| format!("user-{}", v.len() + salt.len()));
/// assert_eq!(pseudonym.anonymise(Some("ann")).as_deref(), Some("user-9"));
/// ```
pub trait AnonymiserFn: Send + Sync + 'static {
    /// The replacement for `original`.
    fn anonymise(&self, original: Option<&str>) -> Option<String>;
}

impl<F> AnonymiserFn for F
where
    F: Fn(Option<&str>) -> Option<String> + Send + Sync + 'static,
{
    fn anonymise(&self, original: Option<&str>) -> Option<String> {
        self(original)
    }
}

impl AnonymiserFn for CustomAnonymiser {
    fn anonymise(&self, original: Option<&str>) -> Option<String> {
        (self.anonymise)(original)
    }
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

// The constructors the derive's output calls, re-exported (hidden) as
// `cohort::__private::*`. Not public API: `cohort-derive` is pinned to this
// crate's exact version, and these may change in any release.

/// An [`EntityDescriptor`]. Derive output only.
#[doc(hidden)]
#[expect(
    clippy::too_many_arguments,
    reason = "one argument per descriptor field, called only by generated code"
)]
pub const fn entity_descriptor(
    type_name: &'static str,
    membership: Membership,
    entity_id: Option<Uuid>,
    table: &'static str,
    schema: Option<&'static str>,
    tenantless: bool,
    fields: &'static [FieldDescriptor],
    markers: Markers,
    anonymise: &'static [AnonymisedField],
    erasure_subjects: &'static [&'static str],
) -> EntityDescriptor {
    EntityDescriptor {
        type_name,
        membership,
        entity_id,
        table,
        schema,
        tenantless,
        fields,
        markers,
        anonymise,
        erasure_subjects,
        guard: None,
        category_from: None,
        event_key: None,
    }
}

/// `descriptor`, with its event key field (contract SL4). Derive output only.
#[doc(hidden)]
pub const fn event_keyed(descriptor: EntityDescriptor, field: &'static str) -> EntityDescriptor {
    EntityDescriptor {
        event_key: Some(field),
        ..descriptor
    }
}

/// `descriptor`, taking each row's category from `field` through `map`,
/// with `default` (the type's category) or none. Derive output only.
#[doc(hidden)]
pub const fn category_from(
    descriptor: EntityDescriptor,
    field: &'static str,
    map: &'static [(&'static str, &'static str)],
    default: Option<&'static str>,
) -> EntityDescriptor {
    EntityDescriptor {
        category_from: Some(CategoryFrom {
            field,
            map,
            default,
        }),
        ..descriptor
    }
}

/// `descriptor`, guarded, with the fields an `UPDATE` of a held row may
/// change. Derive output only.
#[doc(hidden)]
pub const fn guarded(
    descriptor: EntityDescriptor,
    allow: &'static [&'static str],
) -> EntityDescriptor {
    EntityDescriptor {
        guard: Some(allow),
        ..descriptor
    }
}

/// [`Membership::Retained`]. Derive output only.
#[doc(hidden)]
pub const fn retained(category: &'static str, anchor: &'static str) -> Membership {
    Membership::Retained { category, anchor }
}

/// [`Membership::Exempt`]. Derive output only.
#[doc(hidden)]
pub const fn exempt(reason: &'static str) -> Membership {
    Membership::Exempt { reason }
}

/// A [`FieldDescriptor`]. Derive output only.
#[doc(hidden)]
pub const fn field_descriptor(
    field: &'static str,
    column: &'static str,
    optional: bool,
    rust_type: &'static str,
) -> FieldDescriptor {
    FieldDescriptor {
        field,
        column,
        optional,
        rust_type,
    }
}

/// The [`Markers`]. Derive output only.
#[doc(hidden)]
pub const fn markers(
    record_id: Option<&'static str>,
    tenant: Option<&'static str>,
    soft_delete: Option<&'static str>,
    deleted_at: Option<&'static str>,
    anonymised_at: Option<&'static str>,
) -> Markers {
    Markers {
        record_id,
        tenant,
        soft_delete,
        deleted_at,
        anonymised_at,
    }
}

/// An [`AnonymisedField`]. Derive output only.
#[doc(hidden)]
pub const fn anonymised_field(field: &'static str, method: AnonymiseMethod) -> AnonymisedField {
    AnonymisedField { field, method }
}

/// [`AnonymiseMethod::Null`]. Derive output only.
#[doc(hidden)]
pub const fn anonymise_null() -> AnonymiseMethod {
    AnonymiseMethod::Null
}

/// [`AnonymiseMethod::EmptyString`]. Derive output only.
#[doc(hidden)]
pub const fn anonymise_empty_string() -> AnonymiseMethod {
    AnonymiseMethod::EmptyString
}

/// [`AnonymiseMethod::Literal`]. Derive output only.
#[doc(hidden)]
pub const fn anonymise_literal(text: &'static str) -> AnonymiseMethod {
    AnonymiseMethod::Literal(text)
}

/// [`AnonymiseMethod::Named`]. Derive output only.
#[doc(hidden)]
pub const fn anonymise_named(name: &'static str) -> AnonymiseMethod {
    AnonymiseMethod::Named(name)
}

/// [`AnonymiseMethod::Custom`] with a [`CustomAnonymiser`]. Derive output
/// only.
#[doc(hidden)]
pub const fn anonymise_custom(
    name: &'static str,
    anonymise: fn(Option<&str>) -> Option<String>,
) -> AnonymiseMethod {
    AnonymiseMethod::Custom(CustomAnonymiser { name, anonymise })
}
