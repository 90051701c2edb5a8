//! The triggers of the events migration on `retention_events` (contract
//! SL4): events are the clocks of event-based retention, so they are
//! evidence.
//!
//! * `retention_events_guard` (`BEFORE INSERT OR UPDATE OR DELETE`): an
//!   event's recorded-at is the database clock; an event is never deleted,
//!   and the only change it takes is its withdrawal, once (who, when, why).
//!   A correction is a withdrawal and a new event.
//! * `retention_events_evidence_chain` (`AFTER INSERT OR UPDATE`): appends
//!   one link to `retention_event_log`, the install-wide chain of every
//!   recording and withdrawal, under a transaction-scoped advisory lock.
//!   `SECURITY DEFINER`: no runner may write the log.

use super::SchemaName;
use super::evidence::{LinkKind, RUN_CHAIN_LOCK_CLASS, hash_sql, row};

/// The body of `retention_events_guard`.
pub(super) fn guard_trigger_body(_schema: &SchemaName) -> String {
    r#"
-- Cohort's events (event-based retention): recorded, withdrawn once, never
-- changed otherwise nor deleted.
BEGIN
    IF TG_OP OPERATOR(pg_catalog.=) 'DELETE' THEN
        RAISE EXCEPTION 'retention_events: event % cannot be deleted', OLD.event_id
            USING ERRCODE = '22023',
                  HINT = 'withdraw it (Cohort''s events().withdraw, cohort events withdraw)';
    ELSIF TG_OP OPERATOR(pg_catalog.=) 'INSERT' THEN
        NEW.recorded_at := pg_catalog.statement_timestamp();
        NEW.withdrawn_at := NULL;
        NEW.withdrawn_by := NULL;
        NEW.withdrawn_reason := NULL;
        RETURN NEW;
    END IF;
    IF NEW.event_id IS DISTINCT FROM OLD.event_id
       OR NEW.event_type IS DISTINCT FROM OLD.event_type
       OR NEW.subject_key IS DISTINCT FROM OLD.subject_key
       OR NEW.tenant_id IS DISTINCT FROM OLD.tenant_id
       OR NEW.occurred_at IS DISTINCT FROM OLD.occurred_at
       OR NEW.recorded_by IS DISTINCT FROM OLD.recorded_by
       OR NEW.recorded_at IS DISTINCT FROM OLD.recorded_at THEN
        RAISE EXCEPTION 'retention_events: event % cannot change', OLD.event_id
            USING ERRCODE = '22023',
                  HINT = 'withdraw it and record the corrected event';
    END IF;
    IF OLD.withdrawn_at IS NOT NULL THEN
        RAISE EXCEPTION 'retention_events: event % is already withdrawn', OLD.event_id
            USING ERRCODE = '22023';
    END IF;
    IF NEW.withdrawn_at IS NOT NULL THEN
        NEW.withdrawn_at := pg_catalog.statement_timestamp();
    END IF;
    RETURN NEW;
END
"#
    .to_owned()
}

/// The body of `retention_events_evidence_chain`.
pub(super) fn chain_trigger_body(schema: &SchemaName) -> String {
    let log = schema.table("retention_event_log");
    let hash = hash_sql(
        LinkKind::Event,
        &row(
            "NEW",
            &[
                ("chain_seq", "(v_seq OPERATOR(pg_catalog.+) 1)"),
                ("chain_prev", "v_head"),
                ("action", "v_action"),
                ("logged_at", "v_at"),
            ],
        ),
    );
    format!(
        r#"
-- Cohort's evidence chain of events (event-based retention): one link per
-- recording and withdrawal, install-wide.
DECLARE
    v_seq bigint;
    v_head bytea;
    v_action pg_catalog.text;
    v_at pg_catalog.timestamptz := pg_catalog.statement_timestamp();
BEGIN
    IF TG_OP OPERATOR(pg_catalog.=) 'INSERT' THEN
        v_action := 'Recorded';
    ELSIF OLD IS NOT DISTINCT FROM NEW THEN
        RETURN NULL;
    ELSE
        v_action := 'Withdrawn';
    END IF;
    PERFORM pg_catalog.pg_advisory_xact_lock({class}, pg_catalog.hashtext(
        TG_TABLE_SCHEMA::pg_catalog.text OPERATOR(pg_catalog.||) ':evidence-events'));
    SELECT x.chain_seq, x.chain_hash INTO v_seq, v_head FROM {log} AS x
     ORDER BY x.chain_seq DESC LIMIT 1;
    v_seq := COALESCE(v_seq, 0);
    INSERT INTO {log} (chain_seq, chain_prev, chain_hash, event_id, action, event_type,
                       subject_key, tenant_id, occurred_at, recorded_by, recorded_at,
                       withdrawn_at, withdrawn_by, withdrawn_reason, logged_at)
    VALUES (v_seq OPERATOR(pg_catalog.+) 1, v_head, {hash}, NEW.event_id, v_action, NEW.event_type,
            NEW.subject_key, NEW.tenant_id, NEW.occurred_at, NEW.recorded_by, NEW.recorded_at,
            NEW.withdrawn_at, NEW.withdrawn_by, NEW.withdrawn_reason, v_at);
    RETURN NULL;
END
"#,
        class = RUN_CHAIN_LOCK_CLASS,
    )
}
