//! The engine: the state every operation shares (the pool, the options, the
//! validated model, the rules, the observers, the row handlers), one layer
//! below the operations that run on it and two below the handle. The
//! handle (`cohort.rs`) only holds it and delegates; the operations are
//! `impl Engine` blocks in their own modules (`run/`, `holds/`) or types
//! that hold it (`dispatch::Dispatcher`, `worker::Worker`).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::config::Options;
use crate::error::Error;
use crate::handlers::registry::Registered;
use crate::ledger::AuditObserver;
use crate::policy::RuleProvider;
use crate::schema::{SchemaName, check_readiness};
use crate::validate::Model;

/// The shared state behind a [`Cohort`](crate::Cohort): what every operation
/// reads. The handle holds it in an `Arc`; the engines (`run`, `holds`,
/// `dispatch`, `worker`) implement their operations on it, so none of them
/// knows the handle.
pub(crate) struct Engine {
    pub(crate) pool: PgPool,
    pub(crate) options: Options,
    pub(crate) schema: SchemaName,
    pub(crate) provider: Arc<dyn RuleProvider>,
    pub(crate) model: Model,
    pub(crate) observers: Vec<Arc<dyn AuditObserver>>,
    /// The row handlers, ordered by retained type, then rank.
    pub(crate) handlers: Vec<Registered>,
    /// The worker's schedule, parsed at build.
    pub(crate) schedule: crate::config::Schedule,
    /// The host's key for subject hashes ([`CohortBuilder::subject_key`]).
    pub(crate) subject_key: Option<Arc<[u8]>>,
    /// Set once readiness has passed; failures are never cached.
    pub(crate) ready: AtomicBool,
}

impl Engine {
    /// The row handlers of one retained type, in rank order.
    pub(crate) fn handlers_of(&self, entity_id: Uuid) -> &[Registered] {
        let start = self.handlers.partition_point(|h| h.entity_id < entity_id);
        let end = self.handlers.partition_point(|h| h.entity_id <= entity_id);
        &self.handlers[start..end]
    }

    /// Checks readiness unless it has already passed once. Every entry point
    /// calls this before it writes anything.
    pub(crate) async fn ensure_ready(&self, conn: &mut PgConnection) -> Result<(), Error> {
        if self.ready.load(Ordering::Acquire) {
            return Ok(());
        }
        check_readiness(conn, &self.schema).await?.into_result()?;
        self.ready.store(true, Ordering::Release);
        Ok(())
    }
}

impl fmt::Debug for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Engine")
            .field("schema", &self.schema)
            .field("entities", &self.model.entities.len())
            .field("observers", &self.observers.len())
            .finish_non_exhaustive()
    }
}
