//! What the host plugs into the worker: where tenants come from, the kill
//! switch, and the clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;

use crate::policy::{ProviderError, TenantContext};

/// Enumerates the tenants the worker sweeps at each occurrence (contract
/// W3). Passes run in the order returned; a tenant returned twice runs once
/// (the first entry wins, and a warning is logged if the entries disagree on
/// jurisdiction or tags). Returning the nil UUID fails the occurrence before
/// any pass.
///
/// Implemented for one [`TenantContext`] and for a `Vec` of them; a host
/// with tenants in its database implements it with a query:
///
/// ```
/// use cohort::TenantContext;
/// use cohort::worker::TenantSource;
/// use cohort::policy::ProviderError;
/// use futures_util::future::BoxFuture;
///
/// struct Organisations(sqlx::PgPool);
///
/// impl TenantSource for Organisations {
///     fn tenants(&self) -> BoxFuture<'_, Result<Vec<TenantContext>, ProviderError>> {
///         Box::pin(async move {
///             let rows: Vec<(uuid::Uuid, Option<String>)> =
///                 sqlx::query_as("SELECT id, country FROM organisations ORDER BY created_at")
///                     .fetch_all(&self.0)
///                     .await?;
///             Ok(rows
///                 .into_iter()
///                 .map(|(id, country)| {
///                     let mut t = TenantContext::new(id);
///                     t.jurisdiction = country;
///                     t
///                 })
///                 .collect())
///         })
///     }
/// }
/// ```
pub trait TenantSource: Send + Sync + 'static {
    /// The tenants of one occurrence.
    fn tenants(&self) -> BoxFuture<'_, Result<Vec<TenantContext>, ProviderError>>;
}

impl TenantSource for TenantContext {
    fn tenants(&self) -> BoxFuture<'_, Result<Vec<TenantContext>, ProviderError>> {
        Box::pin(async move { Ok(vec![self.clone()]) })
    }
}

impl TenantSource for Vec<TenantContext> {
    fn tenants(&self) -> BoxFuture<'_, Result<Vec<TenantContext>, ProviderError>> {
        Box::pin(async move { Ok(self.clone()) })
    }
}

/// No tenant: only the tenantless pass runs.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoTenants;

impl TenantSource for NoTenants {
    fn tenants(&self) -> BoxFuture<'_, Result<Vec<TenantContext>, ProviderError>> {
        Box::pin(async { Ok(Vec::new()) })
    }
}

/// Stops scheduled sweeps (contract W9): read before every pass; once it
/// answers true, no further pass of the occurrence starts (a pass already
/// running finishes its run). Implemented for `Arc<AtomicBool>`, which a host
/// can flip from an admin endpoint; implement it to read a feature flag or a
/// database row.
pub trait KillSwitch: Send + Sync + 'static {
    /// Whether scheduled sweeps must stop. An error counts as engaged: a
    /// switch that cannot be read never lets a sweep start.
    fn engaged(&self) -> BoxFuture<'_, Result<bool, ProviderError>>;
}

impl KillSwitch for Arc<AtomicBool> {
    fn engaged(&self) -> BoxFuture<'_, Result<bool, ProviderError>> {
        Box::pin(async move { Ok(self.load(Ordering::SeqCst)) })
    }
}

impl KillSwitch for bool {
    fn engaged(&self) -> BoxFuture<'_, Result<bool, ProviderError>> {
        let on = *self;
        Box::pin(async move { Ok(on) })
    }
}

/// Where the worker gets the time and how it waits. [`SystemClock`] in
/// production; tests give a clock of their own so that no test waits for a
/// real occurrence.
pub trait Clock: Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> DateTime<Utc>;

    /// Waits until `deadline` (by this clock).
    fn sleep_until(&self, deadline: DateTime<Utc>) -> BoxFuture<'_, ()>;
}

/// The system clock and tokio's timer.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }

    fn sleep_until(&self, deadline: DateTime<Utc>) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            // Sleep in steps of at most a minute, so that a clock that jumps
            // (NTP, a suspended VM) is noticed within a minute.
            loop {
                let left = (deadline - Utc::now()).to_std().unwrap_or(Duration::ZERO);
                if left.is_zero() {
                    return;
                }
                tokio::time::sleep(left.min(Duration::from_secs(60))).await;
            }
        })
    }
}
