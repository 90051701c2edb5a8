//! Metrics through the `metrics` facade, behind the `metrics` feature; the
//! host installs whatever recorder it uses (Prometheus, StatsD, ...). Without
//! the feature these are no-ops. `cohort worker --metrics-addr` installs a
//! Prometheus recorder and serves them (`docs/operating.md`, "Metrics").
//!
//! | name | type | labels |
//! |---|---|---|
//! | `cohort_rows_total` | counter | `strategy` (rows changed) |
//! | `cohort_batches_total` | counter | `strategy` |
//! | `cohort_batch_duration_seconds` | histogram | `strategy` (one committed batch) |
//! | `cohort_held_rows_total` | counter | (rows found held at the end of an entity) |
//! | `cohort_skipped_rows_total` | counter | (eligible rows left: locked, changed meanwhile) |
//! | `cohort_runs_total` | counter | `kind`, `trigger`, `status` (`Interrupted` or `Refused` for an error) |
//! | `cohort_lock_wait_fallbacks_total` | counter | (range batches that met a locked row and took the locked path) |
//! | `cohort_fence_timeouts_total` | counter | (batches whose entity fence was not granted in time) |
//! | `cohort_fence_wait_seconds` | histogram | (how long a batch waited for its entity fence, its `BEGIN` included) |
//! | `cohort_handler_deliveries_total` | counter | `outcome` (`Succeeded`, `Retried`, `DeadLettered`) |
//! | `cohort_worker_occurrences_total` | counter | `outcome` (`run`, `skipped`, `failed`) |

use crate::error::Error;
use crate::ledger::{RunKind, RunStatus, Trigger};
use crate::policy::Strategy;

/// What a settled run adds.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) struct RunCounts {
    pub(crate) kind: RunKind,
    pub(crate) trigger: Trigger,
    pub(crate) status: RunStatus,
    pub(crate) held: u64,
    pub(crate) skipped: u64,
}

#[cfg(feature = "metrics")]
mod on {
    use super::{Error, RunCounts, Strategy, Trigger};

    /// A committed batch and how long it took.
    pub(crate) fn batch(strategy: Strategy, rows: u64, seconds: f64) {
        let strategy = strategy.as_str();
        metrics::counter!("cohort_batches_total", "strategy" => strategy).increment(1);
        metrics::counter!("cohort_rows_total", "strategy" => strategy).increment(rows);
        metrics::histogram!("cohort_batch_duration_seconds", "strategy" => strategy)
            .record(seconds);
    }

    /// A run's outcome.
    pub(crate) fn run(trigger: Trigger, result: Result<RunCounts, &Error>) {
        match result {
            Ok(r) => {
                metrics::counter!("cohort_held_rows_total").increment(r.held);
                metrics::counter!("cohort_skipped_rows_total").increment(r.skipped);
                metrics::counter!("cohort_runs_total", "kind" => r.kind.as_str(),
                    "trigger" => r.trigger.as_str(), "status" => r.status.as_str())
                .increment(1);
            }
            Err(e) => {
                let status = match e {
                    Error::RunInterrupted { .. } => "Interrupted",
                    _ => "Refused",
                };
                metrics::counter!("cohort_runs_total", "kind" => "Unknown",
                    "trigger" => trigger.as_str(), "status" => status)
                .increment(1);
            }
        }
    }

    /// A range batch met a locked row and its range goes the locked way.
    pub(crate) fn lock_wait_fallback() {
        metrics::counter!("cohort_lock_wait_fallbacks_total").increment(1);
    }

    /// How long a batch waited for its entity fence.
    pub(crate) fn fence_wait(seconds: f64) {
        metrics::histogram!("cohort_fence_wait_seconds").record(seconds);
    }

    /// A batch's entity fence was not granted within the fence wait.
    pub(crate) fn fence_timeout() {
        metrics::counter!("cohort_fence_timeouts_total").increment(1);
    }

    /// A settled row-handler delivery.
    pub(crate) fn delivery(outcome: &'static str) {
        metrics::counter!("cohort_handler_deliveries_total", "outcome" => outcome).increment(1);
    }

    /// A worker occurrence's outcome: `run`, `skipped` (already swept) or `failed`.
    pub(crate) fn occurrence(outcome: &'static str) {
        metrics::counter!("cohort_worker_occurrences_total", "outcome" => outcome).increment(1);
    }
}

#[cfg(not(feature = "metrics"))]
mod on {
    use super::{Error, RunCounts, Strategy, Trigger};

    pub(crate) fn batch(_strategy: Strategy, _rows: u64, _seconds: f64) {}
    pub(crate) fn run(_trigger: Trigger, _result: Result<RunCounts, &Error>) {}
    pub(crate) fn lock_wait_fallback() {}
    pub(crate) fn fence_timeout() {}
    pub(crate) fn fence_wait(_seconds: f64) {}
    pub(crate) fn delivery(_outcome: &'static str) {}
    pub(crate) fn occurrence(_outcome: &'static str) {}
}

pub(crate) use on::{
    batch, delivery, fence_timeout, fence_wait, lock_wait_fallback, occurrence, run,
};
