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
