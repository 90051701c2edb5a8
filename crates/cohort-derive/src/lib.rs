//! The `#[derive(Retained)]` macro for Cohort. Use it through the `cohort` crate.
