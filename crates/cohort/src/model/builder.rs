//! [`EntityDescriptorBuilder`]: descriptors built at run time, with the
//! checks `#[derive(Retained)]` makes at compile time. The API, the checks
//! and the ownership decision are documented on [`crate::model`].

use std::borrow::Cow;
use std::fmt;

use uuid::Uuid;

use super::descriptor::{
    AnonymiseMethod, AnonymisedField, Anonymiser, CustomAnonymiser, EntityDescriptor,
    FieldDescriptor, Markers, Membership,
};
use crate::error::Error;
use crate::error::validation::{ValidationProblem, ValidationReport};
use crate::sql::ident::{Ident, IdentProblem};

/// A name as the builder takes it: a `&'static str` is kept as it is, a
/// `String` is leaked once by a successful [`EntityDescriptorBuilder::build`].
type Name = Cow<'static, str>;

/// One field of a descriptor built at run time: its name, its column, whether
/// it is optional (an `Option<_>` in a struct) and its type's label for
/// messages. `"id"` and `String::from("id")` convert into a plain field.
///
/// ```
/// use cohort::model::FieldSpec;
/// let email = FieldSpec::new("email").optional();
/// let org = FieldSpec::new("organisation").column("org_id").rust_type("Uuid");
/// # let _ = (email, org);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct FieldSpec {
    name: Name,
    column: Option<Name>,
    optional: bool,
    rust_type: Option<Name>,
}

impl FieldSpec {
    /// A field named `name` (its column, unless [`FieldSpec::column`] says
    /// otherwise), not optional.
    pub fn new(name: impl Into<Cow<'static, str>>) -> FieldSpec {
        FieldSpec {
            name: name.into(),
            column: None,
            optional: false,
            rust_type: None,
        }
    }

    /// Maps the field to another column (`#[cohort(column = "...")]`).
    pub fn column(mut self, column: impl Into<Cow<'static, str>>) -> FieldSpec {
        self.column = Some(column.into());
        self
    }

    /// The field may hold no value, as an `Option<_>` field does: only an
    /// optional field may be anonymised to NULL.
    pub fn optional(mut self) -> FieldSpec {
        self.optional = true;
        self
    }

    /// The field's type as [`FieldDescriptor::rust_type`] reports it, for
    /// messages (default `_`, or `Option<_>` for an optional field).
    pub fn rust_type(mut self, label: impl Into<Cow<'static, str>>) -> FieldSpec {
        self.rust_type = Some(label.into());
        self
    }
}

impl From<&'static str> for FieldSpec {
    fn from(name: &'static str) -> FieldSpec {
        FieldSpec::new(name)
    }
}

impl From<String> for FieldSpec {
    fn from(name: String) -> FieldSpec {
        FieldSpec::new(name)
    }
}

/// What a field is named for, in a [`DescriptorProblem`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FieldRole {
    /// The anchor (`anchor = "field"`).
    Anchor,
    /// The record id marker (`record_id`).
    RecordId,
    /// The tenant marker (`tenant`).
    Tenant,
    /// The soft-delete flag marker (`soft_delete`).
    SoftDelete,
    /// The deleted-at marker (`deleted_at`).
    DeletedAt,
    /// The anonymised-at marker (`anonymised_at`).
    AnonymisedAt,
    /// An anonymise method (`anonymise`, `anonymise_with`).
    Anonymised,
    /// An erasure subject (`erasure_subject`).
    ErasureSubject,
    /// A field a guarded type's held rows may change (`guard_allow`).
    GuardAllow,
    /// The field each row's category comes from (`category_from`).
    CategoryFrom,
    /// The field holding the subject key events are recorded for (`event_key`).
    EventKey,
}

impl FieldRole {
    /// The five role markers, in [`Markers`] order.
    const MARKERS: [FieldRole; 5] = [
        FieldRole::RecordId,
        FieldRole::Tenant,
        FieldRole::SoftDelete,
        FieldRole::DeletedAt,
        FieldRole::AnonymisedAt,
    ];

    /// The derive's attribute key for the role (`anchor`, `record_id`,
    /// `anonymise`, ...); a marker's key is also its builder method's name.
    pub const fn key(self) -> &'static str {
        match self {
            FieldRole::Anchor => "anchor",
            FieldRole::RecordId => "record_id",
            FieldRole::Tenant => "tenant",
            FieldRole::SoftDelete => "soft_delete",
            FieldRole::DeletedAt => "deleted_at",
            FieldRole::AnonymisedAt => "anonymised_at",
            FieldRole::Anonymised => "anonymise",
            FieldRole::ErasureSubject => "erasure_subject",
            FieldRole::GuardAllow => "guard_allow",
            FieldRole::CategoryFrom => "category_from",
            FieldRole::EventKey => "event_key",
        }
    }
}

impl fmt::Display for FieldRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key())
    }
}

/// Which name a [`DescriptorProblem::InvalidName`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NameKind {
    /// The table (given, or the default from the type name).
    Table,
    /// The schema.
    Schema,
    /// A field's column (given, or the default from the field name).
    Column,
}

impl NameKind {
    /// `table`, `schema` or `column`.
    pub const fn key(self) -> &'static str {
        match self {
            NameKind::Table => "table",
            NameKind::Schema => "schema",
            NameKind::Column => "column",
        }
    }
}

