// contract: C3 — engines, SQL builders and catalog helpers are not public API.
use cohort::catalog;
use cohort::run::execute;
use cohort::sql::txn::begin_fenced;
use cohort::validate::validate;

fn main() {}
