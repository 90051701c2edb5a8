//! # Cohort
//!
//! Annotation-driven data retention for PostgreSQL.
#![doc = include_str!("../../../docs/crate-intro.md")]

mod error;
pub mod model;
pub mod schema;
mod sql;

pub use error::{Error, Result};
pub use model::{Anonymiser, Retained};
pub use sql::ident::IdentProblem;

/// `#[derive(Retained)]`: see the [`model`] module.
pub use cohort_derive::Retained;

#[doc(hidden)]
pub mod __private {
    //! Paths the derive macro's output uses. Not part of the public API.
    pub use uuid::Uuid;
}
