//! Exports (contract EV2): runs, summaries or row details of a time range,
//! and the decisions on disposition batches (DR3), as JSON Lines or CSV,
//! streamed row by row.

use std::io::Write;

use chrono::{DateTime, Utc};
use futures_util::TryStreamExt;
use sqlx::{PgConnection, Row};

use super::EvidenceError;
use crate::error::Error;
use crate::schema::SchemaName;
use crate::sql::AssertSqlSafe;

/// The output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ExportFormat {
    /// One JSON object per line (`\n`), keys in column order. Counts and
    /// sequence numbers are JSON numbers, flags booleans,
    /// NULL is `null`, everything else a string.
    JsonLines,
    /// RFC 4180 CSV with a header line: fields quoted when they hold a
    /// comma, a quote or a line break, lines ended by `\r\n`; NULL is an
    /// empty field. Values are exported as stored: a spreadsheet may read a
    /// value starting with `=` as a formula, so open exports as text.
    Csv,
}

/// Which records to export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ExportRecords {
    /// `sweep_run` rows.
    Runs,
    /// `sweep_run_entity_summary` rows.
    Summaries,
    /// `sweep_run_row_detail` rows.
    RowDetails,
    /// `retention_disposition_decisions` rows (contract DR3): every decision
    /// on a disposition batch *taken* in the range (by its `decided_at`,
    /// not by a run's start), in chain order, with its link.
    Decisions,
}

/// A half-open time range `[from, to)` of runs' start times: an export
/// holds the runs that started in it, and their summaries and row details.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeRange {
    /// The first instant included.
    pub from: DateTime<Utc>,
    /// The first instant excluded.
    pub to: DateTime<Utc>,
}

impl TimeRange {
    /// `[from, to)`.
    pub fn new(from: DateTime<Utc>, to: DateTime<Utc>) -> TimeRange {
        TimeRange { from, to }
    }

    /// Every run: from PostgreSQL's earliest timestamp (4713 BC) to the
    /// latest chrono can hold.
    pub fn all() -> TimeRange {
        let from = chrono::NaiveDate::from_ymd_opt(-4712, 1, 1)
            .and_then(|d| d.and_hms_opt(0, 0, 0))
            .map(|d| d.and_utc())
            .unwrap_or(DateTime::<Utc>::MIN_UTC);
        TimeRange {
            from,
            to: DateTime::<Utc>::MAX_UTC,
        }
    }
}

/// What an export wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExportSummary {
    /// Records written (not counting a CSV header).
    pub records: u64,
}

/// How a column is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    Int,
    Bool,
}

