//! The audit ledger: events, observers, sanitized failures, and the (private) writer.

mod events;
mod failure;
mod observer;
pub(crate) mod partitions;
mod writer;

pub use events::{AuditEvent, EntitySummary, RunKind, RunStatus, Trigger};
pub use failure::{Failure, FailureKind};
pub use observer::AuditObserver;
pub(crate) use observer::Delivery;
pub(crate) use writer::{Ledger, SummaryKey};
