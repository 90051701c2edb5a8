//! Subject access (contract SA1): every row an erasure of the subject would
//! match, across the scope's retained types, streamed out as JSON Lines or
//! CSV, and the export recorded in `retention_subject_access`.

use std::io::Write;

use chrono::{DateTime, Utc};
use futures_util::TryStreamExt;
use serde::Serialize;
use sqlx::{Connection, Row};
use uuid::Uuid;

use super::batch::{Values, bind_values};
use super::erasure::{Subject, check_subject, subject_columns};
use super::statements::EntitySql;
use crate::engine::Engine;
use crate::error::Error;
use crate::evidence::{ExportFormat, csv_field};
use crate::holds::matter_set::MatterSet;
use crate::ledger::Ledger;
use crate::policy::{Scope, Strategy};
use crate::sql::{AssertSqlSafe, PgTime};

/// A data subject's access request (GDPR art. 15): who the subject is, who
/// asked for the export, and its format.
///
/// ```
/// use cohort::AccessRequest;
/// use cohort::evidence::ExportFormat;
/// let request = AccessRequest::new("ann@example.com", "dpo@example.com").format(ExportFormat::Csv);
/// assert_eq!(request.export_format(), ExportFormat::Csv);
/// ```
#[derive(Debug, Clone)]
pub struct AccessRequest {
    subject: Subject,
    requested_by: String,
    format: ExportFormat,
}

impl AccessRequest {
    /// Exports every row of `subject`, asked for by `requested_by` (a
    /// person or a ticket; recorded with the export), as JSON Lines.
    pub fn new(subject: impl Into<Subject>, requested_by: impl Into<String>) -> AccessRequest {
        AccessRequest {
            subject: subject.into(),
            requested_by: requested_by.into(),
            format: ExportFormat::JsonLines,
        }
    }

    /// Exports in `format` instead.
    pub fn format(mut self, format: ExportFormat) -> Self {
        self.format = format;
        self
    }

    /// The export's format.
    pub fn export_format(&self) -> ExportFormat {
        self.format
    }
}

/// What one type contributed to a subject access export.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct AccessType {
    /// The retained-entity id.
    pub entity_id: Uuid,
    /// The Rust type.
    pub entity_type: &'static str,
    /// The table, `schema.name`.
    pub table: String,
    /// Rows exported.
    pub rows: u64,
    /// Of those, rows a hold or matter covers (exported all the same:
    /// access is not erasure).
    pub held: u64,
}

/// What a subject access export wrote, as recorded in
/// `retention_subject_access`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct AccessExport {
    /// The export's id in `retention_subject_access`.
    pub access_id: Uuid,
    /// The logical time of the export (UTC, microseconds).
    pub now: DateTime<Utc>,
    /// Rows exported, all types.
    pub rows: u64,
    /// Held rows among them.
    pub held: u64,
    /// Per type with a subject column that accepts the subject, in model order.
    pub types: Vec<AccessType>,
}