/// One mistake in a descriptor built at run time: the checks the derive
/// makes at compile time (see the [`model` documentation](crate::model)).
///
/// New checks may be added; match with a wildcard arm.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DescriptorProblem {
    /// The type name is empty.
    EmptyTypeName,
    /// A field has an empty name.
    EmptyFieldName,
    /// Two fields have the same name.
    DuplicateField {
        /// The field's name.
        field: String,
    },
    /// A table, schema or column name cannot be a PostgreSQL identifier.
    InvalidName {
        /// Which name.
        kind: NameKind,
        /// The name.
        name: String,
        /// The field, for a column.
        field: Option<String>,
        /// Whether the name is the default (the type's or the field's name)
        /// rather than one given.
        defaulted: bool,
        /// What is wrong with it.
        problem: IdentProblem,
    },
    /// Two fields map to the same column.
    DuplicateColumn {
        /// The column.
        column: String,
        /// The field declared first.
        first: String,
        /// The field declared later.
        second: String,
    },
    /// The category of a retained type is empty.
    EmptyCategory,
    /// An exempt type's reason is empty.
    EmptyExemptReason,
    /// A retained type without an id (contract M2).
    MissingId,
    /// The nil UUID as an id (contract M2).
    NilId,
    /// An id that is not a UUID (contract M2).
    MalformedId {
        /// The text given.
        text: String,
        /// Why it is not a UUID.
        reason: String,
    },
    /// `id`, `table` or `schema` given twice.
    GivenTwice {
        /// The setting (`id`, `table`, `schema`).
        key: &'static str,
    },
    /// The anchor, a marker, an anonymise method or an erasure subject names
    /// a field that was not declared.
    UnknownField {
        /// What the field was named for.
        role: FieldRole,
        /// The name given.
        field: String,
        /// The fields declared, in order.
        known: Vec<String>,
    },
    /// A role marker on two fields (contract M4), or on one field twice.
    DuplicateMarker {
        /// The marker.
        role: FieldRole,
        /// The field that carries it first.
        first: String,
        /// The field it was given again.
        second: String,
    },
    /// A tenant marker on a tenantless type (contract M5).
    TenantOnTenantless {
        /// The field marked `tenant`.
        field: String,
    },
    /// A second anonymise method for one field.
    TwoAnonymiseMethods {
        /// The field.
        field: String,
    },
    /// Anonymise to NULL on a field that is not optional.
    NullOnRequiredField {
        /// The field.
        field: String,
        /// Its type's label.
        rust_type: String,
    },
    /// A named anonymiser with an empty name.
    EmptyAnonymiserName {
        /// The field.
        field: String,
    },
    /// A field made an erasure subject twice.
    DuplicateErasureSubject {
        /// The field.
        field: String,
    },
    /// A category map (`category_from`, contract SL3) that is empty, maps a
    /// value twice or to an empty category.
    CategoryMap {
        /// What is wrong with it.
        problem: String,
    },
}

impl fmt::Display for DescriptorProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DescriptorProblem::EmptyTypeName => f.write_str("the type name is empty"),
            DescriptorProblem::EmptyFieldName => f.write_str("a field has an empty name"),
            DescriptorProblem::DuplicateField { field } => {
                write!(f, "field `{field}` is declared twice")
            }
            DescriptorProblem::InvalidName {
                kind,
                name,
                field,
                defaulted,
                problem,
            } => {
                let what = match (kind, defaulted) {
                    (NameKind::Table, true) => "the default table name",
                    (NameKind::Table, false) => "the table name",
                    (NameKind::Schema, _) => "the schema name",
                    (NameKind::Column, _) => "the column name",
                };
                write!(f, "{what} `{}`", name.escape_default())?;
                match (field, defaulted) {
                    (Some(field), true) => write!(f, " (the name of field `{field}`)")?,
                    (Some(field), false) => write!(f, " (of field `{field}`)")?,
                    (None, _) => {}
                }
                write!(f, " {problem}")
            }
            DescriptorProblem::DuplicateColumn {
                column,
                first,
                second,
            } => write!(
                f,
                "column `{column}` of field `{second}` is already used by field `{first}`"
            ),
            DescriptorProblem::EmptyCategory => f.write_str("`category` must not be empty"),
            DescriptorProblem::EmptyExemptReason => {
                f.write_str("an exempt type needs a reason: it shows up in reports")
            }
            DescriptorProblem::MissingId => f.write_str("a retained type needs a stable id"),
            DescriptorProblem::NilId => f.write_str("the id must not be the nil UUID"),
            DescriptorProblem::MalformedId { text, reason } => {
                write!(f, "malformed id `{}`: {reason}", text.escape_default())
            }
            DescriptorProblem::GivenTwice { key } => {
                write!(f, "`{key}` is given twice: it may be given once")
            }
            DescriptorProblem::UnknownField { role, field, known } => write!(
                f,
                "`{role}` names field `{}`, which the type does not have (fields: {})",
                field.escape_default(),
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            ),
            DescriptorProblem::DuplicateMarker {
                role,
                first,
                second,
            } => write!(
                f,
                "the `{role}` marker is already on field `{first}`: a marker may be on one \
                 field only (given again for `{second}`)"
            ),
            DescriptorProblem::TenantOnTenantless { field } => write!(
                f,
                "the type is tenantless, but field `{field}` is marked `tenant`"
            ),
            DescriptorProblem::TwoAnonymiseMethods { field } => write!(
                f,
                "field `{field}` is given two anonymise methods: a field has one"
            ),
            DescriptorProblem::NullOnRequiredField { field, rust_type } => write!(
                f,
                "anonymise to NULL needs an optional field, but `{field}` (type `{rust_type}`) \
                 is not optional"
            ),
            DescriptorProblem::EmptyAnonymiserName { field } => {
                write!(f, "field `{field}` names an anonymiser with an empty name")
            }
            DescriptorProblem::DuplicateErasureSubject { field } => {
                write!(f, "field `{field}` is made an erasure subject twice")
            }
            DescriptorProblem::CategoryMap { problem } => {
                write!(f, "the category map {problem}")
            }
        }
    }
}

impl std::error::Error for DescriptorProblem {}

