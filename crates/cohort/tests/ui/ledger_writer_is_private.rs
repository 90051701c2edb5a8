// contract: A5 — the ledger writer is internal: hosts can neither name nor
// replace it, only observe committed events.
use cohort::ledger::Ledger;

fn main() {
    let _ = std::mem::size_of::<Ledger>();
}
