//! The registry of retained types (`retention_entities`, migration 5).
//!
//! A hold written with plain SQL names its row by a record id as text, and
//! the trigger on `retention_holds` must read that text the way hold
//! creation does: through the type's key (its table, column, comparison
//! type and equality operator; see `catalog::equality`). The database does
//! not know the host's model, so [`register`] records it there when a
//! handle is built: one row per retained type, rewritten only when it
//! changed.

use sqlx::PgConnection;

use super::SchemaName;
use crate::model::resolved::ResolvedEntity;
use crate::sql::AssertSqlSafe;

/// Records (or updates) the key of every type in `entities` in `schema`'s
/// registry. One statement, whatever the number of types; rows that
/// already say the same are not rewritten.
pub(crate) async fn register(
    conn: &mut PgConnection,
    schema: &SchemaName,
    entities: &[ResolvedEntity],
) -> Result<(), sqlx::Error> {
    if entities.is_empty() {
        return Ok(());
    }
    let mut ids = Vec::with_capacity(entities.len());
    let mut types = Vec::with_capacity(entities.len());
    let mut table_schemas = Vec::with_capacity(entities.len());
    let mut table_names = Vec::with_capacity(entities.len());
    let mut columns = Vec::with_capacity(entities.len());
    let mut key_types = Vec::with_capacity(entities.len());
    let mut op_schemas: Vec<Option<&str>> = Vec::with_capacity(entities.len());
    let mut ops = Vec::with_capacity(entities.len());
    let mut tenants: Vec<Option<&str>> = Vec::with_capacity(entities.len());
    for e in entities {
        ids.push(e.entity_id);
        types.push(e.type_name());
        table_schemas.push(e.table.schema.as_str());
        table_names.push(e.table.name.as_str());
        columns.push(e.record_id.name.as_str());
        key_types.push(e.record_id.cmp_type.as_str());
        match &e.record_id.operator {
            Some((op_schema, op)) => {
                op_schemas.push(Some(op_schema.as_str()));
                ops.push(op.as_str());
            }
            None => {
                op_schemas.push(None);
                ops.push("=");
            }
        }
        tenants.push(e.tenant.as_ref().map(|c| c.name.as_str()));
    }
    let registry = schema.table("retention_entities");
    // New types are inserted (a row another build is inserting is waited
    // for); a type whose key changed is updated. A row that already says
    // the same is neither written nor locked: a hold being written holds
    // that row's lock until its transaction ends (it moves the holds
    // version), and a build must not wait for it.
    sqlx::query(AssertSqlSafe(format!(
        "WITH u AS ( \
           SELECT * FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.uuid[]), \
                  pg_catalog.unnest($2::pg_catalog.text[]), pg_catalog.unnest($3::pg_catalog.text[]), \
                  pg_catalog.unnest($4::pg_catalog.text[]), pg_catalog.unnest($5::pg_catalog.text[]), \
                  pg_catalog.unnest($6::pg_catalog.text[]), pg_catalog.unnest($7::pg_catalog.text[]), \
                  pg_catalog.unnest($8::pg_catalog.text[]), pg_catalog.unnest($9::pg_catalog.text[])) \
             AS u(id, entity_type, table_schema, table_name, record_id_column, record_id_type, \
                  record_id_eq_schema, record_id_eq, tenant_column)), \
         inserted AS ( \
           INSERT INTO {registry} (retained_entity_id, entity_type, table_schema, table_name, \
                                   record_id_column, record_id_type, record_id_eq_schema, \
                                   record_id_eq, tenant_column, registered_at, holds_version) \
           SELECT u.id, u.entity_type, u.table_schema, u.table_name, u.record_id_column, \
                  u.record_id_type, u.record_id_eq_schema, u.record_id_eq, u.tenant_column, \
                  pg_catalog.statement_timestamp(), 0 \
           FROM u ON CONFLICT (retained_entity_id) DO NOTHING) \
         UPDATE {registry} AS r SET entity_type = u.entity_type, table_schema = u.table_schema, \
             table_name = u.table_name, record_id_column = u.record_id_column, \
             record_id_type = u.record_id_type, record_id_eq_schema = u.record_id_eq_schema, \
             record_id_eq = u.record_id_eq, tenant_column = u.tenant_column, \
             registered_at = pg_catalog.statement_timestamp() \
         FROM u \
         WHERE r.retained_entity_id = u.id \
           AND (r.entity_type, r.table_schema, r.table_name, r.record_id_column, r.record_id_type, \
                r.record_id_eq_schema, r.record_id_eq, r.tenant_column) \
               IS DISTINCT FROM \
               (u.entity_type, u.table_schema, u.table_name, u.record_id_column, u.record_id_type, \
                u.record_id_eq_schema, u.record_id_eq, u.tenant_column)"
    )))
    .bind(&ids)
    .bind(&types)
    .bind(&table_schemas)
    .bind(&table_names)
    .bind(&columns)
    .bind(&key_types)
    .bind(&op_schemas)
    .bind(&ops)
    .bind(&tenants)
    .execute(conn)
    .await?;
    Ok(())
}