impl DescriptorProblem {
    /// How to fix it, in one sentence.
    pub fn fix(&self) -> &'static str {
        match self {
            DescriptorProblem::EmptyTypeName => {
                "name the type: the name shows up in reports and the ledger"
            }
            DescriptorProblem::EmptyFieldName => "give every field a name",
            DescriptorProblem::DuplicateField { .. } => "declare each field once",
            DescriptorProblem::InvalidName { .. } => {
                "use a name PostgreSQL keeps as it is: not empty, at most 63 bytes, no NUL \
                 (set the table or the field's column explicitly)"
            }
            DescriptorProblem::DuplicateColumn { .. } => {
                "map one of the two fields to another column with FieldSpec::column"
            }
            DescriptorProblem::EmptyCategory => "name the retention category whose rule applies",
            DescriptorProblem::EmptyExemptReason => "say why the type keeps its rows",
            DescriptorProblem::MissingId | DescriptorProblem::NilId => {
                "set a new random UUID with .id(..) (e.g. from `uuidgen`) once, and never change it"
            }
            DescriptorProblem::MalformedId { .. } => {
                "write the id as 32 hex digits, optionally hyphenated 8-4-4-4-12"
            }
            DescriptorProblem::GivenTwice { .. } => "give it once",
            DescriptorProblem::UnknownField { .. } => {
                "declare the field with .field(..), or name a declared one"
            }
            DescriptorProblem::DuplicateMarker { .. } => "mark one field for each role",
            DescriptorProblem::TenantOnTenantless { .. } => {
                "remove the tenant marker, or .tenantless() if rows belong to tenants"
            }
            DescriptorProblem::TwoAnonymiseMethods { .. } => "choose one method for the field",
            DescriptorProblem::NullOnRequiredField { .. } => {
                "declare the field FieldSpec::optional(), or anonymise it to the empty string or a literal"
            }
            DescriptorProblem::EmptyAnonymiserName { .. } => {
                "name the anonymiser registered with CohortBuilder::anonymiser"
            }
            DescriptorProblem::DuplicateErasureSubject { .. } => "name each erasure subject once",
            DescriptorProblem::CategoryMap { .. } => {
                "map each value of the column once, to a non-empty category"
            }
        }
    }

    /// The column concerned, when the problem is about one.
    fn column(&self) -> Option<&str> {
        match self {
            DescriptorProblem::InvalidName {
                kind: NameKind::Column,
                name,
                ..
            }
            | DescriptorProblem::DuplicateColumn { column: name, .. } => Some(name),
            _ => None,
        }
    }
}

/// Every mistake [`EntityDescriptorBuilder::build`] found in one descriptor.
///
/// Converts into [`crate::Error::Validation`], one
/// [`crate::ValidationProblem`] per mistake, so a function returning
/// `cohort::Error` can use `?`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescriptorError {
    type_name: String,
    problems: Vec<DescriptorProblem>,
}

impl DescriptorError {
    /// The type the descriptor describes (as given to the builder).
    pub fn type_name(&self) -> &str {
        &self.type_name
    }

    /// Every mistake, in the order the derive reports them.
    pub fn problems(&self) -> &[DescriptorProblem] {
        &self.problems
    }

    /// Every mistake, owned.
    pub fn into_problems(self) -> Vec<DescriptorProblem> {
        self.problems
    }
}

