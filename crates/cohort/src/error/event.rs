//! Why an event request was refused (contract SL4): carried by
//! [`crate::Error::Event`], re-exported as `cohort::events::EventError`.

use uuid::Uuid;

/// An event request that was refused; nothing was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EventError {
    /// The event type is empty or blank.
    #[error("an event needs a type (event_type is empty)")]
    EmptyType,
    /// The subject key is empty.
    #[error("an event needs the subject key it happened to (subject_key is empty)")]
    EmptySubjectKey,
    /// Who recorded or withdrew it is empty or blank.
    #[error("an event needs who records or withdraws it (empty)")]
    EmptyRecorder,
    /// A withdrawal without a reason.
    #[error("a withdrawal needs a reason (empty)")]
    EmptyReason,
    /// No category of the handle's model counts from this event type
    /// (`Capabilities::after_event`).
    #[error(
        "no category counts its period from event type {event_type:?} (declared: {})",
        if declared.is_empty() { "none".to_owned() } else { declared.join(", ") }
    )]
    UndeclaredType {
        /// The type given.
        event_type: String,
        /// The types the model's categories declare.
        declared: Vec<String>,
    },
    /// No event has this id.
    #[error("no event {event_id}")]
    NotFound {
        /// The id given.
        event_id: Uuid,
    },
    /// The event was withdrawn already.
    #[error("event {event_id} is already withdrawn")]
    AlreadyWithdrawn {
        /// The event.
        event_id: Uuid,
    },
}
