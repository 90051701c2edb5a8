//! Evidence an auditor can trust (contract EV).

mod certificates;
mod chain;
mod export;
mod export_memory;
pub(crate) mod report;
mod tampering;
