//! The `cohort` binary, run for real against fresh PostgreSQL databases
//! (one per test, from cohort-testdb). Each test that checks a promise of
//! the behaviour contract names it (`// contract: K1`).

mod common;

mod categories;
mod coverage;
mod ctrl_c;
mod demo;
mod disposition;
mod events;
mod evidence;
mod guards;
mod help;
mod holds;
mod maintenance;
mod matters;
mod model_file;
mod operators;
mod pooler;
mod reading;
mod schedule;
mod settings;
mod stages;
mod subjects;
#[cfg(feature = "otlp")]
mod traces;
mod widths;
mod worker;
mod worker_metrics;
