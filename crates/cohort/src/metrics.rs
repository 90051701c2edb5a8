//! Metrics through the `metrics` facade, behind the `metrics` feature; the
//! host installs whatever recorder it uses (Prometheus, StatsD, ...). Without
//! the feature these are no-ops.
//!
//! | name | type | labels |
//! |---|---|---|
//! | `cohort_rows_total` | counter | `strategy` (rows changed) |
//! | `cohort_batches_total` | counter | `strategy` |
//! | `cohort_held_rows_total` | counter | (rows found held at the end of an entity) |
//! | `cohort_runs_total` | counter | `kind`, `status` (`Interrupted` or `Refused` for an error) |
//! | `cohort_worker_occurrences_total` | counter | `outcome` (`run`, `skipped`, `failed`) |

use crate::error::Error;
use crate::ledger::{RunKind, RunStatus};
use crate::policy::Strategy;

/// A committed batch.
#[cfg(feature = "metrics")]
pub(crate) fn batch(strategy: Strategy, rows: u64) {
    let strategy = strategy.as_str();
    metrics::counter!("cohort_batches_total", "strategy" => strategy).increment(1);
    metrics::counter!("cohort_rows_total", "strategy" => strategy).increment(rows);
}

/// A run's outcome.
#[cfg(feature = "metrics")]
pub(crate) fn run(result: Result<(RunKind, RunStatus, u64), &Error>) {
    match result {
        Ok((kind, status, held)) => {
            metrics::counter!("cohort_held_rows_total").increment(held);
            metrics::counter!("cohort_runs_total", "kind" => kind.as_str(), "status" => status.as_str())
                .increment(1);
        }
        Err(e) => {
            let status = match e {
                Error::RunInterrupted { .. } => "Interrupted",
                _ => "Refused",
            };
            metrics::counter!("cohort_runs_total", "kind" => "Unknown", "status" => status)
                .increment(1);
        }
    }
}

/// A committed batch.
#[cfg(not(feature = "metrics"))]
pub(crate) fn batch(_strategy: Strategy, _rows: u64) {}

/// A run's outcome.
#[cfg(not(feature = "metrics"))]
pub(crate) fn run(_result: Result<(RunKind, RunStatus, u64), &Error>) {}

/// A worker occurrence's outcome: `run`, `skipped` (already swept) or `failed`.
#[cfg(feature = "metrics")]
pub(crate) fn occurrence(outcome: &'static str) {
    metrics::counter!("cohort_worker_occurrences_total", "outcome" => outcome).increment(1);
}

/// A worker occurrence's outcome.
#[cfg(not(feature = "metrics"))]
pub(crate) fn occurrence(_outcome: &'static str) {}
