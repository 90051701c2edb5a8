//! Predicates more than one statement builder needs, written once.

/// Whether hold alias `h` is active at the timestamptz expression `at`:
/// created at or before it, and neither expired nor removed at or before it.
/// Mutations pass `pg_catalog.statement_timestamp()` (the database clock);
/// reporting queries pass the caller's `as_of`.
pub(crate) fn hold_active_at(at: &str) -> String {
    format!(
        "h.created_at <= {at} \
         AND (h.expires_at IS NULL OR h.expires_at > {at}) \
         AND (h.removed_at IS NULL OR h.removed_at > {at})"
    )
}

/// Whether hold alias `h` has not stopped protecting at `at` (neither
/// expired nor removed), whether or not it has started: the holds a filter
/// must keep (a hold may start later without being written again).
pub(crate) fn hold_not_yet_over(at: &str) -> String {
    format!(
        "(h.expires_at IS NULL OR h.expires_at > {at}) \
         AND (h.removed_at IS NULL OR h.removed_at > {at})"
    )
}

/// `EXISTS` an active hold (by the database clock) on one row: `holds` is the
/// quoted, schema-qualified holds table, `entity` the SQL expression of the
/// retained-entity id, `record` the row's canonical record id as text, and
/// `tenant` the condition on `h.tenant_id` (e.g. `h.tenant_id = t."tenant_id"`
/// or `h.tenant_id IS NULL`).
///
/// The subquery ends in `OFFSET 0`, which keeps PostgreSQL from pulling it
/// up into an anti-join: it stays a per-row probe of the holds' index on
/// `(retained_entity_id, record_id)`, whose cost follows the rows asked
/// about, never the number of holds, whatever the statistics say.
pub(crate) fn active_hold_exists(holds: &str, entity: &str, record: &str, tenant: &str) -> String {
    format!(
        "EXISTS (SELECT 1 FROM {holds} AS h WHERE h.retained_entity_id = {entity} \
         AND h.record_id = {record} AND {tenant} AND {active} OFFSET 0)",
        active = hold_active_at("pg_catalog.statement_timestamp()")
    )
}