/// A column: its name, how it is read as text in SQL, how it is written.
type Column = (&'static str, Kind);

const RUN_COLUMNS: &[Column] = &[
    ("run_id", Kind::Text),
    ("run_kind", Kind::Text),
    ("trigger", Kind::Text),
    ("dry_run", Kind::Bool),
    ("tenant_id", Kind::Text),
    ("logical_now", Kind::Text),
    ("status", Kind::Text),
    ("started_at", Kind::Text),
    ("settled_at", Kind::Text),
    ("error", Kind::Text),
    ("chain_seq", Kind::Int),
    ("chain_prev", Kind::Text),
    ("chain_hash", Kind::Text),
    ("chain_summaries", Kind::Int),
    ("chain_summaries_head", Kind::Text),
    ("chain_details", Kind::Int),
    ("chain_details_head", Kind::Text),
];

const SUMMARY_COLUMNS: &[Column] = &[
    ("summary_id", Kind::Int),
    ("run_id", Kind::Text),
    ("retained_entity_id", Kind::Text),
    ("entity_type", Kind::Text),
    ("category", Kind::Text),
    ("tenant_id", Kind::Text),
    ("strategy", Kind::Text),
    ("status", Kind::Text),
    ("affected_count", Kind::Int),
    ("held_count", Kind::Int),
    ("skipped_count", Kind::Int),
    ("null_anchor_count", Kind::Int),
    ("legal_minimum_count", Kind::Int),
    ("applied_period", Kind::Text),
    ("cutoff", Kind::Text),
    ("rule_source", Kind::Text),
    ("rule_reason", Kind::Text),
    ("error", Kind::Text),
    ("updated_at", Kind::Text),
    ("chain_seq", Kind::Int),
    ("chain_prev", Kind::Text),
    ("chain_hash", Kind::Text),
];

const DETAIL_COLUMNS: &[Column] = &[
    ("detail_id", Kind::Int),
    ("run_id", Kind::Text),
    ("retained_entity_id", Kind::Text),
    ("entity_type", Kind::Text),
    ("record_id", Kind::Text),
    ("tenant_id", Kind::Text),
    ("action", Kind::Text),
    ("created_at", Kind::Text),
    ("chain_payload", Kind::Text),
    ("chain_seq", Kind::Int),
    ("chain_prev", Kind::Text),
    ("chain_hash", Kind::Text),
];

const DECISION_COLUMNS: &[Column] = &[
    ("chain_seq", Kind::Int),
    ("chain_prev", Kind::Text),
    ("chain_hash", Kind::Text),
    ("decision_id", Kind::Text),
    ("batch_id", Kind::Text),
    ("decision", Kind::Text),
    ("decided_by", Kind::Text),
    ("automatic", Kind::Bool),
    ("retained_entity_id", Kind::Text),
    ("tenant_id", Kind::Text),
    ("stage", Kind::Int),
    ("rule_hash", Kind::Text),
    ("approvers_required", Kind::Int),
    ("reason", Kind::Text),
    ("keep_until", Kind::Text),
    ("run_id", Kind::Text),
    ("row_count", Kind::Int),
    ("changed_count", Kind::Int),
    ("held_count", Kind::Int),
    ("left_count", Kind::Int),
    ("ineligible_count", Kind::Int),
    ("decided_at", Kind::Text),
];

/// Timestamp and hash columns: read as fixed text, never through the
/// session's `DateStyle` or `TimeZone`.
fn as_text(prefix: &str, name: &str) -> String {
    let c = format!("{prefix}.{name}");
    if name.ends_with("_at") || name == "logical_now" || name == "cutoff" || name == "keep_until" {
        format!(
            "CASE WHEN {c} IS NULL THEN NULL WHEN pg_catalog.isfinite({c}) THEN \
               pg_catalog.to_char({c} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') \
             WHEN {c} OPERATOR(pg_catalog.>) 'epoch'::pg_catalog.timestamptz THEN 'infinity' \
             ELSE '-infinity' END"
        )
    } else if name == "chain_prev"
        || name == "chain_payload"
        || name.ends_with("_hash")
        || name.ends_with("_head")
    {
        format!("pg_catalog.encode({c}, 'hex')")
    } else {
        format!("({c})::pg_catalog.text")
    }
}

impl ExportRecords {
    fn columns(self) -> &'static [Column] {
        match self {
            ExportRecords::Runs => RUN_COLUMNS,
            ExportRecords::Summaries => SUMMARY_COLUMNS,
            ExportRecords::RowDetails => DETAIL_COLUMNS,
            ExportRecords::Decisions => DECISION_COLUMNS,
        }
    }

    /// The query: every column as text, in a stable order. `$1`, `$2`: the range.
    fn sql(self, schema: &SchemaName) -> String {
        if self == ExportRecords::Decisions {
            let columns: Vec<String> = self
                .columns()
                .iter()
                .enumerate()
                .map(|(i, (name, _))| format!("{} AS c{i}", as_text("x", name)))
                .collect();
            return format!(
                "SELECT {} FROM {} AS x \
                 WHERE x.decided_at OPERATOR(pg_catalog.>=) $1 AND x.decided_at OPERATOR(pg_catalog.<) $2 \
                 ORDER BY x.chain_seq",
                columns.join(", "),
                schema.table("retention_disposition_decisions")
            );
        }
        let runs = schema.table("sweep_run");
        let (table, order) = match self {
            ExportRecords::Runs => (None, "r.started_at, r.run_id"),
            ExportRecords::Summaries => (
                Some(schema.table("sweep_run_entity_summary")),
                "r.started_at, r.run_id, x.summary_id",
            ),
            ExportRecords::RowDetails | ExportRecords::Decisions => (
                Some(schema.table("sweep_run_row_detail")),
                "r.started_at, r.run_id, x.chain_seq, x.detail_id",
            ),
        };
        let prefix = if table.is_some() { "x" } else { "r" };
        let columns: Vec<String> = self
            .columns()
            .iter()
            .enumerate()
            .map(|(i, (name, _))| format!("{} AS c{i}", as_text(prefix, name)))
            .collect();
        let join = table
            .map(|t| format!("JOIN {t} AS x ON x.run_id OPERATOR(pg_catalog.=) r.run_id"))
            .unwrap_or_default();
        format!(
            "SELECT {} FROM {runs} AS r {join} \
             WHERE r.started_at OPERATOR(pg_catalog.>=) $1 AND r.started_at OPERATOR(pg_catalog.<) $2 \
             ORDER BY {order}",
            columns.join(", ")
        )
    }
}

