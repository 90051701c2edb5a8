//! Cohort's tables and readiness (contract D).

mod hostile_search_path;
mod migrations;
mod readiness;
