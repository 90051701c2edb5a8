//! The handle hosts hold: built once, validated, cheap to clone.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use sqlx::{Acquire, PgConnection, PgPool};

use crate::config::Options;
use crate::error::Error;
use crate::ledger::AuditObserver;
use crate::model::{EntityDescriptor, Retained};
use crate::policy::RuleProvider;
use crate::schema::{SchemaName, check_readiness};
use crate::sql::{pin_search_path, restore_search_path};
use crate::validate::{self, Model, Registration, ValidationProblem, ValidationReport};

/// Cohort, configured and validated. Clone it freely: clones share one state.
///
/// Preview, sweep and erasure take their own connections from the pool and
/// never join a caller's transaction.
#[derive(Clone)]
pub struct Cohort {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) pool: PgPool,
    pub(crate) options: Options,
    pub(crate) schema: SchemaName,
    pub(crate) provider: Arc<dyn RuleProvider>,
    pub(crate) model: Model,
    pub(crate) observers: Vec<Arc<dyn AuditObserver>>,
    /// Set once readiness has passed; failures are never cached.
    ready: AtomicBool,
}

impl std::fmt::Debug for Cohort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cohort")
            .field("schema", &self.inner.schema)
            .field("entities", &self.inner.model.entities.len())
            .finish_non_exhaustive()
    }
}

impl Cohort {
    /// Starts configuring Cohort on a pool.
    pub fn builder(pool: PgPool) -> CohortBuilder {
        CohortBuilder {
            pool,
            options: Options::default(),
            provider: None,
            descriptors: Vec::new(),
            observers: Vec::new(),
        }
    }

    /// The schema of Cohort's tables.
    pub fn schema(&self) -> &SchemaName {
        &self.inner.schema
    }

    /// The options in force.
    pub fn options(&self) -> &Options {
        &self.inner.options
    }

    /// Checks readiness unless it has already passed once. Every entry point
    /// calls this before it writes anything.
    pub(crate) async fn ensure_ready(&self, conn: &mut PgConnection) -> Result<(), Error> {
        if self.inner.ready.load(Ordering::Acquire) {
            return Ok(());
        }
        check_readiness(conn, &self.inner.schema)
            .await?
            .into_result()?;
        self.inner.ready.store(true, Ordering::Release);
        Ok(())
    }
}

/// Configures Cohort; [`CohortBuilder::build`] validates everything at once.
#[must_use]
pub struct CohortBuilder {
    pool: PgPool,
    options: Options,
    provider: Option<Arc<dyn RuleProvider>>,
    descriptors: Vec<&'static EntityDescriptor>,
    observers: Vec<Arc<dyn AuditObserver>>,
}

impl CohortBuilder {
    /// Sets the options (default: [`Options::default`]).
    pub fn options(mut self, options: Options) -> Self {
        self.options = options;
        self
    }

    /// Sets the rule provider (required).
    pub fn rules(mut self, provider: impl RuleProvider) -> Self {
        self.provider = Some(Arc::new(provider));
        self
    }

    /// Registers a retained (or explicitly exempt) row type.
    pub fn entity<T: Retained>(mut self) -> Self {
        self.descriptors.push(T::descriptor());
        self
    }

    /// Adds an audit observer; any number may be added.
    pub fn observer(mut self, observer: impl AuditObserver) -> Self {
        self.observers.push(Arc::new(observer));
        self
    }

    /// The SQL that creates (on request) and grants a least-privileged
    /// sweeping role, and optionally a read-only auditor, for the model
    /// registered so far: exactly what [`CohortBuilder::build`] checks the
    /// pool's role for. Reads nothing from the database, so run it with an
    /// admin connection before the role can build a handle. See
    /// [`crate::schema::role_grants`] and `docs/security.md`.
    pub fn grants(
        &self,
        roles: &crate::schema::RoleNames,
    ) -> Result<crate::schema::RoleGrants, Error> {
        let Some(provider) = &self.provider else {
            return Err(Error::Validation(ValidationReport {
                problems: vec![ValidationProblem {
                    type_name: None,
                    table: None,
                    column: None,
                    problem: "no rule provider is registered".into(),
                    fix: "call CohortBuilder::rules with your RuleProvider".into(),
                }],
            }));
        };
        crate::schema::role_grants(&self.descriptors, &self.options, provider.as_ref(), roles)
    }

    /// Validates the options, the registered types against the live catalog
    /// and the readiness of Cohort's tables, and returns the handle, or one
    /// [`Error::Validation`] listing every problem found.
    pub async fn build(self) -> Result<Cohort, Error> {
        let mut problems: Vec<ValidationProblem> = self
            .options
            .validate()
            .into_iter()
            .map(|p| ValidationProblem {
                type_name: None,
                table: None,
                column: None,
                problem: p,
                fix: "correct the option".into(),
            })
            .collect();
        let schema = SchemaName::new(&self.options.schema).unwrap_or_default();
        let Some(provider) = self.provider else {
            problems.push(ValidationProblem {
                type_name: None,
                table: None,
                column: None,
                problem: "no rule provider is registered".into(),
                fix: "call CohortBuilder::rules with your RuleProvider".into(),
            });
            return Err(Error::Validation(ValidationReport { problems }));
        };
        let mut conn = self.pool.acquire().await?;
        let mut tx = conn.begin().await?;
        let previous = pin_search_path(&mut tx).await?;
        let readiness = check_readiness(&mut tx, &schema).await?;
        for p in &readiness.problems {
            problems.push(ValidationProblem {
                type_name: None,
                table: p.table().map(|t| format!("{}.{}", schema.as_str(), t)),
                column: None,
                problem: p.to_string(),
                fix: "apply Cohort's schema migrations (cohort::schema::migrations)".into(),
            });
        }
        // Catalog type names are read with only pg_catalog on the path, so
        // every other type comes back schema-qualified and stays unambiguous
        // whatever search_path a later session has.
        sqlx::query(crate::sql::CATALOG_ONLY_SEARCH_PATH)
            .execute(&mut *tx)
            .await?;
        let registration = Registration {
            descriptors: &self.descriptors,
            options: &self.options,
            provider: provider.as_ref(),
        };
        let model = match validate::validate(&mut tx, &registration).await {
            Ok(model) => Some(model),
            Err(Error::Validation(report)) => {
                problems.extend(report.problems);
                None
            }
            Err(e) => return Err(e),
        };
        restore_search_path(&mut tx, &previous).await?;
        tx.commit().await?;
        match model {
            Some(model) if problems.is_empty() => Ok(Cohort {
                inner: Arc::new(Inner {
                    pool: self.pool,
                    options: self.options,
                    schema,
                    provider,
                    model,
                    observers: self.observers,
                    // Checked again by the first operation: only success is cached.
                    ready: AtomicBool::new(false),
                }),
            }),
            _ => Err(Error::Validation(ValidationReport { problems })),
        }
    }
}
