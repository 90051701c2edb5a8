//! Legal holds, and host deletions that respect them.
//!
//! A hold freezes one row: while it is active no sweep, no erasure and no
//! host deletion through [`Deletion`] touches the row. Create, remove, list
//! and query holds through [`Holds`] ([`crate::Cohort::holds`]); delete rows
//! of your own around holds through [`Deletion`] ([`crate::Cohort::deletion`]).
//!
//! Mutations judge a hold by the database clock (`statement_timestamp()`):
//! active when `created_at <= clock`, and `expires_at` and `removed_at` are
//! each NULL or after the clock. Reporting queries ([`Holds::list_active`],
//! [`Holds::is_held`]) apply the same rule to the `as_of` the caller passes.
//!
#![doc = include_str!("../../../../docs/holds.md")]

mod deletion;
mod key;
pub(crate) mod matter_set;
mod matters;
mod repo;
mod statements;
pub(crate) mod txn;
mod types;
mod validate;

pub use crate::error::hold::{HoldError, MAX_REASON_BYTES, MAX_RECORD_ID_BYTES, RecordIdProblem};
pub use deletion::{Deletion, DeletionError, DeletionOutcome};

/// The most targets one host deletion may name: they are locked and checked
/// in one transaction, and memory grows with them.
pub const MAX_DELETION_TARGETS: usize = crate::config::MAX_BATCH_SIZE as usize;
pub use matters::{
    Matter, MatterReport, MatterRequest, MatterScope, MatterTypeReport, Matters, Protection,
};
pub use repo::Holds;
pub use types::{Hold, HoldFilter, HoldRequest, Target};

/// The SQLSTATE of a database error, if it is one.
fn sqlstate(e: &sqlx::Error) -> Option<String> {
    match e {
        sqlx::Error::Database(db) => db.code().map(|c| c.into_owned()),
        _ => None,
    }
}
