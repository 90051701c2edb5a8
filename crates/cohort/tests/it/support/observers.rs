//! Audit observers several areas use.
#![allow(dead_code, unreachable_pub)]

use cohort::ledger::{AuditEvent, AuditObserver};
use cohort::policy::ProviderError;
use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;

/// Cancels the run (its token) when the first batch's progress arrives: the
/// first batch has committed.
pub struct CancelAfterFirstBatch(pub CancellationToken);

impl AuditObserver for CancelAfterFirstBatch {
    fn on_event<'a>(&'a self, event: &'a AuditEvent) -> BoxFuture<'a, Result<(), ProviderError>> {
        if matches!(event, AuditEvent::EntityProgress { .. }) {
            self.0.cancel();
        }
        Box::pin(async { Ok(()) })
    }
}
