//! The `#[derive(Retained)]` macro for Cohort. Use it through the `cohort` crate.

use proc_macro::TokenStream;

/// Derives `cohort::Retained` (being written; see the `cohort::model` docs).
#[proc_macro_derive(Retained, attributes(cohort))]
pub fn derive_retained(input: TokenStream) -> TokenStream {
    let _ = input;
    "compile_error!(\"#[derive(Retained)] is not written yet\");".parse().unwrap_or_default()
}
