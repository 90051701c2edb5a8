//! The entity fence (contract H11): one transaction-scoped advisory lock per
//! (Cohort install schema, retained entity id).
//!
//! It lives in PostgreSQL's two-`int4` advisory keyspace, which never collides
//! with the single-`bigint` keyspace hosts usually use (and sqlx's migrator
//! uses): key 1 is [`FENCE_CLASS`], key 2 is
//! `pg_catalog.hashtext(<raw schema name> || ':' || <retained entity id as text>)`
//! ([`fence_key_sql`]). Mutations (sweep and erasure batches, host deletions)
//! take it shared; hold creation takes it exclusively, and so does the trigger
//! migration 2 puts on `retention_holds`, for holds inserted or updated with
//! plain SQL. Two entity ids whose keys collide only serialise a little more.

pub(crate) use crate::sql::txn::{FENCE_CLASS, fence_key_sql};

/// The body of the trigger function on `retention_holds` (what
/// `pg_proc.prosrc` holds once migration 2 ran). It names no schema:
/// `TG_TABLE_SCHEMA` is the raw name of the schema the holds table is in.
pub(super) fn fence_trigger_body() -> String {
    let new_key = fence_key_sql("TG_TABLE_SCHEMA", "NEW.retained_entity_id");
    let old_key = fence_key_sql("TG_TABLE_SCHEMA", "OLD.retained_entity_id");
    format!(
        r#"
-- Cohort's entity fence, taken exclusively, as hold creation takes it: a hold
-- written with plain SQL waits for the sweep batches of its retained entity
-- that are under way, and the batches that start later see the hold.
DECLARE
    new_key integer := {new_key};
    old_key integer;
BEGIN
    IF TG_OP OPERATOR(pg_catalog.=) 'UPDATE'
       AND OLD.retained_entity_id IS DISTINCT FROM NEW.retained_entity_id THEN
        old_key := {old_key};
        -- Both fences, lower key first, so two such updates cannot deadlock.
        PERFORM pg_catalog.pg_advisory_xact_lock({class}, LEAST(new_key, old_key));
        PERFORM pg_catalog.pg_advisory_xact_lock({class}, GREATEST(new_key, old_key));
    ELSE
        PERFORM pg_catalog.pg_advisory_xact_lock({class}, new_key);
    END IF;
    RETURN NEW;
END
"#,
        class = FENCE_CLASS,
    )
}

