//! Reliability under concurrency and faults (contract R;
//! `docs/reliability.md`).

mod faults;
mod harness;
mod history;
mod properties;
