// contract: C2 — the README is the crate documentation: its Rust examples
// compile as doctests (and docs/model.md below), so a stale example fails the build.
#![doc = include_str!("../../../README.md")]
#![warn(missing_debug_implementations)]

mod catalog;
mod cohort;
mod config;
mod dispatch;
pub mod disposition;
mod engine;
mod error;
pub mod events;
pub mod evidence;
pub mod handlers;
pub mod holds;
pub mod ledger;
mod metrics;
pub mod model;
pub mod policy;
mod run;
pub mod schema;
mod sql;
mod validate;
pub mod worker;

pub use cohort::{Cohort, CohortBuilder};
pub use config::{
    BatchOrder, ConnectionMode, MAX_ATTEMPTS, MAX_BATCH_SIZE, MAX_LOCK_WAIT, MAX_TIMEOUT, Options,
    WorkerOptions,
};
pub use error::{Error, Result};
/// The boxed future [`RuleProvider::resolve`] and
/// [`ledger::AuditObserver::on_event`] return (from `futures-util`).
#[doc(no_inline)]
pub use futures_util::future::BoxFuture;
pub use ledger::{RunKind, RunStatus, Trigger};
pub use model::{Anonymiser, Conventions, Retained};
pub use policy::{
    Capabilities, Period, ResolutionContext, Review, Rule, RuleProvider, Scope, Stage, Strategy,
    TenantContext,
};
pub use run::{
    AccessExport, AccessRequest, AccessType, Backlog, BacklogEntry, BacklogReason, EntityFailure,
    ErasureRequest, ExemptType, MARKER_PREFIX, MAX_SUBJECT_BYTES, PartitionDecision, PartitionPlan,
    Preview, PreviewEntry, ReplayFailure, ReplayReport, ReplayedErasure, RunResult, Subject,
    SweepOptions, SweepReason, TableMaintenance, VacuumOptions, VacuumOutcome,
};
pub use sql::ident::IdentProblem;
/// The cancellation token [`SweepOptions::cancel_on`] and
/// [`ErasureRequest::cancel_on`] take (from `tokio-util`).
#[doc(no_inline)]
pub use tokio_util::sync::CancellationToken;
pub use validate::{ValidationProblem, ValidationReport};

/// `#[derive(Retained)]`: see the [`model`] module.
pub use cohort_derive::Retained;

#[doc(hidden)]
pub mod __private {
    //! Paths the derive macro's output uses. Not part of the public API: the
    //! derive is released with this crate (`cohort-derive` is pinned to the
    //! same exact version) and anything here may change in any release.
    //! The derive's statics are built only through these constructors, so
    //! descriptor fields stay private; descriptors built at run time use the
    //! public, checked `cohort::model::EntityDescriptor::builder` instead.
    pub use crate::model::descriptor::{
        anonymise_custom, anonymise_empty_string, anonymise_literal, anonymise_named,
        anonymise_null, anonymised_field, category_from, entity_descriptor, event_keyed, exempt,
        field_descriptor, guarded, markers, retained,
    };
    pub use uuid::Uuid;
}

/// The model guide (`docs/model.md`), compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/model.md")]
pub struct ModelGuide;

/// The data-subjects guide (`docs/data-subjects.md`), compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/data-subjects.md")]
pub struct DataSubjectsGuide;
