//! K7: the demo needs nothing but a reachable server or PostgreSQL's
//! binaries, and walks preview, hold, sweep, erasure and the ledger.

use crate::common::*;

// contract: K7
#[test]
fn the_demo_walks_preview_hold_sweep_erasure_and_the_ledger() {
    let dir = std::env::temp_dir();
    // No DATABASE_URL and no settings: the demo finds its own server.
    let out = run(command_in(&dir, None, &["demo"]));
    assert_success(&out);
    let text = stdout(&out);
    for needle in [
        "== 1. A throwaway database",
        "applied migration 1 (cohort_tables)",
        "`cohort preview --tenant",
        "`cohort holds add`",
        "users now shows 1 eligible and 1 held.",
        "`cohort sweep --tenant",
        "Sweep run ",
        ": Succeeded",
        "`cohort erase --tenant",
        "Erasure run ",
        "the audit ledger",
        "tenant B still has 50 sessions and 1 order",
        "The demo database is dropped now.",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
}
