//! Cohort's integration tests: one test binary (`cargo test -p cohort --test
//! it`), one module per area of the behaviour contract
//! (`docs/guarantees.md`). Each test that checks a promise names it in a
//! comment (`// contract: H3`); `cargo test -p cohort --test it -- holds::`
//! runs one area.
//!
//! - `model`: `#[derive(Retained)]`'s descriptors (`derive`), exempt types
//!   (`exempt`), the global column conventions (`conventions`). M.
//! - `validate`: start-up validation against the live database. V.
//! - `schema`: Cohort's tables and readiness (`readiness`), migrations
//!   (`migrations`), quoted schemas under a hostile `search_path`
//!   (`hostile_search_path`). D.
//! - `sweep`: preview and sweep with every strategy (`engine`), the execution
//!   model (`execution`), the hold check's cost under any plan
//!   (`hold_check`), values PostgreSQL cannot hold (`postgres_limits`),
//!   panicking providers and observers (`panicking_callbacks`), what batches
//!   measure (`batches`), rules as applied and recorded (`rules`). X, S, P.
//! - `ledger`: the audit ledger and its observers (`audit`), abandoned runs
//!   and lost connections (`abandoned_runs`), stored errors
//!   (`stored_errors`). A.
//! - `erasure`: the right to erasure (`engine`), subjects matched in the
//!   column's own type (`subject_types`), the legal minimum and anchors
//!   (`legal_minimum`), the final statement's rechecks (`rechecks`). E.
//! - `holds`: holds and host deletions (`repository`), hold creation racing
//!   every mutation path (`races`), what requests accept (`requests`), holds
//!   written with plain SQL however they spell the record id (`canonical`).
//!   H, DL.
//! - `disposition`: disposition review: what sweeps freeze and carry out
//!   (`sweeps`), decisions and their refusals (`decisions`), approvals and
//!   sweeps racing (`races`), the proof of disposition (`proof`). DR.
//! - `fence`: the batch protocol under the entity fence. X18, H11.
//! - `handlers`: row handlers' capture and delivery (`delivery`), the guide's
//!   example (`guide`). RH.
//! - `worker`: the scheduled worker. W, C1.
//! - `evidence`: the chain (`chain`), every hashed column tampered with in
//!   turn (`tampering`), exports and certificates (`export`), an export's
//!   peak memory measured in a child process (`export_memory`), certificates
//!   bound to the erased subject (`certificates`), the auditor's report in
//!   Chromium (`report`). EV.
//! - `partitions`: partition-aware purge. PT.
//! - `subjects`: data subjects beyond erasure: what an erasure leaves on
//!   disk (`physical`), change-stream markers through a logical replication
//!   slot (`markers`). SA.
//! - `security`: least privilege. SEC.
//! - `reliability`: randomized histories (`history`), faults (`faults`),
//!   property tests (`properties`), their harness (`harness`). R.
//! - `surface`: the public surface. C.
//! - `layering`: `sql/` uses no other module of the crate.
//! - `support`: the shared fixtures (no tests).
//!
//! All of them share this process: the log capture (`support::LogCapture`)
//! is one buffer, so a test looks only for its own lines; no test sets
//! environment variables or other process-wide state. The tests that need a
//! process of their own (`reliability::faults`: a sweeper killed with
//! SIGKILL, a server restart on a private cluster; `evidence::export_memory`:
//! an export's peak memory) run this binary again as a child with `--exact
//! <module path>::<test>`.
//!
//! Exceptions, test binaries of their own: `tests/ui.rs` (trybuild's
//! compile-fail cases; its header says why).

mod disposition;
mod erasure;
mod evidence;
mod fence;
mod handlers;
mod holds;
mod layering;
mod ledger;
mod model;
mod partitions;
mod pooler;
mod reliability;
mod schema;
mod security;
mod subjects;
mod support;
mod surface;
mod sweep;
mod validate;
mod worker;
