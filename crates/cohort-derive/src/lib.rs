//! The `#[derive(Retained)]` macro for Cohort. Use it through the `cohort`
//! crate (`cohort::Retained`), which re-exports it next to the trait of the
//! same name.
//!
//! The derive implements `cohort::Retained` for a struct with named fields.
//! `descriptor()` returns a `&'static cohort::model::EntityDescriptor`: static
//! metadata naming the type's fields, columns, role markers, anonymise methods
//! and erasure subjects. No SQL is generated; which field plays which role is
//! settled when the type is registered, where global conventions take part.
//!
//! # Example
//!
//! ```
//! use chrono::{DateTime, Utc};
//! use uuid::Uuid;
//!
//! struct KeepDomain;
//! impl cohort::Anonymiser for KeepDomain {
//!     fn anonymise(original: Option<&str>) -> Option<String> {
//!         let domain = original?.rsplit_once('@')?.1;
//!         Some(format!("redacted@{domain}"))
//!     }
//! }
//!
//! #[derive(cohort::Retained)]
//! #[cohort(category = "case-contacts", anchor = "created_at")]
//! #[cohort(id = "b7316df4-7db5-46ad-aea7-f65c4b430f73", table = "case_contacts", schema = "app")]
//! pub struct CaseContact {
//!     #[cohort(record_id)]
//!     pub id: Uuid,
//!     #[cohort(tenant, column = "org_id")]
//!     pub organisation: Uuid,
//!     pub created_at: DateTime<Utc>,
//!     #[cohort(anonymised_at)]
//!     pub scrubbed_at: Option<DateTime<Utc>>,
//!     #[cohort(anonymise = "null", erasure_subject)]
//!     pub email: Option<String>,
//!     #[cohort(anonymise_with = KeepDomain)]
//!     pub work_email: String,
//!     #[cohort(anonymise = "empty")]
//!     pub full_name: String,
//!     #[cohort(anonymise(literal = "[redacted]"))]
//!     pub phone: String,
//!     #[cohort(erasure_subject)]
//!     pub subject_id: Uuid,
//! }
//!
//! #[derive(cohort::Retained)]
//! #[cohort(exempt = "legal requirement: kept for the lifetime of the account", tenantless)]
//! pub struct Invoice {
//!     pub id: Uuid,
//!     pub issued_at: DateTime<Utc>,
//! }
//!
//! let descriptor = <CaseContact as cohort::Retained>::descriptor();
//! assert_eq!(descriptor.table(), "case_contacts");
//! assert_eq!(descriptor.markers().tenant(), Some("organisation"));
//! assert_eq!(descriptor.erasure_subjects(), &["email", "subject_id"]);
//! assert_eq!(descriptor.entity_id(), Some(CaseContact::ENTITY_ID));
//! ```
//!
//! # What it generates
//!
//! - `impl cohort::Retained for T`, whose `descriptor()` returns a `static`
//!   descriptor built with the hidden `const fn` constructors in
//!   `cohort::__private` (descriptor fields are private to `cohort`; this
//!   crate is pinned to `cohort`'s exact version for that reason).
//! - For a type with an `id`: `impl T { pub const ENTITY_ID: uuid::Uuid }`,
//!   the same id as `<T as cohort::Retained>::entity_id()`, usable in `const`
//!   contexts. A type that defines its own `ENTITY_ID` cannot derive
//!   `Retained` with an `id`.
//!
//! # Attributes
//!
//! All keys go in `#[cohort(...)]` attributes. Several keys may share one
//! attribute (`#[cohort(a, b = "..")]`) or be spread over several
//! attributes; each key may be given once per struct or field. Values may
//! come from a `macro_rules!` macro's fragments (`id = $id` with
//! `$id:literal`, `anonymise_with = $a` with `$a:path`).
//!
//! ## On the struct
//!
//! | Key | Meaning |
//! |-----|---------|
//! | `category = "session-notes"` | The retention category whose rule applies. With `anchor`, makes the type retained. |
//! | `anchor = "created_at"` | The **field** (not column) whose timestamp ages a row. Must name a field of the struct. |
//! | `id = "a3f467fe-c5d0-4f17-9897-83c373cc1dc8"` | The stable retained-entity UUID (32 hex digits, plain or hyphenated 8-4-4-4-12, any case; not the nil UUID). Required for retained types, optional for exempt ones. Never change it once rows, holds or ledger entries refer to it. |
//! | `table = "session_notes"` | The table. Default: the type name in snake_case (`SessionNote` → `session_note`). |
//! | `schema = "app"` | The table's schema. Default: the configured default schema, then `public`. |
//! | `tenantless` | Rows belong to no tenant. No field may then be marked `tenant`. |
//! | `exempt = "reason"` | The type is explicitly out of retention, for the reason given (shown in reports). Not allowed together with `category` or `anchor`. |
//!
//! Every type must say either `category` + `anchor` (+ `id`) or `exempt`.
//!
//! ## On a field
//!
//! | Key | Meaning |
//! |-----|---------|
//! | `column = "col_name"` | The column. Default: the field name (raw identifiers without `r#`). |
//! | `record_id`, `tenant`, `soft_delete`, `deleted_at`, `anonymised_at` | Role markers. Each may be on one field at most. Unmarked roles fall back to the global convention, then to the built-in default field (`id`, `tenant_id`, `is_deleted`, `deleted_at`, `anonymised_at`). |
//! | `anonymise = "null"` | Scrub by setting NULL. The field's type must be written as `Option<_>` (or `std::option::Option<_>` / `core::option::Option<_>`). |
//! | `anonymise = "empty"` | Scrub by setting the empty string. |
//! | `anonymise(literal = "[redacted]")` | Scrub by setting a fixed text. |
//! | `anonymise_with = path::To::Type` | Scrub with `<path::To::Type as cohort::Anonymiser>::anonymise`, row by row. |
//! | `erasure_subject` | A row whose value in this field equals the erasure subject matches an erasure request. Several fields may carry it. |
//!
//! A field has at most one anonymise method.
//!
//! # Compile-time errors
//!
//! All problems are reported at once, each pointing at the key or value at
//! fault: unknown or duplicate keys, malformed values (a key missing
//! its value, a non-string value, a name that is not a valid PostgreSQL
//! identifier), a missing, malformed or nil `id` on a retained type, an
//! `anchor` naming no field, a type that is neither retained nor exempt,
//! `exempt` together with `category`/`anchor`, a marker on two fields,
//! `tenantless` together with a `tenant` marker, `anonymise = "null"` on a
//! field that is not an `Option`, two fields mapped to one column, and
//! enums, unions, tuple and unit structs.
//!
//! # Limitations
//!
//! The descriptor is a `static` inside `descriptor()`, so the derive works on
//! generic types only as long as the attributes do not mention the type's
//! generic parameters (e.g. in `anonymise_with`). `Option` detection is
//! syntactic: a type alias for an `Option` is not recognised.

mod attr;
mod entity;
mod expand;
mod util;

use proc_macro::TokenStream;

/// Derives `cohort::Retained`: see the [crate documentation](crate) for the
/// `#[cohort(...)]` attribute syntax.
#[proc_macro_derive(Retained, attributes(cohort))]
pub fn derive_retained(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as syn::DeriveInput);
    derive(&input).into()
}

/// The derive on parsed input: the impl, or every error found as
/// `compile_error!` invocations.
fn derive(input: &syn::DeriveInput) -> proc_macro2::TokenStream {
    match entity::parse_entity(input) {
        Ok(entity) => expand::expand(&entity),
        Err(errors) => errors.write_errors(),
    }
}

#[cfg(test)]
mod tests {
    use super::derive;
    use syn::parse_quote;

    #[test]
    fn errors_become_compile_errors() {
        let output = derive(&parse_quote! {
            #[cohort(category = "c", anchor = "nope", id = "0")]
            struct A { at: i64 }
        })
        .to_string();
        assert_eq!(output.matches("compile_error").count(), 2, "{output}");
        assert!(!output.contains("impl"), "{output}");
    }
}
