//! Observers: post-commit export of ledger events, isolated and bounded.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;

use super::AuditEvent;
use crate::policy::ProviderError;

/// Receives ledger events after they commit, in order. Delivery is best
/// effort (no outbox): poll the ledger tables for guarantees.
///
/// Each call is bounded by `Options::observer_timeout`; an error, a panic or a
/// timeout is logged and changes nothing else, and an observer that times out
/// hears nothing more for the rest of that run.
///
/// ```
/// use cohort::ledger::{AuditEvent, AuditObserver};
/// use cohort::policy::ProviderError;
/// use futures_util::future::BoxFuture;
///
/// struct Export;
/// impl AuditObserver for Export {
///     fn on_event<'a>(&'a self, event: &'a AuditEvent) -> BoxFuture<'a, Result<(), ProviderError>> {
///         Box::pin(async move {
///             println!("{event:?}");
///             Ok(())
///         })
///     }
/// }
/// ```
pub trait AuditObserver: Send + Sync + 'static {
    /// Handles one event.
    fn on_event<'a>(&'a self, event: &'a AuditEvent) -> BoxFuture<'a, Result<(), ProviderError>>;
}

/// The observers of one run, with the ones cut off by a timeout.
pub(crate) struct Delivery {
    observers: Vec<(Arc<dyn AuditObserver>, bool)>,
    timeout: Duration,
}

impl Delivery {
    pub(crate) fn new(observers: &[Arc<dyn AuditObserver>], timeout: Duration) -> Delivery {
        Delivery {
            observers: observers.iter().map(|o| (o.clone(), true)).collect(),
            timeout,
        }
    }

    /// Delivers one committed event to every observer still listening.
    pub(crate) async fn deliver(&mut self, event: &AuditEvent) {
        for (index, (observer, listening)) in self.observers.iter_mut().enumerate() {
            if !*listening {
                continue;
            }
            // An observer may panic while building its future as well as inside it.
            let call = match std::panic::catch_unwind(AssertUnwindSafe(|| observer.on_event(event)))
            {
                Ok(future) => AssertUnwindSafe(future).catch_unwind(),
                Err(_) => {
                    tracing::warn!(observer = index, "audit observer panicked");
                    continue;
                }
            };
            match tokio::time::timeout(self.timeout, call).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => {
                    tracing::warn!(observer = index, error = %e, "audit observer failed")
                }
                Ok(Err(_)) => tracing::warn!(observer = index, "audit observer panicked"),
                Err(_) => {
                    *listening = false;
                    tracing::warn!(
                        observer = index,
                        timeout = ?self.timeout,
                        "audit observer timed out; it hears nothing more of this run"
                    );
                }
            }
        }
    }
}
