//! Registered handlers, with their snapshot types erased: what the engine
//! calls at capture and the dispatcher at delivery.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt;
use uuid::Uuid;

use super::{CapturedRow, Dispatch, HandlerContext, RowHandler, RowHandlerOptions};
use crate::ledger::{Failure, FailureKind};

/// How a delivery ended, as the dispatcher records it.
pub(crate) enum Delivered {
    /// The handler succeeded.
    Done,
    /// The handler failed (an error, a panic, or the cancellation deadline):
    /// retried until the attempts run out.
    Failed(Failure),
    /// The payload is not the handler's snapshot type: never retried.
    Undecodable(Failure),
}

/// A handler with its snapshot type erased.
pub(crate) trait Erased: Send + Sync + 'static {
    /// The snapshot as JSON, checked to come back equal; or why not.
    fn capture(&self, row: &CapturedRow) -> Result<serde_json::Value, Failure>;

    /// Decodes the payload and delivers it.
    fn deliver<'a>(
        &'a self,
        ctx: &'a HandlerContext,
        payload: serde_json::Value,
    ) -> futures_util::future::BoxFuture<'a, Delivered>;
}

struct Typed<H>(H);

impl<H: RowHandler> Erased for Typed<H> {
    fn capture(&self, row: &CapturedRow) -> Result<serde_json::Value, Failure> {
        let captured = std::panic::catch_unwind(AssertUnwindSafe(|| self.0.capture(row)));
        let snapshot = match captured {
            Ok(Ok(snapshot)) => snapshot,
            Ok(Err(e)) => return Err(Failure::logged(FailureKind::HandlerCapture, None, &e)),
            Err(_) => {
                return Err(Failure::reason(
                    FailureKind::HandlerPanic,
                    &format_args!("the capture of {} panicked", std::any::type_name::<H>()),
                ));
            }
        };
        // The snapshot must come back equal to itself, through exactly the
        // text the ledger stores.
        let round_trip = serde_json::to_string(&snapshot).and_then(|text| {
            let back: H::Snapshot = serde_json::from_str(&text)?;
            let value: serde_json::Value = serde_json::from_str(&text)?;
            Ok((back, value))
        });
        match round_trip {
            Ok((back, value)) if back == snapshot => Ok(value),
            Ok(_) => Err(Failure::reason(
                FailureKind::SnapshotRoundTrip,
                &format_args!(
                    "the snapshot of {} does not come back equal from JSON",
                    std::any::type_name::<H>()
                ),
            )),
            Err(e) => Err(Failure::logged(FailureKind::SnapshotRoundTrip, None, &e)),
        }
    }

    fn deliver<'a>(
        &'a self,
        ctx: &'a HandlerContext,
        payload: serde_json::Value,
    ) -> futures_util::future::BoxFuture<'a, Delivered> {
        Box::pin(async move {
            let snapshot: H::Snapshot = match serde_json::from_value(payload) {
                Ok(snapshot) => snapshot,
                Err(e) => {
                    return Delivered::Undecodable(Failure::logged(
                        FailureKind::PayloadUndecodable,
                        None,
                        &e,
                    ));
                }
            };
            let call = std::panic::catch_unwind(AssertUnwindSafe(|| self.0.deliver(ctx, snapshot)));
            let outcome = match call {
                Ok(future) => AssertUnwindSafe(future).catch_unwind().await,
                Err(panic) => Err(panic),
            };
            match outcome {
                Ok(Ok(())) => Delivered::Done,
                Ok(Err(e)) => Delivered::Failed(Failure::logged(FailureKind::Handler, None, &e)),
                Err(_) => Delivered::Failed(Failure::reason(
                    FailureKind::HandlerPanic,
                    &format_args!("the delivery of {} panicked", std::any::type_name::<H>()),
                )),
            }
        })
    }
}

/// One registered handler of one retained type.
#[derive(Clone)]
pub(crate) struct Registered {
    /// The retained type it handles.
    pub(crate) entity_id: Uuid,
    /// Its identity in the queue: the id given, or the Rust type name.
    pub(crate) id: String,
    /// The priority given (lower first).
    pub(crate) priority: i32,
    /// Its rank among the type's handlers (priority, then registration
    /// order): what the queue stores and orders by.
    pub(crate) rank: i32,
    pub(crate) dispatch: Dispatch,
    pub(crate) handler: Arc<dyn Erased>,
}

impl std::fmt::Debug for Registered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registered")
            .field("entity_id", &self.entity_id)
            .field("id", &self.id)
            .field("priority", &self.priority)
            .field("rank", &self.rank)
            .field("dispatch", &self.dispatch)
            .finish_non_exhaustive()
    }
}

impl Registered {
    /// A handler as the builder registers it (its rank is set by [`rank`]).
    pub(crate) fn new<H: RowHandler>(
        entity_id: Uuid,
        handler: H,
        options: RowHandlerOptions,
    ) -> Registered {
        Registered {
            entity_id,
            id: options
                .id
                .map(|id| id.to_string())
                .unwrap_or_else(|| std::any::type_name::<H>().to_owned()),
            priority: options.priority,
            rank: 0,
            dispatch: options.dispatch,
            handler: Arc::new(Typed(handler)),
        }
    }
}

/// Orders each type's handlers by priority, then registration order, and
/// numbers them: the rank the queue orders a row's deliveries by.
pub(crate) fn rank(handlers: &mut [Registered]) {
    // A stable sort keeps registration order among equal priorities.
    handlers.sort_by_key(|h| (h.entity_id, h.priority));
    let mut previous: Option<Uuid> = None;
    let mut next = 0;
    for h in handlers.iter_mut() {
        if previous != Some(h.entity_id) {
            next = 0;
            previous = Some(h.entity_id);
        }
        h.rank = next;
        next += 1;
    }
}
