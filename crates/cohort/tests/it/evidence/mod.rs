//! Evidence an auditor can trust (contract EV).

mod certificates;
mod chain;
mod export;
mod report;
mod tampering;