impl Engine {
    /// The export of `request` in `scope` at `now`, into `out`.
    pub(crate) async fn run_subject_export<W: Write + ?Sized>(
        &self,
        scope: &Scope,
        now: DateTime<Utc>,
        request: AccessRequest,
        out: &mut W,
    ) -> Result<AccessExport, Error> {
        let subject = request.subject.as_str();
        check_subject(subject)?;
        if request.requested_by.trim().is_empty() {
            return Err(Error::InvalidRequester);
        }
        let Some(key) = self.subject_key.as_deref() else {
            return Err(Error::SubjectKeyMissing);
        };
        let mut conn = self.pool.acquire().await?.detach();
        let result = async {
            self.ensure_ready(&mut conn).await?;
            let parts = subject_columns(&mut conn, subject, &self.model.entities, scope).await?;
            // One snapshot across every type: the export is the subject's
            // data at one moment.
            let mut tx = conn
                .begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                .await?;
            crate::sql::query(crate::sql::PIN_SEARCH_PATH)
                .execute(&mut *tx)
                .await?;
            let io = |e: std::io::Error| Error::ExportWrite(e);
            let per_column = request.format == ExportFormat::Csv;
            if per_column {
                out.write_all(b"type,table,record_id,held,column,value\r\n")
                    .map_err(io)?;
            }
            let ledger = Ledger::new(&self.schema);
            let tenant = scope.tenant().map(|t| t.id);
            let mut types = Vec::with_capacity(parts.len());
            let mut line = String::new();
            for (e, columns) in parts {
                let table = e.table.unquoted();
                let statement =
                    EntitySql::subject_rows(e, &self.schema, &ledger, columns, per_column);
                let matters =
                    MatterSet::read_in(&mut tx, &self.schema, e, tenant, None, None).await?;
                let values = Values {
                    entity: e,
                    tenant,
                    cutoff: PgTime::NEG_INFINITY,
                    subject: Some(subject),
                    batch_size: self.options.batch_size,
                    summary: 0,
                    run: Uuid::nil(),
                    ledger_tenant: scope.ledger_tenant(),
                    strategy: Strategy::Exempt,
                    handlers: &[],
                    schema: &self.schema,
                    owner: None,
                    cache: false,
                    marker: None,
                    stage: None,
                    review: None,
                    event: None,
                };
                let mut counts = AccessType {
                    entity_id: e.entity_id,
                    entity_type: e.type_name(),
                    table: table.clone(),
                    rows: 0,
                    held: 0,
                };
                let mut last: Option<String> = None;
                let mut rows = bind_values(&statement, &values, &matters).fetch(&mut *tx);
                while let Some(row) = rows.try_next().await? {
                    let record_id: String = row.try_get("record_id")?;
                    let held: bool = row.try_get("held")?;
                    line.clear();
                    if per_column {
                        if last.as_deref() != Some(record_id.as_str()) {
                            counts.rows += 1;
                            counts.held += u64::from(held);
                        }
                        let column: String = row.try_get("column_name")?;
                        let value: Option<String> = row.try_get("value")?;
                        for (i, field) in [
                            e.type_name(),
                            table.as_str(),
                            record_id.as_str(),
                            if held { "true" } else { "false" },
                            column.as_str(),
                            value.as_deref().unwrap_or(""),
                        ]
                        .into_iter()
                        .enumerate()
                        {
                            if i > 0 {
                                line.push(',');
                            }
                            csv_field(&mut line, field);
                        }
                        line.push_str("\r\n");
                        last = Some(record_id);
                    } else {
                        counts.rows += 1;
                        counts.held += u64::from(held);
                        let text: String = row.try_get("row")?;
                        let object: serde_json::Value = serde_json::from_str(&text)
                            .map_err(|e| Error::ExportWrite(std::io::Error::other(e)))?;
                        let record = serde_json::json!({
                            "type": e.type_name(),
                            "table": table,
                            "record_id": record_id,
                            "held": held,
                            "row": object,
                        });
                        line.push_str(&record.to_string());
                        line.push('\n');
                    }
                    out.write_all(line.as_bytes()).map_err(io)?;
                }
                drop(rows);
                types.push(counts);
            }
            out.flush().map_err(io)?;
            tx.commit().await?;
            let rows: u64 = types.iter().map(|t| t.rows).sum();
            let held: u64 = types.iter().map(|t| t.held).sum();
            let access_id = Uuid::new_v4();
            let type_counts = serde_json::to_string(&types)
                .map_err(|e| Error::ExportWrite(std::io::Error::other(e)))?;
            let hmac = crate::evidence::subject_hmac_bytes(key, subject);
            crate::sql::txn::alone(&mut conn, async |conn| {
                crate::sql::query(AssertSqlSafe(format!(
                    "INSERT INTO {} (access_id, tenant_id, subject_hmac, requested_by, format, \
                                     logical_now, recorded_at, row_count, held_count, type_counts) \
                     VALUES ($1, $2, $3, $4, $5, $6, pg_catalog.clock_timestamp(), $7, $8, \
                             $9::pg_catalog.jsonb)",
                    self.schema.table("retention_subject_access")
                )))
                .bind(access_id)
                .bind(scope.ledger_tenant())
                .bind(hmac)
                .bind(request.requested_by.trim())
                .bind(match request.format {
                    ExportFormat::Csv => "csv",
                    _ => "jsonl",
                })
                .bind(now)
                .bind(i64::try_from(rows).unwrap_or(i64::MAX))
                .bind(i64::try_from(held).unwrap_or(i64::MAX))
                .bind(type_counts)
                .execute(conn)
                .await
            })
            .await?;
            Ok(AccessExport {
                access_id,
                now,
                rows,
                held,
                types,
            })
        }
        .await;
        super::sweep::close(conn).await;
        result
    }
}
