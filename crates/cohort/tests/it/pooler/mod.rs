//! Through a real PgBouncer in transaction mode (contracts CO1 and CO3; the
//! lease tests of CO2 through the pooler are in `ledger::leases`). The
//! harness (`cohort_testdb::Bouncer`) starts PgBouncer with two server
//! connections and round-robin server selection in front of the test's
//! database, so consecutive transactions change server connections.

mod operations;