impl fmt::Display for DescriptorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the descriptor of {:?} has {} problem(s)",
            self.type_name,
            self.problems.len()
        )?;
        for (i, p) in self.problems.iter().enumerate() {
            f.write_str(if i == 0 { ": " } else { "; " })?;
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

impl std::error::Error for DescriptorError {}

impl From<DescriptorError> for Error {
    fn from(e: DescriptorError) -> Error {
        let problems = e
            .problems
            .iter()
            .map(|p| ValidationProblem {
                column: p.column().map(str::to_owned),
                ..ValidationProblem::for_type(&e.type_name, p.to_string(), p.fix())
            })
            .collect();
        Error::Validation(ValidationReport {
            problems,
            ..ValidationReport::default()
        })
    }
}

/// How a field is anonymised, as given to the builder.
#[derive(Debug, Clone)]
enum Method {
    Null,
    Empty,
    Literal(Name),
    Named(Name),
    Custom(CustomAnonymiser),
}

/// An id as given: a UUID, or text parsed at build.
#[derive(Debug, Clone)]
enum IdInput {
    Uuid(Uuid),
    Text(String),
}

/// Retained (with category and anchor) or exempt (with a reason).
#[derive(Debug, Clone)]
enum Kind {
    Retained { category: Name, anchor: Name },
    Exempt { reason: Name },
}

/// Builds an [`EntityDescriptor`] at run time, with the checks
/// `#[derive(Retained)]` makes at compile time (see the [`model`
/// documentation](crate::model)). Start from [`EntityDescriptor::builder`] or
/// [`EntityDescriptor::exempt_builder`].
///
/// Every method takes names as `&'static str` or `String`; role, method and
/// subject methods name a field declared with [`field`](Self::field) (before
/// or after: nothing is checked until [`build`](Self::build)).
#[derive(Debug, Clone)]
#[must_use]
pub struct EntityDescriptorBuilder {
    type_name: Name,
    kind: Kind,
    ids: Vec<IdInput>,
    tables: Vec<Name>,
    schemas: Vec<Name>,
    tenantless: bool,
    fields: Vec<FieldSpec>,
    markers: Vec<(FieldRole, Name)>,
    anonymise: Vec<(Name, Method)>,
    subjects: Vec<Name>,
    /// `Some(allowed fields)` once [`EntityDescriptorBuilder::guard`] was called.
    guard: Option<Vec<Name>>,
    /// `category_from`: the field and the map (contract SL3).
    category_from: Option<(Name, Vec<(Name, Name)>)>,
    /// The type's category is not a default for unmapped values.
    no_default_category: bool,
    /// `event_key` fields (one is allowed).
    event_keys: Vec<Name>,
}

impl EntityDescriptor {
    /// Starts a descriptor of a retained type at run time: the type's name
    /// (for reports and the ledger's `entity_type`), its retention category
    /// and its anchor field (`#[cohort(category = "...", anchor =
    /// "...")]`). See [`EntityDescriptorBuilder`].
    pub fn builder(
        type_name: impl Into<Cow<'static, str>>,
        category: impl Into<Cow<'static, str>>,
        anchor: impl Into<Cow<'static, str>>,
    ) -> EntityDescriptorBuilder {
        EntityDescriptorBuilder::new(
            type_name.into(),
            Kind::Retained {
                category: category.into(),
                anchor: anchor.into(),
            },
        )
    }

    /// Starts a descriptor of an explicitly exempt type at run time
    /// (`#[cohort(exempt = "reason")]`); the reason shows up in reports. An
    /// id is optional.
    pub fn exempt_builder(
        type_name: impl Into<Cow<'static, str>>,
        reason: impl Into<Cow<'static, str>>,
    ) -> EntityDescriptorBuilder {
        EntityDescriptorBuilder::new(
            type_name.into(),
            Kind::Exempt {
                reason: reason.into(),
            },
        )
    }
}

impl EntityDescriptorBuilder {
    fn new(type_name: Name, kind: Kind) -> EntityDescriptorBuilder {
        EntityDescriptorBuilder {
            type_name,
            kind,
            ids: Vec::new(),
            tables: Vec::new(),
            schemas: Vec::new(),
            tenantless: false,
            fields: Vec::new(),
            markers: Vec::new(),
            anonymise: Vec::new(),
            subjects: Vec::new(),
            guard: None,
            category_from: None,
            no_default_category: false,
            event_keys: Vec::new(),
        }
    }

    /// Marks the field whose column holds the subject key events are
    /// recorded for (`#[cohort(event_key)]`, contract SL4): a rule that
    /// counts its period from an event joins events on it.
    pub fn event_key(mut self, field: impl Into<Cow<'static, str>>) -> Self {
        self.event_keys.push(field.into());
        self
    }

    /// Each row's category comes from `field`'s column through `map`, pairs
    /// of a value (as PostgreSQL prints the column's value as text) and its
    /// category (contract SL3; `#[cohort(category_from = "field",
    /// category_map("value" = "category", ...))]`). The builder's category
    /// is then the default: the category of rows whose value the map does
    /// not name, NULL included (see
    /// [`no_default_category`](Self::no_default_category)).
    ///
    /// ```
    /// use cohort::model::EntityDescriptor;
    /// let documents = EntityDescriptor::builder("Document", "drafts", "created_at")
    ///     .id_str("0b5e7c3a-1d2f-4e6a-9b8c-7d6e5f4a3b2c")
    ///     .fields(["id", "tenant_id", "created_at", "kind"])
    ///     .category_from("kind", [("invoice", "invoices"), ("receipt", "receipts")])
    ///     .build()
    ///     .expect("valid");
    /// let from = documents.category_from().expect("by column");
    /// assert_eq!(from.categories(), ["invoices", "receipts", "drafts"]);
    /// ```
    pub fn category_from<V, C>(
        mut self,
        field: impl Into<Cow<'static, str>>,
        map: impl IntoIterator<Item = (V, C)>,
    ) -> Self
    where
        V: Into<Cow<'static, str>>,
        C: Into<Cow<'static, str>>,
    {
        self.category_from = Some((
            field.into(),
            map.into_iter().map(|(v, c)| (v.into(), c.into())).collect(),
        ));
        self
    }

    /// With [`category_from`](Self::category_from): no default category;
    /// every value the column can hold must be mapped (start-up checks it
    /// against an enum type's labels or a `CHECK` constraint's list) and
    /// the column must not accept NULL.
    pub fn no_default_category(mut self) -> Self {
        self.no_default_category = true;
        self
    }

    /// The stable retained-entity id (`#[cohort(id = "...")]`): required for
    /// a retained type, optional for an exempt one; never the nil UUID.
    pub fn id(mut self, id: Uuid) -> Self {
        self.ids.push(IdInput::Uuid(id));
        self
    }

    /// The id as text, parsed by [`build`](Self::build) the way the derive
    /// reads `id = "..."`: 32 hexadecimal digits, plain or hyphenated
    /// 8-4-4-4-12, in any case.
    pub fn id_str(mut self, id: impl Into<String>) -> Self {
        self.ids.push(IdInput::Text(id.into()));
        self
    }

    /// The table (`#[cohort(table = "...")]`; default: the type name in
    /// snake_case).
    pub fn table(mut self, table: impl Into<Cow<'static, str>>) -> Self {
        self.tables.push(table.into());
        self
    }

    /// The table's schema (`#[cohort(schema = "...")]`; default: the
    /// builder's `Options::default_table_schema`).
    pub fn schema(mut self, schema: impl Into<Cow<'static, str>>) -> Self {
        self.schemas.push(schema.into());
        self
    }

    /// Rows belong to no tenant (`#[cohort(tenantless)]`).
    pub fn tenantless(mut self) -> Self {
        self.tenantless = true;
        self
    }

    /// Declares a field (a struct's field, with its column): `"id"`, or a
    /// [`FieldSpec`] with a column, optionality or a type label. Fields keep
    /// the order of these calls.
    pub fn field(mut self, field: impl Into<FieldSpec>) -> Self {
        self.fields.push(field.into());
        self
    }

    /// Declares several fields, in order (see [`field`](Self::field)).
    pub fn fields<F: Into<FieldSpec>>(mut self, fields: impl IntoIterator<Item = F>) -> Self {
        self.fields.extend(fields.into_iter().map(Into::into));
        self
    }

    fn marker(mut self, role: FieldRole, field: Name) -> Self {
        self.markers.push((role, field));
        self
    }

    /// Marks the record id field (`#[cohort(record_id)]`; otherwise the
    /// `conventions.record_id` field, `id` by default).
    pub fn record_id(self, field: impl Into<Cow<'static, str>>) -> Self {
        self.marker(FieldRole::RecordId, field.into())
    }

    /// Marks the tenant field (`#[cohort(tenant)]`; otherwise the
    /// `conventions.tenant` field, `tenant_id` by default).
    pub fn tenant(self, field: impl Into<Cow<'static, str>>) -> Self {
        self.marker(FieldRole::Tenant, field.into())
    }

    /// Marks the soft-delete flag field (`#[cohort(soft_delete)]`; otherwise
    /// `is_deleted` by default).
    pub fn soft_delete(self, field: impl Into<Cow<'static, str>>) -> Self {
        self.marker(FieldRole::SoftDelete, field.into())
    }

    /// Marks the deleted-at field (`#[cohort(deleted_at)]`; otherwise
    /// `deleted_at` by default).
    pub fn deleted_at(self, field: impl Into<Cow<'static, str>>) -> Self {
        self.marker(FieldRole::DeletedAt, field.into())
    }

    /// Marks the anonymised-at field (`#[cohort(anonymised_at)]`; otherwise
    /// `anonymised_at` by default).
    pub fn anonymised_at(self, field: impl Into<Cow<'static, str>>) -> Self {
        self.marker(FieldRole::AnonymisedAt, field.into())
    }

    fn method(mut self, field: Name, method: Method) -> Self {
        self.anonymise.push((field, method));
        self
    }

    /// Anonymises the field to NULL (`#[cohort(anonymise = "null")]`); the
    /// field must be [optional](FieldSpec::optional).
    pub fn anonymise_null(self, field: impl Into<Cow<'static, str>>) -> Self {
        self.method(field.into(), Method::Null)
    }

    /// Anonymises the field to the empty string (`#[cohort(anonymise =
    /// "empty")]`).
    pub fn anonymise_empty(self, field: impl Into<Cow<'static, str>>) -> Self {
        self.method(field.into(), Method::Empty)
    }

    /// Anonymises the field to a fixed text (`#[cohort(anonymise(literal =
    /// "..."))]`).
    pub fn anonymise_literal(
        self,
        field: impl Into<Cow<'static, str>>,
        text: impl Into<Cow<'static, str>>,
    ) -> Self {
        self.method(field.into(), Method::Literal(text.into()))
    }

    /// Anonymises the field with the anonymiser value registered under
    /// `name` with [`CohortBuilder::anonymiser`](crate::CohortBuilder::anonymiser)
    /// (`#[cohort(anonymise_with = "name")]`).
    pub fn anonymise_named(
        self,
        field: impl Into<Cow<'static, str>>,
        name: impl Into<Cow<'static, str>>,
    ) -> Self {
        self.method(field.into(), Method::Named(name.into()))
    }

    /// Anonymises the field with the [`Anonymiser`] type `A`
    /// (`#[cohort(anonymise_with = A)]`); messages name it by the last
    /// segment of its path.
    pub fn anonymise_with<A: Anonymiser>(self, field: impl Into<Cow<'static, str>>) -> Self {
        let custom = CustomAnonymiser {
            name: short_type_name(std::any::type_name::<A>()),
            anonymise: A::anonymise,
        };
        self.method(field.into(), Method::Custom(custom))
    }

    /// Makes the field an erasure subject (`#[cohort(erasure_subject)]`):
    /// any subject field equal to the subject makes a row an erasure match.
    pub fn erasure_subject(mut self, field: impl Into<Cow<'static, str>>) -> Self {
        self.subjects.push(field.into());
        self
    }

    /// Guards the type (`#[cohort(guard)]`, contract H17): the database
    /// refuses a `DELETE` of a held row and an `UPDATE` of one that changes
    /// any column but those of `allow` (fields, as
    /// `#[cohort(guard_allow)]` marks them). Apply
    /// [`CohortBuilder::guards`](crate::CohortBuilder::guards) to install it.
    pub fn guard<I, S>(mut self, allow: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<Cow<'static, str>>,
    {
        self.guard
            .get_or_insert_with(Vec::new)
            .extend(allow.into_iter().map(Into::into));
        self
    }

    /// Checks the descriptor as the derive checks a struct and returns it, or
    /// every problem found at once. Leaks the descriptor (see the [`model`
    /// documentation](crate::model)): build each one once.
    pub fn build(self) -> Result<&'static EntityDescriptor, DescriptorError> {
        let mut problems = Vec::new();
        let checked = self.check(&mut problems);
        if problems.is_empty() {
            return Ok(checked.leak());
        }
        Err(DescriptorError {
            type_name: self.type_name.into_owned(),
            problems,
        })
    }

    /// Every check, in the derive's order: fields and their columns, then
    /// membership, id, markers, anonymise methods, erasure subjects, and the
    /// table and schema names.
    fn check(&self, problems: &mut Vec<DescriptorProblem>) -> Checked<'_> {
        if self.type_name.trim().is_empty() {
            problems.push(DescriptorProblem::EmptyTypeName);
        }

        // Fields and their columns.
        let mut fields: Vec<&FieldSpec> = Vec::with_capacity(self.fields.len());
        for spec in &self.fields {
            if spec.name.is_empty() {
                problems.push(DescriptorProblem::EmptyFieldName);
                continue;
            }
            if fields.iter().any(|f| f.name == spec.name) {
                problems.push(DescriptorProblem::DuplicateField {
                    field: spec.name.to_string(),
                });
                continue;
            }
            let (column, defaulted) = match &spec.column {
                Some(column) => (column, false),
                None => (&spec.name, true),
            };
            if let Err(problem) = Ident::new(column) {
                problems.push(DescriptorProblem::InvalidName {
                    kind: NameKind::Column,
                    name: column.to_string(),
                    field: Some(spec.name.to_string()),
                    defaulted,
                    problem,
                });
            }
            fields.push(spec);
        }
        for (i, field) in fields.iter().enumerate() {
            let column = column_of(field);
            if let Some(first) = fields[..i].iter().find(|f| column_of(f) == column) {
                problems.push(DescriptorProblem::DuplicateColumn {
                    column: column.to_owned(),
                    first: first.name.to_string(),
                    second: field.name.to_string(),
                });
            }
        }
        let index_of = |name: &str| fields.iter().position(|f| f.name == name);
        let unknown = |role: FieldRole, field: &str| DescriptorProblem::UnknownField {
            role,
            field: field.to_owned(),
            known: fields.iter().map(|f| f.name.to_string()).collect(),
        };

        // Membership.
        let mut anchor = None;
        match &self.kind {
            Kind::Exempt { reason } => {
                if reason.trim().is_empty() {
                    problems.push(DescriptorProblem::EmptyExemptReason);
                }
            }
            Kind::Retained {
                category,
                anchor: name,
            } => {
                if category.trim().is_empty() {
                    problems.push(DescriptorProblem::EmptyCategory);
                }
                anchor = index_of(name);
                if anchor.is_none() {
                    problems.push(unknown(FieldRole::Anchor, name));
                }
            }
        }

        // A category from a column (SL3).
        let mut category_from = None;
        if let Some((field, map)) = &self.category_from {
            category_from = index_of(field);
            if category_from.is_none() {
                problems.push(unknown(FieldRole::CategoryFrom, field));
            }
            if map.is_empty() {
                problems.push(DescriptorProblem::CategoryMap {
                    problem: "is empty: map at least one value".to_owned(),
                });
            }
            for (i, (value, category)) in map.iter().enumerate() {
                if map[..i].iter().any(|(v, _)| v == value) {
                    problems.push(DescriptorProblem::CategoryMap {
                        problem: format!("maps value {value:?} twice"),
                    });
                }
                if category.trim().is_empty() {
                    problems.push(DescriptorProblem::CategoryMap {
                        problem: format!("maps value {value:?} to an empty category"),
                    });
                }
            }
        }

        // The event key (SL4).
        let mut event_key = None;
        for (i, field) in self.event_keys.iter().enumerate() {
            match index_of(field) {
                None => problems.push(unknown(FieldRole::EventKey, field)),
                Some(_) if i > 0 => {
                    problems.push(DescriptorProblem::GivenTwice { key: "event_key" })
                }
                Some(index) => event_key = Some(index),
            }
        }

        // Identity.
        if self.ids.len() > 1 {
            problems.push(DescriptorProblem::GivenTwice { key: "id" });
        }
        let entity_id = match self.ids.first() {
            None => {
                if matches!(self.kind, Kind::Retained { .. }) {
                    problems.push(DescriptorProblem::MissingId);
                }
                None
            }
            Some(IdInput::Uuid(id)) => Some(*id),
            Some(IdInput::Text(text)) => match parse_id(text) {
                Ok(id) => Some(id),
                Err(reason) => {
                    problems.push(DescriptorProblem::MalformedId {
                        text: text.clone(),
                        reason,
                    });
                    None
                }
            },
        };
        if entity_id.is_some_and(|id| id.is_nil()) {
            problems.push(DescriptorProblem::NilId);
        }

        // Markers: one field per role.
        let mut markers: [Option<usize>; 5] = [None; 5];
        for (slot, role) in markers.iter_mut().zip(FieldRole::MARKERS) {
            for (_, name) in self.markers.iter().filter(|(r, _)| *r == role) {
                let Some(index) = index_of(name) else {
                    problems.push(unknown(role, name));
                    continue;
                };
                match slot {
                    Some(first) => problems.push(DescriptorProblem::DuplicateMarker {
                        role,
                        first: fields[*first].name.to_string(),
                        second: name.to_string(),
                    }),
                    None => *slot = Some(index),
                }
                if role == FieldRole::Tenant && self.tenantless {
                    problems.push(DescriptorProblem::TenantOnTenantless {
                        field: name.to_string(),
                    });
                }
            }
        }

        // Anonymise methods: one per field, NULL only on optional fields.
        let mut anonymise: Vec<(usize, &Method)> = Vec::new();
        for (name, method) in &self.anonymise {
            let Some(index) = index_of(name) else {
                problems.push(unknown(FieldRole::Anonymised, name));
                continue;
            };
            if anonymise.iter().any(|(i, _)| *i == index) {
                problems.push(DescriptorProblem::TwoAnonymiseMethods {
                    field: name.to_string(),
                });
                continue;
            }
            match method {
                Method::Null if !fields[index].optional => {
                    problems.push(DescriptorProblem::NullOnRequiredField {
                        field: name.to_string(),
                        rust_type: rust_type_of(fields[index]).to_string(),
                    });
                }
                Method::Named(anonymiser) if anonymiser.trim().is_empty() => {
                    problems.push(DescriptorProblem::EmptyAnonymiserName {
                        field: name.to_string(),
                    });
                }
                _ => {}
            }
            anonymise.push((index, method));
        }

        // Erasure subjects.
        let mut subjects: Vec<usize> = Vec::new();
        for name in &self.subjects {
            match index_of(name) {
                None => problems.push(unknown(FieldRole::ErasureSubject, name)),
                Some(index) if subjects.contains(&index) => {
                    problems.push(DescriptorProblem::DuplicateErasureSubject {
                        field: name.to_string(),
                    });
                }
                Some(index) => subjects.push(index),
            }
        }

        // A guard's allowed fields.
        let mut guard: Option<Vec<usize>> = None;
        if let Some(allow) = &self.guard {
            let mut indices = Vec::new();
            for name in allow {
                match index_of(name) {
                    None => problems.push(unknown(FieldRole::GuardAllow, name)),
                    Some(index) if indices.contains(&index) => {}
                    Some(index) => indices.push(index),
                }
            }
            guard = Some(indices);
        }

        // Table and schema.
        if self.tables.len() > 1 {
            problems.push(DescriptorProblem::GivenTwice { key: "table" });
        }
        let table: Name = match self.tables.first() {
            Some(table) => table.clone(),
            None => Cow::Owned(heck::ToSnakeCase::to_snake_case(&*self.type_name)),
        };
        if let Err(problem) = Ident::new(&table) {
            problems.push(DescriptorProblem::InvalidName {
                kind: NameKind::Table,
                name: table.to_string(),
                field: None,
                defaulted: self.tables.is_empty(),
                problem,
            });
        }
        if self.schemas.len() > 1 {
            problems.push(DescriptorProblem::GivenTwice { key: "schema" });
        }
        let schema = self.schemas.first();
        if let Some(schema) = schema
            && let Err(problem) = Ident::new(schema)
        {
            problems.push(DescriptorProblem::InvalidName {
                kind: NameKind::Schema,
                name: schema.to_string(),
                field: None,
                defaulted: false,
                problem,
            });
        }

        Checked {
            builder: self,
            fields,
            anchor,
            entity_id,
            table,
            markers,
            anonymise,
            subjects,
            guard,
            category_from,
            event_key,
        }
    }
}

