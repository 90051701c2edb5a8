//! The audit ledger: events, observers, sanitized failures, and the (private) writer.

mod events;
mod observer;

pub use events::{AuditEvent, EntitySummary, RunKind, RunStatus, Trigger};
pub use observer::AuditObserver;
pub(crate) use observer::Delivery;