/// Streams `records` of the runs that started in `range` to `out`, one
/// record at a time: memory stays flat whatever the number of rows (the
/// rows come through one server-side query, fetched as a stream, and each
/// is written before the next is read; wrap `out` in a
/// [`std::io::BufWriter`] for files and sockets).
///
/// It reads in one `REPEATABLE READ READ ONLY` transaction of its own (a
/// savepoint when `conn` is already in a transaction), so one export is
/// one consistent state. Runs, summaries and row details carry their chain
/// columns (positions and hashes, hex), so an export can be checked against
/// a later [`super::verify`].
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), cohort::Error> {
/// use cohort::evidence::{ExportFormat, ExportRecords, TimeRange, export};
/// let mut conn = pool.acquire().await?;
/// let schema = cohort::schema::SchemaName::public();
/// let file = std::fs::File::create("details.jsonl").map_err(cohort::evidence::EvidenceError::from)?;
/// let mut out = std::io::BufWriter::new(file);
/// let written = export(&mut conn, &schema, ExportRecords::RowDetails, TimeRange::all(),
///                      ExportFormat::JsonLines, &mut out).await?;
/// println!("{} row details", written.records);
/// # Ok(()) }
/// ```
pub async fn export<W: Write + ?Sized>(
    conn: &mut PgConnection,
    schema: &SchemaName,
    records: ExportRecords,
    range: TimeRange,
    format: ExportFormat,
    out: &mut W,
) -> Result<ExportSummary, Error> {
    super::ensure_ready(conn, schema).await?;
    let mut tx = super::snapshot(conn).await?;
    let columns = records.columns();
    let io = |e: std::io::Error| Error::from(EvidenceError::Io(e));
    if format == ExportFormat::Csv {
        let header: Vec<&str> = columns.iter().map(|(n, _)| *n).collect();
        out.write_all(header.join(",").as_bytes()).map_err(io)?;
        out.write_all(b"\r\n").map_err(io)?;
    }
    let mut written = 0u64;
    let mut line = String::new();
    {
        let mut rows = crate::sql::query(AssertSqlSafe(records.sql(schema)))
            .bind(range.from)
            .bind(range.to)
            .fetch(&mut *tx);
        while let Some(row) = rows.try_next().await? {
            line.clear();
            match format {
                ExportFormat::JsonLines => {
                    let mut object = serde_json::Map::with_capacity(columns.len());
                    for (i, (name, kind)) in columns.iter().enumerate() {
                        let value: Option<String> = row.try_get(i)?;
                        object.insert((*name).to_owned(), json_value(value, *kind));
                    }
                    line.push_str(&serde_json::Value::Object(object).to_string());
                    line.push('\n');
                }
                ExportFormat::Csv => {
                    for i in 0..columns.len() {
                        if i > 0 {
                            line.push(',');
                        }
                        let value: Option<String> = row.try_get(i)?;
                        csv_field(&mut line, value.as_deref().unwrap_or(""));
                    }
                    line.push_str("\r\n");
                }
            }
            out.write_all(line.as_bytes()).map_err(io)?;
            written += 1;
        }
    }
    out.flush().map_err(io)?;
    tx.commit().await?;
    Ok(ExportSummary { records: written })
}

fn json_value(value: Option<String>, kind: Kind) -> serde_json::Value {
    let Some(v) = value else {
        return serde_json::Value::Null;
    };
    match kind {
        Kind::Text => serde_json::Value::String(v),
        Kind::Int => v
            .parse::<i64>()
            .map(serde_json::Value::from)
            .unwrap_or(serde_json::Value::String(v)),
        Kind::Bool => serde_json::Value::Bool(v == "true"),
    }
}

/// Appends `v` as one CSV field (RFC 4180).
pub(crate) fn csv_field(out: &mut String, v: &str) {
    if v.contains([',', '"', '\n', '\r']) {
        out.push('"');
        out.push_str(&v.replace('"', "\"\""));
        out.push('"');
    } else {
        out.push_str(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields_are_quoted_only_when_needed() {
        let mut s = String::new();
        csv_field(&mut s, "plain");
        s.push('|');
        csv_field(&mut s, "a,b");
        s.push('|');
        csv_field(&mut s, "say \"hi\"\r\n");
        assert_eq!(s, "plain|\"a,b\"|\"say \"\"hi\"\"\r\n\"");
    }

    #[test]
    fn json_values_keep_their_kinds() {
        assert_eq!(json_value(None, Kind::Int), serde_json::Value::Null);
        assert_eq!(
            json_value(Some("42".into()), Kind::Int),
            serde_json::json!(42)
        );
        assert_eq!(
            json_value(Some("true".into()), Kind::Bool),
            serde_json::json!(true)
        );
    }

    #[test]
    fn every_column_is_one_of_its_table() {
        let schema = SchemaName::public();
        for r in [
            ExportRecords::Runs,
            ExportRecords::Summaries,
            ExportRecords::RowDetails,
            ExportRecords::Decisions,
        ] {
            let sql = r.sql(&schema);
            for (name, _) in r.columns() {
                assert!(sql.contains(&format!(".{name}")), "{name}");
            }
        }
    }
}
