//! Evidence an auditor can trust (contract EV).

mod chain;
mod export;
mod report;
