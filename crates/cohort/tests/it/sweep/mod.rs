//! How runs execute (contract X), strategies (S) and rules (P).

mod anchors;
mod archive;
mod backlog;
mod batches;
mod categories;
mod engine;
mod events;
mod execution;
mod hold_check;
mod maintenance;
mod panicking_callbacks;
mod physical_order;
mod postgres_limits;
mod rules;
mod stages;
