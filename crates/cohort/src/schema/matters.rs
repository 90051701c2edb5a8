//! The triggers of migration 8 on `retention_matters` (contracts MH1-MH3).
//!
//! * `retention_matters_fence` (`BEFORE INSERT OR UPDATE`): normalises a
//!   matter however it is written (the types it names sorted and
//!   deduplicated, created-at never after the database clock, its scope
//!   immutable), refuses a retained type no handle has registered, and then
//!   takes the entity fence of every registered type the matter covers,
//!   exclusively and in key order, and moves their holds version: as a hold
//!   does (contract H11), a matter committed before a batch's statement
//!   protects every row that statement would touch, and a batch loop that
//!   read the type's matters reads them again.
//! * `retention_matters_evidence_chain` (`AFTER INSERT OR UPDATE`): appends
//!   one link to `retention_matter_events`, the install-wide chain of every
//!   matter's creation, change and release, under a transaction-scoped
//!   advisory lock. `SECURITY DEFINER`: no runner may write the events.

use super::SchemaName;
use super::evidence::{LinkKind, RUN_CHAIN_LOCK_CLASS, hash_sql, row};
use crate::sql::txn::{FENCE_CLASS, fence_key_sql};

/// The registered types a matter row `r` (`NEW`, `OLD`) covers, as a
/// condition on registry alias `e`.
fn covers(r: &str) -> String {
    format!(
        "(({r}.scope_kind OPERATOR(pg_catalog.=) 'Type' \
           AND e.retained_entity_id OPERATOR(pg_catalog.=) {r}.retained_entity_id) \
          OR ({r}.scope_kind OPERATOR(pg_catalog.=) 'Subject' \
           AND ({r}.entity_ids IS NULL \
                OR e.retained_entity_id OPERATOR(pg_catalog.=) ANY ({r}.entity_ids))))"
    )
}

/// The body of `retention_matters_fence`.
pub(super) fn fence_trigger_body(schema: &SchemaName) -> String {
    let registry = schema.table("retention_entities");
    let key = fence_key_sql("TG_TABLE_SCHEMA", "e.retained_entity_id");
    format!(
        r#"
-- Cohort's matter fence (migration 8): a matter, however it is written,
-- takes the entity fence of every registered type it covers, exclusively,
-- and moves their holds version, as a hold does.
DECLARE
    v_key integer;
    v_missing pg_catalog.uuid;
BEGIN
    IF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' THEN
        IF NEW.matter_id IS DISTINCT FROM OLD.matter_id
           OR NEW.tenant_id IS DISTINCT FROM OLD.tenant_id
           OR NEW.scope_kind IS DISTINCT FROM OLD.scope_kind
           OR NEW.subject IS DISTINCT FROM OLD.subject
           OR NEW.entity_ids IS DISTINCT FROM OLD.entity_ids
           OR NEW.retained_entity_id IS DISTINCT FROM OLD.retained_entity_id
           OR NEW.anchor_from IS DISTINCT FROM OLD.anchor_from
           OR NEW.anchor_to IS DISTINCT FROM OLD.anchor_to
           OR NEW.created_at IS DISTINCT FROM OLD.created_at THEN
            RAISE EXCEPTION 'retention_matters: the scope of matter % cannot change', OLD.matter_id
                USING ERRCODE = '22023',
                      HINT = 'release the matter and create another';
        END IF;
        IF OLD.released_at IS NOT NULL
           AND NEW.released_at IS DISTINCT FROM OLD.released_at THEN
            RAISE EXCEPTION 'retention_matters: matter % is already released', OLD.matter_id
                USING ERRCODE = '22023';
        END IF;
    ELSE
        NEW.created_at := LEAST(COALESCE(NEW.created_at, pg_catalog.statement_timestamp()),
                                pg_catalog.statement_timestamp());
        IF NEW.entity_ids IS NOT NULL THEN
            NEW.entity_ids := ARRAY(SELECT DISTINCT u FROM pg_catalog.unnest(NEW.entity_ids) AS u ORDER BY u);
            IF pg_catalog.cardinality(NEW.entity_ids) OPERATOR(pg_catalog.=) 0 THEN
                RAISE EXCEPTION 'retention_matters: matter % names no retained type', NEW.matter_id
                    USING ERRCODE = '22023',
                          HINT = 'leave entity_ids NULL for every retained type';
            END IF;
        END IF;
        SELECT u INTO v_missing FROM pg_catalog.unnest(
                   COALESCE(NEW.entity_ids, ARRAY[]::pg_catalog.uuid[])
                   OPERATOR(pg_catalog.||) NEW.retained_entity_id) AS u
         WHERE u IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM {registry} AS e
                            WHERE e.retained_entity_id OPERATOR(pg_catalog.=) u)
         LIMIT 1;
        IF v_missing IS NOT NULL THEN
            RAISE EXCEPTION 'retention_matters: retained entity % is not registered', v_missing
                USING ERRCODE = '23503',
                      HINT = 'build a Cohort handle with this retained type, or create the matter through Cohort';
        END IF;
    END IF;
    FOR v_key IN SELECT DISTINCT {key} AS k FROM {registry} AS e
                  WHERE {covers} ORDER BY 1 LOOP
        PERFORM pg_catalog.pg_advisory_xact_lock({class}, v_key);
    END LOOP;
    UPDATE {registry} AS e SET holds_version = e.holds_version OPERATOR(pg_catalog.+) 1
     WHERE {covers};
    RETURN NEW;
END
"#,
        class = FENCE_CLASS,
        covers = covers("NEW"),
    )
}

