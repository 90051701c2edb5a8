//! The model: what the host declares about its row types.
//!
//! A row type is described by an [`EntityDescriptor`]: emitted as a static by
//! `#[derive(Retained)]` (checked at compile time), or built at run time by
//! [`EntityDescriptor::builder`] with the same checks (below: the API, the
//! checks, and why a built descriptor is `&'static`).
//!
//! # Descriptors built at run time
//!
//! `#[derive(Retained)]` is the way to describe a Rust row type. A host that
//! learns its model at run time (a model file, a plugin, a schema registry,
//! the `cohort` command) describes its tables with
//! [`EntityDescriptor::builder`] (or [`EntityDescriptor::exempt_builder`])
//! instead, and registers the result with
//! [`CohortBuilder::entity_descriptor`](crate::CohortBuilder::entity_descriptor):
//!
//! ```
//! use cohort::model::{EntityDescriptor, FieldSpec};
//!
//! let contacts = EntityDescriptor::builder("CaseContact", "case-contacts", "created_at")
//!     .id_str("b7316df4-7db5-46ad-aea7-f65c4b430f73")
//!     .table("case_contacts")
//!     .schema("crm")
//!     .fields(["id", "created_at", "full_name"])
//!     .field(FieldSpec::new("organisation").column("org_id"))
//!     .field(FieldSpec::new("anonymised_at").optional())
//!     .field(FieldSpec::new("email").optional())
//!     .tenant("organisation")
//!     .anonymise_null("email")
//!     .anonymise_empty("full_name")
//!     .erasure_subject("email")
//!     .build()?;
//! assert_eq!(contacts.table(), "case_contacts");
//! assert_eq!(contacts.field("organisation").map(|f| f.column()), Some("org_id"));
//! # Ok::<(), cohort::model::DescriptorError>(())
//! ```
//!
//! # The same descriptor, the same checks
//!
//! The builder's methods mirror the derive's attributes one for one: the
//! struct's keys (`id`, `table`, `schema`, `tenantless`, `exempt`), the
//! fields with their `column`, and every field key (`record_id`, `tenant`,
//! `soft_delete`, `deleted_at`, `anonymised_at`, `anonymise`,
//! `anonymise_with`, `erasure_subject`), which the builder takes by field
//! name. [`build`](EntityDescriptorBuilder::build) makes every check the
//! macro makes at compile time and returns every problem at once, as typed
//! [`DescriptorProblem`]s in one [`DescriptorError`] (which converts into
//! [`crate::Error::Validation`] for `?`):
//!
//! | derive (compile time) | builder (run time) |
//! |---|---|
//! | a retained type without `id`, a nil or malformed `id` | [`MissingId`](DescriptorProblem::MissingId), [`NilId`](DescriptorProblem::NilId), [`MalformedId`](DescriptorProblem::MalformedId) |
//! | a key given twice | [`GivenTwice`](DescriptorProblem::GivenTwice) (`id`, `table`, `schema`) |
//! | an empty `category`, an `exempt` without a reason | [`EmptyCategory`](DescriptorProblem::EmptyCategory), [`EmptyExemptReason`](DescriptorProblem::EmptyExemptReason) |
//! | `anchor` naming no field | [`UnknownField`](DescriptorProblem::UnknownField) |
//! | `table`, `schema`, `column` (or the default table or column name) not a PostgreSQL identifier | [`InvalidName`](DescriptorProblem::InvalidName) |
//! | two fields on one column | [`DuplicateColumn`](DescriptorProblem::DuplicateColumn) |
//! | a marker on two fields | [`DuplicateMarker`](DescriptorProblem::DuplicateMarker) |
//! | `tenant` on a `tenantless` type | [`TenantOnTenantless`](DescriptorProblem::TenantOnTenantless) |
//! | two anonymise methods on one field | [`TwoAnonymiseMethods`](DescriptorProblem::TwoAnonymiseMethods) |
//! | `anonymise = "null"` on a field that is not an `Option` | [`NullOnRequiredField`](DescriptorProblem::NullOnRequiredField) |
//! | `anonymise_with = ""` | [`EmptyAnonymiserName`](DescriptorProblem::EmptyAnonymiserName) |
//! | `erasure_subject` twice on one field | [`DuplicateErasureSubject`](DescriptorProblem::DuplicateErasureSubject) |
//!
//! and what the compiler itself guarantees a struct: a type name, non-empty
//! and distinct field names ([`EmptyTypeName`](DescriptorProblem::EmptyTypeName),
//! [`EmptyFieldName`](DescriptorProblem::EmptyFieldName),
//! [`DuplicateField`](DescriptorProblem::DuplicateField)), and markers,
//! methods and subjects naming fields that exist
//! ([`UnknownField`](DescriptorProblem::UnknownField)). Retained versus exempt
//! is chosen by the constructor, so the derive's "`exempt` combined with
//! `category`" and "neither retained nor exempt" cannot be written.
//!
//! What depends on the registration (conventions, the rule provider's
//! capabilities, the live catalog) is checked by
//! [`CohortBuilder::build`](crate::CohortBuilder::build), for a built
//! descriptor exactly as for a derived one: a missing record id or tenant
//! field, a role field that is also anonymised, columns and their types.
//!
//! Defaults are the derive's: the table is the type name in snake_case (by
//! the same `heck` crate), a field's column is its name, and the fields,
//! anonymised fields and erasure subjects keep the order in which they were
//! given (the derive keeps the order they are written in). A [`FieldSpec`] without [`optional`](FieldSpec::optional)
//! stands for a field that is not an `Option`, so anonymising it to NULL is
//! refused as the derive refuses it; a runtime model that knows no Rust types
//! (the `cohort` command's) declares its fields optional and leaves
//! nullability to the live check of the column (contract V6).
//!
//! # Who owns a built descriptor
//!
//! [`build`](EntityDescriptorBuilder::build) returns a `&'static
//! EntityDescriptor`: the descriptor, its field list and every name given as
//! a `String` are leaked, once, when the build succeeds (names given as
//! `&'static str` are kept as they are, not copied). That is deliberate:
//!
//! - a descriptor's accessors, [`Retained::descriptor`]
//!   and what the engine reports hand out `&'static` data
//!   ([`crate::PreviewEntry::entity_type`], [`crate::ExemptType::reason`],
//!   the ledger's events), because a derived descriptor is a static. An
//!   owned (`Arc`) descriptor would need every one of those to become an
//!   owned string, a breaking change of the public types for the sake of the
//!   rare host that builds models again and again;
//! - a model is built once, at start-up, and lives as long as the process's
//!   `Cohort` handle; the leak is bounded by the model (a few hundred bytes a
//!   type), and a failed build leaks nothing.
//!
//! So build each descriptor once and reuse the reference (it is `Copy`:
//! register it on as many builders as you like). Do not build descriptors
//! per request or per reload in a long-running process: each build leaks
//! its own copy.

mod builder;
mod conventions;
pub(crate) mod descriptor;
pub(crate) mod resolved;

pub use builder::{
    DescriptorError, DescriptorProblem, EntityDescriptorBuilder, FieldRole, FieldSpec, NameKind,
};
pub use conventions::Conventions;
pub use descriptor::{
    AnonymiseMethod, AnonymisedField, Anonymiser, AnonymiserFn, CategoryFrom, CustomAnonymiser,
    EntityDescriptor, FieldDescriptor, Markers, Membership, Retained,
};
