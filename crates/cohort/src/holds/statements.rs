//! The statements on `retention_holds` itself. The holds table is always
//! written schema-qualified and quoted; values are bound.

use crate::schema::SchemaName;
use crate::sql::predicates::hold_active_at as active_at;

/// Every column of a hold, in the order [`super::repo`] reads them.
const COLUMNS: &str = "h.hold_id, h.retained_entity_id, h.record_id, h.tenant_id, h.reason, \
                       h.created_at, h.expires_at, h.removed_at";

/// The SQL of the holds table in one schema.
pub(super) struct HoldSql {
    holds: String,
}

impl HoldSql {
    pub(super) fn new(schema: &SchemaName) -> HoldSql {
        HoldSql {
            holds: schema.table("retention_holds").to_string(),
        }
    }

    /// `$1` hold id, `$2` entity, `$3` canonical record id, `$4` tenant,
    /// `$5` reason, `$6` requested created-at, `$7` expires-at. The stored
    /// created-at is the earlier of `$6` and the database clock.
    pub(super) fn insert(&self) -> String {
        format!(
            "INSERT INTO {holds} AS h (hold_id, retained_entity_id, record_id, tenant_id, reason, \
                                       created_at, expires_at, removed_at) \
             VALUES ($1, $2, $3, $4, $5, \
                     LEAST($6::pg_catalog.timestamptz, pg_catalog.statement_timestamp()), \
                     $7::pg_catalog.timestamptz, NULL) \
             RETURNING {COLUMNS}",
            holds = self.holds
        )
    }

    /// `$1` hold id, `$2` removed-at. The earlier removal instant is kept
    /// (`LEAST` ignores a NULL).
    pub(super) fn remove(&self) -> String {
        format!(
            "UPDATE {holds} AS h SET removed_at = LEAST(h.removed_at, $2::pg_catalog.timestamptz) \
             WHERE h.hold_id = $1 RETURNING {COLUMNS}",
            holds = self.holds
        )
    }

    /// `$1` as-of, `$2` entity filter (NULL: any), `$3` tenant filter (NULL: any).
    pub(super) fn list_active(&self) -> String {
        format!(
            "SELECT {COLUMNS} FROM {holds} AS h \
             WHERE {active} \
               AND ($2::pg_catalog.uuid IS NULL OR h.retained_entity_id = $2) \
               AND ($3::pg_catalog.uuid IS NULL OR h.tenant_id = $3) \
             ORDER BY h.created_at, h.hold_id",
            holds = self.holds,
            active = active_at("$1::pg_catalog.timestamptz"),
        )
    }

    /// Every hold, active or not: `$1` entity, `$2` tenant (NULL: any).
    pub(super) fn list_all(&self) -> String {
        format!(
            "SELECT {COLUMNS} FROM {holds} AS h \
             WHERE ($1::pg_catalog.uuid IS NULL OR h.retained_entity_id = $1) \
               AND ($2::pg_catalog.uuid IS NULL OR h.tenant_id = $2) \
             ORDER BY h.created_at, h.hold_id",
            holds = self.holds,
        )
    }

    /// Which of the rows `$1` entities (uuid[]), `$2` tenants (uuid[]), `$3`
    /// canonical record ids (text[]) an active hold covers, judged by the
    /// database clock; returns their 1-based positions.
    pub(super) fn held_targets(&self) -> String {
        format!(
            "SELECT u.i FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.uuid[]), \
                                        pg_catalog.unnest($2::pg_catalog.uuid[]), \
                                        pg_catalog.unnest($3::pg_catalog.text[])) \
                             WITH ORDINALITY AS u(e, tn, r, i) \
             WHERE EXISTS (SELECT 1 FROM {holds} AS h \
               WHERE h.retained_entity_id = u.e AND h.record_id = u.r \
                 AND h.tenant_id IS NOT DISTINCT FROM u.tn AND {active}) \
             ORDER BY u.i",
            holds = self.holds,
            active = active_at("pg_catalog.statement_timestamp()"),
        )
    }

    /// Deletes holds inactive (expired or removed) since before the database
    /// clock minus `$1` (interval).
    pub(super) fn prune(&self) -> String {
        format!(
            "DELETE FROM {holds} AS h \
             WHERE LEAST(h.expires_at, h.removed_at) < pg_catalog.statement_timestamp() - $1::pg_catalog.interval",
            holds = self.holds
        )
    }
}