/// The body of `retention_matters_evidence_chain`.
pub(super) fn chain_trigger_body(schema: &SchemaName) -> String {
    let events = schema.table("retention_matter_events");
    let hash = hash_sql(
        LinkKind::Matter,
        &row(
            "NEW",
            &[
                ("chain_seq", "(v_seq OPERATOR(pg_catalog.+) 1)"),
                ("chain_prev", "v_head"),
                ("event", "v_event"),
                ("entity_ids", "v_entities"),
                ("recorded_at", "v_at"),
            ],
        ),
    );
    format!(
        r#"
-- Cohort's evidence chain of matters (migration 8): one link per creation,
-- change and release, install-wide.
DECLARE
    v_seq bigint;
    v_head bytea;
    v_event pg_catalog.text;
    v_entities pg_catalog.text := pg_catalog.array_to_string(NEW.entity_ids, ',');
    v_at pg_catalog.timestamptz := pg_catalog.statement_timestamp();
BEGIN
    IF TG_OP OPERATOR(pg_catalog.=) 'INSERT' THEN
        v_event := 'Created';
    ELSIF OLD IS NOT DISTINCT FROM NEW THEN
        RETURN NULL;
    ELSIF OLD.released_at IS NULL AND NEW.released_at IS NOT NULL THEN
        v_event := 'Released';
    ELSE
        v_event := 'Changed';
    END IF;
    PERFORM pg_catalog.pg_advisory_xact_lock({class}, pg_catalog.hashtext(
        TG_TABLE_SCHEMA::pg_catalog.text OPERATOR(pg_catalog.||) ':evidence-matters'));
    SELECT x.chain_seq, x.chain_hash INTO v_seq, v_head FROM {events} AS x
     ORDER BY x.chain_seq DESC LIMIT 1;
    v_seq := COALESCE(v_seq, 0);
    INSERT INTO {events} (chain_seq, chain_prev, chain_hash, matter_id, event, tenant_id,
                          scope_kind, subject, entity_ids, retained_entity_id, anchor_from,
                          anchor_to, reason, owner, created_at, expires_at, released_at,
                          recorded_at)
    VALUES (v_seq OPERATOR(pg_catalog.+) 1, v_head, {hash}, NEW.matter_id, v_event, NEW.tenant_id,
            NEW.scope_kind, NEW.subject, v_entities, NEW.retained_entity_id, NEW.anchor_from,
            NEW.anchor_to, NEW.reason, NEW.owner, NEW.created_at, NEW.expires_at, NEW.released_at,
            v_at);
    RETURN NULL;
END
"#,
        class = RUN_CHAIN_LOCK_CLASS,
    )
}
