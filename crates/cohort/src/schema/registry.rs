//! The registry of retained types (`retention_entities`, migration 5).
//!
//! A hold written with plain SQL names its row by a record id as text, and
//! the trigger on `retention_holds` must read that text the way hold
//! creation does: through the type's key (its table, column, comparison
//! type and equality operator; see `catalog::equality`). The database does
//! not know the host's model, so [`register`] records it there when a
//! handle is built: one row per retained type, written only when it is
//! missing or changed.

use sqlx::PgConnection;
use uuid::Uuid;

use super::SchemaName;
use crate::model::resolved::ResolvedEntity;
use crate::sql::AssertSqlSafe;

/// One type's registry row, as stored (everything but the times and the
/// holds version).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Row {
    retained_entity_id: Uuid,
    entity_type: String,
    table_schema: String,
    table_name: String,
    record_id_column: String,
    record_id_type: String,
    record_id_eq_schema: Option<String>,
    record_id_eq: String,
    tenant_column: Option<String>,
}

impl Row {
    fn of(e: &ResolvedEntity) -> Row {
        let (eq_schema, eq) = match &e.record_id.operator {
            Some((schema, op)) => (Some(schema.clone()), op.clone()),
            None => (None, "=".to_owned()),
        };
        Row {
            retained_entity_id: e.entity_id,
            entity_type: e.type_name().to_owned(),
            table_schema: e.table.schema.as_str().to_owned(),
            table_name: e.table.name.as_str().to_owned(),
            record_id_column: e.record_id.name.as_str().to_owned(),
            record_id_type: e.record_id.cmp_type.clone(),
            record_id_eq_schema: eq_schema,
            record_id_eq: eq,
            tenant_column: e.tenant.as_ref().map(|c| c.name.as_str().to_owned()),
        }
    }
}

const COLUMNS: &str = "retained_entity_id, entity_type, table_schema, table_name, record_id_column, \
                       record_id_type, record_id_eq_schema, record_id_eq, tenant_column";

/// Records the key of every type in `entities` in `schema`'s registry.
///
/// The stored rows are read first, with a plain `SELECT` that never waits:
/// a hold being written keeps its type's row locked until its transaction
/// ends (it moves the type's holds version), and building a handle must not
/// wait for that. Only a type that is missing is inserted, and only one
/// whose key changed is updated; in the usual case (every type registered
/// as it is) nothing is written at all.
pub(crate) async fn register(
    conn: &mut PgConnection,
    schema: &SchemaName,
    entities: &[ResolvedEntity],
) -> Result<(), sqlx::Error> {
    if entities.is_empty() {
        return Ok(());
    }
    let registry = schema.table("retention_entities");
    let wanted: Vec<Row> = entities.iter().map(Row::of).collect();
    let ids: Vec<Uuid> = wanted.iter().map(|r| r.retained_entity_id).collect();
    type Stored = (
        Uuid,
        String,
        String,
        String,
        String,
        String,
        Option<String>,
        String,
        Option<String>,
    );
    let stored: Vec<Row> = crate::sql::query_as::<Stored>(AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM {registry} WHERE retained_entity_id = ANY ($1::pg_catalog.uuid[])"
    )))
    .bind(&ids)
    .fetch_all(&mut *conn)
    .await?
    .into_iter()
    .map(|r| Row {
        retained_entity_id: r.0,
        entity_type: r.1,
        table_schema: r.2,
        table_name: r.3,
        record_id_column: r.4,
        record_id_type: r.5,
        record_id_eq_schema: r.6,
        record_id_eq: r.7,
        tenant_column: r.8,
    })
    .collect();
    for row in &wanted {
        match stored
            .iter()
            .find(|s| s.retained_entity_id == row.retained_entity_id)
        {
            Some(same) if same == row => {}
            Some(_) => write(conn, &registry.to_string(), row, true).await?,
            None => write(conn, &registry.to_string(), row, false).await?,
        }
    }
    Ok(())
}

/// Inserts `row` (a concurrent build inserting the same type is waited for,
/// and its row kept), or updates the stored one.
async fn write(
    conn: &mut PgConnection,
    registry: &str,
    row: &Row,
    update: bool,
) -> Result<(), sqlx::Error> {
    let sql = if update {
        format!(
            "UPDATE {registry} SET entity_type = $2, table_schema = $3, table_name = $4, \
                 record_id_column = $5, record_id_type = $6, record_id_eq_schema = $7, \
                 record_id_eq = $8, tenant_column = $9, registered_at = pg_catalog.statement_timestamp() \
             WHERE retained_entity_id = $1"
        )
    } else {
        format!(
            "INSERT INTO {registry} ({COLUMNS}, registered_at, holds_version) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, pg_catalog.statement_timestamp(), 0) \
             ON CONFLICT (retained_entity_id) DO NOTHING"
        )
    };
    crate::sql::query(AssertSqlSafe(sql))
        .bind(row.retained_entity_id)
        .bind(&row.entity_type)
        .bind(&row.table_schema)
        .bind(&row.table_name)
        .bind(&row.record_id_column)
        .bind(&row.record_id_type)
        .bind(&row.record_id_eq_schema)
        .bind(&row.record_id_eq)
        .bind(&row.tenant_column)
        .execute(conn)
        .await?;
    Ok(())
}
