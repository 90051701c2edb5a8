//! Compile-time promises (trybuild): each `tests/ui/*.rs` file is one program
//! that must not compile, by `#[derive(Retained)]` or by Cohort's public
//! surface, with the message and span recorded in its `.stderr` file.
//!
//! A test binary of its own, so that `cargo test --test it` (every other
//! integration test) does not pay for trybuild's build. That build is the costly
//! part on a cold checkout: trybuild compiles the cases in a separate project
//! and target directory (`target/tests/trybuild`, with `--cfg trybuild` and
//! `--target <host>`, so nothing is shared with the ordinary build), which
//! depends on everything this crate and its dev-dependencies depend on. It
//! only runs `cargo check`, but every proc macro and build script among those
//! dependencies (and all of their own dependencies) is compiled in full for the
//! host: 165 such units against 138 checked ones. Most of the host units come
//! from sqlx's `macros` feature, which Cohort does not use; see "How the macro
//! is built" in docs/model.md for the measurements.

// M1: neither_retained_nor_exempt, exempt_with_category, exempt_with_anchor,
// category_without_anchor. M2: missing_id, malformed_id, nil_id. M4:
// duplicate_marker. M5: tenantless_with_tenant. M6: anonymise_null_not_option,
// anonymise_with_not_anonymiser. C3: internals_are_private,
// descriptor_fields_are_private. A5: ledger_writer_is_private.
// contract: M1, M2, M4, M5, M6, C3, A5
#[test]
fn compile_errors() {
    trybuild::TestCases::new().compile_fail("tests/ui/*.rs");
}
