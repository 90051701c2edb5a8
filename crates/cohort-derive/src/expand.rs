//! Code generation: the `impl ::cohort::Retained` with a `static`
//! `EntityDescriptor` built from struct literals. Static metadata only.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;

use crate::attr::Marker;
use crate::entity::{Entity, Membership, Method};

/// `Option<&'static str>` as tokens.
fn opt_str(value: Option<&str>) -> TokenStream {
    match value {
        Some(value) => quote!(::core::option::Option::Some(#value)),
        None => quote!(::core::option::Option::None),
    }
}

/// The `impl ::cohort::Retained for T` of a validated entity.
pub(crate) fn expand(entity: &Entity) -> TokenStream {
    let ident = &entity.ident;
    let (impl_generics, ty_generics, where_clause) = entity.generics.split_for_impl();
    let type_name = &entity.type_name;

    let membership = match &entity.membership {
        Membership::Retained { category, anchor } => quote! {
            ::cohort::model::Membership::Retained { category: #category, anchor: #anchor }
        },
        Membership::Exempt { reason } => quote! {
            ::cohort::model::Membership::Exempt { reason: #reason }
        },
    };

    let entity_id = match entity.entity_id {
        Some(id) => {
            let literal =
                syn::LitInt::new(&format!("0x{id:032x}_u128"), proc_macro2::Span::call_site());
            quote!(::core::option::Option::Some(::cohort::__private::Uuid::from_u128(#literal)))
        }
        None => quote!(::core::option::Option::None),
    };

    let table = &entity.table;
    let schema = opt_str(entity.schema.as_deref());
    let tenantless = entity.tenantless;

    let fields = entity.fields.iter().map(|field| {
        let (name, column, optional, rust_type) =
            (&field.name, &field.column, field.optional, &field.rust_type);
        quote! {
            ::cohort::model::FieldDescriptor {
                field: #name,
                column: #column,
                optional: #optional,
                rust_type: #rust_type,
            }
        }
    });

    let marker = |m: Marker| opt_str(entity.marker(m));
    let (record_id, tenant, soft_delete, deleted_at, anonymised_at) = (
        marker(Marker::RecordId),
        marker(Marker::Tenant),
        marker(Marker::SoftDelete),
        marker(Marker::DeletedAt),
        marker(Marker::AnonymisedAt),
    );

    let anonymise = entity.anonymise.iter().map(|anonymised| {
        let field = &anonymised.field;
        let method = match &anonymised.method {
            Method::Null => quote!(::cohort::model::AnonymiseMethod::Null),
            Method::EmptyString => quote!(::cohort::model::AnonymiseMethod::EmptyString),
            Method::Literal(text) => quote!(::cohort::model::AnonymiseMethod::Literal(#text)),
            Method::Custom { name, path } => {
                // Spanned on the user's path, so "does not implement
                // `Anonymiser`" points at the attribute.
                let function =
                    quote_spanned!(path.span()=> <#path as ::cohort::Anonymiser>::anonymise);
                quote! {
                    ::cohort::model::AnonymiseMethod::Custom(::cohort::model::CustomAnonymiser {
                        name: #name,
                        anonymise: #function,
                    })
                }
            }
        };
        quote!(::cohort::model::AnonymisedField { field: #field, method: #method })
    });

    let erasure_subjects = &entity.erasure_subjects;

    quote! {
        #[automatically_derived]
        impl #impl_generics ::cohort::Retained for #ident #ty_generics #where_clause {
            fn descriptor() -> &'static ::cohort::model::EntityDescriptor {
                static DESCRIPTOR: ::cohort::model::EntityDescriptor = ::cohort::model::EntityDescriptor {
                    type_name: #type_name,
                    membership: #membership,
                    entity_id: #entity_id,
                    table: #table,
                    schema: #schema,
                    tenantless: #tenantless,
                    fields: &[#(#fields),*],
                    markers: ::cohort::model::Markers {
                        record_id: #record_id,
                        tenant: #tenant,
                        soft_delete: #soft_delete,
                        deleted_at: #deleted_at,
                        anonymised_at: #anonymised_at,
                    },
                    anonymise: &[#(#anonymise),*],
                    erasure_subjects: &[#(#erasure_subjects),*],
                };
                &DESCRIPTOR
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entity::parse_entity;
    use syn::parse_quote;

    fn expanded(input: syn::DeriveInput) -> String {
        match parse_entity(&input) {
            Ok(entity) => expand(&entity).to_string(),
            Err(e) => panic!("unexpected error: {e}"),
        }
    }

    #[test]
    fn output_is_an_impl_with_a_static_descriptor() {
        let output = expanded(parse_quote! {
            #[cohort(category = "case-contacts", anchor = "created_at", id = "b7316df4-7db5-46ad-aea7-f65c4b430f73")]
            struct CaseContact<T> {
                created_at: i64,
                #[cohort(anonymise = "null", erasure_subject)] email: Option<String>,
                #[cohort(anonymise_with = anon::KeepDomain, tenant)] work: T,
            }
        });
        let item: syn::ItemImpl = match syn::parse_str(&output) {
            Ok(item) => item,
            Err(e) => panic!("not an impl ({e}): {output}"),
        };
        assert_eq!(item.items.len(), 1);
        let compact = output.replace(' ', "");
        for expected in [
            "impl<T>::cohort::RetainedforCaseContact<T>",
            "staticDESCRIPTOR:::cohort::model::EntityDescriptor=",
            "::cohort::__private::Uuid::from_u128(0xb7316df47db546adaea7f65c4b430f73_u128)",
            "membership:::cohort::model::Membership::Retained{category:\"case-contacts\",anchor:\"created_at\"}",
            "table:\"case_contact\"",
            "schema:::core::option::Option::None",
            "tenant:::core::option::Option::Some(\"work\")",
            "record_id:::core::option::Option::None",
            "field:\"email\",column:\"email\",optional:true,rust_type:\"Option<String>\"",
            "method:::cohort::model::AnonymiseMethod::Null",
            "::cohort::model::CustomAnonymiser{name:\"KeepDomain\",anonymise:<anon::KeepDomainas::cohort::Anonymiser>::anonymise,}",
            "erasure_subjects:&[\"email\"]",
            "&DESCRIPTOR",
        ] {
            assert!(compact.contains(expected), "missing {expected} in {output}");
        }
    }

    #[test]
    fn exempt_output() {
        let compact = expanded(parse_quote! {
            #[cohort(exempt = "kept by law", tenantless, schema = "billing")]
            struct Invoice { id: i64 }
        })
        .replace(' ', "");
        for expected in [
            "membership:::cohort::model::Membership::Exempt{reason:\"keptbylaw\"}",
            "entity_id:::core::option::Option::None",
            "schema:::core::option::Option::Some(\"billing\")",
            "tenantless:true",
            "anonymise:&[]",
            "erasure_subjects:&[]",
        ] {
            assert!(
                compact.contains(expected),
                "missing {expected} in {compact}"
            );
        }
    }
}