/// The body of the fence trigger function from migration 5 on: the fence as
/// [`fence_trigger_body`] takes it, then (contract H16) a new or changed
/// hold's record id is read through its retained type's key, as recorded in
/// `retention_entities` by `CohortBuilder::build`, and stored as the row's
/// own text (`CAST(key AS text)`, what every mutation compares holds with),
/// or, when no row has that key, as the key type's canonical text. A record
/// id the key type cannot read, or a retained type no handle has registered,
/// is refused with an error that says so.
///
/// Every name reaches the dynamic SQL through `format('%I')`, the key type
/// through a cast to `regtype`, and the operator only after a check that it
/// consists of operator characters; the record id is a parameter.
pub(super) fn canonical_fence_trigger_body(schema: &super::SchemaName) -> String {
    let new_key = fence_key_sql("TG_TABLE_SCHEMA", "NEW.retained_entity_id");
    let old_key = fence_key_sql("TG_TABLE_SCHEMA", "OLD.retained_entity_id");
    format!(
        r#"
-- Cohort's entity fence, taken exclusively, as hold creation takes it: a hold
-- written with plain SQL waits for the sweep batches of its retained entity
-- that are under way, and the batches that start later see the hold.
-- Then the record id is stored as the row's own key text (migration 5).
DECLARE
    new_key integer := {new_key};
    old_key integer;
    v_entity record;
    v_type pg_catalog.regtype;
    v_op pg_catalog.text;
    v_canon pg_catalog.text;
BEGIN
    IF TG_OP OPERATOR(pg_catalog.=) 'UPDATE'
       AND OLD.retained_entity_id IS DISTINCT FROM NEW.retained_entity_id THEN
        old_key := {old_key};
        -- Both fences, lower key first, so two such updates cannot deadlock.
        PERFORM pg_catalog.pg_advisory_xact_lock({class}, LEAST(new_key, old_key));
        PERFORM pg_catalog.pg_advisory_xact_lock({class}, GREATEST(new_key, old_key));
    ELSE
        PERFORM pg_catalog.pg_advisory_xact_lock({class}, new_key);
    END IF;
    -- Every hold written moves its type's holds version, under the fence:
    -- sweeps that keep a filter of the type's holds across batches see it
    -- move and read the holds again before their next batch.
    UPDATE {registry} AS e SET holds_version = e.holds_version OPERATOR(pg_catalog.+) 1
     WHERE e.retained_entity_id OPERATOR(pg_catalog.=) NEW.retained_entity_id
    RETURNING e.table_schema, e.table_name, e.record_id_column, e.record_id_type,
              e.record_id_eq_schema, e.record_id_eq
      INTO v_entity;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'retention_holds: retained entity % is not registered', NEW.retained_entity_id
            USING ERRCODE = '23503',
                  HINT = 'build a Cohort handle with this retained type (it registers the type''s key), or create the hold through Cohort';
    END IF;
    IF TG_OP OPERATOR(pg_catalog.=) 'UPDATE'
       AND OLD.retained_entity_id IS DISTINCT FROM NEW.retained_entity_id THEN
        UPDATE {registry} AS e SET holds_version = e.holds_version OPERATOR(pg_catalog.+) 1
         WHERE e.retained_entity_id OPERATOR(pg_catalog.=) OLD.retained_entity_id;
    END IF;
    IF TG_OP OPERATOR(pg_catalog.=) 'UPDATE'
       AND OLD.retained_entity_id IS NOT DISTINCT FROM NEW.retained_entity_id
       AND OLD.record_id IS NOT DISTINCT FROM NEW.record_id THEN
        RETURN NEW;
    END IF;
    IF v_entity.record_id_eq !~ '^[-+*/<>=~!@#%^&|`?]+$' THEN
        RAISE EXCEPTION 'retention_holds: the registered key operator of retained entity % is not an operator', NEW.retained_entity_id
            USING ERRCODE = '22023';
    END IF;
    IF v_entity.record_id_eq_schema IS NULL THEN
        v_op := v_entity.record_id_eq;
    ELSE
        v_op := pg_catalog.format('OPERATOR(%I.%s)', v_entity.record_id_eq_schema, v_entity.record_id_eq);
    END IF;
    v_type := v_entity.record_id_type::pg_catalog.regtype;
    BEGIN
        EXECUTE pg_catalog.format(
            'SELECT (t.%1$I)::pg_catalog.text FROM %2$I.%3$I AS t WHERE t.%1$I %4$s CAST($1 AS %5$s) LIMIT 1',
            v_entity.record_id_column, v_entity.table_schema, v_entity.table_name, v_op, v_type)
          INTO v_canon USING NEW.record_id;
        IF v_canon IS NULL THEN
            EXECUTE pg_catalog.format('SELECT (CAST($1 AS %s))::pg_catalog.text', v_type)
              INTO v_canon USING NEW.record_id;
        END IF;
    EXCEPTION WHEN data_exception THEN
        RAISE EXCEPTION 'retention_holds: record id % is not a valid % (the key of retained entity %)',
                pg_catalog.quote_literal(NEW.record_id), v_type, NEW.retained_entity_id
            USING ERRCODE = SQLSTATE,
                  HINT = 'a hold names its row by the row''s key';
    END;
    NEW.record_id := v_canon;
    RETURN NEW;
END
"#,
        class = FENCE_CLASS,
        registry = schema.table("retention_entities"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trigger_uses_the_same_class_and_formula() {
        let body = fence_trigger_body();
        assert!(body.contains(&fence_key_sql("TG_TABLE_SCHEMA", "NEW.retained_entity_id")));
        assert!(body.contains(&fence_key_sql("TG_TABLE_SCHEMA", "OLD.retained_entity_id")));
        assert_eq!(body.matches("pg_advisory_xact_lock(1131376754,").count(), 3);
        assert!(
            !body.contains("_shared"),
            "the trigger takes the fence exclusively"
        );
    }
}