/// A builder after its checks, with indices into its fields: [`build`]
/// leaks it only when no problem was found.
///
/// [`build`]: EntityDescriptorBuilder::build
struct Checked<'b> {
    builder: &'b EntityDescriptorBuilder,
    fields: Vec<&'b FieldSpec>,
    anchor: Option<usize>,
    entity_id: Option<Uuid>,
    table: Name,
    markers: [Option<usize>; 5],
    anonymise: Vec<(usize, &'b Method)>,
    /// The `category_from` field, once checked.
    category_from: Option<usize>,
    /// The `event_key` field, once checked.
    event_key: Option<usize>,
    subjects: Vec<usize>,
    guard: Option<Vec<usize>>,
}

impl Checked<'_> {
    /// The descriptor, leaked. Role, method and subject entries share the
    /// fields' names.
    fn leak(self) -> &'static EntityDescriptor {
        let b = self.builder;
        let fields: &'static [FieldDescriptor] = Box::leak(
            self.fields
                .iter()
                .map(|f| {
                    let field = leak(&f.name);
                    FieldDescriptor {
                        field,
                        column: f.column.as_ref().map_or(field, leak),
                        optional: f.optional,
                        rust_type: leak(&rust_type_of(f)),
                    }
                })
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        );
        let name = |index: Option<usize>| index.map(|i| fields[i].field);
        let membership = match &b.kind {
            Kind::Retained { category, .. } => Membership::Retained {
                category: leak(category),
                // Checked: the anchor names a field.
                anchor: name(self.anchor).unwrap_or_default(),
            },
            Kind::Exempt { reason } => Membership::Exempt {
                reason: leak(reason),
            },
        };
        let [record_id, tenant, soft_delete, deleted_at, anonymised_at] = self.markers.map(name);
        let anonymise: &'static [AnonymisedField] = Box::leak(
            self.anonymise
                .iter()
                .map(|(i, method)| AnonymisedField {
                    field: fields[*i].field,
                    method: match method {
                        Method::Null => AnonymiseMethod::Null,
                        Method::Empty => AnonymiseMethod::EmptyString,
                        Method::Literal(text) => AnonymiseMethod::Literal(leak(text)),
                        Method::Named(anonymiser) => AnonymiseMethod::Named(leak(anonymiser)),
                        Method::Custom(custom) => AnonymiseMethod::Custom(*custom),
                    },
                })
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        );
        let erasure_subjects: &'static [&'static str] = Box::leak(
            self.subjects
                .iter()
                .map(|i| fields[*i].field)
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        );
        let guard: Option<&'static [&'static str]> = self.guard.as_ref().map(|allow| {
            &*Box::leak(
                allow
                    .iter()
                    .map(|i| fields[*i].field)
                    .collect::<Vec<_>>()
                    .into_boxed_slice(),
            )
        });
        let category_from = match (&b.category_from, self.category_from) {
            (Some((_, map)), Some(i)) => {
                let map: &'static [(&'static str, &'static str)] = Box::leak(
                    map.iter()
                        .map(|(v, c)| (leak(v), leak(c)))
                        .collect::<Vec<_>>()
                        .into_boxed_slice(),
                );
                Some(super::descriptor::CategoryFrom {
                    field: fields[i].field,
                    map,
                    default: match (&membership, b.no_default_category) {
                        (Membership::Retained { category, .. }, false) => Some(*category),
                        _ => None,
                    },
                })
            }
            _ => None,
        };
        Box::leak(Box::new(EntityDescriptor {
            type_name: leak(&b.type_name),
            membership,
            entity_id: self.entity_id,
            table: leak(&self.table),
            schema: b.schemas.first().map(leak),
            tenantless: b.tenantless,
            fields,
            markers: Markers {
                record_id,
                tenant,
                soft_delete,
                deleted_at,
                anonymised_at,
            },
            anonymise,
            erasure_subjects,
            guard,
            category_from,
            event_key: self.event_key.map(|i| fields[i].field),
        }))
    }
}

