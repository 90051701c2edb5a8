//! The trigger of migration 10 on `retention_disposition_decisions`
//! (contract DR3).
//!
//! `retention_disposition_decisions_chain` (`BEFORE INSERT`, `SECURITY
//! DEFINER`): every decision on a disposition batch (frozen, approved,
//! rejected, extended, voided, carried out) is a link of one install-wide
//! chain. The trigger takes a transaction-scoped advisory lock (class
//! "EVID", key `hashtext(<schema> || ':evidence-dispositions')`), reads the
//! chain's head, stamps the decision with the database clock and writes its
//! position, predecessor and hash, whatever the inserting statement gave for
//! them. The decision's author cannot write its own link.

use super::SchemaName;
use super::evidence::{LinkKind, RUN_CHAIN_LOCK_CLASS, hash_sql, row};

/// The body of `retention_disposition_decisions_chain`.
pub(super) fn chain_trigger_body(schema: &SchemaName) -> String {
    let decisions = schema.table("retention_disposition_decisions");
    let hash = hash_sql(LinkKind::Disposition, &row("NEW", &[]));
    format!(
        r#"
-- Cohort's evidence chain of disposition decisions (migration 10): one link
-- per decision, install-wide, stamped with the database clock.
DECLARE
    v_seq bigint;
    v_head bytea;
BEGIN
    PERFORM pg_catalog.pg_advisory_xact_lock({class}, pg_catalog.hashtext(
        TG_TABLE_SCHEMA::pg_catalog.text OPERATOR(pg_catalog.||) ':evidence-dispositions'));
    SELECT x.chain_seq, x.chain_hash INTO v_seq, v_head FROM {decisions} AS x
     ORDER BY x.chain_seq DESC LIMIT 1;
    NEW.chain_seq := COALESCE(v_seq, 0) OPERATOR(pg_catalog.+) 1;
    NEW.chain_prev := v_head;
    NEW.decided_at := pg_catalog.statement_timestamp();
    NEW.chain_hash := {hash};
    RETURN NEW;
END
"#,
        class = RUN_CHAIN_LOCK_CLASS,
    )
}
