//! The right to erasure (contract E).

mod engine;
mod legal_minimum;
mod rechecks;
mod subject_types;