/// A name for the rest of the program: a `&'static str` as it is, anything
/// else copied and leaked.
fn leak(name: &Name) -> &'static str {
    match name {
        Cow::Borrowed(name) => name,
        Cow::Owned(name) => Box::leak(name.clone().into_boxed_str()),
    }
}

fn column_of(field: &FieldSpec) -> &str {
    field.column.as_deref().unwrap_or(&field.name)
}

fn rust_type_of(field: &FieldSpec) -> Name {
    match (&field.rust_type, field.optional) {
        (Some(label), _) => label.clone(),
        (None, true) => Cow::Borrowed("Option<_>"),
        (None, false) => Cow::Borrowed("_"),
    }
}

/// `path::to::Type<T>` → `Type`, as the derive names a custom anonymiser
/// (the last segment of its path).
fn short_type_name(path: &'static str) -> &'static str {
    let base = path.split('<').next().unwrap_or(path);
    base.rsplit("::").next().unwrap_or(base)
}

/// The derive's reading of `id = "..."`: 32 hex digits, plain or hyphenated
/// 8-4-4-4-12 (not `uuid`'s braced or URN forms).
fn parse_id(text: &str) -> Result<Uuid, String> {
    const LAYOUT: &str = "expected 32 hex digits, optionally hyphenated 8-4-4-4-12, like \
                          `a3f467fe-c5d0-4f17-9897-83c373cc1dc8`";
    if text.len() != 32 && text.len() != 36 {
        return Err(format!(
            "{LAYOUT}, found {} characters",
            text.chars().count()
        ));
    }
    Uuid::try_parse(text).map_err(|e| format!("{e}; {LAYOUT}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Keep;

    impl Anonymiser for Keep {
        fn anonymise(original: Option<&str>) -> Option<String> {
            original.map(str::to_owned)
        }
    }

    fn problems(b: EntityDescriptorBuilder) -> Vec<DescriptorProblem> {
        match b.build() {
            Ok(d) => panic!("expected problems, built {d:?}"),
            Err(e) => e.into_problems(),
        }
    }

    #[test]
    fn short_type_names() {
        assert_eq!(short_type_name("a::b::Keep"), "Keep");
        assert_eq!(short_type_name("Keep"), "Keep");
        assert_eq!(short_type_name("a::Wrap<b::C>"), "Wrap");
    }

    #[test]
    fn ids_are_read_like_the_derive() {
        let id = Uuid::from_u128(0xa3f467fe_c5d0_4f17_9897_83c373cc1dc8);
        assert_eq!(parse_id("a3f467fe-c5d0-4f17-9897-83c373cc1dc8"), Ok(id));
        assert_eq!(parse_id("A3F467FEC5D04F17989783C373CC1DC8"), Ok(id));
        assert!(parse_id("{a3f467fe-c5d0-4f17-9897-83c373cc1dc8}").is_err());
        assert!(parse_id("urn:uuid:a3f467fe-c5d0-4f17-9897-83c373cc1dc8").is_err());
        assert!(parse_id("a3f467fe-c5d0-4f17-9897").is_err());
        assert!(parse_id("a3f467fe-c5d0-4f17-9897-83c373cc1dcz").is_err());
    }

    #[test]
    fn static_names_are_not_copied() {
        const TABLE: &str = "notes";
        let d = EntityDescriptor::builder("Note", "notes", "at")
            .id(Uuid::from_u128(1))
            .table(TABLE)
            .fields(["id", "tenant_id", "at"])
            .build()
            .expect("valid");
        assert!(std::ptr::eq(d.table(), TABLE));
    }

    #[test]
    fn defaults_are_the_derives() {
        let d = EntityDescriptor::builder(String::from("HTTPRequestLog"), "logs", "at")
            .id(Uuid::from_u128(1))
            .field(FieldSpec::new("at").rust_type("DateTime<Utc>"))
            .field(FieldSpec::new("note").optional())
            .field("id")
            .anonymise_with::<Keep>("id")
            .anonymise_null("note")
            .build()
            .expect("valid");
        assert_eq!(d.table(), "http_request_log");
        assert_eq!(d.schema(), None);
        let fields: Vec<_> = d
            .fields()
            .iter()
            .map(|f| (f.field(), f.column(), f.optional(), f.rust_type()))
            .collect();
        assert_eq!(
            fields,
            [
                ("at", "at", false, "DateTime<Utc>"),
                ("note", "note", true, "Option<_>"),
                ("id", "id", false, "_"),
            ]
        );
        // In the order given, as the derive keeps the order written.
        let anonymised: Vec<&str> = d.anonymise().iter().map(|a| a.field()).collect();
        assert_eq!(anonymised, ["id", "note"]);
        let AnonymiseMethod::Custom(keep) = d.anonymise()[0].method() else {
            panic!("a custom anonymiser");
        };
        assert_eq!(keep.name(), "Keep");
        assert_eq!(keep.anonymise(Some("x")).as_deref(), Some("x"));
    }

    #[test]
    fn every_problem_at_once() {
        let found = problems(
            EntityDescriptor::builder("", " ", "nope")
                .id_str("xyz")
                .id(Uuid::nil())
                .table("")
                .schema("a\0b")
                .tenantless()
                .field("a")
                .field(FieldSpec::new("b").column("a"))
                .field("a")
                .field("")
                .record_id("a")
                .record_id("b")
                .tenant("b")
                .soft_delete("ghost")
                .anonymise_null("a")
                .anonymise_empty("a")
                .anonymise_named("b", " ")
                .erasure_subject("b")
                .erasure_subject("b"),
        );
        let known = vec!["a".to_owned(), "b".to_owned()];
        assert_eq!(
            found,
            [
                DescriptorProblem::EmptyTypeName,
                DescriptorProblem::DuplicateField { field: "a".into() },
                DescriptorProblem::EmptyFieldName,
                DescriptorProblem::DuplicateColumn {
                    column: "a".into(),
                    first: "a".into(),
                    second: "b".into()
                },
                DescriptorProblem::EmptyCategory,
                DescriptorProblem::UnknownField {
                    role: FieldRole::Anchor,
                    field: "nope".into(),
                    known: known.clone()
                },
                DescriptorProblem::GivenTwice { key: "id" },
                DescriptorProblem::MalformedId {
                    text: "xyz".into(),
                    reason: "expected 32 hex digits, optionally hyphenated 8-4-4-4-12, like \
                             `a3f467fe-c5d0-4f17-9897-83c373cc1dc8`, found 3 characters"
                        .into()
                },
                DescriptorProblem::DuplicateMarker {
                    role: FieldRole::RecordId,
                    first: "a".into(),
                    second: "b".into()
                },
                DescriptorProblem::TenantOnTenantless { field: "b".into() },
                DescriptorProblem::UnknownField {
                    role: FieldRole::SoftDelete,
                    field: "ghost".into(),
                    known
                },
                DescriptorProblem::NullOnRequiredField {
                    field: "a".into(),
                    rust_type: "_".into()
                },
                DescriptorProblem::TwoAnonymiseMethods { field: "a".into() },
                DescriptorProblem::EmptyAnonymiserName { field: "b".into() },
                DescriptorProblem::DuplicateErasureSubject { field: "b".into() },
                DescriptorProblem::InvalidName {
                    kind: NameKind::Table,
                    name: String::new(),
                    field: None,
                    defaulted: false,
                    problem: IdentProblem::Empty
                },
                DescriptorProblem::InvalidName {
                    kind: NameKind::Schema,
                    name: "a\0b".into(),
                    field: None,
                    defaulted: false,
                    problem: IdentProblem::ContainsNul
                },
            ]
        );
    }

    #[test]
    fn nil_and_missing_ids() {
        let nil = problems(
            EntityDescriptor::builder("A", "c", "at")
                .field("at")
                .id_str("00000000-0000-0000-0000-000000000000"),
        );
        assert_eq!(nil, [DescriptorProblem::NilId]);
        let missing = problems(EntityDescriptor::builder("A", "c", "at").field("at"));
        assert_eq!(missing, [DescriptorProblem::MissingId]);
        // Exempt types may go without.
        let exempt = EntityDescriptor::exempt_builder("Invoice", "kept by law")
            .build()
            .expect("valid");
        assert_eq!(exempt.entity_id(), None);
        assert_eq!(exempt.table(), "invoice");
        assert_eq!(exempt.membership().exempt_reason(), Some("kept by law"));
        assert_eq!(
            problems(EntityDescriptor::exempt_builder("Invoice", "  ")),
            [DescriptorProblem::EmptyExemptReason]
        );
    }

    #[test]
    fn default_names_that_are_not_identifiers() {
        let long = "Very".repeat(16);
        let found = problems(
            EntityDescriptor::exempt_builder(long.clone(), "x").field(FieldSpec::new(long.clone())),
        );
        assert_eq!(
            found,
            [
                DescriptorProblem::InvalidName {
                    kind: NameKind::Column,
                    name: long.clone(),
                    field: Some(long.clone()),
                    defaulted: true,
                    problem: IdentProblem::TooLong
                },
                DescriptorProblem::InvalidName {
                    kind: NameKind::Table,
                    name: format!("{}very", "very_".repeat(15)),
                    field: None,
                    defaulted: true,
                    problem: IdentProblem::TooLong
                },
            ]
        );
        assert!(
            found[1]
                .to_string()
                .starts_with("the default table name `very_very")
        );
    }

    #[test]
    fn the_error_converts_into_validation_problems() {
        let e = EntityDescriptor::builder("A", "c", "at")
            .field("at")
            .field(FieldSpec::new("b").column("at"))
            .build()
            .expect_err("two problems");
        assert_eq!(e.type_name(), "A");
        assert_eq!(
            e.to_string(),
            "the descriptor of \"A\" has 2 problem(s): column `at` of field `b` is already used \
             by field `at`; a retained type needs a stable id"
        );
        let Error::Validation(report) = Error::from(e) else {
            panic!("a validation error");
        };
        assert_eq!(report.problems.len(), 2);
        assert_eq!(report.problems[0].type_name.as_deref(), Some("A"));
        assert_eq!(report.problems[0].column.as_deref(), Some("at"));
        assert_eq!(report.problems[1].column, None);
        assert!(report.problems[1].fix.contains("uuidgen"));
    }
}
