//! The audit ledger, observers and stored errors (contract A).

mod abandoned_runs;
mod audit;
mod leases;
mod stored_errors;
