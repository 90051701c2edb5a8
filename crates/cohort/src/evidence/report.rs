//! The auditor's report (contract EV3): gathered from the ledger, rendered
//! as one self-contained HTML file.
